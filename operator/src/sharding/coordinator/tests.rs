use super::*;
use proptest::prelude::*;

fn shards(n: u32) -> Shards {
    Shards::new(n).unwrap()
}

/// Replica ids as a Deployment names its Pods: one prefix, a 5-character suffix.
fn pod_names(n: usize) -> Vec<String> {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    (0..n)
        .map(|k| {
            let mut h = mix64(k as u64 + 1);
            let suffix: String = (0..5)
                .map(|_| {
                    let c = ALPHABET[(h % ALPHABET.len() as u64) as usize] as char;
                    h /= ALPHABET.len() as u64;
                    c
                })
                .collect();
            format!("dco-operator-6c4f9d7b8-{suffix}")
        })
        .collect()
}

// ---------------------------------------------------------------- the assignment rule

type Rule = fn(&[String], Shards, &[Option<usize>]) -> Vec<usize>;

/// The plain rule, for comparison: shard i to the member at sorted rank i mod N.
fn modulo(members: &[String], s: Shards, _held: &[Option<usize>]) -> Vec<usize> {
    s.all().map(|i| i as usize % members.len()).collect()
}

/// The rule without its stickiness (every assignment computed afresh), for comparison.
fn fresh(members: &[String], s: Shards, _held: &[Option<usize>]) -> Vec<usize> {
    assign(members, s, &[])
}

/// Owner names per shard under `rule` for the sorted `members`, the shards held as in
/// `before` (owner names; a name not among `members` holds nothing).
fn owners(rule: Rule, members: &[String], s: Shards, before: Option<&[String]>) -> Vec<String> {
    let mut sorted = members.to_vec();
    sorted.sort();
    let held: Vec<Option<usize>> = match before {
        Some(b) => b.iter().map(|o| sorted.iter().position(|m| m == o)).collect(),
        None => vec![None; s.count() as usize],
    };
    rule(&sorted, s, &held).into_iter().map(|j| sorted[j].clone()).collect()
}

fn moved(a: &[String], b: &[String]) -> usize {
    a.iter().zip(b).filter(|(x, y)| x != y).count()
}

/// Loads of `members` under `owners`.
fn loads(owners: &[String], members: &[String]) -> Vec<usize> {
    members.iter().map(|m| owners.iter().filter(|o| *o == m).count()).collect()
}

/// The fewest shards a join can move: the newcomer's fair share floor(S/(N+1)), or more when
/// old members hold more than the new bound ceil(S/(N+1)) and must shed the excess.
fn ideal_join(before: &[String], old: &[String], s: u32) -> usize {
    let n = old.len() + 1;
    let cap = (s as usize).div_ceil(n);
    let excess: usize = loads(before, old).into_iter().map(|l| l.saturating_sub(cap)).sum();
    excess.max(s as usize / n)
}

#[derive(Default)]
struct Moves {
    worst: f64,
    sum: f64,
    count: usize,
}

impl Moves {
    fn add(&mut self, moved: usize, ideal: usize) {
        // A leaver holding nothing has ideal 0: count any move against 1.
        let r = moved as f64 / ideal.max(1) as f64;
        self.worst = self.worst.max(r);
        self.sum += r;
        self.count += 1;
    }
    fn mean(&self) -> f64 {
        self.sum / self.count.max(1) as f64
    }
}

#[derive(Default)]
struct Row {
    max_over_bound: i64,
    join: Moves,
    leave: Moves,
}

/// Every N in `range`: max load against ceil(S/N), each join N→N+1 (the next pod name) and
/// every member leaving N→N−1 in turn.
fn simulate(rule: Rule, s: u32, n: usize, names: &[String]) -> Row {
    let sh = shards(s);
    let members = &names[..n];
    let before = owners(rule, members, sh, None);
    let mut row = Row::default();
    let max = loads(&before, members).into_iter().max().unwrap() as i64;
    row.max_over_bound = max - (s as usize).div_ceil(n) as i64;
    assert!(before.iter().all(|o| members.contains(o)), "every shard has a live owner");
    if n < names.len() {
        let after = owners(rule, &names[..=n], sh, Some(&before));
        row.join.add(moved(&before, &after), ideal_join(&before, members, s));
    }
    if n > 1 {
        for k in 0..n {
            let rest: Vec<String> = members.iter().filter(|m| **m != members[k]).cloned().collect();
            let after = owners(rule, &rest, sh, Some(&before));
            let held = before.iter().filter(|o| **o == members[k]).count();
            row.leave.add(moved(&before, &after), held);
        }
    }
    row
}

#[test]
fn assignment_rule_is_balanced_and_moves_little() {
    // Three sets of replica ids, so the bounds hold for more than one draw of scores.
    let sets: Vec<Vec<String>> =
        (0..3).map(|set| pod_names(17 + 17 * set).into_iter().skip(17 * set).collect()).collect();
    println!("\nrule     S   N  max-ceil  join worst  join mean  leave worst  leave mean  (moved / ideal)");
    for s in [32u32, 64] {
        for (name, rule) in [("rule", assign as Rule), ("fresh", fresh as Rule), ("i mod N", modulo as Rule)]
        {
            let mut all = Row::default();
            for n in 1..=16 {
                let mut row = Row::default();
                for names in &sets {
                    let r = simulate(rule, s, n, names);
                    row.max_over_bound = row.max_over_bound.max(r.max_over_bound);
                    for (into, from) in [(&mut row.join, &r.join), (&mut row.leave, &r.leave)] {
                        into.worst = into.worst.max(from.worst);
                        into.sum += from.sum;
                        into.count += from.count;
                    }
                }
                println!(
                    "{name:8} {s:2} {n:3} {:9} {:11.2} {:10.2} {:12.2} {:11.2}",
                    row.max_over_bound,
                    row.join.worst,
                    row.join.mean(),
                    row.leave.worst,
                    row.leave.mean()
                );
                all.max_over_bound = all.max_over_bound.max(row.max_over_bound);
                for (into, from) in [(&mut all.join, &row.join), (&mut all.leave, &row.leave)] {
                    into.worst = into.worst.max(from.worst);
                    into.sum += from.sum;
                    into.count += from.count;
                }
            }
            println!(
                "{name:8} {s:2} all {:9} {:11.2} {:10.2} {:12.2} {:11.2}",
                all.max_over_bound,
                all.join.worst,
                all.join.mean(),
                all.leave.worst,
                all.leave.mean()
            );
            if name == "rule" {
                // The promise (docs/performance.md): never above ceil(S/N); a join moves the
                // newcomer's share and no more, a leave exactly the leaver's shards: ≤ 1× the
                // ideal, at worst.
                assert!(all.max_over_bound <= 0, "S={s}: a member owns more than ceil(S/N)");
                assert!(all.join.worst <= 1.0, "S={s}: a join moves more than the minimum");
                assert!(all.leave.worst <= 1.0, "S={s}: a leave moves more than the leaver's shards");
            }
        }
    }
}

#[test]
fn assignment_is_total_and_the_same_everywhere() {
    let names = pod_names(20);
    for s in [1u32, 7, 32, 64, 100] {
        for n in 1..=20 {
            let mut m = names[..n].to_vec();
            m.sort();
            let a = assign(&m, shards(s), &[]);
            assert_eq!(a.len(), s as usize);
            assert!(a.iter().all(|j| *j < n), "S={s} N={n}: every shard has an owner");
            assert_eq!(a, assign(&m, shards(s), &[]), "deterministic");
            let loads: Vec<usize> = (0..n).map(|j| a.iter().filter(|o| **o == j).count()).collect();
            let (min, max) = (loads.iter().min().unwrap(), loads.iter().max().unwrap());
            assert!(*max <= (s as usize).div_ceil(n), "S={s} N={n}: max {max}");
            assert!(*min >= s as usize / n, "S={s} N={n}: min {min}: every member owns floor(S/N) or more");
        }
    }
    assert!(assign(&[], shards(4), &[]).is_empty());
}

// ---------------------------------------------------------------- the decisions

const D: SignedDuration = SignedDuration::from_secs(30);
const I: SignedDuration = SignedDuration::from_secs(10);

fn settings(s: u32) -> CoordinatorSettings {
    CoordinatorSettings::new(shards(s), D, I)
}

fn t0() -> Timestamp {
    Timestamp::from_second(1_800_000_000).unwrap()
}

fn secs(n: i64) -> SignedDuration {
    SignedDuration::from_secs(n)
}

fn member(id: &str, renewed: Option<Timestamp>) -> MemberLease {
    MemberLease { id: id.into(), renewed, joined: None, resource_version: format!("m-{id}") }
}

/// The apiserver's side of the Leases: resourceVersion-guarded writes, as the I/O part
/// will issue them.
#[derive(Clone, Debug, Default)]
struct Store {
    /// Each member Lease's renewal and resourceVersion.
    members: BTreeMap<String, (Timestamp, String)>,
    /// When each member Lease was created.
    joined: BTreeMap<String, Timestamp>,
    shards: BTreeMap<u32, ShardLease>,
    rv: u64,
}

impl Store {
    fn member_leases(&self) -> Vec<MemberLease> {
        self.members
            .iter()
            .map(|(id, (r, rv))| MemberLease {
                id: id.clone(),
                renewed: Some(*r),
                joined: self.joined.get(id).copied(),
                resource_version: rv.clone(),
            })
            .collect()
    }

    fn shard_leases(&self) -> Vec<ShardLease> {
        self.shards.values().cloned().collect()
    }

    fn next_rv(&mut self) -> String {
        self.rv += 1;
        self.rv.to_string()
    }

    /// Carry out one action for `me` at `now`; false on a conflict.
    fn apply(&mut self, me: &str, now: Timestamp, action: &LeaseAction) -> bool {
        let (shard, rv, holder) = match action {
            LeaseAction::RenewMember => {
                let rv = self.next_rv();
                self.members.insert(me.to_string(), (now, rv));
                self.joined.entry(me.to_string()).or_insert(now);
                return true;
            }
            LeaseAction::DeleteMember { id, resource_version } => {
                if self.members.get(id).map(|(_, rv)| rv) != Some(resource_version) {
                    return false;
                }
                self.members.remove(id);
                self.joined.remove(id);
                return true;
            }
            LeaseAction::Take { shard, resource_version } => (*shard, resource_version.clone(), Some(me)),
            LeaseAction::Renew { shard, resource_version } => {
                (*shard, Some(resource_version.clone()), Some(me))
            }
            LeaseAction::Free { shard, resource_version } => (*shard, Some(resource_version.clone()), None),
        };
        let current = self.shards.get(&shard).map(|l| l.resource_version.clone());
        if current != rv {
            return false;
        }
        let resource_version = self.next_rv();
        self.shards.insert(
            shard,
            ShardLease {
                index: shard,
                holder: holder.map(str::to_string),
                renewed: Some(now),
                duration: D,
                resource_version,
            },
        );
        true
    }
}

/// One replica of the model: what the I/O part will keep between ticks.
#[derive(Clone, Debug, Default)]
struct Replica {
    id: String,
    last_renewal: Option<Timestamp>,
    owned: ShardOwnership,
    /// The last view read, for ticks over a stale view.
    seen: Option<(Vec<MemberLease>, Vec<ShardLease>)>,
}

impl Replica {
    fn new(id: &str) -> Self {
        Replica { id: id.to_string(), ..Replica::default() }
    }

    /// Read (fresh, or the last view when `stale`), decide, write (each write fails when
    /// `partitioned`), then derive the gate's set from what it read and what its successful
    /// writes returned, as the I/O part will.
    fn tick(
        &mut self,
        s: &CoordinatorSettings,
        store: &mut Store,
        now: Timestamp,
        stale: bool,
        partitioned: bool,
    ) -> Tick {
        if !stale || self.seen.is_none() {
            self.seen = Some((store.member_leases(), store.shard_leases()));
        }
        let (members, leases) = self.seen.clone().unwrap();
        let view = View {
            now,
            me: &self.id,
            last_renewal: self.last_renewal,
            members: &members,
            shard_leases: &leases,
        };
        let t = tick(s, &view);
        let mut mine = leases.clone();
        for a in &t.actions {
            if partitioned {
                continue;
            }
            if !store.apply(&self.id, now, a) {
                // A conflict: another replica wrote the Lease since it was read; what was read
                // no longer counts (leases.rs `tick`, `lost`).
                if let LeaseAction::Take { shard, .. }
                | LeaseAction::Renew { shard, .. }
                | LeaseAction::Free { shard, .. } = a
                {
                    mine.retain(|l| l.index != *shard);
                }
                continue;
            }
            match a {
                LeaseAction::RenewMember => self.last_renewal = Some(now),
                LeaseAction::Take { shard, .. }
                | LeaseAction::Renew { shard, .. }
                | LeaseAction::Free { shard, .. } => {
                    mine.retain(|l| l.index != *shard);
                    mine.push(store.shards[shard].clone());
                }
                LeaseAction::DeleteMember { .. } => {}
            }
        }
        self.owned = ShardOwnership::of(s, &self.id, self.last_renewal, &mine, &t.wanted);
        // What it knows now: what it read, and what its own writes returned.
        self.seen = Some((members, mine));
        t
    }
}

fn takes(t: &Tick) -> BTreeSet<u32> {
    t.actions
        .iter()
        .filter_map(|a| if let LeaseAction::Take { shard, .. } = a { Some(*shard) } else { None })
        .collect()
}

fn frees(t: &Tick) -> BTreeSet<u32> {
    t.actions
        .iter()
        .filter_map(|a| if let LeaseAction::Free { shard, .. } = a { Some(*shard) } else { None })
        .collect()
}

fn all(s: u32) -> BTreeSet<u32> {
    (0..s).collect()
}

#[test]
fn renew_deadline_is_two_thirds_of_the_duration() {
    let s = settings(32);
    assert_eq!(s.renew_deadline, secs(20));
    assert!(s.renew_interval < s.renew_deadline && s.renew_deadline < s.lease_duration);
    assert_eq!(s.check(), Ok(()));
    assert!(CoordinatorSettings::new(shards(1), D, secs(20)).check().is_err(), "interval at the deadline");
    assert!(CoordinatorSettings::new(shards(1), D, SignedDuration::ZERO).check().is_err());
}

#[test]
fn fresh_start_one_member_takes_every_shard() {
    let s = settings(8);
    let mut store = Store::default();
    let mut a = Replica::new("a");
    let t = a.tick(&s, &mut store, t0(), false, false);
    assert_eq!(t.live, vec!["a"], "itself is live before its Lease exists");
    assert_eq!(t.actions[0], LeaseAction::RenewMember);
    assert_eq!(takes(&t), all(8));
    assert!(t.actions.iter().all(|a| !matches!(a, LeaseAction::Take { resource_version: Some(_), .. })));
    assert!(t.owned.at(t0()).is_empty(), "nothing was held before the writes");
    assert_eq!(a.owned.at(t0()), all(8), "the takes count once they succeed");
    // Next tick: renewals only.
    let t = a.tick(&s, &mut store, t0() + I, false, false);
    assert!(takes(&t).is_empty());
    assert_eq!(t.actions.iter().filter(|a| matches!(a, LeaseAction::Renew { .. })).count(), 8);
    assert_eq!(a.owned.at(t0() + I), all(8));
}

#[test]
fn join_old_owner_frees_then_newcomer_takes() {
    let s = settings(16);
    let mut store = Store::default();
    let mut a = Replica::new("a");
    a.tick(&s, &mut store, t0(), false, false);
    let mut b = Replica::new("b");
    // b's first tick: it joins, and wants nothing until it has been a member an interval.
    let tb = b.tick(&s, &mut store, t0() + secs(1), false, false);
    assert_eq!(tb.live, vec!["a", "b"]);
    assert!(tb.wanted.is_empty() && takes(&tb).is_empty());
    // An interval later it wants its share, but a holds it unexpired: it waits.
    let now = t0() + secs(1) + I;
    let tb = b.tick(&s, &mut store, now, false, false);
    assert!(!tb.wanted.is_empty() && tb.wanted.len() <= 8);
    assert!(takes(&tb).is_empty(), "no take while the holder is live");
    assert!(b.owned.at(now).is_empty());
    // a's tick: frees exactly what b wants, and stops treating it as its own at once.
    let ta = a.tick(&s, &mut store, now, false, false);
    assert_eq!(frees(&ta), tb.wanted);
    assert_eq!(ta.owned.at(now), &all(16) - &tb.wanted, "freed shards leave the gate before the write");
    assert_eq!(a.owned.at(now), &all(16) - &tb.wanted);
    // b's next tick takes them (free now), and only them.
    let now = now + secs(1);
    let tb = b.tick(&s, &mut store, now, false, false);
    assert_eq!(takes(&tb), tb.wanted);
    assert_eq!(b.owned.at(now), tb.wanted);
    assert!(a.owned.at(now).is_disjoint(&b.owned.at(now)));
}

/// Two replicas that join a second apart (a scale from 1 to 3) are divided with in one step:
/// the old owner frees nothing until both have been members for an interval, and then
/// exactly the newcomers' shares move, each shard once.
#[test]
fn joins_close_together_move_each_shard_once() {
    let s = settings(32);
    let mut store = Store::default();
    let mut a = Replica::new("a");
    a.tick(&s, &mut store, t0(), false, false);
    // a is long settled when b and c join, a second apart.
    let base = t0() + secs(100);
    a.tick(&s, &mut store, base, false, false);
    let (mut b, mut c) = (Replica::new("b"), Replica::new("c"));
    let mut moves = 0usize;
    let mut frees_total = 0usize;
    let mut first_take = None;
    for k in 0..60 {
        let now = base + secs(1) + SignedDuration::from_millis(500 * k);
        for r in [&mut b, &mut c, &mut a] {
            if r.id == "c" && k < 2 {
                continue; // c starts a second after b
            }
            let t = r.tick(&s, &mut store, now, false, false);
            moves += takes(&t).len();
            frees_total += frees(&t).len();
            if !takes(&t).is_empty() && first_take.is_none() {
                first_take = Some(now);
            }
        }
    }
    let loads: Vec<usize> = ["a", "b", "c"]
        .iter()
        .map(|id| store.shards.values().filter(|l| l.holder.as_deref() == Some(*id)).count())
        .collect();
    assert_eq!(loads.iter().sum::<usize>(), 32);
    assert!(loads.iter().all(|l| (10..=11).contains(l)), "balanced: {loads:?}");
    assert_eq!(moves, 32 - loads[0], "each moved shard moved once: {moves} takes, a kept {}", loads[0]);
    assert_eq!(frees_total, moves);
    // Nothing moved before the later joiner had been a member for an interval.
    assert!(first_take.is_some_and(|t| t >= base + secs(2) + I), "first take at {first_take:?}");
}

/// A fresh start (no holders, every member new) divides at once; a lone joiner among
/// settled holders gets its share one interval after it joined.
#[test]
fn fresh_starts_divide_at_once_and_a_lone_joiner_waits_one_interval() {
    let s = settings(8);
    let mut store = Store::default();
    let (mut a, mut b) = (Replica::new("a"), Replica::new("b"));
    a.tick(&s, &mut store, t0(), false, false);
    let t = b.tick(&s, &mut store, t0() + secs(1), false, false);
    assert_eq!(t.live, vec!["a", "b"]);
    // b joined while a holds everything: b waits, and says when to look again.
    assert!(takes(&t).is_empty());
    assert!(t.wake_at.is_some_and(|w| w <= t0() + secs(1) + I), "{t:?}");
    let ta = a.tick(&s, &mut store, t0() + secs(2), false, false);
    assert!(frees(&ta).is_empty(), "a keeps its shards while b is joining");
    let ta = a.tick(&s, &mut store, t0() + secs(1) + I, false, false);
    assert_eq!(frees(&ta).len(), 4);
    let tb = b.tick(&s, &mut store, t0() + secs(2) + I, false, false);
    assert_eq!(takes(&tb), frees(&ta));
}

#[test]
fn crash_expired_shards_are_taken_after_the_duration() {
    let s = settings(8);
    let mut store = Store::default();
    let (mut a, mut b) = (Replica::new("a"), Replica::new("b"));
    a.tick(&s, &mut store, t0(), false, false);
    b.tick(&s, &mut store, t0(), false, false);
    a.tick(&s, &mut store, t0() + secs(1), false, false);
    b.tick(&s, &mut store, t0() + secs(2), false, false);
    let held_by_a = a.owned.at(t0() + secs(2));
    assert!(!held_by_a.is_empty() && held_by_a.is_disjoint(&b.owned.at(t0() + secs(2))));
    // a crashes after its tick at t0+1s (its Leases renewed then). b ticks every I.
    let renewed = t0() + secs(1);
    let mut now = t0() + secs(2);
    loop {
        now += I;
        let t = b.tick(&s, &mut store, now, false, false);
        if now < renewed + D {
            assert!(takes(&t).is_empty(), "{now}: a's Leases have not expired");
        } else {
            assert_eq!(t.live, vec!["b"], "a's member Lease expired as well");
            assert_eq!(takes(&t), held_by_a, "taken at the first tick after expiry");
            assert_eq!(b.owned.at(now), all(8));
            assert!(now < renewed + D + I, "within duration + renew interval");
            break;
        }
    }
}

#[test]
fn pause_owned_set_empties_at_the_renew_deadline_before_anyone_may_take() {
    let s = settings(4);
    let mut store = Store::default();
    let mut a = Replica::new("a");
    a.tick(&s, &mut store, t0(), false, false);
    assert_eq!(a.owned.at(t0() + secs(19)), all(4));
    // a is paused: no tick. Its gate empties by the clock alone at the deadline (20 s) ...
    assert!(a.owned.at(t0() + secs(20)).is_empty());
    assert_eq!(a.owned.next_expiry(), Some(t0() + secs(20)));
    // ... while its Leases are still held and unexpired: nobody may take them before 30 s.
    let mut b = Replica::new("b");
    let t = b.tick(&s, &mut store, t0() + secs(29), false, false);
    assert!(takes(&t).is_empty());
    let t = b.tick(&s, &mut store, t0() + secs(30), false, false);
    assert_eq!(takes(&t), all(4));
    // a resumes with its old view: its renewals conflict, its gate stays empty, and what it
    // then sees makes it want nothing b holds live.
    let t = a.tick(&s, &mut store, t0() + secs(31), true, false);
    assert_eq!(t.actions.iter().filter(|x| matches!(x, LeaseAction::Renew { .. })).count(), 4);
    assert!(a.owned.at(t0() + secs(31)).is_empty(), "renewals over a stale view conflict");
    let t = a.tick(&s, &mut store, t0() + secs(32), false, false);
    assert!(takes(&t).iter().all(|i| !b.owned.owns(*i, t0() + secs(32))));
    assert!(a.owned.at(t0() + secs(32)).is_empty());
}

#[test]
fn a_tick_is_due_when_a_lease_that_holds_this_replica_back_expires() {
    let s = settings(4);
    let mut store = Store::default();
    let (mut a, mut b) = (Replica::new("a"), Replica::new("b"));
    a.tick(&s, &mut store, t0(), false, false);
    let t = b.tick(&s, &mut store, t0() + I, false, false);
    // b joins once a is an interval old; a holds every shard live: due when a's member Lease
    // (renewed at t0) lapses, which comes before its shard Leases do.
    assert_eq!(t.wake_at, Some(t0() + D), "{t:?}");
    // a stops. At that moment b's view no longer counts a: it wants every shard, held by a
    // until its shard Leases expire — the same instant here, so they are takeable at once.
    let t = b.tick(&s, &mut store, t0() + D, false, false);
    assert_eq!(takes(&t), all(4));
    assert_eq!(t.wake_at, None, "nothing holds b back any more");
}

#[test]
fn failing_member_renewal_empties_the_owned_set() {
    let s = settings(4);
    let mut store = Store::default();
    let mut a = Replica::new("a");
    a.tick(&s, &mut store, t0(), false, false);
    // Partitioned: ticks go on, every write fails.
    for k in 1..=3 {
        let now = t0() + I * k;
        a.tick(&s, &mut store, now, true, true);
        assert_eq!(a.owned.at(now).is_empty(), now >= t0() + s.renew_deadline, "{now}");
    }
    // The same rule on the decision's own input: a last renewal past the deadline owns nothing.
    let leases = store.shard_leases();
    let view = View {
        now: t0() + secs(25),
        me: "a",
        last_renewal: Some(t0()),
        members: &store.member_leases(),
        shard_leases: &leases,
    };
    assert!(tick(&s, &view).owned.at(t0() + secs(25)).is_empty());
}

#[test]
fn conflicting_takes_are_not_both_won() {
    let s = settings(8);
    let mut store = Store::default();
    // Both start at once over the same empty view: both try to create every Lease they want.
    let (mut a, mut b) = (Replica::new("a"), Replica::new("b"));
    store.members.insert("a".into(), (t0(), "m-a".into()));
    store.members.insert("b".into(), (t0(), "m-b".into()));
    let snapshot = store.clone();
    let ta = a.tick(&s, &mut store, t0(), false, false);
    b.seen = Some((snapshot.member_leases(), snapshot.shard_leases()));
    let tb = b.tick(&s, &mut store, t0(), true, false);
    assert!(ta.wanted.is_disjoint(&tb.wanted), "one assignment, computed twice");
    assert!(a.owned.at(t0()).is_disjoint(&b.owned.at(t0())));
    // A stale take of a shard another replica just took conflicts.
    let mut c = Replica::new("c");
    c.seen = Some((vec![], snapshot.shard_leases()));
    c.tick(&s, &mut store, t0(), true, false);
    for i in c.owned.at(t0()) {
        assert!(!a.owned.owns(i, t0()) && !b.owned.owns(i, t0()), "shard {i} owned twice");
    }
    assert!(c.owned.at(t0()).is_empty(), "every shard c wanted was taken first");
}

#[test]
fn stale_member_leases_are_deleted() {
    let s = settings(4);
    let now = t0();
    let members = vec![
        member("me", Some(now - secs(1000))),
        member("live", Some(now - secs(5))),
        member("dead", Some(now - secs(100))),
        member("nine-d", Some(now - D * 9)),
        member("ten-d", Some(now - D * 10)),
        member("never", None),
    ];
    let t = tick(&s, &View { now, me: "me", last_renewal: None, members: &members, shard_leases: &[] });
    let deleted: Vec<&str> = t
        .actions
        .iter()
        .filter_map(|a| if let LeaseAction::DeleteMember { id, .. } = a { Some(id.as_str()) } else { None })
        .collect();
    assert_eq!(deleted, vec!["ten-d", "never"], "never itself, never the merely dead");
    assert_eq!(t.live, vec!["live", "me"]);
    assert!(t.owned.at(now).is_empty(), "never renewed: owns nothing");
}

#[test]
fn shards_past_the_count_are_freed() {
    let s = settings(2);
    let lease = |index, holder: &str| ShardLease {
        index,
        holder: Some(holder.into()),
        renewed: Some(t0()),
        duration: D,
        resource_version: format!("rv{index}"),
    };
    let leases = [lease(0, "me"), lease(5, "me"), lease(6, "other")];
    let view = View { now: t0(), me: "me", last_renewal: Some(t0()), members: &[], shard_leases: &leases };
    let t = tick(&s, &view);
    assert_eq!(frees(&t), BTreeSet::from([5]));
    assert_eq!(t.owned.at(t0()), BTreeSet::from([0]));
}

/// `helm uninstall` then `helm install`: the old replicas stopped, but their frees failed
/// (their RBAC went with them), so their shard Leases read held and unexpired. Once their
/// member Leases are gone (deleted on leave, or by the garbage collector with their Pods), a
/// new replica takes every shard at its first tick instead of a lease duration later.
#[test]
fn shards_of_a_holder_without_a_member_lease_are_taken_at_once() {
    let s = settings(8);
    let mut store = Store::default();
    let (mut old_a, mut old_b) = (Replica::new("old-a"), Replica::new("old-b"));
    old_a.tick(&s, &mut store, t0(), false, false);
    old_b.tick(&s, &mut store, t0() + secs(1), false, false);
    old_a.tick(&s, &mut store, t0() + secs(2), false, false);
    old_b.tick(&s, &mut store, t0() + secs(3), false, false);
    assert_eq!(store.shards.values().filter(|l| l.holder.is_some()).count(), 8);
    // Both leave at t0 + 4 s: their gates empty, their member Leases go, their frees fail.
    let left = t0() + secs(4);
    for r in [&mut old_a, &mut old_b] {
        r.owned = ShardOwnership::default();
        store.members.remove(&r.id);
        store.joined.remove(&r.id);
    }
    let mut new = Replica::new("new");
    let t = new.tick(&s, &mut store, left + secs(1), false, false);
    assert_eq!(t.live, vec!["new"]);
    assert_eq!(takes(&t), all(8), "every shard at the first tick, 25 s before the Leases expire");
    assert_eq!(new.owned.at(left + secs(1)), all(8));
    assert!(t.wake_at.is_none());
}

/// A holder whose member Lease exists and was renewed within a lease duration keeps its
/// shards, whatever its shard Leases say; one whose member Lease is a duration old has
/// stopped (its gate closed at the renew deadline) and loses them then, even if it renewed
/// a shard Lease later than its member Lease.
#[test]
fn a_holder_is_left_by_its_member_lease_only_when_it_has_surely_stopped() {
    let s = settings(2);
    let now = t0() + secs(100);
    let shard = |index, holder: &str, renewed| ShardLease {
        index,
        holder: Some(holder.into()),
        renewed: Some(renewed),
        duration: D,
        resource_version: format!("rv{index}"),
    };
    let ticked = |members: &[MemberLease], leases: &[ShardLease]| {
        tick(&s, &View { now, me: "me", last_renewal: Some(now), members, shard_leases: leases })
    };
    let me = member("me", Some(now));
    // Renewed 29 s ago: live. Its shard Leases, renewed 1 s ago, stay its own.
    let live = [me.clone(), member("b", Some(now - secs(29)))];
    let leases = [shard(0, "b", now - secs(1)), shard(1, "b", now - secs(1))];
    let t = ticked(&live, &leases);
    assert!(takes(&t).is_empty(), "{t:?}");
    assert_eq!(t.wake_at, Some(now + secs(1)), "due when b's member Lease lapses");
    // 30 s ago: b stopped owning 10 s ago (member renewal + 20 s); its shards go now.
    let lapsed = [me.clone(), member("b", Some(now - D))];
    assert_eq!(takes(&ticked(&lapsed, &leases)), all(2));
    // A member Lease without a renewTime tells nothing: wait for the shard Leases.
    let unknown = [me.clone(), member("b", None)];
    assert!(takes(&ticked(&unknown, &leases)).is_empty());
    // Our own shards are never "left": without our member Lease (a restart under the same
    // Pod name) we renew them and nobody else's rule moves them.
    let ours = [shard(0, "me", now - secs(1)), shard(1, "b", now - secs(1))];
    let t = ticked(&[], &ours);
    assert!(t.actions.contains(&LeaseAction::Renew { shard: 0, resource_version: "rv0".into() }), "{t:?}");
}

// ---------------------------------------------------------------- never two owners

#[derive(Clone, Debug)]
enum Step {
    /// Replica k ticks `after` ms later (over its last view when `stale`; its writes all
    /// fail when `partitioned`).
    Tick { k: usize, after: i64, stale: bool, partitioned: bool },
    /// The clock moves on without replica k (a pause: it does nothing meanwhile).
    Pause { after: i64 },
    /// Replica k restarts: it forgets its ownership and its renewal.
    Crash { k: usize },
    /// Replica k leaves, or its Pod is gone: it stops owning, then its member Lease is
    /// deleted while its shard Leases stay held (frees that failed: RBAC gone with the
    /// release). It comes back as a new process under the same id.
    Leave { k: usize },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        8 => (0..4usize, 0..12_000i64, prop::bool::weighted(0.15), prop::bool::weighted(0.1))
            .prop_map(|(k, after, stale, partitioned)| Step::Tick { k, after, stale, partitioned }),
        1 => (0..60_000i64).prop_map(|after| Step::Pause { after }),
        1 => (0..4usize).prop_map(|k| Step::Crash { k }),
        1 => (0..4usize).prop_map(|k| Step::Leave { k }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Whatever the interleaving of ticks, pauses, partitions, stale views, restarts and
    /// leaves whose frees failed, no shard is in two replicas' owned sets at any instant. Sets only shrink between ticks
    /// (`ShardOwnership::owns` reads the clock), so checking after every step covers every instant.
    #[test]
    fn no_shard_is_ever_owned_twice(steps in prop::collection::vec(step(), 1..120), s in 1u32..12) {
        let settings = settings(s);
        let mut store = Store::default();
        let mut replicas: Vec<Replica> = (0..4).map(|k| Replica::new(&format!("r{k}"))).collect();
        let mut now = t0();
        for st in steps {
            match st {
                Step::Tick { k, after, stale, partitioned } => {
                    now += SignedDuration::from_millis(after);
                    replicas[k].tick(&settings, &mut store, now, stale, partitioned);
                }
                Step::Pause { after } => now += SignedDuration::from_millis(after),
                Step::Crash { k } => replicas[k] = Replica::new(&format!("r{k}")),
                Step::Leave { k } => {
                    replicas[k] = Replica::new(&format!("r{k}"));
                    store.members.remove(&format!("r{k}"));
                    store.joined.remove(&format!("r{k}"));
                }
            }
            for i in settings.shards.all() {
                let owners: Vec<&str> =
                    replicas.iter().filter(|r| r.owned.owns(i, now)).map(|r| r.id.as_str()).collect();
                prop_assert!(owners.len() <= 1, "shard {} owned by {:?} at {}", i, owners, now);
            }
        }
    }

    /// With every replica ticking each renew interval over fresh views, ownership settles:
    /// every shard owned by exactly one replica, none above ceil(S/N), and the rule, given
    /// those holders, names the same owners (a fixed point: the next tick moves nothing).
    #[test]
    fn steady_ticks_converge_on_the_assignment(n in 1usize..6, s in 1u32..40) {
        let settings = settings(s);
        let mut store = Store::default();
        let mut replicas: Vec<Replica> = (0..n).map(|k| Replica::new(&format!("r{k}"))).collect();
        let mut now = t0();
        for _ in 0..4 {
            for (k, r) in replicas.iter_mut().enumerate() {
                r.tick(&settings, &mut store, now + SignedDuration::from_millis(k as i64 * 100), false, false);
            }
            now += I;
        }
        let ids: Vec<String> = replicas.iter().map(|r| r.id.clone()).collect();
        let at = now - I + SignedDuration::from_secs(1);
        let mut held = Vec::new();
        for i in settings.shards.all() {
            let owners: Vec<usize> = (0..n).filter(|k| replicas[*k].owned.owns(i, at)).collect();
            prop_assert_eq!(owners.len(), 1, "shard {} owned by {:?}", i, owners);
            held.push(Some(owners[0]));
        }
        let cap = (s as usize).div_ceil(n);
        for k in 0..n {
            prop_assert!(held.iter().filter(|h| **h == Some(k)).count() <= cap, "replica {} above ceil(S/N)", k);
        }
        let again: Vec<Option<usize>> = assign(&ids, settings.shards, &held).into_iter().map(Some).collect();
        prop_assert_eq!(again, held, "the rule moves shards of a settled assignment");
    }
}

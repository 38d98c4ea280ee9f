//! The Coordinator's decisions (docs/sharding.md, "The Coordinator"): which replica owns
//! which shard (`shard.rs`), decided without a leader from member and shard Leases. Pure: the Lease I/O
//! runs one [`tick`] every `--lease-renew-interval` over what it read and carries out the
//! [`LeaseAction`]s; the reconcile gate asks the [`ShardOwnership`] the tick returned, at reconcile time.
//!
//! Timing, with lease duration D (30 s), renew interval I (10 s) and renew deadline
//! R = 2D/3 (20 s), all replicas on one clock (skew eats into D − R, see below):
//! - **Never two owners.** A holder treats shard i as its own only until `renewTime + R` of
//!   the shard Lease it last wrote ([`ShardOwnership::owns`] checks the clock on every call, so a
//!   replica whose ticks stall — paused, partitioned, a hung request — stops by itself). Anyone
//!   else takes the Lease only once it is free or `renewTime + D` has passed, with an update
//!   guarded by the resourceVersion it read, so a stale view loses with a conflict. Between
//!   R and D there are D − R = 10 s for clock skew and for a reconcile that passed the gate
//!   just before R: reconciles must be shorter than that.
//! - **Failover.** A crashed holder's shard is taken by the first tick of its new owner after
//!   `renewTime + D`: within D + I of the holder's last renewal (the member Lease stops
//!   counting it live after D too, so the assignment already names the new owner). A holder
//!   whose member Lease is gone has left (it stopped first, or its Pod is gone): its shards are
//!   taken at once ([`ShardLease::holder_left`]), which a reinstall needs, since `helm
//!   uninstall` removes the RBAC the leaving replicas would free their shards with.
//! - **Joins counted together.** A member that holds no shard is left out of the division for
//!   one interval after it joined, and for as long as another member joined less than an
//!   interval ago (at most [`JOIN_WAIT_INTERVALS`]): Pods started together (a scale from 1
//!   to 3) are divided with in one step, so each shard moves once ([`dividing_members`]).
//! - **Hand-off on a join.** The old owner frees the shards the new rule gives away at its next
//!   tick, and stops treating them as its own in that same tick; the new owner takes them at
//!   its first tick after seeing them free: a shard is without owner for at most ~I.

use std::collections::{BTreeMap, BTreeSet};

use dco_api::hash::{fnv1a64, mix64};
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use crate::sharding::shard::Shards;

/// Member Leases unrenewed for this many lease durations are deleted (a replica that will
/// not come back, e.g. a Pod of an old ReplicaSet), so the Lease namespace does not grow.
const STALE_MEMBER_DURATIONS: i32 = 10;

/// A replica joining while others join too waits at most this many renew intervals before
/// the shards are divided with it ([`dividing_members`]).
const JOIN_WAIT_INTERVALS: i32 = 4;

/// `t + d`, saturating: a renewTime near the end of time must not panic the tick (it reads
/// as never expiring, which only delays a take; the gate side uses the holder's own writes).
fn after(t: Timestamp, d: SignedDuration) -> Timestamp {
    t.checked_add(d).unwrap_or(Timestamp::MAX)
}

/// The Coordinator's settings (`--shards`, `--lease-duration`, `--lease-renew-interval`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CoordinatorSettings {
    pub shards: Shards,
    pub lease_duration: SignedDuration,
    pub renew_interval: SignedDuration,
    /// Derived, [`CoordinatorSettings::new`]: how long after its last renewal a holder still acts.
    pub renew_deadline: SignedDuration,
}

impl CoordinatorSettings {
    /// The renew deadline is 2/3 of the duration: two renew intervals at the defaults (30 s,
    /// 10 s), so one failed renewal does not stop a healthy replica, and a third of the
    /// duration (10 s) is left between the holder stopping and anyone else taking over.
    pub fn new(shards: Shards, lease_duration: SignedDuration, renew_interval: SignedDuration) -> Self {
        CoordinatorSettings { shards, lease_duration, renew_interval, renew_deadline: lease_duration * 2 / 3 }
    }

    /// The flags make sense only as interval < deadline < duration: with an interval at or
    /// past the deadline a healthy replica's owned set would lapse between its own ticks.
    pub fn check(&self) -> Result<(), String> {
        let positive = self.renew_interval > SignedDuration::ZERO;
        if positive && self.renew_interval < self.renew_deadline && self.renew_deadline < self.lease_duration
        {
            Ok(())
        } else {
            Err(format!(
                "--lease-renew-interval ({}) must be positive and below 2/3 of --lease-duration ({})",
                self.renew_interval, self.lease_duration
            ))
        }
    }
}

/// A member Lease as read: `dco-operator-member-<id>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberLease {
    pub id: String,
    pub renewed: Option<Timestamp>,
    /// When the Lease was created (`metadata.creationTimestamp`): when its replica joined.
    pub joined: Option<Timestamp>,
    /// What a delete of it is conditioned on: a view read before the member came back must
    /// not delete its Lease (its shards would then read as left, `ShardLease::holder_left`).
    pub resource_version: String,
}

/// A shard Lease as read: `dco-operator-shard-<index>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardLease {
    pub index: u32,
    /// `None` or empty: free.
    pub holder: Option<String>,
    pub renewed: Option<Timestamp>,
    /// The holder's `leaseDurationSeconds`: its promise, so the taker waits what the holder
    /// counted on even if their flags differ.
    pub duration: SignedDuration,
    pub resource_version: String,
}

impl ShardLease {
    pub fn holder(&self) -> Option<&str> {
        self.holder.as_deref().filter(|h| !h.is_empty())
    }

    /// Free, expired, or held by a replica that has left: anyone but `me` may take it
    /// (guarded by its resourceVersion). `members` maps each member Lease's id to its renewal.
    fn takeable(&self, now: Timestamp, me: &str, members: &BTreeMap<&str, Option<Timestamp>>) -> bool {
        self.holder().is_none()
            || self.renewed.is_none_or(|r| now >= after(r, self.duration))
            || self.holder_left(now, me, members)
    }

    /// Whether the holder (not `me`) has stopped for sure though this Lease reads unexpired:
    ///
    /// - its member Lease is gone. A member Lease is deleted only once its replica cannot act:
    ///   by the replica itself when it leaves, after its controllers stopped and its gate
    ///   emptied (leases.rs `free_all`); by the garbage collector once its Pod is gone
    ///   (the member Lease's ownerReference; a Pod object goes once its containers stopped);
    ///   or by [`tick`] after [`STALE_MEMBER_DURATIONS`]. The holder's frees may have failed
    ///   meanwhile — `helm uninstall` deletes the operator's RBAC with its Deployment.
    /// - its member Lease was last renewed a whole duration ago (this Lease's, the holder's
    ///   promise). The holder owns a shard only until `min(shard renewal, member renewal) +
    ///   renew deadline` (`ShardOwnership::of`), and its member Lease only moves forward, so it stopped
    ///   a third of a duration before; a renewal since then changed this Lease's
    ///   resourceVersion, and a take over the old one conflicts.
    fn holder_left(&self, now: Timestamp, me: &str, members: &BTreeMap<&str, Option<Timestamp>>) -> bool {
        let Some(holder) = self.holder().filter(|h| *h != me) else { return false };
        match members.get(holder) {
            None => true,
            Some(renewed) => renewed.is_some_and(|r| now >= after(r, self.duration)),
        }
    }
}

/// What one tick sees.
#[derive(Clone, Debug)]
pub struct View<'a> {
    pub now: Timestamp,
    /// This replica's id, unique among the running replicas (Pod names are): two processes
    /// with one id would both take the Leases held under it as their own.
    pub me: &'a str,
    /// When this replica last renewed its member Lease successfully (`None`: never).
    pub last_renewal: Option<Timestamp>,
    pub members: &'a [MemberLease],
    pub shard_leases: &'a [ShardLease],
}

/// One write of a tick. Takes, renews and frees of shard Leases carry the resourceVersion
/// read, so a write over a Lease that changed since fails with a conflict and the next tick
/// decides again on the new state. Takes and renewals write `renewTime = now` of the tick,
/// taken before the request (a slow request makes the Lease look older, never younger), and
/// `leaseDurationSeconds` = the lease duration, which others then wait out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaseAction {
    /// Renew (or create) this replica's member Lease.
    RenewMember,
    /// Create shard Lease `shard` held by us (`resource_version: None`: it does not exist),
    /// or take it over from a free or expired state.
    Take { shard: u32, resource_version: Option<String> },
    /// Renew a shard Lease we hold and still want.
    Renew { shard: u32, resource_version: String },
    /// Set the holder of a shard Lease we hold but no longer want to empty.
    Free { shard: u32, resource_version: String },
    /// Delete the member Lease of a replica gone for [`STALE_MEMBER_DURATIONS`] durations, if
    /// it is still at the resourceVersion read.
    DeleteMember { id: String, resource_version: String },
}

/// The shards this replica may reconcile, each until when: the reconcile gate's set.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShardOwnership {
    until: BTreeMap<u32, Timestamp>,
}

impl ShardOwnership {
    /// Shards whose Lease we hold, renewed by us at `renewTime`, that we still want: each
    /// until `min(renewTime, last member renewal) + renew deadline`. The I/O part calls this
    /// again with the Leases its writes returned, so a take counts from the tick it succeeds in.
    pub fn of(
        settings: &CoordinatorSettings,
        me: &str,
        last_renewal: Option<Timestamp>,
        shard_leases: &[ShardLease],
        wanted: &BTreeSet<u32>,
    ) -> Self {
        let Some(member) = last_renewal else { return ShardOwnership::default() };
        let until = shard_leases
            .iter()
            .filter(|l| l.holder() == Some(me) && wanted.contains(&l.index))
            .filter_map(|l| Some((l.index, after(l.renewed?.min(member), settings.renew_deadline))))
            .collect();
        ShardOwnership { until }
    }

    /// Every shard of `shards`, until `until` (the reconcilers' unit tests).
    #[cfg(test)]
    pub fn all(shards: Shards, until: Timestamp) -> Self {
        ShardOwnership { until: shards.all().map(|i| (i, until)).collect() }
    }

    /// The shards `which` of `shards`, until `until` (unit tests).
    #[cfg(test)]
    pub fn some(shards: Shards, which: impl IntoIterator<Item = u32>, until: Timestamp) -> Self {
        ShardOwnership {
            until: which.into_iter().filter(|i| *i < shards.count()).map(|i| (i, until)).collect(),
        }
    }

    /// Whether `shard` is ours at `now`. Checks the clock: no tick is needed to stop.
    pub fn owns(&self, shard: u32, now: Timestamp) -> bool {
        self.until.get(&shard).is_some_and(|u| now < *u)
    }

    /// The shards whose Lease this replica holds, deadline or not: what its watches ask for
    /// and keep (a lapse must not lose events, only delay reconciles).
    pub fn held(&self) -> BTreeSet<u32> {
        self.until.keys().copied().collect()
    }

    /// The shards owned at `now`.
    pub fn at(&self, now: Timestamp) -> BTreeSet<u32> {
        self.until.iter().filter(|(_, u)| now < **u).map(|(s, _)| *s).collect()
    }

    /// When the next shard stops being ours unless renewed: the gate's set changes then.
    #[cfg(test)]
    pub fn next_expiry(&self) -> Option<Timestamp> {
        self.until.values().min().copied()
    }
}

/// The outcome of one tick.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tick {
    /// Sorted live member ids, this replica included.
    pub live: Vec<String>,
    /// The shards the assignment rule gives this replica.
    pub wanted: BTreeSet<u32>,
    pub actions: Vec<LeaseAction>,
    /// The gate's set from what was read, before this tick's writes: shards being freed are
    /// already out, shards being taken not yet in (see [`ShardOwnership::of`]).
    pub owned: ShardOwnership,
    /// When to tick again without waiting for the interval: the first moment a Lease that
    /// holds this replica back expires — another member's (its shards are then re-divided)
    /// or a shard Lease it wants that another still holds. A member that stops renewing thus
    /// loses its shards a lease duration after its last renewal, not up to an interval later;
    /// a healthy member's expiry always lies past the next interval's tick, which reads it
    /// renewed, so it costs no tick.
    pub wake_at: Option<Timestamp>,
}

/// Live members: renewal within the lease duration; this replica always (its own Lease may
/// not exist yet, or its renewal may be failing: it still wants its share meanwhile, and the
/// gate keeps it from acting on stale ownership).
pub fn live_members(
    settings: &CoordinatorSettings,
    me: &str,
    now: Timestamp,
    members: &[MemberLease],
) -> Vec<String> {
    let mut live: BTreeSet<&str> = members
        .iter()
        .filter(|m| m.renewed.is_some_and(|r| now < after(r, settings.lease_duration)))
        .map(|m| m.id.as_str())
        .collect();
    live.insert(me);
    live.into_iter().map(str::to_string).collect()
}

/// The members the shards are divided among: the live ones (sorted), minus those still
/// joining. A live member that holds no shard (`holding`) is joining until its member Lease is
/// one renew interval old, and then while another member joined less than an interval ago, for
/// at most [`JOIN_WAIT_INTERVALS`] intervals. Without the wait, Pods that start a moment apart
/// would each trigger a division of their own and a shard could move twice (A→B, then B→C)
/// where once suffices. Holders always count (leaving them out would move their shards), and
/// when every live member is joining (a fresh start) all count, so a new install takes its
/// shards at once. `me` without a member Lease yet is joining.
pub fn dividing_members(
    settings: &CoordinatorSettings,
    now: Timestamp,
    members: &[MemberLease],
    live: &[String],
    holding: &BTreeSet<&str>,
) -> Vec<String> {
    // No Lease yet: joining. A Lease without a creation time (never from an apiserver): old.
    let joined: BTreeMap<&str, Option<Timestamp>> =
        members.iter().map(|m| (m.id.as_str(), m.joined)).collect();
    let age = |id: &str| match joined.get(id) {
        None => SignedDuration::ZERO,
        Some(j) => j.map_or(SignedDuration::MAX, |j| now.duration_since(j)),
    };
    let settle = settings.renew_interval;
    if live.iter().all(|m| age(m) >= settle) {
        return live.to_vec();
    }
    let cap = settle * JOIN_WAIT_INTERVALS;
    let counted: Vec<String> =
        live.iter().filter(|m| holding.contains(m.as_str()) || age(m) >= cap).cloned().collect();
    if counted.is_empty() { live.to_vec() } else { counted }
}

/// When [`dividing_members`] may change by time alone: once every live member is an interval
/// old, or a joiner that holds nothing reaches the cap. `None` when no one is joining.
fn join_wake(
    settings: &CoordinatorSettings,
    now: Timestamp,
    members: &[MemberLease],
    live: &[String],
    holding: &BTreeSet<&str>,
) -> Option<Timestamp> {
    let joined: Vec<(&str, Timestamp)> = members
        .iter()
        .filter(|m| live.contains(&m.id))
        .filter_map(|m| Some((m.id.as_str(), m.joined?)))
        .collect();
    let quiet_at = joined.iter().map(|(_, j)| after(*j, settings.renew_interval)).max().filter(|t| *t > now);
    let cap = settings.renew_interval * JOIN_WAIT_INTERVALS;
    let capped = joined
        .iter()
        .filter(|(id, _)| !holding.contains(id))
        .map(|(_, j)| after(*j, cap))
        .filter(|t| *t > now && quiet_at.is_some());
    quiet_at.into_iter().chain(capped).min()
}

/// One tick's decisions.
pub fn tick(settings: &CoordinatorSettings, view: &View<'_>) -> Tick {
    let now = view.now;
    let live = live_members(settings, view.me, now, view.members);
    let leases: BTreeMap<u32, &ShardLease> = view.shard_leases.iter().map(|l| (l.index, l)).collect();
    let members: BTreeMap<&str, Option<Timestamp>> =
        view.members.iter().map(|m| (m.id.as_str(), m.renewed)).collect();
    let takeable = |l: &ShardLease| l.takeable(now, view.me, &members);
    let holders: Vec<Option<&str>> = settings
        .shards
        .all()
        .map(|i| leases.get(&i).filter(|l| !takeable(l)).and_then(|l| l.holder()))
        .collect();
    let holding: BTreeSet<&str> = holders.iter().flatten().copied().collect();
    let dividing = dividing_members(settings, now, view.members, &live, &holding);
    // Who holds each shard now, among the dividing: the rule keeps them where they are.
    let held: Vec<Option<usize>> =
        holders.iter().map(|h| h.and_then(|h| dividing.iter().position(|m| m == h))).collect();
    let owners = assign(&dividing, settings.shards, &held);
    // A joining replica wants nothing yet.
    let rank = dividing.iter().position(|m| m == view.me);
    let wanted: BTreeSet<u32> =
        settings.shards.all().filter(|i| rank.is_some_and(|r| owners[*i as usize] == r)).collect();

    let mut actions = vec![LeaseAction::RenewMember];
    for i in settings.shards.all() {
        let want = wanted.contains(&i);
        match leases.get(&i) {
            None if want => actions.push(LeaseAction::Take { shard: i, resource_version: None }),
            None => {}
            Some(l) if l.holder() == Some(view.me) => {
                let resource_version = l.resource_version.clone();
                actions.push(if want {
                    LeaseAction::Renew { shard: i, resource_version }
                } else {
                    LeaseAction::Free { shard: i, resource_version }
                });
            }
            // A live holder keeps its shard until it frees it, its Lease expires or it leaves.
            Some(l) if want && takeable(l) => actions
                .push(LeaseAction::Take { shard: i, resource_version: Some(l.resource_version.clone()) }),
            Some(_) => {}
        }
    }
    // Shards past S (left from a larger `--shards`) are wanted by no one: let go of ours.
    for l in view.shard_leases.iter().filter(|l| l.index >= settings.shards.count()) {
        if l.holder() == Some(view.me) {
            actions.push(LeaseAction::Free { shard: l.index, resource_version: l.resource_version.clone() });
        }
    }
    let stale = settings.lease_duration * STALE_MEMBER_DURATIONS;
    for m in view.members {
        if m.id != view.me && m.renewed.is_none_or(|r| now >= after(r, stale)) {
            actions.push(LeaseAction::DeleteMember {
                id: m.id.clone(),
                resource_version: m.resource_version.clone(),
            });
        }
    }
    let owned = ShardOwnership::of(settings, view.me, view.last_renewal, view.shard_leases, &wanted);
    let members_expire = view
        .members
        .iter()
        .filter(|m| m.id != view.me)
        .filter_map(|m| Some(after(m.renewed?, settings.lease_duration)))
        .filter(|t| *t > now);
    let wanted_expire = wanted
        .iter()
        .filter_map(|i| leases.get(i))
        .filter(|l| l.holder().is_some_and(|h| h != view.me) && !takeable(l))
        .filter_map(|l| Some(after(l.renewed?, l.duration)));
    let wake_at = members_expire
        .chain(wanted_expire)
        .chain(join_wake(settings, now, view.members, &live, &holding))
        .min();
    Tick { live, wanted, actions, owned, wake_at }
}

/// The assignment rule: the owner of each shard as an index into `members` (sorted, unique),
/// given `held[i]`, the live member holding shard i now (its Lease unexpired), if any. The
/// same on every replica that sees the same members and holders. Empty when there are no
/// members.
///
/// Sticky, exactly balanced rendezvous hashing. With S = q·N + r, r members own q + 1 shards
/// and the others q. Every (shard, member) pair gets a score. First the holders keep what
/// they hold, their highest-scored shards first: the r holding the most (ties by id hash) up
/// to q + 1, the others up to q. Then the shards left (free, expired, of a member gone, or
/// shed) go in order of score, the highest pair first, to members below q, and then to
/// members below q + 1 while fewer than r are there. So a leave moves exactly the leaver's
/// shards, and a join moves exactly the newcomer's share (q shards), which is what balance
/// requires; with no holders (a fresh start) it is a stable matching on the scores. It always
/// completes: the bounds add up to S. Measured against a plain `i mod N` and the first,
/// unsticky version of this rule in the simulation below and `docs/performance.md`.
pub fn assign(members: &[String], shards: Shards, held: &[Option<usize>]) -> Vec<usize> {
    let n = members.len();
    if n == 0 {
        return Vec::new();
    }
    let s = shards.count() as usize;
    let (q, r) = (s / n, s % n);
    // mix64 over FNV: FNV alone mixes its last bytes poorly (dco_api::hash::mix64), and ids
    // of one Deployment differ only in their last characters.
    let salts: Vec<u64> = members.iter().map(|m| mix64(fnv1a64(m.as_bytes()))).collect();
    // ⊕ 2^64/φ: mix64(0) = 0, which would make shard 0's scores the member salts.
    let keys: Vec<u64> = (0..s).map(|i| mix64(i as u64 ^ 0x9e37_79b9_7f4a_7c15)).collect();
    let score = |i: usize, j: usize| mix64(keys[i] ^ salts[j]);
    // Highest score first; shard then member index break ties, so the order is total.
    let by_score = |a: &(u64, usize, usize), b: &(u64, usize, usize)| {
        b.0.cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2))
    };

    // The r members holding the most may keep q + 1; the rest q.
    let mut holds = vec![0usize; n];
    for j in held.iter().take(s).flatten().filter(|j| **j < n) {
        holds[*j] += 1;
    }
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_unstable_by(|a, b| holds[*b].cmp(&holds[*a]).then(salts[*a].cmp(&salts[*b])).then(a.cmp(b)));
    let mut bound = vec![q; n];
    for j in order.iter().take(r) {
        bound[*j] = q + 1;
    }
    let mut owner = vec![usize::MAX; s];
    let mut load = vec![0usize; n];
    let mut kept: Vec<(u64, usize, usize)> = held
        .iter()
        .take(s)
        .enumerate()
        .filter_map(|(i, h)| h.filter(|j| *j < n).map(|j| (score(i, j), i, j)))
        .collect();
    kept.sort_unstable_by(by_score);
    for (_, i, j) in kept {
        if load[j] < bound[j] {
            owner[i] = j;
            load[j] += 1;
        }
    }

    // The rest: members below q first, then the q + 1 slots not taken by holders.
    let mut pairs: Vec<(u64, usize, usize)> = (0..s)
        .filter(|i| owner[*i] == usize::MAX)
        .flat_map(|i| (0..n).map(move |j| (i, j)))
        .map(|(i, j)| (score(i, j), i, j))
        .collect();
    pairs.sort_unstable_by(by_score);
    let mut above_q = load.iter().filter(|l| **l > q).count();
    for pass in 0..2 {
        for &(_, i, j) in &pairs {
            if owner[i] != usize::MAX {
                continue;
            }
            let room = match pass {
                0 => load[j] < q,
                _ => load[j] == q && above_q < r,
            };
            if room {
                owner[i] = j;
                load[j] += 1;
                if load[j] > q {
                    above_q += 1;
                }
            }
        }
    }
    owner
}

#[cfg(test)]
mod tests;

//! The assignment resolver (`docs/configuration.md`, sharding): which
//! ConversionWebhookServer serves a target.
//!
//! Precedence: the config's `webhookServerRef` pin, then the pool by weighted rendezvous
//! hashing on the target name, then the `default` instance. It is a pure function of
//! (target, pin, servers): the operator and every webhook replica compute it independently
//! and must agree, so nothing here may depend on order, time or randomness.

use std::collections::BTreeSet;

use crate::hash::{fnv1a64, mix64, unit_interval};
use crate::server::ConversionWebhookServer;

/// What the resolver needs to know of one server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerInfo {
    pub name: String,
    pub default: bool,
    /// `Some(weight)` when the server is in the pool.
    pub pool_weight: Option<u32>,
}

/// A server being deleted takes no new targets: it leaves the pool and stops being the
/// default, so its targets move away (which is what lets its `in-use` finalizer go). A pin
/// still names it. Every component builds `ServerInfo` through this, so the operator and
/// every webhook replica agree on it.
impl From<&ConversionWebhookServer> for ServerInfo {
    fn from(s: &ConversionWebhookServer) -> Self {
        let deleting = s.metadata.deletion_timestamp.is_some();
        ServerInfo {
            name: kube::ResourceExt::name_any(s),
            default: s.spec.default && !deleting,
            pool_weight: s.pool_weight().filter(|_| !deleting),
        }
    }
}

/// Why a server was chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AssignedBy {
    Pin,
    Pool,
    Default,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Assignment {
    pub server: String,
    pub by: AssignedBy,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    #[error(
        "spec.webhookServerRef.name names ConversionWebhookServer {0:?}, which does not exist; create it or change the reference"
    )]
    PinnedServerMissing(String),
    #[error(
        "no ConversionWebhookServer can serve target {0:?}: none has spec.default: true and none has spec.sharding.enabled: true; mark one server default or set spec.webhookServerRef"
    )]
    NoServer(String),
    #[error("ConversionWebhookServers {0:?} and {1:?} both have spec.default: true; set it on only one")]
    TwoDefaults(String, String),
}

#[derive(Clone, Debug)]
struct Member {
    name: String,
    weight: f64,
    /// Precomputed per member so scoring a target is one mix and one logarithm per member.
    salt: u64,
}

/// A snapshot of the servers, indexed for resolution.
#[derive(Clone, Debug, Default)]
pub struct Servers {
    names: BTreeSet<String>,
    defaults: Vec<String>,
    pool: Vec<Member>,
}

impl Servers {
    pub fn new<I: IntoIterator<Item = ServerInfo>>(servers: I) -> Self {
        let mut s = Servers::default();
        for info in servers {
            if info.default {
                s.defaults.push(info.name.clone());
            }
            if let Some(w) = info.pool_weight.filter(|w| *w > 0) {
                s.pool.push(Member {
                    salt: mix64(fnv1a64(info.name.as_bytes())),
                    weight: f64::from(w),
                    name: info.name.clone(),
                });
            }
            s.names.insert(info.name);
        }
        // Sorted so equal scores break ties by name whatever the input order.
        s.pool.sort_by(|a, b| a.name.cmp(&b.name));
        s.defaults.sort();
        s
    }

    pub fn pool_members(&self) -> impl Iterator<Item = &str> {
        self.pool.iter().map(|m| m.name.as_str())
    }

    /// Resolve `target`, honouring `pin` (the config's `webhookServerRef.name`).
    pub fn resolve(&self, target: &str, pin: Option<&str>) -> Result<Assignment, ResolveError> {
        if let Some(pin) = pin {
            return if self.names.contains(pin) {
                Ok(Assignment { server: pin.to_string(), by: AssignedBy::Pin })
            } else {
                Err(ResolveError::PinnedServerMissing(pin.to_string()))
            };
        }
        if let Some(server) = self.pool_winner(target) {
            return Ok(Assignment { server: server.to_string(), by: AssignedBy::Pool });
        }
        match self.defaults.as_slice() {
            [] => Err(ResolveError::NoServer(target.to_string())),
            [only] => Ok(Assignment { server: only.clone(), by: AssignedBy::Default }),
            [a, b, ..] => Err(ResolveError::TwoDefaults(a.clone(), b.clone())),
        }
    }

    /// Weighted rendezvous (HRW): score_j = w_j / −ln(u_j), u_j = hash(target, member_j) in
    /// (0,1); the highest score wins and ties go to the smallest name. Adding a member only
    /// moves the targets it now wins.
    pub fn pool_winner(&self, target: &str) -> Option<&str> {
        let t = fnv1a64(target.as_bytes());
        let mut best: Option<(&Member, f64)> = None;
        for m in &self.pool {
            let u = unit_interval(mix64(t ^ m.salt));
            let score = m.weight / -u.ln();
            // Strictly greater: members are sorted, so the first of equals (smallest name) stays.
            if best.is_none_or(|(_, b)| score > b) {
                best = Some((m, score));
            }
        }
        best.map(|(m, _)| m.name.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    fn pool(members: &[(&str, u32)]) -> Vec<ServerInfo> {
        members
            .iter()
            .map(|(n, w)| ServerInfo { name: n.to_string(), default: false, pool_weight: Some(*w) })
            .collect()
    }

    fn targets(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("xr{i}.example{}.org", i % 97)).collect()
    }

    #[test]
    fn pin_beats_pool_and_default() {
        let mut servers = pool(&[("a", 1), ("b", 1)]);
        servers.push(ServerInfo { name: "d".into(), default: true, pool_weight: None });
        servers.push(ServerInfo { name: "pinned".into(), default: false, pool_weight: None });
        let s = Servers::new(servers);
        for t in targets(200) {
            let a = s.resolve(&t, Some("pinned")).unwrap();
            assert_eq!(a, Assignment { server: "pinned".into(), by: AssignedBy::Pin });
            assert_eq!(s.resolve(&t, None).unwrap().by, AssignedBy::Pool);
        }
    }

    #[test]
    fn default_serves_without_pool() {
        let s = Servers::new([ServerInfo { name: "d".into(), default: true, pool_weight: None }]);
        assert_eq!(
            s.resolve("x.example.org", None).unwrap(),
            Assignment { server: "d".into(), by: AssignedBy::Default }
        );
    }

    #[test]
    fn errors_name_the_problem() {
        let none = Servers::new([ServerInfo { name: "plain".into(), default: false, pool_weight: None }]);
        let err = none.resolve("db.example.org", None).unwrap_err();
        assert_eq!(err, ResolveError::NoServer("db.example.org".into()));
        assert!(err.to_string().contains("spec.default"));

        let two = Servers::new([
            ServerInfo { name: "z".into(), default: true, pool_weight: None },
            ServerInfo { name: "a".into(), default: true, pool_weight: None },
        ]);
        assert_eq!(two.resolve("t", None).unwrap_err(), ResolveError::TwoDefaults("a".into(), "z".into()));
        // A pin still resolves while the defaults conflict.
        assert_eq!(two.resolve("t", Some("z")).unwrap().server, "z");

        let err = two.resolve("t", Some("gone")).unwrap_err();
        assert_eq!(err, ResolveError::PinnedServerMissing("gone".into()));
        assert!(err.to_string().contains("\"gone\""));
    }

    #[test]
    fn shares_follow_weights_within_two_percent_at_100k() {
        let members = [("w1", 1), ("w2", 2), ("w3", 3), ("w4", 4), ("other", 1), ("big", 5)];
        let s = Servers::new(pool(&members));
        let total_w: u32 = members.iter().map(|m| m.1).sum();
        let n = 100_000;
        let mut counts: HashMap<&str, usize> = HashMap::new();
        for t in targets(n) {
            *counts.entry(s.pool_winner(&t).unwrap()).or_default() += 1;
        }
        for (name, w) in members {
            let expected = n as f64 * f64::from(w) / f64::from(total_w);
            let got = counts[name] as f64;
            let rel = (got - expected).abs() / expected;
            assert!(
                rel <= 0.02,
                "{name}: weight {w} expected {expected:.0} got {got} ({:.2}% off)",
                rel * 100.0
            );
        }
    }

    #[test]
    fn adding_a_member_moves_only_what_it_wins_about_one_in_n_plus_one() {
        let names: Vec<String> = (0..8).map(|i| format!("server-{i}")).collect();
        let before = Servers::new(names.iter().map(|n| ServerInfo {
            name: n.clone(),
            default: false,
            pool_weight: Some(1),
        }));
        let mut grown: Vec<ServerInfo> = names
            .iter()
            .map(|n| ServerInfo { name: n.clone(), default: false, pool_weight: Some(1) })
            .collect();
        grown.push(ServerInfo { name: "newcomer".into(), default: false, pool_weight: Some(1) });
        let after = Servers::new(grown);
        let n = 100_000;
        let mut moved = 0;
        for t in targets(n) {
            let (a, b) = (before.pool_winner(&t).unwrap(), after.pool_winner(&t).unwrap());
            if a != b {
                assert_eq!(b, "newcomer", "target {t} moved from {a} to {b}, not to the new member");
                moved += 1;
            }
        }
        let ideal = n as f64 / 9.0;
        let ratio = moved as f64 / ideal;
        assert!((0.95..=1.05).contains(&ratio), "moved {moved}, ideal {ideal:.0}, ratio {ratio:.3}");
    }

    #[test]
    fn a_deleting_server_leaves_the_pool_and_the_default_but_stays_pinnable() {
        let mut cws = ConversionWebhookServer::new(
            "going",
            serde_json::from_value(
                serde_json::json!({"default": true, "sharding": {"enabled": true, "weight": 5}}),
            )
            .unwrap(),
        );
        assert_eq!(
            ServerInfo::from(&cws),
            ServerInfo { name: "going".into(), default: true, pool_weight: Some(5) }
        );
        cws.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
        ));
        let info = ServerInfo::from(&cws);
        assert_eq!(info, ServerInfo { name: "going".into(), default: false, pool_weight: None });
        let s =
            Servers::new([info, ServerInfo { name: "stays".into(), default: true, pool_weight: Some(1) }]);
        assert_eq!(s.resolve("t", None).unwrap().server, "stays");
        assert_eq!(s.resolve("t", Some("going")).unwrap().server, "going");
    }

    proptest! {
        #[test]
        fn same_answer_for_any_order(
            weights in proptest::collection::vec(1u32..10, 1..12),
            seed in any::<u64>(),
            target in "[a-z0-9.-]{1,40}",
        ) {
            let infos: Vec<ServerInfo> = weights.iter().enumerate()
                .map(|(i, w)| ServerInfo { name: format!("s{i}"), default: i == 0, pool_weight: Some(*w) })
                .collect();
            let mut shuffled = infos.clone();
            // Deterministic shuffle from the seed.
            let mut x = seed;
            for i in (1..shuffled.len()).rev() {
                x = mix64(x.wrapping_add(i as u64));
                shuffled.swap(i, (x % (i as u64 + 1)) as usize);
            }
            let (a, b) = (Servers::new(infos), Servers::new(shuffled));
            prop_assert_eq!(a.resolve(&target, None), b.resolve(&target, None));
        }

        #[test]
        fn removing_a_member_moves_only_what_it_held(
            n in 2usize..10,
            removed in 0usize..10,
            target in "[a-z0-9.-]{1,40}",
        ) {
            let removed = removed % n;
            let all: Vec<ServerInfo> = (0..n).map(|i| ServerInfo { name: format!("s{i}"), default: false, pool_weight: Some(1 + (i as u32 % 3)) }).collect();
            let fewer: Vec<ServerInfo> = all.iter().enumerate().filter(|(i, _)| *i != removed).map(|(_, s)| s.clone()).collect();
            let (a, b) = (Servers::new(all), Servers::new(fewer));
            let (wa, wb) = (a.pool_winner(&target).unwrap(), b.pool_winner(&target).unwrap());
            let removed_name = format!("s{removed}");
            if wa != removed_name {
                prop_assert_eq!(wa, wb);
            }
        }

        #[test]
        fn a_pin_always_wins(pin_idx in 0usize..5, target in "[a-z0-9.-]{1,40}") {
            let infos: Vec<ServerInfo> = (0..5).map(|i| ServerInfo { name: format!("s{i}"), default: i == 4, pool_weight: (i < 3).then_some(1) }).collect();
            let s = Servers::new(infos);
            let pin = format!("s{pin_idx}");
            prop_assert_eq!(s.resolve(&target, Some(&pin)), Ok(Assignment { server: pin.clone(), by: AssignedBy::Pin }));
        }
    }
}

//! A ConversionWebhookServer's status as a pure function of what the reconcile gathered: the
//! workload it applied (or nothing, while a deletion is held), the served-target Lease
//! aggregate, the configs assigned to it and the other default servers. `mod.rs` gathers
//! these facts, renders, and writes the result once.

use std::time::Duration;

use dco_api::ServerStatus;
use dco_api::server::AssignedConfig;
use k8s_openapi::jiff::Timestamp;

use crate::leases::Aggregate;
use crate::server::cert_manager::Standing;
use crate::server::condition;
use crate::server::names::ServerNames;
use dco_state::conditions;

/// The Deployment as the apply returned it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Workload {
    pub replicas: i32,
    pub ready: i32,
    /// `spec.replicas`, or `replicas` when an HPA owns the count.
    pub desired: i32,
}

/// How the serving certificate stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Certificate {
    /// The operator's own leaf, valid until this Unix time.
    SelfManaged { leaf_not_after: i64 },
    /// `spec.certificate` has cert-manager issue it: as `cert_manager::assess` found it.
    CertManager(Standing),
}

/// What an apply reconcile wrote: absent while a deletion is held (cleanup applies nothing,
/// so those parts of status stay as they were).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Applied {
    pub workload: Workload,
    /// The Service's first port.
    pub service_port: i32,
    pub certificate: Certificate,
}

#[derive(Clone, Debug)]
pub struct Facts<'a> {
    pub names: &'a ServerNames,
    pub generation: Option<i64>,
    pub now: Timestamp,
    pub applied: Option<Applied>,
    /// Why the deletion waits, when it does.
    pub deletion_blocked: Option<String>,
    pub leases: Aggregate,
    pub assigned: Vec<AssignedConfig>,
    /// This server's `spec.default`.
    pub default: bool,
    /// The other servers with `spec.default: true` that are not being deleted.
    pub other_defaults: Vec<String>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Rendered {
    pub status: ServerStatus,
    /// Just after the first live Lease would lapse, if any is live.
    pub lease_recheck: Option<Duration>,
}

/// The status after this reconcile, from the one before (`lastTransitionTime`s carry over).
pub fn render(previous: Option<&ServerStatus>, facts: &Facts<'_>) -> Rendered {
    let (names, gen_, now) = (facts.names, facts.generation, facts.now);
    let mut status = previous.cloned().unwrap_or_default();
    if let Some(applied) = &facts.applied {
        status.observed_generation = gen_;
        match &applied.certificate {
            Certificate::CertManager(st) => conditions::set(
                &mut status.conditions,
                condition::CERTIFICATE_READY,
                st.ready,
                st.reason,
                st.message.clone(),
                gen_,
                now,
            ),
            &Certificate::SelfManaged { leaf_not_after } => conditions::set(
                &mut status.conditions,
                condition::CERTIFICATE_READY,
                true,
                "SelfManaged",
                format!(
                    "Secret {}/{} holds a certificate for {} valid until {}",
                    names.namespace,
                    names.tls_secret,
                    names.service_host(),
                    Timestamp::from_second(leaf_not_after).map(|t| t.to_string()).unwrap_or_default()
                ),
                gen_,
                now,
            ),
        }

        let port = applied.service_port;
        status.endpoint = Some(format!("https://{}:{port}", names.service_host()));
        conditions::set(
            &mut status.conditions,
            condition::SERVICE_READY,
            true,
            "Applied",
            format!("Service {}/{} routes port {port} to the webhook Pods", names.namespace, names.service()),
            gen_,
            now,
        );

        let w = applied.workload;
        status.replicas = w.replicas;
        status.ready_replicas = w.ready;
        let available = w.ready > 0;
        conditions::set(
            &mut status.conditions,
            condition::AVAILABLE,
            available,
            if available { "ReplicasReady" } else { "NoReadyReplicas" },
            format!(
                "{} of {} replicas of Deployment {}/{} are ready",
                w.ready, w.desired, names.namespace, names.workload
            ),
            gen_,
            now,
        );
    }
    if let Some(message) = &facts.deletion_blocked {
        conditions::set(
            &mut status.conditions,
            condition::DELETION_BLOCKED,
            true,
            "ConfigsStillAssigned",
            message.clone(),
            gen_,
            now,
        );
    }

    facts.leases.write_to(&mut status);
    status.assigned_configs = facts.assigned.clone();
    let others = &facts.other_defaults;
    if facts.default && !others.is_empty() {
        conditions::set(
            &mut status.conditions,
            condition::DEFAULT_CONFLICT,
            true,
            "SeveralDefaults",
            format!(
                "ConversionWebhookServers {others:?} also have spec.default: true; set it on only one — until then targets that need the default server cannot be resolved"
            ),
            gen_,
            now,
        );
    } else {
        conditions::remove(&mut status.conditions, condition::DEFAULT_CONFLICT);
    }

    // Look again just after the first live Lease would lapse, so a dead replica leaves the
    // intersection even though no watch event announces it.
    let lease_recheck = facts
        .leases
        .next_expiry
        .and_then(|e| u64::try_from(e.as_second() - now.as_second() + 1).ok())
        .map(|s| Duration::from_secs(s.max(1)));
    Rendered { status, lease_recheck }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::SignedDuration;

    fn now() -> Timestamp {
        Timestamp::from_second(1_800_000_000).unwrap()
    }

    fn applied(ready: i32) -> Applied {
        Applied {
            workload: Workload { replicas: 2, ready, desired: 3 },
            service_port: 443,
            certificate: Certificate::SelfManaged { leaf_not_after: 1_800_086_400 },
        }
    }

    fn facts(names: &ServerNames, applied: Option<Applied>) -> Facts<'_> {
        Facts {
            names,
            generation: Some(4),
            now: now(),
            applied,
            deletion_blocked: None,
            leases: Aggregate::default(),
            assigned: Vec::new(),
            default: false,
            other_defaults: Vec::new(),
        }
    }

    fn cond<'a>(s: &'a ServerStatus, t: &str) -> Option<(&'a str, &'a str, &'a str)> {
        conditions::find(&s.conditions, t).map(|c| (c.status.as_str(), c.reason.as_str(), c.message.as_str()))
    }

    #[test]
    fn a_ready_workload_is_available_with_its_endpoint_and_certificate() {
        let names = ServerNames::new("a", "dco-system");
        let s = render(None, &facts(&names, Some(applied(2)))).status;
        assert_eq!(s.observed_generation, Some(4));
        assert_eq!((s.replicas, s.ready_replicas), (2, 2));
        assert_eq!(s.endpoint.as_deref(), Some("https://dco-webhook-a.dco-system.svc:443"));
        assert_eq!(
            cond(&s, condition::AVAILABLE),
            Some((
                "True",
                "ReplicasReady",
                "2 of 3 replicas of Deployment dco-system/dco-webhook-a are ready"
            ))
        );
        assert_eq!(
            cond(&s, condition::SERVICE_READY),
            Some(("True", "Applied", "Service dco-system/dco-webhook-a routes port 443 to the webhook Pods"))
        );
        assert_eq!(
            cond(&s, condition::CERTIFICATE_READY),
            Some((
                "True",
                "SelfManaged",
                "Secret dco-system/dco-webhook-a-tls holds a certificate for dco-webhook-a.dco-system.svc valid until 2027-01-16T08:00:00Z"
            ))
        );
        assert!(cond(&s, condition::DEFAULT_CONFLICT).is_none());
        // The order conditions are first written in: certificate, Service, Deployment.
        let types: Vec<_> = s.conditions.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(types, [condition::CERTIFICATE_READY, condition::SERVICE_READY, condition::AVAILABLE]);
    }

    #[test]
    fn no_ready_replica_is_not_available() {
        let names = ServerNames::new("a", "dco-system");
        let s = render(None, &facts(&names, Some(applied(0)))).status;
        assert_eq!(
            cond(&s, condition::AVAILABLE),
            Some((
                "False",
                "NoReadyReplicas",
                "0 of 3 replicas of Deployment dco-system/dco-webhook-a are ready"
            ))
        );
    }

    #[test]
    fn cert_manager_s_standing_is_the_certificate_condition() {
        let names = ServerNames::new("a", "dco-system");
        let pending =
            Standing { ready: false, reason: "CertificatePending", message: "not issued yet".into() };
        let a = Applied { certificate: Certificate::CertManager(pending), ..applied(2) };
        let s = render(None, &facts(&names, Some(a))).status;
        assert_eq!(
            cond(&s, condition::CERTIFICATE_READY),
            Some(("False", "CertificatePending", "not issued yet"))
        );
        let ready = Standing { ready: true, reason: "CertManager", message: "issued".into() };
        let a = Applied { certificate: Certificate::CertManager(ready), ..applied(2) };
        let s = render(Some(&s), &facts(&names, Some(a))).status;
        assert_eq!(cond(&s, condition::CERTIFICATE_READY), Some(("True", "CertManager", "issued")));
    }

    #[test]
    fn the_service_port_is_the_endpoint_s() {
        let names = ServerNames::new("a", "team");
        let a = Applied { service_port: 8443, ..applied(1) };
        let s = render(None, &facts(&names, Some(a))).status;
        assert_eq!(s.endpoint.as_deref(), Some("https://dco-webhook-a.team.svc:8443"));
        assert_eq!(cond(&s, condition::SERVICE_READY).map(|c| c.0), Some("True"));
    }

    #[test]
    fn several_defaults_conflict_until_one_is_left() {
        let names = ServerNames::new("a", "dco-system");
        let mut f = facts(&names, Some(applied(2)));
        f.default = true;
        f.other_defaults = vec!["b".into()];
        let s = render(None, &f).status;
        let (status, reason, message) = cond(&s, condition::DEFAULT_CONFLICT).unwrap();
        assert_eq!((status, reason), ("True", "SeveralDefaults"));
        assert!(message.starts_with("ConversionWebhookServers [\"b\"] also have spec.default: true"));

        // Not itself a default: the others' conflict is not this server's.
        f.default = false;
        assert!(cond(&render(Some(&s), &f).status, condition::DEFAULT_CONFLICT).is_none());
        // The only default left: the condition goes.
        f.default = true;
        f.other_defaults.clear();
        assert!(cond(&render(Some(&s), &f).status, condition::DEFAULT_CONFLICT).is_none());
    }

    #[test]
    fn a_held_deletion_keeps_the_workload_parts_and_sets_deletion_blocked() {
        let names = ServerNames::new("a", "dco-system");
        let before = render(None, &facts(&names, Some(applied(2)))).status;
        let mut f = facts(&names, None);
        f.generation = Some(5);
        f.deletion_blocked = Some("waits for CRDConversionConfig/widgets".into());
        f.leases =
            Aggregate { served_targets: vec!["t".into()], reporting_replicas: 1, ..Aggregate::default() };
        let s = render(Some(&before), &f).status;
        assert_eq!(s.observed_generation, Some(4), "cleanup applies nothing of generation 5");
        assert_eq!(
            cond(&s, condition::DELETION_BLOCKED),
            Some(("True", "ConfigsStillAssigned", "waits for CRDConversionConfig/widgets"))
        );
        assert_eq!(cond(&s, condition::AVAILABLE), cond(&before, condition::AVAILABLE));
        assert_eq!((s.served_targets.as_slice(), s.reporting_replicas), (&["t".to_string()][..], 1));
    }

    #[test]
    fn a_condition_keeps_its_transition_time_until_it_flips() {
        let names = ServerNames::new("a", "dco-system");
        let first = render(None, &facts(&names, Some(applied(0)))).status;
        let mut later = facts(&names, Some(applied(0)));
        later.now = now() + SignedDuration::from_secs(60);
        let same = render(Some(&first), &later).status;
        let at = |s: &ServerStatus| {
            conditions::find(&s.conditions, condition::AVAILABLE).unwrap().last_transition_time.0
        };
        assert_eq!(at(&same), now());
        later.applied = Some(applied(1));
        assert_eq!(at(&render(Some(&same), &later).status), later.now);
    }

    #[test]
    fn the_requeue_is_just_after_the_first_lease_expiry() {
        let names = ServerNames::new("a", "dco-system");
        let mut f = facts(&names, Some(applied(2)));
        assert_eq!(render(None, &f).lease_recheck, None, "no live Lease: the resync decides");
        f.leases.next_expiry = Some(now() + SignedDuration::from_secs(42));
        assert_eq!(render(None, &f).lease_recheck, Some(Duration::from_secs(43)));
        // Expiring this very second still waits one.
        f.leases.next_expiry = Some(now() - SignedDuration::from_secs(1));
        assert_eq!(render(None, &f).lease_recheck, Some(Duration::from_secs(1)));
        f.leases.next_expiry = Some(now() - SignedDuration::from_secs(5));
        assert_eq!(render(None, &f).lease_recheck, None, "a lapsed expiry falls back to the resync");
    }
}

//! What a config reconcile observes: the live target (one read, or the answer of our own
//! write), the compile against its schemas, the resolver's answer, whether the destination
//! can be wired to, and the Leases of every server the move involves. Everything the
//! handover machine decides on is in [`Observed::facts`]; the rest is what the status shows.

use std::collections::BTreeSet;

use dco_api::assign::Assignment;
use dco_api::config::ConversionConfig;
use dco_api::{ConversionWebhookServer, HandoverStatus, webhook_path};
use dco_state::handover::{Facts, Gone};
use k8s_openapi::jiff::Timestamp;
use kube::{Resource, ResourceExt};
use serde_json::Value;

use super::conflict::{self, ConflictStanding, Said};
use super::propagation::Propagation;
use super::reverts::Revert;
use super::target::{self, Wiring};
use crate::context::Context;
use crate::kinds::ConfigRef;
use crate::names;
use crate::served;

/// How many diagnostics a condition message lists before "and N more".
const MAX_LISTED: usize = 10;

/// One observation of a config's world.
#[derive(Clone, Debug)]
pub struct Observed {
    pub facts: Facts,
    pub now: Timestamp,
    /// `CustomResourceDefinition <name>` or `CompositeResourceDefinition <name>`.
    pub target_desc: String,
    /// The live target, `None` when it does not exist.
    pub target: Option<Value>,
    /// The compile against the live schemas; `None` without a target.
    pub compiled: Option<Compiled>,
    pub resolved: Result<Assignment, String>,
    pub established: bool,
    /// The wiring that sends the target's reviews to the resolved server, or why it cannot be
    /// built yet (no ready replica, no CA).
    pub dest_wiring: Result<Wiring, String>,
    /// Where this config stands among every config naming its target (`conflict.rs`).
    pub conflict: ConflictStanding,
    /// XRD targets: the verdict on the CRDs Crossplane generated from the XRD
    /// (`propagation.rs`); `None` for a CRD target, or without a target.
    pub propagation: Option<Propagation>,
    /// XRD targets: the Crossplane package that owns the XRD (`Some(None)`: none).
    pub package: Option<Option<String>>,
    /// A revert of the wiring by another writer, detected in this reconcile (`reverts.rs`).
    pub revert: Option<Revert>,
}

/// The engine's verdict on a config against the live target.
#[derive(Clone, Debug, PartialEq)]
pub struct Compiled {
    /// The report's fields for status; `None` when the target's schemas cannot be read.
    pub report: Option<Report>,
    /// `Ok((plan hash, Validated message))` or `Err((Validated reason, message))`.
    pub outcome: Result<(String, String), (&'static str, String)>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    pub spokes: Vec<dco_api::config::SpokeStatus>,
    pub overall_lossless: bool,
    pub schema_hash: String,
}

fn listed(items: &[String]) -> String {
    let mut s = items.iter().take(MAX_LISTED).cloned().collect::<Vec<_>>().join("; ");
    if items.len() > MAX_LISTED {
        s.push_str(&format!("; and {} more", items.len() - MAX_LISTED));
    }
    s
}

/// Compile `conversion` against `target` (every reconcile: a schema drift shows up here).
pub fn compile(conversion: &dco_api::ConversionSpec, target: &Value) -> Compiled {
    let t = match dco_engine::Target::from_value(target) {
        Ok(t) => t,
        Err(e) => {
            return Compiled {
                report: None,
                outcome: Err(("TargetUnreadable", format!("cannot read the target's schemas: {e}"))),
            };
        }
    };
    let compiled = dco_engine::compile(conversion, &t);
    let report = &compiled.report;
    let errors: Vec<String> = report.errors().map(|d| d.to_string()).collect();
    let warnings: Vec<String> = report.warnings().map(|d| d.to_string()).collect();
    let outcome = match compiled.plan {
        Some(plan) if errors.is_empty() => {
            let msg = if warnings.is_empty() {
                format!(
                    "compiles against the live schemas of {} (lossless: {})",
                    t.describe(),
                    report.overall_lossless
                )
            } else {
                format!("compiles with {} warning(s): {}", warnings.len(), listed(&warnings))
            };
            Ok((plan.hash(), msg))
        }
        _ => Err((
            "CompileFailed",
            if errors.is_empty() {
                "the engine produced no plan and no error; report this as a bug".to_string()
            } else {
                format!("{} error(s): {}", errors.len(), listed(&errors))
            },
        )),
    };
    Compiled {
        report: Some(Report {
            spokes: report.spokes.clone(),
            overall_lossless: report.overall_lossless,
            schema_hash: report.schema_hash.clone(),
        }),
        outcome,
    }
}

/// The wiring that sends `target`'s reviews to `server`, or why it cannot be built yet.
pub fn wiring_for(
    ctx: &Context,
    server: &ConversionWebhookServer,
    target: &str,
    review_versions: &[String],
) -> Result<Wiring, String> {
    let names = ctx.names(server);
    let ca_bundle = ctx.ca_bundle(server).ok_or_else(|| {
        format!(
            "Secret {}/{} has no ca.crt yet (the server's serving certificate is not issued)",
            names.namespace, names.tls_secret
        )
    })?;
    Ok(Wiring {
        namespace: names.namespace.clone(),
        service: names.service().to_string(),
        path: webhook_path(target),
        port: names::service_spec(server).port,
        ca_bundle,
        review_versions: if review_versions.is_empty() {
            vec!["v1".to_string()]
        } else {
            review_versions.to_vec()
        },
    })
}

/// Which server a target's `spec.conversion` names, by its Service.
pub fn wired_server(ctx: &Context, target: &Value) -> Option<String> {
    let (ns, svc) = target::wired_service(target)?;
    ctx.server_by_service(ns, svc).map(|s| s.name_any())
}

/// Whether the Service a target's `spec.conversion` names (`wired`, namespace and name) is a
/// server's that no longer exists: no server owns it (`owned`), and it is named as dco names
/// a server's Service, or as the Service of a server the config's handover or pin names
/// (`known`). Another webhook's Service is not ours to report. The server is named when
/// `known` or the Service's name tells it.
pub fn gone_wiring(wired: Option<(&str, &str)>, owned: bool, known: &[Option<&str>]) -> Option<Gone> {
    let (ns, svc) = wired?;
    if owned {
        return None;
    }
    let known = known.iter().flatten().find(|s| names::base(s) == svc).map(|s| s.to_string());
    let server = match (known, names::server_of_service(svc)) {
        (Some(s), _) => Some(s),
        (None, Some(read_back)) => read_back,
        (None, None) => return None,
    };
    Some(Gone { service: format!("{ns}/{svc}"), server })
}

/// The wiring to the resolved server when it is Available and its CA is issued.
pub fn destination_wiring<K: ConversionConfig>(
    ctx: &Context,
    cfg: &K,
    resolved: &Result<Assignment, String>,
) -> Result<Wiring, String> {
    let a = resolved.as_ref().map_err(Clone::clone)?;
    let server = ctx
        .server(&a.server)
        .ok_or_else(|| format!("ConversionWebhookServer {} is not in the cache yet", a.server))?;
    let available =
        server.status.as_ref().is_some_and(|s| dco_state::conditions::is_true(&s.conditions, "Available"));
    if !available {
        return Err(format!("ConversionWebhookServer {} has no ready replica yet", a.server));
    }
    wiring_for(ctx, &server, cfg.target_name(), &cfg.conversion().conversion_review_versions)
}

/// Why a target that does not exist holds everything up, and what to do.
pub fn target_missing(target_desc: &str) -> String {
    format!("{target_desc} does not exist; create it or fix the config's target name")
}

pub fn target_not_established(target_desc: &str) -> String {
    format!("{target_desc} is not Established yet; waiting for the apiserver to accept it")
}

/// Observe everything one settle of `state` needs. `configs` is every config of both kinds
/// (read from the apiserver: the caches hold only this replica's shards).
pub fn observe<K: ConversionConfig + Resource<DynamicType = ()>>(
    ctx: &Context,
    cfg: &K,
    live: Option<Value>,
    state: &HandoverStatus,
    new_traceparent: &str,
    configs: &[ConfigRef],
) -> Observed {
    let now = Timestamp::now();
    let tname = cfg.target_name();
    let target_desc = format!("{} {tname}", cfg.target_kind().kind_name());
    let verdict = conflict::judge(K::KIND, &cfg.name_any(), tname, configs);
    let compiled = live.as_ref().map(|t| compile(cfg.conversion(), t));
    let pin = cfg.conversion().webhook_server_ref.as_ref().map(|r| r.name.as_str());
    let resolved = ctx.servers().resolve(tname, pin).map_err(|e| e.to_string());
    let established = live.as_ref().is_some_and(target::established);
    let dest_wiring = destination_wiring(ctx, cfg, &resolved);
    let wired_to = live.as_ref().and_then(|t| wired_server(ctx, t));
    let wired_gone = gone_wiring(
        live.as_ref().and_then(target::wired_service),
        wired_to.is_some(),
        &[state.destination.as_deref(), state.source.as_deref(), pin],
    );

    // The servers a move can involve: where it goes, where it comes from, what the target names.
    let involved: BTreeSet<&str> = [
        resolved.as_ref().ok().map(|a| a.server.as_str()),
        state.source.as_deref(),
        state.destination.as_deref(),
        wired_to.as_deref(),
    ]
    .into_iter()
    .flatten()
    .collect();
    let leases = ctx.stores.leases.state();
    let servers = involved
        .into_iter()
        .filter_map(|name| {
            let server = ctx.server(name)?;
            let names = ctx.names(&server);
            let ready = server.status.as_ref().map_or(0, |s| s.ready_replicas);
            let mut r = served::replicas(
                leases.iter().map(|l| l.as_ref()),
                name,
                &names.namespace,
                tname,
                ready,
                now,
            );
            r.replicas = server.status.as_ref().map_or(0, |s| s.replicas);
            Some((name.to_string(), r))
        })
        .collect();

    let target_ready = match &live {
        None => Err(target_missing(&target_desc)),
        Some(_) if !established => Err(target_not_established(&target_desc)),
        Some(_) => Ok(()),
    };
    let facts = Facts {
        now: now.to_string(),
        destination: resolved.as_ref().map(|a| a.server.clone()).map_err(Clone::clone),
        // Without a target there is nothing to compile against; `target_ready` says why.
        compiled: match compiled.as_ref().map(|c| &c.outcome) {
            Some(Err((_, why))) => Err(why.clone()),
            _ => Ok(()),
        },
        target_ready,
        destination_ready: dest_wiring.as_ref().map(drop).map_err(Clone::clone),
        wiring_current: match (&dest_wiring, &live) {
            (Ok(w), Some(t)) => w.matches(t),
            _ => true,
        },
        wired_to,
        servers,
        new_traceparent: new_traceparent.to_string(),
        conflict: verdict.fact(&target_desc),
        wired_gone,
        // A CRD is what the apiserver reads; an XRD's generated CRDs are judged by the driver,
        // which reads them (`propagation.rs`).
        propagated: Ok(()),
    };
    Observed {
        facts,
        now,
        target_desc,
        target: live,
        compiled,
        resolved,
        established,
        dest_wiring,
        conflict: verdict,
        propagation: None,
        package: None,
        revert: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gone_wiring_is_a_dco_service_no_server_owns() {
        let svc = Some(("dco-system", "dco-webhook-critical"));
        let gone = |server: Option<&str>| {
            Some(Gone { service: "dco-system/dco-webhook-critical".into(), server: server.map(Into::into) })
        };
        // Owned by a server in the cache: wired, not gone.
        assert_eq!(gone_wiring(svc, true, &[]), None);
        // Nobody owns it: the server is named by the handover, or read back from the name.
        assert_eq!(gone_wiring(svc, false, &[None, Some("critical")]), gone(Some("critical")));
        assert_eq!(gone_wiring(svc, false, &[]), gone(Some("critical")));
        // A shortened name cannot be read back, but the handover may know it.
        let long = "c".repeat(80);
        let hashed = names::base(&long);
        let got = gone_wiring(Some(("ns", &hashed)), false, &[]).unwrap();
        assert_eq!((got.service, got.server), (format!("ns/{hashed}"), None));
        let got = gone_wiring(Some(("ns", &hashed)), false, &[Some("other"), Some(&long)]).unwrap();
        assert_eq!(got.server.as_deref(), Some(long.as_str()));
        // Another webhook's Service, or no webhook at all: not ours to report.
        assert_eq!(gone_wiring(Some(("ns", "reference-webhook")), false, &[Some("critical")]), None);
        assert_eq!(gone_wiring(None, false, &[Some("critical")]), None);
    }
}

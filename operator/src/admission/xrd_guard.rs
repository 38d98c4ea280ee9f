//! The XRD guard (docs/admission.md, "The XRD guard"): a mutating webhook on updates of
//! Crossplane's CompositeResourceDefinitions that keeps the `spec.conversion` dco wired when
//! another writer's update would drop or change it. Crossplane's package manager replaces an
//! XRD it installed from a package with the package's copy (a whole-object update that carries
//! no `spec.conversion`); without the guard the generated CRDs lose the webhook until the
//! operator wires it again.
//!
//! [`decide`] is the rule, a pure function of the old and new object, the writer's field
//! manager and the Services of this operator's servers. [`review`] answers an AdmissionReview
//! with it: a JSON patch that puts the old `spec.conversion` back, or the object unchanged.
//! Registered with `failurePolicy: Ignore` (registration.rs): a guard that cannot answer
//! never blocks a write of an XRD, it only lets the revert through, which the operator heals.

use kube::ResourceExt;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview};
use kube::runtime::reflector::Store;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use serde_json::{Value, json};

use dco_api::ConversionWebhookServer;
use dco_api::target::{STRATEGY_WEBHOOK, wired_service};

use super::metrics::GuardLabels;
use crate::names::{FIELD_MANAGER, ServerNames};

/// Where the apiserver posts the guard's reviews.
pub const PATH: &str = "/mutate-xrd";

/// What the guard answers one update with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// The write goes through as it is; why, for the debug log.
    Admit(&'static str),
    /// The old `spec.conversion` goes back into the object (`conversion`); `service` is the
    /// `namespace/name` it calls, `dropped` whether the write removed it (else changed it).
    Restore { conversion: Value, service: String, dropped: bool },
}

impl Decision {
    /// The JSON patch of a restore: one `add` of `/spec/conversion` (an `add` replaces a
    /// member that exists, so it serves a drop and a change alike).
    pub fn patch(&self) -> Option<Value> {
        match self {
            Decision::Admit(_) => None,
            Decision::Restore { conversion, .. } => {
                Some(json!([{"op": "add", "path": "/spec/conversion", "value": conversion}]))
            }
        }
    }
}

/// One update as the guard sees it.
#[derive(Clone, Copy, Debug)]
pub struct Update<'a> {
    /// The XRD's name: dco's wiring calls `/convert/<name>`.
    pub name: &'a str,
    pub old: Option<&'a Value>,
    pub new: Option<&'a Value>,
    /// The writer's field manager (the request's options), if it named one.
    pub field_manager: Option<&'a str>,
}

/// Whether `old`'s `spec.conversion` is dco's wiring: strategy Webhook, a Service that is one
/// of this operator's servers' (`is_server_service(namespace, name)`), and the path dco gives
/// this XRD (`/convert/<name>`). A URL webhook, another webhook's Service, or a path of
/// another target is someone else's, and any other shape (a missing service, a non-string
/// name) is not dco's either.
pub fn is_dco_wiring(
    name: &str,
    xrd: &Value,
    is_server_service: &dyn Fn(&str, &str) -> bool,
) -> Option<String> {
    let (ns, svc) = wired_service(xrd)?;
    let conv = xrd.pointer("/spec/conversion")?;
    if conv.get("strategy").and_then(Value::as_str) != Some(STRATEGY_WEBHOOK) || !is_server_service(ns, svc) {
        return None;
    }
    let path = conv.pointer("/webhook/clientConfig/service/path").and_then(Value::as_str);
    (path == Some(dco_api::webhook_path(name).as_str())).then(|| format!("{ns}/{svc}"))
}

/// The rule. An update is restored only when all of these hold: the writer is not dco's
/// operator (field manager [`FIELD_MANAGER`]: its own moves and unwiring go through); the old
/// object carries dco's wiring ([`is_dco_wiring`]); the new object is an object with a `spec`
/// object; and the new `spec.conversion` differs from the old one (missing, null or other).
pub fn decide(u: &Update<'_>, is_server_service: &dyn Fn(&str, &str) -> bool) -> Decision {
    if u.field_manager == Some(FIELD_MANAGER) {
        return Decision::Admit("dco's own write");
    }
    let (Some(old), Some(new)) = (u.old, u.new) else { return Decision::Admit("not an update") };
    let Some(service) = is_dco_wiring(u.name, old, is_server_service) else {
        return Decision::Admit("the old spec.conversion is not dco's wiring");
    };
    if !new.get("spec").is_some_and(Value::is_object) {
        // The apiserver's schema refuses an XRD without a spec object; nothing to patch into.
        return Decision::Admit("the new object has no spec object");
    }
    let (was, now) = (old.pointer("/spec/conversion"), new.pointer("/spec/conversion"));
    if was == now {
        return Decision::Admit("spec.conversion unchanged");
    }
    Decision::Restore {
        conversion: was.cloned().unwrap_or(Value::Null),
        service,
        dropped: now.is_none_or(Value::is_null),
    }
}

/// What the guard's handler reads: the servers (their Services) and the counter.
#[derive(Clone)]
pub struct Guard {
    pub servers: Store<ConversionWebhookServer>,
    /// The operator's namespace: a server without `spec.namespace` runs there.
    pub namespace: String,
    /// `dco_operator_xrd_guard_restores_total{dry_run}`: updates answered with a restore.
    /// Crossplane's package manager dry-runs each update and then sends what the dry run
    /// answered: the restore of its dry run is the one that keeps the wiring, and the real
    /// update then carries it unchanged.
    pub restores: Family<GuardLabels, Counter>,
}

impl Guard {
    fn is_server_service(&self, namespace: &str, service: &str) -> bool {
        self.servers.state().iter().any(|s| {
            let n = ServerNames::of(s, &self.namespace);
            n.namespace == namespace && n.service() == service
        })
    }

    /// The answer to one review: allowed always, with the restoring patch when [`decide`]
    /// says so.
    pub fn review(&self, review: AdmissionReview<DynamicObject>) -> AdmissionReview<DynamicObject> {
        let req: AdmissionRequest<DynamicObject> = match review.try_into() {
            Ok(r) => r,
            Err(e) => return AdmissionResponse::invalid(e).into_review(),
        };
        let resp = AdmissionResponse::from(&req);
        let as_value = |o: &Option<DynamicObject>| o.as_ref().and_then(|o| serde_json::to_value(o).ok());
        let (old, new) = (as_value(&req.old_object), as_value(&req.object));
        let manager = req.options.as_ref().and_then(|o| o.0.get("fieldManager")).and_then(Value::as_str);
        let name = req.object.as_ref().map(ResourceExt::name_any).unwrap_or_else(|| req.name.clone());
        let update = Update { name: &name, old: old.as_ref(), new: new.as_ref(), field_manager: manager };
        let decision = decide(&update, &|ns, svc| self.is_server_service(ns, svc));
        let patch = decision.patch().and_then(|p| serde_json::from_value::<json_patch::Patch>(p).ok());
        match (&decision, patch) {
            (Decision::Restore { service, dropped, .. }, Some(patch)) => {
                let writer = req.user_info.username.as_deref().unwrap_or_default();
                self.restores
                    .get_or_create(&GuardLabels { dry_run: if req.dry_run { "true" } else { "false" } })
                    .inc();
                tracing::info!(xrd = %name, %service, writer, field_manager = manager.unwrap_or_default(),
                    dropped, dry_run = req.dry_run,
                    "XRD guard: an update would have dropped or changed dco's spec.conversion; restored it");
                match resp.clone().with_patch(patch) {
                    Ok(r) => r.into_review(),
                    Err(e) => {
                        tracing::warn!(xrd = %name, error = %e, "XRD guard: cannot serialize the patch");
                        resp.into_review()
                    }
                }
            }
            (d, _) => {
                tracing::debug!(xrd = %name, decision = ?d, "XRD guard: update admitted as it is");
                resp.into_review()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const XRD: &str = "xwidgets.example.org";

    fn wiring(ns: &str, svc: &str, path: &str) -> Value {
        json!({"strategy": "Webhook", "webhook": {"conversionReviewVersions": ["v1"],
            "clientConfig": {"caBundle": "Q0E=", "service": {"namespace": ns, "name": svc, "path": path, "port": 443}}}})
    }

    fn xrd(conversion: Option<Value>) -> Value {
        let mut x = json!({"apiVersion": "apiextensions.crossplane.io/v2", "kind": "CompositeResourceDefinition",
            "metadata": {"name": XRD}, "spec": {"group": "example.org", "scope": "Namespaced"}});
        if let Some(c) = conversion {
            x["spec"]["conversion"] = c;
        }
        x
    }

    fn ours(ns: &str, svc: &str) -> bool {
        ns == "dco-system" && svc == "dco-webhook-a"
    }

    fn decide_for(old: &Value, new: &Value, manager: Option<&str>) -> Decision {
        decide(&Update { name: XRD, old: Some(old), new: Some(new), field_manager: manager }, &ours)
    }

    #[test]
    fn a_dropped_wiring_is_restored_by_one_add() {
        let w = wiring("dco-system", "dco-webhook-a", "/convert/xwidgets.example.org");
        let d = decide_for(&xrd(Some(w.clone())), &xrd(None), None);
        assert_eq!(
            d,
            Decision::Restore {
                conversion: w.clone(),
                service: "dco-system/dco-webhook-a".into(),
                dropped: true
            }
        );
        assert_eq!(d.patch(), Some(json!([{"op": "add", "path": "/spec/conversion", "value": w}])));
        // Applied, the patch gives back the old object's spec.conversion exactly.
        let mut new = xrd(None);
        json_patch::patch(
            &mut new,
            &serde_json::from_value::<json_patch::Patch>(d.patch().unwrap()).unwrap(),
        )
        .unwrap();
        assert_eq!(new, xrd(Some(w.clone())));
        // An explicit null is a drop too.
        let mut null = xrd(None);
        null["spec"]["conversion"] = Value::Null;
        assert!(matches!(
            decide_for(&xrd(Some(w)), &null, Some("crossplane")),
            Decision::Restore { dropped: true, .. }
        ));
    }

    #[test]
    fn a_changed_wiring_is_restored() {
        let w = wiring("dco-system", "dco-webhook-a", "/convert/xwidgets.example.org");
        for other in [json!({"strategy": "None"}), wiring("elsewhere", "their-webhook", "/convert")] {
            let d = decide_for(&xrd(Some(w.clone())), &xrd(Some(other)), Some("kubectl-edit"));
            assert_eq!(
                d,
                Decision::Restore {
                    conversion: w.clone(),
                    service: "dco-system/dco-webhook-a".into(),
                    dropped: false
                }
            );
            let mut new = xrd(Some(json!({"strategy": "None"})));
            json_patch::patch(
                &mut new,
                &serde_json::from_value::<json_patch::Patch>(d.patch().unwrap()).unwrap(),
            )
            .unwrap();
            assert_eq!(new["spec"]["conversion"], w);
        }
    }

    #[test]
    fn unchanged_and_dcos_own_writes_go_through() {
        let w = wiring("dco-system", "dco-webhook-a", "/convert/xwidgets.example.org");
        let mut relabelled = xrd(Some(w.clone()));
        relabelled["metadata"]["labels"] = json!({"pkg.crossplane.io/revision": "r2"});
        assert_eq!(
            decide_for(&xrd(Some(w.clone())), &relabelled, None),
            Decision::Admit("spec.conversion unchanged")
        );
        // dco's operator unwires (strategy None) or moves the target: its own field manager.
        for new in [xrd(Some(json!({"strategy": "None"}))), xrd(None)] {
            assert_eq!(
                decide_for(&xrd(Some(w.clone())), &new, Some(FIELD_MANAGER)),
                Decision::Admit("dco's own write")
            );
        }
    }

    #[test]
    fn wiring_that_is_not_dcos_is_left_alone() {
        let not_ours = [
            // Another webhook's Service, a dco-shaped Service of no server of this operator,
            // another target's path, a URL webhook, strategy None.
            wiring("dco-system", "their-webhook", "/convert/xwidgets.example.org"),
            wiring("other-ns", "dco-webhook-a", "/convert/xwidgets.example.org"),
            wiring("dco-system", "dco-webhook-a", "/convert/xgadgets.example.org"),
            json!({"strategy": "Webhook", "webhook": {"clientConfig": {"url": "https://x/convert/xwidgets.example.org"}}}),
            json!({"strategy": "None"}),
        ];
        for old in not_ours {
            let d = decide_for(&xrd(Some(old.clone())), &xrd(None), None);
            assert_eq!(d, Decision::Admit("the old spec.conversion is not dco's wiring"), "{old}");
            assert_eq!(d.patch(), None);
        }
        assert_eq!(
            decide_for(&xrd(None), &xrd(None), None),
            Decision::Admit("the old spec.conversion is not dco's wiring")
        );
    }

    #[test]
    fn malformed_objects_are_admitted_unpatched() {
        let w = wiring("dco-system", "dco-webhook-a", "/convert/xwidgets.example.org");
        let malformed = [
            json!({"strategy": "Webhook", "webhook": {"clientConfig": {"service": {"name": 7, "namespace": "dco-system"}}}}),
            json!({"strategy": "Webhook", "webhook": {"clientConfig": {}}}),
            json!({"strategy": ["Webhook"]}),
            json!("Webhook"),
        ];
        for old in malformed {
            assert_eq!(
                decide_for(&xrd(Some(old.clone())), &xrd(None), None),
                Decision::Admit("the old spec.conversion is not dco's wiring"),
                "{old}"
            );
        }
        for new in [json!({"metadata": {"name": XRD}}), json!({"spec": "x"}), json!(null)] {
            assert_eq!(
                decide_for(&xrd(Some(w.clone())), &new, None),
                Decision::Admit("the new object has no spec object")
            );
        }
        let only_new = Update { name: XRD, old: None, new: Some(&w), field_manager: None };
        assert_eq!(decide(&only_new, &ours), Decision::Admit("not an update"));
    }
}

//! XRDs a Crossplane package owns, and reverts of dco's wiring by other writers. The package
//! manager installs an XRD from a Configuration package and rewrites it from the package on
//! every resync (an Update of the whole object, not an apply), which drops the
//! `spec.conversion` dco applied. Each such revert is detected here, purely, from the config's
//! persisted status and the fresh read of the XRD (its `managedFields` say who wrote
//! `spec.conversion`), and healed by the handover machine, which re-wires a settled target
//! whose wiring drifted (`docs/operations.md`, "XRDs a package manages").

use dco_api::ConfigStatus;
use dco_api::HandoverState;
use dco_api::config::RevertStatus;
use dco_api::target::Wiring;
use serde_json::Value;

use super::propagation::differs;
use crate::names::FIELD_MANAGER;

/// The API group of Crossplane's package kinds.
const PKG_GROUP: &str = "pkg.crossplane.io/";
/// The kinds of a package that own the objects it installs.
const PKG_OWNERS: [&str; 2] = ["ConfigurationRevision", "Configuration"];
/// The label Crossplane puts on what belongs to a package (`pkg.crossplane.io/package`).
const PKG_LABEL: &str = "pkg.crossplane.io/package";

/// The Crossplane package that owns `xrd`, described (`ConfigurationRevision x-1a2b`), if any:
/// an ownerReference of a package kind, or the package label.
pub fn package_owner(xrd: &Value) -> Option<String> {
    let owners = xrd.pointer("/metadata/ownerReferences").and_then(Value::as_array);
    let by_owner = owners.into_iter().flatten().find(|o| {
        let api = o["apiVersion"].as_str().unwrap_or_default();
        let kind = o["kind"].as_str().unwrap_or_default();
        api.starts_with(PKG_GROUP) && PKG_OWNERS.contains(&kind)
    });
    if let Some(o) = by_owner {
        return Some(format!("{} {}", o["kind"].as_str()?, o["name"].as_str()?));
    }
    let label = xrd.pointer("/metadata/labels").and_then(|l| l.get(PKG_LABEL)).and_then(Value::as_str)?;
    Some(format!("package {label} (label {PKG_LABEL})"))
}

/// One revert of the wiring: who wrote `spec.conversion`, and what they changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Revert {
    pub writer: String,
    pub change: String,
}

/// Whether `fields` (a managedFields entry's `fieldsV1`) holds any of `spec.conversion`.
fn owns_conversion(entry: &Value) -> bool {
    entry.pointer("/fieldsV1/f:spec/f:conversion").is_some()
}

/// Who wrote the XRD's `spec.conversion` last: the manager other than dco that now owns a part
/// of it (the latest by time); when nobody owns it any more (an Update dropped the field), the
/// last Update of the object's spec by another manager. `None` when only dco owns it: the
/// XRD still carries what dco wrote (an older wiring a refresh brings up to date).
pub fn conversion_writer(xrd: &Value) -> Option<String> {
    let entries = xrd.pointer("/metadata/managedFields").and_then(Value::as_array)?;
    // Status and other subresources never carry spec.
    let main =
        || entries.iter().filter(|e| e.get("subresource").and_then(Value::as_str).unwrap_or("").is_empty());
    let latest = |it: Box<dyn Iterator<Item = &Value> + '_>| {
        it.filter(|e| e["manager"].as_str().is_some_and(|m| m != FIELD_MANAGER))
            .max_by(|a, b| a["time"].as_str().cmp(&b["time"].as_str()))
            .and_then(|e| e["manager"].as_str().map(str::to_string))
    };
    if let Some(other) = latest(Box::new(main().filter(|e| owns_conversion(e)))) {
        return Some(other);
    }
    if main().any(owns_conversion) {
        return None;
    }
    latest(Box::new(main().filter(|e| e["operation"] == "Update")))
        .or_else(|| Some("an unknown writer".to_string()))
}

/// A revert of the wiring dco applied, if the fresh read shows one: the persisted handover
/// had settled the XRD on its server (dco's wiring written and confirmed), the XRD no longer
/// carries `applied` (the wiring dco wrote for that server), and the writer of its
/// `spec.conversion` is not dco. Not the `Applied` condition: a generated CRD lagging for a
/// moment (Crossplane re-rendering) turns it False while the XRD still carries dco's wiring,
/// and a revert then must still count. Counted once: the machine leaves the settled state in
/// the reconcile that sees it. Pure: the persisted status and the fresh read decide.
pub fn detect(prev: Option<&ConfigStatus>, applied: Option<&Wiring>, xrd: &Value) -> Option<Revert> {
    let prev = prev?;
    let settled = prev.handover.as_ref().is_some_and(|h| h.state == HandoverState::SourceDropped);
    if !settled {
        return None;
    }
    let change = differs(applied?, xrd)?;
    let writer = conversion_writer(xrd)?;
    Some(Revert { writer, change })
}

/// Seconds from dco's last write of the XRD's `spec.conversion` (its managedFields entry's
/// time, whole seconds) to `now`: the propagation lag once the generated CRDs carry it.
pub fn since_dco_wrote(xrd: &Value, now: k8s_openapi::jiff::Timestamp) -> Option<f64> {
    let entries = xrd.pointer("/metadata/managedFields").and_then(Value::as_array)?;
    let wrote = entries
        .iter()
        .filter(|e| e["manager"] == FIELD_MANAGER && owns_conversion(e))
        .filter_map(|e| e["time"].as_str()?.parse::<k8s_openapi::jiff::Timestamp>().ok())
        .max()?;
    let lag = now.duration_since(wrote).as_secs_f64();
    Some(lag.max(0.0))
}

/// `status.reverts` after `revert` was detected at `now`.
pub fn record(prev: Option<&RevertStatus>, revert: &Revert, now: &str) -> RevertStatus {
    RevertStatus {
        count: prev.map_or(0, |r| r.count).saturating_add(1),
        last_detected: Some(now.to_string()),
        last_writer: Some(revert.writer.clone()),
        last_change: Some(revert.change.clone()),
    }
}

#[cfg(test)]
mod tests {
    use dco_api::HandoverStatus;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
    use k8s_openapi::jiff::Timestamp;
    use serde_json::json;

    use super::*;

    fn wiring() -> Wiring {
        crate::testing::wiring("xdbs.example.org")
    }

    fn applied_status(applied: bool, state: HandoverState) -> ConfigStatus {
        ConfigStatus {
            conditions: vec![Condition {
                type_: crate::config::condition::APPLIED.into(),
                status: if applied { "True" } else { "False" }.into(),
                reason: "Wired".into(),
                message: String::new(),
                observed_generation: None,
                last_transition_time: Time(Timestamp::UNIX_EPOCH),
            }],
            handover: Some(HandoverStatus { state, destination: Some("a".into()), ..Default::default() }),
            ..Default::default()
        }
    }

    fn entry(manager: &str, op: &str, time: &str, conversion: bool, subresource: Option<&str>) -> Value {
        let mut fields = json!({"f:spec": {"f:group": {}}});
        if conversion {
            fields["f:spec"]["f:conversion"] = json!({"f:strategy": {}});
        }
        let mut e = json!({"manager": manager, "operation": op, "time": time, "fieldsV1": fields});
        if let Some(s) = subresource {
            e["subresource"] = json!(s);
            e["fieldsV1"] = json!({"f:status": {}});
        }
        e
    }

    fn xrd(conversion: Option<Value>, managed: Vec<Value>) -> Value {
        let mut x = json!({"metadata": {"name": "xdbs.example.org", "managedFields": managed}, "spec": {"group": "example.org"}});
        if let Some(c) = conversion {
            x["spec"]["conversion"] = c;
        }
        x
    }

    /// The package manager's Update dropped spec.conversion: nobody owns it any more, and the
    /// writer is the last Update of the spec (not Crossplane's status writes).
    #[test]
    fn a_package_managers_update_that_drops_the_wiring_is_a_revert_naming_it() {
        let prev = applied_status(true, HandoverState::SourceDropped);
        let x = xrd(
            None,
            vec![
                entry("dco-operator", "Apply", "2026-12-02T10:00:00Z", false, None),
                entry("crossplane", "Update", "2026-12-02T10:00:05Z", false, None),
                entry("crossplane", "Update", "2026-12-02T10:00:09Z", false, Some("status")),
                entry("kubectl-create", "Update", "2026-12-02T09:00:00Z", false, None),
            ],
        );
        let r = detect(Some(&prev), Some(&wiring()), &x).expect("a revert");
        assert_eq!(r.writer, "crossplane");
        assert_eq!(r.change, "it has no spec.conversion (strategy None)");
        let st = record(Some(&RevertStatus { count: 4, ..Default::default() }), &r, "2026-12-02T10:00:06Z");
        assert_eq!((st.count, st.last_writer.as_deref()), (5, Some("crossplane")));
    }

    /// Another manager took spec.conversion over (kubectl edit to another Service).
    #[test]
    fn an_edit_by_another_manager_is_a_revert_naming_it() {
        let prev = applied_status(true, HandoverState::SourceDropped);
        let other = Wiring { service: "their-webhook".into(), ..wiring() };
        let x = xrd(
            Some(serde_json::to_value(other.conversion()).unwrap()),
            vec![
                entry("dco-operator", "Apply", "2026-12-02T10:00:00Z", true, None),
                entry("kubectl-edit", "Update", "2026-12-02T10:01:00Z", true, None),
            ],
        );
        let r = detect(Some(&prev), Some(&wiring()), &x).unwrap();
        assert_eq!(r.writer, "kubectl-edit");
        assert!(r.change.contains("their-webhook"), "{}", r.change);
    }

    /// Not reverts: dco's own older wiring (a CA to refresh), a config that was not Applied or
    /// not settled, a wiring that still matches, nothing applied to compare with.
    #[test]
    fn dcos_own_writes_and_unsettled_configs_are_not_reverts() {
        let prev = applied_status(true, HandoverState::SourceDropped);
        let old_ca = Wiring { ca_bundle: "OLD".into(), ..wiring() };
        let ours = vec![entry("dco-operator", "Apply", "2026-12-02T10:00:00Z", true, None)];
        let stale = xrd(Some(serde_json::to_value(old_ca.conversion()).unwrap()), ours.clone());
        assert_eq!(detect(Some(&prev), Some(&wiring()), &stale), None);
        let current = xrd(Some(serde_json::to_value(wiring().conversion()).unwrap()), ours);
        assert_eq!(detect(Some(&prev), Some(&wiring()), &current), None);
        let dropped = xrd(None, vec![entry("crossplane", "Update", "2026-12-02T10:00:05Z", false, None)]);
        assert!(detect(Some(&prev), Some(&wiring()), &dropped).is_some());
        // Moving (not settled): the wiring is the machine's to change, not a revert.
        for moving in [HandoverState::Compiling, HandoverState::DestinationReady, HandoverState::Patched] {
            assert_eq!(detect(Some(&applied_status(true, moving)), Some(&wiring()), &dropped), None);
        }
        // Settled but not Applied for a moment (a generated CRD lagging): still a revert.
        let lagging = applied_status(false, HandoverState::SourceDropped);
        assert!(detect(Some(&lagging), Some(&wiring()), &dropped).is_some());
        assert_eq!(detect(None, Some(&wiring()), &dropped), None);
        assert_eq!(detect(Some(&prev), None, &dropped), None);
    }

    #[test]
    fn the_lag_runs_from_dcos_write_of_the_conversion() {
        let x = xrd(
            None,
            vec![
                entry("dco-operator", "Apply", "2026-12-02T10:00:00Z", true, None),
                entry("crossplane", "Update", "2026-12-02T10:00:30Z", false, Some("status")),
            ],
        );
        let now: Timestamp = "2026-12-02T10:00:02.5Z".parse().unwrap();
        assert_eq!(since_dco_wrote(&x, now), Some(2.5));
        assert_eq!(since_dco_wrote(&xrd(None, vec![]), now), None);
    }

    #[test]
    fn a_package_owns_an_xrd_by_owner_reference_or_label() {
        let owned = json!({"metadata": {"ownerReferences": [
            {"apiVersion": "apiextensions.crossplane.io/v1", "kind": "CompositeResourceDefinition", "name": "x", "uid": "1"},
            {"apiVersion": "pkg.crossplane.io/v1", "kind": "ConfigurationRevision", "name": "platform-1a2b", "uid": "2", "controller": true},
        ]}});
        assert_eq!(package_owner(&owned).as_deref(), Some("ConfigurationRevision platform-1a2b"));
        let labelled = json!({"metadata": {"labels": {"pkg.crossplane.io/package": "platform"}}});
        assert_eq!(
            package_owner(&labelled).as_deref(),
            Some("package platform (label pkg.crossplane.io/package)")
        );
        let other = json!({"metadata": {"ownerReferences": [
            {"apiVersion": "example.org/v1", "kind": "ConfigurationRevision", "name": "n", "uid": "3"}]}});
        assert_eq!(package_owner(&other), None);
        assert_eq!(package_owner(&json!({"metadata": {}})), None);
    }
}

//! A config's target (a CRD, or a Crossplane XRD) as JSON: reading it from the apiserver and
//! server-side applying its `spec.conversion` (the only field of a target the operator ever
//! writes). What that field says, written and read, is `dco_api::target`'s, shared with the
//! webhook's hold rule.

use dco_api::config::TargetKind;
pub use dco_api::target::{Wiring, wired_service, xrd_resource};
use dco_api::target::{apply_body, unwired};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceConversion, CustomResourceDefinition,
};
use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::Value;

use crate::error::{Error, Result};
use crate::names::FIELD_MANAGER;

/// Read the target from the apiserver (authoritative: the wiring the handover reads must not
/// lag behind the operator's own last patch), as every webhook replica reads it
/// (`dco_api::cluster`). `None` when it does not exist — including XRDs on a cluster without
/// Crossplane.
pub async fn fetch(client: &Client, kind: TargetKind, name: &str) -> Result<Option<Value>> {
    let read = Error::kube("read", kind.kind_name(), name);
    let Some(o) = dco_api::cluster::fetch_target(client, kind, name).await.map_err(read)? else {
        return Ok(None);
    };
    dco_api::cluster::target_json(kind, o)
        .map(Some)
        .map_err(|source| Error::Serialize { what: format!("{} {name}", kind.kind_name()), source })
}

fn to_json(kind: TargetKind, name: &str, o: impl serde::Serialize) -> Result<Value> {
    serde_json::to_value(o)
        .map_err(|source| Error::Serialize { what: format!("{} {name}", kind.kind_name()), source })
}

/// `status.conditions[Established]` is True.
pub fn established(target: &Value) -> bool {
    target
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| cs.iter().any(|c| c["type"] == "Established" && c["status"] == "True"))
}

/// How many versions the target serves.
pub fn served_versions(target: &Value) -> usize {
    target
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .map_or(0, |vs| vs.iter().filter(|v| v["served"].as_bool().unwrap_or(false)).count())
}

async fn apply(
    client: &Client,
    kind: TargetKind,
    name: &str,
    conversion: &CustomResourceConversion,
    action: &'static str,
) -> Result<Value> {
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    let body = apply_body(kind, name, conversion);
    let failed = Error::kube(action, kind.kind_name(), name);
    match kind {
        TargetKind::Crd => {
            let api: Api<CustomResourceDefinition> = Api::all(client.clone());
            to_json(kind, name, api.patch(name, &pp, &Patch::Apply(&body)).await.map_err(failed)?)
        }
        TargetKind::Xrd => {
            let api: Api<DynamicObject> = Api::all_with(client.clone(), &xrd_resource());
            to_json(kind, name, api.patch(name, &pp, &Patch::Apply(&body)).await.map_err(failed)?)
        }
    }
}

/// Server-side apply `spec.conversion` so reviews go to `wiring`; returns the target after.
pub async fn wire(client: &Client, kind: TargetKind, name: &str, wiring: &Wiring) -> Result<Value> {
    apply(client, kind, name, &wiring.conversion(), "wire spec.conversion of").await
}

/// Give `spec.conversion` back: strategy None, and the webhook fields this manager owned go.
pub async fn unwire(client: &Client, kind: TargetKind, name: &str) -> Result<Value> {
    apply(client, kind, name, &unwired(), "revert spec.conversion of").await
}

// What `spec.conversion` says, written and read, is tested in `api/src/target.rs`.
#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn reads_established_and_served_versions() {
        let target = json!({
            "spec": {"versions": [{"name": "v1", "served": true}, {"name": "v2", "served": true}, {"name": "v0", "served": false}]},
            "status": {"conditions": [{"type": "Established", "status": "True"}]},
        });
        assert!(established(&target));
        assert_eq!(served_versions(&target), 2);
        assert!(!established(
            &json!({"status": {"conditions": [{"type": "Established", "status": "False"}]}})
        ));
        assert_eq!(served_versions(&json!({"spec": {}})), 0);
    }
}

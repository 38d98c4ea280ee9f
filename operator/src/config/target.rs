//! A config's target (a CRD, or a Crossplane XRD) as JSON: reading it from the apiserver and
//! server-side applying its `spec.conversion` (the only field of a target the operator ever
//! writes). What that field says, written and read, is `dco_api::target`'s, shared with the
//! webhook's hold rule. XRDs are read and written through the API version the cluster serves
//! (`Context::xrd_api`: `v2` where served, `v1` while it is the only one).

use dco_api::config::TargetKind;
use dco_api::crossplane::{XrdApi, XrdVersion};
pub use dco_api::target::{Wiring, wired_service};
use dco_api::target::{apply_body, unwired};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceConversion, CustomResourceDefinition,
};
use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::Value;

use crate::context::Context;
use crate::error::{Error, Result};
use crate::names::FIELD_MANAGER;

/// Read the target from the apiserver (authoritative: the wiring the handover reads must not
/// lag behind the operator's own last patch), as every webhook replica reads it
/// (`dco_api::cluster`). `None` when it does not exist — including XRDs on a cluster without
/// Crossplane.
pub async fn fetch(ctx: &Context, kind: TargetKind, name: &str) -> Result<Option<Value>> {
    read(&ctx.client, kind, ctx.xrd_api().await, name).await
}

async fn read(client: &Client, kind: TargetKind, xrds: XrdApi, name: &str) -> Result<Option<Value>> {
    let failed = Error::kube("read", kind.kind_name(), name);
    let Some(o) =
        dco_api::cluster::fetch_target(client, kind, xrds.preferred(), name).await.map_err(failed)?
    else {
        return Ok(None);
    };
    let at = xrds.preferred().unwrap_or(XrdVersion::V2);
    dco_api::cluster::target_json(kind, at, o)
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

/// The version to write XRD `name` through: the preferred one, unless the XRD's scope needs
/// `v1` (`XrdApi::for_write`), which only a read can tell while both are served (the scope is
/// immutable, so the read cannot go stale). An error names what to install when XRDs are not
/// served at all.
async fn write_version(client: &Client, xrds: XrdApi, name: &str) -> Result<XrdVersion> {
    let Some(preferred) = xrds.preferred() else {
        return Err(Error::NotReady(format!(
            "cannot write CompositeResourceDefinition {name}: Crossplane is not installed (apiextensions.crossplane.io serves neither v1 nor v2); install Crossplane or delete the config"
        )));
    };
    if !(xrds.v1 && xrds.v2) {
        return Ok(preferred);
    }
    let live = read(client, TargetKind::Xrd, xrds, name).await?;
    Ok(live.as_ref().and_then(|t| xrds.for_write(t)).unwrap_or(preferred))
}

async fn apply(
    ctx: &Context,
    kind: TargetKind,
    name: &str,
    conversion: &CustomResourceConversion,
    action: &'static str,
) -> Result<Value> {
    let client = &ctx.client;
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    let failed = Error::kube(action, kind.kind_name(), name);
    match kind {
        TargetKind::Crd => {
            let body = apply_body(kind, XrdVersion::V2, name, conversion);
            let api: Api<CustomResourceDefinition> = Api::all(client.clone());
            to_json(kind, name, api.patch(name, &pp, &Patch::Apply(&body)).await.map_err(failed)?)
        }
        TargetKind::Xrd => {
            let at = write_version(client, ctx.xrd_api().await, name).await?;
            let body = apply_body(kind, at, name, conversion);
            let api: Api<DynamicObject> = Api::all_with(client.clone(), &at.resource());
            to_json(kind, name, api.patch(name, &pp, &Patch::Apply(&body)).await.map_err(failed)?)
        }
    }
}

/// Server-side apply `spec.conversion` so reviews go to `wiring`; returns the target after.
pub async fn wire(ctx: &Context, kind: TargetKind, name: &str, wiring: &Wiring) -> Result<Value> {
    apply(ctx, kind, name, &wiring.conversion(), "wire spec.conversion of").await
}

/// Give `spec.conversion` back: strategy None, and the webhook fields this manager owned go.
pub async fn unwire(ctx: &Context, kind: TargetKind, name: &str) -> Result<Value> {
    apply(ctx, kind, name, &unwired(), "revert spec.conversion of").await
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

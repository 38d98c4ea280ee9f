//! A config's target (a CRD, or a Crossplane XRD) as JSON: reading it from the apiserver and
//! server-side applying its `spec.conversion` (the only field of a target the operator ever
//! writes). What that field says, written and read, is `dco_api::target`'s, shared with the
//! webhook's hold rule. XRDs are read and written through the API version the cluster serves
//! (`Context::xrd_api`: `v2` where served, `v1` while it is the only one).

use dco_api::config::TargetKind;
use dco_api::crossplane::{XrdApi, XrdVersion};
pub use dco_api::target::{Wiring, wired_service};
use dco_api::target::{apply_body, carries, resource, unwired, whole_conversion_patch};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceConversion;
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
/// immutable, so the read cannot go stale: the caller's own read of the XRD, `known`, serves
/// when it has one). An error names what to install when XRDs are not served at all.
async fn write_version(
    client: &Client,
    xrds: XrdApi,
    name: &str,
    known: Option<&Value>,
) -> Result<XrdVersion> {
    let Some(preferred) = xrds.preferred() else {
        return Err(Error::NotReady(format!(
            "cannot write CompositeResourceDefinition {name}: Crossplane is not installed (apiextensions.crossplane.io serves neither v1 nor v2); install Crossplane or delete the config"
        )));
    };
    if !(xrds.v1 && xrds.v2) {
        return Ok(preferred);
    }
    let read_now;
    let live = match known {
        Some(t) => Some(t),
        None => {
            read_now = read(client, TargetKind::Xrd, xrds, name).await?;
            read_now.as_ref()
        }
    };
    Ok(live.and_then(|t| xrds.for_write(t)).unwrap_or(preferred))
}

/// The target's API, and for an XRD the version it is written through.
async fn writer(
    ctx: &Context,
    kind: TargetKind,
    name: &str,
    known: Option<&Value>,
) -> Result<(Api<DynamicObject>, XrdVersion)> {
    let at = match kind {
        TargetKind::Crd => XrdVersion::V2, // unused for CRDs
        TargetKind::Xrd => write_version(&ctx.client, ctx.xrd_api().await, name, known).await?,
    };
    Ok((Api::all_with(ctx.client.clone(), &resource(kind, at)), at))
}

/// Make the target's `spec.conversion` exactly `want` (`None`: absent); returns the target
/// after. First a forced server-side apply as dco's field manager, which normally is all it
/// takes. But an apply only releases what dco owned: a field another manager shares (its own
/// apply of the same value, or an Update that set it before dco applied it) stays, and the
/// result can be refused (a CRD's webhook beside strategy None, an XRD's strategy without a
/// webhook) or, at an XRD version that validates nothing of it, accepted half-wired. Then
/// the whole field is written
/// with one JSON patch, which drops the leftovers from every manager, so every write leaves
/// a valid object saying exactly `want`.
///
/// Both writes are fenced (a replica paused mid-reconcile past its renew deadline writes
/// nothing) and conditioned on the resourceVersion of the target as this reconcile read it
/// (`known`) or as the apply left it: a target another replica re-wired since fails the write
/// with 409, and the reconcile reads it again (docs/sharding.md, "After a pause").
async fn apply(
    ctx: &Context,
    kind: TargetKind,
    name: &str,
    want: Option<&CustomResourceConversion>,
    known: Option<&Value>,
    action: &'static str,
) -> Result<Value> {
    let (api, at) = writer(ctx, kind, name, known).await?;
    let failed = Error::kube(action, kind.kind_name(), name);
    let mut body = apply_body(kind, at, name, want);
    let wanted = serde_json::json!({"spec": {"conversion": want}});
    super::test_hook::before_conversion_write(name, known.and_then(wired_service), wired_service(&wanted))
        .await;
    ctx.fence("target spec.conversion")?;
    if let Some(rv) = resource_version(known) {
        body["metadata"]["resourceVersion"] = rv.into();
    }
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    let left = match api.patch(name, &pp, &Patch::Apply(&body)).await {
        Ok(o) => {
            let after = to_json(kind, name, o)?;
            if carries(&after, want) {
                return Ok(after);
            }
            let left =
                format!("the apply left {}", after.pointer("/spec/conversion").unwrap_or(&Value::Null));
            (left, resource_version(Some(&after)).map(str::to_string))
        }
        // Invalid: what another manager kept beside the applied fields, most likely.
        Err(kube::Error::Api(e)) if e.code == 422 => {
            (format!("the apply was refused: {}", e.message), resource_version(known).map(str::to_string))
        }
        Err(e) => return Err(failed(e)),
    };
    let (left, read_at) = left;
    tracing::info!(kind = kind.kind_name(), name, "{left}; writing spec.conversion whole");
    ctx.fence("target spec.conversion")?;
    let ops: json_patch::Patch =
        serde_json::from_value(conditioned(whole_conversion_patch(want), read_at))
            .map_err(|source| Error::Serialize { what: format!("{} {name}", kind.kind_name()), source })?;
    let pp = PatchParams { field_manager: Some(FIELD_MANAGER.to_string()), ..PatchParams::default() };
    to_json(kind, name, api.patch(name, &pp, &Patch::Json::<()>(ops)).await.map_err(failed)?)
}

/// `metadata.resourceVersion` of a target as read.
fn resource_version(target: Option<&Value>) -> Option<&str> {
    target?.pointer("/metadata/resourceVersion")?.as_str()
}

/// The whole-field JSON patch, made conditional on the target still being at resourceVersion
/// `at`: a `replace` of it, which the apiserver takes as a precondition (409 when the target
/// changed since; a `test` op would fail as 422, indistinguishable from an invalid object).
fn conditioned(patch: Value, at: Option<String>) -> Value {
    match (patch, at) {
        (Value::Array(mut ops), Some(rv)) => {
            ops.insert(
                0,
                serde_json::json!({"op": "replace", "path": "/metadata/resourceVersion", "value": rv}),
            );
            Value::Array(ops)
        }
        (patch, _) => patch,
    }
}

/// Server-side apply `spec.conversion` so reviews go to `wiring`; returns the target after.
/// `known`: the target as the caller just read it (an XRD's scope picks the version written
/// through), so the write needs no read of its own.
pub async fn wire(
    ctx: &Context,
    kind: TargetKind,
    name: &str,
    wiring: &Wiring,
    known: Option<&Value>,
) -> Result<Value> {
    apply(ctx, kind, name, Some(&wiring.conversion()), known, "wire spec.conversion of").await
}

/// Give `spec.conversion` back (`dco_api::target::unwired`): a CRD's to strategy None, an
/// XRD's removed (its generated CRDs then default to None); no webhook field is left.
pub async fn unwire(ctx: &Context, kind: TargetKind, name: &str) -> Result<Value> {
    apply(ctx, kind, name, unwired(kind).as_ref(), None, "revert spec.conversion of").await
}

// What `spec.conversion` says, written and read, is tested in `api/src/target.rs`.
#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn wiring() -> Wiring {
        Wiring {
            namespace: "dco-system".into(),
            service: "dco-webhook-a".into(),
            path: "/convert/xdbs.example.org".into(),
            port: 443,
            ca_bundle: "PEM".into(),
            review_versions: vec!["v1".into()],
        }
    }

    /// The whole-field patch makes any leftover of a shared apply exactly what was wanted.
    #[test]
    fn the_whole_conversion_patch_leaves_exactly_the_wanted_conversion() {
        let wiring = wiring();
        let wired = serde_json::to_value(wiring.conversion()).unwrap();
        let mut webhook_beside_none = wired.clone();
        webhook_beside_none["strategy"] = json!("None");
        let mut url_beside_service = wired.clone();
        url_beside_service["webhook"]["clientConfig"]["url"] = json!("https://127.0.0.1/x");
        let leftovers = [
            webhook_beside_none,
            url_beside_service,
            json!({"strategy": "Webhook"}),
            json!({"strategy": "None"}),
            wired,
        ];
        for kind in [TargetKind::Crd, TargetKind::Xrd] {
            let unwired = unwired(kind);
            for want in [Some(wiring.conversion()), unwired] {
                for left in &leftovers {
                    let mut target =
                        json!({"metadata": {"name": "t"}, "spec": {"group": "g", "conversion": left}});
                    let ops: json_patch::Patch =
                        serde_json::from_value(whole_conversion_patch(want.as_ref())).unwrap();
                    json_patch::patch(&mut target, &ops).unwrap();
                    assert!(carries(&target, want.as_ref()), "{kind:?} {want:?} from {left}: {target}");
                    assert_eq!(target["spec"]["group"], "g", "nothing else changes");
                }
            }
        }
        // Adding also works where the target has none yet (an XRD a package rewrote).
        let mut bare = json!({"spec": {"group": "g"}});
        let ops: json_patch::Patch =
            serde_json::from_value(whole_conversion_patch(Some(&wiring.conversion()))).unwrap();
        json_patch::patch(&mut bare, &ops).unwrap();
        assert!(wiring.matches(&bare));
    }

    #[test]
    fn the_whole_field_patch_is_conditioned_on_the_resource_version_read() {
        let wiring = wiring();
        let whole = whole_conversion_patch(Some(&wiring.conversion()));
        let ops = conditioned(whole.clone(), Some("42".into()));
        assert_eq!(ops[0], json!({"op": "replace", "path": "/metadata/resourceVersion", "value": "42"}));
        assert_eq!(ops[1], whole[0], "then the field, whole");
        assert_eq!(conditioned(whole.clone(), None), whole, "nothing read, nothing to condition on");
        // On the target as read, the patch changes nothing but the field: the apiserver takes the
        // resourceVersion for a precondition (409 when the target changed since).
        let mut target = json!({"metadata": {"name": "t", "resourceVersion": "42"}, "spec": {"conversion": {"strategy": "None"}}});
        json_patch::patch(&mut target, &serde_json::from_value::<json_patch::Patch>(ops).unwrap()).unwrap();
        assert_eq!(target["metadata"]["resourceVersion"], "42");
        assert!(wiring.matches(&target));
        let read = json!({"metadata": {"resourceVersion": "7"}});
        assert_eq!(resource_version(Some(&read)), Some("7"));
        assert_eq!(resource_version(Some(&json!({}))), None);
    }

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

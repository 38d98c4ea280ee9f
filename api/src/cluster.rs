//! A target (a CRD, or a Crossplane XRD) read from the apiserver, one way for both binaries:
//! the operator reads it to validate, compile and wire it (`operator/src/config/target.rs`),
//! every webhook replica to compile the plans it serves (`webhook/src/targets.rs`).

use kube::Client;
use kube::api::{Api, DynamicObject};
use serde_json::Value;

use crate::config::TargetKind;
use crate::target;

/// Read target `name` of `kind`. `None` when it does not exist — including an XRD where
/// Crossplane is not installed: the apiserver answers 404 for the unknown kind itself.
pub async fn fetch_target(
    client: &Client,
    kind: TargetKind,
    name: &str,
) -> Result<Option<DynamicObject>, kube::Error> {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &target::resource(kind));
    match api.get_opt(name).await {
        Ok(o) => Ok(o),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
        Err(e) => Err(e),
    }
}

/// A target as JSON, with the `apiVersion` and `kind` dco reads and writes set (what the
/// engine and `target::wired_service` read).
pub fn target_json(kind: TargetKind, o: DynamicObject) -> serde_json::Result<Value> {
    let mut v = serde_json::to_value(o)?;
    if let Some(m) = v.as_object_mut() {
        m.insert("apiVersion".into(), kind.api_version().into());
        m.insert("kind".into(), kind.kind_name().into());
    }
    Ok(v)
}

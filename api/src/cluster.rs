//! A target (a CRD, or a Crossplane XRD) read from the apiserver, one way for both binaries:
//! the operator reads it to validate, compile and wire it (`operator/src/config/target.rs`),
//! every webhook replica to compile the plans it serves (`webhook/src/targets.rs`).

use kube::Client;
use kube::api::{Api, DynamicObject};
use serde_json::Value;

use crate::config::TargetKind;
use crate::target::{self, XrdVersion};

/// Read target `name` of `kind`, an XRD through version `xrd` (`XrdApi::preferred`). `None`
/// when it does not exist — including an XRD where Crossplane is not installed (`xrd` is
/// `None`: no request), or removed since: the apiserver answers 404 for the unknown kind.
pub async fn fetch_target(
    client: &Client,
    kind: TargetKind,
    xrd: Option<XrdVersion>,
    name: &str,
) -> Result<Option<DynamicObject>, kube::Error> {
    let xrd = match (kind, xrd) {
        (TargetKind::Crd, _) => XrdVersion::V2, // unused for CRDs
        (TargetKind::Xrd, Some(v)) => v,
        (TargetKind::Xrd, None) => return Ok(None),
    };
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &target::resource(kind, xrd));
    match api.get_opt(name).await {
        Ok(o) => Ok(o),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
        Err(e) => Err(e),
    }
}

/// A target as JSON, with its `apiVersion` and `kind` set (what the engine and
/// `target::wired_service` read): as read, when the object says (an XRD read at `v1` or `v2`
/// says so), else the kind's at `xrd`.
pub fn target_json(kind: TargetKind, xrd: XrdVersion, o: DynamicObject) -> serde_json::Result<Value> {
    let api_version = o
        .types
        .as_ref()
        .map(|t| t.api_version.clone())
        .filter(|av| TargetKind::of_type(av, kind.kind_name()) == Some(kind))
        .unwrap_or_else(|| kind.api_version(xrd).to_string());
    let mut v = serde_json::to_value(o)?;
    if let Some(m) = v.as_object_mut() {
        m.insert("apiVersion".into(), api_version.into());
        m.insert("kind".into(), kind.kind_name().into());
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use kube::api::TypeMeta;

    use super::*;

    #[test]
    fn the_json_says_the_version_an_xrd_was_read_at() {
        let read = |av: Option<&str>| {
            let mut o = DynamicObject::new("xdbs.example.org", &XrdVersion::V1.resource());
            o.types =
                av.map(|av| TypeMeta { api_version: av.into(), kind: "CompositeResourceDefinition".into() });
            o
        };
        for (av, at, want) in [
            (Some("apiextensions.crossplane.io/v2"), XrdVersion::V1, "apiextensions.crossplane.io/v2"),
            (Some("apiextensions.crossplane.io/v1"), XrdVersion::V2, "apiextensions.crossplane.io/v1"),
            (None, XrdVersion::V2, "apiextensions.crossplane.io/v2"),
            // Not an XRD version dco knows: the one it was read at.
            (Some("apiextensions.crossplane.io/v9"), XrdVersion::V1, "apiextensions.crossplane.io/v1"),
        ] {
            let v = target_json(TargetKind::Xrd, at, read(av)).unwrap();
            assert_eq!(
                (v["apiVersion"].as_str(), v["kind"].as_str()),
                (Some(want), Some("CompositeResourceDefinition"))
            );
        }
        let crd =
            target_json(TargetKind::Crd, XrdVersion::V2, DynamicObject::new("w", &XrdVersion::V2.resource()));
        assert_eq!(crd.unwrap()["apiVersion"], "apiextensions.k8s.io/v1");
    }
}

//! A target read live by name (`--crd NAME`, `--xrd NAME`), turned into the same
//! [`dco_engine::Target`] the offline commands build from a file, and the configs on the
//! cluster that name it. An XRD is read at the version the cluster serves (`v2` where served,
//! `v1` while it is the only one), as the operator and the webhook read it (`dco_api::cluster`).
//! Every error is a message naming the context, the object and what to check: the caller makes
//! it that member's finding.

use dco_api::config::TargetKind;
use dco_api::crossplane::XrdApi;
use dco_api::target::{XRD_CRD_NAME, XrdVersion};
use dco_engine::Target;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams};
use serde_json::Value;

use crate::load;

/// Configs are listed this many a page (each is a few KB; the matching ones are kept).
pub const CONFIG_PAGE: u32 = 50;
/// At most this many configs are read per context (there is one per target when admission is
/// on; more means a misconfigured cluster, reported, not read without bound).
pub const MAX_CONFIGS: usize = 10_000;

/// A target as the cluster has it.
#[derive(Clone, Debug)]
pub struct LiveTarget {
    pub kind: TargetKind,
    pub name: String,
    /// The object as read (JSON, `apiVersion` and `kind` set; `managedFields` and the
    /// last-applied annotation dropped).
    pub value: Value,
    /// What the engine compiles against: the same reader as a target file's.
    pub target: Target,
    /// For an XRD: the version it was read at.
    pub xrd_version: Option<XrdVersion>,
}

impl LiveTarget {
    /// The CRDs Crossplane generates for an XRD (the XR's, and the claim's with claims); for a
    /// CRD target, the CRD itself.
    pub fn crds(&self) -> Vec<String> {
        match self.kind {
            TargetKind::Crd => vec![self.name.clone()],
            TargetKind::Xrd => self.target.generated_crds(),
        }
    }

    /// `CustomResourceDefinition widgets.example.org`.
    pub fn describe(&self) -> String {
        format!("{} {}", self.kind.kind_name(), self.name)
    }
}

/// Which XRD API versions the cluster serves; an error when Crossplane is not installed.
pub async fn xrd_api(client: &Client) -> Result<XrdApi, String> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    match crds.get_opt(XRD_CRD_NAME).await {
        Ok(Some(crd)) => {
            let api = dco_api::crossplane::served(&crd);
            if api.installed() {
                Ok(api)
            } else {
                Err(format!(
                    "CustomResourceDefinition {XRD_CRD_NAME} is not established or serves neither v1 nor v2: is Crossplane installed and healthy?"
                ))
            }
        }
        Ok(None) => Err(format!(
            "Crossplane is not installed (no CustomResourceDefinition {XRD_CRD_NAME}): give --crd for a native CRD, or a context with Crossplane"
        )),
        Err(e) => Err(format!("reading CustomResourceDefinition {XRD_CRD_NAME}: {e}")),
    }
}

/// Reads target `name` of `kind` and builds its [`Target`].
pub async fn read(client: &Client, kind: TargetKind, name: &str) -> Result<LiveTarget, String> {
    let xrd = match kind {
        TargetKind::Crd => None,
        TargetKind::Xrd => xrd_api(client).await?.preferred(),
    };
    let what = format!("{} {name}", kind.kind_name());
    let obj = dco_api::cluster::fetch_target(client, kind, xrd, name)
        .await
        .map_err(|e| format!("reading {what}: {e}"))?
        .ok_or_else(|| {
            let list = match kind {
                TargetKind::Crd => "kubectl get crds",
                TargetKind::Xrd => "kubectl get xrds",
            };
            format!("{what} does not exist on this cluster: check the name ({list}) and the context")
        })?;
    let mut value = dco_api::cluster::target_json(kind, xrd.unwrap_or(XrdVersion::V2), obj)
        .map_err(|e| format!("{what}: cannot serialise it: {e}"))?;
    slim(&mut value);
    let target = Target::from_value(&value).map_err(|e| format!("{what} as the cluster has it: {e}"))?;
    Ok(LiveTarget { kind, name: name.to_string(), value, target, xrd_version: xrd })
}

/// Reads the CRDs Crossplane generated for an XRD (or the CRD itself): each name with its JSON,
/// `None` when it does not exist (yet).
pub async fn generated(client: &Client, t: &LiveTarget) -> Result<Vec<(String, Option<Value>)>, String> {
    let api: Api<DynamicObject> =
        Api::all_with(client.clone(), &dco_api::target::resource(TargetKind::Crd, XrdVersion::V2));
    let mut out = Vec::new();
    for name in t.crds() {
        if t.kind == TargetKind::Crd {
            out.push((name, Some(t.value.clone())));
            continue;
        }
        let got = api.get_opt(&name).await.map_err(|e| {
            format!("reading the CustomResourceDefinition {name} generated for {}: {e}", t.describe())
        })?;
        let json = got
            .map(|o| dco_api::cluster::target_json(TargetKind::Crd, XrdVersion::V2, o))
            .transpose()
            .map_err(|e| format!("CustomResourceDefinition {name}: cannot serialise it: {e}"))?;
        out.push((name, json));
    }
    Ok(out)
}

/// A config of the cluster that names the target.
pub struct LiveConfig {
    pub name: String,
    /// The config read as a config file is (`load::config_of`): its place names the context.
    pub config: load::Config,
}

/// The ApiResource of a dco config kind.
pub fn config_resource(kind: TargetKind) -> ApiResource {
    let config_kind = match kind {
        TargetKind::Crd => "CRDConversionConfig",
        TargetKind::Xrd => "XRDConversionConfig",
    };
    let gvk = GroupVersionKind::gvk(dco_api::GROUP, dco_api::VERSION, config_kind);
    ApiResource::from_gvk(&gvk)
}

/// The configs (CRDConversionConfig for a CRD, XRDConversionConfig for an XRD) whose target is
/// `target`, listed a page at a time; each parsed as `convctl` parses a config file, under the
/// label `CONTEXT/KIND/NAME`. An empty list when dco's CRDs are not installed.
pub async fn configs(
    client: &Client,
    context: &str,
    kind: TargetKind,
    target: &str,
) -> Result<Vec<Result<LiveConfig, String>>, String> {
    let ar = config_resource(kind);
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
    let field = match kind {
        TargetKind::Crd => "targetCRD",
        TargetKind::Xrd => "targetXRD",
    };
    let mut out = Vec::new();
    let mut seen = 0usize;
    let mut token: Option<String> = None;
    loop {
        let mut lp = ListParams::default().limit(CONFIG_PAGE);
        if let Some(t) = &token {
            lp = lp.continue_token(t);
        }
        let page = match api.list(&lp).await {
            Ok(p) => p,
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(Vec::new()),
            Err(e) => return Err(format!("listing {}s: {e}", ar.kind)),
        };
        for o in page.items {
            seen += 1;
            let mut v = serde_json::to_value(&o).map_err(|e| format!("{}: {e}", ar.kind))?;
            if v.pointer(&format!("/spec/{field}/name")).and_then(Value::as_str) != Some(target) {
                continue;
            }
            v["apiVersion"] = Value::String(ar.api_version.clone());
            v["kind"] = Value::String(ar.kind.clone());
            slim(&mut v);
            if let Some(m) = v.as_object_mut() {
                m.remove("status");
            }
            out.push(parse_config(context, &ar.kind, v));
        }
        if seen > MAX_CONFIGS {
            return Err(format!(
                "more than {MAX_CONFIGS} {}s on the cluster: convctl reads at most that many",
                ar.kind
            ));
        }
        token = page.metadata.continue_.filter(|t| !t.is_empty());
        if token.is_none() {
            return Ok(out);
        }
    }
}

/// A live config through the config file reader: serialised to YAML and read back, so its
/// checks (unknown keys, field types) and messages are a file's.
fn parse_config(context: &str, kind: &str, v: Value) -> Result<LiveConfig, String> {
    let name = v.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("<unnamed>").to_string();
    let label = format!("{context}/{kind}/{name}");
    let text = serde_yaml::to_string(&v).map_err(|e| format!("{label}: {e}"))?;
    let src = load::parse(&label, &text).map_err(|e| e.to_string())?;
    let config = load::config_of(&src).map_err(|e| e.to_string())?;
    Ok(LiveConfig { name, config })
}

/// What no reader of a live object needs and what can be as large as the object itself.
pub fn slim(v: &mut Value) {
    if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("managedFields");
        if let Some(a) = m.get_mut("annotations").and_then(Value::as_object_mut) {
            a.remove("kubectl.kubernetes.io/last-applied-configuration");
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_live_config_is_read_as_a_file_is_and_named_by_context() {
        let v = json!({
            "apiVersion": "conversion.dco.rs/v1alpha1", "kind": "CRDConversionConfig",
            "metadata": {"name": "widgets", "uid": "u", "resourceVersion": "7"},
            "spec": {"targetCRD": {"name": "widgets.example.org"}, "hubVersion": "v2", "spokes": []}
        });
        let c = parse_config("east", "CRDConversionConfig", v).unwrap();
        assert_eq!((c.name.as_str(), c.config.target_name.as_str()), ("widgets", "widgets.example.org"));
        assert!(
            c.config.target_place.starts_with("east/CRDConversionConfig/widgets"),
            "{}",
            c.config.target_place
        );
        let bad = json!({
            "apiVersion": "conversion.dco.rs/v1alpha1", "kind": "CRDConversionConfig",
            "metadata": {"name": "w"}, "spec": {"targetCRD": {"name": "x"}, "hubVersoin": "v2"}
        });
        let e = parse_config("west", "CRDConversionConfig", bad).err().unwrap();
        assert!(e.contains("west/CRDConversionConfig/w") && e.contains("hubVersoin"), "{e}");
    }

    #[test]
    fn slim_drops_managed_fields_and_the_last_applied_copy() {
        let mut v = json!({"metadata": {"name": "a", "managedFields": [{}],
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}", "keep": "1"}}});
        slim(&mut v);
        assert_eq!(v, json!({"metadata": {"name": "a", "annotations": {"keep": "1"}}}));
    }

    #[test]
    fn config_kinds_follow_the_target_kind() {
        assert_eq!(config_resource(TargetKind::Crd).plural, "crdconversionconfigs");
        assert_eq!(config_resource(TargetKind::Xrd).api_version, "conversion.dco.rs/v1alpha1");
        assert_eq!(config_resource(TargetKind::Xrd).kind, "XRDConversionConfig");
    }
}

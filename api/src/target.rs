//! A conversion target (a CustomResourceDefinition or a Crossplane
//! CompositeResourceDefinition) as both binaries see it: its kind names, and its
//! `spec.conversion`, which the operator writes (`operator/src/config/target.rs`) and the
//! webhook's hold rule reads (`webhook/src/hold.rs`). Keeping the writer and the reader in one
//! place is what keeps them agreeing on the layout. Pure: no client.
//!
//! Crossplane's XRD embeds the apiextensions `CustomResourceConversion` as its
//! `spec.conversion`, so one layout serves both kinds.

use k8s_openapi::ByteString;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceConversion, ServiceReference, WebhookClientConfig, WebhookConversion,
};
use kube::Resource;
use kube::core::{ApiResource, GroupVersionKind};
use serde::Deserialize as _;
use serde_json::{Value, json};

use crate::config::TargetKind;

pub const CRD_API_VERSION: &str = "apiextensions.k8s.io/v1";
pub const CRD_KIND: &str = "CustomResourceDefinition";
/// Crossplane's API group; the engine accepts an XRD of any version in it.
pub const XRD_GROUP: &str = "apiextensions.crossplane.io";
pub const XRD_VERSION: &str = "v1";
pub const XRD_API_VERSION: &str = "apiextensions.crossplane.io/v1";
pub const XRD_KIND: &str = "CompositeResourceDefinition";
pub const XRD_PLURAL: &str = "compositeresourcedefinitions";
/// The CRD whose presence means XRDs can be watched (Crossplane is installed).
pub const XRD_CRD_NAME: &str = "compositeresourcedefinitions.apiextensions.crossplane.io";

/// `spec.conversion.strategy` when the apiserver calls a webhook.
pub const STRATEGY_WEBHOOK: &str = "Webhook";
/// `spec.conversion.strategy` when the apiserver only rewrites apiVersion.
pub const STRATEGY_NONE: &str = "None";

impl TargetKind {
    /// The target's `kind`.
    pub const fn kind_name(self) -> &'static str {
        match self {
            TargetKind::Crd => CRD_KIND,
            TargetKind::Xrd => XRD_KIND,
        }
    }

    /// The target's `apiVersion` (the one dco reads and writes).
    pub const fn api_version(self) -> &'static str {
        match self {
            TargetKind::Crd => CRD_API_VERSION,
            TargetKind::Xrd => XRD_API_VERSION,
        }
    }

    /// Which target an object of this `apiVersion`/`kind` is, if any.
    pub fn of_type(api_version: &str, kind: &str) -> Option<TargetKind> {
        [TargetKind::Crd, TargetKind::Xrd]
            .into_iter()
            .find(|t| t.api_version() == api_version && t.kind_name() == kind)
    }
}

/// The XRD kind for dynamic clients and watches: dco uses no typed Crossplane bindings.
pub fn xrd_resource() -> ApiResource {
    let gvk = GroupVersionKind::gvk(XRD_GROUP, XRD_VERSION, XRD_KIND);
    ApiResource::from_gvk_with_plural(&gvk, XRD_PLURAL)
}

/// Targets are listed this many a page. A CRD's metadata alone can be as large as its schema
/// (`managedFields` list every field; `kubectl apply` copies the whole object into an
/// annotation), so a page of the default 500 is hundreds of MB to parse at once; 20 bound it
/// to a few MB (150 unrelated CRDs of 134 KB added 10.6 MB to the operator at 20 a page and
/// 21.0 MB at 500: `docs/changelog.md`, 2026-12-01).
pub const TARGET_PAGE: u32 = 20;

/// The `ApiResource` of a target kind, for dynamic clients.
pub fn resource(kind: TargetKind) -> ApiResource {
    match kind {
        TargetKind::Crd => ApiResource::erase::<
            k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
        >(&()),
        TargetKind::Xrd => xrd_resource(),
    }
}

/// What dco keeps of a target's metadata: no `managedFields` and no annotations. Nothing in
/// dco reads a target's annotations, and `kubectl apply`'s last-applied copy of the object
/// there is as large as the schema itself.
pub fn slim_target<K: Resource>(o: &mut K) {
    o.meta_mut().managed_fields = None;
    o.meta_mut().annotations = None;
}

/// Drop `managedFields` from a watched object: nothing in dco reads them, and on large CRDs
/// they are a good part of what a cache would hold.
pub fn slim<K: Resource>(o: &mut K) {
    o.meta_mut().managed_fields = None;
}

/// What `spec.conversion` must say to send a target's reviews to a webhook Service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wiring {
    pub namespace: String,
    pub service: String,
    pub path: String,
    pub port: i32,
    /// The CA that signed the Service's serving certificate, PEM (written base64'd, as
    /// `caBundle` is bytes).
    pub ca_bundle: String,
    pub review_versions: Vec<String>,
}

impl Wiring {
    /// The `spec.conversion` this wiring writes.
    pub fn conversion(&self) -> CustomResourceConversion {
        CustomResourceConversion {
            strategy: STRATEGY_WEBHOOK.to_string(),
            webhook: Some(WebhookConversion {
                client_config: Some(WebhookClientConfig {
                    service: Some(ServiceReference {
                        namespace: self.namespace.clone(),
                        name: self.service.clone(),
                        path: Some(self.path.clone()),
                        port: Some(self.port),
                    }),
                    ca_bundle: Some(ByteString(self.ca_bundle.as_bytes().to_vec())),
                    url: None,
                }),
                conversion_review_versions: self.review_versions.clone(),
            }),
        }
    }

    /// Whether `target` (CRD or XRD JSON, as the apiserver returns it) already says exactly
    /// what [`Wiring::conversion`] writes, so no write is needed: every write of a CRD's spec
    /// makes every apiserver rebuild its storage. A `spec.conversion` that does not parse
    /// (e.g. a `caBundle` that is not base64) does not match, so the next write repairs it.
    pub fn matches(&self, target: &Value) -> bool {
        let Some(live) = target.pointer("/spec/conversion") else { return false };
        let Ok(live) = CustomResourceConversion::deserialize(live) else { return false };
        live == self.conversion()
    }
}

/// The `spec.conversion` that hands a target back to the apiserver: strategy None, no webhook
/// (server-side apply then removes the webhook fields dco's field manager owned).
pub fn unwired() -> CustomResourceConversion {
    CustomResourceConversion { strategy: STRATEGY_NONE.to_string(), webhook: None }
}

/// The server-side apply body that sets only `spec.conversion` of target `name`: the only
/// field of a target dco ever writes.
pub fn apply_body(kind: TargetKind, name: &str, conversion: &CustomResourceConversion) -> Value {
    json!({
        "apiVersion": kind.api_version(),
        "kind": kind.kind_name(),
        "metadata": { "name": name },
        "spec": { "conversion": conversion },
    })
}

/// `(namespace, name)` of the Service the target's `spec.conversion` calls (CRD or XRD JSON).
/// `None` unless the strategy is Webhook and the webhook names a Service (a URL webhook names
/// none); anything missing or differently shaped reads as "names no Service". Borrowed
/// pointer reads, not a typed parse: the webhook asks this of every target on every pass.
pub fn wired_service(target: &Value) -> Option<(&str, &str)> {
    let conv = target.pointer("/spec/conversion")?;
    if conv.get("strategy").and_then(Value::as_str) != Some(STRATEGY_WEBHOOK) {
        return None;
    }
    let svc = conv.pointer("/webhook/clientConfig/service")?;
    Some((svc.get("namespace")?.as_str()?, svc.get("name")?.as_str()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    const PEM: &str = "-----BEGIN CERTIFICATE-----\nX\n-----END CERTIFICATE-----\n";

    fn wiring() -> Wiring {
        Wiring {
            namespace: "dco-system".into(),
            service: "dco-webhook-a".into(),
            path: "/convert/widgets.example.org".into(),
            port: 443,
            ca_bundle: PEM.into(),
            review_versions: vec!["v1".into()],
        }
    }

    /// What the apiserver returns after `apply_body` was applied: the body plus fields dco
    /// does not own.
    fn applied(kind: TargetKind, name: &str, conversion: &CustomResourceConversion) -> Value {
        let mut v = apply_body(kind, name, conversion);
        v["metadata"]["uid"] = json!("u-1");
        v["spec"]["versions"] = json!([{"name": "v1", "served": true}]);
        // Through text, as it comes over the wire.
        serde_json::from_str(&v.to_string()).unwrap()
    }

    #[test]
    fn the_wiring_builds_a_webhook_conversion_with_the_ca_as_bytes() {
        let c = wiring().conversion();
        assert_eq!(c.strategy, "Webhook");
        let wh = c.webhook.unwrap();
        assert_eq!(wh.conversion_review_versions, ["v1"]);
        let cc = wh.client_config.unwrap();
        assert_eq!(cc.url, None);
        assert_eq!(cc.ca_bundle, Some(ByteString(PEM.as_bytes().to_vec())));
        let svc = cc.service.unwrap();
        assert_eq!(
            (svc.namespace.as_str(), svc.name.as_str(), svc.path.as_deref(), svc.port),
            ("dco-system", "dco-webhook-a", Some("/convert/widgets.example.org"), Some(443))
        );
    }

    #[test]
    fn its_json_is_the_apiservers_layout() {
        use base64::Engine as _;
        let v = serde_json::to_value(wiring().conversion()).unwrap();
        assert_eq!(
            v,
            json!({
                "strategy": "Webhook",
                "webhook": {
                    "clientConfig": {
                        "service": {"namespace": "dco-system", "name": "dco-webhook-a",
                            "path": "/convert/widgets.example.org", "port": 443},
                        "caBundle": base64::engine::general_purpose::STANDARD.encode(PEM),
                    },
                    "conversionReviewVersions": ["v1"],
                }
            })
        );
    }

    #[test]
    fn the_reader_reads_back_what_the_writer_wrote_on_both_kinds() {
        let w = wiring();
        for kind in [TargetKind::Crd, TargetKind::Xrd] {
            let target = applied(kind, "widgets.example.org", &w.conversion());
            assert_eq!(wired_service(&target), Some(("dco-system", "dco-webhook-a")), "{kind:?}");
            assert!(w.matches(&target), "{kind:?}");
        }
    }

    #[test]
    fn apply_bodies_carry_only_spec_conversion() {
        let crd = apply_body(TargetKind::Crd, "widgets.example.org", &wiring().conversion());
        assert_eq!(crd["apiVersion"], "apiextensions.k8s.io/v1");
        assert_eq!(crd["kind"], "CustomResourceDefinition");
        let xrd = apply_body(TargetKind::Xrd, "xdbs.example.org", &wiring().conversion());
        assert_eq!(xrd["apiVersion"], "apiextensions.crossplane.io/v1");
        assert_eq!(xrd["kind"], "CompositeResourceDefinition");
        assert_eq!(xrd["metadata"], json!({"name": "xdbs.example.org"}));
        assert_eq!(xrd["spec"].as_object().unwrap().len(), 1);
        assert_eq!(xrd["spec"]["conversion"]["webhook"]["clientConfig"]["service"]["port"], 443);
        assert_eq!(xrd.as_object().unwrap().len(), 4);
    }

    #[test]
    fn another_service_ca_or_review_versions_does_not_match() {
        let target = applied(TargetKind::Crd, "widgets.example.org", &wiring().conversion());
        for other in [
            Wiring { service: "dco-webhook-b".into(), ..wiring() },
            Wiring { namespace: "elsewhere".into(), ..wiring() },
            Wiring { path: "/convert/other".into(), ..wiring() },
            Wiring { port: 8443, ..wiring() },
            Wiring { ca_bundle: "rotated".into(), ..wiring() },
            Wiring { review_versions: vec!["v1".into(), "v1beta1".into()], ..wiring() },
        ] {
            assert!(!other.matches(&target), "{other:?}");
        }
    }

    #[test]
    fn none_url_and_odd_conversions_name_no_service_and_do_not_match() {
        let w = wiring();
        let none = applied(TargetKind::Crd, "w", &unwired());
        assert_eq!(none["spec"]["conversion"], json!({"strategy": "None"}));
        // A None strategy with stale webhook fields still names nothing.
        let stale = json!({"spec": {"conversion": {"strategy": "None", "webhook": {
            "clientConfig": {"service": {"namespace": "dco-system", "name": "dco-webhook-a"}}}}}});
        let url = json!({"spec": {"conversion": {"strategy": "Webhook", "webhook": {
            "clientConfig": {"url": "https://127.0.0.1/convert"}, "conversionReviewVersions": ["v1"]}}}});
        let mut bad_ca = applied(TargetKind::Crd, "w", &w.conversion());
        bad_ca["spec"]["conversion"]["webhook"]["clientConfig"]["caBundle"] = json!("not base64!");
        for (what, t) in [
            ("none", none),
            ("stale", stale),
            ("url", url),
            ("absent", json!({"spec": {}})),
            // The apiserver requires both; half a reference names nothing.
            (
                "no namespace",
                json!({"spec": {"conversion": {"strategy": "Webhook", "webhook": {
                "clientConfig": {"service": {"name": "dco-webhook-a"}}}}}}),
            ),
            ("not an object", json!({"spec": {"conversion": 3}})),
            ("no spec", json!(null)),
        ] {
            assert_eq!(wired_service(&t), None, "{what}");
            assert!(!w.matches(&t), "{what}");
        }
        // The Service is still named; only the CA no longer parses, so a write repairs it.
        assert_eq!(wired_service(&bad_ca), Some(("dco-system", "dco-webhook-a")));
        assert!(!w.matches(&bad_ca));
    }

    #[test]
    fn kind_names_round_trip() {
        for kind in [TargetKind::Crd, TargetKind::Xrd] {
            assert_eq!(TargetKind::of_type(kind.api_version(), kind.kind_name()), Some(kind));
        }
        assert_eq!(TargetKind::of_type("apiextensions.crossplane.io/v2", XRD_KIND), None);
        assert_eq!(TargetKind::of_type(CRD_API_VERSION, XRD_KIND), None);
        let ar = xrd_resource();
        assert_eq!((ar.api_version.as_str(), ar.kind.as_str()), (XRD_API_VERSION, XRD_KIND));
        assert_eq!(XRD_CRD_NAME, format!("{}.{}", ar.plural, ar.group));
    }

    #[test]
    fn slim_drops_managed_fields_only() {
        use k8s_openapi::api::coordination::v1::Lease;
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
        let mut l = Lease::default();
        l.metadata.name = Some("l".into());
        l.metadata.managed_fields = Some(vec![ManagedFieldsEntry::default()]);
        slim(&mut l);
        assert_eq!((l.metadata.name.as_deref(), l.metadata.managed_fields), (Some("l"), None));
    }
}

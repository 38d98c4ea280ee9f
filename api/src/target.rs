//! A conversion target (a CustomResourceDefinition or a Crossplane
//! CompositeResourceDefinition) as both binaries see it: its kind names, and its
//! `spec.conversion`, which the operator writes (`operator/src/config/target.rs`) and the
//! webhook's hold rule reads (`webhook/src/hold.rs`). Keeping the writer and the reader in one
//! place is what keeps them agreeing on the layout. Pure: no client.
//!
//! Crossplane's XRD embeds the apiextensions `CustomResourceConversion` as its
//! `spec.conversion`, so one layout serves both kinds.
//!
//! XRDs are read and written at the version the cluster serves ([`XrdApi`], which
//! `crate::crossplane` follows): Crossplane 2 serves `v2` beside `v1`, Crossplane 1 `v1` only.

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
pub const XRD_KIND: &str = "CompositeResourceDefinition";
pub const XRD_PLURAL: &str = "compositeresourcedefinitions";
/// The CRD whose presence means XRDs can be watched (Crossplane is installed).
pub const XRD_CRD_NAME: &str = "compositeresourcedefinitions.apiextensions.crossplane.io";

/// `spec.conversion.strategy` when the apiserver calls a webhook.
pub const STRATEGY_WEBHOOK: &str = "Webhook";
/// `spec.conversion.strategy` when the apiserver only rewrites apiVersion.
pub const STRATEGY_NONE: &str = "None";

/// A version of Crossplane's XRD API that dco reads and writes XRDs through. Both carry
/// `spec.conversion` and `spec.versions` in the same layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum XrdVersion {
    /// `apiextensions.crossplane.io/v1`: Crossplane 1, and Crossplane 2's storage version; the
    /// only one that takes a `LegacyCluster` XRD with `claimNames` in Crossplane 2.3.
    V1,
    /// `apiextensions.crossplane.io/v2`: Crossplane 2's `Namespaced` and `Cluster` XRDs.
    V2,
}

impl XrdVersion {
    /// Every version dco knows, most preferred first.
    pub const PREFERENCE: [XrdVersion; 2] = [XrdVersion::V2, XrdVersion::V1];

    /// The version's name (`v1`, `v2`).
    pub const fn name(self) -> &'static str {
        match self {
            XrdVersion::V1 => "v1",
            XrdVersion::V2 => "v2",
        }
    }

    /// `apiextensions.crossplane.io/<name>`.
    pub const fn api_version(self) -> &'static str {
        match self {
            XrdVersion::V1 => "apiextensions.crossplane.io/v1",
            XrdVersion::V2 => "apiextensions.crossplane.io/v2",
        }
    }

    /// The version of an XRD `apiVersion`, if dco knows it.
    pub fn of_api_version(api_version: &str) -> Option<XrdVersion> {
        Self::PREFERENCE.into_iter().find(|v| v.api_version() == api_version)
    }

    /// The XRD kind at this version, for dynamic clients and watches: dco uses no typed
    /// Crossplane bindings.
    pub fn resource(self) -> ApiResource {
        let gvk = GroupVersionKind::gvk(XRD_GROUP, self.name(), XRD_KIND);
        ApiResource::from_gvk_with_plural(&gvk, XRD_PLURAL)
    }
}

/// Which XRD API versions the cluster serves, as Crossplane's XRD CRD says
/// (`spec.versions[].served`, once Established); none when Crossplane is not installed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct XrdApi {
    pub v1: bool,
    pub v2: bool,
}

impl XrdApi {
    /// Crossplane is not installed (or serves no version dco knows).
    pub const ABSENT: XrdApi = XrdApi { v1: false, v2: false };

    /// From the names of the served versions; names dco does not know are ignored.
    pub fn of_served<'a>(served: impl IntoIterator<Item = &'a str>) -> XrdApi {
        let mut api = XrdApi::ABSENT;
        for name in served {
            match name {
                "v1" => api.v1 = true,
                "v2" => api.v2 = true,
                _ => {}
            }
        }
        api
    }

    /// Whether `version` is served.
    pub const fn serves(self, version: XrdVersion) -> bool {
        match version {
            XrdVersion::V1 => self.v1,
            XrdVersion::V2 => self.v2,
        }
    }

    /// The version dco reads, watches and writes XRDs through: `v2` where served, `v1` while
    /// it is the only one; `None` when XRDs cannot be read (no Crossplane).
    pub fn preferred(self) -> Option<XrdVersion> {
        XrdVersion::PREFERENCE.into_iter().find(|v| self.serves(*v))
    }

    /// Whether XRDs can be read and written.
    pub fn installed(self) -> bool {
        self.preferred().is_some()
    }

    /// The version to write XRD `target` (as read, any version) through: the preferred one,
    /// except for a `LegacyCluster` XRD while `v1` is served: Crossplane 2.3's `v2` schema
    /// refuses that scope and `claimNames`, so a write at `v2` of even `spec.conversion` alone
    /// would be rejected (the object is validated whole).
    pub fn for_write(self, target: &Value) -> Option<XrdVersion> {
        let legacy = target.pointer("/spec/scope").and_then(Value::as_str) == Some("LegacyCluster")
            || target.pointer("/spec/claimNames").is_some_and(|c| !c.is_null());
        if legacy && self.v1 { Some(XrdVersion::V1) } else { self.preferred() }
    }
}

impl std::fmt::Display for XrdApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.v1, self.v2) {
            (false, false) => f.write_str("not served"),
            (true, false) => f.write_str("served at v1"),
            (false, true) => f.write_str("served at v2"),
            (true, true) => f.write_str("served at v1 and v2"),
        }
    }
}

impl TargetKind {
    /// The target's `kind`.
    pub const fn kind_name(self) -> &'static str {
        match self {
            TargetKind::Crd => CRD_KIND,
            TargetKind::Xrd => XRD_KIND,
        }
    }

    /// The target's `apiVersion` when read or written through `xrd` (which only XRDs use).
    pub const fn api_version(self, xrd: XrdVersion) -> &'static str {
        match self {
            TargetKind::Crd => CRD_API_VERSION,
            TargetKind::Xrd => xrd.api_version(),
        }
    }

    /// Which target an object of this `apiVersion`/`kind` is, if any: XRDs at either version.
    pub fn of_type(api_version: &str, kind: &str) -> Option<TargetKind> {
        match kind {
            CRD_KIND if api_version == CRD_API_VERSION => Some(TargetKind::Crd),
            XRD_KIND if XrdVersion::of_api_version(api_version).is_some() => Some(TargetKind::Xrd),
            _ => None,
        }
    }
}

/// Targets are listed this many a page. A CRD's metadata alone can be as large as its schema
/// (`managedFields` list every field; `kubectl apply` copies the whole object into an
/// annotation), so a page of the default 500 is hundreds of MB to parse at once; 20 bound it
/// to a few MB (150 unrelated CRDs of 134 KB added 10.6 MB to the operator at 20 a page and
/// 21.0 MB at 500: `docs/changelog.md`, 2026-12-01).
pub const TARGET_PAGE: u32 = 20;

/// The `ApiResource` of a target kind, for dynamic clients; XRDs at `xrd`.
pub fn resource(kind: TargetKind, xrd: XrdVersion) -> ApiResource {
    match kind {
        TargetKind::Crd => ApiResource::erase::<
            k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
        >(&()),
        TargetKind::Xrd => xrd.resource(),
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
        carries(target, Some(&self.conversion()))
    }
}

/// The `spec.conversion` that hands a target of `kind` back to the apiserver; `None` means
/// no `spec.conversion` at all. A CRD's is strategy None, no webhook. An XRD's is none:
/// Crossplane 2.3's `v1` XRD schema (the only version that takes a `LegacyCluster` XRD)
/// validates a present `spec.conversion` with `self.strategy == 'Webhook' &&
/// has(self.webhook)`, which refuses strategy None outright, while an XRD without one is
/// valid at both versions and Crossplane renders it into CRDs the apiserver defaults to
/// strategy None — the same unwiring.
pub fn unwired(kind: TargetKind) -> Option<CustomResourceConversion> {
    match kind {
        TargetKind::Crd => {
            Some(CustomResourceConversion { strategy: STRATEGY_NONE.to_string(), webhook: None })
        }
        TargetKind::Xrd => None,
    }
}

/// Whether `target` (CRD or XRD JSON, as the apiserver returns it) says exactly `want` in
/// `spec.conversion` (`None`: has none). A `spec.conversion` that does not parse says nothing
/// dco wants.
pub fn carries(target: &Value, want: Option<&CustomResourceConversion>) -> bool {
    let live = target.pointer("/spec/conversion").filter(|c| !c.is_null());
    match (live, want) {
        (None, None) => true,
        (Some(live), Some(want)) => CustomResourceConversion::deserialize(live).is_ok_and(|l| &l == want),
        _ => false,
    }
}

/// The server-side apply body that sets only `spec.conversion` of target `name` (an XRD
/// through `xrd`): the only field of a target dco ever writes. With `conversion` `None` it
/// sets nothing, so the apply releases every field of `spec.conversion` dco owned.
pub fn apply_body(
    kind: TargetKind,
    xrd: XrdVersion,
    name: &str,
    conversion: Option<&CustomResourceConversion>,
) -> Value {
    let mut body = json!({
        "apiVersion": kind.api_version(xrd),
        "kind": kind.kind_name(),
        "metadata": { "name": name },
    });
    if let Some(c) = conversion {
        body["spec"] = json!({ "conversion": c });
    }
    body
}

/// The JSON patch that writes the whole `spec.conversion` as `want` (`None`: removes it).
/// Server-side apply keeps fields another manager owns too (another apply of the same value
/// shares them), so an apply can leave strategy Webhook without a webhook, or a
/// webhook beside strategy None; an update replaces the field whole and drops what it
/// removes from every manager. The `remove` is only sent while the target has one.
pub fn whole_conversion_patch(want: Option<&CustomResourceConversion>) -> Value {
    match want {
        // `add` replaces a member that exists.
        Some(c) => json!([{"op": "add", "path": "/spec/conversion", "value": c}]),
        None => json!([{"op": "remove", "path": "/spec/conversion"}]),
    }
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
        let mut v = apply_body(kind, XrdVersion::V2, name, Some(conversion));
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
        let c = wiring().conversion();
        let crd = apply_body(TargetKind::Crd, XrdVersion::V2, "widgets.example.org", Some(&c));
        assert_eq!(crd["apiVersion"], "apiextensions.k8s.io/v1");
        assert_eq!(crd["kind"], "CustomResourceDefinition");
        let v1 = apply_body(TargetKind::Xrd, XrdVersion::V1, "xdbs.example.org", Some(&c));
        assert_eq!(v1["apiVersion"], "apiextensions.crossplane.io/v1");
        let xrd = apply_body(TargetKind::Xrd, XrdVersion::V2, "xdbs.example.org", Some(&c));
        assert_eq!(xrd["apiVersion"], "apiextensions.crossplane.io/v2");
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
        let none = applied(TargetKind::Crd, "w", &unwired(TargetKind::Crd).unwrap());
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
    fn a_crd_is_unwired_to_strategy_none_and_an_xrd_to_no_conversion() {
        let crd = unwired(TargetKind::Crd).unwrap();
        assert_eq!(serde_json::to_value(&crd).unwrap(), json!({"strategy": "None"}));
        // Crossplane's v1 XRD schema refuses any present spec.conversion but a webhook one.
        assert_eq!(unwired(TargetKind::Xrd), None);
        // The XRD's unwiring apply sets nothing: it only releases what dco owned.
        for at in XrdVersion::PREFERENCE {
            let body = apply_body(TargetKind::Xrd, at, "xdbs.example.org", None);
            assert_eq!(
                body,
                json!({"apiVersion": at.api_version(), "kind": XRD_KIND, "metadata": {"name": "xdbs.example.org"}})
            );
        }
    }

    #[test]
    fn carries_is_exact_so_a_share_another_manager_kept_is_seen() {
        let w = wiring().conversion();
        let none = unwired(TargetKind::Crd).unwrap();
        let wired = applied(TargetKind::Xrd, "x", &w);
        assert!(carries(&wired, Some(&w)));
        assert!(!carries(&wired, Some(&none)) && !carries(&wired, None));
        // What an apply of strategy None leaves when another manager shares the webhook fields.
        let mut stale = wired.clone();
        stale["spec"]["conversion"]["strategy"] = json!("None");
        assert!(!carries(&stale, Some(&none)), "a webhook beside strategy None");
        // What releasing leaves when another manager shares only the strategy.
        let half = json!({"spec": {"conversion": {"strategy": "Webhook"}}});
        assert!(!carries(&half, None) && !carries(&half, Some(&w)), "strategy Webhook without a webhook");
        // A leftover url beside dco's service is not dco's wiring either.
        let mut url = wired.clone();
        url["spec"]["conversion"]["webhook"]["clientConfig"]["url"] = json!("https://127.0.0.1/x");
        assert!(!carries(&url, Some(&w)));
        for absent in [json!({"spec": {}}), json!({"spec": {"conversion": null}})] {
            assert!(carries(&absent, None) && !carries(&absent, Some(&none)), "{absent}");
        }
        assert!(carries(&applied(TargetKind::Crd, "w", &none), Some(&none)));
    }

    #[test]
    fn the_whole_conversion_patch_replaces_or_removes_the_field() {
        let w = wiring().conversion();
        let add = whole_conversion_patch(Some(&w));
        assert_eq!(
            add,
            json!([{"op": "add", "path": "/spec/conversion", "value": serde_json::to_value(&w).unwrap()}])
        );
        assert_eq!(whole_conversion_patch(None), json!([{"op": "remove", "path": "/spec/conversion"}]));
        // What it makes of a target is tested where it is applied (operator/src/config/target.rs).
    }

    #[test]
    fn kind_names_round_trip_at_both_xrd_versions() {
        for xrd in XrdVersion::PREFERENCE {
            for kind in [TargetKind::Crd, TargetKind::Xrd] {
                assert_eq!(TargetKind::of_type(kind.api_version(xrd), kind.kind_name()), Some(kind));
            }
            let ar = xrd.resource();
            assert_eq!((ar.api_version.as_str(), ar.kind.as_str()), (xrd.api_version(), XRD_KIND));
            assert_eq!(ar.version, xrd.name());
            assert_eq!(XRD_CRD_NAME, format!("{}.{}", ar.plural, ar.group));
            assert_eq!(XrdVersion::of_api_version(xrd.api_version()), Some(xrd));
        }
        assert_eq!(TargetKind::of_type("apiextensions.crossplane.io/v3", XRD_KIND), None);
        assert_eq!(TargetKind::of_type(CRD_API_VERSION, XRD_KIND), None);
        assert_eq!(TargetKind::of_type("apiextensions.crossplane.io/v2", CRD_KIND), None);
    }

    #[test]
    fn v2_is_preferred_and_v1_used_while_it_is_the_only_one() {
        assert_eq!(XrdApi::of_served(["v1", "v2"]).preferred(), Some(XrdVersion::V2));
        assert_eq!(XrdApi::of_served(["v2"]).preferred(), Some(XrdVersion::V2));
        assert_eq!(XrdApi::of_served(["v1"]).preferred(), Some(XrdVersion::V1));
        // A version dco does not know is not one it can use.
        assert_eq!(XrdApi::of_served(["v3"]), XrdApi::ABSENT);
        assert!(!XrdApi::ABSENT.installed());
        assert_eq!(XrdApi::of_served(["v1", "v2"]).to_string(), "served at v1 and v2");
    }

    #[test]
    fn a_legacy_cluster_xrd_is_written_at_v1_while_v1_is_served() {
        let both = XrdApi::of_served(["v1", "v2"]);
        let legacy =
            json!({"spec": {"scope": "LegacyCluster", "claimNames": {"kind": "Db", "plural": "dbs"}}});
        let claims_only = json!({"spec": {"claimNames": {"kind": "Db", "plural": "dbs"}}});
        let namespaced = json!({"spec": {"scope": "Namespaced"}});
        assert_eq!(both.for_write(&legacy), Some(XrdVersion::V1));
        assert_eq!(both.for_write(&claims_only), Some(XrdVersion::V1));
        assert_eq!(both.for_write(&namespaced), Some(XrdVersion::V2));
        assert_eq!(both.for_write(&json!({})), Some(XrdVersion::V2));
        // Only v2 served: nothing better to try.
        assert_eq!(XrdApi::of_served(["v2"]).for_write(&legacy), Some(XrdVersion::V2));
        assert_eq!(XrdApi::ABSENT.for_write(&namespaced), None);
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

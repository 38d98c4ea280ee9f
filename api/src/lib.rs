//! dco's API: the three custom resources, their rule language, the names every component
//! shares, and the assignment resolver (pure, shared by the operator and the webhook).

pub mod assign;
#[cfg(feature = "client")]
pub mod clock_jumps;
pub mod cluster;
pub mod config;
pub mod conflict;
#[cfg(feature = "client")]
pub mod crossplane;
pub mod hash;
pub mod listen;
pub mod metrics;
pub mod placement;
pub mod rules;
pub mod schema;
pub mod served_lease;
pub mod server;
pub mod stop;
pub mod target;

pub use config::{
    CRDConversionConfig, CRDConversionConfigSpec, ConfigStatus, ConversionConfig, ConversionSpec,
    HandoverState, HandoverStatus, XRDConversionConfig, XRDConversionConfigSpec,
};
pub use server::{ConversionWebhookServer, ConversionWebhookServerSpec, ServerStatus};

/// API group of all three kinds.
pub const GROUP: &str = "conversion.dco.rs";
pub const VERSION: &str = "v1alpha1";
pub const API_VERSION: &str = "conversion.dco.rs/v1alpha1";

/// Finalizer on configs: revert the target's `spec.conversion` before the config goes.
pub const FINALIZER_SAFE_REVERT: &str = "conversion.dco.rs/safe-revert";
/// Finalizer on servers: keep a server while configs resolve to it.
pub const FINALIZER_IN_USE: &str = "conversion.dco.rs/in-use";
/// Lets a config be deleted while its target still serves several versions.
pub const ANNOTATION_ALLOW_UNSAFE_DELETE: &str = "conversion.dco.rs/allow-unsafe-delete";
/// Lets a server be deleted while configs still resolve to it.
pub const ANNOTATION_ALLOW_FORCE_DELETE: &str = "conversion.dco.rs/allow-force-delete";
/// Label naming the ConversionWebhookServer a resource belongs to.
pub const LABEL_INSTANCE: &str = "conversion.dco.rs/instance";
/// Annotation on a served-target Lease holding the gzipped, base64'd sorted target set.
pub const ANNOTATION_SERVED_TARGETS: &str = "conversion.dco.rs/served-targets";
/// Annotation on a served-target Lease marking a set too large to publish.
pub const ANNOTATION_SERVED_TRUNCATED: &str = "conversion.dco.rs/served-targets-truncated";
pub const LABEL_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
pub const MANAGED_BY: &str = "dco";
/// Prefix of a webhook replica's served-target Lease: `dco-served-<podName>`.
pub const SERVED_LEASE_PREFIX: &str = "dco-served-";

/// The path the apiserver posts ConversionReviews for `target` to.
pub fn webhook_path(target: &str) -> String {
    format!("/convert/{target}")
}

/// The served-target Lease name of a webhook Pod.
pub fn served_lease_name(pod: &str) -> String {
    format!("{SERVED_LEASE_PREFIX}{pod}")
}

/// All three CRDs, in a fixed order.
pub fn crds()
-> Vec<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> {
    use kube::CustomResourceExt;
    vec![XRDConversionConfig::crd(), CRDConversionConfig::crd(), ConversionWebhookServer::crd()]
}

/// The CRDs as multi-document YAML, as `crdgen` prints them.
pub fn crds_yaml() -> String {
    crd_files().into_iter().map(|(_, yaml)| yaml).collect::<Vec<_>>().join("---\n")
}

/// One `(<plural>.yaml, YAML)` per CRD, as the chart ships them under `charts/dco/crds/`.
pub fn crd_files() -> Vec<(String, String)> {
    crds()
        .iter()
        .map(|c| {
            let yaml = serde_yaml::to_string(c).expect("a CRD always serialises");
            (format!("{}.yaml", c.spec.names.plural), yaml)
        })
        .collect()
}

//! A CRD Crossplane generated from an XRD wakes the XRDConversionConfigs of that XRD: its
//! spec.conversion is what the apiserver reads (config/propagation.rs), so a move of the XRD
//! waits on it, and its change is news at once rather than at the next requeue. The XRD is
//! found by the CRD's ownerReference (kind CompositeResourceDefinition, Crossplane's group):
//! the composite's CRD is named as its XRD, the claim's is not.

use dco_api::target::{XRD_GROUP, XRD_KIND};
use kube::Resource;

/// The XRD that generated `crd`, by its ownerReference; `None` for any other CRD.
pub fn xrd_of<K: Resource>(crd: &K) -> Option<String> {
    crd.meta().owner_references.as_ref()?.iter().find_map(|r| {
        let group = r.api_version.split_once('/').map_or("", |(g, _)| g);
        (r.kind == XRD_KIND && group == XRD_GROUP).then(|| r.name.clone())
    })
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use kube::api::PartialObjectMeta;

    use super::*;

    fn crd(owners: Vec<(&str, &str, &str)>) -> PartialObjectMeta<CustomResourceDefinition> {
        let mut m = PartialObjectMeta::<CustomResourceDefinition>::default();
        m.metadata.name = Some("dbs.example.org".into());
        m.metadata.owner_references = Some(
            owners
                .into_iter()
                .map(|(api_version, kind, name)| OwnerReference {
                    api_version: api_version.into(),
                    kind: kind.into(),
                    name: name.into(),
                    uid: "u".into(),
                    ..Default::default()
                })
                .collect(),
        );
        m
    }

    #[test]
    fn a_claim_crd_maps_to_its_xrd_by_owner_reference_of_either_api_version() {
        for v in ["apiextensions.crossplane.io/v1", "apiextensions.crossplane.io/v2"] {
            let c = crd(vec![
                ("pkg.crossplane.io/v1", "ConfigurationRevision", "p"),
                (v, XRD_KIND, "xdbs.example.org"),
            ]);
            assert_eq!(xrd_of(&c).as_deref(), Some("xdbs.example.org"), "{v}");
        }
        assert_eq!(xrd_of(&crd(vec![("example.org/v1", XRD_KIND, "x")])), None);
        assert_eq!(xrd_of(&crd(vec![])), None);
        assert_eq!(xrd_of(&PartialObjectMeta::<CustomResourceDefinition>::default()), None);
    }
}

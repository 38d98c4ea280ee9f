//! The one status write of a reconcile: server-side apply of `status` under the operator's
//! field manager, forced (the operator owns its kinds' status; a conflict would only mean an
//! older operator wrote it).

use kube::api::{Api, Patch, PatchParams};
use kube::{Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Server-side apply `status` to `obj`'s status subresource (dco's three kinds are
/// cluster-scoped); the error is kube's, for the caller to name.
pub async fn apply<K, S>(client: &Client, obj: &K, status: &S, field_manager: &str) -> Result<(), kube::Error>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::ClusterResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
    S: Serialize,
{
    let api: Api<K> = Api::all(client.clone());
    let patch = serde_json::json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "status": status,
    });
    api.patch_status(&obj.name_any(), &PatchParams::apply(field_manager).force(), &Patch::Apply(&patch))
        .await
        .map(drop)
}

//! The one status write of a reconcile: server-side apply of `status` under the operator's
//! field manager, forced (the operator owns its kinds' status; a field-manager conflict would
//! only mean an older operator wrote it), and conditioned on the resourceVersion the
//! reconcile read: a status written since — by another replica that took the object's shard
//! while this one was paused — is not overwritten; the write fails with 409, and the next
//! reconcile reads it.

use kube::api::{Api, Patch, PatchParams};
use kube::{Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Server-side apply `status` to `obj`'s status subresource (dco's three kinds are
/// cluster-scoped); the object's resourceVersion after the write (what a later wake compares
/// with its cache to tell that nothing changed since); the error is kube's, for the caller to
/// name.
pub async fn apply<K, S>(
    client: &Client,
    obj: &K,
    status: &S,
    field_manager: &str,
) -> Result<Option<String>, kube::Error>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::ClusterResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
    S: Serialize,
{
    let api: Api<K> = Api::all(client.clone());
    let mut patch = serde_json::json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "status": status,
    });
    if let Some(rv) = obj.meta().resource_version.as_deref() {
        patch["metadata"] = serde_json::json!({"resourceVersion": rv});
    }
    api.patch_status(&obj.name_any(), &PatchParams::apply(field_manager).force(), &Patch::Apply(&patch))
        .await
        .map(|after| after.meta().resource_version.clone())
}

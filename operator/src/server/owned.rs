//! Apply-and-prune of the objects a ConversionWebhookServer owns: every desired object is
//! server-side applied through [`OwnedObjects::add`], which remembers it; [`OwnedObjects::prune`] then
//! deletes the objects of the owned kinds that still carry this server's labels and
//! controller ownerReference but were not applied this reconcile (an HPA whose
//! `spec.autoscaling` was removed, a ServiceAccount once the spec names its own).
//!
//! An object is only ever deleted when its controller ownerReference has this server's uid
//! (the labels alone can be copied), and the delete carries that object's uid as a
//! precondition, so a same-named object created since the list is left alone.

use std::collections::BTreeSet;

use dco_api::{LABEL_INSTANCE, LABEL_MANAGED_BY, MANAGED_BY};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::{Secret, Service, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, Preconditions, PropagationPolicy};
use kube::{Client, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{Error, Result};
use crate::names::FIELD_MANAGER;
use crate::names::ServerNames;

/// A kind the server owns objects of: its API in the server's namespace (or the cluster's),
/// and its kind for keys and errors.
pub trait Kind:
    Resource<DynamicType = ()> + k8s_openapi::Resource + Clone + Serialize + DeserializeOwned + std::fmt::Debug
{
    fn api(client: Client, namespace: &str) -> Api<Self>;
    /// The namespace an object of this kind lives in, given the server's.
    fn namespace(namespace: &str) -> Option<String>;
}

impl<K> Kind for K
where
    K: Resource<DynamicType = ()>
        + k8s_openapi::Resource
        + Clone
        + Serialize
        + DeserializeOwned
        + std::fmt::Debug,
    <K as Resource>::Scope: ScopeApi<K>,
{
    fn api(client: Client, namespace: &str) -> Api<K> {
        <<K as Resource>::Scope as ScopeApi<K>>::api(client, namespace)
    }
    fn namespace(namespace: &str) -> Option<String> {
        <<K as Resource>::Scope as ScopeApi<K>>::namespace(namespace)
    }
}

/// Picks `Api::namespaced` or `Api::all` by the resource's scope.
pub trait ScopeApi<K> {
    fn api(client: Client, namespace: &str) -> Api<K>;
    /// The namespace an object of this scope lives in, given the server's.
    fn namespace(namespace: &str) -> Option<String>;
}

impl<K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>> ScopeApi<K>
    for k8s_openapi::NamespaceResourceScope
{
    fn api(client: Client, namespace: &str) -> Api<K> {
        Api::namespaced(client, namespace)
    }
    fn namespace(namespace: &str) -> Option<String> {
        Some(namespace.to_string())
    }
}

impl<K: Resource<DynamicType = (), Scope = k8s_openapi::ClusterResourceScope>> ScopeApi<K>
    for k8s_openapi::ClusterResourceScope
{
    fn api(client: Client, _namespace: &str) -> Api<K> {
        Api::all(client)
    }
    fn namespace(_namespace: &str) -> Option<String> {
        None
    }
}

/// One object, by kind and place.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Key {
    api_version: &'static str,
    kind: &'static str,
    namespace: Option<String>,
    name: String,
}

impl Key {
    fn of<K: Kind>(namespace: Option<String>, name: String) -> Self {
        Key { api_version: K::API_VERSION, kind: K::KIND, namespace, name }
    }

    /// `ns/name`, or `name` for a cluster-scoped object: how errors and logs name it.
    fn label(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{ns}/{}", self.name),
            None => self.name.clone(),
        }
    }
}

/// The objects one reconcile of one server applied (or keeps), and the means to prune the rest.
pub struct OwnedObjects {
    client: Client,
    /// The server's workload namespace: where its namespaced objects live.
    namespace: String,
    server: String,
    owner_uid: String,
    kept: BTreeSet<Key>,
}

impl OwnedObjects {
    pub fn new(client: Client, names: &ServerNames, owner: &OwnerReference) -> Self {
        OwnedObjects {
            client,
            namespace: names.namespace.clone(),
            server: names.server.clone(),
            owner_uid: owner.uid.clone(),
            kept: BTreeSet::new(),
        }
    }

    /// Server-side apply `obj` (forced: the operator owns these fields) and keep it from the prune.
    pub async fn add<K: Kind>(&mut self, obj: &K) -> Result<K> {
        let name = obj.meta().name.clone().unwrap_or_default();
        let namespace = obj.meta().namespace.clone().unwrap_or_else(|| self.namespace.clone());
        let key = Key::of::<K>(K::namespace(&namespace), name);
        let api = K::api(self.client.clone(), &namespace);
        crate::context::fence("a server's child")?;
        let applied = api
            .patch(&key.name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(obj))
            .await
            .map_err(Error::kube("apply", K::KIND, key.label()))?;
        self.kept.insert(key);
        Ok(applied)
    }

    /// Keep the object `name` of kind `K` from the prune without applying it this reconcile:
    /// the CA and serving Secrets, which are written only when they must change.
    pub fn keep<K: Kind>(&mut self, name: &str) {
        self.kept.insert(Key::of::<K>(K::namespace(&self.namespace), name.to_string()));
    }

    /// Delete what this server owns but did not apply or keep, kind by kind (dependents
    /// before what they depend on); returns what was deleted, as `Kind ns/name`.
    pub async fn prune(&self) -> Result<Vec<String>> {
        let mut pruned = Vec::new();
        self.prune_kind::<HorizontalPodAutoscaler>(&mut pruned).await?;
        self.prune_kind::<PodDisruptionBudget>(&mut pruned).await?;
        self.prune_kind::<Deployment>(&mut pruned).await?;
        self.prune_kind::<Service>(&mut pruned).await?;
        self.prune_kind::<Secret>(&mut pruned).await?;
        self.prune_kind::<RoleBinding>(&mut pruned).await?;
        self.prune_kind::<Role>(&mut pruned).await?;
        self.prune_kind::<ServiceAccount>(&mut pruned).await?;
        self.prune_kind::<ClusterRoleBinding>(&mut pruned).await?;
        self.prune_kind::<ClusterRole>(&mut pruned).await?;
        Ok(pruned)
    }

    /// The label selector of this server's objects (`ServerNames::labels`).
    fn selector(&self) -> String {
        format!("{LABEL_MANAGED_BY}={MANAGED_BY},{LABEL_INSTANCE}={}", self.server)
    }

    /// Whether `meta` is this server's: its labels, and its controller is this server's uid.
    fn owns(&self, meta: &ObjectMeta) -> bool {
        let label = |k: &str| meta.labels.as_ref().and_then(|l| l.get(k)).map(String::as_str);
        let controlled = meta
            .owner_references
            .iter()
            .flatten()
            .any(|o| o.controller == Some(true) && o.uid == self.owner_uid);
        controlled
            && label(LABEL_MANAGED_BY) == Some(MANAGED_BY)
            && label(LABEL_INSTANCE) == Some(&self.server)
    }

    async fn prune_kind<K: Kind>(&self, pruned: &mut Vec<String>) -> Result<()> {
        let api = K::api(self.client.clone(), &self.namespace);
        let where_ = K::namespace(&self.namespace).unwrap_or_else(|| "(cluster)".to_string());
        // Metadata only: the Secrets' keys need not travel to decide what to delete.
        let list = api
            .list_metadata(&ListParams::default().labels(&self.selector()))
            .await
            .map_err(Error::kube("list", K::KIND, where_))?;
        for meta in list.items.into_iter().map(|i| i.metadata) {
            if !self.owns(&meta) || meta.deletion_timestamp.is_some() {
                continue;
            }
            // The list is of the server's namespace (or the cluster): where `add` keyed it too.
            let key = Key::of::<K>(K::namespace(&self.namespace), meta.name.clone().unwrap_or_default());
            if self.kept.contains(&key) {
                continue;
            }
            let dp = DeleteParams {
                preconditions: Some(Preconditions { uid: meta.uid.clone(), resource_version: None }),
                propagation_policy: Some(PropagationPolicy::Background),
                ..DeleteParams::default()
            };
            crate::context::fence("a server's child")?;
            match api.delete(&key.name, &dp).await {
                Ok(_) => pruned.push(format!("{} {}", K::KIND, key.label())),
                // Gone already, or replaced by a new object of that name: not the one listed.
                Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
                Err(e) => return Err(Error::kube("prune", K::KIND, key.label())(e)),
            }
        }
        Ok(())
    }
}

//! What of each watched kind a wake is decided on: a change of anything else wakes nothing.

use dco_api::{ConversionWebhookServer, ConversionWebhookServerSpec, LABEL_INSTANCE};
use k8s_openapi::api::core::v1::Secret;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};

use crate::pki;

/// What of a server the resolver (`ServerInfo::from`) and the configs read: never its status.
#[derive(Clone, Debug, PartialEq)]
pub struct ServerView {
    pub name: String,
    pub spec: ConversionWebhookServerSpec,
    pub deleting: bool,
}

impl ServerView {
    pub fn of(s: &ConversionWebhookServer) -> Option<Self> {
        Some(ServerView {
            name: s.name_any(),
            spec: s.spec.clone(),
            deleting: s.meta().deletion_timestamp.is_some(),
        })
    }
}

/// What the handover machine reads of a server's status: its ready replicas (the count a
/// destination's Leases must match, `served::replicas`) and `Available` (whether it may be
/// wired to, config/facts.rs) — not `servedTargets` (a move reads the Leases themselves, and
/// Lease changes wake it already), `assignedConfigs` or condition messages, which a config
/// change itself rewrites.
#[derive(Clone, Debug, PartialEq)]
pub struct ServedView {
    pub name: String,
    pub ready_replicas: i32,
    pub available: bool,
}

impl ServedView {
    pub fn of(s: &ConversionWebhookServer) -> Option<Self> {
        let st = s.status.as_ref();
        Some(ServedView {
            name: s.name_any(),
            ready_replicas: st.map_or(0, |st| st.ready_replicas),
            available: st.is_some_and(|st| {
                dco_state::conditions::is_true(&st.conditions, crate::server::condition::AVAILABLE)
            }),
        })
    }
}

/// A server's certificate Secret as the configs read it: whose it is and its `ca.crt`
/// (`Context::ca_bundle` puts that into the targets' caBundle).
#[derive(Clone, Debug, PartialEq)]
pub struct CaView {
    pub server: String,
    pub ca: Option<Vec<u8>>,
}

impl CaView {
    pub fn of(s: &Secret) -> Option<Self> {
        let server = owner_of(s).map(|r| r.name).or_else(|| s.labels().get(LABEL_INSTANCE).cloned())?;
        let ca = s.data.as_ref().and_then(|d| d.get(pki::CA_CRT)).map(|b| b.0.clone());
        Some(CaView { server, ca })
    }
}

/// The server whose child `o` is, by its controller ownerReference (server/desired.rs
/// `owner`). Not `Controller::owns`: kube-runtime gives the owner's reference the child's
/// namespace (controller/trigger.rs `trigger_owners`), which never matches a cluster-scoped
/// server in the store, so those triggers would be dropped.
pub fn owner_of<K: Resource>(o: &K) -> Option<ObjectRef<ConversionWebhookServer>> {
    let (kind, api_version) = (ConversionWebhookServer::kind(&()), ConversionWebhookServer::api_version(&()));
    o.meta()
        .owner_references
        .as_ref()?
        .iter()
        .find(|r| r.controller == Some(true) && r.kind == kind && r.api_version == api_version)
        .map(|r| ObjectRef::new(&r.name))
}

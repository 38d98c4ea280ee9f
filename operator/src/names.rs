//! The names both wings and the shard coordinator agree on: the field manager, the names and
//! labels of everything the operator creates for a ConversionWebhookServer, and the hash that
//! tells apart the cluster-wide names of operators with different `--selector`s.
//!
//! One function per object so the controller that writes them and the config controller that
//! reads them (the Service a target is wired to, the Secret holding the CA) cannot disagree.

use std::collections::BTreeMap;

use dco_api::server::ServiceSpec;
use dco_api::{ConversionWebhookServer, LABEL_INSTANCE, LABEL_MANAGED_BY, MANAGED_BY};
use kube::ResourceExt;
use sha2::{Digest, Sha256};

/// SSA field manager of everything the operator writes.
pub const FIELD_MANAGER: &str = "dco-operator";

/// Eight hex digits of the SHA-256 of a `--selector`: what tells apart the cluster-wide names
/// of operators that share a cluster (these Leases, the admission configuration).
pub fn selector_hash(selector: &str) -> String {
    Sha256::digest(selector.as_bytes()).iter().take(4).map(|b| format!("{b:02x}")).collect()
}

/// DNS-1035 labels (Service names) are at most 63 characters.
const MAX_LABEL: usize = 63;
const PREFIX: &str = "dco-webhook-";

/// `dco-webhook-<server>`, shortened with a hash suffix when the server name is too long for
/// a Service name, so every server still gets a distinct, valid name.
pub fn base(server: &str) -> String {
    let full = format!("{PREFIX}{server}");
    if full.len() <= MAX_LABEL - 4 {
        return full;
    }
    let digest = Sha256::digest(server.as_bytes());
    let suffix: String = digest.iter().take(4).map(|b| format!("{b:02x}")).collect();
    // 63 - 4 reserved for "-tls"/"-ca" suffixes on Secrets; keep the Service the same stem.
    let keep = MAX_LABEL - 4 - suffix.len() - 1;
    let mut stem: String = full.chars().take(keep).collect();
    while stem.ends_with('-') || stem.ends_with('.') {
        stem.pop();
    }
    format!("{stem}-{suffix}")
}

/// Whether `service` has the shape of a server's Service name (`base`), and the server's
/// name when it can be read back from it: `Some(None)` for a shortened (hashed) name, `None`
/// for a name dco never gives a Service.
pub fn server_of_service(service: &str) -> Option<Option<String>> {
    let rest = service.strip_prefix(PREFIX)?;
    // A shortened name (a stem of the full one, `-`, 8 hex digits: 59 characters, fewer when
    // the stem lost trailing dashes) may equally be a short server's whole name: not guessed.
    let hashed = service.len() > MAX_LABEL - 4 - 8
        && rest
            .rsplit_once('-')
            .is_some_and(|(_, h)| h.len() == 8 && h.bytes().all(|b| b.is_ascii_hexdigit()));
    Some(Some(rest.to_string()).filter(|server| !hashed && base(server) == service))
}

/// The spec of a server's Service: the port a target is wired to is its `port`.
pub fn service_spec(cws: &ConversionWebhookServer) -> ServiceSpec {
    cws.spec.service.clone().unwrap_or_default()
}

/// The names of one server's objects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerNames {
    pub server: String,
    pub namespace: String,
    /// Deployment, Service, ServiceAccount, Role and RoleBinding share this name.
    pub workload: String,
    /// The serving certificate: `tls.crt`, `tls.key`, `ca.crt`.
    pub tls_secret: String,
    /// The self-managed CA's key pair (never mounted into Pods).
    pub ca_secret: String,
    /// ClusterRole and ClusterRoleBinding (cluster-scoped: prefixed by the server name).
    pub cluster_role: String,
}

impl ServerNames {
    pub fn new(server: &str, namespace: &str) -> Self {
        let workload = base(server);
        ServerNames {
            server: server.to_string(),
            namespace: namespace.to_string(),
            tls_secret: format!("{workload}-tls"),
            ca_secret: format!("{workload}-ca"),
            cluster_role: workload.clone(),
            workload,
        }
    }

    /// Names for `cws`, with `default_namespace` when its `spec.namespace` is empty.
    pub fn of(cws: &ConversionWebhookServer, default_namespace: &str) -> Self {
        let ns = cws.spec.namespace.as_deref().filter(|n| !n.is_empty()).unwrap_or(default_namespace);
        ServerNames::new(&cws.name_any(), ns)
    }

    pub fn service(&self) -> &str {
        &self.workload
    }

    pub fn service_account(&self, cws: &ConversionWebhookServer) -> String {
        cws.spec
            .service_account_name
            .clone()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| self.workload.clone())
    }

    /// `<svc>.<ns>.svc`, the name the apiserver dials and the certificate covers.
    pub fn service_host(&self) -> String {
        format!("{}.{}.svc", self.workload, self.namespace)
    }

    /// Labels on every object the operator manages for this server.
    pub fn labels(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            ("app.kubernetes.io/name".to_string(), "dco-webhook".to_string()),
            ("app.kubernetes.io/component".to_string(), "conversion-webhook".to_string()),
            (LABEL_MANAGED_BY.to_string(), MANAGED_BY.to_string()),
            (LABEL_INSTANCE.to_string(), self.server.clone()),
        ])
    }

    /// The Deployment's (immutable) Pod selector.
    pub fn selector(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            ("app.kubernetes.io/name".to_string(), "dco-webhook".to_string()),
            (LABEL_INSTANCE.to_string(), self.server.clone()),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_names_are_prefixed() {
        let n = ServerNames::new("pool-a", "dco-system");
        assert_eq!(n.workload, "dco-webhook-pool-a");
        assert_eq!(n.tls_secret, "dco-webhook-pool-a-tls");
        assert_eq!(n.service_host(), "dco-webhook-pool-a.dco-system.svc");
    }

    #[test]
    fn a_server_is_read_back_from_its_service_name_when_it_can_be() {
        assert_eq!(server_of_service("dco-webhook-pool-a"), Some(Some("pool-a".into())));
        let long = base(&"a".repeat(100));
        assert_eq!(server_of_service(&long), Some(None));
        assert_eq!(server_of_service("my-converter"), None);
    }

    #[test]
    fn long_names_stay_valid_and_distinct() {
        let a = "a".repeat(100);
        let b = format!("{}b", "a".repeat(99));
        let (na, nb) = (base(&a), base(&b));
        assert!(na.len() <= 59, "{na} is {} long", na.len());
        assert_ne!(na, nb);
        assert!(na.starts_with("dco-webhook-aaa"));
        assert!(!na.contains("--"));
    }
}

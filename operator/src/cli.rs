//! Command-line flags (each also settable from the environment).

use std::net::SocketAddr;
use std::time::Duration;

use clap::Parser;

/// dco's operator: runs ConversionWebhookServers and wires targets' conversion to them.
#[derive(Clone, Debug, Parser)]
#[command(name = "dco-operator", version)]
pub struct Args {
    /// Namespace for the workloads of servers whose spec.namespace is empty.
    #[arg(long, env = "POD_NAMESPACE", default_value = "dco-system")]
    pub namespace: String,
    /// The dco-webhook image for servers that set no spec.image (repository:tag).
    #[arg(long, env = "DCO_WEBHOOK_IMAGE", default_value = concat!("dco-webhook:v", env!("CARGO_PKG_VERSION")))]
    pub webhook_image: String,
    /// --listen of every webhook container; `$(POD_IP):9443` binds the Pod's own address.
    #[arg(long, env = "DCO_WEBHOOK_LISTEN", default_value = "0.0.0.0:9443")]
    pub webhook_listen: String,
    /// Port of every webhook container's plain-HTTP admin endpoints (/metrics,
    /// /debug/registry), bound on --webhook-listen's host.
    #[arg(long, env = "DCO_WEBHOOK_ADMIN_PORT", default_value_t = 8080)]
    pub webhook_admin_port: u16,
    /// A flag added to every webhook container before the server's extraArgs (repeatable).
    #[arg(long = "webhook-arg", env = "DCO_WEBHOOK_ARGS", value_delimiter = ',')]
    pub webhook_args: Vec<String>,
    /// Manage only ConversionWebhookServers and configs with these labels (e.g. `team=a`):
    /// several operators can share a cluster, each with its own servers and configs.
    #[arg(long, env = "DCO_SELECTOR")]
    pub selector: Option<String>,
    /// Namespaces servers may run in (`a,b`), or `*` for every namespace: the operator
    /// watches its Secrets, Deployments, Services and Leases only there (plus --namespace and
    /// --lease-namespace), and refuses a server whose namespace is not among them
    /// (docs/installation.md, "RBAC"; the chart sets it from rbac.serverNamespaces).
    #[arg(long, env = "DCO_SERVER_NAMESPACES", default_value = "*", value_parser = crate::namespaces::ServerNamespaces::parse)]
    pub server_namespaces: crate::namespaces::ServerNamespaces,
    /// Address of /healthz, /readyz and /metrics.
    #[arg(long, env = "DCO_METRICS_LISTEN", default_value = "0.0.0.0:8080")]
    pub metrics_listen: SocketAddr,
    /// How often settled objects are reconciled without an event.
    #[arg(long, env = "DCO_RESYNC", default_value = "5m", value_parser = parse_duration)]
    pub resync: Duration,
    /// Reconciles each controller (servers, CRDConversionConfigs, XRDConversionConfigs) runs
    /// at once in this replica. Without a bound a cold start sends one reconcile's requests
    /// per object at once: at 10,000 configs the apiserver timed out (docs/operations.md).
    #[arg(long, env = "DCO_MAX_CONCURRENT_RECONCILES", default_value_t = 16, value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub max_concurrent_reconciles: u16,
    /// Pace of config reconciles fanned out by server changes (rebalancing), per second, for
    /// the whole operator: the live replicas divide it (each paces at qps/N).
    #[arg(long, env = "DCO_REBALANCE_QPS", default_value_t = 50)]
    pub rebalance_qps: u32,
    /// OTLP/HTTP collector to send handover traces to, as its base URL (spans go to
    /// `<URL>/v1/traces`): each move is one trace, each transition one span. Off when unset.
    #[arg(long, env = "OTEL_EXPORTER_OTLP_ENDPOINT")]
    pub otlp_endpoint: Option<String>,
    /// Log format.
    #[arg(long, env = "DCO_LOG_FORMAT", default_value = "text", value_parser = ["text", "json"])]
    pub log_format: String,
    /// Shards of the operator's own work (configs and servers, by the hash of their uid); the
    /// replicas divide them by Leases. Every replica must use the same value.
    #[arg(long, env = "DCO_SHARDS", default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub shards: u32,
    /// This replica's id in the coordinator's Leases, unique among the running replicas
    /// (default: the Pod name, then the hostname).
    #[arg(long, env = "POD_NAME")]
    pub replica_id: Option<String>,
    /// Namespace of the coordinator's member and shard Leases (default: --namespace).
    #[arg(long, env = "DCO_LEASE_NAMESPACE")]
    pub lease_namespace: Option<String>,
    /// A shard Lease not renewed for this long may be taken by another replica; longer than
    /// the longest reconcile.
    #[arg(long, env = "DCO_LEASE_DURATION", default_value = "30s", value_parser = parse_duration)]
    pub lease_duration: Duration,
    /// How often the coordinator renews its Leases and re-divides the shards.
    #[arg(long, env = "DCO_LEASE_RENEW_INTERVAL", default_value = "10s", value_parser = parse_duration)]
    pub lease_renew_interval: Duration,
    /// Serve the validating admission webhook (docs/admission.md) behind this Service
    /// (`namespace/name`), and keep its ValidatingWebhookConfiguration and certificate.
    /// Off when unset: a registered webhook with `failurePolicy: Fail` needs a Service that
    /// reaches the operator Pods, which only a deployment (the chart, or the flags below) has.
    #[arg(long, env = "DCO_ADMISSION_SERVICE", value_parser = parse_service)]
    pub admission_service: Option<(String, String)>,
    /// Address the admission webhook listens on (HTTPS, `POST /validate`).
    #[arg(long, env = "DCO_ADMISSION_LISTEN", default_value = "0.0.0.0:9443")]
    pub admission_listen: SocketAddr,
    /// After SIGTERM, how long the replica, already not Ready, keeps answering admission
    /// reviews before it closes its connections: longer than the apiserver takes to stop
    /// opening connections to a Pod that left the Service's endpoints (docs/admission.md,
    /// "Stopping and failing replicas"). The Pod's terminationGracePeriodSeconds must exceed
    /// it by the close (6 s) and the Lease release (5 s).
    #[arg(long, env = "DCO_SHUTDOWN_DRAIN", default_value = "5s", value_parser = parse_duration)]
    pub shutdown_drain: Duration,
    /// Port of the admission Service (it forwards to --admission-listen's port).
    #[arg(long, env = "DCO_ADMISSION_PORT", default_value_t = 443)]
    pub admission_port: u16,
    /// Labels of the operator Pods (`k=v,...`): when set, the operator applies the admission
    /// Service itself, selecting them; otherwise the chart provides it.
    #[arg(long, env = "DCO_ADMISSION_POD_SELECTOR")]
    pub admission_pod_selector: Option<String>,
    /// Name of the ValidatingWebhookConfiguration (default: dco-operator-admission, with a
    /// hash of --selector appended when it is set, so several operators keep one each).
    #[arg(long, env = "DCO_ADMISSION_WEBHOOK_NAME")]
    pub admission_webhook_name: Option<String>,
    /// Who creates the ValidatingWebhookConfiguration: `create` (the operator, which then
    /// keeps it after it is gone) or `existing` (its installer — the chart — creates and
    /// deletes it; the operator only fills in the webhooks, never creates it).
    #[arg(long, env = "DCO_ADMISSION_CONFIGURATION", value_enum, default_value = "create")]
    pub admission_configuration: Owner,
    /// `failurePolicy` of the validating webhooks: `Fail` (a write of dco's kinds is refused
    /// while no replica answers) or `Ignore` (it goes through unchecked).
    #[arg(long, env = "DCO_ADMISSION_FAILURE_POLICY", value_enum, default_value = "Fail")]
    pub admission_failure_policy: FailurePolicy,
    /// Serve the key pair of this Secret (`tls.crt`, `tls.key`; in the --admission-service
    /// namespace) and register its `ca.crt` as the webhooks' caBundle, instead of issuing a
    /// certificate: one issued by cert-manager (the chart's admission.certManager), renewed
    /// there and served on every change without a restart (docs/admission.md).
    #[arg(long, env = "DCO_ADMISSION_TLS_SECRET")]
    pub admission_tls_secret: Option<String>,
    /// Serve and register the XRD guard (docs/admission.md, "The XRD guard"): a mutating
    /// webhook (`failurePolicy: Ignore`) that keeps dco's spec.conversion on XRD updates by
    /// other writers, such as Crossplane's package manager. Needs --admission-service. Off:
    /// the operator deletes a guard configuration it created earlier.
    #[arg(long, env = "DCO_XRD_GUARD", default_value_t = false)]
    pub xrd_guard: bool,
    /// Apply dco's CRDs from the YAML files in this directory, wait until each is Established,
    /// and exit without starting the operator (crds.rs): the chart's pre-upgrade hook, since
    /// helm never upgrades a chart's `crds/`.
    #[arg(long, value_name = "DIR")]
    pub apply_crds: Option<std::path::PathBuf>,
}

fn parse_service(s: &str) -> Result<(String, String), String> {
    match s.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok((ns.to_string(), name.to_string()))
        }
        _ => Err(format!("{s:?} is not namespace/name")),
    }
}

/// `k=v,k2=v2` as a map (the Service's selector).
pub fn parse_labels(s: &str) -> Result<std::collections::BTreeMap<String, String>, String> {
    s.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_string(), v.trim().to_string())),
            _ => Err(format!("--admission-pod-selector: {p:?} is not key=value")),
        })
        .collect()
}

impl Args {
    /// `--replica-id`, else the hostname.
    pub fn replica_id(&self) -> String {
        self.replica_id.clone().filter(|s| !s.is_empty()).unwrap_or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|h| h.trim().to_string())
                .ok()
                .filter(|h| !h.is_empty())
                .unwrap_or_else(|| "dco-operator".to_string())
        })
    }
}

/// Go-style durations (`250ms`, `5s`, `1m30s`) or a bare number of seconds.
pub use dco_engine::duration::parse_flag as parse_duration;

/// Who creates the `ValidatingWebhookConfiguration` (`--admission-configuration`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Owner {
    /// The operator creates it and keeps it whole (server-side apply); it stays after the
    /// operator is gone.
    #[value(name = "create")]
    Operator,
    /// Someone else (the chart) creates and deletes it; the operator only fills in its
    /// webhooks and waits while it does not exist.
    #[value(name = "existing")]
    Installer,
}

/// The validating webhooks' `failurePolicy` (`--admission-failure-policy`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum FailurePolicy {
    #[default]
    #[value(name = "Fail")]
    Fail,
    #[value(name = "Ignore")]
    Ignore,
}

impl FailurePolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            FailurePolicy::Fail => "Fail",
            FailurePolicy::Ignore => "Ignore",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::namespaces::ServerNamespaces;

    #[test]
    fn defaults_and_overrides() {
        let a = Args::try_parse_from(["dco-operator"]).unwrap();
        assert_eq!(a.webhook_listen, "0.0.0.0:9443");
        assert_eq!(a.webhook_admin_port, 8080);
        assert_eq!(a.resync, Duration::from_secs(300));
        assert_eq!(a.rebalance_qps, 50);
        let a = Args::try_parse_from([
            "dco-operator",
            "--webhook-listen=$(POD_IP):9443",
            "--webhook-arg=--drain-period=5s",
            "--webhook-arg=--lease-renew-interval=5s",
            "--resync=30s",
        ])
        .unwrap();
        assert_eq!(a.webhook_args, ["--drain-period=5s", "--lease-renew-interval=5s"]);
        assert_eq!(a.resync, Duration::from_secs(30));
        assert!(parse_duration("5 parsecs").is_err());
        assert!(a.admission_service.is_none(), "admission is off unless asked for");
        let a = Args::try_parse_from([
            "dco-operator",
            "--admission-service=dco-system/dco-admission",
            "--admission-listen=127.0.0.1:9444",
            "--admission-pod-selector=app=dco-operator",
        ])
        .unwrap();
        assert_eq!(a.admission_service, Some(("dco-system".into(), "dco-admission".into())));
        assert_eq!(a.admission_port, 443);
        assert_eq!(parse_labels("app=dco-operator, tier=x").unwrap().len(), 2);
        assert!(Args::try_parse_from(["dco-operator", "--admission-service=nope"]).is_err());
    }

    #[test]
    fn the_flag_through_clap() {
        let a = Args::try_parse_from(["dco-operator"]).unwrap();
        assert_eq!(a.server_namespaces, ServerNamespaces::All, "unset watches every namespace, as before");
        let a = Args::try_parse_from(["dco-operator", "--server-namespaces=team-a,team-b"]).unwrap();
        assert_eq!(
            a.server_namespaces,
            ServerNamespaces::Only(["team-a".to_string(), "team-b".to_string()].into())
        );
        assert!(Args::try_parse_from(["dco-operator", "--server-namespaces=Team"]).is_err());
    }
}

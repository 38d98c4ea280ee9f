//! The clients and the settings every step starts from.

use anyhow::Context as _;
use kube::Client;

use crate::cli::Args;
use crate::context::OperatorSettings;
use crate::observability::api_metrics::ApiMetrics;

/// The cluster's client config (in-cluster or KUBECONFIG) and the client built from it; the
/// Coordinator and the shard-scoped watches build their own from `config`, each through `api`
/// (every request counted by verb: observability/api_metrics.rs).
pub struct Clients {
    pub config: kube::Config,
    pub client: Client,
    pub api: ApiMetrics,
}

impl Clients {
    pub async fn infer(api: &ApiMetrics) -> anyhow::Result<Self> {
        let config = kube::Config::infer()
            .await
            .context("cannot build a Kubernetes client (in-cluster config or KUBECONFIG)")?;
        let client = api.client(config.clone()).context("cannot build a Kubernetes client")?;
        Ok(Clients { config, client, api: api.clone() })
    }
}

/// What every reconcile reads of the flags.
pub fn settings(args: &Args) -> OperatorSettings {
    OperatorSettings {
        namespace: args.namespace.clone(),
        webhook_image: args.webhook_image.clone(),
        webhook_listen: args.webhook_listen.clone(),
        webhook_admin_port: args.webhook_admin_port,
        webhook_args: args.webhook_args.clone(),
        resync: args.resync,
        max_concurrent: args.max_concurrent_reconciles,
        selector: args.selector.clone(),
        server_namespaces: args.server_namespaces.with(&args.namespace),
        ..OperatorSettings::default()
    }
}

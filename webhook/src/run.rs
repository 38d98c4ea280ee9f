//! Wiring: certificate, listener, routes, the sync loop (cluster or static), the Lease
//! publisher, and the shutdown sequence: SIGTERM → /readyz 503 → wait `--shutdown-delay` →
//! close the listener → drain in-flight requests (up to `--shutdown-timeout`) → exit.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio::sync::watch;

use crate::cli::Args;
use crate::health::Health;
use crate::lease::{LeasePublisher, LeaseSettings};
use crate::metrics::Metrics;
use crate::plan::Compiler;
use crate::pool::Pool;
use crate::registry::Registry;
use crate::routes::{self, App, Limits};
use crate::sync::{Identity, Syncer};
use crate::tls::{CertFiles, CertStore};
use crate::{cluster, serve, static_dir};

/// How often static mode re-reads its directory.
const STATIC_RELOAD: Duration = Duration::from_secs(5);

/// Resolves once `rx` turns true (or its sender is gone).
async fn stopped(mut rx: watch::Receiver<bool>) {
    let _ = rx.wait_for(|s| *s).await;
}

pub async fn run(args: Args, compiler: Arc<dyn Compiler>) -> anyhow::Result<()> {
    let metrics = Arc::new(Metrics::new());
    let registry = Arc::new(Registry::new());
    let health = Arc::new(Health::new(metrics.clone()));

    let certs =
        CertStore::load(CertFiles { cert: args.tls_cert_file.clone(), key: args.tls_key_file.clone() })?;
    tokio::spawn(certs.clone().watch(args.tls_reload_interval, metrics.clone()));
    let tls = Arc::new(crate::tls::server_config(certs).context("building the TLS server config")?);

    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}; change --listen", args.listen))?;
    tracing::info!(listen = %args.listen, "serving HTTPS");

    let (stop_tx, stop_rx) = watch::channel(false);
    {
        let (health, delay) = (health.clone(), args.shutdown_delay);
        tokio::spawn(async move {
            serve::termination_signal().await;
            health.mark_shutting_down();
            tracing::info!(?delay, "not ready any more; closing the listener after the shutdown delay");
            tokio::time::sleep(delay).await;
            let _ = stop_tx.send(true);
        });
    }

    let static_mode = args.static_dir.is_some();
    let instance = args.instance.clone().unwrap_or_else(|| "static".to_string());
    let identity = Identity {
        instance: instance.clone(),
        service_name: args.service_name.clone().unwrap_or_else(|| instance.clone()),
        static_mode,
    };
    let syncer = Syncer::new(compiler, registry.clone(), metrics.clone(), identity, args.drain_period);

    if let Some(dir) = args.static_dir.clone() {
        // Fail fast on a bad directory at start; later edits that break it keep the old plans.
        let world = static_dir::load(&dir)?;
        let mut syncer = syncer;
        let report = syncer.pass(&world, Instant::now());
        tracing::info!(dir = %dir.display(), configs = world.configs.len(), compiled = report.compiled, failed = report.failed, "static mode: serving the directory");
        health.mark_synced();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(STATIC_RELOAD).await;
                match static_dir::load(&dir) {
                    Ok(world) => {
                        syncer.pass(&world, Instant::now());
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "static directory unreadable; keeping the current plans")
                    }
                }
            }
        });
    } else {
        let client = kube::Client::try_default()
            .await
            .context("cannot build a Kubernetes client (in-cluster config or KUBECONFIG)")?;
        tokio::spawn(cluster::run(
            client.clone(),
            instance.clone(),
            syncer,
            health.clone(),
            stopped(stop_rx.clone()),
        ));
        match (args.pod_name.clone(), args.pod_namespace.clone()) {
            (Some(pod_name), Some(namespace)) => {
                let settings = LeaseSettings {
                    pod_name,
                    namespace,
                    instance: instance.clone(),
                    renew_interval: args.lease_renew_interval,
                    lease_duration: args.lease_duration,
                    max_encoded_bytes: args.served_targets_max_bytes,
                };
                let publisher = LeasePublisher::new(client, settings, registry.clone(), metrics.clone());
                tokio::spawn(publisher.run(stopped(stop_rx.clone())));
            }
            _ => tracing::warn!(
                "POD_NAME or POD_NAMESPACE not set: not publishing a served-target Lease, so the operator cannot verify moves onto this instance"
            ),
        }
    }

    let threads = match args.conversion_threads {
        0 => std::thread::available_parallelism().map_or(2, usize::from),
        n => n,
    };
    let pool = Arc::new(Pool::new(threads).context("starting the conversion threads")?);
    tracing::info!(threads, stack_mib = dco_engine::limits::STACK_BYTES >> 20, "conversion threads started");
    let app = Arc::new(App {
        registry,
        metrics,
        health,
        limits: Limits {
            max_body_bytes: args.max_request_bytes,
            request_timeout: args.request_timeout,
            conversion_memory_factor: usize::try_from(args.conversion_memory_factor).unwrap_or(usize::MAX),
        },
        pool,
        instance,
    });
    serve::serve(listener, tls, routes::router(app), stopped(stop_rx), args.shutdown_timeout).await;
    tracing::info!("shut down");
    Ok(())
}

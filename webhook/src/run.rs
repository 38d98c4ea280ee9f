//! Wiring: certificate, listener, routes, the sync loop (cluster or static), the Lease
//! publisher, and the shutdown sequence (docs/webhook.md, "Shutdown"): SIGTERM → /readyz 503
//! and every answer closes its connection, new connections still served → wait
//! `--shutdown-delay` → close the listener and ask the open connections to close → drain
//! in-flight requests (up to `--shutdown-timeout`) → exit.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use dco_api::stop::Shutdown;

use crate::budget::Budget;
use crate::cli::Args;
use crate::health::Health;
use crate::lease::{LeasePublisher, LeaseSettings};
use crate::metrics::Metrics;
use crate::plan::Compiler;
use crate::pool::Pool;
use crate::registry::Registry;
use crate::routes::{self, App, Limits};
use crate::serve::Transport;
use crate::sync::{Identity, Syncer};
use crate::tls::{CertFiles, CertStore};
use crate::{cluster, serve, static_dir};

/// How often static mode re-reads its directory; it is parsed and passed again only when its
/// files changed.
const STATIC_RELOAD: Duration = Duration::from_secs(5);

/// Resolves once the shutdown delay is over.
async fn stopped(shutdown: Shutdown) {
    shutdown.closing().await
}

async fn bind(addr: std::net::SocketAddr, what: &str, flag: &str) -> anyhow::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!(dco_api::listen::bind_error(what, flag, addr, &e)))
}

/// The conversion listener's limits, and the bytes left for reviews once what the
/// connections may buffer has come off `--max-inflight-bytes`.
pub fn transport_and_budget(args: &Args) -> anyhow::Result<(Transport, usize)> {
    let transport = Transport {
        max_streams: args.http2_max_streams,
        header_read_timeout: args.header_read_timeout,
        idle_timeout: args.idle_timeout,
        write_timeout: args.write_timeout,
        ..Transport::for_budget(args.max_inflight_bytes, args.max_connections)
    };
    let body_budget = args.max_inflight_bytes.saturating_sub(transport.buffered_bytes());
    anyhow::ensure!(
        body_budget >= args.max_request_bytes,
        "--max-inflight-bytes {} leaves {body_budget} bytes for reviews after {} connections' buffers (--max-connections × {}-byte HTTP/2 window + fixed buffers), less than one review of --max-request-bytes {}; raise --max-inflight-bytes or lower --max-connections or --max-request-bytes",
        args.max_inflight_bytes,
        transport.max_connections,
        transport.window,
        args.max_request_bytes
    );
    Ok((transport, body_budget))
}

pub async fn run(args: Args, compiler: Arc<dyn Compiler>) -> anyhow::Result<()> {
    let metrics = Arc::new(Metrics::new());
    let registry = Arc::new(Registry::new());
    let health = Arc::new(Health::new(metrics.clone()));

    let certs =
        CertStore::load(CertFiles { cert: args.tls_cert_file.clone(), key: args.tls_key_file.clone() })?;
    tokio::spawn(certs.clone().watch(args.tls_reload_interval, metrics.clone()));
    let tls = Arc::new(crate::tls::server_config(certs).context("building the TLS server config")?);

    let (transport, body_budget) = transport_and_budget(&args)?;
    let budget = Budget::new(body_budget, metrics.inflight_bytes.clone());

    // Both bound before anything can report Ready: a replica that cannot serve one exits.
    let listener = bind(args.listen, "conversion reviews", "--listen").await?;
    let admin_listener = bind(args.admin_listen, "/readyz, /healthz and /metrics", "--admin-listen").await?;
    tracing::info!(
        listen = %listener.local_addr().unwrap_or(args.listen),
        admin_listen = %admin_listener.local_addr().unwrap_or(args.admin_listen),
        reviews_budget = body_budget,
        max_connections = transport.max_connections,
        http2_window = transport.window,
        "serving HTTPS (conversion) and HTTP (admin)"
    );

    let shutdown = {
        let (health, delay) = (health.clone(), args.shutdown_delay);
        Shutdown::on_signal(delay, move || {
            health.mark_shutting_down();
            tracing::info!(
                ?delay,
                "termination signal: not Ready; every answer closes its connection, and the listener closes after --shutdown-delay"
            );
        })
    };

    let static_mode = args.static_dir.is_some();
    let instance = args.instance.clone().unwrap_or_else(|| "static".to_string());
    let identity = Identity {
        instance: instance.clone(),
        service_name: args.service_name.clone().unwrap_or_else(|| instance.clone()),
        static_mode,
    };
    let mut syncer = Syncer::new(compiler, registry.clone(), metrics.clone(), identity, args.drain_period);
    if args.unsafe_test_no_hold_while_named {
        tracing::warn!(
            "--unsafe-test-no-hold-while-named: a target named by its spec.conversion is not held (test only)"
        );
        syncer = syncer.without_hold_while_named();
    }

    if let Some(dir) = args.static_dir.clone() {
        // Fail fast on a bad directory at start; later edits that break it keep the old plans.
        let mut seen = static_dir::files_digest(&dir)?;
        let world = static_dir::load(&dir)?;
        let mut syncer = syncer;
        let report = syncer.pass(&world, Instant::now());
        tracing::info!(dir = %dir.display(), configs = world.configs.len(), compiled = report.compiled, failed = report.failed, "static mode: serving the directory");
        health.mark_synced();
        // The documents and the compiles' scratch (~80 KB a target) are freed by now, but
        // malloc keeps them resident in its arenas until trimmed.
        drop(world);
        crate::alloc::release_free_memory_soon();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(STATIC_RELOAD).await;
                let world = static_dir::files_digest(&dir).and_then(|digest| {
                    if digest == seen { Ok(None) } else { static_dir::load(&dir).map(|w| Some((w, digest))) }
                });
                match world {
                    Ok(None) => {}
                    Ok(Some((world, digest))) => {
                        syncer.pass(&world, Instant::now());
                        seen = digest;
                        drop(world);
                        crate::alloc::release_free_memory_soon();
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "static directory unreadable; keeping the current plans")
                    }
                }
            }
        });
    } else {
        tokio::spawn(health.freshness.clone().run());
        let client = kube::Client::try_default()
            .await
            .context("cannot build a Kubernetes client (in-cluster config or KUBECONFIG)")?;
        tokio::spawn(cluster::run(
            client.clone(),
            instance.clone(),
            args.server_selector.clone(),
            syncer,
            health.clone(),
            metrics.clone(),
            stopped(shutdown.clone()),
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
                health.require_lease();
                let publisher =
                    LeasePublisher::new(client, settings, registry.clone(), metrics.clone(), health.clone());
                tokio::spawn(publisher.run(stopped(shutdown.clone())));
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
        budget,
        instance,
        debug_full_errors: args.debug_registry_full_errors,
    });
    let admin = tokio::spawn(serve::serve_admin(
        admin_listener,
        routes::admin_router(app.clone()),
        stopped(shutdown.clone()),
    ));
    let metrics = app.metrics.clone();
    serve::serve(listener, tls, routes::router(app), transport, metrics, shutdown, args.shutdown_timeout)
        .await;
    let _ = admin.await;
    tracing::info!("shut down");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn args(extra: &[&str]) -> Args {
        let base = ["dco-webhook", "--tls-cert-file", "c", "--tls-key-file", "k", "--static-dir", "d"];
        Args::try_parse_from(base.iter().chain(extra)).unwrap()
    }

    #[test]
    fn the_defaults_leave_room_for_a_full_size_review() {
        let a = args(&[]);
        assert_eq!((a.max_inflight_bytes, a.max_connections, a.http2_max_streams), (256 << 20, 32, 100));
        assert_eq!(a.admin_listen.to_string(), "0.0.0.0:8080");
        let (t, reviews) = transport_and_budget(&a).unwrap();
        // 32 connections × (3.6 MiB window + fixed buffers) = half the budget.
        assert_eq!(t.buffered_bytes(), 128 << 20);
        assert!(t.window > 3 << 20, "{}", t.window);
        assert_eq!(reviews, 128 << 20);
        assert!(reviews >= a.max_request_bytes);
        // Few connections get the largest window.
        let (t, _) = transport_and_budget(&args(&["--max-connections", "4"])).unwrap();
        assert_eq!(t.window, 16 << 20);
    }

    #[test]
    fn a_budget_that_cannot_hold_one_review_fails_start_up_naming_the_flags() {
        let err = transport_and_budget(&args(&["--max-inflight-bytes", "67108864"])).unwrap_err().to_string();
        for flag in ["--max-inflight-bytes", "--max-connections", "--max-request-bytes"] {
            assert!(err.contains(flag), "{err}");
        }
    }
}

//! Readiness and the stop of a replica (docs/admission.md, "Stopping and failing replicas").
//!
//! Every listener is bound before anything can report Ready (`bind`): a replica that cannot
//! serve what it is configured to serve exits with an error naming the listener and its flag.
//! On SIGTERM (or SIGINT) it turns not Ready at once, keeps serving admission reviews for
//! `--shutdown-drain` — the time the apiserver takes to stop opening connections to a Pod
//! that left the Service's endpoints — and only then closes its admission connections
//! gracefully (admission/serve.rs).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use arc_swap::ArcSwapOption;
use tokio::net::TcpListener;

use crate::cli::Args;

/// The listeners of a replica, bound before it starts anything else.
pub struct Bound {
    /// `/healthz`, `/readyz`, `/metrics` (`--metrics-listen`).
    pub metrics: TcpListener,
    /// `POST /validate` (`--admission-listen`), with `--admission-service` only.
    pub admission: Option<TcpListener>,
}

async fn listen(addr: SocketAddr, what: &str, flag: &str) -> anyhow::Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!(dco_api::listen::bind_error(what, flag, addr, &e)))
}

/// Binds every listener `args` asks for; the first that fails is the error.
pub async fn bind(args: &Args) -> anyhow::Result<Bound> {
    let metrics = listen(args.metrics_listen, "/healthz, /readyz and /metrics", "--metrics-listen").await?;
    let admission = match args.admission_service {
        Some(_) => Some(listen(args.admission_listen, "admission reviews", "--admission-listen").await?),
        None => None,
    };
    Ok(Bound { metrics, admission })
}

/// What `/readyz` and `/healthz` answer.
#[derive(Debug, Default)]
pub struct Readiness {
    synced: AtomicBool,
    stopping: AtomicBool,
    /// A listener that stopped serving: the replica is neither ready nor live any more.
    failed: ArcSwapOption<String>,
}

impl Readiness {
    /// Caches synced and, with admission, a certificate served (runtime/mod.rs).
    pub fn mark_synced(&self) {
        self.synced.store(true, Ordering::SeqCst);
    }

    pub fn mark_stopping(&self) {
        self.stopping.store(true, Ordering::SeqCst);
    }

    pub fn mark_failed(&self, why: String) {
        self.failed.store(Some(Arc::new(why)));
    }

    /// `/readyz`: `Ok`, or why not.
    pub fn ready(&self) -> Result<(), String> {
        self.live()?;
        if self.stopping.load(Ordering::SeqCst) {
            Err("stopping: draining admission reviews before the listeners close".into())
        } else if !self.synced.load(Ordering::SeqCst) {
            Err("caches not synced yet".into())
        } else {
            Ok(())
        }
    }

    /// `/healthz`: only a listener that stopped fails it (the kubelet then restarts us).
    pub fn live(&self) -> Result<(), String> {
        match self.failed.load_full() {
            Some(why) => Err(why.to_string()),
            None => Ok(()),
        }
    }
}

/// Serves `what`'s listener in a task; should it stop with an error, the replica is neither
/// ready nor live any more (the kubelet restarts it), and the error is logged.
pub fn spawn_listener(
    readiness: Arc<Readiness>,
    what: &'static str,
    serving: impl std::future::Future<Output = anyhow::Result<()>> + Send + 'static,
) -> tokio::task::JoinHandle<anyhow::Result<()>> {
    tokio::spawn(async move {
        let r = serving.await;
        if let Err(e) = &r {
            tracing::error!("the {what} listener stopped: {e:#}");
            readiness.mark_failed(format!("the {what} listener stopped: {e:#}"));
        }
        r
    })
}

/// The stop as the listeners see it (`dco_api::stop`, shared with dco-webhook): from the
/// signal on every answer closes its connection; once the drain is over the listener closes.
#[derive(Clone, Debug)]
pub struct Shutdown(dco_api::stop::Shutdown);

impl std::ops::Deref for Shutdown {
    type Target = dco_api::stop::Shutdown;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl Shutdown {
    /// Waits for SIGTERM: then `readiness` turns not Ready at once and the drain of `drain`
    /// starts.
    pub fn start(readiness: Arc<Readiness>, drain: Duration) -> Self {
        Shutdown(dco_api::stop::Shutdown::on_signal(drain, move || {
            readiness.mark_stopping();
            tracing::info!(
                ?drain,
                "termination signal: not Ready; admission keeps answering for --shutdown-drain"
            );
        }))
    }

    /// Resolves once the drain is over.
    pub async fn drained(&self) {
        self.0.closing().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[tokio::test]
    async fn a_taken_port_fails_the_bind_naming_the_listener_and_its_flag() {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = taken.local_addr().unwrap().port();
        let args = |extra: &[&str]| {
            let base = ["dco-operator", "--metrics-listen=127.0.0.1:0"];
            Args::try_parse_from(base.iter().chain(extra)).unwrap()
        };
        let a = args(&[&format!("--admission-listen=127.0.0.1:{port}")]);
        assert!(bind(&a).await.unwrap().admission.is_none(), "admission is off without --admission-service");
        let a = args(&["--admission-service=ns/svc", &format!("--admission-listen=127.0.0.1:{port}")]);
        let e = bind(&a).await.err().expect("a taken admission port").to_string();
        assert!(
            e.contains("for admission reviews (--admission-listen)") && e.contains("bindPodIP=true"),
            "{e}"
        );
        let a =
            Args::try_parse_from(["dco-operator", &format!("--metrics-listen=127.0.0.1:{port}")]).unwrap();
        let e = bind(&a).await.err().expect("a taken metrics port").to_string();
        assert!(e.contains("for /healthz, /readyz and /metrics (--metrics-listen)"), "{e}");
    }

    #[test]
    fn ready_once_synced_not_once_stopping_and_never_once_a_listener_failed() {
        let r = Readiness::default();
        assert!(r.ready().is_err() && r.live().is_ok());
        r.mark_synced();
        assert!(r.ready().is_ok());
        r.mark_stopping();
        assert!(r.ready().unwrap_err().contains("stopping"));
        let r = Readiness::default();
        r.mark_synced();
        r.mark_failed("admission listener stopped".into());
        assert!(r.ready().is_err() && r.live().is_err());
    }
}

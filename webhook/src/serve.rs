//! The HTTPS listener: TLS handshakes with rustls, HTTP/1.1 and HTTP/2 with hyper, the axum
//! router as the service, and a graceful stop that drains in-flight requests.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

/// A client that has not finished its TLS handshake by then is not going to.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// HTTP/2 flow-control window per stream.
const WINDOW: u32 = 16 << 20;
/// Socket reads below TLS: rustls asks for a few KiB at a time, which for a 15 MB review is
/// thousands of `recv` calls; a buffer this size makes it tens.
const READ_BUFFER: usize = 256 << 10;

/// Serve `router` over TLS on `listener` until `stop` resolves, then stop accepting and wait
/// up to `drain` for in-flight requests to finish.
pub async fn serve(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    router: axum::Router,
    stop: impl Future<Output = ()>,
    drain: Duration,
) {
    let acceptor = TlsAcceptor::from(tls);
    let graceful = GracefulShutdown::new();
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // Reviews are megabytes: HTTP/2's default 64 KiB windows would turn one large body into
    // hundreds of WINDOW_UPDATE round trips.
    builder
        .http2()
        .initial_stream_window_size(WINDOW)
        .initial_connection_window_size(WINDOW * 2)
        .max_frame_size(1 << 20);
    tokio::pin!(stop);
    loop {
        let (tcp, peer) = tokio::select! {
            () = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Usually EMFILE: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = tcp.set_nodelay(true);
        let (acceptor, router, builder, watcher) =
            (acceptor.clone(), router.clone(), builder.clone(), graceful.watcher());
        tokio::spawn(async move {
            let tcp = tokio::io::BufReader::with_capacity(READ_BUFFER, tcp);
            let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    tracing::debug!(%peer, error = %e, "TLS handshake failed");
                    return;
                }
                Err(_) => {
                    tracing::debug!(%peer, "TLS handshake timed out");
                    return;
                }
            };
            let service = TowerToHyperService::new(router);
            let conn = builder.serve_connection_with_upgrades(TokioIo::new(tls), service).into_owned();
            if let Err(e) = watcher.watch(conn).await {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    tracing::info!("stopped accepting connections; draining in-flight requests");
    tokio::select! {
        () = graceful.shutdown() => tracing::info!("all connections drained"),
        () = tokio::time::sleep(drain) => tracing::warn!(?drain, "connections still open after the drain timeout; exiting anyway"),
    }
}

/// Resolves on SIGTERM or SIGINT.
pub async fn termination_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => tracing::info!("SIGTERM received"),
                    _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT received"),
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM; only SIGINT stops the server");
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

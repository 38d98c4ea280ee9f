//! The listeners: the conversion listener (rustls, HTTP/1.1 and HTTP/2 with hyper, bounded
//! in connections, header sizes, flow-control windows and time) and the plain-HTTP admin
//! listener; both stop gracefully, draining in-flight requests.
//!
//! Memory per replica is bounded by: request bodies and answers, through the in-flight
//! [`Budget`](crate::budget::Budget); what hyper buffers per connection before the handler
//! reads it (the HTTP/2 connection window, or the HTTP/1.1 read buffer) times
//! `--max-connections`, which [`Transport::for_budget`] keeps within the budget; and headers
//! (`MAX_HEADER_BYTES` per connection). Time is bounded by the TLS handshake timeout, the
//! header-read timeout, `--request-timeout` from headers to answer, `--write-timeout` for an
//! answer that stops moving, and `--idle-timeout` for a connection without requests.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, Semaphore, watch};
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt;

use dco_api::stop::Shutdown;

use crate::conn::{ConnState, Tracked, Watched};
use crate::metrics::{Metrics, ReasonLabel};

/// A client that has not finished its TLS handshake by then is not going to.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Socket reads below TLS: rustls asks for a few KiB at a time, which for a 15 MB review is
/// thousands of `recv` calls; a buffer this size makes it tens.
const READ_BUFFER: usize = 256 << 10;
/// Request headers, per connection: HTTP/1.1 read buffer and HTTP/2 header list. A
/// ConversionReview request carries a few hundred bytes of headers.
pub const MAX_HEADER_BYTES: usize = 64 << 10;
/// Fixed buffers of one connection: the socket read buffer, and hyper's read and write
/// buffers (HTTP/1.1) or header and send buffers (HTTP/2), roughly.
const CONN_OVERHEAD: usize = READ_BUFFER + 2 * MAX_HEADER_BYTES;
/// Largest HTTP/2 flow-control window: one 15 MB review then needs a single WINDOW_UPDATE.
const MAX_WINDOW: u32 = 16 << 20;
/// Smallest window that still keeps a large body flowing without a round trip per frame.
const MIN_WINDOW: u32 = 1 << 20;
/// HTTP/2 pings on a connection that has been silent this long, to find dead peers (the
/// apiserver's Go client answers them); no answer within the ping timeout closes it.
const PING_INTERVAL: Duration = Duration::from_secs(20);
const PING_TIMEOUT: Duration = Duration::from_secs(10);
/// After a graceful close for idleness (HTTP/2: GOAWAY, then a ping the peer must answer), a
/// connection gets another idle timeout, at most this long, to go away by itself.
const MAX_CLOSE_GRACE: Duration = Duration::from_secs(5);

/// Transport limits of the conversion listener.
#[derive(Clone, Debug)]
pub struct Transport {
    pub max_connections: usize,
    /// HTTP/2 concurrent streams per connection.
    pub max_streams: u32,
    /// HTTP/2 flow-control window, per stream and per connection: the most a connection can
    /// have buffered that no handler has read yet.
    pub window: u32,
    /// HTTP/1.1: a request's headers must arrive within it of their first byte (a new
    /// connection's, of the accept).
    pub header_read_timeout: Duration,
    /// A connection without a request in flight this long is closed. Longer than the
    /// apiserver's own idle timeout (Go's `IdleConnTimeout`, 90 s), so the apiserver closes an
    /// idle connection first and never sends a review on one closing under it.
    pub idle_timeout: Duration,
    /// An answer that hyper could not hand on for this long (the peer stopped reading)
    /// closes its connection.
    pub write_timeout: Duration,
}

impl Default for Transport {
    fn default() -> Self {
        Transport::for_budget(256 << 20, 32)
    }
}

impl Transport {
    /// Limits for an in-flight budget of `budget` bytes shared by `max_connections`: the
    /// HTTP/2 windows are sized so that all connections' unread data together stays within
    /// half the budget, between 1 MiB and 16 MiB per connection.
    pub fn for_budget(budget: usize, max_connections: usize) -> Self {
        let per_conn = (budget / 2 / max_connections.max(1)).saturating_sub(CONN_OVERHEAD);
        let window = u32::try_from(per_conn).unwrap_or(u32::MAX).clamp(MIN_WINDOW, MAX_WINDOW);
        Transport {
            max_connections: max_connections.max(1),
            max_streams: 100,
            window,
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(120),
            write_timeout: Duration::from_secs(10),
        }
    }

    /// Bytes the connections may buffer outside the budget: unread HTTP/2 data up to the
    /// window, plus each connection's fixed buffers.
    pub fn buffered_bytes(&self) -> usize {
        self.max_connections * (self.window as usize + CONN_OVERHEAD)
    }

    fn builder(&self) -> auto::Builder<TokioExecutor> {
        let mut builder = auto::Builder::new(TokioExecutor::new());
        builder
            .http1()
            .timer(TokioTimer::new())
            // Timed from the headers' first byte by the connection's task instead
            // (`conn.rs`): hyper's clock also runs while a kept-alive connection waits.
            .header_read_timeout(None)
            .max_buf_size(MAX_HEADER_BYTES);
        // Reviews are megabytes: HTTP/2's default 64 KiB windows would turn one large body
        // into hundreds of WINDOW_UPDATE round trips.
        builder
            .http2()
            .timer(TokioTimer::new())
            .initial_stream_window_size(self.window)
            .initial_connection_window_size(self.window)
            .max_frame_size(1 << 20)
            .max_concurrent_streams(self.max_streams)
            .max_header_list_size(MAX_HEADER_BYTES as u32)
            // A whole chunk of an answer may wait in the codec for the peer's window.
            .max_send_buf_size(crate::conn::CHUNK)
            .keep_alive_interval(PING_INTERVAL)
            .keep_alive_timeout(PING_TIMEOUT);
        builder
    }

    /// How often a connection task looks at its idle and write clocks.
    fn tick(&self) -> Duration {
        (self.idle_timeout.min(self.write_timeout) / 4)
            .clamp(Duration::from_millis(20), Duration::from_secs(1))
    }
}

/// The next connection on `listener` (of the `what` listener, for the log), or `None` once
/// `stop` resolves. A failed accept (usually EMFILE) backs off instead of spinning.
async fn accept(
    listener: &TcpListener,
    mut stop: std::pin::Pin<&mut impl Future<Output = ()>>,
    what: &str,
) -> Option<(TcpStream, SocketAddr)> {
    loop {
        tokio::select! {
            () = stop.as_mut() => return None,
            accepted = listener.accept() => match accepted {
                Ok(a) => return Some(a),
                Err(e) => {
                    tracing::warn!(error = %e, listener = what, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
        }
    }
}

fn closed(metrics: &Metrics, reason: &'static str) {
    metrics.connections_closed.get_or_create(&ReasonLabel { reason }).inc();
}

/// Serve `router` over TLS on `listener`. From the termination signal of `shutdown` on,
/// every answer closes its connection — HTTP/1.1 `Connection: close`, HTTP/2 GOAWAY
/// (`dco_api::stop`): the apiserver, which keeps idle HTTP/1.1 connections and does not retry
/// a POST that meets a closing one, sends its next review on a new connection, to a Ready Pod.
/// New connections are still accepted and served until the delay is over; then stop
/// accepting, ask the connections still open to close, and wait up to `drain` for them.
pub async fn serve(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    router: axum::Router,
    transport: Transport,
    metrics: Arc<Metrics>,
    shutdown: Shutdown,
    drain: Duration,
) {
    let acceptor = TlsAcceptor::from(tls);
    let builder = transport.builder();
    let slots = Arc::new(Semaphore::new(transport.max_connections));
    let (closing_tx, closing_rx) = watch::channel(false);
    let stop = shutdown.closing();
    tokio::pin!(stop);
    loop {
        // Beyond the cap, new connections wait in the kernel's accept backlog; the ones open
        // keep being served, and idle or stalled ones make room within their timeouts.
        let slot = match slots.clone().try_acquire_owned() {
            Ok(s) => s,
            Err(_) => {
                metrics.connection_limit_reached.inc();
                tracing::debug!(
                    max = transport.max_connections,
                    "connection limit reached; new connections wait"
                );
                tokio::select! {
                    () = &mut stop => break,
                    s = slots.clone().acquire_owned() => match s {
                        Ok(s) => s,
                        Err(_) => break,
                    },
                }
            }
        };
        let Some((tcp, peer)) = accept(&listener, stop.as_mut(), "conversion").await else { break };
        let _ = tcp.set_nodelay(true);
        shutdown.accepted();
        let conn = Conn {
            acceptor: acceptor.clone(),
            router: router.clone(),
            builder: builder.clone(),
            transport: transport.clone(),
            metrics: metrics.clone(),
            closing: closing_rx.clone(),
            shutdown: shutdown.clone(),
        };
        metrics.connections.inc();
        tokio::spawn(async move {
            let _slot = slot;
            let metrics = conn.metrics.clone();
            conn.serve(tcp, peer).await;
            metrics.connections.dec();
        });
    }
    drop(listener);
    let seen = shutdown.seen();
    tracing::info!(
        requests = seen.answers,
        connections = seen.connections,
        last_accept_ms = seen.last_accept_ms,
        open = transport.max_connections - slots.available_permits(),
        "shutdown delay over: requests answered and connections accepted since the termination signal (the last this many ms after it); stopped accepting, closing the open connections"
    );
    let _ = closing_tx.send(true);
    let all = u32::try_from(transport.max_connections).unwrap_or(u32::MAX);
    tokio::select! {
        _ = slots.acquire_many(all) => tracing::info!("all connections drained"),
        () = tokio::time::sleep(drain) => tracing::warn!(?drain, "connections still open after the drain timeout; exiting anyway"),
    }
}

/// One accepted conversion connection and what it needs.
struct Conn {
    acceptor: TlsAcceptor,
    router: axum::Router,
    builder: auto::Builder<TokioExecutor>,
    transport: Transport,
    metrics: Arc<Metrics>,
    closing: watch::Receiver<bool>,
    shutdown: Shutdown,
}

impl Conn {
    async fn serve(mut self, tcp: TcpStream, peer: SocketAddr) {
        let (transport, metrics) = (&self.transport, &*self.metrics);
        let tcp = tokio::io::BufReader::with_capacity(READ_BUFFER, tcp);
        let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, self.acceptor.accept(tcp)).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                tracing::debug!(%peer, error = %e, "TLS handshake failed");
                return closed(metrics, "handshake_failed");
            }
            Err(_) => {
                tracing::debug!(%peer, "TLS handshake timed out");
                return closed(metrics, "handshake_timeout");
            }
        };
        // The apiserver speaks HTTP/1.1 to webhooks; an HTTP/2 peer's pings and settings
        // between requests are not headers, and hyper bounds its streams' headers itself.
        let http1 = tls.get_ref().1.alpn_protocol() != Some(b"h2".as_slice());
        let state = Arc::new(ConnState::default());
        let tls = Watched::new(tls, state.clone());
        let goaway = Arc::new(Notify::new());
        let service = {
            let (state, router, shutdown) = (state.clone(), self.router.clone(), self.shutdown.clone());
            let goaway = goaway.clone();
            hyper::service::service_fn(move |req: http::Request<Incoming>| {
                let active = state.begin();
                let version = req.version();
                if version == http::Version::HTTP_2 {
                    state.mark_http2();
                }
                let call = router.clone().oneshot(req.map(axum::body::Body::new));
                let (shutdown, goaway) = (shutdown.clone(), goaway.clone());
                async move {
                    let mut response = call.await.unwrap_or_else(|never: Infallible| match never {});
                    // One relaxed load while not stopping.
                    if shutdown.close_with_answer(version, response.headers_mut()) {
                        goaway.notify_one();
                    }
                    Ok::<_, Infallible>(response.map(|b| Tracked::new(b, active)))
                }
            })
        };
        let conn = self.builder.serve_connection(TokioIo::new(tls), service);
        tokio::pin!(conn);
        let mut tick = tokio::time::interval(transport.tick());
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut shut_down_at: Option<tokio::time::Instant> = None;
        // Until the delay is over a connection is closed by an answer, not while idle: an idle
        // HTTP/1.1 connection asked to close is closed at once, maybe as the next review is
        // sent on it.
        let mut shutting_down = *self.closing.borrow();
        if shutting_down {
            conn.as_mut().graceful_shutdown();
        }
        loop {
            tokio::select! {
                ended = conn.as_mut() => {
                    if let Err(e) = ended {
                        tracing::debug!(%peer, error = %e, "connection ended with an error");
                        closed(metrics, "error");
                    }
                    return;
                }
                _ = self.closing.changed(), if !shutting_down => {
                    shutting_down = true;
                    conn.as_mut().graceful_shutdown();
                    closed(metrics, "shutdown");
                }
                // An HTTP/2 answer while stopping: GOAWAY (the streams in flight still finish).
                () = goaway.notified(), if !shutting_down => {
                    shutting_down = true;
                    conn.as_mut().graceful_shutdown();
                    closed(metrics, "shutdown");
                }
                _ = tick.tick() => {
                    // Not from an HTTP/2 request (prior knowledge without ALPN).
                    if http1 && state.head_wait() >= transport.header_read_timeout && !state.is_http2() {
                        tracing::debug!(%peer, "closing a connection whose request headers did not arrive in time (--header-read-timeout)");
                        return closed(metrics, "header_timeout");
                    }
                    let stall = state.longest_write_stall();
                    if stall >= transport.write_timeout {
                        tracing::info!(%peer, ?stall, "closing a connection whose peer stopped reading its answer (--write-timeout)");
                        return closed(metrics, "stalled_write");
                    }
                    match shut_down_at {
                        None if state.idle_for() >= transport.idle_timeout => {
                            tracing::debug!(%peer, "closing an idle connection (--idle-timeout)");
                            closed(metrics, "idle");
                            conn.as_mut().graceful_shutdown();
                            shut_down_at = Some(tokio::time::Instant::now());
                        }
                        Some(at) if at.elapsed() >= transport.idle_timeout.min(MAX_CLOSE_GRACE) => return,
                        _ => {}
                    }
                }
            }
        }
    }
}

/// Serve `router` over plain HTTP/1.1 on `listener` (the admin endpoints) until `stop`.
pub async fn serve_admin(listener: TcpListener, router: axum::Router, stop: impl Future<Output = ()>) {
    let graceful = GracefulShutdown::new();
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(Duration::from_secs(10))
        .max_buf_size(MAX_HEADER_BYTES);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(16)
        .max_header_list_size(MAX_HEADER_BYTES as u32);
    // Prometheus and people: a handful of connections is plenty, and keeps this port from
    // becoming a second way to hold memory.
    let slots = Arc::new(Semaphore::new(16));
    tokio::pin!(stop);
    loop {
        let slot = tokio::select! {
            () = &mut stop => break,
            s = slots.clone().acquire_owned() => match s { Ok(s) => s, Err(_) => break },
        };
        let Some((tcp, _)) = accept(&listener, stop.as_mut(), "admin").await else { break };
        let conn = builder
            .serve_connection(TokioIo::new(tcp), TowerToHyperService::new(router.clone()))
            .into_owned();
        let watched = graceful.watch(conn);
        tokio::spawn(async move {
            let _slot = slot;
            // Admin answers are small; nobody needs a connection for longer than this.
            let _ = tokio::time::timeout(Duration::from_secs(60), watched).await;
        });
    }
    drop(listener);
    let _ = tokio::time::timeout(Duration::from_secs(5), graceful.shutdown()).await;
}

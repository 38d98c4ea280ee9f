//! The stop of a server the apiserver calls as a webhook, shared by `dco-operator`'s admission
//! listener (docs/admission.md, "Stopping and failing replicas") and `dco-webhook`'s
//! conversion listener (docs/webhook.md, "Shutdown").
//!
//! The apiserver speaks HTTP/1.1 to webhooks, keeps idle connections open for the next call,
//! and does not retry a POST that fails because the server closed the connection as it sent
//! the request on it (EOF, broken pipe). Its connections are opened to a Ready Pod, but an
//! idle one is reused whatever became of the Pod since. So a stopping server:
//!
//! 1. on SIGTERM turns not Ready and [`Shutdown::is_stopping`]: from then on every answer
//!    closes its connection ([`Shutdown::close_with_answer`]: HTTP/1.1 `Connection: close`,
//!    HTTP/2 GOAWAY), so a connection is closed by the answer to a call, never while the
//!    client may be sending the next one; that one opens a new connection, to a Ready Pod;
//! 2. keeps accepting and answering for the delay, the time the apiserver takes to stop
//!    opening connections to a Pod that is not Ready;
//! 3. then ([`Shutdown::closing`]) closes its listener and asks the connections still open to
//!    close gracefully, each server within its own bound.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

#[derive(Debug)]
struct Inner {
    /// Read on every answer: one relaxed load.
    stopping: AtomicBool,
    since: watch::Sender<Option<Instant>>,
    closing: watch::Sender<bool>,
    answers: AtomicU64,
    connections: AtomicU64,
    last_accept_ms: AtomicU64,
}

/// What a stopping server saw from the signal on, for its log (and the shutdown tests, which
/// read it there).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Seen {
    /// Answers given.
    pub answers: u64,
    /// Connections accepted.
    pub connections: u64,
    /// Milliseconds from the signal to the last connection accepted.
    pub last_accept_ms: u64,
}

/// A server's stop, shared by its listener, its connections and their answers.
#[derive(Clone, Debug)]
pub struct Shutdown(Arc<Inner>);

/// Drives a [`Shutdown`] by hand (tests, and [`Shutdown::on_signal`]).
#[derive(Debug)]
pub struct Trigger(Shutdown);

impl Trigger {
    /// Step 1: stopping from now on (again: no change).
    pub fn stop(&self) {
        let inner = &self.0.0;
        if !inner.stopping.swap(true, Ordering::SeqCst) {
            inner.since.send_replace(Some(Instant::now()));
        }
    }

    /// Step 3: the delay is over (stopping too, if it was not yet).
    pub fn close(&self) {
        self.stop();
        self.0.0.closing.send_replace(true);
    }
}

impl Shutdown {
    /// A stop that comes only through the returned [`Trigger`].
    pub fn manual() -> (Shutdown, Trigger) {
        let s = Shutdown(Arc::new(Inner {
            stopping: AtomicBool::new(false),
            since: watch::channel(None).0,
            closing: watch::channel(false).0,
            answers: AtomicU64::new(0),
            connections: AtomicU64::new(0),
            last_accept_ms: AtomicU64::new(0),
        }));
        (s.clone(), Trigger(s))
    }

    /// Waits for SIGTERM (or SIGINT) in a task: then `on_stop` runs (turn not Ready, log), the
    /// server is stopping, and `delay` later closing.
    pub fn on_signal(delay: Duration, on_stop: impl FnOnce() + Send + 'static) -> Shutdown {
        let (s, trigger) = Shutdown::manual();
        tokio::spawn(async move {
            termination_signal().await;
            on_stop();
            trigger.stop();
            tokio::time::sleep(delay).await;
            trigger.close();
        });
        s
    }

    /// Whether the termination signal came: a relaxed load, cheap enough for every answer.
    #[inline]
    pub fn is_stopping(&self) -> bool {
        self.0.stopping.load(Ordering::Relaxed)
    }

    /// When the termination signal came, if it did.
    pub fn stopping_since(&self) -> Option<Instant> {
        *self.0.since.borrow()
    }

    /// Resolves once the termination signal came.
    pub async fn stopping(&self) {
        let _ = self.0.since.subscribe().wait_for(Option::is_some).await;
    }

    /// Resolves once the delay is over: stop accepting, close the open connections.
    pub async fn closing(&self) {
        let _ = self.0.closing.subscribe().wait_for(|c| *c).await;
    }

    /// Call on every answer: while stopping, the answer closes its connection and is counted
    /// in [`Seen`]. To an HTTP/1.x request it carries `Connection: close` (hyper closes the
    /// connection once the answer is written); for HTTP/2, which has no such header, `true`
    /// tells the caller to send GOAWAY on the connection (hyper's graceful shutdown: the
    /// streams in flight are still answered).
    #[inline]
    pub fn close_with_answer(&self, version: http::Version, headers: &mut http::HeaderMap) -> bool {
        if !self.is_stopping() {
            return false;
        }
        self.0.answers.fetch_add(1, Ordering::Relaxed);
        if version < http::Version::HTTP_2 {
            headers.insert(http::header::CONNECTION, http::HeaderValue::from_static("close"));
            false
        } else {
            true
        }
    }

    /// Call on every connection accepted: counted in [`Seen`] while stopping.
    pub fn accepted(&self) {
        if let Some(at) = self.stopping_since() {
            self.0.connections.fetch_add(1, Ordering::Relaxed);
            let ms = u64::try_from(at.elapsed().as_millis()).unwrap_or(u64::MAX);
            self.0.last_accept_ms.fetch_max(ms, Ordering::Relaxed);
        }
    }

    /// What the server saw since the signal.
    pub fn seen(&self) -> Seen {
        let get = |n: &AtomicU64| n.load(Ordering::Relaxed);
        Seen {
            answers: get(&self.0.answers),
            connections: get(&self.0.connections),
            last_accept_ms: get(&self.0.last_accept_ms),
        }
    }
}

/// Resolves on SIGTERM or SIGINT. Should SIGTERM not be listened for (it always can be on
/// Linux), only SIGINT stops the server, and the error says so on stderr.
pub async fn termination_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        },
        Err(e) => {
            eprintln!("cannot listen for SIGTERM ({e}); only SIGINT stops the server");
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn answers_close_their_connections_only_once_stopping() {
        let (s, trigger) = Shutdown::manual();
        let mut h = http::HeaderMap::new();
        assert!(!s.close_with_answer(http::Version::HTTP_11, &mut h));
        s.accepted();
        assert!(h.is_empty() && s.stopping_since().is_none());
        assert_eq!(s.seen(), Seen::default(), "nothing is counted before the signal");
        trigger.stop();
        assert!(s.is_stopping() && s.stopping_since().is_some());
        tokio::time::timeout(Duration::from_secs(1), s.stopping()).await.expect("stopping resolves");
        assert!(!s.close_with_answer(http::Version::HTTP_11, &mut h), "the header closes it");
        assert_eq!(h[http::header::CONNECTION], "close");
        let mut h2 = http::HeaderMap::new();
        assert!(s.close_with_answer(http::Version::HTTP_2, &mut h2), "HTTP/2: the caller sends GOAWAY");
        assert!(h2.is_empty(), "HTTP/2 forbids Connection");
        let mut h10 = http::HeaderMap::new();
        s.close_with_answer(http::Version::HTTP_10, &mut h10);
        assert_eq!(h10[http::header::CONNECTION], "close");
        s.accepted();
        let seen = s.seen();
        assert_eq!((seen.answers, seen.connections), (3, 1), "answers and connections since the signal");
    }

    #[tokio::test]
    async fn closing_follows_stopping_and_a_second_stop_keeps_the_first_time() {
        let (s, trigger) = Shutdown::manual();
        let waiter = {
            let s = s.clone();
            tokio::spawn(async move { s.closing().await })
        };
        trigger.stop();
        let first = s.stopping_since();
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert!(!waiter.is_finished(), "closing waits for the end of the delay");
        trigger.close();
        tokio::time::timeout(Duration::from_secs(1), waiter).await.expect("closing resolves").unwrap();
        assert_eq!(s.stopping_since(), first);
        // A server that starts after the stop sees it at once.
        tokio::time::timeout(Duration::from_secs(1), s.closing()).await.expect("already closing");
    }
}

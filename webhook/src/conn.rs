//! What one connection is doing, so its task can close it when it is idle or stalled.
//!
//! hyper bounds header reads (HTTP/1.1) and answers pings (HTTP/2), but it closes neither an
//! HTTP/2 connection that never opens a stream nor one whose peer never reads its answers
//! (a zero flow-control window, or a full socket). The service wrapper counts requests in
//! flight per connection, and every response body reports when hyper last took a chunk from
//! it: a connection with no request for `--idle-timeout` is shut down gracefully, and one
//! whose answer has not moved for `--write-timeout` is dropped with its buffers.
//!
//! Answers are handed to hyper in chunks of [`CHUNK`] bytes, so "hyper took a chunk" means
//! the peer is reading; a 15 MB answer given as one frame would sit in the codec whole. The
//! last piece of an answer is a copy of at most [`TAIL`] bytes: once hyper has taken it the
//! body (and its budget reservation) is gone, while the piece may still wait in the HTTP/2
//! codec for a window the peer never opens, so it must be small and must not keep the
//! answer's buffer alive.

use std::collections::HashMap;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Largest piece of an answer handed to hyper at once.
pub const CHUNK: usize = 1 << 20;
/// Largest last piece: what may outlive the body in the codec (per stream, until the
/// connection's idle timeout).
pub const TAIL: usize = 4 << 10;

/// [`ConnState::head_since_ms`] when no request's headers are being read.
const NO_HEAD: u64 = u64::MAX;

/// Shared by a connection's task, its requests and its response bodies.
#[derive(Debug)]
pub struct ConnState {
    born: Instant,
    /// Requests from the service call until their response body is dropped.
    active: AtomicUsize,
    /// Milliseconds since `born` when `active` last dropped to zero.
    idle_since_ms: AtomicU64,
    /// Milliseconds since `born` when the next request's first byte arrived (0 for a new
    /// connection: its first request is timed from the accept), [`NO_HEAD`] while a request
    /// is in flight or none has begun arriving.
    head_since_ms: AtomicU64,
    /// A request came as HTTP/2.
    http2: std::sync::atomic::AtomicBool,
    next_body: AtomicU64,
    /// Per unfinished response body: when hyper last took a chunk (ms since `born`).
    bodies: Mutex<HashMap<u64, u64>>,
}

impl Default for ConnState {
    fn default() -> Self {
        ConnState {
            born: Instant::now(),
            active: AtomicUsize::new(0),
            idle_since_ms: AtomicU64::new(0),
            head_since_ms: AtomicU64::new(0),
            http2: std::sync::atomic::AtomicBool::new(false),
            next_body: AtomicU64::new(0),
            bodies: Mutex::new(HashMap::new()),
        }
    }
}

impl ConnState {
    fn now_ms(&self) -> u64 {
        u64::try_from(self.born.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// A request started; the guard ends it (hand it to [`Tracked`] with the response).
    pub fn begin(self: &Arc<Self>) -> Active {
        self.active.fetch_add(1, Ordering::SeqCst);
        // Its headers are complete.
        self.head_since_ms.store(NO_HEAD, Ordering::SeqCst);
        Active(self.clone())
    }

    pub fn mark_http2(&self) {
        self.http2.store(true, Ordering::Relaxed);
    }

    pub fn is_http2(&self) -> bool {
        self.http2.load(Ordering::Relaxed)
    }

    /// Bytes arrived: with no request in flight they begin the next one's headers.
    fn received(&self) {
        if self.active.load(Ordering::SeqCst) == 0 {
            let now = self.now_ms();
            let _ = self.head_since_ms.compare_exchange(NO_HEAD, now, Ordering::SeqCst, Ordering::SeqCst);
        }
    }

    /// How long the headers of a request that has begun arriving have taken so far (zero
    /// while a request is in flight, or while the connection is idle with nothing sent).
    pub fn head_wait(&self) -> Duration {
        if self.active.load(Ordering::SeqCst) > 0 {
            return Duration::ZERO;
        }
        match self.head_since_ms.load(Ordering::SeqCst) {
            NO_HEAD => Duration::ZERO,
            since => Duration::from_millis(self.now_ms().saturating_sub(since)),
        }
    }

    /// How long the connection has had no request in flight (zero while it has one).
    pub fn idle_for(&self) -> Duration {
        if self.active.load(Ordering::SeqCst) > 0 {
            return Duration::ZERO;
        }
        let since = self.idle_since_ms.load(Ordering::SeqCst);
        Duration::from_millis(self.now_ms().saturating_sub(since))
    }

    /// The longest time an unfinished answer has waited for hyper to take its next chunk.
    pub fn longest_write_stall(&self) -> Duration {
        let now = self.now_ms();
        let bodies = self.bodies.lock().unwrap_or_else(|e| e.into_inner());
        let oldest = bodies.values().min().copied();
        oldest.map_or(Duration::ZERO, |t| Duration::from_millis(now.saturating_sub(t)))
    }

    fn touch(&self, id: u64) {
        let now = self.now_ms();
        self.bodies.lock().unwrap_or_else(|e| e.into_inner()).insert(id, now);
    }

    fn forget(&self, id: u64) {
        self.bodies.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
    }
}

/// A connection's stream, telling its [`ConnState`] when bytes arrive.
pub struct Watched<S> {
    inner: S,
    state: Arc<ConnState>,
}

impl<S> Watched<S> {
    pub fn new(inner: S, state: Arc<ConnState>) -> Self {
        Watched { inner, state }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.state.received();
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, data)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// A request in flight on its connection.
#[derive(Debug)]
pub struct Active(Arc<ConnState>);

impl Drop for Active {
    fn drop(&mut self) {
        let now = self.0.now_ms();
        if self.0.active.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle_since_ms.store(now, Ordering::SeqCst);
        }
    }
}

/// A response body that reports its progress to its connection and hands hyper at most
/// [`CHUNK`] bytes at a time.
pub struct Tracked<B> {
    inner: B,
    /// The unsent rest of a frame larger than [`CHUNK`].
    rest: Bytes,
    id: u64,
    active: Active,
}

impl<B> Tracked<B> {
    pub fn new(inner: B, active: Active) -> Self {
        let id = active.0.next_body.fetch_add(1, Ordering::Relaxed);
        // The clock starts now: a peer with a zero window never lets hyper take a first chunk.
        active.0.touch(id);
        Tracked { inner, rest: Bytes::new(), id, active }
    }

    /// The next piece of `rest` (not empty).
    fn next_piece(&mut self) -> Bytes {
        if self.rest.len() > CHUNK {
            return self.rest.split_to(CHUNK);
        }
        if self.rest.len() > TAIL {
            return self.rest.split_to(self.rest.len() - TAIL);
        }
        // The last piece is copied, so once hyper has written the others the answer's buffer
        // is freed even if this piece then waits in the codec for a window that never opens.
        let last = std::mem::take(&mut self.rest);
        Bytes::copy_from_slice(&last)
    }
}

impl<B> Drop for Tracked<B> {
    fn drop(&mut self) {
        self.active.0.forget(self.id);
    }
}

impl<B> Body for Tracked<B>
where
    B: Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = &mut *self;
        if !this.rest.is_empty() {
            this.active.0.touch(this.id);
            return Poll::Ready(Some(Ok(Frame::data(this.next_piece()))));
        }
        let frame = std::task::ready!(Pin::new(&mut this.inner).poll_frame(cx));
        this.active.0.touch(this.id);
        Poll::Ready(frame.map(|f| {
            f.map(|frame| match frame.into_data() {
                Ok(data) if !data.is_empty() => {
                    this.rest = data;
                    Frame::data(this.next_piece())
                }
                Ok(empty) => Frame::data(empty),
                Err(other) => other,
            })
        }))
    }

    fn is_end_stream(&self) -> bool {
        self.rest.is_empty() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let mut hint = self.inner.size_hint();
        let rest = self.rest.len() as u64;
        hint.set_lower(hint.lower() + rest);
        if let Some(upper) = hint.upper() {
            hint.set_upper(upper + rest);
        }
        hint
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{BodyExt, Full};

    #[tokio::test]
    async fn a_large_answer_goes_out_in_chunks_and_ends_the_request() {
        let state = Arc::new(ConnState::default());
        let data: Vec<u8> = (0..(CHUNK * 2 + 10)).map(|i| i as u8).collect();
        let mut body = Tracked::new(Full::new(Bytes::from(data.clone())), state.begin());
        assert_eq!(body.size_hint().exact(), Some(data.len() as u64));
        assert_eq!(state.idle_for(), Duration::ZERO);
        let mut got = Vec::new();
        let mut sizes = Vec::new();
        while let Some(f) = body.frame().await {
            let d = f.unwrap().into_data().unwrap();
            sizes.push(d.len());
            got.extend_from_slice(&d);
        }
        assert_eq!(sizes, [CHUNK, CHUNK, 10]);
        assert_eq!(got, data);
        assert!(body.is_end_stream());
        drop(body);
        assert_eq!(state.longest_write_stall(), Duration::ZERO);
        std::thread::sleep(Duration::from_millis(20));
        assert!(state.idle_for() >= Duration::from_millis(20));
    }

    #[tokio::test]
    async fn the_last_piece_is_small_and_a_copy() {
        let state = Arc::new(ConnState::default());
        let whole = Bytes::from(vec![7u8; TAIL * 3]);
        let mut body = Tracked::new(Full::new(whole.clone()), state.begin());
        let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
        let last = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert!(body.frame().await.is_none());
        assert_eq!((first.len(), last.len()), (TAIL * 2, TAIL));
        assert_eq!(first.as_ptr(), whole.as_ptr(), "the body is sliced, not copied");
        assert!(!whole.as_ptr_range().contains(&last.as_ptr()), "the last piece is a copy");
    }

    #[tokio::test]
    async fn headers_are_timed_from_their_first_byte_not_from_the_last_answer() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let state = Arc::new(ConnState::default());
        let (client, server) = tokio::io::duplex(1024);
        let (mut client, mut server) = (client, Watched::new(server, state.clone()));
        std::thread::sleep(Duration::from_millis(20));
        assert!(state.head_wait() >= Duration::from_millis(20), "a new connection's first request is timed");
        client.write_all(b"POST / HTTP/1.1\r\n\r\n").await.unwrap();
        let mut buf = [0u8; 64];
        assert!(server.read(&mut buf).await.unwrap() > 0);
        let answer = Tracked::new(Full::new(Bytes::from_static(b"ok")), state.begin());
        assert_eq!(state.head_wait(), Duration::ZERO, "a request in flight");
        drop(answer);
        // Kept alive and idle: no clock runs but the idle timeout's.
        std::thread::sleep(Duration::from_millis(30));
        assert_eq!(
            state.head_wait(),
            Duration::ZERO,
            "an idle kept-alive connection is not waiting for headers"
        );
        assert!(state.idle_for() >= Duration::from_millis(30));
        // The next request's first bytes start its clock.
        client.write_all(b"POST / HT").await.unwrap();
        assert!(server.read(&mut buf).await.unwrap() > 0);
        std::thread::sleep(Duration::from_millis(20));
        let w = state.head_wait();
        assert!(
            w >= Duration::from_millis(20) && w < state.idle_for(),
            "from the first byte, not the idle start: {w:?}"
        );
        let _next = state.begin();
        assert_eq!(state.head_wait(), Duration::ZERO);
    }

    #[test]
    fn an_answer_nobody_takes_is_a_write_stall() {
        let state = Arc::new(ConnState::default());
        let body = Tracked::new(Full::new(Bytes::from_static(b"x")), state.begin());
        std::thread::sleep(Duration::from_millis(30));
        assert!(state.longest_write_stall() >= Duration::from_millis(30));
        drop(body);
        assert_eq!(state.longest_write_stall(), Duration::ZERO);
    }
}

//! Hostile clients against the real `dco-webhook` binary (static mode, the benchmark's
//! fixtures) on loopback, with small limits set by flags: slowloris headers, idle connection
//! floods, unfinished bodies over HTTP/1.1 and HTTP/2, many HTTP/2 streams, and a client
//! that never reads its answer. Each test asserts that the server's peak resident memory
//! (`VmHWM`) stays under its baseline plus `--max-inflight-bytes`, that the connections are
//! closed by the timeouts, and that valid reviews keep being answered meanwhile. And resident
//! memory comes back down once large reviews are over.

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

#[path = "../engine/benches/fixture.rs"]
mod fixture;

const TARGET: &str = "widgets.bench.dco.rs";
const MIB: usize = 1 << 20;
/// The limits every test's server runs with.
const BUDGET: usize = 32 * MIB;
const MAX_CONNECTIONS: usize = 8;
const MAX_REQUEST: usize = 8 * MIB;
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
const HEADER_TIMEOUT: Duration = Duration::from_secs(1);
const IDLE_TIMEOUT: Duration = Duration::from_secs(1);
const WRITE_TIMEOUT: Duration = Duration::from_secs(1);
const MAX_STREAMS: u32 = 20;
/// Scheduling slack on a shared 2-core machine, with several servers and clients at once.
const SLACK: Duration = Duration::from_millis(1500);

struct Server {
    child: Child,
    addr: SocketAddr,
    admin: SocketAddr,
    tls: Arc<rustls::ClientConfig>,
    dir: PathBuf,
    /// Resident memory after start-up and one warm-up review.
    baseline_kib: u64,
}

fn free_port() -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

fn proc_status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with(field)).unwrap_or_else(|| panic!("no {field}"));
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

impl Server {
    async fn start(name: &str) -> Server {
        Server::start_with(name, IDLE_TIMEOUT).await
    }

    async fn start_with(name: &str, idle_timeout: Duration) -> Server {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let dir = std::env::temp_dir().join(format!("dco-hostile-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
        std::fs::write(dir.join("tls.crt"), ck.cert.pem()).unwrap();
        std::fs::write(dir.join("tls.key"), ck.signing_key.serialize_pem()).unwrap();
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ck.cert.der().clone()).unwrap();
        let tls =
            Arc::new(rustls::ClientConfig::builder().with_root_certificates(roots).with_no_client_auth());
        let (addr, admin) = (free_port(), free_port());
        let fixtures = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../hack/bench/webhook-fixtures");
        let log = std::fs::File::create(dir.join("server.log")).unwrap();
        let log2 = log.try_clone().unwrap();
        let secs = |d: Duration| format!("{}ms", d.as_millis());
        let child = Command::new(env!("CARGO_BIN_EXE_dco-webhook"))
            .args(["--static-dir", fixtures.to_str().unwrap()])
            .args(["--listen", &addr.to_string(), "--admin-listen", &admin.to_string()])
            .args(["--tls-cert-file", dir.join("tls.crt").to_str().unwrap()])
            .args(["--tls-key-file", dir.join("tls.key").to_str().unwrap()])
            .args(["--max-inflight-bytes", &BUDGET.to_string()])
            .args(["--max-connections", &MAX_CONNECTIONS.to_string()])
            .args(["--max-request-bytes", &MAX_REQUEST.to_string()])
            .args(["--http2-max-streams", &MAX_STREAMS.to_string()])
            .args(["--request-timeout", &secs(REQUEST_TIMEOUT)])
            .args(["--header-read-timeout", &secs(HEADER_TIMEOUT)])
            .args(["--idle-timeout", &secs(idle_timeout)])
            .args(["--write-timeout", &secs(WRITE_TIMEOUT)])
            .args(["--shutdown-delay", "0s", "--shutdown-timeout", "1s"])
            .env("RUST_LOG", "info")
            .stdout(log)
            .stderr(log2)
            .spawn()
            .unwrap();
        let mut server = Server { child, addr, admin, tls, dir, baseline_kib: 0 };
        let t = Instant::now();
        while server.admin_get("/readyz").await.map(|(s, _)| s) != Some(200) {
            assert!(t.elapsed() < Duration::from_secs(20), "not ready in 20 s: {}", server.log());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let (status, _) = server.review(100, true).await;
        assert_eq!(status, 200, "warm-up review: {}", server.log());
        server.baseline_kib = proc_status_kib(server.child.id(), "VmRSS:");
        server
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
    }

    fn hwm_kib(&self) -> u64 {
        proc_status_kib(self.child.id(), "VmHWM:")
    }

    /// Peak memory must stay within the baseline plus the budget.
    fn assert_memory_bounded(&self, what: &str) -> u64 {
        let hwm = self.hwm_kib();
        let limit = self.baseline_kib + (BUDGET / 1024) as u64;
        eprintln!(
            "{what}: baseline {} MiB, peak {} MiB, limit {} MiB",
            self.baseline_kib / 1024,
            hwm / 1024,
            limit / 1024
        );
        assert!(hwm <= limit, "{what}: peak RSS {hwm} KiB over baseline + budget {limit} KiB");
        hwm
    }

    /// GET on the plain-HTTP admin port; None if it cannot connect.
    async fn admin_get(&self, path: &str) -> Option<(u16, String)> {
        let mut s = TcpStream::connect(self.admin).await.ok()?;
        s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
            .await
            .ok()?;
        let mut out = String::new();
        s.read_to_string(&mut out).await.ok()?;
        let status = out.get(9..12)?.parse().ok()?;
        Some((status, out))
    }

    async fn metric(&self, needle: &str) -> f64 {
        let (_, text) = self.admin_get("/metrics").await.unwrap();
        text.lines()
            .find(|l| l.starts_with(needle))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0)
    }

    async fn tls(&self, alpn: &[&[u8]]) -> std::io::Result<TlsStream<TcpStream>> {
        let mut config = (*self.tls).clone();
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        let tcp = TcpStream::connect(self.addr).await?;
        tcp.set_nodelay(true)?;
        TlsConnector::from(Arc::new(config)).connect("localhost".try_into().unwrap(), tcp).await
    }

    /// A valid review of `objects` ~10 KB widgets over a fresh connection (HTTP/2 or
    /// HTTP/1.1): its status and how long it took.
    async fn review(&self, objects: usize, http2: bool) -> (u16, Duration) {
        let body = review_body(objects);
        let t = Instant::now();
        let status = if http2 {
            let tls = self.tls(&[b"h2"]).await.unwrap();
            let (client, conn) = h2::client::handshake(tls).await.unwrap();
            tokio::spawn(conn);
            let mut client = client.ready().await.unwrap();
            let req = http::Request::post(format!("https://localhost/convert/{TARGET}"))
                .header("content-length", body.len())
                .body(())
                .unwrap();
            let (resp, mut stream) = client.send_request(req, false).unwrap();
            stream.send_data(body, true).unwrap();
            let resp = resp.await.unwrap();
            let status = resp.status().as_u16();
            let mut body = resp.into_body();
            while let Some(chunk) = body.data().await {
                let chunk = chunk.unwrap();
                let _ = body.flow_control().release_capacity(chunk.len());
            }
            status
        } else {
            let mut tls = self.tls(&[b"http/1.1"]).await.unwrap();
            let head = format!(
                "POST /convert/{TARGET} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            tls.write_all(head.as_bytes()).await.unwrap();
            tls.write_all(&body).await.unwrap();
            let mut out = Vec::new();
            let _ = tls.read_to_end(&mut out).await;
            String::from_utf8_lossy(&out[..12.min(out.len())])
                .get(9..12)
                .and_then(|s| s.parse().ok())
                .unwrap_or(0)
        };
        (status, t.elapsed())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        } else {
            let _ = writeln!(std::io::stderr(), "server log in {}", self.dir.display());
        }
    }
}

/// Reads until the server closes the connection (or `limit` passes): when it closed.
async fn closed_within<S: tokio::io::AsyncRead + Unpin>(s: &mut S, limit: Duration) -> Option<Duration> {
    let t = Instant::now();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout(limit.saturating_sub(t.elapsed()), s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return Some(t.elapsed()),
            Ok(Ok(_)) => continue,
            Err(_) => return None,
        }
    }
}

/// A review of `n` ~10 KB widgets (one built by the benchmark's fixture, copied: building
/// each one is slow in a debug build).
fn review_body(n: usize) -> Bytes {
    let one: serde_json::Value =
        serde_json::from_slice(&fixture::widget_review(1, 10 * 1024, "bench.dco.rs/v1", "bench.dco.rs/v2"))
            .unwrap();
    let mut review = one.clone();
    let objects: Vec<serde_json::Value> = (0..n)
        .map(|i| {
            let mut o = one["request"]["objects"][0].clone();
            o["metadata"]["name"] = format!("widget-{i:05}").into();
            o
        })
        .collect();
    review["request"]["objects"] = objects.into();
    Bytes::from(serde_json::to_vec(&review).unwrap())
}

/// Valid reviews, one after another, until `until`: (answered 200, slowest).
async fn valid_reviews(server: &Server, until: Instant, http2: bool) -> (usize, Duration) {
    let (mut ok, mut slowest) = (0, Duration::ZERO);
    while Instant::now() < until {
        let (status, took) = server.review(20, http2).await;
        assert_eq!(status, 200, "a valid review during the attack: {}", server.log());
        ok += 1;
        slowest = slowest.max(took);
    }
    (ok, slowest)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slowloris_headers_are_cut_off_by_the_header_read_timeout() {
    let server = Server::start("slowloris").await;
    let mut attackers = Vec::new();
    for i in 0..4 {
        let mut s = server.tls(&[b"http/1.1"]).await.unwrap();
        s.write_all(format!("POST /convert/{TARGET} HTTP/1.1\r\nHost: localhost\r\n").as_bytes())
            .await
            .unwrap();
        attackers.push(tokio::spawn(async move {
            let t = Instant::now();
            // One header byte every 100 ms: the headers never end.
            loop {
                if s.write_all(b"X").await.is_err() || s.flush().await.is_err() {
                    break;
                }
                let mut buf = [0u8; 512];
                match tokio::time::timeout(Duration::from_millis(100), s.read(&mut buf)).await {
                    Ok(Ok(0)) | Ok(Err(_)) => break,
                    Ok(Ok(_)) => {} // 408 from hyper, then the close
                    Err(_) => {}
                }
                if t.elapsed() > Duration::from_secs(10) {
                    panic!("slowloris connection {i} still open after 10 s");
                }
            }
            t.elapsed()
        }));
    }
    // Headers larger than the cap are refused at once.
    let mut big = server.tls(&[b"http/1.1"]).await.unwrap();
    big.write_all(format!("POST /convert/{TARGET} HTTP/1.1\r\nHost: localhost\r\nX-Big: ").as_bytes())
        .await
        .unwrap();
    let _ = tokio::time::timeout(Duration::from_secs(5), big.write_all(&vec![b'a'; 256 << 10])).await;
    let big_closed = closed_within(&mut big, Duration::from_secs(5)).await;

    let (ok, slowest) = valid_reviews(&server, Instant::now() + Duration::from_millis(1500), false).await;
    for a in attackers {
        let open = a.await.unwrap();
        eprintln!("slowloris connection closed after {open:?}");
        assert!(open <= HEADER_TIMEOUT + SLACK, "closed after {open:?}");
        assert!(open >= HEADER_TIMEOUT - Duration::from_millis(200), "closed early, after {open:?}");
    }
    eprintln!("oversized headers: closed after {big_closed:?}; valid reviews: {ok}, slowest {slowest:?}");
    assert!(big_closed.is_some(), "256 KiB of headers were not refused");
    assert!(ok >= 1 && slowest < REQUEST_TIMEOUT, "{ok} valid reviews, slowest {slowest:?}");
    server.assert_memory_bounded("slowloris");
}

/// One review on a kept-alive HTTP/1.1 connection, as the apiserver sends them: its status,
/// or `None` when the connection was closed under it.
async fn kept_alive_review(s: &mut TlsStream<TcpStream>, body: &[u8]) -> Option<u16> {
    let head = format!(
        "POST /convert/{TARGET} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).await.ok()?;
    s.write_all(body).await.ok()?;
    let mut got = Vec::new();
    let mut buf = [0u8; 16 << 10];
    let end = loop {
        if let Some(i) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        match s.read(&mut buf).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    };
    let head = String::from_utf8_lossy(&got[..end]).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .unwrap_or_else(|| panic!("an answer without content-length: {head}"))
        .trim()
        .parse()
        .unwrap();
    while got.len() < end + length {
        match s.read(&mut buf).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    head.get(9..12).and_then(|c| c.parse().ok())
}

/// The apiserver keeps an idle webhook connection for 90 s (Go's `IdleConnTimeout`) and sends
/// its next review on it without retrying if the server closed it meanwhile. hyper's header
/// timeout ran while a kept-alive connection waited for its next request, so the server closed
/// every connection idle for `--header-read-timeout` (10 s), silently: a review sent on one as
/// it closed failed with `write: broken pipe` (the sixth-server join of docs/performance.md).
/// Now the headers are timed from their first byte and an idle connection lasts
/// `--idle-timeout`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_alive_connection_waits_for_its_next_request_until_the_idle_timeout() {
    let idle = HEADER_TIMEOUT * 4;
    let server = Server::start_with("keepalive", idle).await;
    let body = review_body(2);
    let mut s = server.tls(&[b"http/1.1"]).await.unwrap();
    assert_eq!(kept_alive_review(&mut s, &body).await, Some(200), "{}", server.log());
    // Idle for twice the header timeout, then the next review on the same connection.
    tokio::time::sleep(HEADER_TIMEOUT * 2).await;
    assert_eq!(
        kept_alive_review(&mut s, &body).await,
        Some(200),
        "a kept-alive connection idle for {:?} (header timeout {HEADER_TIMEOUT:?}) was closed under the next review: {}",
        HEADER_TIMEOUT * 2,
        server.log()
    );
    // Idle from there on: closed by the idle timeout, not before.
    let open = closed_within(&mut s, idle * 2 + SLACK).await.expect("an idle connection never closed");
    eprintln!("kept-alive connection closed {open:?} after its last answer (idle timeout {idle:?})");
    assert!(
        open >= idle - Duration::from_millis(200),
        "closed after {open:?}, before the idle timeout {idle:?}"
    );
    assert!(open <= idle + SLACK, "closed after {open:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_connection_flood_is_capped_and_closed_by_the_idle_timeout() {
    let server = Server::start("idle").await;
    let flood = MAX_CONNECTIONS * 3;
    let t0 = Instant::now();
    let mut conns = Vec::new();
    for _ in 0..flood {
        let addr = server.addr;
        let tls = server.tls.clone();
        conns.push(tokio::spawn(async move {
            let mut config = (*tls).clone();
            config.alpn_protocols = vec![b"h2".to_vec()];
            let tcp = TcpStream::connect(addr).await.unwrap();
            // The handshake completes only once the server accepted the connection.
            let start = Instant::now();
            let hs = TlsConnector::from(Arc::new(config)).connect("localhost".try_into().unwrap(), tcp).await;
            let accepted_after = start.elapsed();
            let Ok(mut s) = hs else { return (accepted_after, None) };
            // An HTTP/2 preface and nothing else: a connection that never opens a stream.
            let _ =
                s.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00").await;
            let open = closed_within(&mut s, Duration::from_secs(15)).await;
            (accepted_after, open)
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let open_now = server.metric("dco_webhook_open_connections ").await;
    let waits = server.metric("dco_webhook_connection_limit_reached_total").await;
    eprintln!("{flood} connections: {open_now} open at the server, limit reached {waits} times");
    assert!(open_now <= MAX_CONNECTIONS as f64, "{open_now} connections open, cap {MAX_CONNECTIONS}");
    assert!(waits >= 1.0);

    // A valid review waits its turn in the backlog, and is answered once idle ones go.
    let (status, took) = server.review(20, true).await;
    eprintln!("valid review during the flood: {status} after {took:?}");
    assert_eq!(status, 200);
    // Closed after at most two idle timeouts (the second one is the grace after GOAWAY,
    // which this client never acknowledges), a round of the cap at a time.
    assert!(took < IDLE_TIMEOUT * 2 * (flood / MAX_CONNECTIONS) as u32 + SLACK * 2, "{took:?}");

    let mut max_open = Duration::ZERO;
    for c in conns {
        let (accepted, open) = c.await.unwrap();
        let open = open.expect("an idle connection still open after 15 s");
        max_open = max_open.max(open);
        assert!(open <= IDLE_TIMEOUT * 2 + SLACK, "idle for {open:?} (accepted after {accepted:?})");
    }
    eprintln!(
        "every idle connection closed within {max_open:?} of its handshake; all done after {:?}",
        t0.elapsed()
    );
    assert!(
        server.metric("dco_webhook_connections_closed_total{reason=\"idle\"}").await >= flood as f64 - 1.0
    );
    server.assert_memory_bounded("idle flood");
}

/// HTTP/1.1 requests that declare `declared` bytes, send `sent`, then trickle a byte every
/// 100 ms: the status each gets and when.
async fn trickled_http1(server: &Server, declared: usize, sent: usize) -> (u16, Duration) {
    let mut s = server.tls(&[b"http/1.1"]).await.unwrap();
    let t = Instant::now();
    let head = format!(
        "POST /convert/{TARGET} HTTP/1.1\r\nHost: localhost\r\nContent-Length: {declared}\r\n\r\n{{\"apiVersion\":\"apiextensions.k8s.io/v1\",\"kind\":\"ConversionReview\",\"request\":{{\"uid\":\"u\",\"objects\":[{{\"a\":\""
    );
    s.write_all(head.as_bytes()).await.unwrap();
    let _ = s.write_all(&vec![b'x'; sent]).await;
    let mut out = Vec::new();
    loop {
        let mut buf = [0u8; 1024];
        match tokio::time::timeout(Duration::from_millis(100), s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(n)) => {
                out.extend_from_slice(&buf[..n]);
                if out.windows(4).any(|w| w == b"\r\n\r\n") {
                    break;
                }
            }
            Err(_) => {
                if s.write_all(b"x").await.is_err() {
                    break;
                }
            }
        }
        assert!(t.elapsed() < Duration::from_secs(10), "no answer to a trickled body after 10 s");
    }
    let status = String::from_utf8_lossy(&out).get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
    (status, t.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unfinished_http1_bodies_get_408_or_503_within_the_request_timeout() {
    let server = Server::start("h1-bodies").await;
    // Six bodies of 8 MiB declared: 48 MiB, three times the reviews' share of the budget.
    let mut attackers = Vec::new();
    let server = Arc::new(server);
    for _ in 0..6 {
        let s = server.clone();
        attackers.push(tokio::spawn(async move { trickled_http1(&s, MAX_REQUEST, 512 << 10).await }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (status, took) = server.review(20, false).await;
    eprintln!("valid review during the attack: {status} after {took:?}");
    assert!(status == 200 || status == 503, "{status}");
    assert!(took <= REQUEST_TIMEOUT + SLACK);
    let mut statuses = Vec::new();
    for a in attackers {
        let (status, took) = a.await.unwrap();
        statuses.push((status, took));
        assert!(status == 408 || status == 503, "a trickled body got {status}");
        assert!(took <= REQUEST_TIMEOUT + SLACK, "answered after {took:?}");
    }
    eprintln!("trickled bodies: {statuses:?}");
    assert!(statuses.iter().any(|(s, _)| *s == 408));
    // Once the attack is over, reviews are served again.
    assert_eq!(server.review(20, false).await.0, 200);
    assert!(
        server
            .metric("dco_webhook_requests_total{target=\"widgets.bench.dco.rs\",result=\"body_timeout\"}")
            .await
            >= 1.0
    );
    assert_eq!(server.metric("dco_webhook_inflight_bytes").await, 0.0);
    server.assert_memory_bounded("HTTP/1.1 unfinished bodies");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_http2_streams_of_unfinished_bodies_stay_within_the_budget() {
    let server = Arc::new(Server::start("h2-streams").await);
    let conns = MAX_CONNECTIONS - 2;
    let mut attackers = Vec::new();
    let started = Instant::now();
    for _ in 0..conns {
        let tls = server.tls(&[b"h2"]).await.unwrap();
        let (client, conn) = h2::client::Builder::new().handshake::<_, Bytes>(tls).await.unwrap();
        tokio::spawn(conn);
        // As many streams as the server allows, each declaring 8 MiB and pushing data as fast
        // as flow control lets it for 1.5 s, never finishing: 6 × 20 × 8 MiB = 960 MiB asked.
        for _ in 0..MAX_STREAMS {
            let client = client.clone();
            attackers.push(tokio::spawn(async move {
                let mut client = client.ready().await?;
                let req = http::Request::post(format!("https://localhost/convert/{TARGET}"))
                    .header("content-length", MAX_REQUEST)
                    .body(())
                    .unwrap();
                let (resp, mut stream) = client.send_request(req, false)?;
                let piece = Bytes::from(vec![b' '; 64 << 10]);
                let mut pushed = 0usize;
                let until = Instant::now() + Duration::from_millis(1500);
                while pushed < MAX_REQUEST - piece.len() && Instant::now() < until {
                    stream.reserve_capacity(piece.len());
                    let got = tokio::time::timeout_at(
                        until.into(),
                        std::future::poll_fn(|cx| stream.poll_capacity(cx)),
                    )
                    .await;
                    match got {
                        Ok(Some(Ok(n))) if n > 0 => {
                            stream.send_data(piece.slice(..n.min(piece.len())), false)?;
                            pushed += n.min(piece.len());
                        }
                        Ok(Some(Ok(_))) => {}
                        _ => break,
                    }
                }
                let resp =
                    tokio::time::timeout(Duration::from_secs(10), resp).await.expect("no answer in 10 s")?;
                Ok::<_, h2::Error>((resp.status().as_u16(), pushed, started.elapsed()))
            }));
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let peak_inflight = server.metric("dco_webhook_inflight_bytes").await;
    let (ok, slowest) = {
        let t = Instant::now();
        let (status, took) = server.review(20, true).await;
        eprintln!("valid review during the attack: {status} after {took:?}");
        assert!(status == 200 || status == 503, "{status}");
        assert!(t.elapsed() <= REQUEST_TIMEOUT + SLACK);
        (status, took)
    };
    let mut by_status = std::collections::BTreeMap::new();
    let mut pushed_total = 0;
    let mut last_answer = Duration::ZERO;
    for a in attackers {
        match a.await.unwrap() {
            Ok((status, pushed, at)) => {
                *by_status.entry(status).or_insert(0) += 1;
                pushed_total += pushed;
                last_answer = last_answer.max(at);
            }
            Err(e) => *by_status.entry(0).or_insert(0) += usize::from(!e.to_string().is_empty()),
        }
    }
    eprintln!(
        "{} streams: statuses {by_status:?}, {} MiB accepted by flow control, in flight at the server {} MiB, last answer at {last_answer:?}; valid review {ok} in {slowest:?}",
        conns * MAX_STREAMS as usize,
        pushed_total / MIB,
        peak_inflight as usize / MIB
    );
    assert!(by_status.keys().all(|s| *s == 408 || *s == 503), "{by_status:?}");
    // 960 MiB asked of a 16 MiB share: some streams must have been refused by the budget.
    let refused = server.metric("dco_webhook_budget_waits_total{result=\"refused\"}").await;
    // (The valid review may have been one of them.)
    let attackers_refused = by_status.get(&503).copied().unwrap_or(0);
    assert!(
        (attackers_refused..=attackers_refused + 1).contains(&(refused as usize)),
        "{refused} {by_status:?}"
    );
    assert!(refused >= 1.0, "{by_status:?}");
    assert!(last_answer <= REQUEST_TIMEOUT * 2 + SLACK * 2, "{last_answer:?}");
    // Flow control held the clients back: what they could push is the budget plus windows.
    assert!(pushed_total <= BUDGET + 2 * MIB, "{pushed_total} bytes pushed");
    assert_eq!(server.review(20, true).await.0, 200);
    server.assert_memory_bounded("HTTP/2 unfinished bodies");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_reads_its_answers_is_dropped_at_the_write_timeout() {
    let server = Server::start("zero-window").await;
    // ~4 MB reviews; the client's stream windows are zero, so no answer can be sent.
    let body = review_body(400);
    let tls = server.tls(&[b"h2"]).await.unwrap();
    let (client, conn) =
        h2::client::Builder::new().initial_window_size(0).handshake::<_, Bytes>(tls).await.unwrap();
    let started = Instant::now();
    let conn = tokio::spawn(async move {
        let _ = conn.await;
        started.elapsed()
    });
    let mut answers = Vec::new();
    for _ in 0..3 {
        let mut c = client.clone().ready().await.unwrap();
        let req = http::Request::post(format!("https://localhost/convert/{TARGET}"))
            .header("content-length", body.len())
            .body(())
            .unwrap();
        let (resp, mut stream) = c.send_request(req, false).unwrap();
        stream.send_data(body.clone(), true).unwrap();
        answers.push(resp);
    }
    // The headers arrive (they need no window); the bodies never can. The answers are kept:
    // dropping one would reset its stream.
    let mut kept = Vec::new();
    for r in answers {
        let r = r.await.unwrap();
        assert_eq!(r.status(), 200);
        kept.push(r);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let held = server.metric("dco_webhook_inflight_bytes").await;
    eprintln!("answers held for the stalled reader: {} MiB", held as usize / MIB);
    assert!(held > 0.0, "the unsent answers must count against the budget");
    let closed_after =
        tokio::time::timeout(Duration::from_secs(10), conn).await.expect("still open after 10 s").unwrap();
    eprintln!("stalled reader's connection closed after {closed_after:?}");
    assert!(closed_after <= WRITE_TIMEOUT + REQUEST_TIMEOUT + SLACK, "{closed_after:?}");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(server.metric("dco_webhook_inflight_bytes").await, 0.0, "the budget is given back");
    assert!(server.metric("dco_webhook_connections_closed_total{reason=\"stalled_write\"}").await >= 1.0);
    drop(kept);
    // Readers that read are answered.
    assert_eq!(server.review(20, true).await.0, 200);
    server.assert_memory_bounded("zero-window reader");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http1_client_that_never_reads_is_dropped_at_the_write_timeout() {
    let server = Server::start("h1-stall").await;
    // ~7 MB answer; the client's socket buffer is tiny and it never reads, so the server's
    // socket (at most 4 MiB of send buffer here) fills and the answer stops moving.
    let body = review_body(700);
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let tcp = socket.connect(server.addr).await.unwrap();
    let mut config = (*server.tls).clone();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let mut tls =
        TlsConnector::from(Arc::new(config)).connect("localhost".try_into().unwrap(), tcp).await.unwrap();
    let head = format!(
        "POST /convert/{TARGET} HTTP/1.1\r\nHost: localhost\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    tls.write_all(head.as_bytes()).await.unwrap();
    tls.write_all(&body).await.unwrap();
    tls.flush().await.unwrap();
    let sent = Instant::now();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let held = server.metric("dco_webhook_inflight_bytes").await;
    eprintln!("answer held for the stalled HTTP/1.1 reader: {} MiB", held as usize / MIB);
    assert!(held > 0.0, "the unsent answer must count against the budget");
    let mut closed = None;
    while sent.elapsed() < Duration::from_secs(10) {
        if server.metric("dco_webhook_connections_closed_total{reason=\"stalled_write\"}").await >= 1.0 {
            closed = Some(sent.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let closed = closed.expect("the stalled connection is still open after 10 s");
    eprintln!("stalled HTTP/1.1 reader's connection closed {closed:?} after its request was sent");
    assert!(closed <= WRITE_TIMEOUT + REQUEST_TIMEOUT + SLACK, "{closed:?}");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(server.metric("dco_webhook_inflight_bytes").await, 0.0, "the budget is given back");
    assert_eq!(server.review(20, false).await.0, 200);
    drop(tls);
    server.assert_memory_bounded("HTTP/1.1 stalled reader");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resident_memory_comes_back_down_after_large_reviews() {
    let server = Server::start("release").await;
    let rss = || proc_status_kib(server.child.id(), "VmRSS:") / 1024;
    // ~7 MB reviews, one after another: each takes a body, an answer and the conversion's
    // working memory, all freed when it is answered.
    for _ in 0..4 {
        assert_eq!(server.review(700, true).await.0, 200);
    }
    let peak = server.hwm_kib() / 1024;
    // Once no large review is in flight for a moment, the cached large buffers are unmapped
    // and glibc's arenas trimmed (`alloc::release_free_memory_soon`).
    let t = Instant::now();
    let mut now = rss();
    while now > server.baseline_kib / 1024 + 8 && t.elapsed() < Duration::from_secs(3) {
        tokio::time::sleep(Duration::from_millis(100)).await;
        now = rss();
    }
    eprintln!("large reviews: baseline {} MiB, peak {peak} MiB, after {now} MiB", server.baseline_kib / 1024);
    assert!(peak > server.baseline_kib / 1024 + 8, "the reviews did not raise resident memory: {peak} MiB");
    assert!(now <= server.baseline_kib / 1024 + 8, "resident memory stayed at {now} MiB after the reviews");
}

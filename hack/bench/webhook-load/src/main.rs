//! Load generator for `dco-webhook --static-dir` (see hack/bench/webhook.sh).
//!
//! `cert` writes a self-signed serving certificate; `targets` writes a static directory of N
//! targets; `run` posts ConversionReviews of N objects of about K bytes each and reports
//! latency percentiles and objects per second. Loopback only, bounded in request count and in
//! time.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use sonic_rs::JsonValueTrait;

#[derive(Parser)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Write tls.crt and tls.key for localhost/127.0.0.1 into DIR.
    Cert { dir: PathBuf },
    /// Write COUNT copies of the fixture target (a CRD and its config) into DIR, each with
    /// its own group and names: a `--static-dir` holding many targets (hack/bench/held.sh).
    Targets(TargetsArgs),
    /// Send reviews and report latency.
    Run(RunArgs),
}

#[derive(clap::Args)]
struct TargetsArgs {
    dir: PathBuf,
    #[arg(long)]
    count: usize,
    /// The fixture: a CRD of group bench.dco.rs and a config named widgets for it.
    #[arg(long, default_value = "hack/bench/webhook-fixtures")]
    fixtures: PathBuf,
}

#[derive(clap::Args)]
struct RunArgs {
    /// e.g. https://127.0.0.1:9443/convert/widgets.bench.dco.rs (loopback only).
    #[arg(long)]
    url: String,
    /// CA (the self-signed certificate) to trust.
    #[arg(long)]
    ca: PathBuf,
    #[arg(long, default_value_t = 1500)]
    objects: usize,
    /// Approximate serialized size of one object.
    #[arg(long, default_value_t = 10 * 1024)]
    object_bytes: usize,
    /// Measured requests (after the warm-up).
    #[arg(long, default_value_t = 200)]
    requests: usize,
    #[arg(long, default_value_t = 5)]
    warmup: usize,
    /// Requests in flight at once.
    #[arg(long, default_value_t = 1)]
    concurrency: usize,
    /// Speak HTTP/1.1 (what webhook servers that disable HTTP/2 get from the apiserver)
    /// instead of HTTP/2.
    #[arg(long)]
    http1: bool,
    /// Stop early after this many seconds.
    #[arg(long, default_value_t = 300)]
    max_seconds: u64,
    /// Also write each measured latency (ms, in completion order) to this file, one per line,
    /// to see whether slow requests cluster.
    #[arg(long)]
    latencies_out: Option<PathBuf>,
    #[arg(long, default_value = "bench.dco.rs/v1")]
    from: String,
    #[arg(long, default_value = "bench.dco.rs/v2")]
    to: String,
}

/// The benchmark review, from the engine benchmark's own fixtures (so both measure the same
/// bytes).
#[path = "../../../../webhook/engine/benches/fixture.rs"]
mod fixture;

fn ensure_loopback(url: &str) -> anyhow::Result<()> {
    let u = reqwest::Url::parse(url).context("--url")?;
    let host = u.host_str().unwrap_or_default().trim_matches(|c| c == '[' || c == ']');
    let ok = host == "localhost" || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback());
    if !ok {
        bail!("refusing to send load to {host:?}: loopback only");
    }
    Ok(())
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let idx = ((p / 100.0) * (sorted.len() as f64 - 1.0)).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

async fn run(args: RunArgs) -> anyhow::Result<()> {
    ensure_loopback(&args.url)?;
    let ca = std::fs::read(&args.ca).with_context(|| format!("reading {}", args.ca.display()))?;
    let mut client = reqwest::Client::builder();
    if args.http1 {
        client = client.http1_only();
    }
    let client = client
        .use_preconfigured_tls(go_like_tls(&ca, args.http1)?)
        .timeout(Duration::from_secs(60))
        // The flow-control windows of the apiserver's own HTTP/2 client (Go's transport:
        // 4 MiB per stream, 1 GiB per connection), so the response streams as it would to it.
        .http2_initial_stream_window_size(4 << 20)
        .http2_initial_connection_window_size(1 << 30)
        .build()?;
    let body =
        bytes::Bytes::from(fixture::widget_review(args.objects, args.object_bytes, &args.from, &args.to));
    eprintln!(
        "review: {} objects, {} bytes ({:.1} KB/object)",
        args.objects,
        body.len(),
        body.len() as f64 / args.objects as f64 / 1024.0
    );

    let send = |client: reqwest::Client, url: String, body: bytes::Bytes| async move {
        let t = Instant::now();
        let mut r = client.post(url).header("content-type", "application/json").body(body).send().await?;
        let status = r.status();
        // Latency is the time to the response's last byte: the chunks are joined only after
        // the clock stops (that copy is the client's own work, not the webhook's).
        let mut chunks = Vec::new();
        while let Some(c) = r.chunk().await? {
            chunks.push(c);
        }
        let took = t.elapsed();
        let bytes = chunks.concat();
        if !status.is_success() {
            bail!("HTTP {status}: {}", String::from_utf8_lossy(&bytes[..bytes.len().min(500)]));
        }
        let result = sonic_rs::get(&bytes[..], ["response", "result", "status"])
            .ok()
            .and_then(|v| v.as_str().map(str::to_string));
        if result.as_deref() != Some("Success") {
            let msg = sonic_rs::get(&bytes[..], ["response", "result", "message"])
                .ok()
                .and_then(|v| v.as_str().map(str::to_string));
            bail!("review failed: {msg:?}");
        }
        anyhow::Ok((took, bytes.len()))
    };

    for _ in 0..args.warmup {
        send(client.clone(), args.url.clone(), body.clone()).await?;
    }
    let deadline = Instant::now() + Duration::from_secs(args.max_seconds);
    let started = Instant::now();
    let mut latencies = Vec::with_capacity(args.requests);
    let mut in_flight = tokio::task::JoinSet::new();
    let mut sent = 0;
    let mut out_bytes = 0;
    while latencies.len() < args.requests {
        while sent < args.requests && in_flight.len() < args.concurrency && Instant::now() < deadline {
            in_flight.spawn(send(client.clone(), args.url.clone(), body.clone()));
            sent += 1;
        }
        match in_flight.join_next().await {
            Some(r) => {
                let (took, n) = r??;
                latencies.push(took);
                out_bytes = n;
            }
            None => break,
        }
    }
    let wall = started.elapsed();
    if let Some(path) = &args.latencies_out {
        let lines: String = latencies.iter().map(|d| format!("{:.2}\n", ms(*d))).collect();
        std::fs::write(path, lines).with_context(|| format!("writing {}", path.display()))?;
    }
    latencies.sort();
    let n = latencies.len();
    let objects_per_s = (n * args.objects) as f64 / wall.as_secs_f64();
    println!(
        "protocol={} requests={n} concurrency={} objects={} request_bytes={} response_bytes={out_bytes} p50_ms={:.1} p90_ms={:.1} p99_ms={:.1} max_ms={:.1} objects_per_s={:.0} wall_s={:.1}",
        if args.http1 { "http/1.1" } else { "h2" },
        args.concurrency,
        args.objects,
        body.len(),
        ms(percentile(&latencies, 50.0)),
        ms(percentile(&latencies, 90.0)),
        ms(percentile(&latencies, 99.0)),
        ms(latencies.last().copied().unwrap_or_default()),
        objects_per_s,
        wall.as_secs_f64(),
    );
    Ok(())
}

/// TLS as the apiserver's Go client offers it: on CPUs with AES instructions Go puts
/// AES-128-GCM first (rustls' own client default is AES-256-GCM), and the server follows the
/// client's order.
fn go_like_tls(ca_pem: &[u8], http1: bool) -> anyhow::Result<rustls::ClientConfig> {
    use rustls::crypto::ring::{cipher_suite as cs, default_provider};
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    let ca =
        rustls::pki_types::CertificateDer::from_pem_slice(ca_pem).context("--ca is not a PEM certificate")?;
    roots.add(ca)?;
    let provider = rustls::crypto::CryptoProvider {
        cipher_suites: vec![
            cs::TLS13_AES_128_GCM_SHA256,
            cs::TLS13_CHACHA20_POLY1305_SHA256,
            cs::TLS13_AES_256_GCM_SHA384,
            cs::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
            cs::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
        ],
        ..default_provider()
    };
    let mut cfg = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(provider))
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols =
        if http1 { vec![b"http/1.1".to_vec()] } else { vec![b"h2".to_vec(), b"http/1.1".to_vec()] };
    Ok(cfg)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn cert(dir: PathBuf) -> anyhow::Result<()> {
    std::fs::create_dir_all(&dir)?;
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_string(), "127.0.0.1".to_string()])?;
    std::fs::write(dir.join("tls.crt"), ck.cert.pem())?;
    std::fs::write(dir.join("tls.key"), ck.signing_key.serialize_pem())?;
    Ok(())
}

/// Target `i` is the fixture with group `t{i}.bench.dco.rs` and config `widgets-t{i}`, so the
/// files differ only in those names and their sizes stay the fixture's, plus a few bytes.
fn targets(args: TargetsArgs) -> anyhow::Result<()> {
    let read = |f: &str| {
        let p = args.fixtures.join(f);
        std::fs::read_to_string(&p).with_context(|| format!("cannot read {}", p.display()))
    };
    let (crd, config) = (read("widgets-crd.yaml")?, read("widgets-config.yaml")?);
    if !config.contains("\n  name: widgets\n") || !crd.contains("bench.dco.rs") {
        bail!(
            "{} is not the widgets fixture (config name widgets, group bench.dco.rs)",
            args.fixtures.display()
        );
    }
    std::fs::create_dir_all(&args.dir)?;
    for i in 0..args.count {
        let group = format!("t{i}.bench.dco.rs");
        let config = config
            .replace("\n  name: widgets\n", &format!("\n  name: widgets-t{i}\n"))
            .replace("bench.dco.rs", &group);
        std::fs::write(args.dir.join(format!("t{i}-crd.yaml")), crd.replace("bench.dco.rs", &group))?;
        std::fs::write(args.dir.join(format!("t{i}-config.yaml")), config)?;
    }
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    match Cli::parse().cmd {
        Cmd::Cert { dir } => cert(dir),
        Cmd::Targets(args) => targets(args),
        Cmd::Run(args) => {
            tokio::runtime::Builder::new_multi_thread().enable_all().build()?.block_on(run(args))
        }
    }
}

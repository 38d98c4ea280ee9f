//! A real OpenTelemetry Collector on loopback: the distribution of
//! `hack/testenv-go/tools/otelcol` (OTLP receiver, batch processor, file exporter), built by
//! `hack/testenv tool otelcol` and run as a local process, its OTLP/HTTP receiver on
//! `127.0.0.1:<free port>`, its traces written by the file exporter as length-prefixed OTLP
//! protobuf (`format: proto`: each message a `TracesData` after its size as a big-endian u32).
//!
//! ```no_run
//! # async fn t(dir: &std::path::Path) -> anyhow::Result<()> {
//! let collector = dco_tests::otelcol::Collector::start(dir).await?;
//! // ... point something at collector.endpoint ...
//! let spans = collector.resource_spans()?; // what it has written so far
//! # Ok(()) }
//! ```
//!
//! The process is killed when the [`Collector`] is dropped (also when a test panics).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, TracesData};
use prost::Message as _;

/// Attempts at a free port: another process may take the one picked between the probe and
/// the collector's bind.
const PORT_ATTEMPTS: usize = 3;
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// What the collector logs once its pipelines run (service.go, `Start`).
const READY: &str = "Everything is ready";

/// A running collector.
pub struct Collector {
    child: Child,
    /// The base URL of its OTLP/HTTP receiver, as `--otlp-endpoint` takes it.
    pub endpoint: String,
    /// The file exporter's output.
    pub output: PathBuf,
    /// The collector's own log (stdout and stderr).
    pub log: PathBuf,
}

impl Drop for Collector {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The collector's config: OTLP over HTTP only (no gRPC listener), spans through the batch
/// processor to the file, its own telemetry to its log only (no metrics listener on :8888,
/// which concurrent collectors would fight over).
fn config(port: u16, output: &Path) -> serde_json::Value {
    serde_json::json!({
        "receivers": {"otlp": {"protocols": {"http": {"endpoint": format!("127.0.0.1:{port}")}}}},
        "processors": {"batch": {"timeout": "200ms"}},
        "exporters": {"file": {"path": output, "format": "proto", "flush_interval": "100ms"}},
        "service": {
            "telemetry": {"metrics": {"level": "none"}, "logs": {"level": "info"}},
            "pipelines": {"traces": {"receivers": ["otlp"], "processors": ["batch"], "exporters": ["file"]}},
        },
    })
}

impl Collector {
    /// Builds the collector if needed (a cold build takes minutes: docs/testenv.md), writes
    /// its config, output and log under `dir`, starts it and waits until its receiver
    /// listens.
    pub async fn start(dir: &Path) -> Result<Collector> {
        let bin = tokio::task::spawn_blocking(|| crate::testenv_tool("otelcol")).await??;
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let mut last = String::new();
        for _ in 0..PORT_ATTEMPTS {
            match Self::start_once(&bin, dir).await? {
                Ok(c) => return Ok(c),
                Err(why) => last = why,
            }
        }
        bail!("the collector did not start in {PORT_ATTEMPTS} attempts; last: {last}")
    }

    /// `Ok(Err(why))`: the collector exited because its port was taken meanwhile (try again).
    async fn start_once(bin: &Path, dir: &Path) -> Result<std::result::Result<Collector, String>> {
        let port = crate::free_port()?;
        let output = dir.join("traces.otlp");
        let log = dir.join("otelcol.log");
        let config_file = dir.join("config.yaml");
        std::fs::write(&config_file, serde_yaml::to_string(&config(port, &output))?)?;
        let file = std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let child = Command::new(bin)
            .arg(format!("--config={}", config_file.display()))
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let mut c = Collector { child, endpoint: format!("http://127.0.0.1:{port}"), output, log };
        eprintln!("otelcol at {} (log {})", c.endpoint, c.log.display());
        let started = Instant::now();
        loop {
            let text = std::fs::read_to_string(&c.log).unwrap_or_default();
            if let Some(status) = c.child.try_wait()? {
                if text.contains("address already in use") {
                    return Ok(Err(format!("port {port} taken")));
                }
                bail!("the collector exited ({status}) before it was ready:\n{text}");
            }
            if text.contains(READY) && std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Ok(Ok(c));
            }
            if started.elapsed() > START_TIMEOUT {
                bail!("the collector was not ready within {START_TIMEOUT:?}:\n{text}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Everything the file exporter has written so far. A message still being written (its
    /// size read, not all its bytes) is left for the next read.
    pub fn resource_spans(&self) -> Result<Vec<ResourceSpans>> {
        let bytes = match std::fs::read(&self.output) {
            Ok(b) => b,
            // Nothing exported yet: the exporter creates the file at start, but be lenient.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e).with_context(|| format!("reading {}", self.output.display())),
        };
        decode(&bytes).with_context(|| format!("decoding {}", self.output.display()))
    }
}

/// The complete length-prefixed `TracesData` messages of `bytes`.
fn decode(mut bytes: &[u8]) -> Result<Vec<ResourceSpans>> {
    let mut out = Vec::new();
    while bytes.len() >= 4 {
        let len = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as usize;
        let Some(msg) = bytes.get(4..4 + len) else { break };
        out.extend(TracesData::decode(msg).context("a message is not OTLP TracesData")?.resource_spans);
        bytes = &bytes[4 + len..];
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::trace::v1::{ScopeSpans, Span};

    fn message(name: &str) -> Vec<u8> {
        let span =
            Span { name: name.into(), trace_id: vec![1; 16], span_id: vec![2; 8], ..Default::default() };
        let data = TracesData {
            resource_spans: vec![ResourceSpans {
                scope_spans: vec![ScopeSpans { spans: vec![span], ..Default::default() }],
                ..Default::default()
            }],
        };
        let body = data.encode_to_vec();
        let mut out = (body.len() as u32).to_be_bytes().to_vec();
        out.extend(body);
        out
    }

    fn names(rs: &[ResourceSpans]) -> Vec<String> {
        rs.iter().flat_map(|r| &r.scope_spans).flat_map(|s| &s.spans).map(|s| s.name.clone()).collect()
    }

    #[test]
    fn decode_reads_every_complete_message_and_leaves_a_partial_one() {
        let mut bytes = [message("a"), message("b")].concat();
        assert_eq!(names(&decode(&bytes).unwrap()), ["a", "b"]);
        let third = message("c");
        bytes.extend(&third[..third.len() - 1]);
        assert_eq!(names(&decode(&bytes).unwrap()), ["a", "b"], "the partial third waits");
        bytes.push(*third.last().unwrap());
        assert_eq!(names(&decode(&bytes).unwrap()), ["a", "b", "c"]);
        assert!(decode(&[0, 0, 0, 2, 0xff, 0xff]).is_err(), "garbage is an error, not silence");
    }

    #[test]
    fn the_config_listens_on_loopback_only_and_writes_protobuf() {
        let c = config(4318, Path::new("/tmp/x/traces.otlp"));
        assert_eq!(c["receivers"]["otlp"]["protocols"]["http"]["endpoint"], "127.0.0.1:4318");
        assert!(c["receivers"]["otlp"]["protocols"].get("grpc").is_none());
        assert_eq!(c["exporters"]["file"]["format"], "proto");
        assert_eq!(c["service"]["pipelines"]["traces"]["exporters"], serde_json::json!(["file"]));
    }
}

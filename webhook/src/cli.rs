//! Command-line flags (each also settable from the environment).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

/// dco's conversion webhook server.
///
/// In a cluster it watches configs, servers and targets, compiles plans for the targets its
/// instance serves and answers ConversionReviews for them. With --static-dir it serves the
/// configs and CRD/XRD manifests in a directory, without a cluster.
#[derive(Clone, Debug, Parser)]
// A flag given twice takes its last value: the operator's defaults come first and a server's
// extraArgs (or a test's --webhook-arg) after them (operator/src/server/desired.rs).
#[command(name = "dco-webhook", version, args_override_self = true)]
pub struct Args {
    /// Address to serve HTTPS on.
    #[arg(long, env = "DCO_LISTEN", default_value = "0.0.0.0:9443")]
    pub listen: SocketAddr,
    /// PEM certificate chain (reloaded when it changes).
    #[arg(long, env = "DCO_TLS_CERT_FILE")]
    pub tls_cert_file: PathBuf,
    /// PEM private key (reloaded when it changes).
    #[arg(long, env = "DCO_TLS_KEY_FILE")]
    pub tls_key_file: PathBuf,
    /// How often to check the certificate files for changes.
    #[arg(long, env = "DCO_TLS_RELOAD_INTERVAL", default_value = "5s", value_parser = parse_duration)]
    pub tls_reload_interval: Duration,

    /// Serve the configs and targets in this directory; no cluster.
    #[arg(long, env = "DCO_STATIC_DIR")]
    pub static_dir: Option<PathBuf>,

    /// The ConversionWebhookServer this replica belongs to.
    #[arg(long, env = "DCO_INSTANCE", required_unless_present = "static_dir")]
    pub instance: Option<String>,
    /// This Pod's name (downward API); names the served-target Lease.
    #[arg(long, env = "POD_NAME")]
    pub pod_name: Option<String>,
    /// This Pod's namespace (downward API); where the Lease lives.
    #[arg(long, env = "POD_NAMESPACE")]
    pub pod_namespace: Option<String>,
    /// The instance's Service name, matched against targets' spec.conversion
    /// (default: the instance name).
    #[arg(long, env = "DCO_SERVICE_NAME")]
    pub service_name: Option<String>,
    /// Label selector of the ConversionWebhookServers that form the pool this replica
    /// resolves targets over (default: every server). The operator sets it to its own
    /// `--selector`, so its replicas and it resolve over exactly the same servers.
    #[arg(long, env = "DCO_SERVER_SELECTOR")]
    pub server_selector: Option<String>,

    /// Largest ConversionReview body accepted (bytes); larger gets 413.
    #[arg(long, env = "DCO_MAX_REQUEST_BYTES", default_value_t = 64 << 20)]
    pub max_request_bytes: usize,
    /// Time budget of one ConversionReview, from its headers to its answer: reading the body
    /// and converting it.
    #[arg(long, env = "DCO_REQUEST_TIMEOUT", default_value = "25s", value_parser = parse_duration)]
    pub request_timeout: Duration,
    /// Threads that convert (each with the engine's stack); at most this many reviews convert
    /// at once, the rest wait inside their deadline. 0: one per CPU.
    #[arg(long, env = "DCO_CONVERSION_THREADS", default_value_t = 0)]
    pub conversion_threads: usize,
    /// Memory one review's conversion may use, as a multiple of its body (at least 128 MiB);
    /// an object that would take more fails with a message instead of growing the process.
    #[arg(long, env = "DCO_CONVERSION_MEMORY_FACTOR", default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..))]
    pub conversion_memory_factor: u64,
    /// Memory budget of the replica for ConversionReviews in flight (bytes): request bodies
    /// and their answers across all connections, plus what the connections may buffer
    /// (`--max-connections` × the HTTP/2 window). A request beyond it waits, then gets 503.
    #[arg(long, env = "DCO_MAX_INFLIGHT_BYTES", default_value_t = 256 << 20)]
    pub max_inflight_bytes: usize,
    /// Open connections on the conversion listener; more wait in the accept backlog.
    #[arg(long, env = "DCO_MAX_CONNECTIONS", default_value_t = 32)]
    pub max_connections: usize,
    /// HTTP/2 concurrent streams per connection (Go clients, the apiserver's included, open
    /// another connection when a connection is full).
    #[arg(long, env = "DCO_HTTP2_MAX_STREAMS", default_value_t = 100)]
    pub http2_max_streams: u32,
    /// HTTP/1.1: a request's headers must arrive within it of their first byte (a new
    /// connection's first request, of the accept). A kept-alive connection waiting for its
    /// next request is bounded by `--idle-timeout` instead.
    #[arg(long, env = "DCO_HEADER_READ_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub header_read_timeout: Duration,
    /// A connection with no request in flight for this long is closed. Keep it above the
    /// apiserver's idle timeout for webhook connections (90 s): a connection must be closed by
    /// the apiserver, which does not retry a review sent on one closing under it.
    #[arg(long, env = "DCO_IDLE_TIMEOUT", default_value = "120s", value_parser = parse_duration)]
    pub idle_timeout: Duration,
    /// A connection whose answer made no progress for this long (the client stopped
    /// reading) is closed.
    #[arg(long, env = "DCO_WRITE_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub write_timeout: Duration,

    /// Address of the plain-HTTP admin endpoints: /metrics, /debug/registry, /healthz, /readyz.
    #[arg(long, env = "DCO_ADMIN_LISTEN", default_value = "0.0.0.0:8080")]
    pub admin_listen: SocketAddr,
    /// Show compile errors' full text in /debug/registry; it quotes schema field names and
    /// enum values, so by default only where each error is (spoke, rule, strategy, paths).
    #[arg(long, env = "DCO_DEBUG_REGISTRY_FULL_ERRORS")]
    pub debug_registry_full_errors: bool,
    /// How long a target that is neither assigned here nor named by its spec.conversion is
    /// still served (apiservers pick up spec.conversion changes asynchronously).
    #[arg(long, env = "DCO_DRAIN_PERIOD", default_value = "30s", value_parser = parse_duration)]
    pub drain_period: Duration,
    /// Test only: switch off holding a target while an apiserver may still route to us — the
    /// hold rule's second clause (the target's spec.conversion names our Service) and the
    /// drain's extension by the reviews it answers. The move tests run once with it to show
    /// what they catch without the mechanism (tests/src/moves.rs); never set it in a cluster.
    #[arg(long, hide = true)]
    pub unsafe_test_no_hold_while_named: bool,

    /// Served-target Lease heartbeat.
    #[arg(long, env = "DCO_LEASE_RENEW_INTERVAL", default_value = "30s", value_parser = parse_duration)]
    pub lease_renew_interval: Duration,
    /// Lease duration: readers treat a Lease not renewed within it as dead.
    #[arg(long, env = "DCO_LEASE_DURATION", default_value = "90s", value_parser = parse_duration)]
    pub lease_duration: Duration,
    /// Cap on the encoded served-target annotation; above it the Lease is marked truncated.
    #[arg(long, env = "DCO_SERVED_TARGETS_MAX_BYTES", default_value_t = dco_api::served_lease::DEFAULT_MAX_ENCODED_BYTES)]
    pub served_targets_max_bytes: usize,

    /// After SIGTERM, how long /readyz reports 503 before the listener closes, so endpoints
    /// stop routing here first.
    #[arg(long, env = "DCO_SHUTDOWN_DELAY", default_value = "5s", value_parser = parse_duration)]
    pub shutdown_delay: Duration,
    /// How long in-flight requests get to finish once the listener closed.
    #[arg(long, env = "DCO_SHUTDOWN_TIMEOUT", default_value = "25s", value_parser = parse_duration)]
    pub shutdown_timeout: Duration,

    /// Log format.
    #[arg(long, env = "DCO_LOG_FORMAT", default_value = "text", value_parser = ["text", "json"])]
    pub log_format: String,
}

/// Go-style durations (`250ms`, `5s`, `1m30s`) or a bare number of seconds.
pub use dco_engine::duration::parse_flag as parse_duration;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration("7"), Ok(Duration::from_secs(7)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_duration("5 parsecs").is_err());
        assert!(parse_duration("").is_err());
    }

    #[test]
    fn instance_is_required_outside_static_mode() {
        let base = ["dco-webhook", "--tls-cert-file", "c", "--tls-key-file", "k"];
        assert!(Args::try_parse_from(base).is_err());
        assert!(Args::try_parse_from(base.iter().chain(&["--static-dir", "d"])).is_ok());
        let a = Args::try_parse_from(base.iter().chain(&["--instance", "pool-a"])).unwrap();
        assert_eq!(a.instance.as_deref(), Some("pool-a"));
        assert_eq!(a.drain_period, Duration::from_secs(30));
        let twice = Args::try_parse_from([
            "dco-webhook",
            "--tls-cert-file=c",
            "--tls-key-file=k",
            "--instance=a",
            "--drain-period=5s",
            "--drain-period=30s",
        ])
        .unwrap();
        assert_eq!(twice.drain_period, Duration::from_secs(30), "the last one wins");
    }
}

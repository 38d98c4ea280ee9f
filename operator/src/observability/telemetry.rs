//! The operator's `tracing` subscriber (logs, and handover traces over OTLP) and the W3C trace
//! context of a handover (docs/operations.md, "Traces").
//!
//! A move is one trace, named by the `traceparent` it gets when it starts, persisted in
//! `status.handover` so it survives restarts and changes of replica. Its root span, `handover`,
//! carries the traceparent's own span id and is sent when the move starts; each transition is
//! one child span, from when the state it leaves was entered to the transition. The spans are
//! `tracing` spans, exported by `tracing-opentelemetry` when `--otlp-endpoint` names a
//! collector.

use std::time::{Duration, SystemTime};

use dco_api::HandoverState;
use dco_state::handover::reason;
use opentelemetry::trace::{
    SpanContext, SpanId, Status, TraceContextExt as _, TraceFlags, TraceId, TraceState, TracerProvider as _,
};
use opentelemetry::{Context, Value};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{
    BatchSpanProcessor, IdGenerator as _, RandomIdGenerator, SdkTracerProvider, SpanData, SpanProcessor,
};
use tracing::Subscriber;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;
use tracing_subscriber::Layer;
use tracing_subscriber::filter::{EnvFilter, Targets};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt as _;

/// The `tracing` target of handover spans: the only spans sent to the collector (the
/// reconcile spans of `crate::reconcile` stay in the logs).
const TARGET: &str = "dco::handover";

/// The Event reasons of a move's first transition (every start and restart gets a fresh
/// traceparent): the moment its root span is sent.
const STARTS: [&str; 2] = [reason::STARTED, reason::RESTARTED];

/// Attributes [`AsRecorded`] turns into the span's times and ids, and strips: a `tracing`
/// span's OTel builder is private to `tracing-opentelemetry` (0.34), which stamps the start
/// when the span is created and the end when it closes, and the SDK takes span ids only from
/// its id generator, never from a builder.
const START: &str = "dco.span.start_unix_nano";
const END: &str = "dco.span.end_unix_nano";
/// The span stands for its (remote) parent: it takes the parent's span id and has no parent.
const IS_PARENT: &str = "dco.span.is_parent";

/// One step of a move, as the config reconciler saw it.
#[derive(Clone, Debug)]
pub struct TransitionSpan<'a> {
    /// The move's `traceparent`; without a valid one nothing is recorded.
    pub traceparent: Option<&'a str>,
    /// The Event reason (`HandoverStarted`, `DestinationReady`, …): the span's name.
    pub reason: &'static str,
    pub note: &'a str,
    /// A blocked step: the span's status is an error carrying `note`.
    pub warning: bool,
    pub from: HandoverState,
    pub to: HandoverState,
    /// When `from` was entered; the span starts there (at the transition when unknown).
    pub since: Option<SystemTime>,
    pub at: SystemTime,
    /// `CRDConversionConfig/<name>` or `XRDConversionConfig/<name>`.
    pub config: String,
    pub target: &'a str,
    pub source: Option<&'a str>,
    pub destination: Option<&'a str>,
    pub attempt: u32,
}

/// What [`init`] set up that must be flushed on exit.
#[must_use = "shut it down on exit, or the last spans are lost"]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Sends the buffered spans. Blocks (the exporter's HTTP client does): not on an async
    /// worker.
    pub fn shutdown(self) {
        if let Some(provider) = self.provider
            && let Err(e) = provider.shutdown()
        {
            tracing::warn!(error = %e, "flushing handover traces to the OTLP collector failed");
        }
    }
}

/// Installs the process's subscriber: logs on stdout (`RUST_LOG`, default
/// `info,kube_runtime=warn`; `log_format` `json` or text) and, with an `otlp_endpoint`, the
/// handover spans to that OTLP/HTTP collector. On a bad endpoint the logs are still installed,
/// so the caller can report the error.
pub fn init(log_format: &str, otlp_endpoint: Option<&str>) -> Result<Telemetry, String> {
    let endpoint = otlp_endpoint.filter(|e| !e.is_empty());
    let (provider, error) = match endpoint.map(exporter).transpose() {
        Ok(exporter) => (exporter.map(|e| provider(BatchSpanProcessor::builder(e).build())), None),
        Err(e) => (None, Some(e)),
    };
    tracing_subscriber::registry()
        .with(log_layer(log_format))
        .with(provider.as_ref().map(handover_layer))
        .init();
    if let Some(e) = error {
        return Err(e);
    }
    if let Some(endpoint) = endpoint {
        tracing::info!(endpoint, "exporting handover traces over OTLP/HTTP");
    }
    Ok(Telemetry { provider })
}

/// The log lines. `RUST_LOG` filters only them, so a quieter log never drops handover spans.
fn log_layer<S>(format: &str) -> impl Layer<S>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,kube_runtime=warn"));
    // Colour only on a terminal: `kubectl logs` and the termination messages built from the
    // log's tail would show escape codes.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stdout());
    let layer = tracing_subscriber::fmt::layer().with_target(false).with_ansi(ansi);
    let layer = if format == "json" { layer.json().boxed() } else { layer.boxed() };
    layer.with_filter(filter)
}

/// The handover spans (and only they) as OTel spans of `provider`, with no attributes of their
/// own: a transition is not code running on a thread, so location, thread and busy/idle time
/// would say nothing about it.
fn handover_layer<S>(provider: &SdkTracerProvider) -> impl Layer<S>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("dco-operator/handover"))
        .with_location(false)
        .with_threads(false)
        .with_target(false)
        .with_tracked_inactivity(false)
        .with_filter(Targets::new().with_target(TARGET, tracing::Level::INFO))
}

/// The OTLP/HTTP exporter to the collector at `endpoint` (its base URL, as in
/// `OTEL_EXPORTER_OTLP_ENDPOINT`: spans go to `<endpoint>/v1/traces`).
fn exporter(endpoint: &str) -> Result<opentelemetry_otlp::SpanExporter, String> {
    use opentelemetry_otlp::WithExportConfig as _;
    // The exporter's HTTP client is built without TLS: refuse at start-up rather than drop
    // every span later.
    if !endpoint.starts_with("http://") {
        return Err(format!(
            "--otlp-endpoint {endpoint:?}: only http:// collectors are supported; use the collector's plain OTLP/HTTP port (usually 4318) inside the cluster"
        ));
    }
    let url = format!("{}/v1/traces", endpoint.trim_end_matches('/'));
    opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_endpoint(url.clone())
        .build()
        .map_err(|e| format!("--otlp-endpoint {endpoint:?}: cannot build an OTLP exporter for {url}: {e}"))
}

fn resource() -> Resource {
    Resource::builder().with_service_name("dco-operator").build()
}

/// Spans through [`AsRecorded`] to `processor`.
fn provider(processor: impl SpanProcessor + 'static) -> SdkTracerProvider {
    SdkTracerProvider::builder().with_span_processor(AsRecorded(processor)).with_resource(resource()).build()
}

/// Applies [`START`], [`END`] and [`IS_PARENT`] to each ended span before `P` exports it:
/// the span processor is where the SDK lets a span's data be changed, and the one place that
/// sees every span however `tracing-opentelemetry` built it. An id generator pinned to the
/// traceparent's ids (as the hand-built spans had) would have to bracket the moment the layer
/// builds the OTel span, which it does lazily (first entry, `context()` or close), out of
/// this module's sight.
#[derive(Debug)]
struct AsRecorded<P>(P);

impl<P: SpanProcessor> SpanProcessor for AsRecorded<P> {
    fn on_start(&self, span: &mut opentelemetry_sdk::trace::Span, cx: &Context) {
        self.0.on_start(span, cx);
    }

    fn on_end(&self, mut span: SpanData) {
        let at = |nanos: i64| SystemTime::UNIX_EPOCH + Duration::from_nanos(nanos.unsigned_abs());
        let mut is_parent = false;
        span.attributes.retain(|kv| match (kv.key.as_str(), &kv.value) {
            (START, Value::I64(n)) => {
                span.start_time = at(*n);
                false
            }
            (END, Value::I64(n)) => {
                span.end_time = at(*n);
                false
            }
            (IS_PARENT, Value::Bool(b)) => {
                is_parent = *b;
                false
            }
            _ => true,
        });
        if is_parent && span.parent_span_id != SpanId::INVALID {
            let sc = &span.span_context;
            span.span_context = SpanContext::new(
                sc.trace_id(),
                span.parent_span_id,
                sc.trace_flags(),
                false,
                sc.trace_state().clone(),
            );
            span.parent_span_id = SpanId::INVALID;
            span.parent_span_is_remote = false;
        }
        self.0.on_end(span);
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.0.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.0.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.0.set_resource(resource);
    }
}

/// Records one transition as a span of its move's trace (and, for its first, the move's root
/// span), through the current subscriber: nothing when it exports no handover spans.
pub fn record(t: &TransitionSpan<'_>) {
    let Some(parent) = t.traceparent.and_then(parent_context) else {
        tracing::debug!(config = %t.config, reason = t.reason, "no valid traceparent: transition not traced");
        return;
    };
    if STARTS.contains(&t.reason) {
        let root = tracing::info_span!(target: TARGET, parent: None, "handover");
        // Not exported (no OTel layer, or it filters the span out): nothing more to do.
        if !describe(&root, &parent, t, t.at) {
            return;
        }
        root.set_attribute(IS_PARENT, true);
    }
    let span = tracing::info_span!(target: TARGET, parent: None, "transition", otel.name = t.reason);
    // A state entered "after" the transition (clock skew between replicas) starts the span at
    // the transition instead of producing a negative duration.
    if !describe(&span, &parent, t, t.since.filter(|s| *s <= t.at).unwrap_or(t.at)) {
        return;
    }
    span.set_attribute("dco.handover.from", format!("{:?}", t.from));
    span.set_attribute("dco.handover.to", format!("{:?}", t.to));
    span.set_attribute("dco.handover.note", t.note.to_string());
    if t.warning {
        span.set_status(Status::error(t.note.to_string()));
    }
}

/// Puts `span` in the move's trace, from `start` to the transition, with the move's
/// attributes; false when the span goes to no OTel layer.
fn describe(span: &tracing::Span, parent: &Context, t: &TransitionSpan<'_>, start: SystemTime) -> bool {
    if span.set_parent(parent.clone()).is_err() {
        return false;
    }
    let nanos = |at: SystemTime| {
        at.duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
    };
    span.set_attribute(START, nanos(start));
    span.set_attribute(END, nanos(t.at));
    span.set_attribute("dco.config", t.config.clone());
    span.set_attribute("dco.target", t.target.to_string());
    span.set_attribute("dco.handover.attempt", i64::from(t.attempt));
    let optional = [("dco.handover.source", t.source), ("dco.handover.destination", t.destination)];
    for (key, value) in optional {
        if let Some(v) = value {
            span.set_attribute(key, v.to_string());
        }
    }
    true
}

/// The remote parent a `traceparent` (`00-<trace id>-<span id>-<flags>`) names, always sampled:
/// a move is rare and worth keeping whole.
fn parent_context(traceparent: &str) -> Option<Context> {
    let mut parts = traceparent.split('-');
    let (version, trace, span) = (parts.next()?, parts.next()?, parts.next()?);
    if version != "00" || trace.len() != 32 || span.len() != 16 {
        return None;
    }
    let (trace_id, span_id) = (TraceId::from_hex(trace).ok()?, SpanId::from_hex(span).ok()?);
    if trace_id == TraceId::INVALID || span_id == SpanId::INVALID {
        return None;
    }
    let cx = SpanContext::new(trace_id, span_id, TraceFlags::SAMPLED, true, TraceState::default());
    Some(Context::new().with_remote_span_context(cx))
}

/// `00-<32 hex trace id>-<16 hex span id>-01` (sampled), for a move that starts.
pub fn new_traceparent() -> String {
    let ids = RandomIdGenerator::default();
    loop {
        // All-zero ids are invalid; the odds are negligible but the rule is cheap to keep.
        let (trace, span) = (ids.new_trace_id(), ids.new_span_id());
        if trace != TraceId::INVALID && span != SpanId::INVALID {
            return format!("00-{trace}-{span}-01");
        }
    }
}

/// The trace id of a traceparent, for log fields.
pub fn trace_id(traceparent: &str) -> Option<&str> {
    let mut parts = traceparent.split('-');
    let (_, id) = (parts.next()?, parts.next()?);
    (id.len() == 32).then_some(id)
}

/// Handover spans captured in memory.
#[cfg(test)]
pub(crate) mod testing {
    use std::sync::OnceLock;

    use opentelemetry::Value;
    use opentelemetry_sdk::trace::{InMemorySpanExporter, SimpleSpanProcessor, SpanData};
    use tracing::Dispatch;
    use tracing::subscriber::NoSubscriber;
    use tracing_subscriber::layer::SubscriberExt as _;

    /// Makes this thread's subscriber one that sends handover spans through the layer and
    /// processor [`super::init`] installs to the returned exporter, each as it ends. Read the
    /// spans before dropping the guard: the exporter forgets them when the provider shuts
    /// down.
    pub fn capture() -> (tracing::subscriber::DefaultGuard, InMemorySpanExporter) {
        // tracing-core caches, process-wide, whether a callsite is enabled when one thread
        // first reaches it. While at most one dispatcher is registered it asks only that
        // thread's default: another test's thread, with none, would cache "never" for the
        // handover spans and hide them from this thread's subscriber. With a second
        // dispatcher registered for good, it asks every registered one, this one included.
        static EVERY_DISPATCHER_ASKED: OnceLock<Dispatch> = OnceLock::new();
        EVERY_DISPATCHER_ASKED.get_or_init(|| Dispatch::new(NoSubscriber::default()));
        let exporter = InMemorySpanExporter::default();
        let provider = super::provider(SimpleSpanProcessor::new(exporter.clone()));
        let subscriber = tracing_subscriber::registry().with(super::handover_layer(&provider));
        (tracing::subscriber::set_default(subscriber), exporter)
    }

    pub fn spans(exporter: &InMemorySpanExporter) -> Vec<SpanData> {
        exporter.get_finished_spans().unwrap_or_default()
    }

    pub fn attr(span: &SpanData, key: &str) -> Option<Value> {
        span.attributes.iter().find(|a| a.key.as_str() == key).map(|a| a.value.clone())
    }

    /// A string attribute, or "" when absent.
    pub fn text(span: &SpanData, key: &str) -> String {
        attr(span, key).map(|v| v.as_str().into_owned()).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{attr, capture, spans};
    use super::*;

    const TRACEPARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

    fn transition(traceparent: Option<&str>, warning: bool) -> TransitionSpan<'_> {
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        TransitionSpan {
            traceparent,
            reason: "DestinationReady",
            note: "every live replica of server pool-b reports a compiled plan",
            warning,
            from: HandoverState::Compiling,
            to: HandoverState::DestinationReady,
            since: Some(at - Duration::from_millis(1500)),
            at,
            config: "CRDConversionConfig/widgets".into(),
            target: "widgets.example.org",
            source: Some("default"),
            destination: Some("pool-b"),
            attempt: 2,
        }
    }

    #[test]
    fn a_transition_is_a_span_of_the_moves_trace() {
        let (_guard, exporter) = capture();
        record(&transition(Some(TRACEPARENT), false));
        record(&transition(Some(TRACEPARENT), true));
        // Neither a malformed nor an all-zero traceparent makes a span.
        record(&transition(Some("00-xyz-b7ad6b7169203331-01"), false));
        record(&transition(Some("00-00000000000000000000000000000000-b7ad6b7169203331-01"), false));
        record(&transition(None, false));

        let spans = spans(&exporter);
        assert_eq!(spans.len(), 2, "{spans:#?}");
        let at = transition(None, false).at;
        for span in &spans {
            assert_eq!(span.span_context.trace_id().to_string(), "0af7651916cd43dd8448eb211c80319c");
            assert_eq!(span.parent_span_id.to_string(), "b7ad6b7169203331");
            assert_eq!(span.name, "DestinationReady");
            assert_eq!(span.end_time, at);
            assert_eq!(span.end_time.duration_since(span.start_time).ok(), Some(Duration::from_millis(1500)));
            assert_eq!(attr(span, "dco.config"), Some("CRDConversionConfig/widgets".into()));
            assert_eq!(attr(span, "dco.handover.from"), Some("Compiling".into()));
            assert_eq!(attr(span, "dco.handover.destination"), Some("pool-b".into()));
            assert_eq!(attr(span, "dco.handover.attempt"), Some(Value::I64(2)));
            // The times travel as attributes only as far as the processor.
            assert!(span.attributes.iter().all(|a| !a.key.as_str().starts_with("dco.span.")), "{span:#?}");
        }
        let statuses: Vec<_> = spans.iter().map(|s| s.status.clone()).collect();
        assert_eq!(
            statuses,
            [Status::Unset, Status::error("every live replica of server pool-b reports a compiled plan")],
            "the blocked step is an error span"
        );
    }

    /// The first transition also sends the move's root span, under the traceparent's own ids,
    /// so backends show the transitions under it; no other span gets those ids.
    #[test]
    fn a_started_move_sends_its_root_span() {
        const OTHER: &str = "00-11111111111111111111111111111111-2222222222222222-01";
        let (_guard, exporter) = capture();
        let started = |tp, reason| TransitionSpan {
            reason,
            from: HandoverState::Unassigned,
            to: HandoverState::Compiling,
            since: None,
            ..transition(Some(tp), false)
        };
        record(&started(TRACEPARENT, reason::STARTED));
        record(&transition(Some(TRACEPARENT), false));
        // A restarted move is a new trace too.
        record(&started(OTHER, reason::RESTARTED));

        let spans = spans(&exporter);
        let rows: Vec<_> = spans
            .iter()
            .map(|s| {
                let parent = Some(s.parent_span_id).filter(|p| *p != SpanId::INVALID).map(|p| p.to_string());
                let sc = &s.span_context;
                (s.name.to_string(), sc.trace_id().to_string(), sc.span_id().to_string(), parent)
            })
            .collect();
        let root =
            |trace: &str, span: &str| ("handover".to_string(), trace.to_string(), span.to_string(), None);
        assert!(rows.contains(&root("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331")), "{rows:#?}");
        assert!(rows.contains(&root("11111111111111111111111111111111", "2222222222222222")), "{rows:#?}");
        assert_eq!(rows.len(), 5, "{rows:#?}");
        for (name, trace, span, parent) in &rows {
            if name != "handover" {
                let parent = parent.as_deref().unwrap_or_default();
                assert!(parent == "b7ad6b7169203331" || parent == "2222222222222222", "{rows:#?}");
                assert!(span != parent && trace.len() == 32, "{rows:#?}");
            }
        }
        let root_span = spans.iter().find(|s| s.name == "handover").unwrap();
        assert_eq!(attr(root_span, "dco.handover.destination"), Some("pool-b".into()));
        assert!(!root_span.parent_span_is_remote && !root_span.span_context.is_remote());
        assert_eq!(root_span.start_time, root_span.end_time);
        assert_eq!(root_span.end_time, transition(None, false).at);
    }

    /// `RUST_LOG` quiets only the logs: a subscriber whose log layer lets nothing through still
    /// exports the handover spans.
    #[test]
    fn a_quiet_log_keeps_the_spans() {
        let exporter = opentelemetry_sdk::trace::InMemorySpanExporter::default();
        let provider = provider(opentelemetry_sdk::trace::SimpleSpanProcessor::new(exporter.clone()));
        let quiet = tracing_subscriber::fmt::layer().with_filter(EnvFilter::new("off"));
        let subscriber = tracing_subscriber::registry().with(quiet).with(handover_layer(&provider));
        tracing::subscriber::with_default(subscriber, || record(&transition(Some(TRACEPARENT), false)));
        assert_eq!(spans(&exporter).len(), 1);
        // With no subscriber, or one without the OTel layer, recording is a no-op.
        record(&transition(Some(TRACEPARENT), false));
        let logs_only = tracing_subscriber::registry().with(log_layer("json"));
        tracing::subscriber::with_default(logs_only, || record(&transition(Some(TRACEPARENT), false)));
        assert_eq!(spans(&exporter).len(), 1);
    }

    #[test]
    fn the_collector_is_named_by_service_and_bad_endpoints_are_named() {
        assert_eq!(
            resource().get(&opentelemetry::Key::new("service.name")),
            Some(Value::from("dco-operator"))
        );
        assert!(exporter("http://collector:4318/").is_ok());
        let err = exporter("http://not a url").unwrap_err();
        assert!(err.contains("--otlp-endpoint") && err.contains("not a url/v1/traces"), "{err}");
        let err = exporter("https://collector:4318").unwrap_err();
        assert!(err.contains("only http://") && err.contains("4318"), "{err}");
    }

    #[test]
    fn traceparents_parse_strictly() {
        let cx = parent_context(TRACEPARENT).unwrap();
        let sc = cx.span().span_context().clone();
        assert_eq!(format!("{}", sc.trace_id()), "0af7651916cd43dd8448eb211c80319c");
        assert!(sc.is_remote() && sc.is_sampled());
        for bad in ["", "00", "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "00-0af7-b7ad-01"] {
            assert!(parent_context(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn new_traceparents_are_well_formed_and_distinct() {
        let a = new_traceparent();
        let b = new_traceparent();
        assert_ne!(a, b);
        assert_eq!(a.len(), 55);
        assert!(a.starts_with("00-") && a.ends_with("-01"));
        assert_eq!(trace_id(&a).map(str::len), Some(32));
        assert!(a[3..].chars().all(|c| c.is_ascii_hexdigit() || c == '-'));
        assert!(parent_context(&a).is_some(), "{a}");
    }
}

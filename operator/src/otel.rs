//! OTLP export of handover traces (design §7): a move is one trace, named by the W3C
//! `traceparent` persisted in `status.handover` (so it survives restarts and changes of
//! replica). Its root span, `handover`, carries the traceparent's own span id and is sent when
//! the move starts; each transition is one child span, from when the state it leaves was
//! entered to the transition. Off unless `--otlp-endpoint` names a collector.

use std::cell::Cell;
use std::time::SystemTime;

use dco_api::HandoverState;
use dco_state::handover::reason;
use opentelemetry::trace::{
    Span as _, SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags, TraceId, TraceState,
    Tracer as _, TracerProvider as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator, SdkTracerProvider};

/// The Event reasons of a move's first transition (every start and restart gets a fresh
/// traceparent): the moment its root span is sent.
const STARTS: [&str; 2] = [reason::STARTED, reason::RESTARTED];

thread_local! {
    /// Ids the next root span started on this thread must take (the SDK takes no ids from a
    /// span builder, only from its generator).
    static PINNED: Cell<Option<(TraceId, SpanId)>> = const { Cell::new(None) };
}

/// Random ids, except for a root span started right after [`PINNED`] was set.
#[derive(Debug, Default)]
struct PinnableIds(RandomIdGenerator);

impl IdGenerator for PinnableIds {
    fn new_trace_id(&self) -> TraceId {
        PINNED.with(Cell::take).map_or_else(|| self.0.new_trace_id(), |(trace, _)| trace)
    }

    fn new_span_id(&self) -> SpanId {
        // Called before `new_trace_id` for a root span, so the pin stays for that call.
        PINNED.with(Cell::get).map_or_else(|| self.0.new_span_id(), |(_, span)| span)
    }
}

/// One step of a move, as the config reconciler saw it.
#[derive(Clone, Debug)]
pub struct Transition<'a> {
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

/// Where handover spans go: nowhere, or an OTLP collector.
#[derive(Clone, Debug, Default)]
pub struct HandoverTraces {
    provider: Option<SdkTracerProvider>,
}

impl HandoverTraces {
    /// Export to the OTLP/HTTP collector at `endpoint` (its base URL, as in
    /// `OTEL_EXPORTER_OTLP_ENDPOINT`: spans go to `<endpoint>/v1/traces`).
    pub fn otlp(endpoint: &str) -> Result<Self, String> {
        use opentelemetry_otlp::WithExportConfig as _;
        // The exporter's HTTP client is built without TLS: refuse at start-up rather than
        // drop every span later.
        if !endpoint.starts_with("http://") {
            return Err(format!(
                "--otlp-endpoint {endpoint:?}: only http:// collectors are supported; use the collector's plain OTLP/HTTP port (usually 4318) inside the cluster"
            ));
        }
        let url = format!("{}/v1/traces", endpoint.trim_end_matches('/'));
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_endpoint(url.clone())
            .build()
            .map_err(|e| {
                format!("--otlp-endpoint {endpoint:?}: cannot build an OTLP exporter for {url}: {e}")
            })?;
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(Resource::builder().with_service_name("dco-operator").build())
            .with_id_generator(PinnableIds::default())
            .build();
        Ok(HandoverTraces { provider: Some(provider) })
    }

    pub fn enabled(&self) -> bool {
        self.provider.is_some()
    }

    /// Records one transition as a span of its move's trace.
    pub fn record(&self, t: &Transition<'_>) {
        let Some(provider) = &self.provider else { return };
        let Some(parent) = t.traceparent.and_then(parent_context) else {
            tracing::debug!(config = %t.config, reason = t.reason, "no valid traceparent: transition not traced");
            return;
        };
        let tracer = provider.tracer("dco-operator/handover");
        let mut move_attributes = vec![
            KeyValue::new("dco.config", t.config.clone()),
            KeyValue::new("dco.target", t.target.to_string()),
            KeyValue::new("dco.handover.attempt", i64::from(t.attempt)),
        ];
        move_attributes.extend(t.source.map(|s| KeyValue::new("dco.handover.source", s.to_string())));
        move_attributes
            .extend(t.destination.map(|d| KeyValue::new("dco.handover.destination", d.to_string())));
        if STARTS.contains(&t.reason) {
            let ids = parent.span().span_context().clone();
            PINNED.set(Some((ids.trace_id(), ids.span_id())));
            let mut root = tracer
                .span_builder("handover")
                .with_kind(SpanKind::Internal)
                .with_start_time(t.at)
                .with_attributes(move_attributes.clone())
                .start_with_context(&tracer, &Context::new());
            PINNED.set(None);
            root.end_with_timestamp(t.at);
        }
        let mut attributes = move_attributes;
        attributes.extend([
            KeyValue::new("dco.handover.from", format!("{:?}", t.from)),
            KeyValue::new("dco.handover.to", format!("{:?}", t.to)),
            KeyValue::new("dco.handover.note", t.note.to_string()),
        ]);
        // A state entered "after" the transition (clock skew between replicas) starts the span
        // at the transition instead of producing a negative duration.
        let start = t.since.filter(|s| *s <= t.at).unwrap_or(t.at);
        let mut span = tracer
            .span_builder(t.reason)
            .with_kind(SpanKind::Internal)
            .with_start_time(start)
            .with_attributes(attributes)
            .start_with_context(&tracer, &parent);
        if t.warning {
            span.set_status(Status::error(t.note.to_string()));
        }
        span.end_with_timestamp(t.at);
    }

    /// Sends what is buffered; on exit, so the last moves are not lost.
    pub fn shutdown(&self) {
        if let Some(provider) = &self.provider
            && let Err(e) = provider.shutdown()
        {
            tracing::warn!(error = %e, "flushing handover traces to the OTLP collector failed");
        }
    }
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

/// Reading what a test collector (`dco_tests::otlp_collector`) received.
#[cfg(test)]
pub(crate) mod testing {
    use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
    use opentelemetry_proto::tonic::trace::v1::Span;

    pub use dco_tests::{hex, otlp_collector as collector, otlp_spans as spans};

    pub fn attr(span: &Span, key: &str) -> Option<Any> {
        span.attributes.iter().find(|a| a.key == key).and_then(|a| a.value.clone()?.value)
    }

    /// A string attribute, or "" when absent.
    pub fn text(span: &Span, key: &str) -> String {
        match attr(span, key) {
            Some(Any::StringValue(s)) => s,
            _ => String::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;

    use super::testing::{attr, collector, hex, spans};
    use super::*;

    const TRACEPARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

    fn transition(traceparent: Option<&str>, warning: bool) -> Transition<'_> {
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        Transition {
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

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_transition_is_a_span_of_the_moves_trace() {
        let (url, got) = collector().await.unwrap();
        let traces = HandoverTraces::otlp(&format!("{url}/")).unwrap();
        assert!(traces.enabled());
        traces.record(&transition(Some(TRACEPARENT), false));
        traces.record(&transition(Some(TRACEPARENT), true));
        // Neither a malformed nor an all-zero traceparent makes a span.
        traces.record(&transition(Some("00-xyz-b7ad6b7169203331-01"), false));
        traces.record(&transition(Some("00-00000000000000000000000000000000-b7ad6b7169203331-01"), false));
        traces.record(&transition(None, false));
        // The batch processor exports from its own thread, with a blocking client.
        let flushing = traces.clone();
        tokio::task::spawn_blocking(move || flushing.shutdown()).await.unwrap();

        let requests = got.lock().unwrap().clone();
        assert!(!requests.is_empty(), "nothing was exported");
        let resource = requests[0].resource_spans[0].resource.clone().unwrap();
        assert!(resource.attributes.iter().any(|a| a.key == "service.name"
            && a.value.clone().and_then(|v| v.value) == Some(Any::StringValue("dco-operator".into()))));
        let spans = spans(&got);
        assert_eq!(spans.len(), 2, "{spans:#?}");
        for span in &spans {
            assert_eq!(hex(&span.trace_id), "0af7651916cd43dd8448eb211c80319c");
            assert_eq!(hex(&span.parent_span_id), "b7ad6b7169203331");
            assert_eq!(span.name, "DestinationReady");
            assert_eq!(span.end_time_unix_nano - span.start_time_unix_nano, 1_500_000_000);
            assert_eq!(
                attr(span, "dco.config"),
                Some(Any::StringValue("CRDConversionConfig/widgets".into()))
            );
            assert_eq!(attr(span, "dco.handover.from"), Some(Any::StringValue("Compiling".into())));
            assert_eq!(attr(span, "dco.handover.destination"), Some(Any::StringValue("pool-b".into())));
            assert_eq!(attr(span, "dco.handover.attempt"), Some(Any::IntValue(2)));
        }
        let statuses: Vec<_> = spans.iter().map(|s| s.status.clone().map(|st| st.code)).collect();
        assert!(statuses.contains(&Some(2)), "the blocked step is an error span: {statuses:?}");
    }

    /// The first transition also sends the move's root span, under the traceparent's own ids,
    /// so backends show the transitions under it; no other span gets those ids.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_started_move_sends_its_root_span() {
        const OTHER: &str = "00-11111111111111111111111111111111-2222222222222222-01";
        let (url, got) = collector().await.unwrap();
        let traces = HandoverTraces::otlp(&url).unwrap();
        let started = |tp, reason| Transition {
            reason,
            from: HandoverState::Unassigned,
            to: HandoverState::Compiling,
            since: None,
            ..transition(Some(tp), false)
        };
        traces.record(&started(TRACEPARENT, reason::STARTED));
        traces.record(&transition(Some(TRACEPARENT), false));
        // A restarted move is a new trace too.
        traces.record(&started(OTHER, reason::RESTARTED));
        let flushing = traces.clone();
        tokio::task::spawn_blocking(move || flushing.shutdown()).await.unwrap();

        let spans = spans(&got);
        let row = |s: &opentelemetry_proto::tonic::trace::v1::Span| {
            (s.name.clone(), hex(&s.trace_id), hex(&s.span_id), hex(&s.parent_span_id))
        };
        let rows: Vec<_> = spans.iter().map(row).collect();
        let root = |trace: &str, span: &str| {
            ("handover".to_string(), trace.to_string(), span.to_string(), String::new())
        };
        assert!(rows.contains(&root("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331")), "{rows:#?}");
        assert!(rows.contains(&root("11111111111111111111111111111111", "2222222222222222")), "{rows:#?}");
        assert_eq!(rows.len(), 5, "{rows:#?}");
        for (name, trace, span, parent) in &rows {
            if name != "handover" {
                assert!(parent == "b7ad6b7169203331" || parent == "2222222222222222", "{rows:#?}");
                assert!(span != parent && trace.len() == 32, "{rows:#?}");
            }
        }
        let root_span = spans.iter().find(|s| s.name == "handover").unwrap();
        assert_eq!(attr(root_span, "dco.handover.destination"), Some(Any::StringValue("pool-b".into())));
        assert_eq!(root_span.start_time_unix_nano, root_span.end_time_unix_nano);
    }

    #[test]
    fn disabled_records_nothing_and_bad_endpoints_are_named() {
        let off = HandoverTraces::default();
        assert!(!off.enabled());
        off.record(&transition(Some(TRACEPARENT), false));
        off.shutdown();
        let err = HandoverTraces::otlp("http://not a url").unwrap_err();
        assert!(err.contains("--otlp-endpoint") && err.contains("not a url/v1/traces"), "{err}");
        let err = HandoverTraces::otlp("https://collector:4318").unwrap_err();
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
}

//! ConversionReviews of 1500 objects (~10 KB each), bytes in to bytes out, against a plain
//! sonic-rs (and serde_json) parse + serialise of the same bytes: one with 20 rules including
//! a ForEach, and the webhook load benchmark's review (one FieldRename).

use std::sync::Arc;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use std::hint::black_box;

mod fixture;

fn plan(target: serde_json::Value, config: serde_json::Value) -> Arc<dco_engine::Plan> {
    let target = dco_engine::Target::from_value(&target).expect("bench target");
    let spec = serde_json::from_value(config).expect("bench config");
    let compiled = dco_engine::compile(&spec, &target);
    compiled
        .plan
        .unwrap_or_else(|| panic!("bench config does not compile: {:?}", compiled.report.diagnostics))
}

/// The engine beside the sonic-rs round trip (the reference) and, when asked, serde_json's.
fn compare(c: &mut Criterion, group: &str, plan: &dco_engine::Plan, body: &[u8], with_serde_json: bool) {
    let out = dco_engine::convert_review(plan, body).expect("bench review converts");
    assert_eq!(out.failure, None, "bench review must succeed");
    eprintln!(
        "{group}: {} bytes, {} objects, {:.1} KB/object",
        body.len(),
        out.objects,
        body.len() as f64 / out.objects as f64 / 1024.0
    );
    let mut g = c.benchmark_group(group);
    g.sample_size(20);
    g.throughput(Throughput::Bytes(body.len() as u64));
    g.bench_function("engine_convert_review", |b| {
        b.iter(|| dco_engine::convert_review(plan, black_box(body)).map(|o| o.body.len()))
    });
    g.bench_function("sonic_rs_parse_serialize", |b| {
        b.iter(|| {
            let v: sonic_rs::Value = sonic_rs::from_slice(black_box(body)).expect("parses");
            sonic_rs::to_vec(&v).map(|x| x.len())
        })
    });
    if with_serde_json {
        g.bench_function("serde_json_value_parse_serialize", |b| {
            b.iter(|| {
                let v: serde_json::Value = serde_json::from_slice(black_box(body)).expect("parses");
                serde_json::to_vec(&v).map(|x| x.len())
            })
        });
    }
    g.finish();
}

fn review(c: &mut Criterion) {
    let plan = plan(fixture::review_target(), fixture::review_config());
    compare(c, "review_1500x10KB", &plan, &fixture::review_body(1500), true);
}

/// The webhook load benchmark's review: the engine's share of a `hack/bench/webhook.sh`
/// request.
fn widget_review(c: &mut Criterion) {
    let plan = plan(fixture::widget_target(), fixture::widget_config());
    compare(c, "webhook_review_1500x10KB", &plan, &fixture::widget_review_body(1500), false);
}

criterion_group!(benches, review, widget_review);
criterion_main!(benches);

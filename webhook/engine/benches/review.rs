//! A ConversionReview of 1500 objects (~10 KB each, 20 rules including a ForEach), bytes in
//! to bytes out, against a plain sonic-rs and serde_json parse + serialise of the same bytes.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use std::hint::black_box;

mod fixture;

fn review(c: &mut Criterion) {
    let target = dco_engine::Target::from_value(&fixture::review_target()).expect("bench target");
    let spec = serde_json::from_value(fixture::review_config()).expect("bench config");
    let compiled = dco_engine::compile(&spec, &target);
    let Some(plan) = compiled.plan else {
        panic!("bench config does not compile: {:?}", compiled.report.diagnostics);
    };
    let body = fixture::review_body(1500);
    let out = dco_engine::convert_review(&plan, &body).expect("bench review converts");
    assert_eq!(out.failure, None, "bench review must succeed");
    eprintln!(
        "review body: {} bytes, {} objects, {:.1} KB/object",
        body.len(),
        out.objects,
        body.len() as f64 / 1500.0 / 1024.0
    );

    let mut g = c.benchmark_group("review_1500x10KB");
    g.sample_size(20);
    g.throughput(Throughput::Bytes(body.len() as u64));
    g.bench_function("engine_convert_review", |b| {
        b.iter(|| dco_engine::convert_review(&plan, black_box(&body)).map(|o| o.body.len()))
    });
    g.bench_function("sonic_rs_parse_serialize", |b| {
        b.iter(|| {
            let v: sonic_rs::Value = sonic_rs::from_slice(black_box(&body)).expect("parses");
            sonic_rs::to_vec(&v).map(|x| x.len())
        })
    });
    g.bench_function("serde_json_value_parse_serialize", |b| {
        b.iter(|| {
            let v: serde_json::Value = serde_json::from_slice(black_box(&body)).expect("parses");
            serde_json::to_vec(&v).map(|x| x.len())
        })
    });
    g.finish();
}

/// The webhook load benchmark's review (one FieldRename, 1500 × 10.1 KB): the engine's share
/// of a `hack/bench/webhook.sh` request.
fn widget_review(c: &mut Criterion) {
    let target = dco_engine::Target::from_value(&fixture::widget_target()).expect("widget target");
    let spec = serde_json::from_value(fixture::widget_config()).expect("widget config");
    let Some(plan) = dco_engine::compile(&spec, &target).plan else {
        panic!("widget config does not compile")
    };
    let body = fixture::widget_review_body(1500);
    let out = dco_engine::convert_review(&plan, &body).expect("widget review converts");
    assert_eq!(out.failure, None, "widget review must succeed");
    let mut g = c.benchmark_group("webhook_review_1500x10KB");
    g.sample_size(20);
    g.throughput(Throughput::Bytes(body.len() as u64));
    g.bench_function("engine_convert_review", |b| {
        b.iter(|| dco_engine::convert_review(&plan, black_box(&body)).map(|o| o.body.len()))
    });
    g.bench_function("sonic_rs_parse_serialize", |b| {
        b.iter(|| {
            let v: sonic_rs::Value = sonic_rs::from_slice(black_box(&body)).expect("parses");
            sonic_rs::to_vec(&v).map(|x| x.len())
        })
    });
    g.finish();
}

criterion_group!(benches, review, widget_review);
criterion_main!(benches);

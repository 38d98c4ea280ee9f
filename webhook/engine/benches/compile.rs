//! Compiling a hub/spoke schema pair of 1000 leaves each (20 renamed fields).

use criterion::{Criterion, criterion_group, criterion_main};
use std::hint::black_box;

mod fixture;

fn compile(c: &mut Criterion) {
    let (target, config) = fixture::wide_target(10, 100, 20);
    let target = dco_engine::Target::from_value(&target).expect("bench target");
    let spec: dco_api::config::ConversionSpec = serde_json::from_value(config).expect("bench config");
    let compiled = dco_engine::compile(&spec, &target);
    assert!(compiled.plan.is_some(), "bench config must compile: {:?}", compiled.report.diagnostics);
    let leaves = dco_engine::schema::FlatSchema::object(&target.versions()[1].schema).leaf_count();
    assert_eq!(leaves, 1000);

    let mut g = c.benchmark_group("compile_1000_leaves");
    g.bench_function("compile", |b| {
        b.iter(|| dco_engine::compile(black_box(&spec), black_box(&target)).plan.is_some())
    });
    g.bench_function("target_from_value", |b| {
        let raw = fixture::wide_target(10, 100, 20).0;
        b.iter(|| dco_engine::Target::from_value(black_box(&raw)).map(|t| t.versions().len()))
    });
    g.finish();
}

criterion_group!(benches, compile);
criterion_main!(benches);

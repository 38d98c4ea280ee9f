//! The resolver at scale (`docs/performance.md`): 100k targets over a 16-member weighted
//! pool, and the movement a 17th member causes measured against the ideal 1/(N+1).

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use dco_api::assign::{ServerInfo, Servers};

fn pool(n: usize) -> Vec<ServerInfo> {
    (0..n)
        .map(|i| ServerInfo {
            name: format!("server-{i}"),
            default: i == 0,
            pool_weight: Some(1 + (i as u32 % 4)),
        })
        .collect()
}

fn targets() -> Vec<String> {
    (0..100_000).map(|i| format!("xr{i}s.platform{}.example.org", i % 211)).collect()
}

fn resolve_100k(c: &mut Criterion) {
    let servers = Servers::new(pool(16));
    let targets = targets();
    c.bench_function("resolve 100k targets x 16 members", |b| {
        b.iter(|| {
            for t in &targets {
                black_box(servers.resolve(black_box(t), None).ok());
            }
        })
    });

    // Movement on adding a member, reported once beside the timing (not a timed assertion).
    let mut grown = pool(16);
    grown.push(ServerInfo { name: "server-new".into(), default: false, pool_weight: Some(1) });
    let (before, after) = (Servers::new(pool(16)), Servers::new(grown));
    let moved = targets.iter().filter(|t| before.pool_winner(t) != after.pool_winner(t)).count();
    let total_weight: u32 = pool(16).iter().filter_map(|s| s.pool_weight).sum::<u32>() + 1;
    let ideal = targets.len() as f64 / f64::from(total_weight);
    println!(
        "movement on adding a weight-1 member: {moved} moved, ideal {ideal:.0}, ratio {:.3}",
        moved as f64 / ideal
    );
}

criterion_group!(benches, resolve_100k);
criterion_main!(benches);

//! Converts one benchmark review a fixed number of times, for counting instructions and
//! cycles with `perf stat` (steadier than wall time on a shared machine):
//!
//!     cargo build --release -p dco-engine --example review_loop
//!     perf stat -e instructions:u,cycles:u target/release/examples/review_loop widget 50
//!
//! Where the machine has no hardware counters, callgrind counts instructions (the AVX2 path:
//! valgrind has no AVX-512), with the body cached in a file after the first run:
//!
//!     valgrind --tool=callgrind --collect-atstart=no '--toggle-collect=*convert_review*' \
//!         target/release/examples/review_loop widget 2 /tmp/widget-review.json

#[path = "../benches/fixture.rs"]
mod fixture;

fn main() {
    let mut args = std::env::args().skip(1);
    let which = args.next().unwrap_or_else(|| "widget".into());
    let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(20);
    // An optional third argument caches the generated body in a file: under valgrind,
    // generating it takes minutes and converting it seconds.
    let cache = args.next();
    let cached = cache.as_ref().and_then(|path| std::fs::read(path).ok());
    let (target, config, generate): (_, _, fn(usize) -> Vec<u8>) = match which.as_str() {
        "widget" => (fixture::widget_target(), fixture::widget_config(), fixture::widget_review_body),
        "rules" => (fixture::review_target(), fixture::review_config(), fixture::review_body),
        other => panic!("unknown fixture {other:?}: widget or rules"),
    };
    let body = cached.unwrap_or_else(|| {
        let body = generate(1500);
        if let Some(path) = &cache {
            std::fs::write(path, &body).expect("writing the body cache");
        }
        body
    });
    let target = dco_engine::Target::from_value(&target).expect("target");
    let spec = serde_json::from_value(config).expect("config");
    let plan = dco_engine::compile(&spec, &target).plan.expect("plan");
    let t = std::time::Instant::now();
    let mut bytes = 0;
    for _ in 0..n {
        bytes += dco_engine::convert_review(&plan, &body).expect("converts").body.len();
    }
    println!(
        "{which}: {n} reviews, {:.2} ms each, {bytes} bytes out",
        t.elapsed().as_secs_f64() * 1e3 / n as f64
    );
}

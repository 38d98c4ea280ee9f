//! What a held target costs: the heap a compiled target keeps (its plan and registry entry),
//! counted by the webhook's allocator, against the bytes of its CRD and config.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dco_webhook::alloc::{Counting, thread_net_bytes};
use dco_webhook::engine::EngineCompiler;
use dco_webhook::metrics::Metrics;
use dco_webhook::registry::Registry;
use dco_webhook::static_dir;
use dco_webhook::sync::{Identity, Syncer};

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Targets `from..to` of the benchmark fixture, named as `dco-webhook-load targets` names
/// them; returns their input bytes.
fn write_targets(dir: &Path, from: usize, to: usize) -> usize {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../hack/bench/webhook-fixtures");
    let crd = std::fs::read_to_string(fixtures.join("widgets-crd.yaml")).unwrap();
    let config = std::fs::read_to_string(fixtures.join("widgets-config.yaml")).unwrap();
    let mut bytes = 0;
    for i in from..to {
        let group = format!("t{i}.bench.dco.rs");
        let crd = crd.replace("bench.dco.rs", &group);
        let config = config
            .replace("\n  name: widgets\n", &format!("\n  name: widgets-t{i}\n"))
            .replace("bench.dco.rs", &group);
        bytes += crd.len() + config.len();
        std::fs::write(dir.join(format!("t{i}-crd.yaml")), crd).unwrap();
        std::fs::write(dir.join(format!("t{i}-config.yaml")), config).unwrap();
    }
    bytes
}

#[test]
fn a_held_target_keeps_at_most_twice_its_input_on_the_heap() {
    const TARGETS: usize = 20;
    let dir = std::env::temp_dir().join(format!("dco-held-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let registry = Arc::new(Registry::new());
    let identity = Identity { instance: "static".into(), service_name: "static".into(), static_mode: true };
    let mut syncer = Syncer::new(
        Arc::new(EngineCompiler),
        registry.clone(),
        Arc::new(Metrics::new()),
        identity,
        Duration::ZERO,
    );
    // One target first, so what the first compile sets up once is not counted per target.
    write_targets(&dir, 0, 1);
    let world = static_dir::load(&dir).unwrap();
    assert_eq!(syncer.pass(&world, Instant::now()).compiled, 1);
    drop(world);

    let before = thread_net_bytes();
    let input = write_targets(&dir, 1, 1 + TARGETS);
    let world = static_dir::load(&dir).unwrap();
    assert_eq!(syncer.pass(&world, Instant::now()).compiled, TARGETS);
    drop(world);
    let kept = usize::try_from(thread_net_bytes() - before).unwrap() / TARGETS;
    std::fs::remove_dir_all(&dir).unwrap();

    assert_eq!(registry.served_targets().len(), 1 + TARGETS);
    let input = input / TARGETS;
    eprintln!("a held target keeps {kept} bytes of heap for {input} bytes of input");
    assert!(
        kept <= 2 * input,
        "a held target keeps {kept} bytes of heap, more than twice its {input} bytes of input"
    );
}

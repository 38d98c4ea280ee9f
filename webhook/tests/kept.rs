//! What a watched config costs a replica on the heap, whole and as kept (`kept.rs`): every
//! replica stores every config in scope, its server's share or not, so this is paid per config
//! in the cluster. Counted by the webhook's allocator over configs settled as the operator
//! leaves them (`hack/bench/scale-share.sh`'s: one FieldRename, five conditions, a settled
//! handover, a spoke status with its rule result).

use dco_api::CRDConversionConfig;
use dco_webhook::alloc::{Counting, thread_net_bytes};

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Config `i` as the apiserver returns it once settled.
fn settled(i: usize) -> String {
    let (name, crd, server) = (
        format!("t{i}-share.bench.dco.rs"),
        format!("widgets.t{i}.share.bench.dco.rs"),
        format!("share-p{}", i % 5),
    );
    let condition = |kind: &str, reason: &str, message: String| {
        serde_json::json!({"lastTransitionTime": "2026-12-03T08:14:41Z", "message": message,
            "observedGeneration": 1, "reason": reason, "status": "True", "type": kind})
    };
    serde_json::json!({
        "apiVersion": "conversion.dco.rs/v1alpha1", "kind": "CRDConversionConfig",
        "metadata": {"creationTimestamp": "2026-12-03T08:14:39Z", "finalizers": ["conversion.dco.rs/safe-revert"],
            "generation": 1, "labels": {"dco-scale": "share"}, "name": name, "resourceVersion": "1732",
            "uid": format!("9c80f031-7da8-4fb3-ad01-{i:012}")},
        "spec": {"conversionReviewVersions": ["v1"], "driftPolicy": "KeepServingStale", "hubVersion": "v2",
            "spokes": [{"rules": [{"fieldRename": {"hubPath": "spec.forProvider.sizeGB", "spokePath": "spec.forProvider.size"},
                "strategy": "FieldRename"}], "version": "v1"}],
            "targetCRD": {"name": crd}, "unmappedFieldPolicy": "Error"},
        "status": {"assignedWebhookServer": server, "conditions": [
                condition("HandoverReady", "HandoverReady", format!("served by server {server}")),
                condition("Validated", "Compiled", format!("compiles against the live schemas of CustomResourceDefinition {crd} (lossless: true)")),
                condition("TargetHealthy", "Established", format!("CustomResourceDefinition {crd} is established")),
                condition("WebhookServerReady", "Available", format!("ConversionWebhookServer {server} is available (assigned by Pool)")),
                condition("Applied", "Wired", format!("CustomResourceDefinition {crd} converts through ConversionWebhookServer {server}")),
            ],
            "handover": {"attempt": 1, "destination": server, "message": format!("server {server} serves the target; nothing to drop"),
                "since": "2026-12-03T08:14:41.200159954Z", "state": "SourceDropped",
                "traceparent": "00-11142892567ab5048c4cc73f327ccd5d-9b2cf6611d450094-01"},
            "lastAppliedPlanHash": "2f3b8f717c8086c2da866546cf5f994271be7fe3d3e97b1d528e15ebd791d82b",
            "message": format!("server {server} serves the target; nothing to drop"),
            "observedGeneration": 1, "observedTargetGeneration": 2, "overallLossless": true, "phase": "Applied",
            "schemaHash": "ac3840ae042375223b265162a8dafad31129d8b4956df9d57495c30856210ebb",
            "spokeStatuses": [{"lossless": {"hubToSpoke": true, "spokeToHub": true}, "ruleResults": [{
                "hubPaths": ["spec.forProvider.sizeGB"], "index": 0, "lossless": {"hubToSpoke": true, "spokeToHub": true},
                "spokePaths": ["spec.forProvider.size"], "strategy": "FieldRename"}], "version": "v1"}],
            "webhookPath": format!("/convert/{crd}")},
    })
    .to_string()
}

#[test]
fn a_kept_config_costs_under_half_the_whole_one() {
    const CONFIGS: usize = 200;
    let texts: Vec<String> = (0..CONFIGS).map(settled).collect();
    let json_bytes: usize = texts.iter().map(String::len).sum();

    let before = thread_net_bytes();
    let mut configs: Vec<CRDConversionConfig> =
        texts.iter().map(|t| serde_json::from_str(t).expect("a settled config parses")).collect();
    let whole = thread_net_bytes() - before;
    for c in &mut configs {
        // In place, as the reflector's `modify` does: what it drops is freed, the rest moved.
        dco_webhook::kept::config(c);
    }
    let kept = thread_net_bytes() - before;
    assert!(configs.iter().all(|c| c.status.as_ref().is_some_and(|s| s.spoke_statuses.is_empty())));
    drop(configs);

    let per = |b: isize| b as f64 / CONFIGS as f64;
    eprintln!(
        "{CONFIGS} settled configs: {:.0} B of JSON each; on the heap {:.0} B whole, {:.0} B kept",
        json_bytes as f64 / CONFIGS as f64,
        per(whole),
        per(kept)
    );
    assert!(whole > 0 && kept > 0, "the allocator counts (whole {whole}, kept {kept})");
    assert!(
        kept * 2 < whole,
        "a kept config costs {} B, the whole one {} B: expected under half",
        per(kept),
        per(whole)
    );
}

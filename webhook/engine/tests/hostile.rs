//! Hostile and pathological input: objects nested up to the limit convert on every path on a
//! thread with exactly `limits::STACK_BYTES` of stack (what `dco-webhook` gives its
//! conversion threads); deeper ones fail with a message naming the limit; a `Budget` stops a
//! conversion between objects, inside ForEach and around CEL.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use dco_engine::limits::{self, Budget, MAX_DEPTH, STACK_BYTES};
use dco_engine::{Plan, Target, compile, convert_review};
use serde_json::{Value, json};

/// `levels` levels of arrays or objects around `1`, built without recursion.
fn deep(levels: usize, objects: bool) -> String {
    if objects {
        "{\"a\":".repeat(levels) + "1" + &"}".repeat(levels)
    } else {
        "[".repeat(levels) + "1" + &"]".repeat(levels)
    }
}

fn crd(hub: Value, spoke: Value) -> Value {
    let schema = |spec: Value| {
        // spec is required: a JSONPatch may rely on a field only when its parents are there.
        json!({"type": "object", "required": ["spec"], "properties": {"apiVersion": {"type": "string"}, "kind": {"type": "string"},
            "metadata": {"type": "object"}, "spec": {"type": "object", "properties": spec}}})
    };
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "ws.x.org"},
        "spec": {"group": "x.org", "names": {"kind": "W", "plural": "ws"}, "scope": "Namespaced", "versions": [
            {"name": "v1", "served": true, "storage": false, "schema": {"openAPIV3Schema": schema(spoke)}},
            {"name": "v2", "served": true, "storage": true, "schema": {"openAPIV3Schema": schema(hub)}}]}})
}

fn plan(target: Value, rules: Value) -> Arc<Plan> {
    let target = Target::from_value(&target).expect("target");
    let spec =
        serde_json::from_value(json!({"hubVersion": "v2", "spokes": [{"version": "v1", "rules": rules}]}))
            .expect("spec");
    let compiled = compile(&spec, &target);
    compiled.plan.unwrap_or_else(|| panic!("does not compile: {:?}", compiled.report))
}

fn free() -> Value {
    json!({"x-kubernetes-preserve-unknown-fields": true})
}

/// One way through the engine, and an object (as text) that takes it.
struct Case {
    name: &'static str,
    plan: Arc<Plan>,
    desired: &'static str,
    /// The object with `DEEP` where the deep value goes (at `spec.free`, two levels down).
    object: &'static str,
}

fn cases() -> Vec<Case> {
    let rename = || {
        plan(
            crd(
                json!({"a": {"type": "integer"}, "free": free()}),
                json!({"b": {"type": "integer"}, "free": free()}),
            ),
            json!([{"strategy": "FieldRename", "fieldRename": {"hubPath": "spec.a", "spokePath": "spec.b"}}]),
        )
    };
    let apiserver = r#"{"apiVersion":"x.org/v2","kind":"W","metadata":{"name":"n","namespace":"ns"},"spec":{"a":1,"free":DEEP}}"#;
    vec![
        // Keys in the apiserver's order and only renames: rewritten as it is scanned.
        Case { name: "stream", plan: rename(), desired: "x.org/v1", object: apiserver },
        // `kind` before `apiVersion`: parsed whole, converted, serialised.
        Case {
            name: "full",
            plan: rename(),
            desired: "x.org/v1",
            object: r#"{"kind":"W","apiVersion":"x.org/v2","metadata":{"name":"n","namespace":"ns"},"spec":{"a":1,"free":DEEP}}"#,
        },
        // A `when` rule over the deep field: the touched subtree is parsed (projection).
        Case {
            name: "projection",
            plan: plan(
                crd(
                    json!({"a": {"type": "integer"}, "free": free()}),
                    json!({"a": {"type": "integer"}, "free": free()}),
                ),
                json!([{"strategy": "FieldRename", "when": {"path": "spec.a", "equals": 1},
                    "fieldRename": {"hubPath": "spec.free", "spokePath": "spec.free"}}]),
            ),
            desired: "x.org/v1",
            object: apiserver,
        },
        // CEL: the object is copied into CEL values and the expression reads and compares the
        // deep value (the interpreter recurses over it).
        Case {
            name: "cel",
            plan: plan(
                crd(
                    json!({"a": {"type": "integer"}, "free": free()}),
                    json!({"b": {"type": "integer"}, "same": {"type": "boolean"}, "free": free()}),
                ),
                json!([{"strategy": "CEL", "acknowledgeLossy": true, "reason": "test",
                    "cel": {"hubPaths": ["spec.a"], "spokePaths": ["spec.b", "spec.same"],
                        "hubToSpoke": "{\"spec.b\": object.spec.a, \"spec.same\": object.spec.free == object.spec.free}",
                        "spokeToHub": "{\"spec.a\": object.spec.b}"}}]),
            ),
            desired: "x.org/v1",
            object: apiserver,
        },
        // JSONPatch: the object is copied into serde_json values and patched.
        Case {
            name: "jsonpatch",
            plan: plan(
                // Defaulted: a move from a field an object may lack is refused at compile.
                crd(
                    json!({"a": {"type": "integer", "default": 0}, "free": free()}),
                    json!({"b": {"type": "integer", "default": 0}, "free": free()}),
                ),
                json!([{"strategy": "JSONPatch", "acknowledgeLossy": true, "reason": "test", "jsonPatch": {
                    "hubPaths": ["spec.a"], "spokePaths": ["spec.b"],
                    "hubToSpoke": [{"op": "move", "from": "/spec/a", "path": "/spec/b"}],
                    "spokeToHub": [{"op": "move", "from": "/spec/b", "path": "/spec/a"}]}}]),
            ),
            desired: "x.org/v1",
            object: apiserver,
        },
    ]
}

fn review(desired: &str, objects: &[String]) -> Vec<u8> {
    format!(
        r#"{{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":{{"uid":"u-1","desiredAPIVersion":"{desired}","objects":[{}]}}}}"#,
        objects.join(",")
    )
    .into_bytes()
}

/// Runs `f` on a thread with the stack `dco-webhook` gives its conversion threads.
fn on_conversion_stack<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .stack_size(STACK_BYTES)
            .spawn_scoped(scope, f)
            .expect("thread")
            .join()
            .unwrap()
    })
}

#[test]
fn objects_nested_up_to_the_limit_convert_on_every_path() {
    for case in cases() {
        // 1,900 and 8,700 levels crashed a replica before the limit was enforced; 10,000 is
        // the limit itself (the deep value sits two levels below the object's root).
        for levels in [1_900, 8_700, MAX_DEPTH - 2] {
            for objects in [false, true] {
                let deep_text = deep(levels, objects);
                let object = case.object.replace("DEEP", &deep_text);
                let body = review(case.desired, &[object.clone(), object]);
                let out = on_conversion_stack(|| convert_review(&case.plan, &body));
                let out = out.unwrap_or_else(|e| panic!("{} at {levels} levels: {e}", case.name));
                assert_eq!(out.failure, None, "{} at {levels} levels", case.name);
                assert_eq!(out.objects, 2);
                let text = std::str::from_utf8(&out.body).unwrap();
                // The deep value comes back whole, once per object.
                assert_eq!(text.matches(deep_text.as_str()).count(), 2, "{} at {levels} levels", case.name);
                assert!(text.contains(r#""apiVersion":"x.org/v1""#), "{}", case.name);
            }
        }
    }
}

#[test]
fn a_review_nested_past_the_limit_is_refused_naming_it() {
    for case in cases() {
        let object = case.object.replace("DEEP", &deep(MAX_DEPTH - 1, false));
        let err = on_conversion_stack(|| convert_review(&case.plan, &review(case.desired, &[object])))
            .expect_err("past the limit");
        let err = err.to_string();
        assert!(
            err.contains("request.objects[0]: an object nests deeper than 10000 levels"),
            "{}: {err}",
            case.name
        );
    }
}

/// ToAnnotation with restoreOnReverse: JSON text inside an annotation is parsed on the way
/// back, so its depth is checked before the parse.
#[test]
fn json_restored_from_an_annotation_is_bounded_too() {
    let plan = plan(
        crd(json!({"d": free()}), json!({})),
        json!([{"strategy": "ToAnnotation", "toAnnotation": {"hubPath": "spec.d", "key": "x.org/d",
            "serialization": "JSON", "restoreOnReverse": true}}]),
    );
    let object = |levels: usize| {
        let text = serde_json::to_string(&deep(levels, true)).unwrap();
        format!(
            r#"{{"apiVersion":"x.org/v1","kind":"W","metadata":{{"annotations":{{"x.org/d":{text}}},"name":"n","namespace":"ns"}}}}"#
        )
    };
    // Restored at spec.d, two levels below the root.
    for levels in [1_900, 8_800, MAX_DEPTH - 2] {
        let out =
            on_conversion_stack(|| convert_review(&plan, &review("x.org/v2", &[object(levels)]))).unwrap();
        assert_eq!(out.failure, None, "{levels} levels");
        assert!(std::str::from_utf8(&out.body).unwrap().contains(&deep(levels, true)));
    }
    // Deeper: this object fails, naming itself, the annotation and the limit; the next one
    // in the same review is still validated.
    let out =
        on_conversion_stack(|| convert_review(&plan, &review("x.org/v2", &[object(MAX_DEPTH), object(3)])))
            .unwrap();
    let msg = out.failure.expect("too deep");
    assert!(msg.starts_with("object 0 of 2: W ns/n: "), "{msg}");
    assert!(msg.contains("nests 10000 levels") && msg.contains("deeper than 10000 levels"), "{msg}");
    assert!(msg.contains("x.org/d"), "{msg}");
}

/// Stops after `allow` checks, or refuses copies larger than `max_copy` bytes.
struct Countdown {
    allow: usize,
    max_copy: usize,
    checks: AtomicUsize,
}

impl Budget for Countdown {
    fn check(&self) -> Result<(), String> {
        if self.checks.fetch_add(1, Ordering::Relaxed) >= self.allow {
            Err("the 3s deadline passed".into())
        } else {
            Ok(())
        }
    }
    fn admit(&self, bytes: usize) -> Result<(), String> {
        self.check()?;
        if bytes > self.max_copy {
            Err(format!("{bytes} bytes is over the {} left", self.max_copy))
        } else {
            Ok(())
        }
    }
}

fn countdown(allow: usize, max_copy: usize) -> Arc<Countdown> {
    Arc::new(Countdown { allow, max_copy, checks: AtomicUsize::new(0) })
}

#[test]
fn a_budget_stops_a_conversion_between_objects() {
    let case = cases().remove(0);
    let objects: Vec<String> = (0..5).map(|_| case.object.replace("DEEP", "[1]")).collect();
    let body = review(case.desired, &objects);
    let budget = countdown(2, usize::MAX);
    let out = limits::with_budget(budget.clone(), || convert_review(&case.plan, &body)).unwrap();
    let msg = out.failure.expect("stopped");
    assert_eq!(msg, "object 2 of 5: conversion stopped: the 3s deadline passed");
    // Once stopped, the rest is only validated: no further checks.
    assert_eq!(budget.checks.load(Ordering::Relaxed), 3);
    // Without a budget the same review converts.
    assert_eq!(convert_review(&case.plan, &body).unwrap().failure, None);
}

#[test]
fn a_budget_stops_a_long_for_each_and_a_large_cel_copy() {
    let item = json!({"type": "object", "properties": {"n": {"type": "string"}}});
    let item2 = json!({"type": "object", "properties": {"m": {"type": "string"}}});
    let each = plan(
        crd(
            json!({"xs": {"type": "array", "items": item}}),
            json!({"xs": {"type": "array", "items": item2}}),
        ),
        json!([{"strategy": "ForEach", "forEach": {"hubItemsPath": "spec.xs", "spokeItemsPath": "spec.xs", "rules": [
            {"strategy": "FieldRename", "fieldRename": {"hubPath": "n", "spokePath": "m"}}]}}]),
    );
    let items: Vec<Value> = (0..10_000).map(|i| json!({"n": i.to_string()})).collect();
    let object =
        json!({"kind": "W", "apiVersion": "x.org/v2", "metadata": {"name": "big"}, "spec": {"xs": items}});
    let body = review("x.org/v1", &[object.to_string()]);
    // One check before the object, then one every 256 items: the stream path stops inside
    // the list (at item 511) and leaves the message to the full path, which stops at its first
    // check.
    let out = limits::with_budget(countdown(3, usize::MAX), || convert_review(&each, &body)).unwrap();
    let msg = out.failure.expect("stopped");
    assert!(
        msg.contains(
            "W big: spoke v1, rule 0 (ForEach) spec.xs[255]: conversion stopped: the 3s deadline passed"
        ),
        "{msg}"
    );

    let cel = cases().remove(3);
    let object = cel.object.replace("DEEP", &serde_json::to_string(&vec![json!({"k": "v"}); 1000]).unwrap());
    let body = review(cel.desired, &[object]);
    let out =
        limits::with_budget(countdown(usize::MAX, 64 << 10), || convert_review(&cel.plan, &body)).unwrap();
    let msg = out.failure.expect("refused");
    assert!(
        msg.contains("W ns/n: spoke v1, rule 0 (CEL)")
            && msg.contains("handing 2009 values to CEL takes about"),
        "{msg}"
    );
    assert!(msg.contains("bytes is over the 65536 left"), "{msg}");
}

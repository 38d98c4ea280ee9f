//! One answer per input (docs/engine.md, "One answer per input"). Two kinds of input:
//! - the fuzz bytes as one object (any bytes, UTF-8 or not), placed in a ConversionReview as
//!   they are and, when they start an object, again with an `apiVersion` of the hub as its first
//!   member (so the stream path reads it);
//! - an object *generated* from the bytes: nesting up to the scanner's 10 000 levels, repeated
//!   keys (also spelled with escapes), paired and lone surrogates, and numbers of every size and
//!   spelling (huge integers, long mantissas, exponents, `-0`, `1E+2`).
//!
//! Each object is converted by the stream, projection and full paths (`Via`), which must give
//! the same text (compared canonically: sorted keys, no whitespace, numbers as written) or the
//! same error, and the review must give that answer too. The review must be refused as
//! malformed exactly when serde_json refuses the body (but for what only serde_json refuses:
//! nesting beyond its 128 levels and numbers beyond f64, which are valid JSON), and an
//! accepted, converted object must equal what `Plan::convert` makes of serde_json's reading.
#![no_main]

use std::sync::{Arc, OnceLock};

use dco_api::config::ConversionSpec;
use dco_engine::review::{ReviewError, convert_review};
use dco_engine::value::canonical;
use dco_engine::{Plan, Target, Via, compile};
use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};

fn item(a: &str, b: &str) -> Value {
    json!({"type": "array", "items": {"type": "object", "properties": {
        a: {"type": "string"}, b: {"type": "integer"}, "kind": {"type": "string"}}}})
}

/// Renames at two depths, a swap, an enum remap and a ForEach: a plan the stream path serves.
fn plan() -> &'static Arc<Plan> {
    static PLAN: OnceLock<Arc<Plan>> = OnceLock::new();
    PLAN.get_or_init(|| {
        let schema = |spec: Value| json!({"type": "object", "properties": {"spec": {"type": "object", "properties": spec}}});
        let hub = schema(json!({"a": {"type": "integer"}, "x": {"type": "string"}, "y": {"type": "string"},
            "tier": {"type": "string", "enum": ["Small", "Large"]},
            "db": {"type": "object", "properties": {"name": {"type": "string"}}}, "volumes": item("name", "sizeGB")}));
        let spoke = schema(json!({"b": {"type": "integer"}, "x": {"type": "string"}, "y": {"type": "string"},
            "tier": {"type": "string", "enum": ["S", "L"]},
            "db": {"type": "object", "properties": {"dbName": {"type": "string"}}}, "vols": item("label", "size")}));
        let target = Target::from_value(&json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "things.example.org"},
            "spec": {"group": "example.org", "names": {"kind": "Thing", "plural": "things"},
                "versions": [
                    {"name": "v1", "served": true, "storage": false, "schema": {"openAPIV3Schema": spoke}},
                    {"name": "v2", "served": true, "storage": true, "schema": {"openAPIV3Schema": hub}}]}}))
        .expect("fixed CRD");
        let rename = |h: &str, s: &str| json!({"strategy": "FieldRename", "fieldRename": {"hubPath": h, "spokePath": s}});
        let spec: ConversionSpec = serde_json::from_value(json!({"hubVersion": "v2", "spokes": [{"version": "v1", "rules": [
            rename("spec.a", "spec.b"), rename("spec.x", "spec.y"), rename("spec.y", "spec.x"),
            rename("spec.db.name", "spec.db.dbName"),
            {"strategy": "EnumRemap", "enumRemap": {"path": "spec.tier", "mapping": [{"hub": "Small", "spoke": "S"}, {"hub": "Large", "spoke": "L"}]}},
            {"strategy": "ForEach", "forEach": {"hubItemsPath": "spec.volumes", "spokeItemsPath": "spec.vols",
                "rules": [rename("name", "label"), rename("sizeGB", "size")]}}]}]}))
        .expect("fixed spec");
        compile(&spec, &target).plan.expect("fixed plan compiles")
    })
}

fn check(object: &[u8]) {
    let body = [
        &br#"{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":{"uid":"u","desiredAPIVersion":"example.org/v1","objects":["#[..],
        object,
        b"]}}",
    ]
    .concat();
    let ours = convert_review(plan(), &body);
    let theirs = serde_json::from_slice::<Value>(&body);
    let body = String::from_utf8_lossy(&body);
    match (&ours, &theirs) {
        (Err(ReviewError::Malformed(_)), Err(_)) => {}
        // Limits only serde_json sets: nesting, numbers beyond f64 (valid JSON, kept as
        // written).
        (Ok(_), Err(e)) if ["recursion limit", "number out of range"].iter().any(|m| e.to_string().contains(m)) => {}
        (Ok(out), Ok(review)) => {
            // A repeated key fails its object (serde_json keeps the last value); `paths_agree`
            // checks those answers.
            if out.failure.is_some() {
                return;
            }
            let resp: Value = serde_json::from_slice(&out.body).expect("the response is JSON");
            let converted = &resp["response"]["convertedObjects"];
            let objects = review["request"]["objects"].as_array().expect("objects");
            assert_eq!(converted.as_array().map(Vec::len), Some(objects.len()), "{body}");
            for (got, obj) in converted.as_array().into_iter().flatten().zip(objects) {
                let want = plan().convert(obj, "example.org/v1").expect("the review converted it");
                assert_eq!(got, &want, "{body}");
            }
        }
        _ => panic!("review path {:?} but serde_json {:?} on {body}", ours.as_ref().map(|_| ()), theirs.as_ref().map(|_| ())),
    }
}

/// The stream, projection and full paths give the same text or the same error for `object`.
fn paths_agree(object: &[u8]) {
    let answers: Vec<Result<String, String>> = [Via::Fastest, Via::Projection, Via::Full]
        .into_iter()
        .map(|via| {
            let mut out = Vec::new();
            plan()
                .convert_raw_via(object, "example.org/v1", via, &mut out)
                .map(|()| {
                    let text = std::str::from_utf8(&out).expect("the paths write UTF-8");
                    canonical(text).expect("the paths write JSON")
                })
                .map_err(|e| e.to_string())
        })
        .collect();
    let text = String::from_utf8_lossy(object);
    assert_eq!(answers[0], answers[1], "stream vs projection on {text}");
    assert_eq!(answers[0], answers[2], "stream vs full on {text}");
    // The review gives the same answer: the object, or a failure with the same message, or a
    // malformed body when the object is not JSON.
    let body = [
        &br#"{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":{"uid":"u","desiredAPIVersion":"example.org/v1","objects":["#[..],
        object,
        b"]}}",
    ]
    .concat();
    match (convert_review(plan(), &body), &answers[0]) {
        (Ok(out), Ok(want)) => {
            assert_eq!(out.failure, None, "{text}");
            let resp = canonical(std::str::from_utf8(&out.body).expect("UTF-8")).expect("JSON");
            assert!(resp.contains(&format!("\"convertedObjects\":[{want}]")), "{text}: {resp}");
        }
        (Ok(out), Err(e)) if e.contains("is not JSON") => panic!("review accepted {text}: {:?}", out.failure),
        (Ok(out), Err(e)) => assert_eq!(out.failure, Some(format!("object 0 of 1: {e}")), "{text}"),
        (Err(ReviewError::Malformed(_)), Err(e)) if e.contains("is not JSON") => {}
        (r, a) => panic!("review {:?} but the paths {a:?} on {text}", r.map(|o| o.failure)),
    }
}

/// Bytes in, choices out; zeros once the bytes run out.
struct Choices<'a>(&'a [u8]);

impl Choices<'_> {
    fn next(&mut self) -> u8 {
        let Some((&b, rest)) = self.0.split_first() else { return 0 };
        self.0 = rest;
        b
    }
    fn pick<'s>(&mut self, from: &[&'s str]) -> &'s str {
        from[self.next() as usize % from.len()]
    }
}

const KEYS: &[&str] = &[
    "a", "b", "x", "y", "tier", "db", "name", "dbName", "volumes", "vols", "sizeGB", "label", "size", "kind",
    r"\u0061", r"\u0062", r"\u0078", r"n\u0061me", "", "é", r"\u00e9", r"\ud83d\ude00", "😀", "abcdefghij1",
    "abcdefghij2", "abcdefgh", "apiVersion", "a b", "a!",
];

const NUMBERS: &[&str] = &[
    "0", "-0", "1", "1.0", "-0.0", "1E+2", "1e2", "1E-2", "0.1e-0", "2.50", "100", "-1", "9223372036854775807",
    "9223372036854775808", "-9223372036854775808", "-9223372036854775809", "18446744073709551615",
    "18446744073709551616", "18446744073709551617", "1e308", "1e309", "1e400", "-1e400", "4.9e-324", "1e-400",
    "123456789012345678901234567890", "0.30000000000000000000000000000001", "1.7976931348623157e308",
];

const STRINGS: &[&str] = &[
    r#""Small""#, r#""Large""#, r#""S""#, r#""v""#, r#""\ud83d\ude00""#, r#""\ud800""#, r#""\udc00""#,
    r#""x\ud800y""#, r#""\ud800\u0041""#, r#""\\ud800""#, r#""\u00e9é""#, r#""\"\\\/\b\f\n\r\t""#, r#""""#,
];

/// A JSON value from the choices: containers up to `depth` levels (and, now and then, a chain
/// of thousands of levels), members with repeated and escaped keys.
fn value(c: &mut Choices<'_>, depth: u32, out: &mut String) {
    match c.next() % 16 {
        0..=3 if depth > 0 => {
            out.push('{');
            for i in 0..c.next() % 5 {
                if i > 0 {
                    out.push(',');
                }
                out.push('"');
                out.push_str(c.pick(KEYS));
                out.push_str("\":");
                value(c, depth - 1, out);
            }
            out.push('}');
        }
        4 | 5 if depth > 0 => {
            out.push('[');
            for i in 0..c.next() % 4 {
                if i > 0 {
                    out.push(',');
                }
                value(c, depth - 1, out);
            }
            out.push(']');
        }
        6 | 7 => out.push_str(c.pick(NUMBERS)),
        8 => {
            // A long number: digits, a fraction, an exponent.
            let n = 1 + (c.next() as usize) * 64;
            out.push_str(c.pick(&["", "-"]));
            out.push('1');
            out.push_str(&"0".repeat(n));
            out.push_str(c.pick(&["", ".5", ".000000000000000000001"]));
            out.push_str(c.pick(&["", "e5", "E+999999", "e-999999"]));
        }
        9 => {
            // Deep nesting, up to the scanner's 10 000 levels (the object itself is two more).
            let n = ((c.next() as usize) << 6 | c.next() as usize % 64).min(9_990);
            let (open, close) = if c.next() % 2 == 0 { ("[", "]") } else { ("{\"a\":", "}") };
            out.push_str(&open.repeat(n));
            out.push_str(c.pick(NUMBERS));
            out.push_str(&close.repeat(n));
        }
        10..=12 => out.push_str(c.pick(STRINGS)),
        13 => out.push_str(c.pick(&["true", "false", "null"])),
        _ => out.push_str(c.pick(NUMBERS)),
    }
}

/// A hub object whose spec (and status) come from the choices.
fn generated(data: &[u8]) -> String {
    let mut c = Choices(data);
    let mut spec = String::new();
    value(&mut c, 6, &mut spec);
    let mut status = String::new();
    value(&mut c, 4, &mut status);
    format!(
        r#"{{"apiVersion":"example.org/v2","kind":"Thing","metadata":{{"name":"t","namespace":"ns"}},"spec":{spec},"status":{status}}}"#
    )
}

fuzz_target!(|data: &[u8]| {
    // Any bytes: the review path checks UTF-8 itself, in the same pass.
    check(data);
    if let Some(rest) = data.trim_ascii_start().strip_prefix(b"{") {
        let sep: &[u8] = if rest.trim_ascii_start().starts_with(b"}") { b"" } else { b"," };
        let object = [&br#"{"apiVersion":"example.org/v2""#[..], sep, rest].concat();
        check(&object);
        paths_agree(&object);
    }
    let object = generated(data);
    check(object.as_bytes());
    paths_agree(object.as_bytes());
});

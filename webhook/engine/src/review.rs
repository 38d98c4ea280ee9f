//! The webhook's hot path: a ConversionReview request body in, the response body out.
//!
//! The body is walked lazily with sonic-rs: each object's touched subtrees are parsed and run
//! through the same scope plan as `Plan::convert`, and everything else is copied as raw bytes
//! into the response (see `lazy`).

use sonic_rs::JsonValueTrait;

use crate::lazy::borrowed;
use crate::plan::Plan;

const REVIEW_KIND: &str = "ConversionReview";
const REVIEW_V1: &str = "apiextensions.k8s.io/v1";
const REVIEW_V1BETA1: &str = "apiextensions.k8s.io/v1beta1";

/// The response to one review.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReviewOutcome {
    /// The full ConversionReview response JSON, in the request's apiVersion.
    pub body: Vec<u8>,
    pub uid: String,
    /// Objects in the request.
    pub objects: usize,
    /// Some(message) when response.result.status is Failure (the message names the object
    /// and the path).
    pub failure: Option<String>,
}

/// A body that is not a ConversionReview at all (HTTP 400).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReviewError {
    #[error("malformed ConversionReview: {0}")]
    Malformed(String),
    #[error("ConversionReview has no request")]
    MissingRequest,
}

/// Converts every object of the review to its desiredAPIVersion. An object that cannot be
/// converted makes the whole response a Failure (not an `Err`): the apiserver expects a
/// review back, and the message says which object and path failed.
pub fn convert_review(plan: &Plan, body: &[u8]) -> Result<ReviewOutcome, ReviewError> {
    let text =
        std::str::from_utf8(body).map_err(|e| ReviewError::Malformed(format!("not UTF-8 JSON: {e}")))?;
    let not_json = |e: sonic_rs::Error| ReviewError::Malformed(format!("not a JSON object: {e}"));
    let (mut api_version, mut kind, mut request) = (None, None, None);
    for entry in sonic_rs::to_object_iter(text) {
        let (k, lv) = entry.map_err(not_json)?;
        match k.as_ref() {
            "apiVersion" => api_version = lv.as_str().map(str::to_string),
            "kind" => kind = lv.as_str().map(str::to_string),
            "request" if !lv.is_null() => request = Some(lv),
            _ => {}
        }
    }
    let api_version: &'static str = match api_version.as_deref() {
        Some(REVIEW_V1) => REVIEW_V1,
        Some(REVIEW_V1BETA1) => REVIEW_V1BETA1,
        Some(other) => {
            return Err(ReviewError::Malformed(format!(
                "apiVersion {other:?}; expected {REVIEW_V1} or {REVIEW_V1BETA1}"
            )));
        }
        None => return Err(ReviewError::Malformed("apiVersion is missing or not a string".into())),
    };
    match kind.as_deref() {
        Some(REVIEW_KIND) => {}
        Some(other) => return Err(ReviewError::Malformed(format!("kind {other:?}; expected {REVIEW_KIND}"))),
        None => return Err(ReviewError::Malformed("kind is missing or not a string".into())),
    }
    let Some(request) = request else { return Err(ReviewError::MissingRequest) };
    let request =
        borrowed(&request).ok_or_else(|| ReviewError::Malformed("request cannot be read".into()))?;
    let (mut uid, mut desired, mut objects) = (None, None, None);
    // SAFETY: `request` was skipped in strict mode by the iteration above, which validated
    // it as JSON; the unchecked iterators below only walk its structure.
    for entry in unsafe { sonic_rs::to_object_iter_unchecked(request) } {
        let (k, lv) = entry.map_err(|e| ReviewError::Malformed(format!("request is not an object: {e}")))?;
        match k.as_ref() {
            "uid" => uid = lv.as_str().map(str::to_string),
            "desiredAPIVersion" => desired = lv.as_str().map(str::to_string),
            "objects" if !lv.is_null() => objects = Some(lv),
            _ => {}
        }
    }
    let uid = uid.ok_or_else(|| ReviewError::Malformed("request.uid is missing or not a string".into()))?;
    let desired = desired.ok_or_else(|| {
        ReviewError::Malformed("request.desiredAPIVersion is missing or not a string".into())
    })?;
    let mut raws: Vec<&str> = Vec::new();
    if let Some(objects) = objects {
        if !objects.is_array() {
            return Err(ReviewError::Malformed("request.objects is not a list".into()));
        }
        let list = borrowed(&objects)
            .ok_or_else(|| ReviewError::Malformed("request.objects cannot be read".into()))?;
        // SAFETY: a slice of the strictly validated `request` (see above).
        for item in unsafe { sonic_rs::to_array_iter_unchecked(list) } {
            let lv =
                item.map_err(|e| ReviewError::Malformed(format!("request.objects is not a JSON list: {e}")))?;
            raws.push(
                borrowed(&lv).ok_or_else(|| ReviewError::Malformed("an object cannot be read".into()))?,
            );
        }
    }

    let mut out = Vec::with_capacity(body.len() + 256);
    out.extend_from_slice(b"{\"apiVersion\":\"");
    out.extend_from_slice(api_version.as_bytes());
    out.extend_from_slice(b"\",\"kind\":\"ConversionReview\",\"response\":{\"uid\":");
    write_json(&mut out, uid.as_str())?;
    out.extend_from_slice(b",\"convertedObjects\":[");
    let list_start = out.len();
    let mut failure = None;
    for (i, raw) in raws.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        if let Err(e) = plan.convert_raw(raw, &desired, &mut out) {
            failure = Some(format!("object {i} of {}: {e}", raws.len()));
            break;
        }
    }
    match &failure {
        None => out.extend_from_slice(b"],\"result\":{\"status\":\"Success\"}}}"),
        Some(msg) => {
            out.truncate(list_start);
            out.extend_from_slice(b"],\"result\":{\"status\":\"Failure\",\"message\":");
            write_json(&mut out, msg.as_str())?;
            out.extend_from_slice(b"}}}");
        }
    }
    Ok(ReviewOutcome { body: out, uid, objects: raws.len(), failure })
}

fn write_json(out: &mut Vec<u8>, s: &str) -> Result<(), ReviewError> {
    sonic_rs::to_writer(&mut *out, s)
        .map_err(|e| ReviewError::Malformed(format!("cannot write the response: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::strategies::testkit::*;
    use serde_json::json;

    fn plan() -> std::sync::Arc<Plan> {
        plan_for(
            &obj_schema(json!({"a": {"type": "integer"}})),
            &obj_schema(json!({"b": {"type": "integer"}})),
            json!([{"strategy": "FieldRename", "fieldRename": {"hubPath": "spec.a", "spokePath": "spec.b"}}]),
        )
    }

    fn review(api_version: &str, objects: serde_json::Value) -> Vec<u8> {
        serde_json::to_vec(&json!({"apiVersion": api_version, "kind": "ConversionReview",
            "request": {"uid": "u-1", "desiredAPIVersion": SPOKE_AV, "objects": objects}}))
        .unwrap()
    }

    #[test]
    fn converts_in_order_and_echoes_uid_and_version() {
        for av in [REVIEW_V1, REVIEW_V1BETA1] {
            let body = review(av, json!([hub_obj(json!({"a": 1})), hub_obj(json!({"a": 2}))]));
            let out = convert_review(&plan(), &body).unwrap();
            assert_eq!(out.uid, "u-1");
            assert_eq!(out.objects, 2);
            assert_eq!(out.failure, None);
            let v: serde_json::Value = serde_json::from_slice(&out.body).unwrap();
            assert_eq!(v["apiVersion"], av);
            assert_eq!(v["kind"], "ConversionReview");
            assert_eq!(v["response"]["uid"], "u-1");
            assert_eq!(v["response"]["result"]["status"], "Success");
            assert_eq!(
                v["response"]["convertedObjects"],
                json!([spoke_obj(json!({"b": 1})), spoke_obj(json!({"b": 2}))])
            );
        }
    }

    #[test]
    fn a_bad_object_fails_the_review_with_its_name() {
        let mut bad = hub_obj(json!({"a": 1}));
        bad["apiVersion"] = json!("other.org/v2");
        bad["metadata"]["name"] = json!("broken");
        let body = review(REVIEW_V1, json!([hub_obj(json!({"a": 1})), bad]));
        let out = convert_review(&plan(), &body).unwrap();
        let msg = out.failure.clone().unwrap();
        assert!(msg.contains("object 1 of 2: DB default/broken: apiVersion"), "{msg}");
        let v: serde_json::Value = serde_json::from_slice(&out.body).unwrap();
        assert_eq!(v["response"]["result"]["status"], "Failure");
        assert_eq!(v["response"]["result"]["message"], json!(msg));
        assert_eq!(v["response"]["convertedObjects"], json!([]));
    }

    #[test]
    fn malformed_bodies_are_errors_not_panics() {
        let p = plan();
        assert!(matches!(convert_review(&p, b"nope"), Err(ReviewError::Malformed(_))));
        assert!(matches!(convert_review(&p, b"[1]"), Err(ReviewError::Malformed(_))));
        assert!(matches!(
            convert_review(&p, br#"{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview"}"#),
            Err(ReviewError::MissingRequest)
        ));
        assert!(matches!(
            convert_review(&p, br#"{"apiVersion":"v1","kind":"ConversionReview","request":{}}"#),
            Err(ReviewError::Malformed(_))
        ));
        assert!(matches!(
            convert_review(&p, br#"{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":{"uid":"x"}}"#),
            Err(ReviewError::Malformed(_))
        ));
        for bad in [
            &br#"{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":{"uid":"x","desiredAPIVersion":"example.org/v1","objects":[{"a": tru}]}}"#[..],
            br#"{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":{"uid":"x","desiredAPIVersion":"example.org/v1","objects":[{"a": "\q"}]}}"#,
            br#"{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":{"uid":"x","desiredAPIVersion":"example.org/v1","objects":[{"a": 1.}]}}"#,
            br#"{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":{"uid":"x","desiredAPIVersion":"example.org/v1","objects":[{"a" 1}]}}"#,
            br#"{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":{"uid":"x","desiredAPIVersion":"example.org/v1","objects":[{"a": [1,}]}}"#,
        ] {
            assert!(
                matches!(convert_review(&p, bad), Err(ReviewError::Malformed(_))),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        let out = convert_review(
            &p,
            br#"{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":{"uid":"x","desiredAPIVersion":"example.org/v1","objects":[1,"s",null]}}"#,
        )
        .unwrap();
        assert!(
            out.failure.unwrap().contains("object 0 of 3: object <unnamed>: is not an object (got integer)")
        );
    }
}

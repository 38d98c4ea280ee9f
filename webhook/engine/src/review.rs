//! The webhook's hot path: a ConversionReview request body in, the response body out.
//!
//! The body is parsed once with sonic-rs; each object is converted on a shared copy (only
//! the paths rules touch are materialised) and the response is serialised straight from
//! those values. `Plan::convert` runs the very same code on serde_json values.

use sonic_rs::{JsonContainerTrait, JsonValueMutTrait, JsonValueTrait};

use crate::plan::Plan;
use crate::value::{self, Value};

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
    let mut review: Value =
        sonic_rs::from_slice(body).map_err(|e| ReviewError::Malformed(format!("not JSON: {e}")))?;
    if !review.is_object() {
        return Err(ReviewError::Malformed(format!(
            "the body is a {}, not an object",
            value::type_name(&review)
        )));
    }
    let api_version = match review.get("apiVersion").and_then(|v| v.as_str()) {
        Some(av @ (REVIEW_V1 | REVIEW_V1BETA1)) => av,
        Some(other) => {
            return Err(ReviewError::Malformed(format!(
                "apiVersion {other:?}; expected {REVIEW_V1} or {REVIEW_V1BETA1}"
            )));
        }
        None => return Err(ReviewError::Malformed("apiVersion is missing".into())),
    };
    let api_version: &'static str = if api_version == REVIEW_V1 { REVIEW_V1 } else { REVIEW_V1BETA1 };
    match review.get("kind").and_then(|v| v.as_str()) {
        Some(REVIEW_KIND) => {}
        Some(other) => return Err(ReviewError::Malformed(format!("kind {other:?}; expected {REVIEW_KIND}"))),
        None => return Err(ReviewError::Malformed("kind is missing".into())),
    }
    let Some(request) = review.get_mut("request").filter(|r| !r.is_null()) else {
        return Err(ReviewError::MissingRequest);
    };
    let uid = match request.get("uid").and_then(|v| v.as_str()) {
        Some(u) => u.to_string(),
        None => return Err(ReviewError::Malformed("request.uid is missing or not a string".into())),
    };
    let desired = match request.get("desiredAPIVersion").and_then(|v| v.as_str()) {
        Some(d) => d.to_string(),
        None => {
            return Err(ReviewError::Malformed(
                "request.desiredAPIVersion is missing or not a string".into(),
            ));
        }
    };
    let objects = match request.get_mut("objects") {
        Some(o) if o.is_null() => Value::new_array(),
        Some(o) if o.is_array() => o.take(),
        Some(_) => return Err(ReviewError::Malformed("request.objects is not a list".into())),
        None => Value::new_array(),
    };
    let objects = objects.as_array().map(|a| a.as_slice()).unwrap_or(&[]);

    let mut converted = sonic_rs::Array::with_capacity(objects.len());
    let mut failure = None;
    for (i, obj) in objects.iter().enumerate() {
        match plan.convert_value(obj, &desired) {
            Ok(v) => converted.push(v),
            Err(e) => {
                failure = Some(format!("object {i} of {}: {e}", objects.len()));
                break;
            }
        }
    }

    let mut result = sonic_rs::Object::new();
    let mut response = sonic_rs::Object::new();
    response.insert("uid", Value::from(uid.as_str()));
    match &failure {
        None => {
            result.insert("status", Value::from("Success"));
            response.insert("convertedObjects", Value::from(converted));
        }
        Some(msg) => {
            result.insert("status", Value::from("Failure"));
            result.insert("message", Value::from(msg.as_str()));
            response.insert("convertedObjects", Value::new_array());
        }
    }
    response.insert("result", Value::from(result));
    // Built as an ordered writer so apiVersion/kind lead the body, as Kubernetes writes it.
    let mut out = Vec::with_capacity(body.len() + 256);
    out.extend_from_slice(b"{\"apiVersion\":\"");
    out.extend_from_slice(api_version.as_bytes());
    out.extend_from_slice(b"\",\"kind\":\"ConversionReview\",\"response\":");
    sonic_rs::to_writer(&mut out, &Value::from(response))
        .map_err(|e| ReviewError::Malformed(format!("cannot serialise the response: {e}")))?;
    out.push(b'}');
    Ok(ReviewOutcome { body: out, uid, objects: objects.len(), failure })
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

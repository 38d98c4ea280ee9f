//! The webhook's hot path: a ConversionReview request body in, the response body out.
//!
//! One pass of the strict [`Scanner`] reads the body: each object's touched subtrees are
//! parsed and run through the same scope plan as `Plan::convert`, and every other value is
//! validated while it is skipped and copied as raw bytes into the response (see `lazy`).

use std::borrow::Cow;

use crate::convert::FailureClass;
use crate::plan::Plan;
use crate::scan::{ScanError, Scanner, Seg};

const REVIEW_KIND: &str = "ConversionReview";
const REVIEW_V1: &str = "apiextensions.k8s.io/v1";
const REVIEW_V1BETA1: &str = "apiextensions.k8s.io/v1beta1";

/// Room left in front of the converted objects when the response header is not known yet
/// (sorted keys put `uid` after `objects`): the header is written into it at the end
/// instead of moving ~15 MB to make room. A UUID uid needs about 150 bytes.
const HEADER_ROOM: usize = 256;

/// The response JSON: `buf[start..]`. The header may have been written into room left in
/// front of the objects, so the JSON can start past the beginning of the buffer.
#[derive(Clone, Debug, Default)]
pub struct ResponseBody {
    buf: Vec<u8>,
    start: usize,
}

impl ResponseBody {
    /// The buffer and the offset the JSON starts at, for handing the bytes on without a copy.
    pub fn into_parts(self) -> (Vec<u8>, usize) {
        (self.buf, self.start)
    }
}

impl std::ops::Deref for ResponseBody {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.buf[self.start..]
    }
}

impl PartialEq for ResponseBody {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}
impl Eq for ResponseBody {}

/// The response to one review.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReviewOutcome {
    /// The full ConversionReview response JSON, in the request's apiVersion.
    pub body: ResponseBody,
    pub uid: String,
    /// Objects in the request.
    pub objects: usize,
    /// Some(message) when response.result.status is Failure (the message names the object
    /// and the path).
    pub failure: Option<String>,
    /// The desiredAPIVersion's index in [`Plan::versions`]; `None` when it names none of them.
    pub to: Option<usize>,
    /// What happened to the objects, by the version each came from: for the caller's
    /// counters, so the engine itself counts nothing. Usually one entry.
    pub tally: Vec<Tally>,
}

/// What happened to an object of a review.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ObjectResult {
    /// Converted and returned.
    Success,
    /// This object could not be converted: the review's Failure names it.
    Failed(FailureClass),
    /// Not returned: another object of the review failed, so the review is a Failure.
    Aborted,
}

/// Objects of a review that came from one version and ended one way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tally {
    /// The objects' version, as an index in [`Plan::versions`]; `None` when their apiVersion
    /// names none of the plan's versions (or could not be read).
    pub from: Option<usize>,
    pub result: ObjectResult,
    pub objects: u64,
    /// Of them, those an acknowledged loss dropped data from (`ScopePlan::run_noting_loss`);
    /// only returned objects count, so only with `Success`.
    pub lossy: u64,
}

fn add(tally: &mut Vec<Tally>, from: Option<usize>, result: ObjectResult, lossy: bool) {
    match tally.iter_mut().find(|t| t.from == from && t.result == result) {
        Some(t) => {
            t.objects += 1;
            t.lossy += u64::from(lossy);
        }
        None => tally.push(Tally { from, result, objects: 1, lossy: u64::from(lossy) }),
    }
}

/// The version of the object at the scanner, read from its first member (the apiserver sorts
/// keys, so `apiVersion` comes first), for objects the conversion did not read.
fn peek_from(plan: &Plan, mut s: Scanner<'_>) -> Option<usize> {
    let mut fields = s.object().ok()??;
    let key = s.next_key(&mut fields).ok()??;
    if key != "apiVersion" || s.peek() != Some(b'"') {
        return None;
    }
    plan.version_index(&s.string().ok()?)
}

/// A body that is not a ConversionReview at all (HTTP 400).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReviewError {
    #[error("malformed ConversionReview: {0}")]
    Malformed(String),
    #[error("ConversionReview has no request")]
    MissingRequest,
}

fn malformed(e: ScanError) -> ReviewError {
    ReviewError::Malformed(format!("not JSON: {e}"))
}

/// A string member, or None when it is another type (reported by the caller by name).
fn string_member<'a>(s: &mut Scanner<'a>) -> Result<Option<Cow<'a, str>>, ReviewError> {
    if s.peek() == Some(b'"') {
        s.string().map(Some).map_err(malformed)
    } else {
        s.value().map(|_| None).map_err(malformed)
    }
}

/// How the objects list went: how many objects it had, and the first that failed to convert
/// (after which the rest were only validated).
struct Objects {
    count: usize,
    failure: Option<String>,
    tally: Vec<Tally>,
}

/// Converts the objects list at the scanner into `out`; after a failure the remaining
/// objects are still validated, so a malformed body is a 400 whatever fails first.
fn convert_objects(
    plan: &Plan,
    s: &mut Scanner<'_>,
    desired: &str,
    out: &mut Vec<u8>,
) -> Result<Objects, ReviewError> {
    let Some(mut items) = s.array().map_err(malformed)? else {
        return Err(ReviewError::Malformed("request.objects is not a list".into()));
    };
    let list_start = out.len();
    let mut count = 0;
    let mut failed = None;
    let mut tally = Vec::new();
    // The objects converted so far are not returned after all.
    let abort = |tally: &mut Vec<Tally>| {
        for t in tally.iter_mut() {
            (t.result, t.lossy) = (ObjectResult::Aborted, 0);
        }
    };
    crate::limits::take_stopped();
    while s.next_item(&mut items).map_err(malformed)? {
        // Which object is not JSON (too deep, say) is worth saying in a 15 MB review.
        let in_object =
            |e: ScanError| ReviewError::Malformed(format!("not JSON: request.objects[{count}]: {e}"));
        if failed.is_none()
            && let Err(why) = crate::limits::check()
        {
            crate::limits::take_stopped();
            out.truncate(list_start);
            abort(&mut tally);
            add(&mut tally, peek_from(plan, *s), ObjectResult::Failed(FailureClass::Stopped), false);
            failed = Some((count, format!("conversion stopped: {why}")));
            s.value().map_err(in_object)?;
        } else if failed.is_some() {
            add(&mut tally, peek_from(plan, *s), ObjectResult::Aborted, false);
            s.value().map_err(in_object)?;
        } else {
            if count > 0 {
                out.push(b',');
            }
            let at = *s;
            match plan.convert_scanned(s, desired, out).map_err(in_object)? {
                Ok(c) => add(&mut tally, c.from, ObjectResult::Success, c.lossy),
                Err(e) => {
                    out.truncate(list_start);
                    abort(&mut tally);
                    let class = FailureClass::of(&e, crate::limits::take_stopped());
                    add(&mut tally, peek_from(plan, at), ObjectResult::Failed(class), false);
                    failed = Some((count, e.to_string()));
                }
            }
        }
        count += 1;
    }
    // "object 3 of 10": the total is known only now.
    let failure = failed.map(|(i, e)| format!("object {i} of {count}: {e}"));
    Ok(Objects { count, failure, tally })
}

/// Converts every object of the review to its desiredAPIVersion. An object that cannot be
/// converted makes the whole response a Failure (not an `Err`): the apiserver expects a
/// review back, and the message says which object and path failed.
pub fn convert_review(plan: &Plan, body: &[u8]) -> Result<ReviewOutcome, ReviewError> {
    let mut s = Scanner::new(body).map_err(malformed)?;
    let Some(mut fields) = s.object().map_err(malformed)? else {
        s.value().map_err(malformed)?;
        return Err(ReviewError::Malformed("not a JSON object".into()));
    };
    let (mut api_version, mut kind, mut request_seen) = (None, None, false);
    let (mut uid, mut desired) = (None::<Cow<str>>, None::<Cow<str>>);
    // The converted list, written after the response header when that is known by the time
    // the objects arrive (the apiserver's key order), else after `HEADER_ROOM` with the
    // header put in front at the end (sorted keys put `uid` after `objects`). Only a
    // `desiredAPIVersion` that comes after the objects costs a second pass over them.
    // Renames make objects a little longer; growing a 15 MB buffer would copy it all again.
    let mut out = Vec::with_capacity(HEADER_ROOM + body.len() + body.len() / 8 + 4096);
    let mut header_written = false;
    // Whether the converted list has started in `out`.
    let mut list_started = false;
    let mut objects: Option<Objects> = None;
    // `objects` before `desiredAPIVersion`: validated first, converted after the request.
    let mut deferred: Option<Scanner> = None;
    while let Some(k) = s.next_key(&mut fields).map_err(malformed)? {
        match k.as_ref() {
            "apiVersion" => api_version = string_member(&mut s)?,
            "kind" => kind = string_member(&mut s)?,
            "request" if s.peek() != Some(b'n') => {
                let Some(mut req) = s.object().map_err(malformed)? else {
                    return Err(ReviewError::Malformed("request is not an object".into()));
                };
                request_seen = true;
                while let Some(k) = s.next_key(&mut req).map_err(malformed)? {
                    match k.as_ref() {
                        "uid" => uid = string_member(&mut s)?,
                        "desiredAPIVersion" => desired = string_member(&mut s)?,
                        "objects" if s.peek() != Some(b'n') => match &desired {
                            // A repeated `objects` key makes the review malformed (the check
                            // of the envelope's keys below): a second list is only validated.
                            Some(_) if list_started => {
                                s.value().map_err(malformed)?;
                            }
                            Some(d) => {
                                if let (Some(u), Ok(av)) = (&uid, review_version(&api_version)) {
                                    write_header(&mut out, av, u)?;
                                    header_written = true;
                                } else {
                                    out.resize(HEADER_ROOM, b' ');
                                }
                                list_started = true;
                                deferred = None;
                                objects = Some(convert_objects(plan, &mut s, d, &mut out)?);
                            }
                            None => {
                                deferred = Some(s);
                                s.value().map_err(malformed)?;
                            }
                        },
                        _ => {
                            s.value().map_err(malformed)?;
                        }
                    }
                }
            }
            _ => {
                s.value().map_err(malformed)?;
            }
        }
    }
    s.end().map_err(malformed)?;
    // The review's own members (everything but the objects, whose repeated keys fail them one
    // by one) may not repeat a key either: which uid or list would be meant is not defined.
    if s.take_keys_unsure()
        && let Some(d) = crate::scan::first_duplicate(
            s.slice(0, s.pos()),
            |p| matches!(p, [Seg::Key(r), Seg::Key(o)] if r == "request" && o == "objects"),
        )
    {
        let at = if d.path.is_empty() { "the review".to_string() } else { d.path };
        return Err(ReviewError::Malformed(format!("{at} has the key {:?} twice", d.key)));
    }

    let api_version = review_version(&api_version)?;
    match kind.as_deref() {
        Some(REVIEW_KIND) => {}
        Some(other) => return Err(ReviewError::Malformed(format!("kind {other:?}; expected {REVIEW_KIND}"))),
        None => return Err(ReviewError::Malformed("kind is missing or not a string".into())),
    }
    if !request_seen {
        return Err(ReviewError::MissingRequest);
    }
    let uid = uid.ok_or_else(|| ReviewError::Malformed("request.uid is missing or not a string".into()))?;
    let desired = desired.ok_or_else(|| {
        ReviewError::Malformed("request.desiredAPIVersion is missing or not a string".into())
    })?;
    let mut start = 0;
    if !header_written {
        let mut head = Vec::with_capacity(HEADER_ROOM);
        write_header(&mut head, api_version, &uid)?;
        if let Some(mut list) = deferred {
            // Already validated; this second pass only converts.
            out.resize(HEADER_ROOM, b' ');
            objects = Some(convert_objects(plan, &mut list, &desired, &mut out)?);
        }
        if out.len() < HEADER_ROOM {
            // No objects list at all.
            out.resize(HEADER_ROOM, b' ');
        }
        if head.len() <= HEADER_ROOM {
            start = HEADER_ROOM - head.len();
            out[start..HEADER_ROOM].copy_from_slice(&head);
        } else {
            // A uid far longer than a UUID: make room the slow way.
            out.splice(0..HEADER_ROOM, head);
        }
    }
    let Objects { count, failure, tally } =
        objects.unwrap_or(Objects { count: 0, failure: None, tally: Vec::new() });
    match &failure {
        None => out.extend_from_slice(b"],\"result\":{\"status\":\"Success\"}}}"),
        Some(msg) => {
            out.extend_from_slice(b"],\"result\":{\"status\":\"Failure\",\"message\":");
            write_json(&mut out, msg.as_str())?;
            out.extend_from_slice(b"}}}");
        }
    }
    Ok(ReviewOutcome {
        body: ResponseBody { buf: out, start },
        uid: uid.into_owned(),
        objects: count,
        failure,
        to: plan.version_index(&desired),
        tally,
    })
}

/// The `apiVersion` and `request.uid` of a review body, read without converting anything
/// and without recursion (for answers the conversion never produced, such as a timeout).
/// `None` for what cannot be read; reading stops at the first malformed byte.
pub fn envelope(body: &[u8]) -> (Option<String>, Option<String>) {
    let (mut api_version, mut uid) = (None, None);
    let _ = (|| -> Result<(), ScanError> {
        let mut s = Scanner::new(body)?;
        let Some(mut fields) = s.object()? else { return Ok(()) };
        while let Some(k) = s.next_key(&mut fields)? {
            match (k.as_ref(), s.peek()) {
                ("apiVersion", Some(b'"')) => api_version = Some(s.string()?.into_owned()),
                ("request", Some(b'{')) => {
                    let Some(mut req) = s.object()? else { return Ok(()) };
                    while let Some(k) = s.next_key(&mut req)? {
                        match (k.as_ref(), s.peek()) {
                            ("uid", Some(b'"')) => uid = Some(s.string()?.into_owned()),
                            _ => {
                                s.value()?;
                            }
                        }
                    }
                }
                _ => {
                    s.value()?;
                }
            }
        }
        Ok(())
    })();
    (api_version, uid)
}

fn review_version(api_version: &Option<Cow<str>>) -> Result<&'static str, ReviewError> {
    match api_version.as_deref() {
        Some(REVIEW_V1) => Ok(REVIEW_V1),
        Some(REVIEW_V1BETA1) => Ok(REVIEW_V1BETA1),
        Some(other) => Err(ReviewError::Malformed(format!(
            "apiVersion {other:?}; expected {REVIEW_V1} or {REVIEW_V1BETA1}"
        ))),
        None => Err(ReviewError::Malformed("apiVersion is missing or not a string".into())),
    }
}

/// The response up to and including the opening bracket of `convertedObjects`.
fn write_header(out: &mut Vec<u8>, api_version: &str, uid: &str) -> Result<(), ReviewError> {
    out.extend_from_slice(b"{\"apiVersion\":\"");
    out.extend_from_slice(api_version.as_bytes());
    out.extend_from_slice(b"\",\"kind\":\"ConversionReview\",\"response\":{\"uid\":");
    write_json(out, uid)?;
    out.extend_from_slice(b",\"convertedObjects\":[");
    Ok(())
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

    fn tally(plan: &Plan, desired: &str, objects: serde_json::Value) -> (Option<usize>, Vec<Tally>) {
        let body = serde_json::to_vec(&json!({"apiVersion": REVIEW_V1, "kind": "ConversionReview",
            "request": {"uid": "u-1", "desiredAPIVersion": desired, "objects": objects}}))
        .unwrap();
        let out = convert_review(plan, &body).unwrap();
        (out.to, out.tally)
    }

    fn t(from: Option<usize>, result: ObjectResult, objects: u64, lossy: u64) -> Tally {
        Tally { from, result, objects, lossy }
    }

    /// The per-object outcomes a caller counts: versions as indexes of `Plan::versions`
    /// (hub 0, spoke 1), losses only where an acknowledged-lossy rule found data to drop, and
    /// a failure class per engine error kind.
    #[test]
    fn the_tally_names_versions_results_and_losses() {
        use ObjectResult::{Aborted, Failed, Success};
        let int = obj_schema(json!({"n": {"type": "integer"}, "gone": {"type": "integer"}}));
        let text = obj_schema(json!({"n": {"type": "string"}}));
        let plan = plan_for(
            &int,
            &text,
            json!([{"strategy": "TypeCoerce", "typeCoerce": {"path": "spec.n"}},
                {"strategy": "Delete", "delete": {"path": "spec.gone", "existsOn": "Hub"},
                    "acknowledgeLossy": true, "reason": "unused"}]),
        );
        // Hub to spoke: the Delete drops spec.gone only where it is set.
        let (to, got) = tally(
            &plan,
            SPOKE_AV,
            json!([
                hub_obj(json!({"n": 1, "gone": 2})),
                hub_obj(json!({"n": 1})),
                spoke_obj(json!({"n": "3"}))
            ]),
        );
        assert_eq!(to, Some(1));
        assert_eq!(got, vec![t(Some(0), Success, 2, 1), t(Some(1), Success, 1, 0)]);
        // Spoke to hub: "x" is no integer, a rule error; the object before it is not returned
        // and neither is the one after it.
        let (to, got) = tally(
            &plan,
            HUB_AV,
            json!([spoke_obj(json!({"n": "1"})), spoke_obj(json!({"n": "x"})), hub_obj(json!({"n": 2}))]),
        );
        assert_eq!(to, Some(0));
        assert_eq!(
            got,
            vec![
                t(Some(1), Aborted, 1, 0),
                t(Some(1), Failed(FailureClass::Rule), 1, 0),
                t(Some(0), Aborted, 1, 0)
            ]
        );
        // A made-up version is no index: the caller labels it as other.
        let (to, got) = tally(&plan, "example.org/v9", json!([obj("example.org/v7", json!({}))]));
        assert_eq!(to, None);
        assert_eq!(got, vec![t(None, Failed(FailureClass::InvalidObject), 1, 0)]);
    }

    /// A conversion the caller's budget stops fails as `stopped`, not as the rule that saw it.
    #[test]
    fn a_stopped_conversion_is_classed_stopped() {
        struct Refuse;
        impl crate::limits::Budget for Refuse {
            fn check(&self) -> Result<(), String> {
                Err("past the deadline".into())
            }
        }
        let plan = plan();
        let (_, got) = crate::limits::with_budget(std::sync::Arc::new(Refuse), || {
            tally(&plan, SPOKE_AV, json!([hub_obj(json!({"a": 1})), hub_obj(json!({"a": 2}))]))
        });
        assert_eq!(
            got,
            vec![
                t(Some(0), ObjectResult::Failed(FailureClass::Stopped), 1, 0),
                t(Some(0), ObjectResult::Aborted, 1, 0)
            ]
        );
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

    /// Server-side apply and Flux send fragments without `metadata` (kubernetes/kubernetes
    /// #117356); the apiserver refuses a converted object without it ("missing metadata in
    /// converted object"), so each converted object carries at least `"metadata": {}`.
    #[test]
    fn an_object_without_metadata_is_converted_with_metadata() {
        for (what, object) in [
            ("no metadata", json!({"apiVersion": HUB_AV, "kind": "DB", "spec": {"a": 1}})),
            (
                "null metadata",
                json!({"apiVersion": HUB_AV, "kind": "DB", "metadata": null, "spec": {"a": 1}}),
            ),
            ("only apiVersion and kind", json!({"apiVersion": HUB_AV, "kind": "DB"})),
        ] {
            let out = convert_review(&plan(), &review(REVIEW_V1, json!([object.clone()]))).unwrap();
            assert_eq!(out.failure, None, "{what}");
            let v: serde_json::Value = serde_json::from_slice(&out.body).unwrap();
            let got = &v["response"]["convertedObjects"][0];
            assert_eq!(got["metadata"], json!({}), "{what}: {got}");
            assert_eq!(got["apiVersion"], SPOKE_AV, "{what}");
            assert_eq!(got["kind"], "DB", "{what}");
            if object.get("spec").is_some() {
                assert_eq!(got["spec"], json!({"b": 1}), "{what}");
            }
            // The tree path agrees.
            let tree = plan().convert(&object, SPOKE_AV).unwrap();
            assert_eq!(&tree, got, "{what}");
        }
    }

    #[test]
    fn any_key_order_gives_the_same_response() {
        let objects =
            serde_json::to_string(&json!([hub_obj(json!({"a": 1})), hub_obj(json!({"a": 2}))])).unwrap();
        let usual = format!(
            r#"{{"kind":"ConversionReview","apiVersion":"{REVIEW_V1}","request":{{"uid":"u-1","desiredAPIVersion":"{SPOKE_AV}","objects":{objects}}}}}"#
        );
        // Objects before the uid and the desired version, the review's apiVersion last.
        let reversed = format!(
            r#" {{ "request" : {{ "objects" : {objects} , "desiredAPIVersion":"{SPOKE_AV}","uid":"u-1"}}, "kind":"ConversionReview","apiVersion":"{REVIEW_V1}"}} "#
        );
        // Sorted keys (what serde_json writes): uid after the objects.
        let sorted = format!(
            r#"{{"apiVersion":"{REVIEW_V1}","kind":"ConversionReview","request":{{"desiredAPIVersion":"{SPOKE_AV}","objects":{objects},"uid":"u-1"}}}}"#
        );
        let a = convert_review(&plan(), usual.as_bytes()).unwrap();
        let b = convert_review(&plan(), reversed.as_bytes()).unwrap();
        assert_eq!(a, b);
        assert_eq!(a, convert_review(&plan(), sorted.as_bytes()).unwrap());
        assert_eq!(a.objects, 2);
        let v: serde_json::Value = serde_json::from_slice(&a.body).unwrap();
        assert_eq!(
            v["response"]["convertedObjects"],
            json!([spoke_obj(json!({"b": 1})), spoke_obj(json!({"b": 2}))])
        );
        // A malformed object after a failing one is still a malformed body.
        let bad = usual
            .replace(r#"{"a":2}"#, r#"{"a":tru}"#)
            .replace(r#""apiVersion":"example.org/v2""#, r#""apiVersion":"other/v9""#);
        assert!(
            matches!(convert_review(&plan(), bad.as_bytes()), Err(ReviewError::Malformed(m)) if m.contains("invalid literal"))
        );
    }

    #[test]
    fn the_header_fits_any_uid_and_the_last_objects_list_wins() {
        let objects = serde_json::to_string(&json!([hub_obj(json!({"a": 1}))])).unwrap();
        let converted = json!([spoke_obj(json!({"b": 1}))]);
        // Up to and past the room left for the header when the uid comes last.
        for uid in ["", "u", &"x".repeat(100), &"y".repeat(HEADER_ROOM), &r#"\u00e9\""#.repeat(50)] {
            let usual = format!(
                r#"{{"apiVersion":"{REVIEW_V1}","kind":"ConversionReview","request":{{"uid":"{uid}","desiredAPIVersion":"{SPOKE_AV}","objects":{objects}}}}}"#
            );
            let sorted = format!(
                r#"{{"apiVersion":"{REVIEW_V1}","kind":"ConversionReview","request":{{"desiredAPIVersion":"{SPOKE_AV}","objects":{objects},"uid":"{uid}"}}}}"#
            );
            let late_desired = format!(
                r#"{{"apiVersion":"{REVIEW_V1}","kind":"ConversionReview","request":{{"objects":{objects},"uid":"{uid}","desiredAPIVersion":"{SPOKE_AV}"}}}}"#
            );
            let a = convert_review(&plan(), usual.as_bytes()).unwrap();
            assert_eq!(a, convert_review(&plan(), sorted.as_bytes()).unwrap(), "uid {uid:?}");
            assert_eq!(a, convert_review(&plan(), late_desired.as_bytes()).unwrap(), "uid {uid:?}");
            let v: serde_json::Value = serde_json::from_slice(&a.body).unwrap();
            let want: serde_json::Value = serde_json::from_str(&format!("\"{uid}\"")).unwrap();
            assert_eq!(v["response"]["uid"], want);
            assert_eq!(v["response"]["convertedObjects"], converted);
        }
        // A repeated `objects` key: which list is meant is not defined, so the review is
        // malformed, whatever the order.
        let first =
            serde_json::to_string(&json!([hub_obj(json!({"a": 7})), hub_obj(json!({"a": 8}))])).unwrap();
        for body in [
            format!(
                r#"{{"apiVersion":"{REVIEW_V1}","kind":"ConversionReview","request":{{"uid":"u","desiredAPIVersion":"{SPOKE_AV}","objects":{first},"objects":{objects}}}}}"#
            ),
            format!(
                r#"{{"apiVersion":"{REVIEW_V1}","kind":"ConversionReview","request":{{"desiredAPIVersion":"{SPOKE_AV}","objects":{first},"objects":{objects},"uid":"u"}}}}"#
            ),
            format!(
                r#"{{"apiVersion":"{REVIEW_V1}","kind":"ConversionReview","request":{{"objects":{first},"desiredAPIVersion":"{SPOKE_AV}","objects":{objects},"uid":"u"}}}}"#
            ),
        ] {
            assert_eq!(
                convert_review(&plan(), body.as_bytes()),
                Err(ReviewError::Malformed("request has the key \"objects\" twice".into())),
                "{body}"
            );
        }
        // No objects at all: an empty list.
        let none = format!(
            r#"{{"request":{{"desiredAPIVersion":"{SPOKE_AV}","uid":"u"}},"apiVersion":"{REVIEW_V1}","kind":"ConversionReview"}}"#
        );
        let v: serde_json::Value =
            serde_json::from_slice(&convert_review(&plan(), none.as_bytes()).unwrap().body).unwrap();
        assert_eq!(v["response"]["convertedObjects"], json!([]));
    }

    #[test]
    fn a_repeated_key_fails_its_object_and_in_the_envelope_the_review() {
        let ok = serde_json::to_string(&hub_obj(json!({"a": 1}))).unwrap();
        let twice = ok.replace(r#""spec":{"a":1}"#, r#""spec":{"a":1},"status":{"n":{"\u0078":1,"x":2}}"#);
        let unsorted = ok.replace(r#""spec":{"a":1}"#, r#""spec":{"a":1},"status":{"y":1,"x":2}"#);
        let body = |objects: &str, extra: &str| {
            format!(
                r#"{{"apiVersion":"{REVIEW_V1}","kind":"ConversionReview","request":{{"uid":"u","desiredAPIVersion":"{SPOKE_AV}","objects":[{objects}]{extra}}}}}"#
            )
        };
        let out = convert_review(&plan(), body(&format!("{ok},{twice},{ok}"), "").as_bytes()).unwrap();
        assert_eq!(
            out.failure.as_deref(),
            Some(
                "object 1 of 3: DB default/db1: status.n has the key \"x\" twice; JSON leaves the meaning \
                 of a repeated key open, so the object is not converted: remove one of them"
            )
        );
        // Keys out of order but distinct convert as usual.
        let out = convert_review(&plan(), body(&format!("{unsorted},{ok}"), "").as_bytes()).unwrap();
        assert_eq!(out.failure, None);
        // In the review's own members, also deep in a member the review does not read.
        for (extra, want) in [
            (r#","uid":"v""#, "request has the key \"uid\" twice"),
            (r#","x":{"y":[{"z":1,"z":2}]}"#, "request.x.y[0] has the key \"z\" twice"),
        ] {
            assert_eq!(
                convert_review(&plan(), body(&format!("{ok},{twice}"), extra).as_bytes()),
                Err(ReviewError::Malformed(want.into()))
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
    fn the_envelope_is_read_from_any_body() {
        let body = review(REVIEW_V1BETA1, json!([hub_obj(json!({"a": 1}))]));
        assert_eq!(envelope(&body), (Some(REVIEW_V1BETA1.to_string()), Some("u-1".to_string())));
        // The uid after deep or malformed objects: what comes before it is known.
        let deep = "[".repeat(100_000) + &"]".repeat(100_000);
        let body = format!(r#"{{"apiVersion":"{REVIEW_V1}","request":{{"objects":{deep},"uid":"u-2"}}}}"#);
        assert_eq!(envelope(body.as_bytes()), (Some(REVIEW_V1.to_string()), None));
        let body = format!(r#"{{"apiVersion":"{REVIEW_V1}","request":{{"uid":"u-3","objects":[tru]}}}}"#);
        assert_eq!(envelope(body.as_bytes()), (Some(REVIEW_V1.to_string()), Some("u-3".to_string())));
        assert_eq!(envelope(b"nope"), (None, None));
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

//! Whether an XRD's wiring reached the CRDs Crossplane generates from it: its definition
//! controller renders the composite resource's CRD (named as the XRD) and, for an XRD with
//! `spec.claimNames`, the claim's CRD (`<claimNames.plural>.<group>`), copying the XRD's
//! `spec.conversion` into both. Only those make the apiserver call a webhook, so a move of an
//! XRD is over, and an XRD served as its status says, only once they carry the wiring
//! (`docs/operations.md`, "How a target is wired and moved"). The verdict is pure; the one
//! read of the generated CRDs (`read`) is authoritative, as the target's own.

use dco_api::config::{GeneratedCrd, GeneratedRole};
use dco_api::target::{STRATEGY_WEBHOOK, Wiring};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceConversion, CustomResourceDefinition,
};
use kube::Client;
use kube::api::Api;
use serde::Deserialize as _;
use serde_json::Value;

use crate::error::{Error, Result};

pub mod reason {
    /// Every generated CRD carries the XRD's wiring.
    pub const PROPAGATED: &str = "Propagated";
    /// The XRD names no dco server: nothing of dco's to propagate.
    pub const NOT_WIRED: &str = "NotWired";
    /// Crossplane has not processed the XRD's latest write (or is not running).
    pub const WAITING_FOR_CROSSPLANE: &str = "WaitingForCrossplane";
    pub const CRD_MISSING: &str = "CRDMissing";
    pub const CRD_DIFFERS: &str = "CRDDiffers";
}

/// The CRDs Crossplane generates from `xrd`: the composite's, and the claim's when the XRD
/// names claims. At most two.
pub fn generated_names(xrd: &Value) -> Vec<(String, GeneratedRole)> {
    let mut out = Vec::with_capacity(2);
    if let Some(name) = xrd.pointer("/metadata/name").and_then(Value::as_str) {
        out.push((name.to_string(), GeneratedRole::Composite));
    }
    let group = xrd.pointer("/spec/group").and_then(Value::as_str);
    let claims = xrd.pointer("/spec/claimNames/plural").and_then(Value::as_str);
    if let (Some(group), Some(plural)) = (group, claims)
        && !plural.is_empty()
    {
        out.push((format!("{plural}.{group}"), GeneratedRole::Claim));
    }
    out
}

/// The webhook wiring a target's `spec.conversion` carries, read back into the form dco
/// writes; `None` for strategy None, a URL webhook or a conversion that does not parse.
pub fn wiring_of(target: &Value) -> Option<Wiring> {
    let conv = CustomResourceConversion::deserialize(target.pointer("/spec/conversion")?).ok()?;
    if conv.strategy != STRATEGY_WEBHOOK {
        return None;
    }
    let wh = conv.webhook?;
    let cc = wh.client_config?;
    let svc = cc.service?;
    Some(Wiring {
        namespace: svc.namespace,
        service: svc.name,
        path: svc.path.unwrap_or_default(),
        port: svc.port.unwrap_or(443),
        ca_bundle: String::from_utf8(cc.ca_bundle?.0).ok()?,
        review_versions: wh.conversion_review_versions,
    })
}

/// What of `want` a target's (or generated CRD's) `spec.conversion` does not carry, in the
/// words a person reads; `None` when it carries exactly `want`.
pub fn differs(want: &Wiring, target: &Value) -> Option<String> {
    if want.matches(target) {
        return None;
    }
    let conv = target.pointer("/spec/conversion");
    let strategy = conv.and_then(|c| c.get("strategy")).and_then(Value::as_str);
    let Some(have) = wiring_of(target) else {
        return Some(match (conv, strategy) {
            (None, _) => "it has no spec.conversion (strategy None)".to_string(),
            (Some(_), Some(s)) if s != STRATEGY_WEBHOOK => format!("strategy {s}, not {STRATEGY_WEBHOOK}"),
            _ => "its webhook names no Service (a URL, or a conversion that does not parse)".to_string(),
        });
    };
    let mut what = Vec::new();
    if (&have.namespace, &have.service) != (&want.namespace, &want.service) {
        what.push(format!(
            "it names Service {}/{}, not {}/{}",
            have.namespace, have.service, want.namespace, want.service
        ));
    }
    if have.path != want.path || have.port != want.port {
        what.push(format!("path {}:{}, not {}:{}", have.path, have.port, want.path, want.port));
    }
    if have.ca_bundle != want.ca_bundle {
        what.push("a stale caBundle".to_string());
    }
    if have.review_versions != want.review_versions {
        what.push(format!(
            "conversionReviewVersions {:?}, not {:?}",
            have.review_versions, want.review_versions
        ));
    }
    if what.is_empty() {
        what.push("its spec.conversion differs".to_string());
    }
    Some(what.join(", "))
}

/// One generated CRD as read: its name, role and the object (`None`: it does not exist).
#[derive(Clone, Debug, PartialEq)]
pub struct Read {
    pub name: String,
    pub role: GeneratedRole,
    pub crd: Option<Value>,
}

/// The verdict on an XRD's generated CRDs: what `status.generatedCRDs` lists, and the
/// `ConversionPropagated` condition (`Ok(message)` or `Err((reason, message))`).
#[derive(Clone, Debug, PartialEq)]
pub struct Propagation {
    pub crds: Vec<GeneratedCrd>,
    pub verdict: std::result::Result<String, (&'static str, String)>,
}

impl Propagation {
    /// The machine's fact: what differs, or nothing.
    pub fn fact(&self) -> std::result::Result<(), String> {
        self.verdict.as_ref().map(drop).map_err(|(_, m)| m.clone())
    }
}

/// Crossplane has processed the XRD's latest write: its `Established` condition is True and
/// (where Crossplane records it) observed the XRD's current generation.
fn crossplane_caught_up(xrd: &Value) -> bool {
    let generation = xrd.pointer("/metadata/generation").and_then(Value::as_i64);
    let conds = xrd.pointer("/status/conditions").and_then(Value::as_array);
    conds.is_some_and(|cs| {
        cs.iter().any(|c| {
            let observed = c.get("observedGeneration").and_then(Value::as_i64);
            c["type"] == "Established"
                && c["status"] == "True"
                && (observed.is_none() || generation.is_none() || observed >= generation)
        })
    })
}

/// Judge the generated CRDs of `xrd` against the wiring the XRD carries. `dco_wired`: the XRD
/// names a dco server (only dco's wiring is ours to see through).
pub fn judge(xrd: &Value, dco_wired: bool, read: &[Read]) -> Propagation {
    let want = wiring_of(xrd).filter(|_| dco_wired);
    let crds: Vec<GeneratedCrd> = read
        .iter()
        .map(|r| {
            let why = match (&r.crd, &want) {
                (None, _) => Some("missing".to_string()),
                (Some(_), None) => None,
                (Some(crd), Some(w)) => differs(w, crd),
            };
            GeneratedCrd {
                name: r.name.clone(),
                role: r.role,
                propagated: why.is_none() && want.is_some(),
                reason: why,
            }
        })
        .collect();
    let Some(_) = want else {
        let msg =
            "the XRD's spec.conversion names no dco server, so there is no wiring of dco's to propagate";
        return Propagation { crds, verdict: Err((reason::NOT_WIRED, msg.to_string())) };
    };
    let off: Vec<String> = crds
        .iter()
        .filter(|c| !c.propagated)
        .map(|c| format!("{} CRD {}: {}", role_name(c.role), c.name, c.reason.as_deref().unwrap_or("")))
        .collect();
    if off.is_empty() {
        let names: Vec<&str> = crds.iter().map(|c| c.name.as_str()).collect();
        let msg = format!("the generated CRDs {} carry the XRD's wiring", names.join(", "));
        return Propagation { crds, verdict: Ok(msg) };
    }
    let missing = crds.iter().any(|c| c.reason.as_deref() == Some("missing"));
    let reason = if !crossplane_caught_up(xrd) {
        reason::WAITING_FOR_CROSSPLANE
    } else if missing {
        reason::CRD_MISSING
    } else {
        reason::CRD_DIFFERS
    };
    let msg = match reason {
        reason::WAITING_FOR_CROSSPLANE => format!(
            "Crossplane has not rendered the XRD's latest spec yet (its Established condition is not True for this generation; is Crossplane running?): {}",
            off.join("; ")
        ),
        _ => format!(
            "{} (Crossplane re-renders them from the XRD; if this lasts, check Crossplane's definition controller)",
            off.join("; ")
        ),
    };
    Propagation { crds, verdict: Err((reason, msg)) }
}

fn role_name(role: GeneratedRole) -> &'static str {
    match role {
        GeneratedRole::Composite => "composite",
        GeneratedRole::Claim => "claim",
    }
}

/// Read `xrd`'s generated CRDs from the apiserver (authoritative: the move decides on them).
pub async fn read(client: &Client, xrd: &Value) -> Result<Vec<Read>> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut out = Vec::with_capacity(2);
    for (name, role) in generated_names(xrd) {
        let crd = api.get_opt(&name).await.map_err(Error::kube("read", "CustomResourceDefinition", &name))?;
        let crd = crd.map(serde_json::to_value).transpose().map_err(|source| Error::Serialize {
            what: format!("CustomResourceDefinition {name}"),
            source,
        })?;
        out.push(Read { name, role, crd });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn wiring() -> Wiring {
        crate::testing::wiring("xdbs.example.org")
    }

    fn with(w: &Wiring, mut obj: Value) -> Value {
        obj["spec"]["conversion"] = serde_json::to_value(w.conversion()).unwrap();
        obj
    }

    fn xrd(w: Option<&Wiring>, established_gen: i64) -> Value {
        let x = json!({
            "metadata": {"name": "xdbs.example.org", "generation": 3},
            "spec": {"group": "example.org", "claimNames": {"kind": "DB", "plural": "dbs"}},
            "status": {"conditions": [{"type": "Established", "status": "True", "observedGeneration": established_gen}]},
        });
        match w {
            Some(w) => with(w, x),
            None => x,
        }
    }

    fn crd(name: &str, role: GeneratedRole, w: Option<&Wiring>) -> Read {
        let c = json!({"metadata": {"name": name}, "spec": {}});
        Read { name: name.into(), role, crd: Some(w.map_or(c.clone(), |w| with(w, c))) }
    }

    #[test]
    fn names_the_composite_and_the_claim_crd() {
        let x = xrd(None, 3);
        assert_eq!(
            generated_names(&x),
            vec![
                ("xdbs.example.org".to_string(), GeneratedRole::Composite),
                ("dbs.example.org".to_string(), GeneratedRole::Claim)
            ]
        );
        let no_claims = json!({"metadata": {"name": "xs.example.org"}, "spec": {"group": "example.org"}});
        assert_eq!(
            generated_names(&no_claims),
            vec![("xs.example.org".to_string(), GeneratedRole::Composite)]
        );
    }

    #[test]
    fn the_wiring_reads_back_as_written() {
        let w = wiring();
        assert_eq!(wiring_of(&with(&w, json!({}))), Some(w));
        assert_eq!(wiring_of(&json!({"spec": {"conversion": {"strategy": "None"}}})), None);
    }

    #[test]
    fn propagated_only_when_every_generated_crd_carries_exactly_the_wiring() {
        let w = wiring();
        let x = xrd(Some(&w), 3);
        let both = [
            crd("xdbs.example.org", GeneratedRole::Composite, Some(&w)),
            crd("dbs.example.org", GeneratedRole::Claim, Some(&w)),
        ];
        let p = judge(&x, true, &both);
        assert!(p.verdict.is_ok(), "{p:?}");
        assert!(p.crds.iter().all(|c| c.propagated && c.reason.is_none()));
        assert_eq!(p.fact(), Ok(()));

        // The claim CRD still names the old server: CRDDiffers naming it and what differs.
        let old = Wiring { service: "dco-webhook-old".into(), ca_bundle: "OLD".into(), ..w.clone() };
        let p = judge(&x, true, &[both[0].clone(), crd("dbs.example.org", GeneratedRole::Claim, Some(&old))]);
        let (reason, msg) = p.verdict.clone().unwrap_err();
        assert_eq!(reason, reason::CRD_DIFFERS);
        assert!(msg.contains("claim CRD dbs.example.org: it names Service dco-system/dco-webhook-old, not dco-system/dco-webhook-a, a stale caBundle"), "{msg}");
        assert_eq!((p.crds[0].propagated, p.crds[1].propagated), (true, false));

        // Only the CA is stale; only the review versions differ; strategy None.
        let ca = Wiring { ca_bundle: "OLD".into(), ..w.clone() };
        assert_eq!(differs(&w, &with(&ca, json!({}))).as_deref(), Some("a stale caBundle"));
        let rv = Wiring { review_versions: vec!["v1beta1".into()], ..w.clone() };
        assert!(differs(&w, &with(&rv, json!({}))).unwrap().starts_with("conversionReviewVersions"));
        let none = json!({"spec": {"conversion": {"strategy": "None"}}});
        assert_eq!(differs(&w, &none).as_deref(), Some("strategy None, not Webhook"));
        assert_eq!(
            differs(&w, &json!({"spec": {}})).as_deref(),
            Some("it has no spec.conversion (strategy None)")
        );
    }

    #[test]
    fn missing_or_lagging_crds_say_why() {
        let w = wiring();
        let missing = [
            crd("xdbs.example.org", GeneratedRole::Composite, Some(&w)),
            Read { name: "dbs.example.org".into(), role: GeneratedRole::Claim, crd: None },
        ];
        let (reason, msg) = judge(&xrd(Some(&w), 3), true, &missing).verdict.unwrap_err();
        assert_eq!(reason, reason::CRD_MISSING);
        assert!(msg.contains("claim CRD dbs.example.org: missing"), "{msg}");
        // Crossplane has not observed generation 3 yet: it is Crossplane we wait for.
        let stale = [
            crd("xdbs.example.org", GeneratedRole::Composite, None),
            crd("dbs.example.org", GeneratedRole::Claim, None),
        ];
        let (reason, msg) = judge(&xrd(Some(&w), 2), true, &stale).verdict.unwrap_err();
        assert_eq!(reason, reason::WAITING_FOR_CROSSPLANE);
        assert!(msg.contains("composite CRD xdbs.example.org: it has no spec.conversion"), "{msg}");
        // Not wired by dco: nothing to propagate, and nothing claimed propagated.
        let p = judge(&xrd(Some(&w), 3), false, &stale);
        assert_eq!(p.verdict.unwrap_err().0, reason::NOT_WIRED);
        assert!(p.crds.iter().all(|c| !c.propagated));
    }
}

//! A config's target (a CRD, or a Crossplane XRD) as JSON: reading it, what its
//! `spec.conversion` names, and server-side applying that field (the only field of a target
//! the operator ever writes).

use dco_api::config::TargetKind;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use serde_json::{Value, json};

use crate::context::FIELD_MANAGER;
use crate::error::{Error, Result};

pub fn xrd_resource() -> ApiResource {
    let gvk = GroupVersionKind::gvk("apiextensions.crossplane.io", "v1", "CompositeResourceDefinition");
    ApiResource::from_gvk_with_plural(&gvk, "compositeresourcedefinitions")
}

pub fn kind_name(kind: TargetKind) -> &'static str {
    match kind {
        TargetKind::Crd => "CustomResourceDefinition",
        TargetKind::Xrd => "CompositeResourceDefinition",
    }
}

fn api_version(kind: TargetKind) -> &'static str {
    match kind {
        TargetKind::Crd => "apiextensions.k8s.io/v1",
        TargetKind::Xrd => "apiextensions.crossplane.io/v1",
    }
}

/// Read the target from the apiserver (authoritative: the wiring the handover reads must not
/// lag behind the operator's own last patch). `None` when it does not exist — including XRDs
/// on a cluster without Crossplane.
pub async fn fetch(client: &Client, kind: TargetKind, name: &str) -> Result<Option<Value>> {
    let value = match kind {
        TargetKind::Crd => {
            let api: Api<CustomResourceDefinition> = Api::all(client.clone());
            let crd =
                api.get_opt(name).await.map_err(Error::kube("read", "CustomResourceDefinition", name))?;
            crd.map(serde_json::to_value).transpose().map_err(|source| Error::Serialize {
                what: format!("CustomResourceDefinition {name}"),
                source,
            })?
        }
        TargetKind::Xrd => {
            let api: Api<DynamicObject> = Api::all_with(client.clone(), &xrd_resource());
            match api.get_opt(name).await {
                Ok(o) => o.map(serde_json::to_value).transpose().map_err(|source| Error::Serialize {
                    what: format!("CompositeResourceDefinition {name}"),
                    source,
                })?,
                // No Crossplane: the kind itself is unknown.
                Err(kube::Error::Api(s)) if s.code == 404 => None,
                Err(e) => return Err(Error::kube("read", "CompositeResourceDefinition", name)(e)),
            }
        }
    };
    Ok(value)
}

/// `status.conditions[Established]` is True.
pub fn established(target: &Value) -> bool {
    target
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| cs.iter().any(|c| c["type"] == "Established" && c["status"] == "True"))
}

/// How many versions the target serves.
pub fn served_versions(target: &Value) -> usize {
    target
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .map_or(0, |vs| vs.iter().filter(|v| v["served"].as_bool().unwrap_or(false)).count())
}

/// `(namespace, name)` of the Service the target's `spec.conversion` names, if it is wired
/// to a webhook Service.
pub fn wired_service(target: &Value) -> Option<(String, String)> {
    let conv = target.pointer("/spec/conversion")?;
    if conv["strategy"] != "Webhook" {
        return None;
    }
    let svc = conv.pointer("/webhook/clientConfig/service")?;
    Some((svc["namespace"].as_str()?.to_string(), svc["name"].as_str()?.to_string()))
}

/// What `spec.conversion` must say to send reviews to a server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wiring {
    pub namespace: String,
    pub service: String,
    pub path: String,
    pub port: i32,
    /// PEM.
    pub ca_bundle: String,
    pub review_versions: Vec<String>,
}

impl Wiring {
    pub fn conversion(&self) -> Value {
        use base64::Engine as _;
        json!({
            "strategy": "Webhook",
            "webhook": {
                "clientConfig": {
                    "service": {
                        "namespace": self.namespace,
                        "name": self.service,
                        "path": self.path,
                        "port": self.port,
                    },
                    "caBundle": base64::engine::general_purpose::STANDARD.encode(self.ca_bundle.as_bytes()),
                },
                "conversionReviewVersions": self.review_versions,
            }
        })
    }

    /// Whether the target already says exactly this (so no write is needed: every write of a
    /// CRD's spec makes every apiserver rebuild its storage).
    pub fn matches(&self, target: &Value) -> bool {
        let Some(conv) = target.pointer("/spec/conversion") else { return false };
        let want = self.conversion();
        conv["strategy"] == want["strategy"]
            && conv.pointer("/webhook/clientConfig/service") == want.pointer("/webhook/clientConfig/service")
            && conv.pointer("/webhook/clientConfig/caBundle")
                == want.pointer("/webhook/clientConfig/caBundle")
            && conv.pointer("/webhook/conversionReviewVersions")
                == want.pointer("/webhook/conversionReviewVersions")
    }
}

fn apply_body(kind: TargetKind, name: &str, conversion: Value) -> Value {
    json!({
        "apiVersion": api_version(kind),
        "kind": kind_name(kind),
        "metadata": { "name": name },
        "spec": { "conversion": conversion },
    })
}

async fn apply(
    client: &Client,
    kind: TargetKind,
    name: &str,
    body: &Value,
    action: &'static str,
) -> Result<Value> {
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    let v = match kind {
        TargetKind::Crd => {
            let api: Api<CustomResourceDefinition> = Api::all(client.clone());
            let crd = api.patch(name, &pp, &Patch::Apply(body)).await.map_err(Error::kube(
                action,
                "CustomResourceDefinition",
                name,
            ))?;
            serde_json::to_value(crd).map_err(|source| Error::Serialize {
                what: format!("CustomResourceDefinition {name}"),
                source,
            })?
        }
        TargetKind::Xrd => {
            let api: Api<DynamicObject> = Api::all_with(client.clone(), &xrd_resource());
            let xrd = api.patch(name, &pp, &Patch::Apply(body)).await.map_err(Error::kube(
                action,
                "CompositeResourceDefinition",
                name,
            ))?;
            serde_json::to_value(xrd).map_err(|source| Error::Serialize {
                what: format!("CompositeResourceDefinition {name}"),
                source,
            })?
        }
    };
    Ok(v)
}

/// Server-side apply `spec.conversion` so reviews go to `wiring`; returns the target after.
pub async fn wire(client: &Client, kind: TargetKind, name: &str, wiring: &Wiring) -> Result<Value> {
    apply(client, kind, name, &apply_body(kind, name, wiring.conversion()), "wire spec.conversion of").await
}

/// Give `spec.conversion` back: strategy None, and the webhook fields this manager owned go.
pub async fn unwire(client: &Client, kind: TargetKind, name: &str) -> Result<Value> {
    apply(
        client,
        kind,
        name,
        &apply_body(kind, name, json!({"strategy": "None"})),
        "revert spec.conversion of",
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wiring() -> Wiring {
        Wiring {
            namespace: "dco-system".into(),
            service: "dco-webhook-a".into(),
            path: "/convert/widgets.example.org".into(),
            port: 443,
            ca_bundle: "-----BEGIN CERTIFICATE-----\nX\n-----END CERTIFICATE-----\n".into(),
            review_versions: vec!["v1".into()],
        }
    }

    #[test]
    fn reads_the_wiring_it_writes() {
        let w = wiring();
        let target = json!({
            "spec": {"conversion": w.conversion(), "versions": [{"name": "v1", "served": true}, {"name": "v2", "served": true}, {"name": "v0", "served": false}]},
            "status": {"conditions": [{"type": "Established", "status": "True"}]},
        });
        assert_eq!(wired_service(&target), Some(("dco-system".into(), "dco-webhook-a".into())));
        assert!(w.matches(&target));
        assert!(established(&target));
        assert_eq!(served_versions(&target), 2);
        let other = Wiring { service: "dco-webhook-b".into(), ..wiring() };
        assert!(!other.matches(&target));
        let rotated = Wiring { ca_bundle: "other".into(), ..wiring() };
        assert!(!rotated.matches(&target));
    }

    #[test]
    fn none_and_url_webhooks_name_no_service() {
        assert_eq!(wired_service(&json!({"spec": {"conversion": {"strategy": "None"}}})), None);
        let url = json!({"spec": {"conversion": {"strategy": "Webhook", "webhook": {"clientConfig": {"url": "https://x"}}}}});
        assert_eq!(wired_service(&url), None);
        assert!(!established(
            &json!({"status": {"conditions": [{"type": "Established", "status": "False"}]}})
        ));
    }

    #[test]
    fn apply_bodies_carry_only_spec_conversion() {
        let b = apply_body(TargetKind::Xrd, "xdbs.example.org", wiring().conversion());
        assert_eq!(b["apiVersion"], "apiextensions.crossplane.io/v1");
        assert_eq!(b["spec"].as_object().unwrap().len(), 1);
        assert_eq!(b["spec"]["conversion"]["webhook"]["clientConfig"]["service"]["port"], 443);
    }
}

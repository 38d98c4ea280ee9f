//! SubjectAccessReviews against the local cluster's apiserver: what a ServiceAccount may do,
//! asked the way the apiserver decides it (docs/installation.md, "RBAC").

use anyhow::Result;
use k8s_openapi::api::authorization::v1::{ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
use kube::api::{Api, PostParams};

/// One question: ((verb, group, resource[/sub]), namespace (None: every namespace, or a
/// cluster-scoped resource), object name).
pub type Check<'a> = ((&'a str, &'a str, &'a str), Option<&'a str>, Option<&'a str>);

/// One SubjectAccessReview: can ServiceAccount `user` (namespace, name) do `verb` on
/// `group/resource[/sub]` (in `ns`, or in every namespace / cluster-wide when None), on object
/// `name`?
pub async fn can(
    client: &kube::Client,
    user: &(String, String),
    (verb, group, resource): (&str, &str, &str),
    ns: Option<&str>,
    name: Option<&str>,
) -> Result<bool> {
    let (resource, sub) = match resource.split_once('/') {
        Some((r, s)) => (r, Some(s.to_string())),
        None => (resource, None),
    };
    let sar = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(format!("system:serviceaccount:{}:{}", user.0, user.1)),
            groups: Some(vec![
                "system:serviceaccounts".to_string(),
                format!("system:serviceaccounts:{}", user.0),
                "system:authenticated".to_string(),
            ]),
            resource_attributes: Some(ResourceAttributes {
                verb: Some(verb.to_string()),
                group: Some(group.to_string()),
                resource: Some(resource.to_string()),
                subresource: sub,
                namespace: ns.map(str::to_string),
                name: name.map(str::to_string),
                ..ResourceAttributes::default()
            }),
            ..SubjectAccessReviewSpec::default()
        },
        ..SubjectAccessReview::default()
    };
    let out = Api::<SubjectAccessReview>::all(client.clone()).create(&PostParams::default(), &sar).await?;
    Ok(out.status.is_some_and(|s| s.allowed))
}

/// Asks every check for `user`; returns the ones whose answer is not `want`.
pub async fn audit(
    client: &kube::Client,
    user: &(String, String),
    checks: &[Check<'_>],
    want: bool,
) -> Result<Vec<String>> {
    let mut wrong = Vec::new();
    for (what, ns, name) in checks {
        if can(client, user, *what, *ns, *name).await? != want {
            wrong.push(format!("{} {}/{} ns={ns:?} name={name:?}", what.0, what.1, what.2));
        }
    }
    Ok(wrong)
}

/// Every verb on every resource of `group`, in `ns`, no name.
pub fn expand<'a>(
    verbs: &[&'a str],
    group: &'a str,
    resources: &[&'a str],
    ns: Option<&'a str>,
) -> Vec<Check<'a>> {
    let mut out = Vec::new();
    for v in verbs {
        for r in resources {
            out.push(((*v, group, *r), ns, None));
        }
    }
    out
}

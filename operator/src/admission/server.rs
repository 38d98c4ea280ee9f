//! The rules of ConversionWebhookServers (docs/admission.md, "Servers"). Each compares the
//! servers as they are (the operator's cache) with the servers as they would be after this
//! request, so a create, an update and a delete are judged alike: a state is refused only
//! when this request produces it.

use dco_api::assign::{ServerInfo, Servers};
use dco_api::{ANNOTATION_ALLOW_FORCE_DELETE, ConversionWebhookServer};
use kube::ResourceExt;

use super::{Findings, Operation, Validate, Verdict};
use crate::server::desired::{MANAGED_FLAGS, split_extra_args};

/// A config as the in-use check resolves it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigPin {
    pub kind: &'static str,
    pub name: String,
    pub target: String,
    pub pin: Option<String>,
}

#[derive(Clone, Debug, Default)]
pub struct ServerFacts {
    /// Every server this operator manages, as its cache holds them.
    pub servers: Vec<ConversionWebhookServer>,
    /// The configs this operator manages, read for a DELETE only; `Err` when the list failed.
    pub configs: Option<Result<Vec<ConfigPin>, String>>,
}

impl Validate for ConversionWebhookServer {
    type Facts = ServerFacts;

    fn validate(op: Operation, new: Option<&Self>, old: Option<&Self>, facts: &ServerFacts) -> Verdict {
        let Some(this) = new.or(old) else {
            return Verdict { allowed: true, message: None, warnings: vec![] };
        };
        let name = this.name_any();
        let mut f = Findings::new("ConversionWebhookServer", &name);
        match op {
            Operation::Create | Operation::Update => {
                let Some(new) = new else { return f.verdict() };
                // Metadata-only updates (finalizers, labels) and an object on its way out are
                // never refused: the operator must be able to drop its finalizer.
                if new.metadata.deletion_timestamp.is_some() || old.is_some_and(|o| o.spec == new.spec) {
                    return f.verdict();
                }
                extra_args(new, &mut f);
                let after = replaced(&facts.servers, &name, Some(new));
                defaults(new, &after, &mut f);
                pool(&facts.servers, &after, &mut f, new);
            }
            Operation::Delete => {
                let Some(old) = old else { return f.verdict() };
                if old.metadata.deletion_timestamp.is_some() {
                    return f.verdict();
                }
                let after = replaced(&facts.servers, &name, None);
                pool_on_delete(&facts.servers, &after, old, &mut f);
                in_use(old, facts, &mut f);
            }
        }
        f.verdict()
    }
}

/// The servers with `name` replaced by `with` (or removed), as the resolver sees them.
fn replaced(
    servers: &[ConversionWebhookServer],
    name: &str,
    with: Option<&ConversionWebhookServer>,
) -> Vec<ServerInfo> {
    let mut out: Vec<ServerInfo> =
        servers.iter().filter(|s| s.name_any() != name).map(ServerInfo::from).collect();
    out.extend(with.map(ServerInfo::from));
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

fn extra_args(s: &ConversionWebhookServer, f: &mut Findings) {
    let (_, refused) = split_extra_args(&s.spec.extra_args);
    if refused.is_empty() {
        return;
    }
    let at: Vec<String> = s
        .spec
        .extra_args
        .iter()
        .enumerate()
        .filter(|(_, a)| refused.contains(a))
        .map(|(i, a)| format!("[{i}] {a:?}"))
        .collect();
    f.deny(
        "spec.extraArgs",
        format!(
            "{} set(s) a flag the operator manages ({}); remove it: the operator sets these itself from the server's spec",
            at.join(", "),
            MANAGED_FLAGS.join(", ")
        ),
    );
}

fn defaults(new: &ConversionWebhookServer, after: &[ServerInfo], f: &mut Findings) {
    if !new.spec.default {
        return;
    }
    let others: Vec<&str> =
        after.iter().filter(|s| s.default && s.name != new.name_any()).map(|s| s.name.as_str()).collect();
    if !others.is_empty() {
        f.deny(
            "spec.default",
            format!(
                "ConversionWebhookServer {} already has spec.default: true; only one server may be the default: set default: false on it first, or leave this one false",
                others.join(", ")
            ),
        );
    }
}

/// What breaks the invariant that makes the precedence safe (docs/configuration.md, "Which
/// server serves a target"): a pool exists while the server marked default is not in it, so
/// every unpinned config would leave the default for the pool at once. A pool with no default
/// at all keeps it (nothing answers for unpinned configs but the pool), and moving the default
/// inside a pool passes through that state: unset it here, set it there.
fn broken(after: &[ServerInfo]) -> Option<String> {
    let pool: Vec<&str> = after.iter().filter(|s| s.pool_weight.is_some()).map(|s| s.name.as_str()).collect();
    if pool.is_empty() {
        return None;
    }
    if let Some(d) = after.iter().find(|s| s.default && s.pool_weight.is_none()) {
        return Some(format!(
            "the pool ({}) would exist while the default server {} is not in it",
            pool.join(", "),
            d.name
        ));
    }
    None
}

fn pool(
    current: &[ConversionWebhookServer],
    after: &[ServerInfo],
    f: &mut Findings,
    new: &ConversionWebhookServer,
) {
    let before: Vec<ServerInfo> = current.iter().map(ServerInfo::from).collect();
    if let Some(why) = broken(after)
        && broken(&before).is_none()
    {
        let (path, fix) = if new.spec.default && new.pool_weight().is_none() {
            (
                "spec.sharding.enabled",
                "keep the default server in the pool (sharding.enabled: true) while other servers are in it, or take them out of the pool first",
            )
        } else if new.pool_weight().is_some() {
            (
                "spec.sharding.enabled",
                "enable sharding on the default server first (a pool of one moves nothing), then on this one",
            )
        } else {
            (
                "spec.default",
                "move spec.default to a server in the pool, or take the other servers out of the pool first",
            )
        };
        f.deny(
            path,
            format!("{why}, and every unpinned config would move onto the pool at once: the default server must be in the pool while the pool exists (docs/configuration.md, \"Which server serves a target\"); {fix}"),
        );
    }
}

fn pool_on_delete(
    current: &[ConversionWebhookServer],
    after: &[ServerInfo],
    old: &ConversionWebhookServer,
    f: &mut Findings,
) {
    let before: Vec<ServerInfo> = current.iter().map(ServerInfo::from).collect();
    // Checked on delete too, as on every write: the state after the request is what counts.
    if let Some(why) = broken(after)
        && broken(&before).is_none()
    {
        f.deny(
            "",
            format!(
                "deleting it: {why}; take the other servers out of the pool, or put the default server in it, before deleting {}",
                old.name_any()
            ),
        );
    }
}

/// Deleting a server configs still resolve to (as things are now, with it not yet deleting).
fn in_use(old: &ConversionWebhookServer, facts: &ServerFacts, f: &mut Findings) {
    let name = old.name_any();
    if old.annotations().get(ANNOTATION_ALLOW_FORCE_DELETE).is_some_and(|v| v == "true") {
        f.warn(
            "",
            format!(
                "deleted with {ANNOTATION_ALLOW_FORCE_DELETE}=true while configs may resolve to it: it goes at once, and targets still wired to it fail every conversion until their configs wire them to a server that exists (condition Applied, reason WiredServerMissing)"
            ),
        );
        return;
    }
    let configs = match &facts.configs {
        None => return,
        Some(Err(e)) => {
            f.deny(
                "",
                format!(
                    "cannot tell whether configs still resolve to it ({e}); try again, or set annotation {ANNOTATION_ALLOW_FORCE_DELETE}=true to delete it anyway"
                ),
            );
            return;
        }
        Some(Ok(c)) => c,
    };
    let servers = Servers::new(facts.servers.iter().map(ServerInfo::from));
    let users: Vec<String> = configs
        .iter()
        .filter(|c| servers.resolve(&c.target, c.pin.as_deref()).is_ok_and(|a| a.server == name))
        .map(|c| format!("{} {} (target {})", c.kind, c.name, c.target))
        .collect();
    if users.is_empty() {
        return;
    }
    let listed: Vec<&str> = users.iter().take(5).map(String::as_str).collect();
    let more = if users.len() > 5 { format!(" and {} more", users.len() - 5) } else { String::new() };
    f.deny(
        "",
        format!(
            "{} config(s) still resolve to it: {}{more}; move them first (change their spec.webhookServerRef, or take this server out of the pool / off default), or set annotation {ANNOTATION_ALLOW_FORCE_DELETE}=true to delete it anyway",
            users.len(),
            listed.join(", ")
        ),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn server(name: &str, default: bool, pool: bool) -> ConversionWebhookServer {
        serde_json::from_value(json!({
            "apiVersion": "conversion.dco.rs/v1alpha1", "kind": "ConversionWebhookServer",
            "metadata": {"name": name},
            "spec": {"default": default, "sharding": {"enabled": pool}},
        }))
        .unwrap()
    }

    fn facts(servers: Vec<ConversionWebhookServer>) -> ServerFacts {
        ServerFacts { servers, configs: None }
    }

    fn msg(v: Verdict) -> String {
        assert!(!v.allowed, "admitted: {v:?}");
        v.message.unwrap()
    }

    #[test]
    fn a_second_default_is_refused() {
        let fa = facts(vec![server("a", true, false)]);
        let m = msg(ConversionWebhookServer::validate(
            Operation::Create,
            Some(&server("b", true, false)),
            None,
            &fa,
        ));
        assert_eq!(
            m,
            "ConversionWebhookServer b: spec.default: ConversionWebhookServer a already has spec.default: true; only one server may be the default: set default: false on it first, or leave this one false"
        );
        // The default itself, updated: not a second one.
        let mut a2 = server("a", true, false);
        a2.spec.replicas = 3;
        assert!(
            ConversionWebhookServer::validate(
                Operation::Update,
                Some(&a2),
                Some(&server("a", true, false)),
                &fa
            )
            .allowed
        );
    }

    #[test]
    fn the_pool_keeps_the_default_on_create_update_and_delete() {
        // Create: a pool member while the default is outside the pool.
        let fa = facts(vec![server("d", true, false)]);
        let m = msg(ConversionWebhookServer::validate(
            Operation::Create,
            Some(&server("p", false, true)),
            None,
            &fa,
        ));
        assert!(m.starts_with("ConversionWebhookServer p: spec.sharding.enabled: the pool (p) would exist while the default server d is not in it"), "{m}");
        assert!(
            m.contains(
                "every unpinned config would move onto the pool at once: the default server must be in the pool while the pool exists (docs/configuration.md, \"Which server serves a target\")"
            ),
            "{m}"
        );
        assert!(
            m.ends_with(
                "enable sharding on the default server first (a pool of one moves nothing), then on this one"
            ),
            "{m}"
        );
        // The valid order: the default joins first, then the others.
        let d_in = server("d", true, true);
        assert!(
            ConversionWebhookServer::validate(
                Operation::Update,
                Some(&d_in),
                Some(&server("d", true, false)),
                &fa
            )
            .allowed
        );
        let fa = facts(vec![d_in.clone()]);
        assert!(
            ConversionWebhookServer::validate(Operation::Create, Some(&server("p", false, true)), None, &fa)
                .allowed
        );
        // Update: the default leaves a pool that has other members.
        let fa = facts(vec![d_in.clone(), server("p", false, true)]);
        let m = msg(ConversionWebhookServer::validate(
            Operation::Update,
            Some(&server("d", true, false)),
            Some(&d_in),
            &fa,
        ));
        assert!(
            m.contains(
                "spec.sharding.enabled: the pool (p) would exist while the default server d is not in it"
            ),
            "{m}"
        );
        // Moving the default inside the pool: unset it (a pool without a default keeps the
        // invariant), then set it on a member.
        let d_off = server("d", false, true);
        assert!(ConversionWebhookServer::validate(Operation::Update, Some(&d_off), Some(&d_in), &fa).allowed);
        let fa2 = facts(vec![d_off, server("p", false, true)]);
        assert!(
            ConversionWebhookServer::validate(
                Operation::Update,
                Some(&server("p", true, true)),
                Some(&server("p", false, true)),
                &fa2
            )
            .allowed
        );
        // Deleting a plain pool member breaks nothing.
        assert!(
            ConversionWebhookServer::validate(Operation::Delete, None, Some(&server("p", false, true)), &fa)
                .allowed
        );
    }

    #[test]
    fn managed_flags_in_extra_args_are_refused_in_both_forms() {
        let mut s = server("s", false, false);
        s.spec.extra_args =
            vec!["--drain-period=5s".into(), "--listen=0.0.0.0:1".into(), "--instance".into(), "x".into()];
        let m = msg(ConversionWebhookServer::validate(Operation::Create, Some(&s), None, &facts(vec![])));
        assert!(m.starts_with("ConversionWebhookServer s: spec.extraArgs: [1] \"--listen=0.0.0.0:1\", [2] \"--instance\", [3] \"x\" set(s) a flag the operator manages (--instance, --service-name"), "{m}");
        s.spec.extra_args = vec!["--drain-period=5s".into()];
        assert!(ConversionWebhookServer::validate(Operation::Create, Some(&s), None, &facts(vec![])).allowed);
    }

    #[test]
    fn deleting_a_server_in_use_needs_the_annotation() {
        let s = server("s", true, false);
        let mut fa = facts(vec![s.clone(), server("t", false, false)]);
        fa.configs = Some(Ok(vec![
            ConfigPin { kind: "CRDConversionConfig", name: "a".into(), target: "as.x".into(), pin: None },
            ConfigPin {
                kind: "CRDConversionConfig",
                name: "b".into(),
                target: "bs.x".into(),
                pin: Some("t".into()),
            },
        ]));
        let m = msg(ConversionWebhookServer::validate(Operation::Delete, None, Some(&s), &fa));
        assert_eq!(
            m,
            "ConversionWebhookServer s: 1 config(s) still resolve to it: CRDConversionConfig a (target as.x); move them first (change their spec.webhookServerRef, or take this server out of the pool / off default), or set annotation conversion.dco.rs/allow-force-delete=true to delete it anyway"
        );
        assert!(
            !ConversionWebhookServer::validate(
                Operation::Delete,
                None,
                Some(&server("t", false, false)),
                &fa
            )
            .allowed
        );
        let mut forced = s.clone();
        forced.metadata.annotations =
            Some([(ANNOTATION_ALLOW_FORCE_DELETE.to_string(), "true".to_string())].into());
        let v = ConversionWebhookServer::validate(Operation::Delete, None, Some(&forced), &fa);
        assert!(v.allowed && v.warnings.len() == 1, "{v:?}");
        fa.configs = Some(Ok(vec![]));
        assert!(ConversionWebhookServer::validate(Operation::Delete, None, Some(&s), &fa).allowed);
    }

    #[test]
    fn a_metadata_only_update_passes_even_when_the_spec_is_already_invalid() {
        let mut s = server("s", false, false);
        s.spec.extra_args = vec!["--listen=x".into()];
        let mut with_finalizer = s.clone();
        with_finalizer.metadata.finalizers = Some(vec!["conversion.dco.rs/in-use".into()]);
        assert!(
            ConversionWebhookServer::validate(
                Operation::Update,
                Some(&with_finalizer),
                Some(&s),
                &facts(vec![])
            )
            .allowed
        );
    }
}

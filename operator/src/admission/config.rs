//! The rules of both config kinds (docs/admission.md, "Configs").
//!
//! Two passes. The structural one needs no schema, so it runs whether the target exists or
//! not: params blocks against `strategy` at every nesting level (`ConversionRule::params`, the
//! same check the engine starts each rule with), nesting depth (`dco_engine::compile::MAX_NESTING`),
//! spokes, `when`, CEL, metadata keys. The second is the engine's own compile against the live
//! target (`config::facts::compile`'s call, `dco_engine::compile`): its lossy-rule errors are
//! refused; its other errors are warnings, since they can depend on the order a platform team
//! applies the target and the config in, and the controller reports them as `Validated=False`.

use std::collections::BTreeMap;

use dco_api::ConversionSpec;
use dco_api::config::{ConversionConfig, TargetKind};
use dco_api::rules::Serialization;
use dco_api::rules::{ConversionRule, Params, Strategy};
use dco_api::{CRDConversionConfig, XRDConversionConfig};
use dco_engine::compile::MAX_NESTING;
use serde_json::Value;

use super::{Findings, Operation, Validate, Verdict};

impl Validate for CRDConversionConfig {
    type Facts = ConfigFacts;
    fn validate(op: Operation, new: Option<&Self>, old: Option<&Self>, facts: &ConfigFacts) -> Verdict {
        of_kind(op, new, old, facts)
    }
}

impl Validate for XRDConversionConfig {
    type Facts = ConfigFacts;
    fn validate(op: Operation, new: Option<&Self>, old: Option<&Self>, facts: &ConfigFacts) -> Verdict {
        of_kind(op, new, old, facts)
    }
}

fn of_kind<K: ConversionConfig + kube::Resource>(
    op: Operation,
    new: Option<&K>,
    old: Option<&K>,
    facts: &ConfigFacts,
) -> Verdict {
    match new {
        Some(n) => validate(op, &ConfigObject::of(n), old.map(ConfigObject::of).as_ref(), facts),
        // DELETE: nothing of a config's is refused (its finalizer reverts the target).
        None => Verdict { allowed: true, message: None, warnings: vec![] },
    }
}

/// The live target as admission read it.
#[derive(Clone, Debug)]
pub enum TargetLookup {
    Found(Value),
    Missing,
    /// The read failed or timed out: the compile check is skipped with a warning.
    Unknown(String),
}

/// Another config, as the duplicate check needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OtherConfig {
    pub kind: &'static str,
    pub name: String,
    pub target: String,
    pub deleting: bool,
}

/// Everything a config's rules read besides the object.
#[derive(Clone, Debug)]
pub struct ConfigFacts {
    pub target: TargetLookup,
    /// Every config of both kinds; `None` when the check does not apply (an update that keeps
    /// the target), `Some(Err)` when the list failed.
    pub others: Option<Result<Vec<OtherConfig>, String>>,
    /// The names of the ConversionWebhookServers this operator sees.
    pub servers: Vec<String>,
}

/// One config under review, both kinds alike.
#[derive(Clone, Debug)]
pub struct ConfigObject<'a> {
    pub kind: &'static str,
    pub name: &'a str,
    pub target_kind: TargetKind,
    pub target: &'a str,
    pub spec: &'a ConversionSpec,
}

impl<'a> ConfigObject<'a> {
    pub fn of<K: ConversionConfig + kube::Resource>(c: &'a K) -> Self {
        ConfigObject {
            kind: K::KIND,
            name: c.meta().name.as_deref().unwrap_or_default(),
            target_kind: c.target_kind(),
            target: c.target_name(),
            spec: c.conversion(),
        }
    }

    fn target_field(&self) -> &'static str {
        match self.target_kind {
            TargetKind::Crd => "spec.targetCRD.name",
            TargetKind::Xrd => "spec.targetXRD.name",
        }
    }

    fn target_desc(&self) -> String {
        match self.target_kind {
            TargetKind::Crd => format!("CustomResourceDefinition {}", self.target),
            TargetKind::Xrd => format!("CompositeResourceDefinition {}", self.target),
        }
    }
}

/// The rules of a config. `old` is the stored object on UPDATE.
pub fn validate(
    op: Operation,
    new: &ConfigObject<'_>,
    old: Option<&ConfigObject<'_>>,
    facts: &ConfigFacts,
) -> Verdict {
    let mut f = Findings::new(new.kind, new.name);
    if op == Operation::Delete {
        return f.verdict();
    }
    // A metadata-only update (the operator's finalizer, labels) is never refused: an object
    // stored before admission existed must still be able to take and drop its finalizer.
    if let Some(old) = old
        && old.spec == new.spec
        && old.target == new.target
    {
        return f.verdict();
    }
    structural(new, &mut f);
    duplicates(new, facts, &mut f);
    if let Some(pin) = &new.spec.webhook_server_ref
        && !facts.servers.contains(&pin.name)
    {
        f.warn(
            "spec.webhookServerRef.name",
            format!(
                "ConversionWebhookServer {} does not exist yet; until it does, the target keeps the wiring it has now (one not wired yet stays unwired) and HandoverReady is False with reason NoServer (create it, or remove the reference to use the pool or the default)",
                pin.name
            ),
        );
    }
    compiled(new, &facts.target, &mut f);
    f.verdict()
}

/// Spokes and every rule at every nesting level.
fn structural(c: &ConfigObject<'_>, f: &mut Findings) {
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, s) in c.spec.spokes.iter().enumerate() {
        let at = format!("spec.spokes[{i}].version");
        if s.version == c.spec.hub_version {
            f.deny(
                &at,
                format!(
                    "{} is the hub version (spec.hubVersion); a spoke cannot be the hub, remove this spoke",
                    s.version
                ),
            );
        } else if let Some(first) = seen.get(s.version.as_str()) {
            f.deny(
                &at,
                format!(
                    "{} is listed twice (also spec.spokes[{first}]); merge its rules into one entry",
                    s.version
                ),
            );
        } else {
            seen.insert(&s.version, i);
        }
        for (j, r) in s.rules.iter().enumerate() {
            rule(r, &format!("spec.spokes[{i}].rules[{j}]"), 0, f);
        }
    }
}

/// One rule at `depth` (0: a spoke's own rules; each ForEach or BranchMap is one deeper, as
/// the engine's `compile_nested` counts).
fn rule(r: &ConversionRule, at: &str, depth: usize, f: &mut Findings) {
    let params = match r.params() {
        Ok(p) => Some(p),
        Err(e) => {
            f.deny(at, e.to_string());
            None
        }
    };
    if let Some(w) = &r.when
        && let Err(e) = dco_engine::value::Path::parse(w.path.trim())
    {
        f.deny(
            &format!("{at}.when.path"),
            format!("{e} (when needs the path whose value selects the rule), or remove when"),
        );
    }
    if r.strategy == Strategy::Cel && !r.acknowledge_lossy {
        f.deny(
            at,
            "strategy CEL is never provably lossless (the engine cannot prove its two expressions are inverses); set acknowledgeLossy: true with a reason",
        );
    }
    if r.acknowledge_lossy && r.reason.trim().is_empty() {
        f.warn(
            &format!("{at}.reason"),
            "acknowledgeLossy is set without a reason; say why the loss is acceptable",
        );
    }
    let nested = |block: &str, rules: &[ConversionRule], f: &mut Findings| {
        if depth + 1 > MAX_NESTING {
            f.deny(
                &format!("{at}.{block}"),
                format!(
                    "nested rules go deeper than {MAX_NESTING} levels (ForEach and BranchMap each open one); flatten the inner rules into the outer scope"
                ),
            );
            return;
        }
        for (k, n) in rules.iter().enumerate() {
            rule(n, &format!("{at}.{block}[{k}]"), depth + 1, f);
        }
    };
    match params {
        Some(Params::ForEach(p)) => nested("forEach.rules", &p.rules, f),
        Some(Params::BranchMap(p)) => {
            for (b, br) in p.branches.iter().enumerate() {
                nested(&format!("branchMap.branches[{b}].rules"), &br.rules, f);
            }
        }
        Some(Params::ToLabel(p)) | Some(Params::ToAnnotation(p)) => {
            key(&p.key, r.strategy, &format!("{at}.{}.key", r.strategy.params_field()), f)
        }
        Some(Params::FromAnnotation(p)) => key(&p.key, r.strategy, &format!("{at}.fromAnnotation.key"), f),
        Some(Params::FromLabel(p)) => {
            key(&p.key, r.strategy, &format!("{at}.fromLabel.key"), f);
            // Written or defaulted alike: a JSON text rarely is a valid label value, so the
            // conversion would fail at run time (`strategies/metadata.rs` validates each one).
            if p.serialization == Serialization::Json {
                f.deny(
                    &format!("{at}.fromLabel.serialization"),
                    "JSON cannot be stored in a label value (63 characters of [A-Za-z0-9_.-], no quotes or braces); use serialization: String, or FromAnnotation for JSON",
                );
            }
        }
        _ => {}
    }
}

fn key(k: &str, strategy: Strategy, at: &str, f: &mut Findings) {
    if let Err(e) = qualified_name(k) {
        let what = match strategy {
            Strategy::ToLabel | Strategy::FromLabel => "label",
            _ => "annotation",
        };
        f.deny(at, format!("{k:?} is not a qualified name ({e}); a {what} key is [prefix/]name, the prefix a lowercase DNS subdomain, the name at most 63 characters of [A-Za-z0-9_.-] starting and ending alphanumeric"));
    }
}

/// A Kubernetes qualified name (`[prefix/]name`), as apimachinery's `IsQualifiedName`. The
/// engine checks the same at compile (`strategies/metadata.rs`, private to it); this runs
/// without a target.
pub fn qualified_name(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if name.is_empty() {
        return Err("the name part is empty".into());
    }
    if name.len() > 63 {
        return Err("the name part is longer than 63 characters".into());
    }
    if !name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')) {
        return Err("the name part may hold only letters, digits, '-', '_' and '.'".into());
    }
    let alnum = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    if !alnum(name.chars().next()) || !alnum(name.chars().last()) {
        return Err("the name part must start and end with a letter or digit".into());
    }
    if let Some(p) = prefix {
        let label_ok = |l: &str| {
            !l.is_empty()
                && l.len() <= 63
                && l.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        };
        if p.is_empty() || p.len() > 253 || !p.split('.').all(label_ok) {
            return Err(format!("the prefix {p:?} is not a lowercase DNS subdomain"));
        }
    }
    Ok(())
}

/// One target, one config: across both kinds, since an XRD and the CRD Crossplane generates
/// for it share the name (and both configs would write its `spec.conversion`).
fn duplicates(c: &ConfigObject<'_>, facts: &ConfigFacts, f: &mut Findings) {
    match &facts.others {
        None => {}
        Some(Err(e)) => f.warn(
            c.target_field(),
            format!("cannot check for another config of {} ({e}); the controller marks both Conflict if there is one", c.target),
        ),
        Some(Ok(others)) => {
            let taken: Vec<String> = others
                .iter()
                .filter(|o| o.target == c.target && !(o.kind == c.kind && o.name == c.name))
                .map(|o| format!("{} {}{}", o.kind, o.name, if o.deleting { " (being deleted: wait until it is gone)" } else { "" }))
                .collect();
            if !taken.is_empty() {
                f.deny(
                    c.target_field(),
                    format!(
                        "{} already has a config: {}; a target takes one config (of either kind): merge the rules into it, or delete it first",
                        c.target,
                        taken.join(", ")
                    ),
                );
            }
        }
    }
}

/// The engine's compile against the live target: a lossy rule without `acknowledgeLossy` is
/// refused; every other error is a warning.
fn compiled(c: &ConfigObject<'_>, target: &TargetLookup, f: &mut Findings) {
    let value = match target {
        TargetLookup::Found(v) => v,
        TargetLookup::Missing => {
            f.warn(
                c.target_field(),
                format!(
                    "{} does not exist yet, so lossy rules are not checked now; the controller checks them when it exists (condition Validated)",
                    c.target_desc()
                ),
            );
            return;
        }
        TargetLookup::Unknown(e) => {
            f.warn(
                c.target_field(),
                format!("cannot read {} ({e}), so lossy rules are not checked now; the controller checks them (condition Validated)", c.target_desc()),
            );
            return;
        }
    };
    let target = match dco_engine::Target::from_value(value) {
        Ok(t) => t,
        Err(e) => {
            f.warn(c.target_field(), format!("cannot read the schemas of {}: {e}", c.target_desc()));
            return;
        }
    };
    let report = dco_engine::compile(c.spec, &target).report;
    let mut other = 0usize;
    for d in report.errors() {
        // CEL is refused without a schema already (`rule`), with its own reason.
        if is_lossy(d) && d.strategy == Some(Strategy::Cel) {
            continue;
        }
        if is_lossy(d) {
            let at = match (&d.spoke, d.rule.as_deref()) {
                (Some(v), Some([first, ..])) => c
                    .spec
                    .spokes
                    .iter()
                    .position(|s| s.version == *v)
                    .map(|i| format!("spec.spokes[{i}].rules[{first}]"))
                    .unwrap_or_default(),
                _ => String::new(),
            };
            f.deny(&at, format!("{d} (against the live schemas of {})", target.describe()));
        } else if f.denials().is_empty() && other < 5 {
            // The structural pass already refused this object: its errors say the same.
            other += 1;
            f.warn("", format!("does not compile against the live target yet: {d}"));
        }
    }
}

/// The engine's lossy-rule error (`compile::compile_rule`); a unit test below pins the text.
fn is_lossy(d: &dco_engine::Diagnostic) -> bool {
    d.message.starts_with("rule is lossy (")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(v: Value) -> ConversionSpec {
        serde_json::from_value(v).unwrap()
    }

    fn facts(target: TargetLookup) -> ConfigFacts {
        ConfigFacts { target, others: Some(Ok(vec![])), servers: vec!["s".into()] }
    }

    fn check(raw: Value, facts: &ConfigFacts) -> Verdict {
        let s = spec(raw);
        let c = ConfigObject {
            kind: "CRDConversionConfig",
            name: "c",
            target_kind: TargetKind::Crd,
            target: "dbs.example.org",
            spec: &s,
        };
        validate(Operation::Create, &c, None, facts)
    }

    fn rename() -> Value {
        json!({"strategy": "FieldRename", "fieldRename": {"hubPath": "spec.a", "spokePath": "spec.b"}})
    }

    fn crd() -> Value {
        let schema = |props: Value| json!({"openAPIV3Schema": {"type": "object", "properties": {"spec": {"type": "object", "properties": props}}}});
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "dbs.example.org"},
            "spec": {"group": "example.org", "scope": "Namespaced",
                "names": {"plural": "dbs", "singular": "db", "kind": "DB", "listKind": "DBList"},
                "versions": [
                    {"name": "v2", "served": true, "storage": true, "schema": schema(json!({"a": {"type": "string"}, "hubOnly": {"type": "string"}}))},
                    {"name": "v1", "served": true, "storage": false, "schema": schema(json!({"b": {"type": "string"}}))}]}})
    }

    #[test]
    fn a_valid_config_is_admitted_and_a_missing_target_warns() {
        let v = check(
            json!({"hubVersion": "v2", "spokes": [{"version": "v1", "rules": [rename()]}]}),
            &facts(TargetLookup::Missing),
        );
        assert!(v.allowed, "{v:?}");
        assert_eq!(v.warnings.len(), 1);
        assert!(
            v.warnings[0].contains("CustomResourceDefinition dbs.example.org does not exist yet"),
            "{v:?}"
        );
    }

    #[test]
    fn params_blocks_are_checked_at_every_level() {
        let bad_inner = json!({"strategy": "FieldRename", "enumRemap": {"path": "x", "mapping": []}});
        let v = check(
            json!({"hubVersion": "v2", "spokes": [{"version": "v1", "rules": [
                {"strategy": "ForEach", "forEach": {"hubItemsPath": "spec.i", "spokeItemsPath": "spec.i", "rules": [bad_inner]}},
                {"strategy": "BranchMap", "branchMap": {"hubPath": "spec.u", "spokePath": "spec.u", "branches": [{"hub": "a", "spoke": "a", "rules": [{"strategy": "Quantity"}]}]}},
                {"strategy": "Delete", "fieldRename": {"hubPath": "a", "spokePath": "b"}}]}]}),
            &facts(TargetLookup::Missing),
        );
        let m = v.message.unwrap();
        assert!(m.contains("spec.spokes[0].rules[0].forEach.rules[0]: params block `enumRemap` does not belong to strategy FieldRename; remove it"), "{m}");
        assert!(m.contains("spec.spokes[0].rules[1].branchMap.branches[0].rules[0]: strategy Quantity needs its params block `quantity`"), "{m}");
        assert!(
            m.contains(
                "spec.spokes[0].rules[2]: params block `fieldRename` does not belong to strategy Delete"
            ),
            "{m}"
        );
    }

    #[test]
    fn for_each_nests_at_most_twice() {
        let fe = |rules: Value| json!({"strategy": "ForEach", "forEach": {"hubItemsPath": "spec.i", "spokeItemsPath": "spec.i", "rules": rules}});
        let two = fe(json!([fe(json!([rename()]))]));
        assert!(
            check(
                json!({"hubVersion": "v2", "spokes": [{"version": "v1", "rules": [two]}]}),
                &facts(TargetLookup::Missing)
            )
            .allowed
        );
        let three = fe(json!([fe(json!([fe(json!([rename()]))]))]));
        let m = check(
            json!({"hubVersion": "v2", "spokes": [{"version": "v1", "rules": [three]}]}),
            &facts(TargetLookup::Missing),
        )
        .message
        .unwrap();
        assert!(m.contains("spec.spokes[0].rules[0].forEach.rules[0].forEach.rules[0].forEach.rules: nested rules go deeper than 2 levels"), "{m}");
    }

    #[test]
    fn spokes_when_cel_keys_and_label_json() {
        let v = check(
            json!({"hubVersion": "v2", "spokes": [
                {"version": "v2", "rules": []},
                {"version": "v1", "rules": [
                    {"strategy": "FieldRename", "fieldRename": {"hubPath": "spec.a", "spokePath": "spec.b"}, "when": {"path": "", "equals": 1}},
                    {"strategy": "CEL", "cel": {"hubPaths": ["spec.a"], "spokePaths": ["spec.b"], "hubToSpoke": "{}", "spokeToHub": "{}"}},
                    {"strategy": "ToLabel", "toLabel": {"hubPath": "spec.a", "key": "Bad Key/x"}},
                    {"strategy": "FromLabel", "fromLabel": {"spokePath": "spec.b", "key": "ok", "serialization": "JSON"}}]},
                {"version": "v1", "rules": []}]}),
            &facts(TargetLookup::Missing),
        );
        let m = v.message.unwrap();
        for want in [
            "spec.spokes[0].version: v2 is the hub version (spec.hubVersion); a spoke cannot be the hub, remove this spoke",
            "spec.spokes[2].version: v1 is listed twice (also spec.spokes[1]); merge its rules into one entry",
            "spec.spokes[1].rules[0].when.path: the path is empty",
            "spec.spokes[1].rules[1]: strategy CEL is never provably lossless",
            "spec.spokes[1].rules[2].toLabel.key: \"Bad Key/x\" is not a qualified name (the prefix \"Bad Key\" is not a lowercase DNS subdomain)",
            "spec.spokes[1].rules[3].fromLabel.serialization: JSON cannot be stored in a label value",
        ] {
            assert!(m.contains(want), "{want}\n in {m}");
        }
        let v = check(
            json!({"hubVersion": "v2", "spokes": [{"version": "v1", "rules": [{"strategy": "FromLabel", "fromLabel": {"spokePath": "spec.b", "key": "ok", "serialization": "String"}}]}]}),
            &facts(TargetLookup::Missing),
        );
        assert!(v.allowed, "{v:?}");
    }

    #[test]
    fn qualified_names() {
        for ok in ["a", "tier", "example.org/x", "a.b-c/Z_9.z"] {
            assert_eq!(qualified_name(ok), Ok(()), "{ok}");
        }
        for bad in ["", "-a", "a b", "/x", "Ex.org/x", "x/", &"a".repeat(64)] {
            assert!(qualified_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn two_configs_for_one_target_across_kinds() {
        let mut fa = facts(TargetLookup::Missing);
        fa.others = Some(Ok(vec![
            OtherConfig {
                kind: "CRDConversionConfig",
                name: "c".into(),
                target: "dbs.example.org".into(),
                deleting: false,
            },
            OtherConfig {
                kind: "XRDConversionConfig",
                name: "x".into(),
                target: "dbs.example.org".into(),
                deleting: false,
            },
        ]));
        let m = check(json!({"hubVersion": "v2", "spokes": [{"version": "v1", "rules": []}]}), &fa)
            .message
            .unwrap();
        assert_eq!(
            m,
            "CRDConversionConfig c: spec.targetCRD.name: dbs.example.org already has a config: XRDConversionConfig x; a target takes one config (of either kind): merge the rules into it, or delete it first"
        );
    }

    #[test]
    fn lossy_rules_are_refused_against_the_live_schema_and_warnings_shown() {
        let del = json!({"strategy": "Delete", "delete": {"path": "spec.hubOnly", "existsOn": "Hub"}});
        let mut fa = facts(TargetLookup::Found(crd()));
        fa.servers = vec![];
        let v = check(
            json!({"hubVersion": "v2", "webhookServerRef": {"name": "later"}, "spokes": [{"version": "v1", "rules": [rename(), del.clone()]}]}),
            &fa,
        );
        let m = v.message.clone().unwrap();
        assert!(m.starts_with("CRDConversionConfig c: spec.spokes[0].rules[1]: spoke v1, rule 1 (Delete) spec.hubOnly: rule is lossy ("), "{m}");
        assert!(m.contains("set acknowledgeLossy: true with a reason if the loss is acceptable (against the live schemas of CustomResourceDefinition dbs.example.org)"), "{m}");
        assert!(
            v.warnings.iter().any(|w| w
                .contains("spec.webhookServerRef.name: ConversionWebhookServer later does not exist yet")),
            "{v:?}"
        );
        let mut acked = del;
        acked["acknowledgeLossy"] = json!(true);
        let v = check(
            json!({"hubVersion": "v2", "spokes": [{"version": "v1", "rules": [rename(), acked]}]}),
            &facts(TargetLookup::Found(crd())),
        );
        assert!(v.allowed, "{v:?}");
        assert_eq!(
            v.warnings,
            [
                "CRDConversionConfig c spec.spokes[0].rules[1].reason: acknowledgeLossy is set without a reason; say why the loss is acceptable"
            ]
        );
    }

    #[test]
    fn a_metadata_only_update_is_admitted() {
        let raw = json!({"hubVersion": "v2", "spokes": [{"version": "v2", "rules": []}]});
        let s = spec(raw);
        let c = ConfigObject {
            kind: "CRDConversionConfig",
            name: "c",
            target_kind: TargetKind::Crd,
            target: "t",
            spec: &s,
        };
        assert!(validate(Operation::Update, &c, Some(&c.clone()), &facts(TargetLookup::Missing)).allowed);
        assert!(!validate(Operation::Create, &c, None, &facts(TargetLookup::Missing)).allowed);
    }
}

//! `convctl crossplane status [--xrd NAME]`: per context, each Crossplane XRD as dco sees it
//! (docs/convctl.md, "crossplane status"; docs/crossplane.md): its versions (served,
//! referenceable, deprecated, hub or spoke of its config), the Service its `spec.conversion`
//! calls, the CRDs Crossplane generates from it (the XR's and the claim's) and whether each
//! carries the XRD's wiring — only those make the apiserver call a webhook — the
//! XRDConversionConfig naming it with its phase, server and conditions, and whether a
//! Crossplane package owns it (its package manager rewrites the XRD and may revert dco's
//! wiring). Read only: nothing is written.
//!
//! Fails (exit 1) on what breaks conversion: a wired XRD whose generated CRD lacks the wiring,
//! a config whose `Validated`, `Applied` or `ConversionPropagated` is False, an unreachable
//! context, `--xrd NAME` missing; everything else is shown, not failed.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use clap::{Args, Subcommand};
use dco_api::target::{STRATEGY_WEBHOOK, XrdVersion};
use dco_engine::Target;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, ListParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use crate::CliError;
use crate::live::cluster::{ClusterArgs, Member};
use crate::live::{paged, target as live_target};
use crate::output::{Finding, Location, OutputArgs, Report, Severity};

/// At most this many XRDs, and XRDConversionConfigs, are read per context (one small record
/// is kept per object; the objects themselves a page at a time).
pub const MAX_XRDS: usize = 10_000;
pub const MAX_CONFIGS: usize = 10_000;
/// The config conditions whose False breaks or stops conversion of the target.
const FAILING_CONDITIONS: [&str; 3] = ["Validated", "Applied", "ConversionPropagated"];
/// Crossplane's package kinds that own what a package installs, and its package label.
const PKG_GROUP: &str = "pkg.crossplane.io/";
const PKG_OWNERS: [&str; 2] = ["ConfigurationRevision", "Configuration"];
const PKG_LABEL: &str = "pkg.crossplane.io/package";

#[derive(Subcommand)]
pub enum Crossplane {
    /// Each XRD's versions, generated CRDs, propagation of dco's wiring, config and package owner.
    Status(StatusArgs),
}

#[derive(Args)]
pub struct StatusArgs {
    /// Only this XRD (its name, `<plural>.<group>`); a missing one is a finding.
    #[arg(short = 'x', long = "xrd", value_name = "NAME")]
    pub xrd_name: Option<String>,
    #[command(flatten)]
    pub cluster: ClusterArgs,
    #[command(flatten)]
    pub out: OutputArgs,
}

pub fn run(c: &Crossplane) -> Result<(), CliError> {
    match c {
        Crossplane::Status(args) => status(args),
    }
}

/// An XRD's or CRD's `spec.conversion` webhook reduced to what decides where the apiserver
/// sends a review; `None` unless it is a Webhook strategy naming a Service.
pub fn wiring_key(obj: &Value) -> Option<Value> {
    let conv = obj.pointer("/spec/conversion")?;
    if conv.get("strategy").and_then(Value::as_str) != Some(STRATEGY_WEBHOOK) {
        return None;
    }
    let cc = conv.pointer("/webhook/clientConfig")?;
    let svc = cc.get("service")?;
    Some(json!({
        "namespace": svc.get("namespace"), "name": svc.get("name"),
        "path": svc.get("path").and_then(Value::as_str).unwrap_or("/"),
        "port": svc.get("port").and_then(Value::as_i64).unwrap_or(443),
        "caBundle": cc.get("caBundle"),
        "reviewVersions": conv.pointer("/webhook/conversionReviewVersions"),
    }))
}

/// `namespace/name path` of the Service a wiring names, or the strategy when none.
fn wiring_text(obj: &Value) -> String {
    match wiring_key(obj) {
        Some(k) => format!(
            "{}/{} {}",
            k["namespace"].as_str().unwrap_or("?"),
            k["name"].as_str().unwrap_or("?"),
            k["path"].as_str().unwrap_or("/")
        ),
        None => match obj.pointer("/spec/conversion/strategy").and_then(Value::as_str) {
            Some(s) => format!("none (strategy {s})"),
            None => "none".into(),
        },
    }
}

/// The Crossplane package owning an XRD, described; `None` when none does.
pub fn package_owner(xrd: &Value) -> Option<String> {
    let owners = xrd.pointer("/metadata/ownerReferences").and_then(Value::as_array);
    if let Some(o) = owners.into_iter().flatten().find(|o| {
        o["apiVersion"].as_str().is_some_and(|a| a.starts_with(PKG_GROUP))
            && o["kind"].as_str().is_some_and(|k| PKG_OWNERS.contains(&k))
    }) {
        return Some(format!("{} {}", o["kind"].as_str()?, o["name"].as_str()?));
    }
    let label = xrd.pointer("/metadata/labels").and_then(|l| l.get(PKG_LABEL)).and_then(Value::as_str)?;
    Some(format!("package {label} (label {PKG_LABEL})"))
}

/// What is kept of an XRD while the list pages on.
#[derive(Clone, Debug)]
pub struct XrdRecord {
    pub name: String,
    pub kind: String,
    pub scope: String,
    /// `(name, served, referenceable, deprecated)`.
    pub versions: Vec<(String, bool, bool, bool)>,
    pub wiring: Option<Value>,
    pub wiring_text: String,
    pub generated: Vec<String>,
    pub package: Option<String>,
}

impl XrdRecord {
    pub fn of(v: &Value) -> XrdRecord {
        let s = |p: &str| v.pointer(p).and_then(Value::as_str).unwrap_or_default().to_string();
        let b = |x: &Value, k: &str| x.get(k).and_then(Value::as_bool).unwrap_or(false);
        let versions = v
            .pointer("/spec/versions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|x| {
                let name = x.get("name").and_then(Value::as_str).unwrap_or_default().to_string();
                (name, b(x, "served"), b(x, "referenceable"), b(x, "deprecated"))
            })
            .collect();
        let name = s("/metadata/name");
        let generated =
            Target::from_value(v).map(|t| t.generated_crds()).unwrap_or_else(|_| vec![name.clone()]);
        XrdRecord {
            kind: s("/spec/names/kind"),
            scope: v.pointer("/spec/scope").and_then(Value::as_str).unwrap_or("default").to_string(),
            versions,
            wiring: wiring_key(v),
            wiring_text: wiring_text(v),
            generated,
            package: package_owner(v),
            name,
        }
    }
}

/// An XRDConversionConfig as the status shows it.
#[derive(Clone, Debug)]
pub struct ConfigView {
    pub name: String,
    pub hub: String,
    pub spokes: Vec<String>,
    pub phase: String,
    pub server: String,
    /// `(type, status, reason)`.
    pub conditions: Vec<(String, String, String)>,
}

impl ConfigView {
    fn of(o: &DynamicObject) -> (String, ConfigView) {
        let d = &o.data;
        let s = |p: &str| d.pointer(p).and_then(Value::as_str).unwrap_or_default().to_string();
        let conditions = d
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|c| {
                let f = |k: &str| c.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
                (f("type"), f("status"), f("reason"))
            })
            .collect();
        let spokes = d
            .pointer("/spec/spokes")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|sp| sp.get("version").and_then(Value::as_str).map(str::to_string))
            .collect();
        let view = ConfigView {
            name: o.name_any(),
            hub: s("/spec/hubVersion"),
            spokes,
            phase: s("/status/phase"),
            server: s("/status/assignedWebhookServer"),
            conditions,
        };
        (s("/spec/targetXRD/name"), view)
    }
}

/// One generated CRD as read: `None` when it does not exist.
pub struct GeneratedView {
    pub name: String,
    pub role: &'static str,
    pub crd: Option<Value>,
}

/// Whether a generated CRD carries the XRD's wiring: `None` when the XRD has none to carry.
pub fn carries(xrd: &XrdRecord, crd: Option<&Value>) -> Option<bool> {
    let want = xrd.wiring.as_ref()?;
    Some(crd.and_then(wiring_key).as_ref() == Some(want))
}

/// The findings and the JSON of one XRD.
pub fn judge(
    ctx: &str,
    x: &XrdRecord,
    generated: &[GeneratedView],
    cfgs: &[ConfigView],
) -> (Vec<Finding>, Value) {
    let loc = |path: Option<&str>| Location {
        object: Some(format!("CompositeResourceDefinition {}", x.name)),
        path: path.map(str::to_string),
        context: Some(ctx.to_string()),
        ..Location::default()
    };
    let mk = |rule: &str, severity, fails, message: String, fix: Option<&str>, path: Option<&str>| Finding {
        rule: rule.into(),
        severity,
        message: format!("{ctx}: XRD {}: {message}", x.name),
        fix: fix.map(str::to_string),
        location: loc(path),
        fails,
    };
    let mut out = Vec::new();
    let mut gen_json = Vec::new();
    for g in generated {
        let carried = carries(x, g.crd.as_ref());
        if carried == Some(false) {
            let has = g
                .crd
                .as_ref()
                .map_or("it does not exist".to_string(), |c| format!("it has {}", wiring_text(c)));
            out.push(mk(
                "not-propagated",
                Severity::Error,
                true,
                format!(
                    "generated CRD {} ({}) does not carry the XRD's wiring to {}: {has}; the apiserver does not call that webhook for these objects",
                    g.name, g.role, x.wiring_text
                ),
                Some("check that Crossplane runs and reconciles this XRD (it copies spec.conversion into the CRDs it generates)"),
                Some("spec.conversion"),
            ));
        }
        gen_json.push(json!({"name": g.name, "role": g.role, "exists": g.crd.is_some(),
            "conversion": g.crd.as_ref().map(wiring_text), "carriesWiring": carried}));
    }
    if let Some(p) = &x.package {
        out.push(mk(
            "package-managed",
            Severity::Warning,
            false,
            format!("owned by {p}: its package manager rewrites the XRD from the package and may revert changes to it (dco re-wires after each revert)"),
            Some("see docs/crossplane.md, \"XRDs a package manages\""),
            Some("metadata.ownerReferences"),
        ));
    }
    match cfgs {
        [] => out.push(mk(
            "no-config",
            Severity::Note,
            false,
            "no XRDConversionConfig names it: dco does not convert its objects".into(),
            None,
            None,
        )),
        [_, _, ..] => out.push(mk(
            "several-configs",
            Severity::Warning,
            false,
            format!(
                "{} XRDConversionConfigs name it ({}): only one is acted on (Conflict)",
                cfgs.len(),
                cfgs.iter().map(|c| c.name.as_str()).collect::<Vec<_>>().join(", ")
            ),
            None,
            None,
        )),
        _ => {}
    }
    for c in cfgs {
        for (t, s, r) in &c.conditions {
            if s == "False" && FAILING_CONDITIONS.contains(&t.as_str()) {
                out.push(mk(
                    "config-condition",
                    Severity::Error,
                    true,
                    format!("XRDConversionConfig {}: condition {t} is False ({r})", c.name),
                    Some("kubectl describe the config for the message"),
                    None,
                ));
            }
        }
    }
    let in_config = |v: &str| -> &'static str {
        match cfgs.first() {
            Some(c) if c.hub == v => "hub",
            Some(c) if c.spokes.iter().any(|s| s == v) => "spoke",
            _ => "-",
        }
    };
    let versions: Vec<Value> = x
        .versions
        .iter()
        .map(|(n, s, r, d)| json!({"name": n, "served": s, "referenceable": r, "deprecated": d, "inConfig": in_config(n)}))
        .collect();
    let configs: Vec<Value> = cfgs
        .iter()
        .map(|c| {
            let conds: BTreeMap<&str, &str> =
                c.conditions.iter().map(|(t, s, _)| (t.as_str(), s.as_str())).collect();
            json!({"name": c.name, "phase": c.phase, "server": c.server, "hub": c.hub, "conditions": conds})
        })
        .collect();
    let json = json!({"name": x.name, "kind": x.kind, "scope": x.scope, "versions": versions,
        "wiring": x.wiring_text, "wired": x.wiring.is_some(), "generatedCRDs": gen_json, "configs": configs,
        "packageOwner": x.package});
    (out, json)
}

fn status_table(ctx: &str, x: &Value, width: Option<usize>) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "{ctx}: XRD {} (kind {}, scope {})",
        x["name"].as_str().unwrap_or(""),
        x["kind"].as_str().unwrap_or(""),
        x["scope"].as_str().unwrap_or("")
    );
    let yes = |v: &Value| if v == true { "yes" } else { "-" }.to_string();
    let rows: Vec<Vec<String>> = x["versions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|v| {
            let name = v["name"].as_str().unwrap_or("").to_string();
            vec![
                name,
                yes(&v["served"]),
                yes(&v["referenceable"]),
                yes(&v["deprecated"]),
                v["inConfig"].as_str().unwrap_or("-").to_string(),
            ]
        })
        .collect();
    t.push_str(&crate::output::fit_table(
        &["VERSION", "SERVED", "REFERENCEABLE", "DEPRECATED", "CONFIG"],
        &rows,
        width,
    ));
    let _ = writeln!(t, "  wiring: {}", x["wiring"].as_str().unwrap_or(""));
    let rows: Vec<Vec<String>> = x["generatedCRDs"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|g| {
            let carries = match g["carriesWiring"].as_bool() {
                Some(true) => "yes",
                Some(false) => "NO",
                None => "-",
            };
            vec![
                g["name"].as_str().unwrap_or("").to_string(),
                g["role"].as_str().unwrap_or("").to_string(),
                g["conversion"].as_str().unwrap_or("(missing)").to_string(),
                carries.to_string(),
            ]
        })
        .collect();
    t.push_str(&crate::output::fit_table(
        &["GENERATED CRD", "ROLE", "CONVERSION", "PROPAGATED"],
        &rows,
        width,
    ));
    for c in x["configs"].as_array().into_iter().flatten() {
        let conds: Vec<String> = c["conditions"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
            .collect();
        let _ = writeln!(
            t,
            "  config: XRDConversionConfig {} phase {} server {} hub {}\n    {}",
            c["name"].as_str().unwrap_or(""),
            c["phase"].as_str().filter(|s| !s.is_empty()).unwrap_or("-"),
            c["server"].as_str().filter(|s| !s.is_empty()).unwrap_or("-"),
            c["hub"].as_str().unwrap_or(""),
            conds.join("  ")
        );
    }
    if x["configs"].as_array().is_none_or(Vec::is_empty) {
        let _ = writeln!(t, "  config: none");
    }
    let _ = writeln!(t, "  package: {}\n", x["packageOwner"].as_str().unwrap_or("none"));
    t
}

async fn read_configs(client: &Client) -> Result<Option<BTreeMap<String, Vec<ConfigView>>>, String> {
    let api: Api<DynamicObject> =
        Api::all_with(client.clone(), &live_target::config_resource(dco_api::config::TargetKind::Xrd));
    // dco's CRDs not installed: no config names anything (a one-object probe tells).
    match api.list(&ListParams::default().limit(1)).await {
        Err(e) if paged::not_found(&e) => return Ok(None),
        Err(e) => return Err(format!("listing XRDConversionConfigs: {e}")),
        Ok(_) => {}
    }
    let mut by_target: BTreeMap<String, Vec<ConfigView>> = BTreeMap::new();
    paged::each(&api, &ListParams::default(), "XRDConversionConfigs", MAX_CONFIGS, |o| {
        let (t, v) = ConfigView::of(&o);
        by_target.entry(t).or_default().push(v);
        Ok(())
    })
    .await?;
    Ok(Some(by_target))
}

async fn read_xrds(
    client: &Client,
    version: XrdVersion,
    only: Option<&str>,
) -> Result<Vec<XrdRecord>, String> {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &version.resource());
    let mut out = Vec::new();
    if let Some(name) = only {
        return match api.get_opt(name).await {
            Ok(Some(o)) => Ok(vec![XrdRecord::of(&serde_json::to_value(o).unwrap_or_default())]),
            Ok(None) => Ok(out),
            Err(e) => Err(format!("reading CompositeResourceDefinition {name}: {e}")),
        };
    }
    paged::each(&api, &ListParams::default(), "CompositeResourceDefinitions", MAX_XRDS, |o| {
        out.push(XrdRecord::of(&serde_json::to_value(o).unwrap_or_default()));
        Ok(())
    })
    .await?;
    Ok(out)
}

async fn read_generated(client: &Client, x: &XrdRecord) -> Result<Vec<GeneratedView>, String> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut out = Vec::new();
    for (i, name) in x.generated.iter().enumerate() {
        let crd =
            api.get_opt(name).await.map_err(|e| format!("reading CustomResourceDefinition {name}: {e}"))?;
        let crd = crd.map(|c| serde_json::to_value(c).unwrap_or_default());
        out.push(GeneratedView { name: name.clone(), role: if i == 0 { "Composite" } else { "Claim" }, crd });
    }
    Ok(out)
}

/// One context: its findings, its JSON and its table.
async fn member_status(m: &Member, args: &StatusArgs) -> (Vec<Finding>, Value, String) {
    let ctx = m.label.as_str();
    let fail = |rule: &str, msg: String, fails: bool| {
        let f = Finding {
            rule: rule.into(),
            severity: if fails { Severity::Error } else { Severity::Note },
            message: format!("{ctx}: {msg}"),
            fix: None,
            location: Location { context: Some(ctx.to_string()), ..Location::default() },
            fails,
        };
        let table = format!("{ctx}: {msg}\n\n");
        (vec![f], json!({"context": ctx, "error": msg}), table)
    };
    let client = match crate::diff_live::reach(m, args.cluster.timeout()).await {
        Ok(c) => c,
        Err(e) => return fail("unreachable", e, true),
    };
    let version = match live_target::xrd_api(&client).await.map(|a| a.preferred()) {
        Ok(Some(v)) => v,
        Ok(None) => {
            return fail(
                "crossplane-absent",
                "Crossplane serves no XRD API version".into(),
                args.xrd_name.is_some(),
            );
        }
        // The reader's message speaks to commands that take --crd; here there is no XRD to show.
        Err(e) if e.starts_with("Crossplane is not installed") => {
            let msg = format!(
                "Crossplane is not installed (no CustomResourceDefinition {}): no XRDs to show",
                dco_api::target::XRD_CRD_NAME
            );
            return fail("crossplane-absent", msg, args.xrd_name.is_some());
        }
        Err(e) => return fail("crossplane-absent", e, args.xrd_name.is_some()),
    };
    let xrds = match read_xrds(&client, version, args.xrd_name.as_deref()).await {
        Ok(x) => x,
        Err(e) => return fail("unreadable", e, true),
    };
    if let (Some(name), true) = (&args.xrd_name, xrds.is_empty()) {
        return fail(
            "xrd-missing",
            format!("CompositeResourceDefinition {name} does not exist (kubectl get xrds)"),
            true,
        );
    }
    let configs = match read_configs(&client).await {
        Ok(c) => c.unwrap_or_default(),
        Err(e) => return fail("unreadable", e, true),
    };
    let (mut findings, mut list, mut table) = (Vec::new(), Vec::new(), String::new());
    for x in &xrds {
        let generated = match read_generated(&client, x).await {
            Ok(g) => g,
            Err(e) => return fail("unreadable", e, true),
        };
        let cfgs = configs.get(&x.name).map(Vec::as_slice).unwrap_or_default();
        let (f, j) = judge(ctx, x, &generated, cfgs);
        table.push_str(&status_table(ctx, &j, args.out.table_width()));
        for finding in f.iter().filter(|f| f.severity > Severity::Note) {
            let _ = writeln!(table, "  {}: {}", finding.severity.word(), finding.message);
        }
        findings.extend(f);
        list.push(j);
    }
    if xrds.is_empty() {
        let _ = writeln!(table, "{ctx}: no XRDs\n");
    }
    (findings, json!({"context": ctx, "xrdApiVersion": version.name(), "xrds": list}), table)
}

fn status(args: &StatusArgs) -> Result<(), CliError> {
    let members = args.cluster.members()?;
    let results = crate::live::block_on(async {
        let mut out = Vec::new();
        for m in &members {
            out.push(member_status(m, args).await);
        }
        out
    });
    let (mut findings, mut contexts, mut table) = (Vec::new(), Vec::new(), String::new());
    for (f, j, t) in results {
        findings.extend(f);
        contexts.push(j);
        table.push_str(&t);
    }
    let xrds: usize = contexts.iter().map(|c| c["xrds"].as_array().map_or(0, Vec::len)).sum();
    let failing = findings.iter().filter(|f| f.fails).count();
    let summary_line = format!(
        "crossplane status: {} context(s), {xrds} XRD(s), {failing} failing finding(s)",
        members.len()
    );
    let summary = json!({"contexts": contexts, "xrds": xrds, "failing": failing});
    let report = Report {
        command: "crossplane status".into(),
        findings,
        cases: Vec::new(),
        summary,
        table,
        summary_line,
    };
    crate::output::finish(&report, &args.out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn xrd(conversion: Value, labels: Value) -> Value {
        json!({"apiVersion": "apiextensions.crossplane.io/v1", "kind": "CompositeResourceDefinition",
            "metadata": {"name": "xbuckets.example.org", "labels": labels},
            "spec": {"group": "example.org", "names": {"kind": "XBucket", "plural": "xbuckets"},
                "claimNames": {"kind": "Bucket", "plural": "buckets"},
                "versions": [
                    {"name": "v1", "served": true, "referenceable": false, "schema": {"openAPIV3Schema": {"type": "object"}}},
                    {"name": "v2", "served": true, "referenceable": true, "schema": {"openAPIV3Schema": {"type": "object"}}}],
                "conversion": conversion}})
    }

    fn webhook(svc: &str) -> Value {
        json!({"strategy": "Webhook", "webhook": {"conversionReviewVersions": ["v1"], "clientConfig": {
            "caBundle": "Q0E=", "service": {"namespace": "dco-system", "name": svc, "path": "/convert/xbuckets.example.org"}}}})
    }

    fn crd(conversion: Value) -> Value {
        let mut c = webhook("x");
        c = if conversion.is_null() { c } else { conversion };
        json!({"spec": {"conversion": c}})
    }

    #[test]
    fn propagation_is_judged_per_generated_crd_and_package_ownership_is_shown_not_failed() {
        let x = XrdRecord::of(&xrd(webhook("dco-webhook-a"), json!({PKG_LABEL: "acme-platform"})));
        assert_eq!(x.generated, ["xbuckets.example.org", "buckets.example.org"]);
        assert_eq!(x.versions.len(), 2);
        let mut port_given = webhook("dco-webhook-a");
        port_given["webhook"]["clientConfig"]["service"]["port"] = json!(443);
        let generated = vec![
            GeneratedView { name: x.generated[0].clone(), role: "Composite", crd: Some(crd(port_given)) },
            GeneratedView {
                name: x.generated[1].clone(),
                role: "Claim",
                crd: Some(crd(webhook("dco-webhook-b"))),
            },
        ];
        let (f, j) = judge("east", &x, &generated, &[]);
        let rules: Vec<(&str, bool)> = f.iter().map(|f| (f.rule.as_str(), f.fails)).collect();
        assert_eq!(rules, [("not-propagated", true), ("package-managed", false), ("no-config", false)]);
        assert!(
            f[0].message
                .starts_with("east: XRD xbuckets.example.org: generated CRD buckets.example.org (Claim)"),
            "{}",
            f[0].message
        );
        assert!(f[0].message.contains("dco-webhook-b"), "{}", f[0].message);
        assert_eq!(
            j["generatedCRDs"][0]["carriesWiring"], true,
            "the apiserver's default port is the same wiring"
        );
        assert_eq!(j["packageOwner"], "package acme-platform (label pkg.crossplane.io/package)");
    }

    #[test]
    fn an_unwired_xrd_has_nothing_to_propagate_and_config_conditions_fail_when_false() {
        let x = XrdRecord::of(&xrd(json!({"strategy": "None"}), json!({})));
        assert_eq!(x.wiring_text, "none (strategy None)");
        let generated = vec![GeneratedView { name: x.generated[0].clone(), role: "Composite", crd: None }];
        let cfg = ConfigView {
            name: "xb".into(),
            hub: "v2".into(),
            spokes: vec!["v1".into()],
            phase: "Pending".into(),
            server: String::new(),
            conditions: vec![
                ("Validated".into(), "False".into(), "Lossy".into()),
                ("HandoverReady".into(), "False".into(), "Compiling".into()),
            ],
        };
        let (f, j) = judge("west", &x, &generated, &[cfg]);
        let rules: Vec<&str> = f.iter().map(|f| f.rule.as_str()).collect();
        assert_eq!(rules, ["config-condition"], "only Validated is one that fails: {f:?}");
        assert_eq!(j["generatedCRDs"][0]["carriesWiring"], Value::Null);
        assert_eq!(j["versions"][0]["inConfig"], "spoke");
        assert_eq!(j["versions"][1]["inConfig"], "hub");
    }

    #[test]
    fn a_package_owner_reference_names_the_revision() {
        let mut v = xrd(Value::Null, json!({}));
        v["metadata"]["ownerReferences"] = json!([{"apiVersion": "pkg.crossplane.io/v1", "kind": "ConfigurationRevision", "name": "acme-1a2b", "uid": "u"}]);
        assert_eq!(package_owner(&v).as_deref(), Some("ConfigurationRevision acme-1a2b"));
        v["metadata"]["ownerReferences"] =
            json!([{"apiVersion": "apps/v1", "kind": "Deployment", "name": "x", "uid": "u"}]);
        assert_eq!(package_owner(&v), None);
    }
}

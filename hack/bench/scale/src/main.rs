//! The scale benchmark's fixtures and probes (`hack/bench/scale.sh`; results in docs/performance.md).
//!
//! - `unrelated`: CRDs shaped like a Crossplane provider's generated ones (upjet): a
//!   `spec.forProvider` and `spec.initProvider` and a `status.atProvider` of the same few
//!   hundred fields — strings, numbers, enums, maps, lists of nested objects, reference and
//!   selector pairs — each with a description, grown until the CRD reaches `--bytes`.
//! - `targets`: CRDs of two versions (v2 stored, v1 renaming one field) of the same shape,
//!   each with a CRDConversionConfig.
//! - `probe`: how long a target takes to be served (a read at v1 of an object stored at v2
//!   comes back converted) after its config is created for an existing CRD, and after its
//!   CRD is created for an existing config.
//!
//! - `rebuild`: what one change of a CRD's spec costs its clients (every move makes one): a
//!   watch of the kind and a LIST every 20 ms across the change, reporting when the watch
//!   ended and the window of failed LISTs, by status code.
//!
//! Fixtures go to stdout as one JSON `List` for `kubectl apply -f -`; their sizes to stderr.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

#[derive(Parser)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// What every object of a run shares.
#[derive(clap::Args)]
struct Run {
    /// API groups end in it (`u<i>.<suffix>`, `t<i>.<suffix>`, `probe-a.<suffix>`).
    #[arg(long)]
    suffix: String,
    /// `key=value` on every object.
    #[arg(long)]
    label: String,
}

#[derive(Subcommand)]
enum Command {
    /// Provider-shaped CRDs that no config names.
    Unrelated {
        #[arg(long)]
        count: usize,
        /// Bytes of each CRD's JSON.
        #[arg(long, default_value_t = 100_000)]
        bytes: usize,
        #[command(flatten)]
        run: Run,
    },
    /// Two-version CRDs with a CRDConversionConfig each.
    Targets {
        #[arg(long, default_value_t = 0)]
        from: usize,
        #[arg(long)]
        count: usize,
        /// Bytes of each CRD's JSON (both versions).
        #[arg(long, default_value_t = 8_000)]
        bytes: usize,
        #[command(flatten)]
        run: Run,
        /// The ConversionWebhookServer the configs pin.
        #[arg(long)]
        server: String,
    },
    /// What a change of a CRD's spec costs the kind's watchers and listers.
    Rebuild {
        #[command(flatten)]
        run: Run,
        /// Where the kind's objects live.
        #[arg(long)]
        namespace: String,
        /// Objects of the kind.
        #[arg(long, default_value_t = 200)]
        objects: usize,
        /// How long to observe after the change.
        #[arg(long, default_value = "10s", value_parser = humantime)]
        observe: Duration,
    },
    /// Time from a config's (or a CRD's) creation until the target is served.
    Probe {
        #[command(flatten)]
        run: Run,
        /// The ConversionWebhookServer the probe configs pin.
        #[arg(long)]
        server: String,
        /// Where the probe objects live.
        #[arg(long)]
        namespace: String,
        /// Give up on one probe after this long.
        #[arg(long, default_value = "60s", value_parser = humantime)]
        timeout: Duration,
    },
}

fn humantime(s: &str) -> Result<Duration, String> {
    let n = s.strip_suffix('s').ok_or("seconds, like 60s")?;
    n.parse::<u64>().map(Duration::from_secs).map_err(|e| e.to_string())
}

fn main() -> anyhow::Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    match Cli::parse().command {
        Command::Unrelated { count, bytes, run: Run { suffix, label } } => {
            let label = parse_label(&label)?;
            let items: Vec<Value> = (0..count)
                .map(|i| provider_crd(&format!("u{i}.{suffix}"), "Resource", &label, i as u64, bytes))
                .collect();
            report_sizes("unrelated CRD", &items);
            print_list(items)
        }
        Command::Targets { from, count, bytes, run: Run { suffix, label }, server } => {
            let label = parse_label(&label)?;
            let mut crds = Vec::new();
            let mut configs = Vec::new();
            for i in from..from + count {
                let group = format!("t{i}.{suffix}");
                crds.push(target_crd(&group, &label, i as u64, bytes));
                configs.push(config(&format!("t{i}-{suffix}"), &format!("widgets.{group}"), &label, &server));
            }
            report_sizes("target CRD", &crds);
            report_sizes("config", &configs);
            print_list(crds.into_iter().chain(configs).collect())
        }
        Command::Rebuild { run: Run { suffix, label }, namespace, objects, observe } => {
            let label = parse_label(&label)?;
            tokio::runtime::Runtime::new()?.block_on(rebuild(&suffix, &label, &namespace, objects, observe))
        }
        Command::Probe { run: Run { suffix, label }, server, namespace, timeout } => {
            let label = parse_label(&label)?;
            tokio::runtime::Runtime::new()?.block_on(probe(&suffix, &label, &server, &namespace, timeout))
        }
    }
}

fn parse_label(s: &str) -> anyhow::Result<(String, String)> {
    let (k, v) = s.split_once('=').context("--label is key=value")?;
    Ok((k.to_string(), v.to_string()))
}

fn report_sizes(what: &str, items: &[Value]) {
    if items.is_empty() {
        return;
    }
    let total: usize = items.iter().map(|v| v.to_string().len()).sum();
    eprintln!("{} × {what}: {} bytes each on average", items.len(), total / items.len());
}

fn print_list(items: Vec<Value>) -> anyhow::Result<()> {
    println!("{}", json!({"apiVersion": "v1", "kind": "List", "items": items}));
    Ok(())
}

/// A small deterministic generator: the same fixtures on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // SplitMix64.
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
        from[self.below(from.len() as u64) as usize]
    }
}

const WORDS: &[&str] = &[
    "instance",
    "volume",
    "subnet",
    "network",
    "address",
    "policy",
    "role",
    "bucket",
    "key",
    "cluster",
    "node",
    "group",
    "rule",
    "target",
    "listener",
    "certificate",
    "domain",
    "record",
    "zone",
    "route",
    "table",
    "gateway",
    "endpoint",
    "interface",
    "snapshot",
    "image",
    "template",
    "configuration",
    "capacity",
    "throughput",
    "retention",
    "encryption",
    "replication",
    "logging",
    "monitoring",
    "backup",
    "window",
    "schedule",
    "version",
    "engine",
    "port",
    "protocol",
    "timeout",
    "threshold",
];
const PROSE: &[&str] = &[
    "The",
    "identifier",
    "of",
    "the",
    "resource",
    "to",
    "associate",
    "with",
    "this",
    "when",
    "specified",
    "must",
    "be",
    "a",
    "valid",
    "value",
    "for",
    "region",
    "in",
    "which",
    "it",
    "is",
    "created",
    "Defaults",
    "provider",
    "configuration",
    "if",
    "not",
    "set",
    "Changing",
    "forces",
    "new",
    "be",
    "replaced",
    "See",
    "documentation",
    "details",
    "one",
    "or",
    "more",
    "blocks",
    "as",
    "defined",
    "below",
    "Whether",
    "enable",
    "amount",
    "number",
    "seconds",
    "after",
];

fn description(rng: &mut Rng) -> String {
    let n = 12 + rng.below(30);
    let mut s: Vec<&str> = (0..n).map(|_| rng.pick(PROSE)).collect();
    s.push("resource.");
    s.join(" ")
}

fn camel(rng: &mut Rng, i: usize) -> String {
    let a = rng.pick(WORDS);
    let b = rng.pick(WORDS);
    let mut b = b.to_string();
    b[..1].make_ascii_uppercase();
    format!("{a}{b}{i}")
}

/// One property of a provider's `forProvider`, nested at most twice.
fn property(rng: &mut Rng, depth: u32) -> Value {
    let d = description(rng);
    let fields = 3 + rng.below(5) as usize;
    match rng.below(if depth < 2 { 10 } else { 6 }) {
        0 | 1 => json!({"description": d, "type": "string"}),
        2 => json!({"description": d, "type": "number"}),
        3 => json!({"description": d, "type": "boolean"}),
        4 => json!({"description": d, "type": "object", "additionalProperties": {"type": "string"},
                    "x-kubernetes-map-type": "granular"}),
        5 => json!({"description": d, "type": "array", "items": {"type": "string"},
                    "x-kubernetes-list-type": "set"}),
        6 | 7 => json!({"description": d, "type": "array", "items": object(rng, fields, depth + 1)}),
        8 => object(rng, fields, depth + 1),
        _ => json!({"description": d, "type": "string", "enum": ["Enabled", "Disabled", "Suspended"]}),
    }
}

fn object(rng: &mut Rng, fields: usize, depth: u32) -> Value {
    let mut props = serde_json::Map::new();
    for i in 0..fields {
        props.insert(camel(rng, i), property(rng, depth));
    }
    json!({"description": description(rng), "type": "object", "properties": props})
}

/// upjet's reference and selector pair for a field that names another managed resource.
fn reference(rng: &mut Rng) -> (Value, Value) {
    let policy = json!({"description": "Policies for referencing.", "type": "object", "properties": {
        "resolution": {"default": "Required", "description": description(rng), "enum": ["Required", "Optional"], "type": "string"},
        "resolve": {"description": description(rng), "enum": ["Always", "IfNotPresent"], "type": "string"}}});
    let r = json!({"description": description(rng), "type": "object", "required": ["name"], "properties": {
        "name": {"description": "Name of the referenced object.", "type": "string"}, "policy": policy.clone()}});
    let s = json!({"description": description(rng), "type": "object", "properties": {
        "matchControllerRef": {"description": description(rng), "type": "boolean"},
        "matchLabels": {"additionalProperties": {"type": "string"}, "description": description(rng), "type": "object"},
        "policy": policy}});
    (r, s)
}

/// `forProvider`'s properties with `fields` top-level fields (every fourth a reference).
fn parameters(seed: u64, fields: usize) -> serde_json::Map<String, Value> {
    let mut rng = Rng(seed);
    let mut props = serde_json::Map::new();
    for i in 0..fields {
        let name = camel(&mut rng, i);
        if i % 4 == 3 {
            let (r, s) = reference(&mut rng);
            props.insert(format!("{name}Ref"), r);
            props.insert(format!("{name}Selector"), s);
        }
        props.insert(name, property(&mut rng, 0));
    }
    props
}

fn conditions() -> Value {
    json!({"description": "Conditions of the resource.", "type": "array", "x-kubernetes-list-map-keys": ["type"],
        "x-kubernetes-list-type": "map", "items": {"type": "object", "required": ["lastTransitionTime", "reason", "status", "type"], "properties": {
            "lastTransitionTime": {"format": "date-time", "type": "string"}, "message": {"type": "string"},
            "observedGeneration": {"format": "int64", "type": "integer"}, "reason": {"type": "string"},
            "status": {"type": "string"}, "type": {"type": "string"}}}})
}

/// The openAPIV3Schema of one version: `forProvider` (the fields and `extra`), `initProvider`
/// (the fields), `status.atProvider` (the fields and an id), and the Crossplane fields around.
fn provider_schema(
    kind: &str,
    params: &serde_json::Map<String, Value>,
    extra: Option<(&str, Value)>,
) -> Value {
    let mut wanted = params.clone();
    if let Some((k, v)) = extra {
        wanted.insert(k.to_string(), v);
    }
    let mut observed = params.clone();
    observed.insert("id".into(), json!({"type": "string"}));
    json!({"description": format!("{kind} is the Schema for the {kind}s API."), "type": "object", "required": ["spec"], "properties": {
        "apiVersion": {"description": "APIVersion defines the versioned schema of this representation of an object.", "type": "string"},
        "kind": {"description": "Kind is a string value representing the REST resource this object represents.", "type": "string"},
        "metadata": {"type": "object"},
        "spec": {"description": format!("{kind}Spec defines the desired state of {kind}"), "type": "object", "required": ["forProvider"], "properties": {
            "deletionPolicy": {"default": "Delete", "description": "DeletionPolicy specifies what will happen to the underlying external resource when this managed resource is deleted.", "enum": ["Orphan", "Delete"], "type": "string"},
            "forProvider": {"type": "object", "properties": wanted},
            "initProvider": {"description": "THIS IS A BETA FIELD. It is on by default but can be opted out through a Crossplane feature flag.", "type": "object", "properties": params.clone()},
            "managementPolicies": {"default": ["*"], "type": "array", "items": {"enum": ["Observe", "Create", "Update", "Delete", "LateInitialize", "*"], "type": "string"}},
            "providerConfigRef": {"default": {"name": "default"}, "type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}},
            "writeConnectionSecretToRef": {"type": "object", "required": ["name", "namespace"], "properties": {"name": {"type": "string"}, "namespace": {"type": "string"}}}}},
        "status": {"type": "object", "properties": {"atProvider": {"type": "object", "properties": observed}, "conditions": conditions(),
            "observedGeneration": {"format": "int64", "type": "integer"}}}}})
}

fn crd(group: &str, kind: &str, label: &(String, String), versions: Vec<Value>) -> Value {
    let plural = format!("{}s", kind.to_lowercase());
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{group}"), "labels": {label.0.clone(): label.1}},
        "spec": {"group": group, "scope": "Namespaced",
            "names": {"kind": kind, "listKind": format!("{kind}List"), "plural": plural, "singular": kind.to_lowercase(),
                "categories": ["crossplane", "managed", "bench"]},
            "versions": versions}})
}

fn version(name: &str, storage: bool, schema: Value) -> Value {
    json!({"name": name, "served": true, "storage": storage, "schema": {"openAPIV3Schema": schema},
        "subresources": {"status": {}},
        "additionalPrinterColumns": [
            {"jsonPath": ".status.conditions[?(@.type=='Ready')].status", "name": "READY", "type": "string"},
            {"jsonPath": ".metadata.creationTimestamp", "name": "AGE", "type": "date"}]})
}

/// The largest `build(fields)` of at most `bytes` (at least one field). The size grows with
/// `fields` (the fields of n + 1 are those of n and one more), so a binary search finds it.
fn sized(bytes: usize, build: impl Fn(usize) -> Value) -> Value {
    let fits = |n: usize| build(n).to_string().len() <= bytes;
    let (mut lo, mut hi) = (1, 2);
    while fits(hi) && hi < 10_000 {
        (lo, hi) = (hi, hi * 2);
    }
    // fits(lo) (or lo is 1), !fits(hi)
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        if fits(mid) { lo = mid } else { hi = mid }
    }
    build(lo)
}

fn provider_crd(group: &str, kind: &str, label: &(String, String), seed: u64, bytes: usize) -> Value {
    sized(bytes, |fields| {
        let params = parameters(seed, fields);
        crd(group, kind, label, vec![version("v1beta1", true, provider_schema(kind, &params, None))])
    })
}

/// The field the config renames: `spec.forProvider.size` at v1, `sizeGB` at v2.
fn size() -> Value {
    json!({"description": "Size of the volume in gibibytes.", "type": "integer"})
}

fn target_crd(group: &str, label: &(String, String), seed: u64, bytes: usize) -> Value {
    sized(bytes, |fields| {
        let params = parameters(seed, fields);
        crd(
            group,
            "Widget",
            label,
            vec![
                version("v1", false, provider_schema("Widget", &params, Some(("size", size())))),
                version("v2", true, provider_schema("Widget", &params, Some(("sizeGB", size())))),
            ],
        )
    })
}

fn config(name: &str, target: &str, label: &(String, String), server: &str) -> Value {
    json!({"apiVersion": "conversion.dco.rs/v1alpha1", "kind": "CRDConversionConfig",
        "metadata": {"name": name, "labels": {label.0.clone(): label.1}},
        "spec": {"targetCRD": {"name": target}, "hubVersion": "v2", "webhookServerRef": {"name": server},
            "spokes": [{"version": "v1", "rules": [{"strategy": "FieldRename",
                "fieldRename": {"hubPath": "spec.forProvider.sizeGB", "spokePath": "spec.forProvider.size"}}]}]}})
}

fn dynamic(
    client: &kube::Client,
    group: &str,
    version: &str,
    kind: &str,
    plural: &str,
) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
    Api::all_with(client.clone(), &ar)
}

/// CustomResourceDefinitions, as dynamic objects.
fn crd_api(client: &kube::Client) -> Api<DynamicObject> {
    dynamic(client, "apiextensions.k8s.io", "v1", "CustomResourceDefinition", "customresourcedefinitions")
}

async fn create(api: &Api<DynamicObject>, v: Value) -> anyhow::Result<()> {
    let o: DynamicObject = serde_json::from_value(v)?;
    api.create(&PostParams::default(), &o)
        .await
        .with_context(|| format!("creating {:?}", o.metadata.name))?;
    Ok(())
}

fn widgets(client: &kube::Client, group: &str, version: &str, namespace: &str) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, "Widget"), "widgets");
    Api::namespaced_with(client.clone(), namespace, &ar)
}

/// Creates the probe widget stored at v2, retrying while its CRD is being established.
async fn store_probe(
    client: &kube::Client,
    group: &str,
    namespace: &str,
    deadline: Instant,
) -> anyhow::Result<()> {
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{group}/v2"), "kind": "Widget", "metadata": {"name": "probe"},
        "spec": {"forProvider": {"sizeGB": 7}}}))?;
    let api = widgets(client, group, "v2", namespace);
    loop {
        match api.create(&PostParams::default(), &obj).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e).context("creating the probe object at v2"),
        }
        if Instant::now() > deadline {
            bail!("the probe CRD in {group} was not established in time");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Whether a read of the probe at v1 comes back converted (`sizeGB` renamed to `size`).
async fn converted(client: &kube::Client, group: &str, namespace: &str) -> bool {
    let got = widgets(client, group, "v1", namespace).get("probe").await;
    got.is_ok_and(|o| o.data.pointer("/spec/forProvider/size") == Some(&json!(7)))
}

/// Reads the CRD every 5 ms until its `spec.conversion` calls a webhook; returns when it did.
async fn wired_at(crds: Api<DynamicObject>, name: String, deadline: Instant) -> anyhow::Result<Instant> {
    loop {
        let crd = crds.get(&name).await?;
        if crd.data.pointer("/spec/conversion/strategy") == Some(&json!("Webhook")) {
            return Ok(Instant::now());
        }
        if Instant::now() > deadline {
            bail!("{name} was not wired within the timeout");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Reads the probe at v1 every 10 ms until it comes back converted; returns when it did.
async fn served_at(
    client: &kube::Client,
    group: &str,
    namespace: &str,
    deadline: Instant,
) -> anyhow::Result<Instant> {
    loop {
        if converted(client, group, namespace).await {
            return Ok(Instant::now());
        }
        if Instant::now() > deadline {
            bail!("{group} was not served within the timeout");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn probe(
    suffix: &str,
    label: &(String, String),
    server: &str,
    namespace: &str,
    timeout: Duration,
) -> anyhow::Result<()> {
    let client = kube::Client::try_default().await?;
    let crds = crd_api(&client);
    let configs =
        dynamic(&client, "conversion.dco.rs", "v1alpha1", "CRDConversionConfig", "crdconversionconfigs");

    // A config created for a CRD that exists (and stores an object).
    let group = format!("probe-a.{suffix}");
    create(&crds, target_crd(&group, label, 1, 8_000)).await?;
    store_probe(&client, &group, namespace, Instant::now() + timeout).await?;
    // Before its config exists the target is not converted (strategy None), so the probe
    // measures the config, not a leftover of an earlier run.
    if converted(&client, &group, namespace).await {
        bail!("{group} converts before its config exists; delete what an earlier run left");
    }
    let t0 = Instant::now();
    create(&configs, config(&format!("probe-a-{suffix}"), &format!("widgets.{group}"), label, server))
        .await?;
    let served = served_at(&client, &group, namespace, t0 + timeout).await?;
    println!(
        "config created for an existing CRD: served {:.2} s after the config's creation",
        (served - t0).as_secs_f64()
    );

    // A CRD created after its config. A new kind is not served by the apiserver at all until
    // it has set the kind up (every request 404s), config or not: measure that floor too, on
    // a CRD no config names, and report both.
    let group = format!("probe-b.{suffix}");
    create(&configs, config(&format!("probe-b-{suffix}"), &format!("widgets.{group}"), label, server))
        .await?;
    // Long enough for the operator to have seen the config and found no target.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let t0 = Instant::now();
    create(&crds, target_crd(&group, label, 2, 8_000)).await?;
    let wiring = tokio::spawn(wired_at(crds.clone(), format!("widgets.{group}"), t0 + timeout));
    store_probe(&client, &group, namespace, t0 + timeout).await?;
    let servable = Instant::now();
    let served = served_at(&client, &group, namespace, t0 + timeout).await?;
    let group = format!("probe-c.{suffix}");
    let t1 = Instant::now();
    create(&crds, target_crd(&group, label, 3, 8_000)).await?;
    store_probe(&client, &group, namespace, t1 + timeout).await?;
    let floor = Instant::now() - t1;
    let wired = wiring.await??;
    println!(
        "CRD created after its config: wired (spec.conversion) {:.2} s and served {:.2} s after the CRD's creation; the apiserver took {:.2} s to serve the new kind at all (a CRD no config names: {:.2} s), so {:.2} s after that",
        (wired - t0).as_secs_f64(),
        (served - t0).as_secs_f64(),
        (servable - t0).as_secs_f64(),
        floor.as_secs_f64(),
        (served - servable).as_secs_f64()
    );
    Ok(())
}

/// One change of a CRD's spec (a printer column added, as harmless as a change gets; a move's
/// `spec.conversion` write is one too), watched from the kind's side.
async fn rebuild(
    suffix: &str,
    label: &(String, String),
    namespace: &str,
    objects: usize,
    observe: Duration,
) -> anyhow::Result<()> {
    use futures::AsyncBufReadExt;
    use futures::StreamExt;
    let client = kube::Client::try_default().await?;
    let crds = crd_api(&client);
    let group = format!("rebuild.{suffix}");
    let name = format!("gadgets.{group}");
    let crd = |columns: Value| {
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": name, "labels": {label.0.clone(): label.1.clone()}},
            "spec": {"group": group, "scope": "Namespaced",
                "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget", "listKind": "GadgetList"},
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "additionalPrinterColumns": columns,
                    "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                        "spec": {"type": "object", "properties": {"n": {"type": "integer"}}}}}}}]}})
    };
    let pp = kube::api::PatchParams::apply("dco-scale").force();
    crds.patch(&name, &pp, &kube::api::Patch::Apply(crd(json!([])))).await?;
    let ar = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(&group, "v1", "Gadget"), "gadgets");
    let gadgets: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &ar);
    let deadline = Instant::now() + Duration::from_secs(60);
    for i in 0..objects {
        let o: DynamicObject =
            serde_json::from_value(json!({"apiVersion": format!("{group}/v1"), "kind": "Gadget",
            "metadata": {"name": format!("g{i}")}, "spec": {"n": i}}))?;
        loop {
            match gadgets.create(&PostParams::default(), &o).await {
                Ok(_) => break,
                Err(kube::Error::Api(e)) if e.code == 409 => break,
                Err(_) if Instant::now() < deadline => tokio::time::sleep(Duration::from_millis(200)).await,
                Err(e) => return Err(e).context("creating the objects"),
            }
        }
    }
    let rv = gadgets.list_metadata(&Default::default()).await?.metadata.resource_version.unwrap_or_default();

    let t0 = Instant::now();
    let watch = {
        let client = client.clone();
        let url = format!(
            "/apis/{group}/v1/namespaces/{namespace}/gadgets?watch=true&resourceVersion={rv}&timeoutSeconds=300"
        );
        tokio::spawn(async move {
            let Ok(req) = http::Request::get(url).body(Vec::new()) else { return None };
            let Ok(reader) = client.request_stream(req).await else { return None };
            let mut lines = reader.lines();
            while let Some(Ok(_)) = lines.next().await {}
            Some(t0.elapsed())
        })
    };
    let lists = {
        let gadgets = gadgets.clone();
        tokio::spawn(async move {
            let mut out: Vec<(Duration, u16)> = Vec::new();
            while t0.elapsed() < observe {
                let code = match gadgets.list_metadata(&Default::default()).await {
                    Ok(_) => 200,
                    Err(kube::Error::Api(e)) => e.code,
                    Err(_) => 0,
                };
                out.push((t0.elapsed(), code));
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            out
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let changed = t0.elapsed();
    crds.patch(
        &name,
        &pp,
        &kube::api::Patch::Apply(crd(json!([{"name": "N", "type": "integer", "jsonPath": ".spec.n"}]))),
    )
    .await?;
    let lists = lists.await?;
    let ended = tokio::time::timeout(Duration::from_secs(1), watch).await.ok().and_then(|r| r.ok()).flatten();
    let failed: Vec<&(Duration, u16)> = lists.iter().filter(|(_, c)| *c != 200).collect();
    let mut by_code = std::collections::BTreeMap::<u16, usize>::new();
    for (_, c) in &failed {
        *by_code.entry(*c).or_default() += 1;
    }
    let ms = |d: Duration| d.as_secs_f64() * 1000.0 - changed.as_secs_f64() * 1000.0;
    println!(
        "{}",
        json!({
            "objects": objects,
            "lists": lists.len(),
            "failedLists": failed.len(),
            "failedByCode": by_code.iter().map(|(c, n)| (c.to_string(), *n)).collect::<std::collections::BTreeMap<_, _>>(),
            "failedFromMs": failed.first().map(|(t, _)| ms(*t)),
            "failedUntilMs": failed.last().map(|(t, _)| ms(*t)),
            "watchEndedAfterMs": ended.map(ms),
        })
    );
    let _ = crds.delete(&name, &Default::default()).await;
    Ok(())
}

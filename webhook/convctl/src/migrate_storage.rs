//! `convctl migrate-storage`: rewrite every object of a CRD (or of an XRD's generated XR and
//! claim CRDs) at its storage version, then optionally prune `status.storedVersions` to that
//! version alone, so that an old version can be unserved and dropped (docs/convctl.md,
//! "migrate-storage").
//!
//! Each object is read at the storage version (paged LIST, all namespaces) and written back
//! unchanged with its resourceVersion (a PUT), as the kube-storage-version-migrator does: the
//! apiserver encodes the object at the storage version and compares the bytes with what etcd
//! holds; an object stored at an older version differs and is written, one already stored at
//! the storage version is identical and the apiserver skips the write (its resourceVersion
//! stays). So a rerun rewrites only what is left and a second run writes nothing: the command
//! is idempotent, and a run killed half-way loses nothing.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::num::NonZeroU32;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Args;
use dco_api::config::TargetKind;
use futures::StreamExt;
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
};
use serde_json::json;

use crate::CliError;
use crate::live::cluster::{ClusterArgs, Member};
use crate::output::{Finding, Location, OutputArgs, Report, Severity};

/// Bounds of the flags: every input is bounded.
pub const MAX_CONCURRENCY: u32 = 64;
pub const MAX_QPS: u32 = 10_000;
pub const MAX_PAGE_SIZE: u32 = 5_000;
/// Attempts per object: conflicts re-read the object, throttling and server errors back off.
const MAX_ATTEMPTS: u32 = 8;
/// A LIST whose continue token expired (410 Gone) starts over at most this many times.
const MAX_LIST_RESTARTS: u32 = 3;
/// Failed objects named one by one in the report; the rest are counted by reason.
const MAX_NAMED_FAILURES: usize = 50;
/// Distinct failure reasons counted.
const MAX_REASONS: usize = 20;
/// The field manager of the writes (they change no field, so it is never recorded).
const FIELD_MANAGER: &str = "convctl-migrate-storage";

#[derive(Args, Debug)]
#[command(after_help = "\
Memory is bounded by --page-size and --concurrency: at most 2 x page-size objects are held (one \
page being listed, one queued) plus one per worker, however many objects the target has.

Examples:
  convctl migrate-storage --crd widgets.example.org --dry-run
  convctl migrate-storage --crd widgets.example.org --prune-stored-versions
  convctl migrate-storage --xrd xwidgets.example.org --concurrency 16 --qps 200 -o json

Exit codes: 0 every object rewritten (or already migrated), 1 an object or the prune failed, \
2 usage (bad flags, the target not found).")]
pub struct MigrateStorageArgs {
    /// The CustomResourceDefinition whose objects to rewrite.
    #[arg(long, value_name = "NAME", conflicts_with = "xrd", required_unless_present = "xrd")]
    pub crd: Option<String>,
    /// The Crossplane CompositeResourceDefinition: its generated XR CRD and claim CRD.
    #[arg(short = 'x', long, value_name = "NAME")]
    pub xrd: Option<String>,
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// Objects written at once.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=MAX_CONCURRENCY as i64))]
    pub concurrency: u32,
    /// Requests per second at most (writes and the re-reads after a conflict).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=MAX_QPS as i64))]
    pub qps: u32,
    /// Objects per LIST page.
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u32).range(1..=MAX_PAGE_SIZE as i64))]
    pub page_size: u32,
    /// After every object was rewritten in this run without a failure, set status.storedVersions
    /// to the storage version alone.
    #[arg(long)]
    pub prune_stored_versions: bool,
    /// Count the objects; write nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Rewrite even when status.storedVersions already holds only the storage version.
    #[arg(long)]
    pub force: bool,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// One CRD to migrate, as read before the run.
#[derive(Clone, Debug)]
struct Resource {
    crd: String,
    group: String,
    kind: String,
    plural: String,
    namespaced: bool,
    storage: String,
    stored: Vec<String>,
}

/// What happened to one CRD's objects.
#[derive(Default)]
struct Tally {
    listed: AtomicU64,
    /// Written through the apiserver (now stored at the storage version).
    rewritten: AtomicU64,
    /// Of those, the apiserver found already stored at the storage version (no write).
    unchanged: AtomicU64,
    /// Deleted meanwhile (404).
    skipped: AtomicU64,
    failed: AtomicU64,
    conflicts: AtomicU64,
    failures: Mutex<Failures>,
}

#[derive(Default)]
struct Failures {
    named: Vec<(String, String)>,
    by_reason: BTreeMap<String, u64>,
}

impl Tally {
    fn fail(&self, object: String, reason: String) {
        self.failed.fetch_add(1, Ordering::SeqCst);
        let mut f = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        let key = reason_key(&reason);
        if f.by_reason.contains_key(&key) || f.by_reason.len() < MAX_REASONS {
            *f.by_reason.entry(key).or_default() += 1;
        } else {
            *f.by_reason.entry("other".into()).or_default() += 1;
        }
        if f.named.len() < MAX_NAMED_FAILURES {
            f.named.push((object, reason));
        }
    }

    fn done(&self) -> u64 {
        self.rewritten.load(Ordering::SeqCst)
            + self.skipped.load(Ordering::SeqCst)
            + self.failed.load(Ordering::SeqCst)
    }
}

/// A reason without the object's name, to count alike failures together.
fn reason_key(reason: &str) -> String {
    reason.split(':').next().unwrap_or(reason).chars().take(120).collect()
}

/// The outcome of one CRD.
struct Outcome {
    res: Resource,
    tally: Tally,
    /// The LIST got through every page.
    complete: bool,
    list_error: Option<String>,
    restarts: u32,
    seconds: f64,
    already: bool,
    stored_after: Vec<String>,
}

pub fn run(args: &MigrateStorageArgs) -> Result<(), CliError> {
    if !args.cluster.contexts.is_empty() || args.cluster.kubeconfig_dir.is_some() {
        return Err(CliError::Usage(
            "migrate-storage writes to one cluster: give --context (or none for the current one), not \
             --contexts or --kubeconfig-dir; run it once per cluster, as each cluster's storage is its own"
                .into(),
        ));
    }
    let members = args.cluster.members()?;
    let [member] = members.as_slice() else {
        return Err(CliError::Usage("migrate-storage needs exactly one cluster".into()));
    };
    let report = crate::live::block_on(migrate(args, member))?;
    crate::output::finish(&report, &args.output)
}

async fn migrate(args: &MigrateStorageArgs, member: &Member) -> Result<Report, CliError> {
    let mut report = Report::new("migrate-storage");
    let client = match member.connect(args.cluster.timeout()).await {
        Ok(c) => c,
        Err(e) => return Ok(unreachable(report, member, e, "could not be reached")),
    };
    let resources = match resolve(&client, args, &member.label).await {
        Ok(r) => r,
        // Reading the target failed (not a usage error): that is this cluster's finding.
        Err(CliError::Failed(e)) => return Ok(unreachable(report, member, e, "could not be read")),
        Err(e) => return Err(e),
    };
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let limiter =
        RateLimiter::direct(Quota::per_second(NonZeroU32::new(args.qps).unwrap_or(NonZeroU32::MIN)));
    let mut outcomes = Vec::new();
    for res in resources {
        let already = res.stored == [res.storage.clone()];
        if already && !args.force {
            let stored_after = res.stored.clone();
            outcomes.push(Outcome {
                res,
                tally: Tally::default(),
                complete: true,
                list_error: None,
                restarts: 0,
                seconds: 0.0,
                already: true,
                stored_after,
            });
            continue;
        }
        outcomes.push(rewrite_all(&client, res, args, &limiter).await);
    }
    prune(&crds, args, &mut outcomes, member, &mut report).await;
    build_report(&mut report, args, member, &outcomes);
    Ok(report)
}

/// The report of a cluster this run could not read: the error is its finding.
fn unreachable(mut report: Report, member: &Member, error: String, what: &str) -> Report {
    report.table = format!("error: {error}\n");
    report.findings.push(finding(member, "unreachable", Severity::Error, error, None, true));
    report.summary = json!({"context": member.label, "targets": []});
    report.summary_line = format!("migrate-storage: {} {what}; nothing written", member.label);
    report
}

/// The CRDs to migrate: the one named, or an XRD's generated ones.
async fn resolve(client: &Client, args: &MigrateStorageArgs, label: &str) -> Result<Vec<Resource>, CliError> {
    let names = match (&args.crd, &args.xrd) {
        (Some(crd), None) => vec![crd.clone()],
        (None, Some(xrd)) => xrd_crds(client, xrd, label).await?,
        _ => return Err(CliError::Usage("give exactly one of --crd or --xrd".into())),
    };
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut resources = Vec::new();
    for name in &names {
        resources.push(read_resource(&crds, name, label).await?);
    }
    Ok(resources)
}

/// The generated CRDs of an XRD (the XR's, and the claim's when it offers claims), read through
/// live::target as the other live commands read it. A missing XRD is a usage error; a cluster
/// that cannot be read (or has no Crossplane) is that cluster's finding.
async fn xrd_crds(client: &Client, name: &str, label: &str) -> Result<Vec<String>, CliError> {
    match crate::live::target::read(client, TargetKind::Xrd, name).await {
        Ok(t) => Ok(t.crds()),
        Err(e) if e.contains("does not exist") => Err(CliError::Usage(format!("{label}: {e}"))),
        Err(e) => Err(CliError::Failed(format!("{label}: {e}"))),
    }
}

async fn read_resource(
    crds: &Api<CustomResourceDefinition>,
    name: &str,
    label: &str,
) -> Result<Resource, CliError> {
    let crd = match crds.get_opt(name).await {
        Ok(Some(c)) => c,
        Ok(None) => {
            return Err(CliError::Usage(format!(
                "CRD {name} is not in {label}; check the name with `kubectl get crd`"
            )));
        }
        Err(e) => return Err(CliError::Failed(format!("reading CRD {name} in {label}: {e}"))),
    };
    let storage =
        crd.spec.versions.iter().find(|v| v.storage).map(|v| v.name.clone()).ok_or_else(|| {
            CliError::Usage(format!("CRD {name}: no entry of spec.versions has storage: true"))
        })?;
    Ok(Resource {
        crd: name.to_string(),
        group: crd.spec.group.clone(),
        kind: crd.spec.names.kind.clone(),
        plural: crd.spec.names.plural.clone(),
        namespaced: crd.spec.scope == "Namespaced",
        storage,
        stored: crd.status.and_then(|s| s.stored_versions).unwrap_or_default(),
    })
}

fn api_resource(res: &Resource) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(&res.group, &res.storage, &res.kind),
        &res.plural,
    )
}

/// Lists every object page by page into a bounded queue that `concurrency` workers drain.
async fn rewrite_all(
    client: &Client,
    res: Resource,
    args: &MigrateStorageArgs,
    limiter: &DefaultDirectRateLimiter,
) -> Outcome {
    let started = Instant::now();
    let ar = api_resource(&res);
    let tally = Tally::default();
    let bar = progress_bar(&res, args.dry_run);
    let (tx, rx) = tokio::sync::mpsc::channel::<DynamicObject>(args.page_size as usize);
    let lister = list_all(client, &ar, args.page_size, tx, &tally, bar.as_ref());
    let queue = futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|o| (o, rx)) });
    let (res_ref, ar_ref, tally_ref, bar_ref) = (&res, &ar, &tally, bar.as_ref());
    let workers = queue.for_each_concurrent(args.concurrency as usize, move |obj| {
        let (res, ar, tally, bar) = (res_ref, ar_ref, tally_ref, bar_ref);
        async move {
            if args.dry_run {
                tally.rewritten.fetch_add(1, Ordering::SeqCst);
            } else {
                rewrite(client, res, ar, obj, limiter, tally).await;
            }
            if let Some(b) = bar {
                b.inc(1);
            }
        }
    });
    let (listed, ()) = tokio::join!(lister, workers);
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    let (complete, list_error, restarts) = match listed {
        Ok(restarts) => (true, None, restarts),
        Err((e, restarts)) => (false, Some(e), restarts),
    };
    let stored_after = res.stored.clone();
    Outcome {
        res,
        tally,
        complete,
        list_error,
        restarts,
        seconds: started.elapsed().as_secs_f64(),
        already: false,
        stored_after,
    }
}

fn progress_bar(res: &Resource, dry_run: bool) -> Option<indicatif::ProgressBar> {
    if !std::io::stderr().is_terminal() {
        return None;
    }
    let bar = indicatif::ProgressBar::with_draw_target(Some(0), indicatif::ProgressDrawTarget::stderr());
    let verb = if dry_run { "counted" } else { "rewrote" };
    let template = format!("{} {verb} {{pos}}/{{len}} {{wide_bar}} {{per_sec}} {{elapsed}}", res.crd);
    if let Ok(style) = indicatif::ProgressStyle::with_template(&template) {
        bar.set_style(style);
    }
    Some(bar)
}

/// Pages through every object at the storage version into `tx`. A continue token that
/// expired (410) starts the LIST over: objects already rewritten are no-op writes the second
/// time. Returns the number of restarts, or the error that ended the LIST.
async fn list_all(
    client: &Client,
    ar: &ApiResource,
    page_size: u32,
    tx: tokio::sync::mpsc::Sender<DynamicObject>,
    tally: &Tally,
    bar: Option<&indicatif::ProgressBar>,
) -> Result<u32, (String, u32)> {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), ar);
    let mut restarts = 0;
    let mut token: Option<String> = None;
    let mut first = true;
    loop {
        let lp = ListParams { limit: Some(page_size), continue_token: token.clone(), ..Default::default() };
        let page = match api.list(&lp).await {
            Ok(p) => p,
            Err(kube::Error::Api(s)) if s.code == 410 && restarts < MAX_LIST_RESTARTS => {
                restarts += 1;
                token = None;
                first = true;
                continue;
            }
            Err(e) => return Err((format!("listing {} at {}: {e}", ar.plural, ar.api_version), restarts)),
        };
        if let Some(b) = bar {
            let more = page.metadata.remaining_item_count.unwrap_or(0).max(0) as u64;
            if first {
                b.set_length(b.position() + page.items.len() as u64 + more);
            }
        }
        first = false;
        tally.listed.fetch_add(page.items.len() as u64, Ordering::SeqCst);
        for obj in page.items {
            if tx.send(obj).await.is_err() {
                return Err(("the workers stopped".into(), restarts));
            }
        }
        token = page.metadata.continue_.filter(|t| !t.is_empty());
        if token.is_none() {
            return Ok(restarts);
        }
    }
}

/// One object's no-op update, retried on conflict (re-read) and on throttling or server errors
/// (backoff); a 404 means it was deleted meanwhile.
async fn rewrite(
    client: &Client,
    res: &Resource,
    ar: &ApiResource,
    mut obj: DynamicObject,
    limiter: &DefaultDirectRateLimiter,
    tally: &Tally,
) {
    let name = obj.metadata.name.clone().unwrap_or_default();
    let ns = obj.metadata.namespace.clone();
    let label = match &ns {
        Some(ns) => format!("{} {ns}/{name}", res.kind),
        None => format!("{} {name}", res.kind),
    };
    let api: Api<DynamicObject> = match (&ns, res.namespaced) {
        (Some(ns), true) => Api::namespaced_with(client.clone(), ns, ar),
        _ => Api::all_with(client.clone(), ar),
    };
    let pp = PostParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() };
    let mut last = String::new();
    for attempt in 0..MAX_ATTEMPTS {
        limiter.until_ready().await;
        let before = obj.metadata.resource_version.clone();
        match api.replace(&name, &pp, &obj).await {
            Ok(after) => {
                tally.rewritten.fetch_add(1, Ordering::SeqCst);
                if after.metadata.resource_version == before {
                    tally.unchanged.fetch_add(1, Ordering::SeqCst);
                }
                return;
            }
            Err(kube::Error::Api(s)) if s.code == 404 => {
                tally.skipped.fetch_add(1, Ordering::SeqCst);
                return;
            }
            Err(kube::Error::Api(s)) if s.code == 409 => {
                tally.conflicts.fetch_add(1, Ordering::SeqCst);
                last = format!("conflict: {}", s.message);
                limiter.until_ready().await;
                match api.get_opt(&name).await {
                    Ok(Some(fresh)) => obj = fresh,
                    Ok(None) => {
                        tally.skipped.fetch_add(1, Ordering::SeqCst);
                        return;
                    }
                    Err(e) => {
                        last = format!("re-reading after a conflict: {e}");
                        backoff(attempt).await;
                    }
                }
            }
            Err(kube::Error::Api(s)) if matches!(s.code, 429 | 500 | 502 | 503 | 504) => {
                last = format!("HTTP {}: {}", s.code, s.message);
                backoff(attempt).await;
            }
            Err(kube::Error::Api(s)) => {
                let fix = match s.code {
                    403 => "; the user needs update on this resource",
                    422 => "; the object no longer passes the storage version's schema or validation",
                    _ => "",
                };
                tally.fail(label, format!("HTTP {} {}: {}{fix}", s.code, s.reason, s.message));
                return;
            }
            // Timeouts and broken connections: transient.
            Err(e) => {
                last = format!("request failed: {e}");
                backoff(attempt).await;
            }
        }
    }
    tally.fail(label, format!("gave up after {MAX_ATTEMPTS} attempts: {last}"));
}

async fn backoff(attempt: u32) {
    tokio::time::sleep(Duration::from_millis(100u64 << attempt.min(6))).await;
}

/// `--prune-stored-versions`: only when every CRD's LIST completed and no object failed, and
/// the storage version is still the one the objects were rewritten at. The status write
/// carries the CRD's resourceVersion just read, so a concurrent change of the CRD makes it fail
/// rather than prune over it.
async fn prune(
    crds: &Api<CustomResourceDefinition>,
    args: &MigrateStorageArgs,
    outcomes: &mut [Outcome],
    member: &Member,
    report: &mut Report,
) {
    if !args.prune_stored_versions {
        return;
    }
    let pending: Vec<usize> = (0..outcomes.len()).filter(|&i| !outcomes[i].already).collect();
    if pending.is_empty() {
        return;
    }
    let failed: u64 = outcomes.iter().map(|o| o.tally.failed.load(Ordering::SeqCst)).sum();
    let incomplete: Vec<&str> = outcomes.iter().filter(|o| !o.complete).map(|o| o.res.crd.as_str()).collect();
    let refusal = if args.dry_run {
        Some(("--dry-run writes nothing".to_string(), false))
    } else if failed > 0 {
        Some((
            format!(
                "{failed} object(s) failed to be rewritten: an object still stored at an old version would be \
                 unreadable once that version is dropped; fix the failures and rerun"
            ),
            true,
        ))
    } else if !incomplete.is_empty() {
        Some((
            format!(
                "the LIST of {} did not complete, so not every object was rewritten; rerun",
                incomplete.join(", ")
            ),
            true,
        ))
    } else {
        None
    };
    if let Some((why, fails)) = refusal {
        let sev = if fails { Severity::Error } else { Severity::Note };
        let msg = format!("status.storedVersions left as it is: {why}");
        report.findings.push(finding(member, "prune-refused", sev, msg, None, fails));
        return;
    }
    for i in pending {
        let o = &mut outcomes[i];
        match prune_one(crds, &o.res).await {
            Ok(after) => o.stored_after = after,
            Err(e) => report.findings.push(finding(
                member,
                "prune-failed",
                Severity::Error,
                e,
                Some(&o.res.crd),
                true,
            )),
        }
    }
}

async fn prune_one(crds: &Api<CustomResourceDefinition>, res: &Resource) -> Result<Vec<String>, String> {
    let crd =
        crds.get(&res.crd).await.map_err(|e| format!("re-reading CRD {} before the prune: {e}", res.crd))?;
    let storage = crd.spec.versions.iter().find(|v| v.storage).map(|v| v.name.clone()).unwrap_or_default();
    if storage != res.storage {
        return Err(format!(
            "CRD {}: the storage version changed from {} to {storage} during the run; objects written \
             meanwhile may be stored at either; rerun to rewrite them at {storage}",
            res.crd, res.storage
        ));
    }
    let rv = crd.metadata.resource_version.clone();
    let body = json!({"metadata": {"resourceVersion": rv}, "status": {"storedVersions": [storage]}});
    crds.patch_status(&res.crd, &PatchParams::default(), &Patch::Merge(&body)).await.map_err(|e| {
        format!("CRD {}: writing status.storedVersions: {e}; rerun with --prune-stored-versions", res.crd)
    })?;
    Ok(vec![storage])
}

fn finding(
    member: &Member,
    rule: &str,
    severity: Severity,
    message: String,
    object: Option<&str>,
    fails: bool,
) -> Finding {
    Finding {
        rule: rule.into(),
        severity,
        message,
        fix: None,
        location: Location {
            object: object.map(str::to_string),
            context: Some(member.label.clone()),
            ..Default::default()
        },
        fails,
    }
}

fn build_report(report: &mut Report, args: &MigrateStorageArgs, member: &Member, outcomes: &[Outcome]) {
    let mut table = String::new();
    let mut targets = Vec::new();
    let (mut rewritten, mut skipped, mut failed, mut objects, mut seconds) = (0, 0, 0, 0, 0.0);
    for o in outcomes {
        let t = &o.tally;
        let (r, u, s, f) = (
            t.rewritten.load(Ordering::SeqCst),
            t.unchanged.load(Ordering::SeqCst),
            t.skipped.load(Ordering::SeqCst),
            t.failed.load(Ordering::SeqCst),
        );
        let done = t.done();
        let rate = if o.seconds > 0.0 { done as f64 / o.seconds } else { 0.0 };
        (rewritten, skipped, failed, objects, seconds) =
            (rewritten + r, skipped + s, failed + f, objects + done, seconds + o.seconds);
        let state = if o.already {
            "already-migrated"
        } else if args.dry_run {
            "dry-run"
        } else if f > 0 || !o.complete {
            "failed"
        } else {
            "rewritten"
        };
        let crd = o.res.crd.as_str();
        if o.already {
            let msg = format!(
                "{crd}: status.storedVersions is already [{}], the storage version; nothing to rewrite (--force rewrites anyway)",
                o.res.storage
            );
            report.findings.push(finding(member, "already-migrated", Severity::Note, msg, Some(crd), false));
        }
        if let Some(e) = &o.list_error {
            let msg =
                format!("{crd}: {e}; rerun (objects already rewritten are no-op writes the second time)");
            report.findings.push(finding(member, "list-failed", Severity::Error, msg, Some(crd), true));
        }
        let failures = t.failures.lock().unwrap_or_else(|e| e.into_inner());
        for (object, reason) in &failures.named {
            let msg = format!("{crd}: {object}: {reason}");
            report.findings.push(finding(member, "rewrite-failed", Severity::Error, msg, Some(object), true));
        }
        if f as usize > failures.named.len() {
            let msg = format!(
                "{crd}: {} more object(s) failed, not named here; by reason: {:?}",
                f as usize - failures.named.len(),
                failures.by_reason
            );
            report.findings.push(finding(member, "rewrite-failed", Severity::Error, msg, Some(crd), true));
        }
        table.push_str(&format!(
            "{crd} ({}): storage {}, storedVersions [{}] -> [{}]: {state}\n",
            member.label,
            o.res.storage,
            o.res.stored.join(", "),
            o.stored_after.join(", ")
        ));
        if !o.already {
            let verb = if args.dry_run { "would rewrite" } else { "rewritten" };
            table.push_str(&format!(
                "  listed {}, {verb} {r} ({u} already stored at {}), skipped {s} (deleted meanwhile), failed {f}; \
                 {:.1} s, {rate:.0} objects/s{}\n",
                t.listed.load(Ordering::SeqCst),
                o.res.storage,
                o.seconds,
                if o.restarts > 0 { format!("; the LIST restarted {} time(s)", o.restarts) } else { String::new() }
            ));
        }
        targets.push(json!({
            "crd": crd,
            "storageVersion": o.res.storage,
            "storedVersionsBefore": o.res.stored,
            "storedVersionsAfter": o.stored_after,
            "state": state,
            "listed": t.listed.load(Ordering::SeqCst),
            "rewritten": r,
            "alreadyAtStorageVersion": u,
            "skipped": s,
            "failed": f,
            "failuresByReason": failures.by_reason,
            "conflictsRetried": t.conflicts.load(Ordering::SeqCst),
            "listRestarts": o.restarts,
            "seconds": o.seconds,
            "objectsPerSecond": rate,
        }));
    }
    for f in &report.findings {
        table.push_str(&format!("{}: {}\n", f.severity.word(), f.message));
    }
    let rate = if seconds > 0.0 { objects as f64 / seconds } else { 0.0 };
    report.summary = json!({
        "context": member.label,
        "dryRun": args.dry_run,
        "targets": targets,
        "rewritten": rewritten,
        "skipped": skipped,
        "failed": failed,
        "objectsPerSecond": rate,
        "counts": report.counts(),
    });
    report.table = table;
    report.summary_line = if outcomes.iter().all(|o| o.already) {
        "migrate-storage: already migrated, nothing written (storedVersions holds only the storage version)"
            .into()
    } else if args.dry_run {
        format!("migrate-storage --dry-run: {rewritten} object(s) would be rewritten; nothing written")
    } else {
        format!(
            "migrate-storage: {rewritten} rewritten, {skipped} skipped, {failed} failed ({rate:.0} objects/s){}",
            if report.failed() { "; FAILED" } else { "" }
        )
    };
}

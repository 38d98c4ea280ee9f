//! A ConversionWebhookServer's status as a pure function of what the reconcile gathered: the
//! workload it applied (or nothing, while a deletion is held), the served-target Lease
//! aggregate, the configs assigned to it, the other default servers and, while replicas are
//! missing, the failing containers of its Pods. `mod.rs` gathers these facts, renders, and
//! writes the result once.

use std::time::Duration;

use dco_api::ServerStatus;
use dco_api::server::AssignedConfig;
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use crate::names::ServerNames;
use crate::served::Aggregate;
use crate::server::cert_manager::Standing;
use crate::server::condition;
use dco_state::conditions;

/// The Deployment as the apply returned it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Workload {
    pub replicas: i32,
    pub ready: i32,
    /// `spec.replicas`, or `replicas` when an HPA owns the count.
    pub desired: i32,
}

impl Workload {
    /// Fewer Pods ready than asked for, or than run: a roll whose new Pods do not come up
    /// (the old ones still serve, `maxUnavailable: 0`) is missing one too.
    pub fn missing(&self) -> bool {
        self.ready < self.desired.max(self.replicas)
    }
}

/// How the serving certificate stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Certificate {
    /// The operator's own leaf, valid until this Unix time.
    SelfManaged { leaf_not_after: i64 },
    /// `spec.certificate` has cert-manager issue it: as `cert_manager::assess` found it.
    CertManager(Standing),
}

/// What an apply reconcile wrote: absent while a deletion is held (cleanup applies nothing,
/// so those parts of status stay as they were).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Applied {
    pub workload: Workload,
    /// The Service's first port.
    pub service_port: i32,
    pub certificate: Certificate,
}

#[derive(Clone, Debug)]
pub struct StatusInputs<'a> {
    pub names: &'a ServerNames,
    pub generation: Option<i64>,
    pub now: Timestamp,
    pub applied: Option<Applied>,
    /// Why the deletion waits, when it does.
    pub deletion_blocked: Option<String>,
    pub leases: Aggregate,
    pub assigned: Vec<AssignedConfig>,
    /// This server's `spec.default`.
    pub default: bool,
    /// The other servers with `spec.default: true` that are not being deleted.
    pub other_defaults: Vec<String>,
    /// The failing containers of the server's Pods (`pod_failures`): read only while replicas
    /// are missing (`Workload::missing`), else empty.
    pub pod_failures: Vec<PodFailure>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Rendered {
    pub status: ServerStatus,
    /// Just after the first live Lease would lapse, if any is live.
    pub lease_recheck: Option<Duration>,
    /// Soon, while replicas are missing (`Workload::missing`): a Pod's crash changes nothing the
    /// controller watches, so only a look at its Pods finds it (`PODS_RECHECK`).
    pub pods_recheck: Option<Duration>,
    /// The failures to send a Warning Event about (reason `PodsFailing`, note
    /// `PodFailure::line`): those the `Available` condition did not name before, so a crash
    /// loop sends one, not one a turn.
    pub events: Vec<PodFailure>,
}

/// The reason of `Available` while containers of the server's Pods fail.
pub const PODS_FAILING: &str = "PodsFailing";

/// How often a server with missing replicas is looked at (one Pod list each).
pub const PODS_RECHECK: Duration = Duration::from_secs(10);

/// Pods read per look (one page): enough for any server's replicas to show their failure;
/// the message names at most `PODS_NAMED` of them.
pub const PODS_PAGE: u32 = 20;
const PODS_NAMED: usize = 3;
/// Characters kept of a termination or waiting message's last line.
const DETAIL_MAX: usize = 240;

/// A container of a server's Pod that does not run: waiting on an error (crash-loop back-off,
/// an image that cannot be pulled, a configuration error), or not ready after its last run
/// ended non-zero.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodFailure {
    pub pod: String,
    pub namespace: String,
    /// The Pod's uid, for the Event's reference to it.
    pub uid: Option<String>,
    pub container: String,
    /// The kubelet's word for the container now: the waiting reason, else the last
    /// termination's (`Error`).
    pub reason: String,
    /// The exit code of its last run, when that ended non-zero.
    pub exit_code: Option<i32>,
    pub restarts: i32,
    /// The last line of the termination message (what the container wrote to
    /// `/dev/termination-log`, or with `FallbackToLogsOnError` its log's end), else the
    /// waiting message of a container that did not start; bounded to `DETAIL_MAX`.
    pub detail: Option<String>,
}

impl PodFailure {
    /// What stays the same across a crash loop's turns, whose reason alternates between
    /// `CrashLoopBackOff` and `Error` and whose restarts count up: one Event per this.
    fn key(&self) -> String {
        let cause = match (self.exit_code, self.reason.as_str()) {
            (Some(code), _) => format!("exited with code {code}"),
            (None, "ErrImagePull" | "ImagePullBackOff") => "cannot pull its image".to_string(),
            (None, reason) => reason.to_string(),
        };
        format!("Pod {} container {}: {cause}", self.pod, self.container)
    }

    /// One line: the key, the kubelet's reason and restarts, the detail, and where to read on.
    pub fn line(&self) -> String {
        let (ns, pod, c) = (&self.namespace, &self.pod, &self.container);
        let restarts =
            if self.restarts == 1 { "1 restart".to_string() } else { format!("{} restarts", self.restarts) };
        let detail = self.detail.as_ref().map(|d| format!(": {d:?}")).unwrap_or_default();
        // A container that ran has a log to read; one that never started has only its events.
        let more = if self.exit_code.is_some() {
            format!("kubectl logs -n {ns} {pod} -c {c} --previous")
        } else {
            format!("kubectl describe pod -n {ns} {pod}")
        };
        format!("{} ({}, {restarts}){detail} — {more}", self.key(), self.reason)
    }
}

/// The failing containers of `pods` (one list page of the server's Pods), by Pod name. Pods
/// being deleted or finished are left out, and so is a container that is ready (an old crash
/// is not today's failure) or merely starting (`ContainerCreating`, `PodInitializing`).
pub fn pod_failures(pods: &[Pod]) -> Vec<PodFailure> {
    let mut out = Vec::new();
    for p in pods {
        let Some(st) = p.status.as_ref() else { continue };
        if p.metadata.deletion_timestamp.is_some()
            || matches!(st.phase.as_deref(), Some("Succeeded" | "Failed"))
        {
            continue;
        }
        let statuses =
            st.init_container_statuses.iter().flatten().chain(st.container_statuses.iter().flatten());
        for cs in statuses {
            if let Some(f) = container_failure(p, cs) {
                out.push(f);
            }
        }
    }
    out.sort_by(|a, b| (&a.pod, &a.container).cmp(&(&b.pod, &b.container)));
    out
}

fn container_failure(p: &Pod, cs: &ContainerStatus) -> Option<PodFailure> {
    if cs.ready {
        return None;
    }
    let state = cs.state.as_ref();
    let waiting = state.and_then(|s| s.waiting.as_ref()).filter(|w| {
        !matches!(w.reason.as_deref(), None | Some("" | "ContainerCreating" | "PodInitializing"))
    });
    // The run that ended: the current state while the kubelet has not restarted it yet, else
    // the last one.
    let ended = state
        .and_then(|s| s.terminated.as_ref())
        .or_else(|| cs.last_state.as_ref().and_then(|s| s.terminated.as_ref()))
        .filter(|t| t.exit_code != 0);
    if waiting.is_none() && ended.is_none() {
        return None;
    }
    // An error of its own (an image, a configuration) outranks an earlier run's exit code.
    let crash_loop = waiting.is_none_or(|w| w.reason.as_deref() == Some("CrashLoopBackOff"));
    let exit_code = ended.filter(|_| crash_loop).map(|t| t.exit_code);
    let reason = waiting
        .and_then(|w| w.reason.clone())
        .or_else(|| ended.and_then(|t| t.reason.clone()))
        .unwrap_or_else(|| "Error".to_string());
    let detail = if exit_code.is_some() {
        ended.and_then(|t| t.message.as_deref()).and_then(last_line)
    } else {
        waiting.and_then(|w| w.message.as_deref()).and_then(last_line)
    };
    Some(PodFailure {
        pod: p.name_any(),
        namespace: p.namespace().unwrap_or_default(),
        uid: p.uid(),
        container: cs.name.clone(),
        reason,
        exit_code,
        restarts: cs.restart_count,
        detail,
    })
}

/// The last non-blank line of `text`, cut to `DETAIL_MAX` characters.
fn last_line(text: &str) -> Option<String> {
    let line = text.lines().map(str::trim).rfind(|l| !l.is_empty())?;
    let mut out: String = line.chars().take(DETAIL_MAX).collect();
    if out.len() < line.len() {
        out.push('…');
    }
    Some(out)
}

/// `Available`'s reason and message from the workload and the failing containers; with no
/// failure, the replica count alone.
fn availability(names: &ServerNames, w: Workload, failures: &[PodFailure]) -> (&'static str, String) {
    let counted = format!(
        "{} of {} replicas of Deployment {}/{} are ready",
        w.ready, w.desired, names.namespace, names.workload
    );
    if failures.is_empty() {
        return (if w.ready > 0 { "ReplicasReady" } else { "NoReadyReplicas" }, counted);
    }
    let mut lines: Vec<String> = failures.iter().take(PODS_NAMED).map(PodFailure::line).collect();
    if failures.len() > PODS_NAMED {
        lines.push(format!(
            "and {} more (kubectl get pods -n {} -l {}={})",
            failures.len() - PODS_NAMED,
            names.namespace,
            dco_api::LABEL_INSTANCE,
            names.server
        ));
    }
    let containers = if failures.len() == 1 { "container fails" } else { "containers fail" };
    (PODS_FAILING, format!("{counted}; {} {containers}: {}", failures.len(), lines.join("; ")))
}

/// The status after this reconcile, from the one before (`lastTransitionTime`s carry over).
pub fn render(previous: Option<&ServerStatus>, facts: &StatusInputs<'_>) -> Rendered {
    let (names, gen_, now) = (facts.names, facts.generation, facts.now);
    let mut status = previous.cloned().unwrap_or_default();
    let (mut events, mut pods_recheck) = (Vec::new(), None);
    if let Some(applied) = &facts.applied {
        status.observed_generation = gen_;
        match &applied.certificate {
            Certificate::CertManager(st) => conditions::set(
                &mut status.conditions,
                condition::CERTIFICATE_READY,
                st.ready,
                st.reason,
                st.message.clone(),
                gen_,
                now,
            ),
            &Certificate::SelfManaged { leaf_not_after } => conditions::set(
                &mut status.conditions,
                condition::CERTIFICATE_READY,
                true,
                "SelfManaged",
                format!(
                    "Secret {}/{} holds a certificate for {} valid until {}",
                    names.namespace,
                    names.tls_secret,
                    names.service_host(),
                    Timestamp::from_second(leaf_not_after).map(|t| t.to_string()).unwrap_or_default()
                ),
                gen_,
                now,
            ),
        }

        let port = applied.service_port;
        status.endpoint = Some(format!("https://{}:{port}", names.service_host()));
        conditions::set(
            &mut status.conditions,
            condition::SERVICE_READY,
            true,
            "Applied",
            format!("Service {}/{} routes port {port} to the webhook Pods", names.namespace, names.service()),
            gen_,
            now,
        );

        let w = applied.workload;
        status.replicas = w.replicas;
        status.ready_replicas = w.ready;
        let failures: &[PodFailure] = if w.missing() { &facts.pod_failures } else { &[] };
        let said = previous
            .and_then(|s| conditions::find(&s.conditions, condition::AVAILABLE))
            .filter(|c| c.reason == PODS_FAILING)
            .map(|c| c.message.as_str())
            .unwrap_or_default();
        // Only the named failures: an Event for one the message leaves out would repeat.
        for f in failures.iter().take(PODS_NAMED) {
            if !said.contains(&format!("{} (", f.key())) {
                events.push(f.clone());
            }
        }
        let (reason, message) = availability(names, w, failures);
        conditions::set(
            &mut status.conditions,
            condition::AVAILABLE,
            w.ready > 0,
            reason,
            message,
            gen_,
            now,
        );
        if w.missing() {
            pods_recheck = Some(PODS_RECHECK);
        }
    }
    if let Some(message) = &facts.deletion_blocked {
        conditions::set(
            &mut status.conditions,
            condition::DELETION_BLOCKED,
            true,
            "ConfigsStillAssigned",
            message.clone(),
            gen_,
            now,
        );
    }

    facts.leases.write_to(&mut status);
    status.assigned_configs = facts.assigned.clone();
    let others = &facts.other_defaults;
    if facts.default && !others.is_empty() {
        conditions::set(
            &mut status.conditions,
            condition::DEFAULT_CONFLICT,
            true,
            "SeveralDefaults",
            format!(
                "ConversionWebhookServers {others:?} also have spec.default: true; set it on only one — until then targets that need the default server cannot be resolved"
            ),
            gen_,
            now,
        );
    } else {
        conditions::remove(&mut status.conditions, condition::DEFAULT_CONFLICT);
    }

    // Look again just after the first live Lease would lapse, so a dead replica leaves the
    // intersection even though no watch event announces it.
    let lease_recheck = facts
        .leases
        .next_expiry
        .and_then(|e| u64::try_from(e.as_second() - now.as_second() + 1).ok())
        .map(|s| Duration::from_secs(s.max(1)));
    Rendered { status, lease_recheck, pods_recheck, events }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::SignedDuration;

    fn now() -> Timestamp {
        Timestamp::from_second(1_800_000_000).unwrap()
    }

    fn applied(ready: i32) -> Applied {
        Applied {
            workload: Workload { replicas: 2, ready, desired: 3 },
            service_port: 443,
            certificate: Certificate::SelfManaged { leaf_not_after: 1_800_086_400 },
        }
    }

    fn facts(names: &ServerNames, applied: Option<Applied>) -> StatusInputs<'_> {
        StatusInputs {
            names,
            generation: Some(4),
            now: now(),
            applied,
            deletion_blocked: None,
            leases: Aggregate::default(),
            assigned: Vec::new(),
            default: false,
            other_defaults: Vec::new(),
            pod_failures: Vec::new(),
        }
    }

    fn cond<'a>(s: &'a ServerStatus, t: &str) -> Option<(&'a str, &'a str, &'a str)> {
        conditions::find(&s.conditions, t).map(|c| (c.status.as_str(), c.reason.as_str(), c.message.as_str()))
    }

    fn pod(name: &str, statuses: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "dco-system"},
            "status": {"phase": "Running", "containerStatuses": statuses}}))
        .unwrap()
    }

    /// dco-webhook between two turns of a crash loop, as a kubelet with
    /// `terminationMessagePolicy: FallbackToLogsOnError` reports it.
    fn crash_looping(name: &str, restarts: i32, waiting: bool) -> Pod {
        let state = if waiting {
            serde_json::json!({"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 10s restarting failed container"}})
        } else {
            serde_json::json!({"running": {}})
        };
        pod(
            name,
            serde_json::json!([{"name": "webhook", "image": "dco-webhook", "imageID": "", "ready": false,
            "restartCount": restarts, "state": state,
            "lastState": {"terminated": {"exitCode": 1, "reason": "Error",
                "message": "INFO starting\nError: cannot listen on 0.0.0.0:9443 for conversion reviews (--listen): address in use\n"}}}]),
        )
    }

    fn failing(f: &mut StatusInputs<'_>, pods: &[Pod]) {
        f.pod_failures = pod_failures(pods);
    }

    #[test]
    fn a_crash_loop_is_one_failure_with_its_exit_code_and_last_words() {
        let got = pod_failures(&[crash_looping("p1", 3, true)]);
        assert_eq!(
            got,
            [PodFailure {
                pod: "p1".into(),
                namespace: "dco-system".into(),
                uid: None,
                container: "webhook".into(),
                reason: "CrashLoopBackOff".into(),
                exit_code: Some(1),
                restarts: 3,
                detail: Some(
                    "Error: cannot listen on 0.0.0.0:9443 for conversion reviews (--listen): address in use"
                        .into()
                ),
            }]
        );
        // Running again, not yet failed: the same failure, the kubelet's word for the last run.
        let between = pod_failures(&[crash_looping("p1", 4, false)]);
        assert_eq!((between[0].reason.as_str(), between[0].exit_code), ("Error", Some(1)));
        assert_eq!(between[0].key(), got[0].key());
        // Still terminated (restartPolicy Never, or before the kubelet's restart).
        let ended = pod(
            "p2",
            serde_json::json!([{"name": "webhook", "image": "", "imageID": "", "ready": false, "restartCount": 0,
                "state": {"terminated": {"exitCode": 2, "reason": "Error"}}}]),
        );
        let got = pod_failures(&[ended]);
        assert_eq!(
            (got[0].reason.as_str(), got[0].exit_code, got[0].detail.as_deref()),
            ("Error", Some(2), None)
        );
    }

    #[test]
    fn only_containers_that_fail_now_are_failures() {
        let ready_after_a_crash = pod(
            "ready",
            serde_json::json!([{"name": "webhook", "image": "", "imageID": "", "ready": true, "restartCount": 1,
                "state": {"running": {}}, "lastState": {"terminated": {"exitCode": 1}}}]),
        );
        let starting = pod(
            "starting",
            serde_json::json!([{"name": "webhook", "image": "", "imageID": "", "ready": false, "restartCount": 0,
                "state": {"waiting": {"reason": "ContainerCreating"}}}]),
        );
        let not_ready_yet = pod(
            "probing",
            serde_json::json!([{"name": "webhook", "image": "", "imageID": "", "ready": false, "restartCount": 0,
                "state": {"running": {}}}]),
        );
        let mut deleted = crash_looping("deleted", 2, true);
        deleted.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now()));
        let no_status = Pod { metadata: crash_looping("x", 0, true).metadata, ..Pod::default() };
        assert_eq!(pod_failures(&[ready_after_a_crash, starting, not_ready_yet, deleted, no_status]), []);
    }

    #[test]
    fn a_container_that_cannot_start_says_the_kubelet_s_message() {
        let pull = pod(
            "pull",
            serde_json::json!([{"name": "webhook", "image": "", "imageID": "", "ready": false, "restartCount": 0,
                "state": {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image \"dco-webhook:nope\""}}}]),
        );
        // A configuration error outranks the exit code of a run before it.
        let config = pod(
            "config",
            serde_json::json!([{"name": "webhook", "image": "", "imageID": "", "ready": false, "restartCount": 2,
                "state": {"waiting": {"reason": "CreateContainerConfigError", "message": "secret \"x\" not found"}},
                "lastState": {"terminated": {"exitCode": 1}}}]),
        );
        let got = pod_failures(&[pull, config]);
        assert_eq!(
            got.iter()
                .map(|f| (f.pod.as_str(), f.reason.as_str(), f.exit_code, f.detail.as_deref()))
                .collect::<Vec<_>>(),
            [
                ("config", "CreateContainerConfigError", None, Some("secret \"x\" not found")),
                ("pull", "ImagePullBackOff", None, Some("Back-off pulling image \"dco-webhook:nope\"")),
            ]
        );
        assert_eq!(got[1].key(), "Pod pull container webhook: cannot pull its image");
        assert_eq!(
            got[1].line(),
            "Pod pull container webhook: cannot pull its image (ImagePullBackOff, 0 restarts): \"Back-off pulling image \\\"dco-webhook:nope\\\"\" — kubectl describe pod -n dco-system pull"
        );
    }

    #[test]
    fn a_long_last_line_is_cut() {
        let long = "x".repeat(1000);
        let cut = last_line(&format!("first\n{long}\n  \n")).unwrap();
        assert_eq!(cut.chars().count(), DETAIL_MAX + 1);
        assert!(cut.ends_with('…'));
        assert_eq!(last_line(" \n"), None);
    }

    #[test]
    fn failing_pods_are_the_available_condition_s_reason_with_the_command_to_read_more() {
        let names = ServerNames::new("a", "dco-system");
        let mut f = facts(&names, Some(applied(0)));
        failing(&mut f, &[crash_looping("dco-webhook-a-1", 3, true)]);
        let r = render(None, &f);
        let line = "Pod dco-webhook-a-1 container webhook: exited with code 1 (CrashLoopBackOff, 3 restarts): \"Error: cannot listen on 0.0.0.0:9443 for conversion reviews (--listen): address in use\" — kubectl logs -n dco-system dco-webhook-a-1 -c webhook --previous";
        assert_eq!(
            cond(&r.status, condition::AVAILABLE),
            Some((
                "False",
                PODS_FAILING,
                format!("0 of 3 replicas of Deployment dco-system/dco-webhook-a are ready; 1 container fails: {line}").as_str()
            ))
        );
        assert_eq!(r.events.iter().map(PodFailure::line).collect::<Vec<_>>(), [line]);
        assert_eq!(r.pods_recheck, Some(PODS_RECHECK));

        // The next turns of the same loop: the message follows the restarts, no second Event.
        failing(&mut f, &[crash_looping("dco-webhook-a-1", 4, false)]);
        let r2 = render(Some(&r.status), &f);
        assert!(
            cond(&r2.status, condition::AVAILABLE)
                .unwrap()
                .2
                .contains("exited with code 1 (Error, 4 restarts)")
        );
        assert_eq!(r2.events, []);
        // Another replica fails the same way: its own Event; one ready replica makes it Available.
        f.applied = Some(applied(1));
        failing(
            &mut f,
            &[crash_looping("dco-webhook-a-1", 5, true), crash_looping("dco-webhook-a-2", 1, true)],
        );
        let r3 = render(Some(&r2.status), &f);
        let (status, reason, message) = cond(&r3.status, condition::AVAILABLE).unwrap();
        assert_eq!((status, reason), ("True", PODS_FAILING));
        assert!(message.starts_with("1 of 3 replicas of Deployment dco-system/dco-webhook-a are ready; 2 containers fail: Pod dco-webhook-a-1 "));
        assert_eq!(r3.events.len(), 1);
        assert!(r3.events[0].line().starts_with(
            "Pod dco-webhook-a-2 container webhook: exited with code 1 (CrashLoopBackOff, 1 restart)"
        ));

        // Every replica ready: the failures are not looked at, nor the Pods again soon.
        f.applied = Some(Applied { workload: Workload { replicas: 3, ready: 3, desired: 3 }, ..applied(3) });
        let r4 = render(Some(&r3.status), &f);
        assert_eq!(cond(&r4.status, condition::AVAILABLE).unwrap().1, "ReplicasReady");
        assert_eq!((r4.events.len(), r4.pods_recheck), (0, None));
        // Failing again after that: said again.
        f.applied = Some(applied(0));
        assert_eq!(render(Some(&r4.status), &f).events.len(), 2);
    }

    #[test]
    fn a_roll_whose_new_pod_fails_is_available_and_says_so() {
        let names = ServerNames::new("a", "dco-system");
        // maxSurge 1: the new Pod beside the two old, ready ones.
        let roll = Applied { workload: Workload { replicas: 3, ready: 2, desired: 2 }, ..applied(2) };
        let mut f = facts(&names, Some(roll));
        failing(&mut f, &[crash_looping("new", 2, true)]);
        let r = render(None, &f);
        let (status, reason, message) = cond(&r.status, condition::AVAILABLE).unwrap();
        assert_eq!((status, reason), ("True", PODS_FAILING));
        assert!(
            message.starts_with("2 of 2 replicas of Deployment dco-system/dco-webhook-a are ready; 1 container fails: Pod new "),
            "{message}"
        );
        assert_eq!((r.events.len(), r.pods_recheck), (1, Some(PODS_RECHECK)));
    }

    #[test]
    fn the_message_names_a_few_pods_and_counts_the_rest() {
        let names = ServerNames::new("a", "dco-system");
        let mut f = facts(&names, Some(applied(0)));
        let pods: Vec<Pod> = (1..=5).map(|i| crash_looping(&format!("p{i}"), 1, true)).collect();
        failing(&mut f, &pods);
        let r = render(None, &f);
        let message = cond(&r.status, condition::AVAILABLE).unwrap().2;
        assert!(message.contains("; 5 containers fail: Pod p1 "), "{message}");
        assert!(message.contains("Pod p3 ") && !message.contains("Pod p4 "), "{message}");
        assert!(
            message
                .ends_with("; and 2 more (kubectl get pods -n dco-system -l conversion.dco.rs/instance=a)"),
            "{message}"
        );
        assert_eq!(r.events.len(), PODS_NAMED, "no Event for a failure the message leaves out");
        assert_eq!(render(Some(&r.status), &f).events.len(), 0);
    }

    #[test]
    fn a_ready_workload_is_available_with_its_endpoint_and_certificate() {
        let names = ServerNames::new("a", "dco-system");
        let s = render(None, &facts(&names, Some(applied(2)))).status;
        assert_eq!(s.observed_generation, Some(4));
        assert_eq!((s.replicas, s.ready_replicas), (2, 2));
        assert_eq!(s.endpoint.as_deref(), Some("https://dco-webhook-a.dco-system.svc:443"));
        assert_eq!(
            cond(&s, condition::AVAILABLE),
            Some((
                "True",
                "ReplicasReady",
                "2 of 3 replicas of Deployment dco-system/dco-webhook-a are ready"
            ))
        );
        assert_eq!(
            cond(&s, condition::SERVICE_READY),
            Some(("True", "Applied", "Service dco-system/dco-webhook-a routes port 443 to the webhook Pods"))
        );
        assert_eq!(
            cond(&s, condition::CERTIFICATE_READY),
            Some((
                "True",
                "SelfManaged",
                "Secret dco-system/dco-webhook-a-tls holds a certificate for dco-webhook-a.dco-system.svc valid until 2027-01-16T08:00:00Z"
            ))
        );
        assert!(cond(&s, condition::DEFAULT_CONFLICT).is_none());
        // The order conditions are first written in: certificate, Service, Deployment.
        let types: Vec<_> = s.conditions.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(types, [condition::CERTIFICATE_READY, condition::SERVICE_READY, condition::AVAILABLE]);
    }

    #[test]
    fn no_ready_replica_is_not_available() {
        let names = ServerNames::new("a", "dco-system");
        let s = render(None, &facts(&names, Some(applied(0)))).status;
        assert_eq!(
            cond(&s, condition::AVAILABLE),
            Some((
                "False",
                "NoReadyReplicas",
                "0 of 3 replicas of Deployment dco-system/dco-webhook-a are ready"
            ))
        );
    }

    #[test]
    fn cert_manager_s_standing_is_the_certificate_condition() {
        let names = ServerNames::new("a", "dco-system");
        let pending =
            Standing { ready: false, reason: "CertificatePending", message: "not issued yet".into() };
        let a = Applied { certificate: Certificate::CertManager(pending), ..applied(2) };
        let s = render(None, &facts(&names, Some(a))).status;
        assert_eq!(
            cond(&s, condition::CERTIFICATE_READY),
            Some(("False", "CertificatePending", "not issued yet"))
        );
        let ready = Standing { ready: true, reason: "CertManager", message: "issued".into() };
        let a = Applied { certificate: Certificate::CertManager(ready), ..applied(2) };
        let s = render(Some(&s), &facts(&names, Some(a))).status;
        assert_eq!(cond(&s, condition::CERTIFICATE_READY), Some(("True", "CertManager", "issued")));
    }

    #[test]
    fn the_service_port_is_the_endpoint_s() {
        let names = ServerNames::new("a", "team");
        let a = Applied { service_port: 8443, ..applied(1) };
        let s = render(None, &facts(&names, Some(a))).status;
        assert_eq!(s.endpoint.as_deref(), Some("https://dco-webhook-a.team.svc:8443"));
        assert_eq!(cond(&s, condition::SERVICE_READY).map(|c| c.0), Some("True"));
    }

    #[test]
    fn several_defaults_conflict_until_one_is_left() {
        let names = ServerNames::new("a", "dco-system");
        let mut f = facts(&names, Some(applied(2)));
        f.default = true;
        f.other_defaults = vec!["b".into()];
        let s = render(None, &f).status;
        let (status, reason, message) = cond(&s, condition::DEFAULT_CONFLICT).unwrap();
        assert_eq!((status, reason), ("True", "SeveralDefaults"));
        assert!(message.starts_with("ConversionWebhookServers [\"b\"] also have spec.default: true"));

        // Not itself a default: the others' conflict is not this server's.
        f.default = false;
        assert!(cond(&render(Some(&s), &f).status, condition::DEFAULT_CONFLICT).is_none());
        // The only default left: the condition goes.
        f.default = true;
        f.other_defaults.clear();
        assert!(cond(&render(Some(&s), &f).status, condition::DEFAULT_CONFLICT).is_none());
    }

    #[test]
    fn a_held_deletion_keeps_the_workload_parts_and_sets_deletion_blocked() {
        let names = ServerNames::new("a", "dco-system");
        let before = render(None, &facts(&names, Some(applied(2)))).status;
        let mut f = facts(&names, None);
        f.generation = Some(5);
        f.deletion_blocked = Some("waits for CRDConversionConfig/widgets".into());
        f.leases =
            Aggregate { served_targets: vec!["t".into()], reporting_replicas: 1, ..Aggregate::default() };
        let s = render(Some(&before), &f).status;
        assert_eq!(s.observed_generation, Some(4), "cleanup applies nothing of generation 5");
        assert_eq!(
            cond(&s, condition::DELETION_BLOCKED),
            Some(("True", "ConfigsStillAssigned", "waits for CRDConversionConfig/widgets"))
        );
        assert_eq!(cond(&s, condition::AVAILABLE), cond(&before, condition::AVAILABLE));
        assert_eq!((s.served_targets.as_slice(), s.reporting_replicas), (&["t".to_string()][..], 1));
    }

    #[test]
    fn a_condition_keeps_its_transition_time_until_it_flips() {
        let names = ServerNames::new("a", "dco-system");
        let first = render(None, &facts(&names, Some(applied(0)))).status;
        let mut later = facts(&names, Some(applied(0)));
        later.now = now() + SignedDuration::from_secs(60);
        let same = render(Some(&first), &later).status;
        let at = |s: &ServerStatus| {
            conditions::find(&s.conditions, condition::AVAILABLE).unwrap().last_transition_time.0
        };
        assert_eq!(at(&same), now());
        later.applied = Some(applied(1));
        assert_eq!(at(&render(Some(&same), &later).status), later.now);
    }

    #[test]
    fn the_requeue_is_just_after_the_first_lease_expiry() {
        let names = ServerNames::new("a", "dco-system");
        let mut f = facts(&names, Some(applied(2)));
        assert_eq!(render(None, &f).lease_recheck, None, "no live Lease: the resync decides");
        f.leases.next_expiry = Some(now() + SignedDuration::from_secs(42));
        assert_eq!(render(None, &f).lease_recheck, Some(Duration::from_secs(43)));
        // Expiring this very second still waits one.
        f.leases.next_expiry = Some(now() - SignedDuration::from_secs(1));
        assert_eq!(render(None, &f).lease_recheck, Some(Duration::from_secs(1)));
        f.leases.next_expiry = Some(now() - SignedDuration::from_secs(5));
        assert_eq!(render(None, &f).lease_recheck, None, "a lapsed expiry falls back to the resync");
    }
}

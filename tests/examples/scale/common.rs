//! What the scale benchmarks (`tests/examples/scale_*.rs`, run by `hack/bench/scale-*.sh`)
//! share: their knobs, the operator processes, the apiserver's audit log and the cleanup.

// Each benchmark uses a part of this module.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result};
use serde_json::Value;

use dco_tests::TestEnv;

/// A knob from the environment, or its default.
pub fn knob<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// dco-operator replicas as local processes (debug build), with dco's default lease and
/// drain periods (what a real install runs, so idle traffic is the real one); killed when
/// dropped unless taken out of `children` first.
pub struct Operators {
    pub children: Vec<(String, Child)>,
}

impl Drop for Operators {
    fn drop(&mut self) {
        for (_, c) in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Operators {
    pub fn start(env: &TestEnv, selector: &str, ids: &[String], extra: &[&str]) -> Result<Operators> {
        let mut out = Operators { children: Vec::new() };
        for id in ids {
            out.children.push((id.clone(), spawn(env, selector, id, extra)?));
        }
        Ok(out)
    }

    /// Fails when a replica has exited: a wait for their work would never end.
    pub fn check_alive(&mut self) -> Result<()> {
        for (id, c) in &mut self.children {
            if let Some(st) = c.try_wait()? {
                anyhow::bail!("operator replica {id} exited ({st}); its log is under the cluster's logs/");
            }
        }
        Ok(())
    }

    /// The pids, in `children`' order.
    pub fn pids(&self) -> Vec<u32> {
        self.children.iter().map(|(_, c)| c.id()).collect()
    }
}

pub fn spawn(env: &TestEnv, selector: &str, id: &str, extra: &[&str]) -> Result<Child> {
    let log = env.cluster.dir.join("logs").join(format!("dco-operator_{}_{id}.log", env.ns));
    let file = std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
    let child = Command::new(dco_tests::workspace_binary("dco-operator")?)
        .args(["--namespace", &env.ns, "--replica-id", id, "--selector", selector])
        .args(["--webhook-listen", "$(POD_IP):9443", "--metrics-listen", "127.0.0.1:0"])
        .args(extra)
        .env("KUBECONFIG", &env.cluster.kubeconfig)
        .env("RUST_LOG", "info")
        .stdout(Stdio::from(file.try_clone()?))
        .stderr(Stdio::from(file))
        .spawn()
        .context("starting dco-operator")?;
    eprintln!("dco-operator {id} log: {}", log.display());
    Ok(child)
}

/// VmRSS of a process, kB.
pub fn rss_kb(pid: u32) -> u64 {
    proc_field(pid, "status", "VmRSS:").unwrap_or(0)
}

/// VmHWM (peak RSS) of a process, kB.
pub fn hwm_kb(pid: u32) -> u64 {
    proc_field(pid, "status", "VmHWM:").unwrap_or(0)
}

fn proc_field(pid: u32, file: &str, key: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/{file}")).ok()?;
    s.lines().find(|l| l.starts_with(key))?.split_whitespace().nth(1)?.parse().ok()
}

/// CPU seconds (user + system) a process has used.
pub fn cpu_seconds(pid: u32) -> f64 {
    let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return 0.0 };
    // Fields after the command (which may hold spaces) start after the last ')'.
    let rest = s.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15 of stat, 11 and 12 after the command.
    (ticks(11) + ticks(12)) / 100.0
}

/// Requests the apiserver logged between `from` and `to` (RFC 3339, its
/// `requestReceivedTimestamp`), one per audit ID, counted by (client, verb, resource). The
/// client is `webhook` for the ServiceAccounts of namespace `ns` (dco's replicas),
/// `operator` for the admin user's clients without a user agent (kube-rs sends none: the
/// operators; the bench makes no request in the window), and the user agent's first word
/// for anyone else (`testenv`: the local cluster's kubelet and controllers).
pub fn audit_counts(
    log: &str,
    ns: &str,
    from: &str,
    to: &str,
) -> Result<BTreeMap<(String, String, String), u64>> {
    let text = std::fs::read_to_string(log).with_context(|| format!("reading the audit log {log}"))?;
    let mut seen = std::collections::BTreeSet::new();
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let Ok(e) = serde_json::from_str::<Value>(line) else { continue };
        let at = e["requestReceivedTimestamp"].as_str().unwrap_or_default();
        // RFC 3339 in UTC with the same precision sorts as text.
        if at < from || at >= to || !seen.insert(e["auditID"].as_str().unwrap_or_default().to_string()) {
            continue;
        }
        let user = e["user"]["username"].as_str().unwrap_or_default();
        let agent = e["userAgent"].as_str().unwrap_or_default();
        let client = if user.starts_with(&format!("system:serviceaccount:{ns}:")) {
            "webhook".to_string()
        } else if agent.is_empty() {
            "operator".to_string()
        } else {
            agent.split(['/', ' ']).next().unwrap_or("?").to_string()
        };
        let mut verb = e["verb"].as_str().unwrap_or_default().to_string();
        if e["requestURI"].as_str().is_some_and(|u| u.contains("watch=true")) && verb != "watch" {
            verb = "watch".into();
        }
        let resource = e["objectRef"]["resource"].as_str().unwrap_or("(non-resource)").to_string();
        *out.entry((client, verb, resource)).or_default() += 1;
    }
    Ok(out)
}

/// Now as the audit log writes it (RFC 3339, microseconds, UTC).
pub fn audit_now() -> String {
    k8s_openapi::jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

pub fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

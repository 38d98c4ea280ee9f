//! A dco-operator run by a test as a local process (not a Pod): scoped by a label selector to
//! the test's objects, with its metrics on a port of its own and its log under the local
//! cluster's `logs/`. Killed when dropped, woken first if a test stopped it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use anyhow::{Context, Result, ensure};

use crate::{TestEnv, free_port, http_get, metric_value, signal, workspace_binary};

pub struct OperatorProcess {
    pub child: Child,
    /// `<testenv>/logs/dco-operator_<ns>_<id>.log`.
    pub log: PathBuf,
    /// Its `--metrics-listen` address.
    pub metrics: String,
}

/// The command of replica `id`: `--namespace`, `--replica-id`, `--selector`, `--metrics-listen
/// metrics`, then `args`; `RUST_LOG=info` unless `vars` sets it. Returns the log's path too.
pub fn command(
    env: &TestEnv,
    selector: &str,
    id: &str,
    metrics: &str,
    args: &[&str],
    vars: &[(&str, &str)],
) -> Result<(Command, PathBuf)> {
    let log = env.cluster.dir.join("logs").join(format!("dco-operator_{}_{id}.log", env.ns));
    let file = std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
    let mut cmd = Command::new(workspace_binary("dco-operator")?);
    cmd.args(["--namespace", &env.ns, "--replica-id", id, "--selector", selector])
        .args(["--metrics-listen", metrics])
        .args(args)
        .env("KUBECONFIG", &env.cluster.kubeconfig)
        .env("RUST_LOG", "info")
        .envs(vars.iter().copied())
        .stdout(Stdio::from(file.try_clone()?))
        .stderr(Stdio::from(file));
    Ok((cmd, log))
}

impl OperatorProcess {
    /// Starts replica `id` with [`command`], its metrics on a free port of 127.0.0.1.
    pub fn start(
        env: &TestEnv,
        selector: &str,
        id: &str,
        args: &[&str],
        vars: &[(&str, &str)],
    ) -> Result<Self> {
        let metrics = format!("127.0.0.1:{}", free_port()?);
        let (mut cmd, log) = command(env, selector, id, &metrics, args, vars)?;
        let child = cmd.spawn().context("starting dco-operator")?;
        eprintln!("dco-operator {id} log: {}", log.display());
        Ok(OperatorProcess { child, log, metrics })
    }

    /// Its `/metrics`, as exposed.
    pub async fn scrape(&self) -> Result<String> {
        let (code, body) = http_get(&self.metrics, "/metrics").await?;
        ensure!(code == 200, "GET {}/metrics: {code}", self.metrics);
        Ok(body)
    }

    /// The value of `series` (labels in their exposed order), 0 when absent.
    pub async fn metric(&self, series: &str) -> Result<f64> {
        Ok(metric_value(&self.scrape().await?, series).unwrap_or(0.0))
    }
}

/// `dco_operator_api_requests_total` summed over answer codes, by verb (of a scrape).
pub fn requests_by_verb(body: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for line in body.lines().filter(|l| l.starts_with("dco_operator_api_requests_total{")) {
        let Some((labels, n)) = line.rsplit_once(' ') else { continue };
        let Some(verb) = labels.split("verb=\"").nth(1).and_then(|v| v.split('"').next()) else { continue };
        *out.entry(verb.to_string()).or_default() += n.trim().parse::<f64>().unwrap_or(0.0);
    }
    out
}

impl Drop for OperatorProcess {
    fn drop(&mut self) {
        // A stopped process dies of SIGKILL only once woken.
        let _ = signal(self.child.id(), "CONT");
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

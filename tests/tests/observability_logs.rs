//! Logs people can read (docs/operations.md, "Logs"): run with their output piped, as the
//! kubelet runs them, dco-operator and dco-webhook write text logs without a single escape
//! byte (colour only on a terminal), and every line from the start up to "started" and through
//! a SIGTERM is written once — kube-runtime's `shutdown_on_signal` used to log "press ctrl+c
//! to shut down gracefully" once per controller (three times).
//!
//! * `the_operator_logs_each_start_up_line_once_without_escape_codes`: a dco-operator process
//!   on the local cluster, scoped by a label no object carries, until its controllers run,
//!   then SIGTERM until it exits.
//! * `the_webhook_logs_without_escape_codes`: a dco-webhook with `--static-dir` (no cluster)
//!   on loopback until it serves, then SIGTERM until it exits.
//!
//! Needs `target/debug/dco-operator` and `dco-webhook`.

use std::collections::BTreeMap;
use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};

use dco_tests::{TestEnv, install_dco_crds, serving_cert, unique_name, workspace_binary};

const WAIT: Duration = Duration::from_secs(90);

/// The child's combined output (stdout and stderr are pipes), read to the end once it exits.
struct Piped {
    child: Child,
    out: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
    readers: Vec<std::thread::JoinHandle<()>>,
}

impl Piped {
    fn spawn(mut cmd: Command) -> Result<Self> {
        let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().context("spawning")?;
        let out = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut readers = Vec::new();
        let pipes: Vec<Box<dyn Read + Send>> = vec![
            Box::new(child.stdout.take().context("stdout")?),
            Box::new(child.stderr.take().context("stderr")?),
        ];
        for mut pipe in pipes {
            let out = out.clone();
            readers.push(std::thread::spawn(move || {
                let mut buf = [0u8; 8192];
                while let Ok(n) = pipe.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    out.lock().unwrap().extend_from_slice(&buf[..n]);
                }
            }));
        }
        Ok(Piped { child, out, readers })
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.out.lock().unwrap()).into_owned()
    }

    /// Waits until the output holds `needle`, failing if the process exits first.
    fn wait_for(&mut self, needle: &str) -> Result<()> {
        let start = Instant::now();
        while start.elapsed() < WAIT {
            if self.text().contains(needle) {
                return Ok(());
            }
            if let Some(status) = self.child.try_wait()? {
                bail!("exited ({status}) before logging {needle:?}:\n{}", self.text());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        bail!("no {needle:?} in {WAIT:?}:\n{}", self.text())
    }

    /// SIGTERM, then the exit (bounded), then the whole output.
    fn terminate(mut self) -> Result<(std::process::ExitStatus, String)> {
        let pid = self.child.id().to_string();
        ensure!(Command::new("kill").args(["-TERM", &pid]).status()?.success(), "kill -TERM {pid}");
        let start = Instant::now();
        let status = loop {
            if let Some(s) = self.child.try_wait()? {
                break s;
            }
            if start.elapsed() > WAIT {
                let _ = self.child.kill();
                bail!("no exit {WAIT:?} after SIGTERM:\n{}", self.text());
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        for r in std::mem::take(&mut self.readers) {
            let _ = r.join();
        }
        Ok((status, self.text()))
    }
}

impl Drop for Piped {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A text log line without its timestamp (the first field), so equal messages compare equal.
fn without_time(line: &str) -> &str {
    line.split_once(' ').map_or(line, |(_, rest)| rest.trim_start())
}

/// Lines written more than once, with their counts.
fn repeated(log: &str) -> BTreeMap<&str, usize> {
    let mut counts = BTreeMap::new();
    for line in log.lines().filter(|l| !l.trim().is_empty()) {
        *counts.entry(without_time(line)).or_insert(0) += 1;
    }
    counts.retain(|_, n| *n > 1);
    counts
}

fn assert_readable(what: &str, log: &str) -> Result<()> {
    ensure!(!log.is_empty(), "{what} wrote no log");
    ensure!(!log.contains('\u{1b}'), "{what}'s piped log has escape codes:\n{log}");
    let twice = repeated(log);
    ensure!(twice.is_empty(), "{what} wrote these lines more than once: {twice:#?}\nwhole log:\n{log}");
    ensure!(
        !log.contains("press ctrl+c"),
        "{what} logs kube-runtime's per-controller signal handler:\n{log}"
    );
    Ok(())
}

#[tokio::test]
async fn the_operator_logs_each_start_up_line_once_without_escape_codes() -> Result<()> {
    let env = TestEnv::new("logs").await?;
    install_dco_crds(&env.client, "dco-logs-test").await?;
    // A label no object carries: the operator starts, syncs empty caches and runs idle.
    let selector = format!("dco-logs-test={}", unique_name("run"));
    let mut cmd = Command::new(workspace_binary("dco-operator")?);
    cmd.args(["--namespace", &env.ns, "--lease-namespace", &env.ns, "--replica-id", "logs"])
        .args(["--selector", &selector, "--metrics-listen", "127.0.0.1:0", "--shutdown-drain", "1s"])
        .env("KUBECONFIG", &env.cluster.kubeconfig)
        .env("RUST_LOG", "info")
        .env_remove("NO_COLOR");
    let mut op = Piped::spawn(cmd)?;
    op.wait_for("caches synced; starting the controllers")?;
    // The controllers log their start (and, before, the signal handlers) right after.
    std::thread::sleep(Duration::from_secs(3));
    let (status, log) = op.terminate()?;
    eprintln!("dco-operator's log:\n{log}");
    ensure!(status.success(), "dco-operator exited {status} after SIGTERM:\n{log}");
    ensure!(log.contains("termination signal"), "the stop is logged once by the operator:\n{log}");
    ensure!(log.contains("controllers stopped"), "the controllers stopped on the operator's signal:\n{log}");
    assert_readable("dco-operator", &log)
}

#[tokio::test]
async fn the_webhook_logs_without_escape_codes() -> Result<()> {
    let dir = std::env::temp_dir().join(unique_name("dco-logs"));
    let configs = dir.join("static");
    std::fs::create_dir_all(&configs)?;
    let (_, crt, key) = serving_cert(&["localhost".to_string()])?;
    std::fs::write(dir.join("tls.crt"), crt)?;
    std::fs::write(dir.join("tls.key"), key)?;
    let mut cmd = Command::new(workspace_binary("dco-webhook")?);
    cmd.arg(format!("--static-dir={}", configs.display()))
        .arg(format!("--tls-cert-file={}", dir.join("tls.crt").display()))
        .arg(format!("--tls-key-file={}", dir.join("tls.key").display()))
        .args(["--listen=127.0.0.1:0", "--admin-listen=127.0.0.1:0"])
        .env("RUST_LOG", "info")
        .env_remove("NO_COLOR");
    let mut wh = Piped::spawn(cmd)?;
    wh.wait_for("INFO")?;
    std::thread::sleep(Duration::from_secs(2));
    let (status, log) = wh.terminate()?;
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!("dco-webhook's log:\n{log}");
    ensure!(status.success(), "dco-webhook exited {status} after SIGTERM:\n{log}");
    assert_readable("dco-webhook", &log)
}

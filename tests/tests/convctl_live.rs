//! `convctl test --live` over a fleet (docs/convctl.md, "test --live"): a kubeconfig whose
//! contexts `east-a` and `east-b` point at the local cluster's first apiserver, `east-2` at its
//! second (the same etcd), `drifted` at a second, independent small cluster started here
//! (`DCO_TESTENV_DIR=target/testenv-fleet`, one apiserver, its own etcd) where the same CRD
//! name has a tightened schema its objects no longer meet, and `gone` at a closed port.
//! Asserts the clean fleet passes (exit 0), the drift fails naming only `drifted` (exit 1, in
//! every output format), an unreachable context is a finding of its own (exit 1), usage errors
//! exit 2, the sample bound and strategies, and --verify-propagation on an unwired target.
//!
//! The second cluster is stopped by its own pid (from its `ready` file, and only when that
//! process's command line names its state directory): `hack/testenv down`'s pid check does not
//! look at the state directory, so this test never calls it.
//!
//! Needs `target/debug/convctl` (`cargo build -p convctl`).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::{Value, json};

const OBJECTS: usize = 6;

/// The second, independent cluster; stopped on drop.
struct FleetCluster {
    dir: PathBuf,
}

impl FleetCluster {
    fn start() -> Result<FleetCluster> {
        let root = dco_tests::repo_root();
        let dir = root.join("target").join("testenv-fleet");
        stop_instance(&dir);
        let out = Command::new(root.join("hack").join("testenv"))
            .arg("up")
            .current_dir(&root)
            .env("DCO_TESTENV_DIR", &dir)
            .env("DCO_TESTENV_APISERVERS", "1")
            .env("DCO_TESTENV_HELM", "0")
            .env("DCO_TESTENV_POD_IP_RANGE", "127.0.3.2-127.0.3.254")
            .output()
            .context("running hack/testenv up for the fleet cluster")?;
        let fleet = FleetCluster { dir };
        ensure!(
            out.status.success(),
            "hack/testenv up (fleet) failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(fleet)
    }

    fn kubeconfig(&self) -> PathBuf {
        self.dir.join("kubeconfig")
    }
}

impl Drop for FleetCluster {
    fn drop(&mut self) {
        stop_instance(&self.dir);
    }
}

/// Stops the testenv server of state directory `dir` only: the pid its `ready` and pid files
/// name, and only while that process is `testenv serve --state-dir <dir>`. Removes both files,
/// so a later `hack/testenv up` there has no pid to stop.
fn stop_instance(dir: &Path) {
    let want = format!("--state-dir {}", dir.display());
    let pids: Vec<u32> = [
        std::fs::read_to_string(dir.join("ready"))
            .ok()
            .and_then(|s| s.lines().find_map(|l| l.strip_prefix("pid=").map(str::to_string))),
        std::fs::read_to_string(dir.join("run").join("testenv.pid")).ok(),
    ]
    .into_iter()
    .flatten()
    .filter_map(|p| p.trim().parse().ok())
    .collect();
    for pid in pids {
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
            .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
            .unwrap_or_default();
        if !(cmdline.contains("testenv serve") && cmdline.contains(&want)) {
            continue;
        }
        let _ = dco_tests::signal(pid, "TERM");
        for _ in 0..300 {
            if !dco_tests::process_alive(pid) {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        if dco_tests::process_alive(pid) {
            let _ = dco_tests::signal(pid, "KILL");
        }
    }
    let _ = std::fs::remove_file(dir.join("ready"));
    let _ = std::fs::remove_file(dir.join("run").join("testenv.pid"));
}

/// A kubeconfig with the fleet's contexts, each with its own cluster and user entry.
fn fleet_kubeconfig(main: &Path, second: &Path, fleet: &Path, gone_port: u16, out: &Path) -> Result<()> {
    let read = |p: &Path| -> Result<Value> {
        let text = std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
        Ok(serde_yaml::from_str(&text)?)
    };
    let (main, second, fleet) = (read(main)?, read(second)?, read(fleet)?);
    let mut clusters = Vec::new();
    let mut users = Vec::new();
    let mut contexts = Vec::new();
    for (name, kc, server) in [
        ("east-a", &main, None),
        ("east-b", &main, None),
        ("east-2", &second, None),
        ("drifted", &fleet, None),
        ("gone", &main, Some(format!("https://127.0.0.1:{gone_port}"))),
    ] {
        let mut cluster = kc["clusters"][0]["cluster"].clone();
        if let Some(s) = server {
            cluster["server"] = json!(s);
        }
        clusters.push(json!({"name": name, "cluster": cluster}));
        users.push(json!({"name": name, "user": kc["users"][0]["user"].clone()}));
        contexts.push(json!({"name": name, "context": {"cluster": name, "user": name}}));
    }
    let kc = json!({"apiVersion": "v1", "kind": "Config", "clusters": clusters, "users": users,
        "contexts": contexts, "current-context": "east-a"});
    std::fs::write(out, serde_yaml::to_string(&kc)?)?;
    Ok(())
}

async fn client_of(kubeconfig: &Path) -> Result<kube::Client> {
    dco_tests::install_crypto();
    let kc = Kubeconfig::read_from(kubeconfig)?;
    let cfg = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
    Ok(kube::Client::try_from(cfg)?)
}

/// The widget CRD (`spec.size` a string at v1 and v2), created and Established, then
/// `OBJECTS` widgets in `ns`, half written at each version.
async fn seed(client: &kube::Client, group: &str, ns: &str) -> Result<()> {
    let crd = dco_tests::two_version_widget_crd(group);
    let name = format!("widgets.{group}");
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &serde_json::from_value(crd)?).await?;
    dco_tests::wait_crd_established(&crds, &name, Duration::from_secs(60)).await?;
    for i in 0..OBJECTS {
        let version = if i % 2 == 0 { "v1" } else { "v2" };
        let ar =
            ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, "Widget"), "widgets");
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar);
        let size = ["large", "medium", "huge"][i % 3];
        let obj = json!({"apiVersion": format!("{group}/{version}"), "kind": "Widget",
            "metadata": {"name": format!("w{i}")}, "spec": {"size": size}});
        // A new CRD's kind can take a moment to be served on every apiserver.
        dco_tests::wait_for("the widget kind to be served", Duration::from_secs(30), || {
            let (api, obj) = (api.clone(), obj.clone());
            async move {
                match api.create(&PostParams::default(), &serde_json::from_value(obj)?).await {
                    Ok(_) => Ok(Some(())),
                    Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
                    Err(e) => Err(e.into()),
                }
            }
        })
        .await?;
    }
    Ok(())
}

/// The drift: `spec.size` now at most 3 characters at both versions, which the objects
/// already stored ("large", "medium", "huge") break.
async fn drift(client: &kube::Client, group: &str) -> Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let name = format!("widgets.{group}");
    let mut crd = dco_tests::two_version_widget_crd(group);
    for v in crd["spec"]["versions"].as_array_mut().context("versions")? {
        v["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["size"]["maxLength"] = json!(3);
    }
    let patch = json!({"spec": {"versions": crd["spec"]["versions"]}});
    crds.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
    Ok(())
}

fn config_file(dir: &Path, target: &str) -> Result<PathBuf> {
    let path = dir.join("config.yaml");
    let config = json!({"apiVersion": "conversion.dco.rs/v1alpha1", "kind": "CRDConversionConfig",
        "metadata": {"name": "widgets-live"},
        "spec": {"targetCRD": {"name": target}, "hubVersion": "v2", "spokes": [{"version": "v1", "rules": []}]}});
    std::fs::write(&path, serde_yaml::to_string(&config)?)?;
    Ok(path)
}

fn convctl(args: &[&str]) -> Result<Output> {
    let out = Command::new(dco_tests::workspace_binary("convctl")?).args(args).output()?;
    eprintln!(
        "convctl {}: {}\n{}{}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stdout).chars().take(4000).collect::<String>(),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(out)
}

fn json_of(out: &Output) -> Result<Value> {
    serde_json::from_slice(&out.stdout).context("the JSON report")
}

fn code(out: &Output) -> i32 {
    out.status.code().unwrap_or(-1)
}

/// The summary row of `context`.
fn row<'a>(report: &'a Value, context: &str) -> Result<&'a Value> {
    report["summary"]["contexts"]
        .as_array()
        .and_then(|rows| rows.iter().find(|r| r["context"] == context))
        .with_context(|| format!("no summary row for {context}: {}", report["summary"]))
}

#[tokio::test]
async fn test_live_over_a_fleet_names_the_drifted_and_the_unreachable_context() -> Result<()> {
    let env = dco_tests::TestEnv::new("convctl-live").await?;
    let fleet = tokio::task::spawn_blocking(FleetCluster::start).await??;
    let group = format!("{}.example.org", dco_tests::unique_name("live"));
    let target = format!("widgets.{group}");
    let _crds = dco_tests::ClusterScoped(vec![(dco_tests::ar::<CustomResourceDefinition>(), target.clone())]);
    seed(&env.client, &group, &env.ns).await?;
    let far = client_of(&fleet.kubeconfig()).await?;
    let ns: Api<Namespace> = Api::all(far.clone());
    ns.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": env.ns}}))?)
        .await?;
    seed(&far, &group, &env.ns).await?;
    drift(&far, &group).await?;

    let dir = std::env::temp_dir().join(dco_tests::unique_name("convctl-live"));
    std::fs::create_dir_all(&dir)?;
    let kubeconfig = dir.join("fleet.yaml");
    let main = env.cluster.dir.join("kubeconfig");
    let second = env.cluster.dir.join("kubeconfig-2");
    let gone_port = dco_tests::free_port()?;
    fleet_kubeconfig(&main, &second, &fleet.kubeconfig(), gone_port, &kubeconfig)?;
    let config = config_file(&dir, &target)?;
    let (kc, cfg) = (kubeconfig.to_string_lossy().into_owned(), config.to_string_lossy().into_owned());
    let base = |contexts: &str| -> Vec<String> {
        [
            "test",
            "--live",
            "-c",
            &cfg,
            "--crd",
            &target,
            "--kubeconfig",
            &kc,
            "--contexts",
            contexts,
            "-n",
            &env.ns,
        ]
        .into_iter()
        .map(str::to_string)
        .collect()
    };
    let run = |contexts: &str, extra: &[&str]| -> Result<Output> {
        let mut a = base(contexts);
        a.extend(extra.iter().map(|s| s.to_string()));
        convctl(&a.iter().map(String::as_str).collect::<Vec<_>>())
    };

    // The clean fleet: three contexts, every object round-trips at both versions.
    let out = run("east-a,east-b,east-2", &["-o", "json"])?;
    ensure!(code(&out) == 0, "the clean fleet exits 0");
    let r = json_of(&out)?;
    ensure!(r["failed"] == false && r["summary"]["contextsClean"] == 3, "{}", r["summary"]);
    for c in ["east-a", "east-b", "east-2"] {
        let row = row(&r, c)?;
        ensure!(row["status"] == "pass", "{row}");
        // Both served versions listed, every object of each sampled.
        let listings = row["listings"].as_array().context("listings")?;
        ensure!(listings.len() == 2, "{row}");
        ensure!(listings.iter().all(|l| l["listed"] == OBJECTS && l["sampled"] == OBJECTS), "{row}");
        let cases =
            r["cases"].as_array().context("cases")?.iter().filter(|x| x["data"]["context"] == c).count();
        // 6 objects at 2 versions, each an identity check and one round trip.
        ensure!(cases == 2 * OBJECTS * 2, "{c}: {cases} cases");
    }

    // The drifted context fails; the finding names it and only it.
    let out = run("east-a,east-b,east-2,drifted", &["-o", "json"])?;
    ensure!(code(&out) == 1, "drift exits 1");
    let r = json_of(&out)?;
    let failing: Vec<&Value> =
        r["cases"].as_array().context("cases")?.iter().filter(|c| c["fails"] == true).collect();
    ensure!(!failing.is_empty(), "no failing case");
    for c in &failing {
        ensure!(c["data"]["context"] == "drifted", "a failing case of another context: {c}");
        ensure!(c["group"].as_str().is_some_and(|g| g.starts_with("drifted: Widget")), "{c}");
        ensure!(c["detail"].as_str().is_some_and(|d| d.contains("spec.size")), "{c}");
    }
    ensure!(row(&r, "drifted")?["status"] == "fail", "{}", r["summary"]);
    for c in ["east-a", "east-b", "east-2"] {
        ensure!(row(&r, c)?["status"] == "pass", "{c}: {}", r["summary"]);
    }
    // Every format names the context.
    for (format, needle) in [
        ("table", "drifted: Widget"),
        ("junit", "drifted: Widget"),
        ("github", "title=drifted%3A Widget"),
        ("sarif", "\"context/drifted\""),
        ("markdown", "drifted: Widget"),
    ] {
        let out = run("east-a,drifted", &["-o", format])?;
        ensure!(code(&out) == 1, "{format}: exit 1");
        let text = String::from_utf8_lossy(&out.stdout);
        ensure!(text.contains(needle), "{format} does not name the context: {text}");
    }

    // An unreachable context is a finding of its own; the reachable one is still tested.
    let out = run("east-a,gone", &["-o", "json"])?;
    ensure!(code(&out) == 1, "an unreachable context exits 1");
    let r = json_of(&out)?;
    let gone: Vec<&Value> = r["findings"]
        .as_array()
        .context("findings")?
        .iter()
        .filter(|f| f["location"]["context"] == "gone")
        .collect();
    ensure!(gone.len() == 1 && gone[0]["rule"] == "unreachable" && gone[0]["fails"] == true, "{gone:?}");
    ensure!(gone[0]["message"].as_str().is_some_and(|m| m.contains("cannot read the cluster")), "{gone:?}");
    ensure!(
        row(&r, "east-a")?["status"] == "pass" && row(&r, "gone")?["status"] == "unreachable",
        "{}",
        r["summary"]
    );
    // An unknown context name is the same: a finding, not a crash.
    let out = run("east-a,nowhere", &["-o", "json"])?;
    ensure!(code(&out) == 1, "an unknown context exits 1");
    let r = json_of(&out)?;
    ensure!(
        r["findings"].as_array().is_some_and(|f| f.iter().any(|f| f["location"]["context"] == "nowhere")),
        "{r}"
    );

    // The bound and the strategies: 2 of 6 per version; newest are the last two created;
    // random is the same for the same seed.
    let out = run("east-a", &["-o", "json", "--max-samples", "2", "--sample-strategy", "newest"])?;
    ensure!(code(&out) == 0, "newest: exit 0");
    let r = json_of(&out)?;
    let listings = row(&r, "east-a")?["listings"].as_array().context("listings")?.clone();
    ensure!(listings.iter().all(|l| l["listed"] == OBJECTS && l["sampled"] == 2), "{listings:?}");
    let picked = |r: &Value| -> Vec<String> {
        let mut v: Vec<String> = r["cases"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["data"]["object"].as_str().map(str::to_string))
            .collect();
        v.sort();
        v.dedup();
        v
    };
    ensure!(
        picked(&r) == [format!("Widget {}/w4", env.ns), format!("Widget {}/w5", env.ns)],
        "newest picked {:?}",
        picked(&r)
    );
    let random = |seed: &str| -> Result<Vec<String>> {
        let out = run(
            "east-a",
            &["-o", "json", "--max-samples", "3", "--sample-strategy", "random", "--seed", seed],
        )?;
        ensure!(code(&out) == 0, "random: exit 0");
        Ok(picked(&json_of(&out)?))
    };
    let first = random("11")?;
    ensure!(first == random("11")?, "the same seed picks the same objects");
    ensure!((3..=6).contains(&first.len()), "{first:?}");

    // --verify-propagation: the target is not wired to dco on this cluster.
    let out = run("east-a", &["-o", "json", "--verify-propagation"])?;
    ensure!(code(&out) == 1, "an unwired target fails --verify-propagation");
    let r = json_of(&out)?;
    let prop: Vec<&Value> =
        r["findings"].as_array().context("findings")?.iter().filter(|f| f["rule"] == "propagation").collect();
    ensure!(prop.len() == 1 && prop[0]["location"]["context"] == "east-a", "{prop:?}");
    ensure!(prop[0]["message"].as_str().is_some_and(|m| m.contains("not Webhook")), "{prop:?}");

    // Usage errors exit 2.
    for bad in [
        vec!["test", "--live", "-c", &cfg, "--kubeconfig", &kc],
        vec!["test", "--live", "-c", &cfg, "--crd", &target, "--kubeconfig", &kc, "-s", "x.yaml"],
        vec!["test", "--live", "-c", &cfg, "--crd", &target, "--kubeconfig", &kc, "--max-samples", "0"],
        vec!["test", "-c", &cfg, "--crd", &target, "--max-samples", "5", "-s", "x.yaml"],
    ] {
        let out = convctl(&bad)?;
        ensure!(code(&out) == 2, "usage error {bad:?} exits {}", code(&out));
    }
    // A cluster flag without --live is refused, not ignored.
    let crd_file = dir.join("crd.yaml");
    std::fs::write(&crd_file, serde_yaml::to_string(&dco_tests::two_version_widget_crd(&group))?)?;
    let crd_file = crd_file.to_string_lossy().into_owned();
    let out = convctl(&["test", "-c", &cfg, "--crd", &crd_file, "--context", "east-a", "-s", &crd_file])?;
    ensure!(
        code(&out) == 2 && String::from_utf8_lossy(&out.stderr).contains("add --live"),
        "--context offline"
    );
    let out = convctl(&["test", "--live", "-c", &cfg, "--xrd", &target, "--kubeconfig", &kc])?;
    ensure!(code(&out) == 2, "a CRD config given --xrd exits 2");

    let _ = std::fs::remove_dir_all(&dir);
    drop(fleet);
    env.cleanup().await;
    Ok(())
}

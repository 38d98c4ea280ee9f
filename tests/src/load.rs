//! A load client on one converted target, for tests that change something under it and must
//! show that no request failed (tests/tests/chart_upgrade.rs): every `period` one request
//! at the spoke version — a write (server-side apply, converted to the storage version by
//! the webhook) or a GET (read from etcd and converted by the webhook: one review per GET,
//! docs/operations.md "Where conversion load comes from") — and now and then a GET at the
//! hub to check what the write stored. Every answer is compared whole with the spec of the
//! last write of that object (after a failed write, that or the one before: [`Expect`]);
//! counted in [`Counts`] (failed: an error; wrong: a value).
//! [`Load::start_shaped`] names the objects with a prefix of its own (several loads on one
//! kind) and compares only a view of the spec (a controller such as Crossplane writes the
//! rest: tests/tests/e2e_crossplane.rs); a [`Target`] with an empty `ns` is cluster-scoped.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use serde_json::{Value, json};

use crate::expect::Expect;
use crate::moves::{Counts, Tally};

/// The converted target the load writes and reads.
#[derive(Clone)]
pub struct Target {
    pub client: kube::Client,
    /// The objects' namespace; empty for a cluster-scoped kind.
    pub ns: String,
    pub group: String,
    pub kind: String,
    pub plural: String,
    /// The non-storage version the load writes and reads at.
    pub spoke: String,
    /// The storage version, read to check what a write stored.
    pub hub: String,
    /// The spec of write `k` at a version: the config's rules must convert the spoke's into
    /// the hub's and back exactly.
    pub spec: fn(version: &str, k: i64) -> Value,
    /// The load's field manager.
    pub manager: &'static str,
}

impl Target {
    pub fn api(&self, version: &str) -> Api<DynamicObject> {
        let gvk = GroupVersionKind::gvk(&self.group, version, &self.kind);
        let ar = ApiResource::from_gvk_with_plural(&gvk, &self.plural);
        if self.ns.is_empty() {
            Api::all_with(self.client.clone(), &ar)
        } else {
            Api::namespaced_with(self.client.clone(), &self.ns, &ar)
        }
    }
}

/// How a load names its objects and what of a read it compares ([`Load::start_shaped`]).
#[derive(Clone)]
pub struct Shape {
    /// The objects are `<prefix>0..<prefix><n-1>`: loads on one kind keep to their own.
    pub prefix: String,
    /// The part of a spec (read, or as written) that is compared: fields a controller writes
    /// removed.
    pub view: fn(&Value) -> Value,
}

impl Default for Shape {
    fn default() -> Self {
        Shape { prefix: "l".to_string(), view: Value::clone }
    }
}

/// A running load client; [`Load::stop`] ends it.
pub struct Load {
    stop: Arc<AtomicBool>,
    pub counts: Arc<Counts>,
    task: tokio::task::JoinHandle<()>,
}

impl Load {
    /// Starts the load on `objects` objects `l0..`: each is first written at the spoke, then
    /// every `period` one request in turn: a write every fourth, a hub read every eighth, a
    /// spoke read otherwise.
    pub fn start(target: Target, objects: usize, period: Duration) -> Load {
        Load::start_shaped(target, objects, period, Shape::default())
    }

    /// [`Load::start`] on objects `<prefix>0..`, comparing `view` of each spec.
    pub fn start_shaped(target: Target, objects: usize, period: Duration, shape: Shape) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let counts = Arc::new(Counts::default());
        let (s, c) = (stop.clone(), counts.clone());
        let task = tokio::spawn(async move {
            let (spoke, hub) = (target.api(&target.spoke), target.api(&target.hub));
            let mut expect = Expect::default();
            let mut k = 0i64;
            while !s.load(Ordering::SeqCst) {
                let name = format!("{}{}", shape.prefix, k as usize % objects);
                let at = expect.known(&name);
                let (version, api) = match (at, k % 8) {
                    (None, _) | (Some(_), 0 | 4) => (target.spoke.as_str(), None),
                    (Some(_), 7) => (target.hub.as_str(), Some(&hub)),
                    (Some(_), _) => (target.spoke.as_str(), Some(&spoke)),
                };
                let spec = |k: i64| (shape.view)(&(target.spec)(version, k));
                match api {
                    Some(api) => match api.get(&name).await {
                        Ok(o) if expect.check(&name, &(shape.view)(&o.data["spec"]), spec) => {
                            c.ok.fetch_add(1, Ordering::SeqCst);
                        }
                        Ok(o) => c.fail(
                            true,
                            format!(
                                "{name} at {version}: {} (wrote {})",
                                o.data["spec"],
                                expect.want(&name, spec)
                            ),
                        ),
                        Err(e) => c.fail(false, format!("read {name} at {version}: {e}")),
                    },
                    None => {
                        let obj = json!({"apiVersion": format!("{}/{version}", target.group),
                            "kind": target.kind, "metadata": {"name": name}, "spec": (target.spec)(version, k)});
                        match spoke
                            .patch(&name, &PatchParams::apply(target.manager).force(), &Patch::Apply(&obj))
                            .await
                        {
                            Ok(_) => {
                                expect.written(&name, k);
                                c.ok.fetch_add(1, Ordering::SeqCst);
                            }
                            Err(e) => {
                                expect.unsure(&name, k);
                                c.fail(false, format!("write {name} at {version}: {e}"))
                            }
                        }
                    }
                }
                k += 1;
                tokio::time::sleep(period).await;
            }
        });
        Load { stop, counts, task }
    }

    pub fn tally(&self) -> Tally {
        self.counts.tally()
    }

    /// Waits until the load made `requests` requests and checks that none failed or read a
    /// wrong value (`when` names the moment in the error): a test disturbs nothing before its
    /// load is clean. Returns the counts then.
    pub async fn wait_clean(&self, requests: u64, timeout: Duration, when: &str) -> anyhow::Result<Tally> {
        crate::wait_for(&format!("the load to make {requests} requests"), timeout, || async {
            let t = self.tally();
            Ok((t.ok + t.failed >= requests).then_some(()))
        })
        .await?;
        let t = self.tally();
        anyhow::ensure!(t.failed == 0 && t.wrong == 0, "load {when}: {t:?} {:?}", self.errors());
        Ok(t)
    }

    /// The first few errors, shortened.
    pub fn errors(&self) -> Vec<String> {
        self.counts.errors()
    }

    /// Stops the load and returns its counts.
    pub async fn stop(self) -> anyhow::Result<Tally> {
        self.stop.store(true, Ordering::SeqCst);
        self.task.await?;
        Ok(self.counts.tally())
    }
}

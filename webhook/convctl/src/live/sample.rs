//! Sampling a live target's objects: each served version of the target (and of an XRD's claim)
//! is listed a page at a time (`limit` + continue token) and at most `--max-samples` objects of
//! it are kept, whatever the number of objects:
//!
//! - `first`: the first N in the apiserver's order (namespace, then name); listing stops there;
//! - `random`: a uniform sample of N by reservoir sampling over the pages (seeded: the same
//!   seed and the same objects give the same sample);
//! - `newest`: the N with the latest `creationTimestamp`, kept in a bounded heap.
//!
//! So the objects held at once are at most N per kind and version plus one page
//! ([`PAGE`]); `managedFields` are dropped as each object arrives.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

use clap::ValueEnum;
use dco_api::config::TargetKind;
use dco_engine::crossplane::Scope;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams};
use serde_json::Value;

use super::target::{LiveTarget, slim};
use crate::fuzz::Rng;

/// Objects per LIST request.
pub const PAGE: u32 = 500;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Strategy {
    First,
    Random,
    Newest,
}

impl Strategy {
    pub fn name(self) -> &'static str {
        match self {
            Strategy::First => "first",
            Strategy::Random => "random",
            Strategy::Newest => "newest",
        }
    }
}

/// How to sample.
#[derive(Clone, Debug)]
pub struct Spec {
    pub max: usize,
    pub strategy: Strategy,
    pub seed: u64,
    /// Only this namespace (namespaced kinds; cluster-scoped kinds ignore it).
    pub namespace: Option<String>,
}

/// One kind at one version to list: the target's own kind, or an XRD's claim.
#[derive(Clone, Debug)]
pub struct Listing {
    pub resource: ApiResource,
    pub namespaced: bool,
}

impl Listing {
    /// `Widget v1`.
    pub fn describe(&self) -> String {
        format!("{} {}", self.resource.kind, self.resource.version)
    }
}

/// What one listing kept and saw.
pub struct Sampled {
    pub listing: Listing,
    /// The kept objects, in the apiserver's order (`first`, `random`) or newest first.
    pub objects: Vec<Value>,
    /// Objects listed (for `first`, those read before it stopped).
    pub listed: usize,
    /// Whether every object was read (`first` stops once it has N).
    pub complete: bool,
}

/// The kinds and versions to list: each served version of the target's kind, then of an XRD's
/// claim (LegacyCluster XRDs with claimNames).
pub fn listings(t: &LiveTarget) -> Vec<Listing> {
    let v = &t.value;
    let plural = v.pointer("/spec/names/plural").and_then(Value::as_str).unwrap_or_default().to_string();
    let group = t.target.group().to_string();
    let served: Vec<&str> =
        t.target.versions().iter().filter(|v| v.served).map(|v| v.name.as_str()).collect();
    let namespaced = match t.kind {
        TargetKind::Crd => v.pointer("/spec/scope").and_then(Value::as_str) == Some("Namespaced"),
        TargetKind::Xrd => t.target.composite().is_some_and(|c| c.scope == Scope::Namespaced),
    };
    let mut out: Vec<Listing> = served
        .iter()
        .map(|ver| Listing { resource: resource(&group, ver, t.target.resource_kind(), &plural), namespaced })
        .collect();
    if let Some(claim) = t.target.composite().and_then(|c| c.claim.as_ref()) {
        out.extend(served.iter().map(|ver| Listing {
            resource: resource(&group, ver, &claim.kind, &claim.plural),
            namespaced: true,
        }));
    }
    out
}

fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

/// An object with its sort key for the `newest` heap (ordered by key only).
struct Keyed {
    key: (String, String),
    object: Value,
}

impl PartialEq for Keyed {
    fn eq(&self, o: &Self) -> bool {
        self.key == o.key
    }
}
impl Eq for Keyed {}
impl PartialOrd for Keyed {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Keyed {
    fn cmp(&self, o: &Self) -> Ordering {
        self.key.cmp(&o.key)
    }
}

/// Keeps at most `max` objects as they stream past, by `strategy`.
pub struct Keeper {
    max: usize,
    strategy: Strategy,
    rng: Rng,
    seen: usize,
    kept: Vec<Value>,
    /// `newest`: a min-heap of the newest `max` (the oldest of them on top).
    heap: BinaryHeap<Reverse<Keyed>>,
}

impl Keeper {
    pub fn new(max: usize, strategy: Strategy, seed: u64) -> Keeper {
        Keeper { max, strategy, rng: Rng::new(seed), seen: 0, kept: Vec::new(), heap: BinaryHeap::new() }
    }

    /// Whether more objects can change the sample (`first` is done once full).
    pub fn wants_more(&self) -> bool {
        self.strategy != Strategy::First || self.kept.len() < self.max
    }

    pub fn offer(&mut self, object: Value) {
        self.seen += 1;
        if self.max == 0 {
            return;
        }
        match self.strategy {
            Strategy::First => {
                if self.kept.len() < self.max {
                    self.kept.push(object);
                }
            }
            // Algorithm R: the i-th object (1-based) replaces a kept one with probability max/i.
            Strategy::Random => {
                if self.kept.len() < self.max {
                    self.kept.push(object);
                } else {
                    let j = self.rng.below(self.seen as u64) as usize;
                    if j < self.max {
                        self.kept[j] = object;
                    }
                }
            }
            Strategy::Newest => {
                let created = object
                    .pointer("/metadata/creationTimestamp")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string();
                let key = (created, object_name(&object));
                if self.heap.len() < self.max {
                    self.heap.push(Reverse(Keyed { key, object }));
                } else if self.heap.peek().is_some_and(|Reverse(oldest)| key > oldest.key) {
                    self.heap.pop();
                    self.heap.push(Reverse(Keyed { key, object }));
                }
            }
        }
    }

    pub fn seen(&self) -> usize {
        self.seen
    }

    /// The sample: newest first for `newest`, else in the order kept.
    pub fn finish(self) -> Vec<Value> {
        match self.strategy {
            Strategy::Newest => {
                let mut v: Vec<Keyed> = self.heap.into_iter().map(|Reverse(k)| k).collect();
                v.sort_by(|a, b| b.key.cmp(&a.key));
                v.into_iter().map(|k| k.object).collect()
            }
            _ => self.kept,
        }
    }
}

/// `namespace/name`, or `name` for a cluster-scoped object.
pub fn object_name(o: &Value) -> String {
    let name = o.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("<unnamed>");
    match o.pointer("/metadata/namespace").and_then(Value::as_str) {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_string(),
    }
}

/// The seed of one listing: `seed` mixed with the kind and version, so each is sampled on its
/// own but reproducibly.
fn listing_seed(seed: u64, l: &Listing) -> u64 {
    let mut h = seed ^ 0xcbf2_9ce4_8422_2325;
    for b in l.resource.kind.bytes().chain(l.resource.version.bytes()) {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// Lists `l` a page at a time and keeps a sample; `progress` is told the count seen after each
/// page. An error names the kind, the version and the apiserver's answer.
pub async fn sample(
    client: &Client,
    l: &Listing,
    spec: &Spec,
    mut progress: impl FnMut(usize),
) -> Result<Sampled, String> {
    let api: Api<DynamicObject> = match (&spec.namespace, l.namespaced) {
        (Some(ns), true) => Api::namespaced_with(client.clone(), ns, &l.resource),
        _ => Api::all_with(client.clone(), &l.resource),
    };
    let mut keeper = Keeper::new(spec.max, spec.strategy, listing_seed(spec.seed, l));
    let mut lp = ListParams::default().limit(PAGE);
    let complete = loop {
        let page = api.list(&lp).await.map_err(|e| {
            format!("listing {} ({}/{}): {e}", l.resource.plural, l.resource.group, l.resource.version)
        })?;
        for o in page.items {
            let mut v = match serde_json::to_value(&o) {
                Ok(v) => v,
                Err(e) => {
                    return Err(format!("{} {}: {e}", l.describe(), o.metadata.name.unwrap_or_default()));
                }
            };
            v["apiVersion"] = Value::String(l.resource.api_version.clone());
            v["kind"] = Value::String(l.resource.kind.clone());
            slim(&mut v);
            keeper.offer(v);
        }
        progress(keeper.seen());
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) if keeper.wants_more() => lp.continue_token = Some(token),
            Some(_) => break false,
            None => break true,
        }
    };
    let listed = keeper.seen();
    Ok(Sampled { listing: l.clone(), objects: keeper.finish(), listed, complete })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn obj(i: usize) -> Value {
        json!({"metadata": {"name": format!("o{i:05}"), "namespace": "ns",
            "creationTimestamp": format!("2026-01-01T00:{:02}:{:02}Z", (i / 60) % 60, i % 60)}})
    }

    fn names(v: &[Value]) -> Vec<String> {
        v.iter().map(object_name).collect()
    }

    #[test]
    fn first_keeps_the_first_n_and_stops_wanting() {
        let mut k = Keeper::new(3, Strategy::First, 1);
        for i in 0..3 {
            assert!(k.wants_more());
            k.offer(obj(i));
        }
        assert!(!k.wants_more());
        assert_eq!(names(&k.finish()), ["ns/o00000", "ns/o00001", "ns/o00002"]);
    }

    #[test]
    fn newest_keeps_the_latest_n_newest_first_whatever_the_order() {
        let mut k = Keeper::new(3, Strategy::Newest, 1);
        for i in [5, 1, 9, 3, 7, 8, 0, 2] {
            k.offer(obj(i));
        }
        assert!(k.wants_more());
        assert_eq!(names(&k.finish()), ["ns/o00009", "ns/o00008", "ns/o00007"]);
    }

    #[test]
    fn random_is_reproducible_bounded_and_spread_over_the_whole_list() {
        let run = |seed| {
            let mut k = Keeper::new(100, Strategy::Random, seed);
            for i in 0..10_000 {
                k.offer(obj(i));
            }
            assert_eq!(k.seen(), 10_000);
            k.finish()
        };
        let a = run(7);
        assert_eq!(a.len(), 100);
        assert_eq!(names(&a), names(&run(7)), "the same seed, the same sample");
        assert_ne!(names(&a), names(&run(8)));
        // Uniform: about half of the sample from each half of the list (binomial, sd 5).
        let late = names(&a).iter().filter(|n| n.as_str() >= "ns/o05000").count();
        assert!((30..=70).contains(&late), "{late} of 100 from the second half");
    }

    #[test]
    fn fewer_objects_than_the_bound_are_all_kept() {
        for s in [Strategy::First, Strategy::Random, Strategy::Newest] {
            let mut k = Keeper::new(10, s, 1);
            for i in 0..4 {
                k.offer(obj(i));
            }
            assert_eq!(k.finish().len(), 4, "{s:?}");
        }
    }
}

//! The compiled plan: what convert runs. It exists only after a compile without errors.

use std::fmt;

use dco_api::config::ConversionSpec;
use dco_api::rules::Strategy;
use sha2::{Digest, Sha256};

use crate::strategies::RuleOp;
use crate::target::{Target, canonical_json, hex};
use crate::value::{Path, Value};

/// A target's compiled conversion: the hub and one [`SpokePlan`] per spoke.
pub struct Plan {
    pub(crate) target: String,
    pub(crate) group: String,
    pub(crate) resource_kind: String,
    /// An XRD's claim kind: the apiserver sends claims to the XR's path too.
    pub(crate) claim_kind: Option<String>,
    pub(crate) hub_version: String,
    pub(crate) spokes: Vec<SpokePlan>,
    pub(crate) lossless: bool,
    hash: String,
}

impl fmt::Debug for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Plan")
            .field("target", &self.target)
            .field("hub_version", &self.hub_version)
            .field("spokes", &self.spokes.iter().map(|s| s.version.as_str()).collect::<Vec<_>>())
            .field("hash", &self.hash)
            .finish()
    }
}

/// The rules between the hub and one spoke.
#[derive(Debug)]
pub struct SpokePlan {
    pub version: String,
    pub scope: ScopePlan,
    /// The paths this spoke's rules can read or write, in either direction; `None` when a
    /// rule may read anything (JSONPatch, CEL, BranchMap). The review path parses only
    /// these and copies everything else as raw bytes.
    pub(crate) touch: Option<Touch>,
    /// The stream-path rewrite per direction (hub→spoke, spoke→hub), when every rule
    /// qualifies (see `crate::stream`).
    stream: [Option<crate::stream::Level>; 2],
}

impl SpokePlan {
    pub(crate) fn stream(&self, dir: crate::convert::Direction) -> Option<&crate::stream::Level> {
        self.stream[match dir {
            crate::convert::Direction::HubToSpoke => 0,
            crate::convert::Direction::SpokeToHub => 1,
        }]
        .as_ref()
    }

    pub(crate) fn new(version: String, mut scope: ScopePlan) -> SpokePlan {
        // Held as long as the target is: no spare capacity from building it.
        scope.rules.shrink_to_fit();
        scope.drop_h2s.shrink_to_fit();
        scope.drop_s2h.shrink_to_fit();
        let touch = Touch::of(&scope);
        let stream = [
            crate::stream::Level::of(&scope, crate::convert::Direction::HubToSpoke),
            crate::stream::Level::of(&scope, crate::convert::Direction::SpokeToHub),
        ];
        SpokePlan { version, scope, touch, stream }
    }
}

/// A tree of touched paths: `whole` means the subtree is read or written as a unit.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Touch {
    pub whole: bool,
    /// Sorted by key: a handful of keys a level, where a binary search is as quick as a map's
    /// and a map's nodes cost ~600 bytes each, held per spoke of every target.
    children: Vec<(String, Touch)>,
}

impl Touch {
    fn of(scope: &ScopePlan) -> Option<Touch> {
        let mut t = Touch::default();
        // The router writes apiVersion.
        t.add(&["apiVersion".to_string()]);
        for r in &scope.rules {
            // Strategies whose ops may read beyond their claimed paths.
            if matches!(r.strategy, Strategy::JsonPatch | Strategy::Cel | Strategy::BranchMap) {
                return None;
            }
            if matches!(
                r.strategy,
                Strategy::ToAnnotation | Strategy::ToLabel | Strategy::FromAnnotation | Strategy::FromLabel
            ) {
                t.add(&["metadata".to_string()]);
            }
            // Sources are cleared and destinations are the other direction's sources.
            for p in r.clear_h2s.iter().chain(&r.clear_s2h) {
                t.add(p.segments());
            }
            if let Some(w) = &r.when {
                t.add(w.path.segments());
            }
        }
        for p in scope.drop_h2s.iter().chain(&scope.drop_s2h) {
            t.add(p.segments());
        }
        t.shrink();
        Some(t)
    }

    pub(crate) fn child(&self, key: &str) -> Option<&Touch> {
        let i = self.children.binary_search_by(|(k, _)| k.as_str().cmp(key)).ok()?;
        Some(&self.children[i].1)
    }

    fn add(&mut self, path: &[String]) {
        let mut cur = self;
        for seg in path {
            if cur.whole {
                return;
            }
            let i = match cur.children.binary_search_by(|(k, _)| k.cmp(seg)) {
                Ok(i) => i,
                Err(i) => {
                    cur.children.insert(i, (seg.clone(), Touch::default()));
                    i
                }
            };
            cur = &mut cur.children[i].1;
        }
        cur.whole = true;
        cur.children.clear();
    }

    fn shrink(&mut self) {
        self.children.shrink_to_fit();
        for (_, t) in &mut self.children {
            t.shrink();
        }
    }
}

/// The rules of one scope: an object root or a ForEach item.
#[derive(Debug, Default)]
pub struct ScopePlan {
    pub rules: Vec<RulePlan>,
    /// Uncovered source leaves removed from the output (unmappedFieldPolicy Warn).
    pub drop_h2s: Vec<Path>,
    pub drop_s2h: Vec<Path>,
}

/// One compiled rule.
#[derive(Debug)]
pub struct RulePlan {
    pub index: Vec<usize>,
    pub strategy: Strategy,
    pub when: Option<When>,
    pub clear_h2s: Vec<Path>,
    pub clear_s2h: Vec<Path>,
    /// Lossy hub→spoke and spoke→hub (acknowledged: a plan exists only then).
    pub lossy: [bool; 2],
    pub op: Box<dyn RuleOp>,
}

/// A rule's condition: it applies only when the input's `path` equals `equals`.
#[derive(Debug, Clone)]
pub struct When {
    pub path: Path,
    pub equals: Value,
}

impl When {
    pub fn holds(&self, input: &Value) -> bool {
        crate::value::get(input, self.path.segments()) == Some(&self.equals)
    }
}

impl Plan {
    pub(crate) fn new(
        target: &Target,
        spec: &ConversionSpec,
        mut spokes: Vec<SpokePlan>,
        lossless: bool,
    ) -> Plan {
        spokes.shrink_to_fit();
        let mut h = Sha256::new();
        let spec_json = serde_json::to_value(spec).unwrap_or(serde_json::Value::Null);
        let mut buf = String::new();
        canonical_json(&spec_json, &mut buf);
        h.update(buf.as_bytes());
        h.update([0]);
        h.update(target.schema_hash().as_bytes());
        h.update([0]);
        h.update(env!("CARGO_PKG_VERSION").as_bytes());
        // The kinds a review may carry are part of what the plan does.
        if let Some(c) = target.composite() {
            h.update([0]);
            h.update(c.scope.name().as_bytes());
            if let Some(claim) = &c.claim {
                h.update([0]);
                h.update(claim.kind.as_bytes());
            }
        }
        Plan {
            target: target.name().to_string(),
            group: target.group().to_string(),
            resource_kind: target.resource_kind().to_string(),
            claim_kind: target.claim_kind().map(str::to_string),
            hub_version: spec.hub_version.clone(),
            spokes,
            lossless,
            hash: hex(&h.finalize()),
        }
    }

    /// The target's name.
    pub fn target(&self) -> &str {
        &self.target
    }

    pub fn group(&self) -> &str {
        &self.group
    }

    /// The kind of the objects converted (`spec.names.kind`).
    pub fn resource_kind(&self) -> &str {
        &self.resource_kind
    }

    /// An XRD's claim kind, when it offers claims.
    pub fn claim_kind(&self) -> Option<&str> {
        self.claim_kind.as_deref()
    }

    /// Whether objects of `kind` are the target's (its kind, or an XRD's claim kind).
    #[inline]
    pub fn accepts_kind(&self, kind: &str) -> bool {
        kind == self.resource_kind || self.claim_kind.as_deref() == Some(kind)
    }

    /// The kinds this plan converts, for messages: `XDB` or `XDB or DB (its claim)`.
    pub fn expected_kinds(&self) -> String {
        match &self.claim_kind {
            Some(c) => format!("{} or {c} (its claim)", self.resource_kind),
            None => self.resource_kind.clone(),
        }
    }

    pub fn hub_version(&self) -> &str {
        &self.hub_version
    }

    /// Hub first, then the spokes in config order.
    pub fn versions(&self) -> Vec<&str> {
        std::iter::once(self.hub_version.as_str())
            .chain(self.spokes.iter().map(|s| s.version.as_str()))
            .collect()
    }

    /// Stable digest of (spec, schema hash, engine version): status.lastAppliedPlanHash.
    pub fn hash(&self) -> String {
        self.hash.clone()
    }

    /// Whether every spoke is lossless in both directions.
    pub fn lossless(&self) -> bool {
        self.lossless
    }

    pub(crate) fn spoke(&self, version: &str) -> Option<&SpokePlan> {
        self.spokes.iter().find(|s| s.version == version)
    }
}

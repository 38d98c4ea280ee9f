//! Running a scope plan over one object, and the error that names what did not fit.
//!
//! The output starts as a (cheap, shared) copy of the input. Then, for every rule whose
//! `when` holds on the input, its source paths are removed from the output, uncovered
//! source leaves are dropped, and only then do the ops write — each reading the pristine
//! input. So no op sees another's output and rule order never matters. Everything no rule
//! claims (leftover identity copies, undeclared preserve-unknown subtrees, injected status
//! fields, metadata) simply stays where it was.

use std::fmt;

use dco_api::rules::Strategy;

use crate::plan::ScopePlan;
use crate::strategies::OpError;
use crate::value::{self, JsonValueTrait, Value};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Direction {
    HubToSpoke,
    SpokeToHub,
}

impl ScopePlan {
    /// Converts `src` into `dst`, which the caller set to a copy of `src`.
    pub fn run(&self, dir: Direction, src: &Value, dst: &mut Value) -> Result<(), OpError> {
        self.run_noting_loss(dir, src, dst).map(|_| ())
    }

    /// [`ScopePlan::run`], and whether the object lost data the config acknowledged losing:
    /// a rule lossy in this direction (`acknowledgeLossy`) found its source present, or
    /// `unmappedFieldPolicy: Warn` dropped a field. The clears and drops remove those values
    /// anyway, so knowing costs nothing. A nested scope (ForEach, BranchMap) that loses makes
    /// its rule lossy, so the top level answers for it.
    pub fn run_noting_loss(&self, dir: Direction, src: &Value, dst: &mut Value) -> Result<bool, OpError> {
        let active = |r: &&crate::plan::RulePlan| r.when.as_ref().is_none_or(|w| w.holds(src));
        let mut lost = false;
        for r in self.rules.iter().filter(active) {
            let (clears, lossy) = match dir {
                Direction::HubToSpoke => (&r.clear_h2s, r.lossy[0]),
                Direction::SpokeToHub => (&r.clear_s2h, r.lossy[1]),
            };
            for p in clears {
                lost |= value::remove(dst, p.segments()).is_some() && lossy;
            }
        }
        let drops = match dir {
            Direction::HubToSpoke => &self.drop_h2s,
            Direction::SpokeToHub => &self.drop_s2h,
        };
        for p in drops {
            lost |= value::remove(dst, p.segments()).is_some();
        }
        for r in self.rules.iter().filter(active) {
            let res = match dir {
                Direction::HubToSpoke => r.op.hub_to_spoke(src, dst),
                Direction::SpokeToHub => r.op.spoke_to_hub(src, dst),
            };
            res.map_err(|mut e| {
                if e.rule.is_none() {
                    e.rule = Some((r.index.clone(), r.strategy));
                }
                e
            })?;
        }
        Ok(lost)
    }
}

/// Why an object did not convert, in a few classes a metric can carry (the message has the
/// detail): `docs/operations.md`, "Conversion results".
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FailureClass {
    /// A rule could not convert a value the object holds (a strategy's error, naming spoke,
    /// rule and path).
    Rule,
    /// The object is not one this target converts: not a JSON object, another kind, an
    /// apiVersion or desiredAPIVersion that is not a version of the target, a key twice.
    InvalidObject,
    /// The caller's budget (time or memory) stopped the conversion.
    Stopped,
}

impl FailureClass {
    /// The class of `e`, raised while the budget had (`stopped`) or had not refused.
    pub fn of(e: &ConvertError, stopped: bool) -> Self {
        if stopped {
            FailureClass::Stopped
        } else if e.spoke.is_some() {
            FailureClass::Rule
        } else {
            FailureClass::InvalidObject
        }
    }
}

/// An object that could not be converted: names the object, the rule and the path.
/// (Boxed: it travels in every `Result` of the hot path.)
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConvertError(Box<ConvertErrorDetail>);

impl std::ops::Deref for ConvertError {
    type Target = ConvertErrorDetail;
    fn deref(&self) -> &ConvertErrorDetail {
        &self.0
    }
}

/// The facts of a [`ConvertError`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConvertErrorDetail {
    /// `Kind namespace/name` (or `Kind name` for cluster-scoped objects).
    pub object: String,
    pub spoke: Option<String>,
    pub rule: Option<Vec<usize>>,
    pub strategy: Option<Strategy>,
    pub path: Option<String>,
    pub message: String,
}

impl ConvertError {
    pub(crate) fn object(obj: &Value, message: impl Into<String>) -> Self {
        ConvertError(Box::new(ConvertErrorDetail {
            object: describe_object(obj),
            spoke: None,
            rule: None,
            strategy: None,
            path: None,
            message: message.into(),
        }))
    }

    pub(crate) fn from_op(obj: &Value, spoke: &str, e: OpError) -> Self {
        let (rule, strategy) = match e.rule {
            Some((r, s)) => (Some(r), Some(s)),
            None => (None, None),
        };
        ConvertError(Box::new(ConvertErrorDetail {
            object: describe_object(obj),
            spoke: Some(spoke.to_string()),
            rule,
            strategy,
            path: (!e.path.is_empty()).then_some(e.path),
            message: e.message,
        }))
    }
}

impl fmt::Display for ConvertError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.object)?;
        let mut head = Vec::new();
        if let Some(s) = &self.spoke {
            head.push(format!("spoke {s}"));
        }
        if let Some(r) = &self.rule {
            let idx = r.iter().map(|i| i.to_string()).collect::<Vec<_>>().join(".");
            match self.strategy {
                Some(s) => head.push(format!("rule {idx} ({s})")),
                None => head.push(format!("rule {idx}")),
            }
        }
        if !head.is_empty() {
            write!(f, "{}", head.join(", "))?;
            if self.path.is_some() {
                f.write_str(" ")?;
            } else {
                f.write_str(": ")?;
            }
        }
        if let Some(p) = &self.path {
            write!(f, "{p}: ")?;
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for ConvertError {}

/// `Kind namespace/name` for messages; tolerant of any input.
pub fn describe_object(obj: &Value) -> String {
    let kind = obj.get("kind").and_then(|k| k.as_str()).unwrap_or("object");
    let name = obj.get("metadata").and_then(|m| m.get("name")).and_then(|n| n.as_str());
    let ns = obj.get("metadata").and_then(|m| m.get("namespace")).and_then(|n| n.as_str());
    match (ns, name) {
        (Some(ns), Some(n)) => format!("{kind} {ns}/{n}"),
        (None, Some(n)) => format!("{kind} {n}"),
        _ => format!("{kind} <unnamed>"),
    }
}

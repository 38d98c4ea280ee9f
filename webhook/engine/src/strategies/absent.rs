//! Compile-time checks for rules that fail at conversion time on objects their schema
//! allows, because a field they read may be absent (docs/engine.md, "Diagnostics").
//!
//! A field is *always present* when it and every ancestor are required or defaulted (the
//! apiserver defaults an object at its own version before converting it) and no ancestor is
//! nullable ([`FlatSchema::present_below`]); a rule's `when` makes its path present too, since
//! the rule runs only on objects where it holds.
//!
//! - JSONPatch: `remove`, `replace` and `test` need their `path`, `move` and `copy` their
//!   `from`, and `add`, `move` and `copy` the parent of their `path`. An op whose pointer may be
//!   missing fails the whole patch on every object without the field, the commonest state of an
//!   optional field: an **error**.

use dco_api::rules::{JsonPatchOp, PatchOp};

use super::RuleCx;
use crate::patch::{Pointer, op_name};
use crate::schema::FlatSchema;

const FIX: &str = "guard the rule with `when` on the field, give the field a `default` (or make it required) in the schema, or use a strategy that skips absent fields (FieldRename, or CEL with has())";

/// What the patch has done to the pointers it touched so far.
#[derive(Default)]
struct Simulated {
    /// Pointers the patch wrote (add, copy, move targets): present from then on.
    written: Vec<Vec<String>>,
    /// Pointers the patch removed (remove, move sources): absent from then on, with all below.
    removed: Vec<Vec<String>>,
}

/// Reports each op of `ops` that reads or writes under a pointer an object of `fs` may lack.
/// `field` is `hubToSpoke`/`spokeToHub`, `version` names the input's version for the message.
pub fn check_patch(cx: &mut RuleCx<'_>, field: &str, ops: &[JsonPatchOp], fs: &FlatSchema, version: &str) {
    let when: Option<Vec<String>> = cx
        .rule()
        .when
        .as_ref()
        .filter(|w| !w.equals.is_null())
        .map(|w| w.path.split('.').map(str::to_string).collect());
    let mut sim = Simulated::default();
    for (i, op) in ops.iter().enumerate() {
        let (Ok(path), from) = (Pointer::parse(&op.path), op.from.as_deref().map(Pointer::parse)) else {
            return;
        };
        let from = match from {
            Some(Ok(f)) => Some(f.tokens().to_vec()),
            Some(Err(_)) => return,
            None => None,
        };
        let path = path.tokens().to_vec();
        let parent = path.split_last().map(|(_, p)| p.to_vec());
        let name = op_name(op.op);
        // (the pointer that must exist, which of the op's fields names it, what is needed)
        let need: Option<(Vec<String>, &str, &str)> = match op.op {
            PatchOp::Remove | PatchOp::Replace | PatchOp::Test => Some((path.clone(), "path", "its value")),
            PatchOp::Move | PatchOp::Copy => from.clone().map(|f| (f, "from", "the value it takes")),
            PatchOp::Add => None,
        };
        let parent_need = match op.op {
            PatchOp::Add | PatchOp::Move | PatchOp::Copy => parent.clone(),
            _ => None,
        };
        let mut missing: Option<(Vec<String>, String)> = None;
        if let Some((ptr, which, what)) = need
            && !sim.present(&ptr, fs, when.as_deref())
        {
            missing = Some((ptr, format!("`{which}` {} ({what})", op_ptr(op, which))));
        } else if let Some(ptr) = parent_need
            && !ptr.is_empty()
            && !sim.present(&ptr, fs, when.as_deref())
        {
            let shown = format!("/{}", ptr.iter().map(|t| escape(t)).collect::<Vec<_>>().join("/"));
            missing = Some((ptr, format!("the parent {shown} of `path` {}", op.path)));
        }
        if let Some((ptr, what)) = missing {
            let dotted = ptr.join(".");
            let msg = if ptr.first().is_some_and(|t| t == "metadata") {
                format!(
                    "jsonPatch.{field}[{i}] ({name}): {what} may be absent — objects of version {version} need not have it, so the patch fails on every object without it; use ToAnnotation/FromAnnotation or ToLabel/FromLabel, which handle absent annotations and labels, or guard the rule with `when` on the key"
                )
            } else {
                format!(
                    "jsonPatch.{field}[{i}] ({name}): {what} may be absent — version {version} neither requires nor defaults {dotted} all the way up, so the patch fails on every object without it; {FIX}"
                )
            };
            cx.error(&[&dotted], msg);
            // Reported once: later ops on the same pointer share this root cause.
            sim.write(ptr);
        }
        match op.op {
            PatchOp::Remove => sim.remove(path),
            PatchOp::Move => {
                if let Some(f) = from {
                    sim.remove(f);
                }
                sim.write(path);
            }
            PatchOp::Add | PatchOp::Copy => sim.write(path),
            PatchOp::Replace | PatchOp::Test => {}
        }
    }
}

fn op_ptr(op: &JsonPatchOp, which: &str) -> String {
    if which == "from" { op.from.clone().unwrap_or_default() } else { op.path.clone() }
}

fn escape(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

impl Simulated {
    fn present(&self, ptr: &[String], fs: &FlatSchema, when: Option<&[String]>) -> bool {
        if ptr.is_empty() {
            return true;
        }
        if self.removed.iter().any(|r| ptr.starts_with(r)) {
            return false;
        }
        // Written: the pointer itself and its ancestors exist; what is below a written value
        // depends on the value.
        if self.written.iter().any(|w| w.starts_with(ptr)) {
            return true;
        }
        if when.is_some_and(|w| w.starts_with(ptr)) {
            return true;
        }
        match ptr {
            [m] if m == "metadata" => true,
            [m, ..] if m == "metadata" => false,
            _ if ptr.iter().any(|t| t.is_empty() || t.contains('.')) => false,
            _ => fs.always_present(&ptr.join(".")),
        }
    }

    fn remove(&mut self, ptr: Vec<String>) {
        self.written.retain(|w| !w.starts_with(&ptr));
        self.removed.push(ptr);
    }

    fn write(&mut self, ptr: Vec<String>) {
        self.removed.retain(|r| !ptr.starts_with(r) && !r.starts_with(&ptr));
        self.written.push(ptr);
    }
}

//! The bounds on one conversion: how deep a value may nest, how much stack a converting
//! thread needs for that, and the budget (time, memory) a caller can stop a conversion with.
//!
//! **Nesting.** Every value the engine reads is at most [`MAX_DEPTH`] levels deep, measured
//! from the object's own root, the limit the kube-apiserver's JSON decoder applies to the
//! objects it stores: whatever it can store converts. It is checked where text enters the
//! engine, before anything recurses over it: the review scanner (`scan`), JSON read back from
//! an annotation or label (`restoreOnReverse`, FromAnnotation), and the values handed to CEL.
//! Values the engine builds are deeper by at most a destination path and a CEL expression's
//! own nesting, both bounded at compile time. The parsing, serialising and CEL code the
//! engine uses (sonic-rs, serde_json, the `cel` crate) recurses once per level, so a thread
//! that converts needs [`STACK_BYTES`] of stack; `webhook/engine/tests/hostile.rs` converts
//! objects at the limit on every path on a thread of exactly that size.
//!
//! **Budget.** A caller that must bound a conversion's time or memory (the webhook) installs
//! a [`Budget`] with [`with_budget`]; the engine asks it between objects, between array items
//! of ForEach, while handing values to CEL, and before and after each CEL evaluation, and an
//! object whose conversion is stopped fails with the budget's message. Without one, nothing
//! is checked.

use std::cell::RefCell;
use std::sync::Arc;

/// Deepest nesting of an object, counted from its root (`{"a":1}` is 1 level). The
/// kube-apiserver's decoder (Go's `encoding/json`) refuses deeper documents, so no stored
/// object exceeds it.
pub const MAX_DEPTH: usize = 10_000;

/// Levels a ConversionReview body adds above its objects (`{` review, `{` request, `[`
/// objects), so the scanner allows `MAX_DEPTH` below them.
pub(crate) const REVIEW_ENVELOPE_DEPTH: usize = 3;

/// Stack a thread converting with the engine needs for inputs up to [`MAX_DEPTH`]. Measured
/// (tests/hostile.rs; debug build with the engine optimised as `Cargo.toml` sets it): about
/// 4.4 MiB for the full and projection paths and 13.5 MiB with a CEL rule at 10,000 levels,
/// so this leaves more than 4× headroom. Reserved address space; only touched pages count.
pub const STACK_BYTES: usize = 64 << 20;

/// What a caller uses to stop a conversion early. Both methods are called on the converting
/// thread and must be cheap: `check` runs once per object and per few hundred array items.
pub trait Budget {
    /// `Err(why)` stops the conversion: the deadline passed, the request was abandoned, or
    /// memory use went past what this conversion may use. `why` ends up in the object's
    /// failure message, so it should name the limit and how to raise it.
    fn check(&self) -> Result<(), String>;
    /// Whether `bytes` more may be allocated for one step that cannot be interrupted (handing
    /// a whole object to CEL or JSONPatch), asked before the step runs.
    fn admit(&self, bytes: usize) -> Result<(), String> {
        let _ = bytes;
        self.check()
    }
}

thread_local! {
    static CURRENT: RefCell<Option<Arc<dyn Budget>>> = const { RefCell::new(None) };
    /// Set when the budget refused: the review classes the failure it causes as `stopped`,
    /// whichever rule or loop reported it.
    static STOPPED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether the budget refused since the last call, and forget it.
pub(crate) fn take_stopped() -> bool {
    STOPPED.replace(false)
}

fn note(verdict: Result<(), String>) -> Result<(), String> {
    if verdict.is_err() {
        STOPPED.set(true);
    }
    verdict
}

/// Runs `f` with `budget` consulted by every conversion `f` does on this thread.
pub fn with_budget<R>(budget: Arc<dyn Budget>, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<Arc<dyn Budget>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            CURRENT.with_borrow_mut(|c| *c = self.0.take());
        }
    }
    let _restore = Restore(CURRENT.with_borrow_mut(|c| c.replace(budget)));
    f()
}

/// The installed budget's verdict (`Ok` when there is none).
pub(crate) fn check() -> Result<(), String> {
    note(CURRENT.with_borrow(|c| c.as_ref().map_or(Ok(()), |b| b.check())))
}

/// The installed budget's verdict on allocating `bytes` more.
pub(crate) fn admit(bytes: usize) -> Result<(), String> {
    note(CURRENT.with_borrow(|c| c.as_ref().map_or(Ok(()), |b| b.admit(bytes))))
}

/// How many items a loop runs between two [`check`]s.
const CHECK_EVERY: usize = 256;

/// [`check`] at item `i` of a loop, once every [`CHECK_EVERY`] items (ForEach on the full and
/// stream paths: both must stop at the same item).
pub(crate) fn check_item(i: usize) -> Result<(), String> {
    if i % CHECK_EVERY == CHECK_EVERY - 1 { check() } else { Ok(()) }
}

/// The size of a value, walked without recursion: how many values it holds, the bytes of its
/// strings and keys, and how deep it nests (a scalar is 0, `{}` and `[]` are 1).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Size {
    pub values: usize,
    /// Lists and maps, and maps alone.
    pub containers: usize,
    pub maps: usize,
    /// Members of all maps.
    pub entries: usize,
    /// Bytes of strings and keys.
    pub text_bytes: usize,
    pub depth: usize,
}

impl Size {
    pub(crate) fn of(v: &crate::value::Value) -> Size {
        use crate::value::{JsonContainerTrait, JsonValueTrait};
        let mut size = Size::default();
        // (value, its depth counting itself)
        let mut stack: Vec<(&crate::value::Value, usize)> = vec![(v, 0)];
        while let Some((v, d)) = stack.pop() {
            size.values += 1;
            if let Some(s) = v.as_str() {
                size.text_bytes += s.len();
            } else if let Some(a) = v.as_array() {
                size.depth = size.depth.max(d + 1);
                size.containers += 1;
                stack.extend(a.iter().map(|x| (x, d + 1)));
            } else if let Some(o) = v.as_object() {
                size.depth = size.depth.max(d + 1);
                size.containers += 1;
                size.maps += 1;
                size.entries += o.len();
                for (k, x) in o.iter() {
                    size.text_bytes += k.len();
                    stack.push((x, d + 1));
                }
            }
        }
        size
    }
}

/// What a whole-object copy is made of, for its size estimate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CopyInto {
    /// CEL values (`cel::to_cel`): every string, list and map behind an `Arc`, maps as hash
    /// tables with string keys.
    Cel,
    /// serde_json values (JSONPatch): maps are B-trees, whose first node holds 11 entries.
    Serde,
}

impl Size {
    /// An upper estimate of the heap bytes of a copy of a value this size, from per-item
    /// costs measured with the counting allocator (`dco-webhook`'s `alloc`): as CEL values,
    /// 24 bytes per value, 40 more per string, list or map, ~300 per small map, ~160 per map
    /// entry; as serde_json, ~650 per non-empty map.
    fn copy_bytes(&self, copy: CopyInto) -> usize {
        let (value, container, map, entry) = match copy {
            CopyInto::Cel => (80, 64, 256, 128),
            CopyInto::Serde => (48, 32, 704, 96),
        };
        [
            self.values.saturating_mul(value),
            self.containers.saturating_mul(container),
            self.maps.saturating_mul(map),
            self.entries.saturating_mul(entry),
            self.text_bytes,
        ]
        .into_iter()
        .fold(0usize, usize::saturating_add)
    }
}

/// Asks the budget before `v` is copied whole into another representation (CEL values,
/// serde_json for JSONPatch), which cannot be interrupted half way: its depth must be within
/// [`MAX_DEPTH`] (the copy and the CEL interpreter recurse per level) and the copy's
/// estimated size must be admitted. `what` names the step in the message.
pub(crate) fn admit_copy(v: &crate::value::Value, what: &str, copy: CopyInto) -> Result<(), String> {
    let size = Size::of(v);
    if size.depth > MAX_DEPTH {
        return Err(format!(
            "the value handed to {what} nests {} levels; the limit for any object is {MAX_DEPTH}",
            size.depth
        ));
    }
    let bytes = size.copy_bytes(copy);
    admit(bytes)
        .map_err(|why| format!("handing {} values to {what} takes about {bytes} bytes: {why}", size.values))
}

/// The deepest nesting of the JSON text `text` (without validating it: the parse that
/// follows does), in one pass and without recursion.
pub(crate) fn text_depth(text: &[u8]) -> usize {
    let (mut depth, mut deepest, mut in_string, mut escaped) = (0usize, 0usize, false, false);
    for &b in text {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_depth_ignores_brackets_in_strings() {
        assert_eq!(text_depth(b"1"), 0);
        assert_eq!(text_depth(br#"{"a":[1,{"b":"[[[{"}]}"#), 3);
        assert_eq!(text_depth(br#"["\"[[",[]]"#), 2);
        assert_eq!(text_depth("[".repeat(50_000).as_bytes()), 50_000);
    }

    #[test]
    fn size_walks_without_recursion() {
        let deep: crate::value::Value =
            sonic_rs::from_str(&("[".repeat(1_000) + &"]".repeat(1_000))).unwrap();
        assert_eq!(
            Size::of(&deep),
            Size { values: 1_000, containers: 1_000, maps: 0, entries: 0, text_bytes: 0, depth: 1_000 }
        );
        let v: crate::value::Value = sonic_rs::from_str(r#"{"ab":["xyz",1,{}]}"#).unwrap();
        assert_eq!(
            Size::of(&v),
            Size { values: 5, containers: 3, maps: 2, entries: 1, text_bytes: 5, depth: 3 }
        );
    }

    struct Stop;
    impl Budget for Stop {
        fn check(&self) -> Result<(), String> {
            Err("stopped".into())
        }
    }

    #[test]
    fn a_budget_applies_inside_its_scope_only() {
        assert_eq!(check(), Ok(()));
        let inner = with_budget(Arc::new(Stop), || (check(), admit(1)));
        assert_eq!(inner, (Err("stopped".into()), Err("stopped".into())));
        assert_eq!(check(), Ok(()));
    }
}

//! The stream path: an object rewritten while it is scanned, with no tree built at all.
//!
//! It serves a hop whose every rule only moves a value to another key of the same parent
//! object, possibly through a value map (FieldRename, EnumRemap) or item by item through
//! nested rules of the same kind (ForEach) — the shape of most version changes. Members no
//! rule names are copied as raw byte runs; a moved member is written under its new key; a
//! remapped value is parsed alone and run through the op's own [`RuleOp::map_value`].
//!
//! The result equals [`ScopePlan::run`]'s: that executor clears each rule's source path and
//! writes its target from the pristine input, so a moved key never appears at its old name,
//! and an input member that happens to sit at some rule's *target* survives only when that
//! rule's source is absent (such members are held back to the end of their object). Which
//! hops qualify is decided once, when the plan is built ([`Level::of`]); at run time anything
//! unexpected (an item that is not an object, a value with no mapping) bails to the full
//! path, which produces the same error message it always does.
//!
//! [`RuleOp::map_value`]: crate::strategies::RuleOp::map_value

use std::collections::BTreeMap;

use crate::convert::Direction;
use crate::lazy::{Bail, parse};
use crate::plan::ScopePlan;
use crate::scan::{Fields, Scanner};
use crate::strategies::Stream;

/// The rewrite of one object level. Keys are sorted, so a lookup is a binary search.
#[derive(Debug, Default)]
pub(crate) struct Level {
    keys: Vec<(String, Action)>,
    /// Keys some action here writes, with the slot of that action: an input member under
    /// such a key is kept only if the action's source is absent.
    targets: Vec<(String, usize)>,
}

#[derive(Debug)]
enum Action {
    /// An object on the way to deeper actions; `key` is its JSON-encoded name and colon.
    Descend { key: Vec<u8>, level: Level },
    /// The value moves to the key `to` (JSON-encoded with its colon), through
    /// `map_value` of rule `rule` when `mapped`.
    Move { to: Vec<u8>, rule: usize, mapped: bool },
    /// A list of objects moves to `to`, each item rewritten by `items` (the rules of rule
    /// `rule`'s nested scope).
    Items { to: Vec<u8>, rule: usize, items: Level },
}

/// More actions than this on one object level and the hop takes the projection path (the
/// sources seen are tracked in a `u64`).
const MAX_SLOTS: usize = 64;

fn encode_key(k: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(k.len() + 3);
    crate::lazy::write_key(&mut out, k);
    out
}

/// A level under construction.
#[derive(Default)]
struct Builder {
    keys: BTreeMap<String, Built>,
}

enum Built {
    Descend(Builder),
    Move { to: String, rule: usize, mapped: bool },
    Items { to: String, rule: usize, items: Level },
}

impl Builder {
    fn finish(self) -> Option<Level> {
        if self.keys.len() > MAX_SLOTS {
            return None;
        }
        let mut level = Level::default();
        for (slot, (key, built)) in self.keys.into_iter().enumerate() {
            let action = match built {
                Built::Descend(b) => Action::Descend { key: encode_key(&key), level: b.finish()? },
                Built::Move { to, rule, mapped } => {
                    level.targets.push((to.clone(), slot));
                    Action::Move { to: encode_key(&to), rule, mapped }
                }
                Built::Items { to, rule, items } => {
                    level.targets.push((to.clone(), slot));
                    Action::Items { to: encode_key(&to), rule, items }
                }
            };
            level.keys.push((key, action));
        }
        level.keys.shrink_to_fit();
        level.targets.shrink_to_fit();
        // Two rules writing one key, or a move onto an object other rules descend into, are
        // left to the executor.
        let mut written: Vec<&str> = level.targets.iter().map(|(t, _)| t.as_str()).collect();
        written.sort_unstable();
        if written.windows(2).any(|w| w[0] == w[1])
            || level
                .keys
                .iter()
                .any(|(k, a)| matches!(a, Action::Descend { .. }) && written.contains(&k.as_str()))
        {
            return None;
        }
        Some(level)
    }
}

impl Level {
    /// The rewrite of `scope` in direction `dir`, or `None` when some rule is not a same-parent
    /// move (or has a condition, or the scope drops uncovered fields).
    pub(crate) fn of(scope: &ScopePlan, dir: Direction) -> Option<Level> {
        let drops = match dir {
            Direction::HubToSpoke => &scope.drop_h2s,
            Direction::SpokeToHub => &scope.drop_s2h,
        };
        if !drops.is_empty() {
            return None;
        }
        let mut root = Builder::default();
        for (i, r) in scope.rules.iter().enumerate() {
            // A lossy hop takes a path that notes the loss (`ScopePlan::run_noting_loss`).
            if r.when.is_some() || r.lossy[dir as usize] {
                return None;
            }
            let stream = r.op.stream()?;
            let (hub, spoke) = match &stream {
                Stream::Move { hub, spoke, .. } | Stream::Items { hub, spoke, .. } => (*hub, *spoke),
            };
            let (from, to, clears) = match dir {
                Direction::HubToSpoke => (hub, spoke, &r.clear_h2s),
                Direction::SpokeToHub => (spoke, hub, &r.clear_s2h),
            };
            if clears.as_slice() != std::slice::from_ref(from) {
                return None;
            }
            let (from_key, parent) = from.segments().split_last()?;
            let (to_key, to_parent) = to.segments().split_last()?;
            if parent != to_parent {
                return None;
            }
            let mut level = &mut root;
            for seg in parent {
                match level.keys.entry(seg.clone()).or_insert_with(|| Built::Descend(Builder::default())) {
                    Built::Descend(b) => level = b,
                    _ => return None,
                }
            }
            if level.keys.contains_key(from_key) {
                return None;
            }
            let built = match stream {
                Stream::Move { mapped, .. } => Built::Move { to: to_key.clone(), rule: i, mapped },
                Stream::Items { scope, .. } => {
                    Built::Items { to: to_key.clone(), rule: i, items: Level::of(scope, dir)? }
                }
            };
            level.keys.insert(from_key.clone(), built);
        }
        root.finish()
    }

    fn find(&self, key: &str) -> Option<(usize, &Action)> {
        let i = self.keys.binary_search_by(|(k, _)| k.as_str().cmp(key)).ok()?;
        Some((i, &self.keys[i].1))
    }

    fn target_slot(&self, key: &str) -> Option<usize> {
        self.targets.iter().find(|(t, _)| t == key).map(|&(_, slot)| slot)
    }
}

/// Rewrites the object whose `apiVersion` member the scanner has just read (`fields` is its
/// walk), writing it with `apiVersion: desired` first.
pub(crate) fn rewrite(
    level: &Level,
    scope: &ScopePlan,
    dir: Direction,
    s: &mut Scanner<'_>,
    fields: Fields,
    desired: &str,
    out: &mut Vec<u8>,
) -> Result<(), Bail> {
    out.extend_from_slice(b"{\"apiVersion\":");
    sonic_rs::to_writer(&mut *out, desired).map_err(|_| Bail::Full)?;
    members(&Run { level, scope, dir, root: true }, s, fields, out, false)
}

/// One level's rewrite with the rules its slots refer to.
struct Run<'p> {
    level: &'p Level,
    scope: &'p ScopePlan,
    dir: Direction,
    /// The object's own level, where `apiVersion` was already written.
    root: bool,
}

fn sep(out: &mut Vec<u8>, first: &mut bool) {
    if !*first {
        out.push(b',');
    }
    *first = false;
}

/// Writes the remaining members of the object being walked and its closing brace.
fn members(
    run: &Run<'_>,
    s: &mut Scanner<'_>,
    mut fields: Fields,
    out: &mut Vec<u8>,
    mut first: bool,
) -> Result<(), Bail> {
    let mut seen = 0u64;
    // Members at some target's key, kept until the end: (slot, start, end).
    let mut held: Vec<(usize, usize, usize)> = Vec::new();
    // A run of untouched members, copied in one piece (separators and all).
    let mut untouched: Option<(usize, usize)> = None;
    let flush =
        |untouched: &mut Option<(usize, usize)>, s: &Scanner<'_>, out: &mut Vec<u8>, first: &mut bool| {
            if let Some((from, to)) = untouched.take() {
                sep(out, first);
                out.extend_from_slice(s.slice(from, to).as_bytes());
            }
        };
    while let Some((at, key)) = s.next_key_at(&mut fields)? {
        if run.root && key == "apiVersion" {
            // A repeated apiVersion member: the one written above stands (the executor, too,
            // keeps one key).
            flush(&mut untouched, s, out, &mut first);
            s.value()?;
            continue;
        }
        let Some((slot, action)) = run.level.find(&key) else {
            let held_slot = run.level.target_slot(&key);
            s.value()?;
            match held_slot {
                Some(slot) => {
                    // A run of untouched members ends here: copied in one piece, it would
                    // take the held member along.
                    flush(&mut untouched, s, out, &mut first);
                    held.push((slot, at, s.pos()));
                }
                None => match &mut untouched {
                    Some((_, to)) => *to = s.pos(),
                    None => untouched = Some((at, s.pos())),
                },
            }
            continue;
        };
        flush(&mut untouched, s, out, &mut first);
        match action {
            Action::Descend { key: encoded, level } => {
                sep(out, &mut first);
                match s.object()? {
                    Some(inner) => {
                        out.extend_from_slice(encoded);
                        out.push(b'{');
                        members(&Run { level, root: false, ..*run }, s, inner, out, true)?;
                    }
                    None => {
                        // Not an object: no rule below it can apply; copied as it is.
                        s.value()?;
                        out.extend_from_slice(s.slice(at, s.pos()).as_bytes());
                    }
                }
            }
            Action::Move { to, rule, mapped } => {
                seen |= 1 << slot;
                let raw = s.value()?;
                sep(out, &mut first);
                out.extend_from_slice(to);
                if *mapped {
                    let op = &run.scope.rules[*rule].op;
                    match op.map_value(&parse(raw)?, run.dir) {
                        Ok(Some(v)) => sonic_rs::to_writer(&mut *out, &v).map_err(|_| Bail::Full)?,
                        // Nothing written (and so perhaps an emptied parent) or an error:
                        // the executor decides.
                        Ok(None) | Err(_) => return Err(Bail::Full),
                    }
                } else {
                    out.extend_from_slice(raw.as_bytes());
                }
            }
            Action::Items { to, rule, items } => {
                seen |= 1 << slot;
                let Some(Stream::Items { scope, .. }) = run.scope.rules[*rule].op.stream() else {
                    return Err(Bail::Full);
                };
                let Some(mut list) = s.array()? else { return Err(Bail::Full) };
                sep(out, &mut first);
                out.extend_from_slice(to);
                out.push(b'[');
                let item_run = Run { level: items, scope, dir: run.dir, root: false };
                let mut n = 0;
                while s.next_item(&mut list)? {
                    // A stopped budget: the full path stops at the same place with its message.
                    if crate::limits::check_item(n).is_err() {
                        return Err(Bail::Full);
                    }
                    let Some(item) = s.object()? else { return Err(Bail::Full) };
                    if n > 0 {
                        out.push(b',');
                    }
                    out.push(b'{');
                    members(&item_run, s, item, out, true)?;
                    n += 1;
                }
                out.push(b']');
            }
        }
    }
    flush(&mut untouched, s, out, &mut first);
    for (slot, from, to) in held {
        if seen & (1 << slot) == 0 {
            sep(out, &mut first);
            out.extend_from_slice(s.slice(from, to).as_bytes());
        }
    }
    out.push(b'}');
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::strategies::testkit::*;
    use proptest::prelude::*;
    use serde_json::{Value as J, json};

    fn item(a: &str, b: &str) -> J {
        json!({"type": "array", "items": {"type": "object", "properties": {
            a: {"type": "string"}, b: {"type": "integer"}, "kind": {"type": "string"}}}})
    }

    /// Renames at two depths, a swap, an enum remap and a ForEach with nested renames.
    fn plan() -> std::sync::Arc<crate::Plan> {
        let hub = obj_schema(json!({
            "a": {"type": "integer"}, "x": {"type": "string"}, "y": {"type": "string"},
            "tier": {"type": "string", "enum": ["Small", "Large"]},
            "db": {"type": "object", "properties": {"name": {"type": "string"}, "port": {"type": "integer"}}},
            "volumes": item("name", "sizeGB"), "keep": {"type": "string"}}));
        let spoke = obj_schema(json!({
            "b": {"type": "integer"}, "x": {"type": "string"}, "y": {"type": "string"},
            "tier": {"type": "string", "enum": ["S", "L"]},
            "db": {"type": "object", "properties": {"dbName": {"type": "string"}, "port": {"type": "integer"}}},
            "vols": item("label", "size"), "keep": {"type": "string"}}));
        let rename = |h: &str, s: &str| json!({"strategy": "FieldRename", "fieldRename": {"hubPath": h, "spokePath": s}});
        plan_for(
            &hub,
            &spoke,
            json!([
                rename("spec.a", "spec.b"),
                rename("spec.x", "spec.y"),
                rename("spec.y", "spec.x"),
                rename("spec.db.name", "spec.db.dbName"),
                {"strategy": "EnumRemap", "enumRemap": {"path": "spec.tier", "mapping": [{"hub": "Small", "spoke": "S"}, {"hub": "Large", "spoke": "L"}]}},
                {"strategy": "ForEach", "forEach": {"hubItemsPath": "spec.volumes", "spokeItemsPath": "spec.vols",
                    "rules": [rename("name", "label"), rename("sizeGB", "size")]}},
            ]),
        )
    }

    fn stream_and_full(p: &crate::Plan, obj: &J, to: &str) -> (Result<J, String>, Result<J, String>) {
        let raw = serde_json::to_string(obj).unwrap();
        let mut out = Vec::new();
        let fast = p
            .convert_raw(&raw, to, &mut out)
            .map(|_| {
                // serde_json would quietly keep the last of a repeated key.
                let text = std::str::from_utf8(&out).expect("UTF-8");
                assert_eq!(crate::scan::first_duplicate(text, |_| false), None, "{text}");
                serde_json::from_slice(&out).expect("the stream path writes JSON")
            })
            .map_err(|e| e.to_string());
        (fast, p.convert(obj, to).map_err(|e| e.to_string()))
    }

    #[test]
    fn the_plan_streams_both_ways() {
        let p = plan();
        let sp = p.spoke("v1").unwrap();
        assert!(sp.stream(Direction::HubToSpoke).is_some());
        assert!(sp.stream(Direction::SpokeToHub).is_some());
    }

    #[test]
    fn equals_the_executor_on_the_edges() {
        let p = plan();
        for (obj, to) in [
            (
                hub_obj(
                    json!({"a": 1, "x": "x1", "y": "y1", "tier": "Small", "db": {"name": "n", "port": 5},
                "volumes": [{"name": "v", "sizeGB": 3, "kind": "ssd"}, {}], "keep": "k"}),
                ),
                SPOKE_AV,
            ),
            // An unknown hub member at a target's key: overwritten when the source is there…
            (hub_obj(json!({"a": 1, "b": 2})), SPOKE_AV),
            // …kept when it is not.
            (hub_obj(json!({"b": 2, "keep": "k"})), SPOKE_AV),
            // …also between untouched members (found by the review_json fuzzer: the run of
            // untouched members took it along, and it was written twice).
            (hub_obj(json!({"aa": 1, "b": 2, "c": 3})), SPOKE_AV),
            (hub_obj(json!({"aa": 1, "b": 2, "c": 3, "a": 4})), SPOKE_AV),
            (hub_obj(json!({"db": "not an object", "volumes": []})), SPOKE_AV),
            (hub_obj(json!({})), SPOKE_AV),
            (
                spoke_obj(
                    json!({"b": 1, "x": "x1", "tier": "L", "db": {"dbName": "n"}, "vols": [{"label": "l", "size": 2}]}),
                ),
                HUB_AV,
            ),
            // Errors come from the executor, word for word.
            (hub_obj(json!({"tier": "Medium"})), SPOKE_AV),
            (hub_obj(json!({"volumes": [1]})), SPOKE_AV),
            (hub_obj(json!({"volumes": {"name": "v"}})), SPOKE_AV),
        ] {
            let (fast, full) = stream_and_full(&p, &obj, to);
            assert_eq!(fast, full, "input {obj}");
        }
    }

    #[test]
    fn untouched_members_keep_their_bytes() {
        let p = plan();
        let raw = r#"{"apiVersion":"example.org/v2","kind":"DB","metadata":{"name":"db1"},"spec":{"a":1,"keep":"k","z":[1,  2.50]},"status":{"n":1.0}}"#;
        let mut out = Vec::new();
        p.convert_raw(raw, SPOKE_AV, &mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"{"apiVersion":"example.org/v1","kind":"DB","metadata":{"name":"db1"},"spec":{"b":1,"keep":"k","z":[1,  2.50]},"status":{"n":1.0}}"#
        );
    }

    #[test]
    fn a_repeated_api_version_fails_the_object() {
        let p = plan();
        let raw =
            r#"{"apiVersion":"example.org/v2","apiVersion":"example.org/v2","kind":"DB","spec":{"a":1}}"#;
        let mut out = Vec::new();
        let err = p.convert_raw(raw, SPOKE_AV, &mut out).unwrap_err();
        assert!(err.to_string().contains("has the key \"apiVersion\" twice"), "{err}");
        assert!(out.is_empty());
    }

    #[test]
    fn hops_that_do_not_qualify_take_the_other_paths() {
        let schema = obj_schema(
            json!({"a": {"type": "integer"}, "g": {"type": "object", "properties": {"b": {"type": "integer"}}}}),
        );
        let spoke = obj_schema(
            json!({"b": {"type": "integer"}, "g": {"type": "object", "properties": {"a": {"type": "integer"}}}}),
        );
        // A move across parents.
        let p = plan_for(
            &schema,
            &spoke,
            json!([{"strategy": "FieldRename", "fieldRename": {"hubPath": "spec.a", "spokePath": "spec.g.a"}},
                {"strategy": "FieldRename", "fieldRename": {"hubPath": "spec.g.b", "spokePath": "spec.b"}}]),
        );
        assert!(p.spoke("v1").unwrap().stream(Direction::HubToSpoke).is_none());
        let (fast, full) = stream_and_full(&p, &hub_obj(json!({"a": 1, "g": {"b": 2}})), SPOKE_AV);
        assert_eq!(fast, full);
    }

    fn arb_scalar() -> impl Strategy<Value = J> {
        prop_oneof![
            Just(J::Null),
            any::<i32>().prop_map(J::from),
            prop::sample::select(vec!["Small", "Large", "S", "L", "other"]).prop_map(J::from),
        ]
    }

    /// Objects that mix the plan's keys (at either version), unknown keys and wrong types.
    fn arb_spec() -> impl Strategy<Value = J> {
        let keys = prop::sample::select(vec!["a", "b", "x", "y", "tier", "keep", "junk"]);
        let flat = prop::collection::btree_map(keys, arb_scalar(), 0..7);
        let db = prop::collection::btree_map(
            prop::sample::select(vec!["name", "dbName", "port"]),
            arb_scalar(),
            0..3,
        );
        let vol = prop::collection::btree_map(
            prop::sample::select(vec!["name", "sizeGB", "label", "size", "kind"]),
            arb_scalar(),
            0..4,
        );
        let vols = prop::collection::vec(
            vol.prop_map(|m| J::Object(m.into_iter().map(|(k, v)| (k.to_string(), v)).collect())),
            0..3,
        )
        .boxed();
        (flat, prop::option::of(db), prop::option::of(vols.clone()), prop::option::of(vols)).prop_map(
            |(flat, db, volumes, vols)| {
                let mut m: serde_json::Map<String, J> =
                    flat.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
                if let Some(db) = db {
                    m.insert(
                        "db".into(),
                        J::Object(db.into_iter().map(|(k, v)| (k.to_string(), v)).collect()),
                    );
                }
                if let Some(v) = volumes {
                    m.insert("volumes".into(), J::Array(v));
                }
                if let Some(v) = vols {
                    m.insert("vols".into(), J::Array(v));
                }
                J::Object(m)
            },
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

        /// Whatever the object, the stream path gives the executor's object or its error.
        #[test]
        fn equals_the_executor(spec in arb_spec(), to_spoke in any::<bool>()) {
            let p = plan();
            let (obj, to) = if to_spoke { (hub_obj(spec), SPOKE_AV) } else { (spoke_obj(spec), HUB_AV) };
            let (fast, full) = stream_and_full(&p, &obj, to);
            prop_assert_eq!(fast, full, "input {}", obj);
        }
    }
}

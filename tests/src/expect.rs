//! What a load's object must read. After an acknowledged write, its value; after a write that
//! failed, either that value or the one before: the apiserver stores a write before it converts
//! the stored object back to the request's version for the answer, so a webhook replica lost
//! between the two leaves the client an error for a write that took effect. The first read that
//! sees the newer value settles it.

use std::collections::BTreeMap;

use serde_json::Value;

/// Each object's write number `k` (its spec is a function of `k` and the version read).
#[derive(Clone, Debug, Default)]
pub struct Expect {
    known: BTreeMap<String, i64>,
    unsure: BTreeMap<String, i64>,
}

impl Expect {
    /// Objects already written with these values.
    pub fn new(known: BTreeMap<String, i64>) -> Expect {
        Expect { known, unsure: BTreeMap::new() }
    }

    /// Write `k` of `name` was acknowledged.
    pub fn written(&mut self, name: &str, k: i64) {
        self.known.insert(name.to_string(), k);
        self.unsure.remove(name);
    }

    /// Write `k` of `name` failed: it may or may not have been stored.
    pub fn unsure(&mut self, name: &str, k: i64) {
        self.unsure.insert(name.to_string(), k);
    }

    /// The last acknowledged (or settled) write of `name`.
    pub fn known(&self, name: &str) -> Option<i64> {
        self.known.get(name).copied()
    }

    /// The objects with an acknowledged write.
    pub fn names(&self) -> Vec<String> {
        self.known.keys().cloned().collect()
    }

    /// Whether `got` is a value `name` may read, `spec(k)` being write `k`'s; a read of the
    /// unsure write makes it the known one (an older value after it is wrong).
    pub fn check(&mut self, name: &str, got: &Value, spec: impl Fn(i64) -> Value) -> bool {
        if let Some(k) = self.unsure.get(name).copied()
            && *got == spec(k)
        {
            self.written(name, k);
            return true;
        }
        self.known(name).is_some_and(|k| *got == spec(k))
    }

    /// What `name` must read, for a message.
    pub fn want(&self, name: &str, spec: impl Fn(i64) -> Value) -> String {
        let one = |k: Option<&i64>| k.map(|k| spec(*k).to_string());
        match (one(self.known.get(name)), one(self.unsure.get(name))) {
            (Some(k), Some(u)) => format!("{k} or {u}"),
            (k, u) => k.or(u).unwrap_or_else(|| "nothing".into()),
        }
    }

    /// The acknowledged writes and the unsure ones.
    pub fn into_parts(self) -> (BTreeMap<String, i64>, BTreeMap<String, i64>) {
        (self.known, self.unsure)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_failed_write_may_have_taken_effect_until_a_read_settles_it() {
        let spec = |k: i64| json!({"n": k});
        let mut e = Expect::default();
        e.written("l0", 1);
        e.unsure("l0", 2);
        assert!(e.check("l0", &spec(1), spec), "the write may have failed");
        assert!(e.check("l0", &spec(2), spec), "or taken effect");
        assert!(!e.check("l0", &spec(1), spec), "once seen, the newer value is the one");
        assert!(!e.check("l0", &spec(3), spec), "never a value not written");
        e.unsure("l0", 4);
        assert_eq!(e.want("l0", spec), r#"{"n":2} or {"n":4}"#);
        e.written("l0", 5);
        assert!(!e.check("l0", &spec(4), spec), "an acknowledged write settles it");
        assert_eq!(e.want("l0", spec), r#"{"n":5}"#);
        assert_eq!(e.want("l1", spec), "nothing");
    }
}

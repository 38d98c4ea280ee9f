//! Shards of the operator's own work (docs/sharding.md, "Shards"): which replica reconciles
//! an object, and how to ask the apiserver for only those objects.
//!
//! The shard of an object is the range of the 64-bit FNV-1a hash of its `metadata.uid` that
//! the hash falls in: shard i of S covers `[floor(i·2^64/S), floor((i+1)·2^64/S))`. Ranges, not
//! `hash mod S`, because KEP-5866's `shardSelector` can only name ranges of that same hash
//! (`dco_api::hash::fnv1a64`, checked against the apiserver's own filtering in
//! tests/tests/harness/sharded_list.rs). Pure: no time, no I/O.

use std::collections::BTreeSet;
use std::num::NonZeroU32;
use std::ops::Range;

use dco_api::hash::fnv1a64;

/// The size of the hash space, 2^64: the exclusive end of the last range.
const SPACE: u128 = 1 << 64;

/// The field every term of our selectors names: the hash is over `metadata.uid`, so every
/// term names that field.
const FIELD: &str = "object.metadata.uid";

/// The shard count S (`--shards`). Every replica must use the same one: a different S is a
/// different set of ranges, so two replicas could each believe they own one object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Shards(NonZeroU32);

impl Shards {
    pub fn new(count: u32) -> Option<Self> {
        NonZeroU32::new(count).map(Shards)
    }

    pub fn count(self) -> u32 {
        self.0.get()
    }

    /// Every shard index, in order.
    pub fn all(self) -> Range<u32> {
        0..self.count()
    }

    /// Where shard `i` starts, `floor(i·2^64/S)`; `i = S` gives 2^64, the end of the last.
    fn start(self, i: u32) -> u128 {
        u128::from(i) * SPACE / u128::from(self.count())
    }

    /// The hash range `[start, end)` of shard `i` (`i < S`); the last one ends at 2^64.
    pub fn range(self, i: u32) -> Range<u128> {
        debug_assert!(i < self.count(), "shard {i} of {}", self.count());
        self.start(i)..self.start(i + 1)
    }

    /// The shard whose range holds hash `h`. `floor(h·S/2^64)` is right or one short: when
    /// 2^64/S is not an integer, a range starts at the floor of a fraction, so the last hash
    /// below that fraction already belongs to the next shard.
    pub fn of_hash(self, h: u64) -> u32 {
        let guess = (u128::from(h) * u128::from(self.count()) / SPACE) as u32;
        if guess + 1 < self.count() && u128::from(h) >= self.start(guess + 1) { guess + 1 } else { guess }
    }

    /// The shard of an object: FNV-1a 64 over the bytes of its uid string, as the apiserver
    /// hashes `object.metadata.uid`.
    pub fn of_uid(self, uid: &str) -> u32 {
        self.of_hash(fnv1a64(uid.as_bytes()))
    }
}

/// A set of owned shards: the client-side check and the server-side selector, from one hash.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnedShards {
    pub shards: Shards,
    pub owned: BTreeSet<u32>,
}

impl OwnedShards {
    pub fn new(shards: Shards, owned: impl IntoIterator<Item = u32>) -> Self {
        OwnedShards { shards, owned: owned.into_iter().filter(|i| *i < shards.count()).collect() }
    }

    /// Whether an object with this uid is ours: what the ranges below must agree with.
    #[cfg(test)]
    pub fn owns(&self, uid: &str) -> bool {
        self.owned.contains(&self.shards.of_uid(uid))
    }

    /// The merged hash ranges of the owned shards, in order: adjacent shards are one range.
    pub fn ranges(&self) -> Vec<Range<u128>> {
        let mut out: Vec<Range<u128>> = Vec::new();
        for r in self.owned.iter().map(|i| self.shards.range(*i)) {
            match out.last_mut() {
                Some(last) if last.end == r.start => last.end = r.end,
                _ => out.push(r),
            }
        }
        out
    }

    /// The `shardSelector` for the owned shards in the apiserver's grammar
    /// (docs/sharding.md, "The server-side sharded watch"):
    /// `shardRange(object.metadata.uid, '0x…', '0x…')` terms joined by ` || `, bounds `0x` and
    /// 16 lowercase hex digits, the end of the space `'0x10000000000000000'`. `None` when
    /// nothing is owned: the grammar has no empty union, so the caller watches nothing.
    /// Owning everything gives the one whole-range term; the caller may omit it.
    pub fn selector(&self) -> Option<String> {
        let terms: Vec<String> = self
            .ranges()
            .into_iter()
            .map(|r| format!("shardRange({FIELD}, '0x{:016x}', '0x{:016x}')", r.start, r.end))
            .collect();
        (!terms.is_empty()).then(|| terms.join(" || "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shards(n: u32) -> Shards {
        Shards::new(n).unwrap()
    }

    #[test]
    fn uid_hash_is_fnv1a64_of_the_uid_string() {
        // Published FNV-1a 64 vectors, and a uid as the apiserver writes one (36 ASCII bytes,
        // hyphens included: the hash is over the string, not the 16 bytes it denotes).
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
        let uid = "6f1e3c1a-8b0d-4c47-9d3e-2a1b5c7d9e0f";
        let h = fnv1a64(uid.as_bytes());
        assert_eq!(h, 0x775b_c58a_8573_78e7, "computed independently (Python, the FNV-1a reference loop)");
        assert_eq!(shards(1).of_uid(uid), 0);
        assert_eq!(shards(3).of_uid(uid), 1);
        assert_eq!(shards(2).of_uid(uid), u32::from(h >= 0x8000_0000_0000_0000));
        assert_eq!(shards(32).of_uid(uid), (h >> 59) as u32, "a power of two is the top bits");
    }

    #[test]
    fn ranges_tile_the_space_and_agree_with_of_hash() {
        for s in [1, 2, 3, 7, 32, 64, 100, 1000] {
            let sh = shards(s);
            let mut next = 0u128;
            for i in sh.all() {
                let r = sh.range(i);
                assert_eq!(r.start, next, "S={s} shard {i} starts where {} ended", i.wrapping_sub(1));
                assert!(r.start < r.end);
                assert_eq!(sh.of_hash(r.start as u64), i, "S={s}: first hash of shard {i}");
                assert_eq!(sh.of_hash((r.end - 1) as u64), i, "S={s}: last hash of shard {i}");
                next = r.end;
            }
            assert_eq!(next, SPACE, "S={s}: the last range ends at 2^64");
        }
    }

    #[test]
    fn boundaries_of_first_and_last_shard() {
        let sh = shards(3);
        // 2^64/3 = 6148914691236517205.33…: shard 1 starts at the floor, so that hash is in 1.
        assert_eq!(sh.range(0), 0..6_148_914_691_236_517_205);
        assert_eq!(sh.of_hash(6_148_914_691_236_517_204), 0);
        assert_eq!(sh.of_hash(6_148_914_691_236_517_205), 1);
        assert_eq!(sh.range(2), 12_297_829_382_473_034_410..SPACE);
        assert_eq!(sh.of_hash(u64::MAX), 2);
        assert_eq!(shards(1).range(0), 0..SPACE);
        assert_eq!(shards(1).of_hash(0), 0);
        assert_eq!(shards(1).of_hash(u64::MAX), 0);
        assert_eq!(shards(32).range(31), 0xf800_0000_0000_0000..SPACE);
    }

    #[test]
    fn selector_merges_adjacent_shards_in_the_apiservers_grammar() {
        let sh = shards(4);
        let sel = |owned: &[u32]| OwnedShards::new(sh, owned.iter().copied()).selector();
        assert_eq!(sel(&[]), None);
        // The two halves are the selectors tests/tests/harness/sharded_list.rs sends to the
        // local cluster's apiserver, which echoes and applies them.
        assert_eq!(
            sel(&[0, 1]).unwrap(),
            "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')"
        );
        assert_eq!(
            sel(&[2, 3]).unwrap(),
            "shardRange(object.metadata.uid, '0x8000000000000000', '0x10000000000000000')"
        );
        assert_eq!(
            sel(&[0, 2]).unwrap(),
            "shardRange(object.metadata.uid, '0x0000000000000000', '0x4000000000000000') || \
             shardRange(object.metadata.uid, '0x8000000000000000', '0xc000000000000000')"
        );
        assert_eq!(
            sel(&[0, 1, 2, 3]).unwrap(),
            "shardRange(object.metadata.uid, '0x0000000000000000', '0x10000000000000000')"
        );
        assert_eq!(sel(&[3, 0]).unwrap(), sel(&[0, 3]).unwrap(), "order of the input does not matter");
        assert_eq!(
            OwnedShards::new(shards(1), [0]).selector().unwrap(),
            "shardRange(object.metadata.uid, '0x0000000000000000', '0x10000000000000000')"
        );
        // Not a power of two: bounds are floors, zero-padded lowercase.
        assert_eq!(
            OwnedShards::new(shards(3), [1]).selector().unwrap(),
            "shardRange(object.metadata.uid, '0x5555555555555555', '0xaaaaaaaaaaaaaaaa')"
        );
        // Out-of-range indices are dropped rather than naming hashes past 2^64.
        assert_eq!(OwnedShards::new(sh, [9]).selector(), None);
    }

    #[test]
    fn owns_uses_the_selectors_ranges() {
        let sh = shards(5);
        let owned = OwnedShards::new(sh, [1, 2, 4]);
        let ranges = owned.ranges();
        assert_eq!(ranges.len(), 2, "1 and 2 merge, 4 stands alone");
        for i in 0..500 {
            let uid = format!("{i:08x}-0000-4000-8000-{:012x}", i * 7919);
            let h = u128::from(fnv1a64(uid.as_bytes()));
            assert_eq!(owned.owns(&uid), ranges.iter().any(|r| r.contains(&h)), "{uid}");
        }
    }
}

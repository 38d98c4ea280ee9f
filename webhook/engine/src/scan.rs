//! A strict, single-pass JSON scanner for the review's hot path.
//!
//! The review converts ~15 MB per request but touches a few hundred bytes per object. The
//! scanner validates every byte exactly once (RFC 8259: string escapes and control
//! characters, the number grammar, literals, nesting) while handing out the raw text of each
//! value, so untouched values are copied to the response without being parsed or walked
//! again.
//!
//! It works like simdjson's first stage, streamed: each 64-byte block is classified with SIMD
//! compares (AVX-512BW, AVX2 or SSE2, whichever is the best this CPU has) into bitmasks
//! (quotes, backslashes, whitespace, operators, control characters, bytes ≥ 0x80),
//! escapes and string interiors are resolved with carries from the previous block, and what
//! is left is a mask of *tokens*: operators outside strings, opening quotes and the first
//! byte of every number or literal. The grammar then walks tokens, not bytes: skipping a
//! string is one step, and only numbers and literals are read byte by byte. Nothing is
//! allocated except for keys with escapes and nesting deeper than 64 levels.
//!
//! UTF-8 is checked in the same pass: a block with no byte ≥ 0x80 (nearly all of a
//! Kubernetes object) costs nothing more, and only the characters of blocks that have such
//! bytes are decoded. Every position the scanner stops at is an ASCII byte, so every slice
//! it returns is a valid `&str`.

use std::borrow::Cow;

/// The deepest nesting accepted: an object may nest `limits::MAX_DEPTH` levels (what the
/// apiserver's own decoder allows) below the review's envelope.
pub(crate) const MAX_DEPTH: usize = crate::limits::MAX_DEPTH + crate::limits::REVIEW_ENVELOPE_DEPTH;
const TOO_DEEP: &str =
    "an object nests deeper than 10000 levels (the kube-apiserver's own JSON limit; see dco_engine::limits)";

/// Where and why the input is not JSON.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{what} at byte {at}")]
pub(crate) struct ScanError {
    pub at: usize,
    pub what: &'static str,
}

fn fail<T>(at: usize, what: &'static str) -> Result<T, ScanError> {
    Err(ScanError { at, what })
}

/// One 64-byte block, one bit per byte.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Classes {
    quote: u64,
    backslash: u64,
    /// Space, tab, newline, carriage return.
    space: u64,
    /// `{ } [ ] : ,`
    op: u64,
    /// Bytes below 0x20.
    control: u64,
    /// Bytes ≥ 0x80 (parts of multi-byte UTF-8 characters).
    high: u64,
}

impl Classes {
    /// The portable classifier (and the reference the SIMD one is tested against).
    #[cfg_attr(target_arch = "x86_64", allow(dead_code))]
    fn of_bytes(block: &[u8; 64]) -> Classes {
        let mut c = Classes::default();
        for (i, b) in block.iter().enumerate() {
            let bit = 1u64 << i;
            match b {
                b'"' => c.quote |= bit,
                b'\\' => c.backslash |= bit,
                b' ' => c.space |= bit,
                b'{' | b'}' | b'[' | b']' | b':' | b',' => c.op |= bit,
                _ => {}
            }
            if matches!(b, b'\t' | b'\n' | b'\r') {
                c.space |= bit;
            }
            if *b < 0x20 {
                c.control |= bit;
            }
            if *b >= 0x80 {
                c.high |= bit;
            }
        }
        c
    }

    /// The classifier for `isa`, one block at a time (the scanner dispatches once per refill
    /// instead, in `Scanner::refill`).
    #[cfg(test)]
    fn of(block: &[u8; 64], isa: Isa) -> Classes {
        match isa {
            // SAFETY: the variants exist only when `Isa::detect` found the features.
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => unsafe { Classes::of_avx512(block) },
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => unsafe { Classes::of_avx2(block) },
            Isa::Baseline => Classes::of_baseline(block),
        }
    }

    /// One 64-byte register per block: every class is one compare into a mask, with no
    /// movemask and lane assembly (about a fifth of the AVX2 classifier's instructions).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512bw")]
    #[inline]
    fn of_avx512(block: &[u8; 64]) -> Classes {
        use std::arch::x86_64::*;
        // SAFETY: reads the 64 bytes of `block`, any alignment.
        let v = unsafe { _mm512_loadu_si512(block.as_ptr().cast()) };
        let table = |t: &[u8; 16]| {
            // SAFETY: reads the 16 bytes of `t`, any alignment.
            _mm512_broadcast_i32x4(unsafe { _mm_loadu_si128(t.as_ptr().cast::<__m128i>()) })
        };
        let nibble = _mm512_set1_epi8(0x0f);
        let classes = _mm512_and_si512(
            _mm512_shuffle_epi8(table(&Classes::LOW_NIBBLE), _mm512_and_si512(v, nibble)),
            _mm512_shuffle_epi8(
                table(&Classes::HIGH_NIBBLE),
                _mm512_and_si512(_mm512_srli_epi16::<4>(v), nibble),
            ),
        );
        Classes {
            op: _mm512_test_epi8_mask(classes, _mm512_set1_epi8(0x0f)),
            space: _mm512_test_epi8_mask(classes, _mm512_set1_epi8(0xf0u8 as i8)),
            quote: _mm512_cmpeq_epi8_mask(v, _mm512_set1_epi8(b'"' as i8)),
            backslash: _mm512_cmpeq_epi8_mask(v, _mm512_set1_epi8(b'\\' as i8)),
            control: _mm512_cmplt_epu8_mask(v, _mm512_set1_epi8(0x20)),
            high: _mm512_movepi8_mask(v),
        }
    }

    /// Nibble tables: the low and high nibble of a byte each select a set of classes, and
    /// the classes a byte is in are the intersection. Bits 0–3 are the operators
    /// (`,` `:` `[{` `]}`), bits 4–7 the whitespace (space, tab, newline, return); every
    /// other byte, and every byte ≥ 0x80 (whose high-nibble entries are 0), gets none.
    #[cfg(target_arch = "x86_64")]
    const LOW_NIBBLE: [u8; 16] = [0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0x20, 0x42, 0x04, 0x01, 0x88, 0, 0];
    #[cfg(target_arch = "x86_64")]
    const HIGH_NIBBLE: [u8; 16] = [0xE0, 0, 0x11, 0x02, 0, 0x0C, 0, 0x0C, 0, 0, 0, 0, 0, 0, 0, 0];

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    #[inline]
    fn of_avx2(block: &[u8; 64]) -> Classes {
        use std::arch::x86_64::*;
        let mut c = Classes::default();
        let table = |t: &[u8; 16]| {
            // SAFETY: reads the 16 bytes of `t`, any alignment.
            let half = unsafe { _mm_loadu_si128(t.as_ptr().cast::<__m128i>()) };
            _mm256_broadcastsi128_si256(half)
        };
        let (low, high) = (table(&Classes::LOW_NIBBLE), table(&Classes::HIGH_NIBBLE));
        let nibble = _mm256_set1_epi8(0x0f);
        for lane in 0..2 {
            // SAFETY: reads 32 bytes inside `block` (lane * 32 + 32 <= 64), any alignment.
            let v = unsafe { _mm256_loadu_si256(block.as_ptr().add(lane * 32).cast::<__m256i>()) };
            let bits = |m: __m256i| (_mm256_movemask_epi8(m) as u32 as u64) << (lane * 32);
            let classes = _mm256_and_si256(
                _mm256_shuffle_epi8(low, _mm256_and_si256(v, nibble)),
                _mm256_shuffle_epi8(high, _mm256_and_si256(_mm256_srli_epi16::<4>(v), nibble)),
            );
            let none = |mask: i8| {
                _mm256_cmpeq_epi8(_mm256_and_si256(classes, _mm256_set1_epi8(mask)), _mm256_setzero_si256())
            };
            c.op |= !bits(none(0x0f)) & (0xffff_ffff << (lane * 32));
            c.space |= !bits(none(0xf0u8 as i8)) & (0xffff_ffff << (lane * 32));
            c.quote |= bits(_mm256_cmpeq_epi8(v, _mm256_set1_epi8(b'"' as i8)));
            c.backslash |= bits(_mm256_cmpeq_epi8(v, _mm256_set1_epi8(b'\\' as i8)));
            c.control |= bits(_mm256_cmpeq_epi8(_mm256_min_epu8(v, _mm256_set1_epi8(0x1f)), v));
            c.high |= bits(v);
        }
        c
    }

    #[cfg(target_arch = "x86_64")]
    fn of_sse2(block: &[u8; 64]) -> Classes {
        use std::arch::x86_64::*;
        let mut c = Classes::default();
        for lane in 0..4 {
            // SAFETY: SSE2 is part of every x86_64 target; the load reads 16 bytes inside
            // `block` (lane * 16 + 16 <= 64) and tolerates any alignment.
            unsafe {
                let v = _mm_loadu_si128(block.as_ptr().add(lane * 16).cast::<__m128i>());
                let eq = |b: u8| _mm_cmpeq_epi8(v, _mm_set1_epi8(b as i8));
                let bits = |m: __m128i| (_mm_movemask_epi8(m) as u16 as u64) << (lane * 16);
                // `{`/`[` and `}`/`]` differ only in bit 0x20.
                let folded = _mm_or_si128(v, _mm_set1_epi8(0x20));
                let op = _mm_or_si128(
                    _mm_or_si128(
                        _mm_cmpeq_epi8(folded, _mm_set1_epi8(b'{' as i8)),
                        _mm_cmpeq_epi8(folded, _mm_set1_epi8(b'}' as i8)),
                    ),
                    _mm_or_si128(eq(b':'), eq(b',')),
                );
                let space =
                    _mm_or_si128(_mm_or_si128(eq(b' '), eq(b'\t')), _mm_or_si128(eq(b'\n'), eq(b'\r')));
                let control = _mm_cmpeq_epi8(_mm_min_epu8(v, _mm_set1_epi8(0x1f)), v);
                c.quote |= bits(eq(b'"'));
                c.backslash |= bits(eq(b'\\'));
                c.space |= bits(space);
                c.op |= bits(op);
                c.control |= bits(control);
                c.high |= bits(v);
            }
        }
        c
    }

    /// What every CPU of the target has: SSE2 on x86_64, the portable loop elsewhere.
    #[inline]
    fn of_baseline(block: &[u8; 64]) -> Classes {
        #[cfg(target_arch = "x86_64")]
        return Classes::of_sse2(block);
        #[cfg(not(target_arch = "x86_64"))]
        return Classes::of_bytes(block);
    }
}

/// The instructions a scanner classifies blocks with, chosen once per scanner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Isa {
    /// AVX-512BW classification and a carry-less multiply for the string masks.
    #[cfg(target_arch = "x86_64")]
    Avx512,
    #[cfg(target_arch = "x86_64")]
    Avx2,
    Baseline,
}

impl Isa {
    fn detect() -> Isa {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            if has!("avx512bw") && has!("pclmulqdq") {
                return Isa::Avx512;
            }
            if has!("avx2") {
                return Isa::Avx2;
            }
        }
        Isa::Baseline
    }
}

/// [`prefix_xor`] in one instruction: a carry-less multiply by all ones.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "pclmulqdq")]
#[inline]
fn prefix_xor_clmul(x: u64) -> u64 {
    use std::arch::x86_64::*;
    let r = _mm_clmulepi64_si128::<0>(_mm_set_epi64x(0, x as i64), _mm_set1_epi8(-1));
    _mm_cvtsi128_si64(r) as u64
}

/// Each bit set to the XOR of itself and all lower bits: 1 from an opening quote up to (not
/// including) its closing quote.
#[inline(always)]
fn prefix_xor(mut x: u64) -> u64 {
    x ^= x << 1;
    x ^= x << 2;
    x ^= x << 4;
    x ^= x << 8;
    x ^= x << 16;
    x ^= x << 32;
    x
}

const EVEN: u64 = 0x5555_5555_5555_5555;

/// The bytes escaped by a backslash (simdjson's odd-length backslash run detection);
/// `carry` is 1 when the next block's first byte is escaped.
#[inline(always)]
fn escaped(backslash: u64, carry: &mut u64) -> u64 {
    let backslash = backslash & !*carry;
    let follows_escape = (backslash << 1) | *carry;
    let odd_starts = backslash & !EVEN & !follows_escape;
    let (even_starts, overflow) = odd_starts.overflowing_add(backslash);
    *carry = overflow as u64;
    (EVEN ^ (even_starts << 1)) & follows_escape
}

/// A cursor over one JSON text. Cheap to copy, so a caller can save a position and rewind.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Scanner<'a> {
    text: &'a [u8],
    /// Everything before this is valid UTF-8 (at least up to `next_block`, more when a
    /// character crosses into the next block).
    utf8_to: usize,
    isa: Isa,
    /// Start of the block whose remaining tokens are in `tokens`.
    block: usize,
    /// Start of the next block to classify.
    next_block: usize,
    tokens: u64,
    /// Carries across blocks: all ones when the previous block ended inside a string; 1 when
    /// the next block's first byte is escaped; 1 when the previous block ended in a scalar.
    in_string: u64,
    escape: u64,
    scalar: u64,
    /// Where the `u` of the low half of the last surrogate pair is (see `unicode_escape`).
    low_surrogate: usize,
    /// One past the last backslash, or whitespace outside a string, classified so far: a key
    /// starting at or after it has no escape, and its closing quote is right before its colon
    /// (the apiserver's compact JSON has neither, so nearly every key is past it).
    irregular_end: usize,
    /// Some object's keys could not be shown unique in passing (they were not in ascending
    /// byte order, or one had an escape): [`first_duplicate`] decides.
    keys_unsure: bool,
    /// The next token (`text.len()` at the end).
    cur: usize,
    /// The end of the last value consumed.
    pos: usize,
    depth: usize,
}

/// The state of one object walk (see [`Scanner::object`]). Cloned with the scanner to look
/// ahead on a copy.
#[derive(Clone)]
pub(crate) struct Fields {
    first: bool,
    keys: KeyOrder,
}

/// The previous key of an object, to show its keys unique in passing: the apiserver (Go's
/// encoder) writes them in ascending byte order, so each key need only be greater than the one
/// before. Anything else (unsorted, escaped or equal keys) marks the scan `keys_unsure`.
#[derive(Clone, Copy, Default)]
struct KeyOrder {
    /// The byte after the key's opening quote (0: no key yet).
    first: u8,
    /// Where the key's text starts, after its opening quote, and its closing quote.
    start: usize,
    end: usize,
}

/// The state of one array walk (see [`Scanner::array`]).
pub(crate) struct Items {
    first: bool,
}

fn is_scalar_byte(b: u8) -> bool {
    !matches!(b, b' ' | b'\t' | b'\n' | b'\r' | b'{' | b'}' | b'[' | b']' | b':' | b',' | b'"')
}

impl<'a> Scanner<'a> {
    pub fn new(text: &'a [u8]) -> Result<Self, ScanError> {
        Scanner::with_isa(text, Isa::detect())
    }

    fn with_isa(text: &'a [u8], isa: Isa) -> Result<Self, ScanError> {
        let mut s = Scanner {
            text,
            utf8_to: 0,
            isa,
            block: 0,
            next_block: 0,
            tokens: 0,
            in_string: 0,
            escape: 0,
            scalar: 0,
            low_surrogate: 0,
            irregular_end: 0,
            keys_unsure: false,
            cur: 0,
            pos: 0,
            depth: 0,
        };
        s.cur = s.next_token()?;
        Ok(s)
    }

    /// The end of the last value consumed.
    pub fn pos(&self) -> usize {
        self.pos
    }

    /// Where the next value starts.
    pub fn at(&self) -> usize {
        self.cur
    }

    /// The text between two positions this scanner reported.
    pub fn slice(&self, from: usize, to: usize) -> &'a str {
        // Positions come from tokens already classified, so their bytes were checked; the
        // assert keeps that a fact rather than an assumption (a bug here panics, never
        // yields an invalid `str`).
        assert!(from <= to && to <= self.utf8_to, "slice beyond the checked UTF-8");
        let bytes = &self.text[from..to];
        // SAFETY: `bytes` lies within the UTF-8 checked by `refill` (asserted above) and
        // both ends are ASCII token positions, hence character boundaries.
        unsafe { std::str::from_utf8_unchecked(bytes) }
    }

    fn bytes(&self) -> &'a [u8] {
        self.text
    }

    fn err<T>(&self, what: &'static str) -> Result<T, ScanError> {
        fail(self.cur, what)
    }

    /// Classifies the next block into `tokens`, checking what can be checked per byte. Kept
    /// out of line: it runs once per 64 bytes, `next_token` once per token. Each instruction
    /// set gets its own copy, compiled with those instructions enabled so the classifier is
    /// inlined into it.
    #[inline(never)]
    fn refill(&mut self) -> Result<bool, ScanError> {
        match self.isa {
            // SAFETY: the variants exist only when `Isa::detect` found the features.
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => unsafe { self.refill_avx512() },
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => unsafe { self.refill_avx2() },
            Isa::Baseline => self.refill_with(Classes::of_baseline, prefix_xor),
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512bw,pclmulqdq")]
    fn refill_avx512(&mut self) -> Result<bool, ScanError> {
        self.refill_with(|b| Classes::of_avx512(b), |x| prefix_xor_clmul(x))
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    fn refill_avx2(&mut self) -> Result<bool, ScanError> {
        self.refill_with(|b| Classes::of_avx2(b), prefix_xor)
    }

    #[inline(always)]
    fn refill_with(
        &mut self,
        classify: impl Fn(&[u8; 64]) -> Classes,
        prefix_xor: impl Fn(u64) -> u64,
    ) -> Result<bool, ScanError> {
        let b = self.bytes();
        let at = self.next_block;
        let c = match b.get(at..at + 64) {
            Some(full) => classify(full.try_into().expect("64 bytes")),
            None if at < b.len() => {
                // The last, partial block, padded with spaces.
                let mut block = [b' '; 64];
                block[..b.len() - at].copy_from_slice(&b[at..]);
                classify(&block)
            }
            None => {
                if self.in_string != 0 {
                    return fail(b.len(), "unterminated string");
                }
                return Ok(false);
            }
        };
        // Bytes a character from the previous block already covered are not checked again.
        let high = c.high & (!0u64).checked_shl(self.utf8_to.saturating_sub(at) as u32).unwrap_or(0);
        if high != 0 {
            self.check_utf8(at + high.trailing_zeros() as usize, at + 64)?;
        }
        self.utf8_to = self.utf8_to.max((at + 64).min(b.len()));
        let esc =
            if c.backslash == 0 && self.escape == 0 { 0 } else { escaped(c.backslash, &mut self.escape) };
        let quote = c.quote & !esc;
        let in_string = prefix_xor(quote) ^ self.in_string;
        self.in_string = ((in_string as i64) >> 63) as u64;
        let irregular = c.backslash | (c.space & !in_string);
        if irregular != 0 {
            self.irregular_end = at + 64 - irregular.leading_zeros() as usize;
        }
        // Control characters inside a string; outside one they fail as scalars.
        let bad = c.control & in_string;
        if bad != 0 {
            return fail(at + bad.trailing_zeros() as usize, "control character in a string");
        }
        let escapes = esc & in_string;
        if escapes != 0 {
            self.check_escapes(at, escapes)?;
        }
        let scalar = !(c.space | c.op | quote | in_string);
        let scalar_starts = scalar & !((scalar << 1) | self.scalar);
        self.scalar = scalar >> 63;
        self.tokens = (c.op & !in_string) | (quote & in_string) | scalar_starts;
        self.block = at;
        self.next_block = at + 64;
        Ok(true)
    }

    /// Whether an object's keys are still provably unique after the key whose opening quote is
    /// at `q`: it must be greater than the previous key, and free of escapes. `end` is its
    /// closing quote when `exact` (the caller found it), else where it is when the key is
    /// regular (see `irregular_end`). This runs for every key of every object, so the usual
    /// case is one compare of first bytes.
    ///
    /// The order is by first byte (the closing quote standing in for the first byte of ""),
    /// then by all bytes: not quite byte order, but any strict order shows keys distinct, and
    /// it agrees with byte order on the keys the apiserver sends.
    #[inline(always)]
    fn key_in_order(&mut self, k: &mut KeyOrder, q: usize, end: usize, exact: bool) {
        if !exact && self.irregular_end > q {
            return self.key_irregular(k, q);
        }
        let start = q + 1;
        debug_assert!(start <= end && end < self.text.len());
        // SAFETY: `start <= end`, the key's closing quote, which is inside the text.
        let first = unsafe { *self.text.get_unchecked(start) };
        if first <= k.first {
            self.key_order_tie(k, start, end);
        }
        *k = KeyOrder { first, start, end };
    }

    /// [`Scanner::key_in_order`] for a key with an escape or whitespace near it.
    #[cold]
    #[inline(never)]
    fn key_irregular(&mut self, k: &mut KeyOrder, q: usize) {
        // The closing quote: the first unescaped one after `q`.
        let b = self.text;
        let mut end = q + 1;
        while end < b.len() && b[end] != b'"' {
            end += if b[end] == b'\\' { 2 } else { 1 };
        }
        if b[q + 1..end].contains(&b'\\') {
            // Only the decoded text says whether it repeats another key.
            self.keys_unsure = true;
        }
        self.key_in_order(k, q, end, true);
    }

    /// [`Scanner::key_in_order`] when the first bytes do not settle it: the first 8 bytes as
    /// big-endian words, then all of them.
    #[inline(always)]
    fn key_order_tie(&mut self, k: &KeyOrder, start: usize, end: usize) {
        /// The first `n` bytes of a big-endian word.
        const KEEP: [u64; 9] = {
            let mut m = [u64::MAX; 9];
            let mut n = 0;
            while n < 8 {
                m[n] = !(u64::MAX >> (n * 8));
                n += 1;
            }
            m
        };
        let b = self.text;
        let word = |start: usize, len: usize| {
            let w = match b.get(start..start + 8) {
                Some(w) => w.try_into().expect("8 bytes"),
                None => {
                    let mut w = [0u8; 8];
                    w[..b.len() - start].copy_from_slice(&b[start..]);
                    w
                }
            };
            u64::from_be_bytes(w) & KEEP[len.min(8)]
        };
        let (cur, prev) = (word(start, end - start), word(k.start, k.end - k.start));
        let ascending =
            k.first < b[start] || cur > prev || (cur == prev && self.longer_key_greater(k, start, end));
        if !ascending {
            self.keys_unsure = true;
        }
    }

    /// The last resort of [`Scanner::key_order_tie`]: keys that share their first 8 bytes.
    #[inline(never)]
    fn longer_key_greater(&self, k: &KeyOrder, start: usize, end: usize) -> bool {
        self.text[start..end] > self.text[k.start..k.end]
    }

    /// Whether some object's keys since the last call could not be shown unique in passing;
    /// [`first_duplicate`] over the value's text then decides. Clears the mark.
    pub fn take_keys_unsure(&mut self) -> bool {
        std::mem::take(&mut self.keys_unsure)
    }

    /// Marks the scan as [`Scanner::take_keys_unsure`] reports it (to restore an outer mark).
    pub fn set_keys_unsure(&mut self, unsure: bool) {
        self.keys_unsure |= unsure;
    }

    /// Checks the escapes of the block at `at` (`escapes`: the escaped bytes). Out of line, so
    /// the block step keeps its registers.
    #[inline(never)]
    fn check_escapes(&mut self, at: usize, mut escapes: u64) -> Result<(), ScanError> {
        let b = self.bytes();
        while escapes != 0 {
            let i = at + escapes.trailing_zeros() as usize;
            escapes &= escapes - 1;
            match b.get(i).copied().unwrap_or(0) {
                b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => {}
                b'u' => self.unicode_escape(i)?,
                _ => return fail(i - 1, "invalid escape in a string"),
            }
        }
        Ok(())
    }

    /// Checks the `\uXXXX` escape whose `u` is at `i`. A surrogate must be half of a pair (a
    /// high one followed at once by an escaped low one): a lone half is no Unicode character,
    /// so no path could write it back as text (RFC 8259 §8.2; serde_json refuses it too).
    #[inline]
    fn unicode_escape(&mut self, i: usize) -> Result<(), ScanError> {
        let b = self.bytes();
        let hex = |at: usize| -> Option<u32> {
            let h = b.get(at..at + 4)?;
            let s = std::str::from_utf8(h).ok()?;
            if !h.iter().all(u8::is_ascii_hexdigit) {
                return None;
            }
            u32::from_str_radix(s, 16).ok()
        };
        let Some(code) = hex(i + 1) else { return fail(i - 1, "invalid \\u escape in a string") };
        match code {
            0xD800..=0xDBFF => {
                let low = (b.get(i + 5..i + 7) == Some(b"\\u")).then(|| hex(i + 7)).flatten();
                if !matches!(low, Some(0xDC00..=0xDFFF)) {
                    return fail(
                        i - 1,
                        "lone surrogate \\u escape in a string (a high surrogate not followed by a low one)",
                    );
                }
                // The low half's `u` is checked next, in this block or the next one.
                self.low_surrogate = i + 6;
            }
            0xDC00..=0xDFFF if self.low_surrogate != i => {
                return fail(
                    i - 1,
                    "lone surrogate \\u escape in a string (a low surrogate without a high one before it)",
                );
            }
            _ => {}
        }
        Ok(())
    }

    /// Checks the UTF-8 of a block from `from` (a character boundary: the first byte ≥ 0x80
    /// past what is already checked) to `block_end`, including a last character that runs up
    /// to 3 bytes into the next block.
    #[cold]
    fn check_utf8(&mut self, from: usize, block_end: usize) -> Result<(), ScanError> {
        let end = (block_end + 3).min(self.text.len());
        match std::str::from_utf8(&self.text[from..end]) {
            Ok(_) => self.utf8_to = end,
            // Every character that starts in this block is whole and valid; the bytes past it
            // belong to the next block's check.
            Err(e) if from + e.valid_up_to() >= block_end => self.utf8_to = from + e.valid_up_to(),
            Err(e) => return fail(from + e.valid_up_to(), "invalid UTF-8"),
        }
        Ok(())
    }

    #[inline]
    fn next_token(&mut self) -> Result<usize, ScanError> {
        while self.tokens == 0 {
            if !self.refill()? {
                return Ok(self.text.len());
            }
        }
        let i = self.block + self.tokens.trailing_zeros() as usize;
        self.tokens &= self.tokens - 1;
        Ok(i)
    }

    #[inline]
    fn advance(&mut self) -> Result<(), ScanError> {
        self.cur = self.next_token()?;
        Ok(())
    }

    /// The first byte of the next token.
    #[inline]
    pub fn peek(&self) -> Option<u8> {
        self.bytes().get(self.cur).copied()
    }

    /// Only whitespace may follow the document.
    pub fn end(&mut self) -> Result<(), ScanError> {
        match self.peek() {
            None => Ok(()),
            Some(_) => self.err("unexpected data after the JSON value"),
        }
    }

    fn enter(&mut self) -> Result<(), ScanError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH { self.err(TOO_DEEP) } else { self.advance() }
    }

    /// Starts walking an object; `Ok(None)` when the next value is not an object (nothing is
    /// consumed then).
    pub fn object(&mut self) -> Result<Option<Fields>, ScanError> {
        if self.peek() != Some(b'{') {
            return Ok(None);
        }
        self.enter()?;
        Ok(Some(Fields { first: true, keys: KeyOrder::default() }))
    }

    /// Consumes the closing bracket at `cur`.
    fn close(&mut self) -> Result<(), ScanError> {
        self.pos = self.cur + 1;
        self.depth -= 1;
        self.advance()
    }

    /// The next key of the object (positioned at its value), or `None` after the closing
    /// brace. The caller must consume the value (with [`Scanner::value`] or a nested walk)
    /// before asking for the next key.
    pub fn next_key(&mut self, f: &mut Fields) -> Result<Option<Cow<'a, str>>, ScanError> {
        Ok(self.next_key_at(f)?.map(|(_, k)| k))
    }

    /// [`Scanner::next_key`], with where the key's opening quote is (so a caller can copy a
    /// run of members verbatim).
    pub fn next_key_at(&mut self, f: &mut Fields) -> Result<Option<(usize, Cow<'a, str>)>, ScanError> {
        match self.peek() {
            Some(b'}') => {
                self.close()?;
                return Ok(None);
            }
            Some(b',') if !f.first => self.advance()?,
            _ if f.first => {}
            _ => return self.err("expected ',' or '}' in an object"),
        }
        f.first = false;
        if self.peek() != Some(b'"') {
            return self.err("expected a string key in an object");
        }
        let at = self.cur;
        let key = self.string()?;
        match key {
            Cow::Borrowed(_) => self.key_in_order(&mut f.keys, at, self.pos - 1, true),
            // Escaped: only the decoded text says whether it repeats another key.
            Cow::Owned(_) => self.keys_unsure = true,
        }
        if self.peek() != Some(b':') {
            return self.err("expected ':' after an object key");
        }
        self.advance()?;
        Ok(Some((at, key)))
    }

    /// Starts walking an array; `Ok(None)` when the next value is not an array.
    pub fn array(&mut self) -> Result<Option<Items>, ScanError> {
        if self.peek() != Some(b'[') {
            return Ok(None);
        }
        self.enter()?;
        Ok(Some(Items { first: true }))
    }

    /// Whether another item follows (positioned at it), or the array closed.
    pub fn next_item(&mut self, it: &mut Items) -> Result<bool, ScanError> {
        match self.peek() {
            Some(b']') => {
                self.close()?;
                return Ok(false);
            }
            Some(b',') if !it.first => self.advance()?,
            _ if it.first => {}
            _ => return self.err("expected ',' or ']' in an array"),
        }
        it.first = false;
        Ok(true)
    }

    /// Consumes the string token at `cur` (already validated by `refill`) and returns its
    /// text with the quotes: everything up to the next token but trailing whitespace.
    #[inline]
    fn string_token(&mut self) -> Result<&'a str, ScanError> {
        let start = self.cur;
        self.advance()?;
        let b = self.bytes();
        let mut end = self.cur;
        while end > start + 1 && matches!(b[end - 1], b' ' | b'\t' | b'\n' | b'\r') {
            end -= 1;
        }
        if end < start + 2 || b[end - 1] != b'"' {
            return fail(start, "unterminated string");
        }
        self.pos = end;
        Ok(self.slice(start, end))
    }

    /// A string value, unescaped (borrowed unless it had escapes).
    pub fn string(&mut self) -> Result<Cow<'a, str>, ScanError> {
        if self.peek() != Some(b'"') {
            return self.err("expected a string");
        }
        let start = self.cur;
        let raw = self.string_token()?;
        let inner = &raw[1..raw.len() - 1];
        if !inner.as_bytes().contains(&b'\\') {
            return Ok(Cow::Borrowed(inner));
        }
        // Validated by `refill`, so this parse only decodes.
        match sonic_rs::from_str::<String>(raw) {
            Ok(s) => Ok(Cow::Owned(s)),
            Err(_) => fail(start, "invalid string escape"),
        }
    }

    fn digits(&self, mut i: usize) -> (usize, usize) {
        let b = self.bytes();
        let start = i;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        (i, i - start)
    }

    /// The end of the number starting at `i`.
    fn number_end(&self, mut i: usize) -> Result<usize, ScanError> {
        let b = self.bytes();
        let bad = |what| fail(self.cur, what);
        if b.get(i) == Some(&b'-') {
            i += 1;
        }
        match b.get(i) {
            Some(b'0') => i += 1,
            Some(b'1'..=b'9') => i = self.digits(i).0,
            _ => return bad("invalid number"),
        }
        if b.get(i) == Some(&b'.') {
            let (end, n) = self.digits(i + 1);
            if n == 0 {
                return bad("invalid number: no digits after '.'");
            }
            i = end;
        }
        if matches!(b.get(i), Some(b'e' | b'E')) {
            i += 1;
            if matches!(b.get(i), Some(b'+' | b'-')) {
                i += 1;
            }
            let (end, n) = self.digits(i);
            if n == 0 {
                return bad("invalid number: no digits in the exponent");
            }
            i = end;
        }
        Ok(i)
    }

    /// Consumes the number or literal token at `cur`, validating it.
    fn scalar(&mut self) -> Result<(), ScanError> {
        let b = self.bytes();
        let start = self.cur;
        let end = match b.get(start) {
            Some(b'-' | b'0'..=b'9') => self.number_end(start)?,
            Some(c) => {
                let word: &[u8] = match c {
                    b't' => b"true",
                    b'f' => b"false",
                    b'n' => b"null",
                    _ => return self.err("expected a JSON value"),
                };
                if b.get(start..start + word.len()) != Some(word) {
                    return self.err("invalid literal");
                }
                start + word.len()
            }
            None => return self.err("unexpected end of input"),
        };
        if b.get(end).is_some_and(|&c| is_scalar_byte(c)) {
            return self.err(if b[start].is_ascii_alphabetic() {
                "invalid literal"
            } else {
                "invalid number"
            });
        }
        self.pos = end;
        self.advance()
    }

    /// Skips one whole value, validating it, and returns its raw text.
    pub fn value(&mut self) -> Result<&'a str, ScanError> {
        let start = self.cur;
        match self.peek() {
            Some(b'"') => return self.string_token(),
            Some(b'{' | b'[') => self.skip_container()?,
            Some(b'}' | b']' | b':' | b',') => return self.err("expected a JSON value"),
            Some(_) => self.scalar()?,
            None => return self.err("unexpected end of input"),
        }
        Ok(self.slice(start, self.pos))
    }

    /// Skips the object or array at `cur` token by token. The kinds of the open containers
    /// (object = 1) live in a 64-bit word, spilling to the heap only beyond that.
    fn skip_container(&mut self) -> Result<(), ScanError> {
        let mut stack = KindStack::default();
        let open = |s: &mut Self, stack: &mut KindStack, obj: bool| -> Result<(), ScanError> {
            if s.depth >= MAX_DEPTH {
                return s.err(TOO_DEEP);
            }
            s.depth += 1;
            stack.push(obj);
            s.advance()
        };
        // The innermost container's kind, kept beside the stack so a token costs no lookup.
        let mut in_obj = self.peek() == Some(b'{');
        // The key order of each open object, by depth; objects deeper than these levels (in
        // this one value) are left to `first_duplicate`.
        let mut keys = [KeyOrder::default(); SKIP_KEY_LEVELS];
        open(self, &mut stack, in_obj)?;
        let mut after_open = true;
        loop {
            let close = if in_obj { b'}' } else { b']' };
            let Some(c) = self.peek() else { return self.err("unexpected end of input") };
            if c == close {
                self.close()?;
                stack.pop();
                if stack.is_empty() {
                    return Ok(());
                }
                in_obj = stack.top();
                after_open = false;
                continue;
            }
            if !after_open {
                if c != b',' {
                    return self.err(if in_obj {
                        "expected ',' or '}' in an object"
                    } else {
                        "expected ',' or ']' in an array"
                    });
                }
                self.advance()?;
            }
            after_open = false;
            if in_obj {
                if self.peek() != Some(b'"') {
                    return self.err("expected a string key in an object");
                }
                let q = self.cur;
                self.advance()?;
                if self.peek() != Some(b':') {
                    return self.err("expected ':' after an object key");
                }
                // The closing quote is right before the colon, unless the key is irregular.
                // Deeper objects share slots, and are marked unsure when they open.
                let k = &mut keys[(stack.len - 1) % SKIP_KEY_LEVELS];
                self.key_in_order(k, q, self.cur - 1, false);
                self.advance()?;
            }
            match self.peek() {
                Some(b'{') => {
                    if stack.len >= SKIP_KEY_LEVELS {
                        self.keys_unsure = true;
                    }
                    keys[stack.len % SKIP_KEY_LEVELS] = KeyOrder::default();
                    open(self, &mut stack, true)?;
                    (in_obj, after_open) = (true, true);
                }
                Some(b'[') => {
                    open(self, &mut stack, false)?;
                    (in_obj, after_open) = (false, true);
                }
                Some(b'"') => self.advance()?,
                Some(b'}' | b']' | b':' | b',') => return self.err("expected a JSON value"),
                Some(_) => self.scalar()?,
                None => return self.err("unexpected end of input"),
            }
        }
    }
}

/// A key an object has twice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Duplicate {
    /// The key, decoded.
    pub key: String,
    /// Where in the value the object holding it is: `spec.items[2]`, or "" for the value itself.
    pub path: String,
}

/// The first key that repeats within one object of `text` (a JSON value the scanner has
/// accepted), comparing decoded keys (`"a"` and `"\u0061"` are the same key). Members whose
/// path `skip` names are not looked into. This is the slow check behind
/// [`Scanner::take_keys_unsure`]: one pass, a set of keys per open object, no recursion.
pub(crate) fn first_duplicate(text: &str, skip: impl Fn(&[Seg]) -> bool) -> Option<Duplicate> {
    enum Open {
        Object(Fields, std::collections::HashSet<String>),
        Array(Items, usize),
    }
    let mut s = Scanner::new(text.as_bytes()).ok()?;
    // `path[i]` leads from the container `stack[i]` into `stack[i + 1]` (and to the member
    // being looked at).
    let mut path: Vec<Seg> = Vec::new();
    let mut stack: Vec<Open> = Vec::new();
    let enter = |s: &mut Scanner<'_>, stack: &mut Vec<Open>| -> Option<bool> {
        if let Some(f) = s.object().ok()? {
            stack.push(Open::Object(f, Default::default()));
        } else if let Some(it) = s.array().ok()? {
            stack.push(Open::Array(it, 0));
        } else {
            s.value().ok()?;
            return Some(false);
        }
        Some(true)
    };
    if !enter(&mut s, &mut stack)? {
        return None;
    }
    while let Some(top) = stack.last_mut() {
        let more = match top {
            Open::Object(f, seen) => match s.next_key(f).ok()? {
                Some(k) => {
                    if !seen.insert(k.to_string()) {
                        return Some(Duplicate { key: k.into_owned(), path: dotted(&path) });
                    }
                    path.push(Seg::Key(k.into_owned()));
                    true
                }
                None => false,
            },
            Open::Array(it, i) => {
                if s.next_item(it).ok()? {
                    path.push(Seg::Index(*i));
                    *i += 1;
                    true
                } else {
                    false
                }
            }
        };
        if !more {
            stack.pop();
            path.pop();
            continue;
        }
        if skip(&path) {
            s.value().ok()?;
            path.pop();
        } else if !enter(&mut s, &mut stack)? {
            path.pop();
        }
    }
    None
}

/// One step into a JSON value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Seg {
    Key(String),
    Index(usize),
}

/// `spec.items[2]["a.b"]`: keys joined by dots (quoted when they hold one), indices in brackets.
fn dotted(path: &[Seg]) -> String {
    let mut out = String::new();
    for seg in path {
        match seg {
            Seg::Index(i) => out.push_str(&format!("[{i}]")),
            Seg::Key(k) if k.is_empty() || k.contains(['.', '[', ']', '"']) => {
                out.push_str(&format!("[{k:?}]"))
            }
            Seg::Key(k) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(k);
            }
        }
    }
    out
}

/// How many levels of one skipped value have their keys checked in passing.
const SKIP_KEY_LEVELS: usize = 16;

/// The kinds of open containers during a skip.
#[derive(Default)]
struct KindStack {
    len: usize,
    /// One bit per level (object = 1) for the first 64 levels: a word, not a pair of them.
    bits: u64,
    spill: Vec<bool>,
}

impl KindStack {
    #[inline]
    fn push(&mut self, obj: bool) {
        if self.len < 64 {
            self.bits = (self.bits & !(1 << self.len)) | ((obj as u64) << self.len);
        } else {
            self.spill.push(obj);
        }
        self.len += 1;
    }

    #[inline]
    fn pop(&mut self) {
        self.len -= 1;
        if self.len >= 64 {
            self.spill.pop();
        }
    }

    #[inline]
    fn top(&self) -> bool {
        match self.len {
            0 => false,
            n if n <= 64 => self.bits >> (n - 1) & 1 == 1,
            _ => self.spill.last().copied().unwrap_or(false),
        }
    }

    fn is_empty(&self) -> bool {
        self.len == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Whether `text` is one JSON value, asserting every instruction set's scanner agrees.
    fn valid(text: &str) -> bool {
        let verdicts: Vec<_> = Isa::all_here()
            .into_iter()
            .map(|isa| {
                Scanner::with_isa(text.as_bytes(), isa).and_then(|mut s| s.value().and_then(|_| s.end()))
            })
            .collect();
        assert!(verdicts.windows(2).all(|w| w[0] == w[1]), "{text:?}: {verdicts:?}");
        verdicts[0].is_ok()
    }

    #[test]
    fn accepts_what_json_accepts() {
        for t in [
            "0",
            "-0",
            "1.5e-3",
            "-12E+4",
            "true",
            "false",
            "null",
            r#""""#,
            r#""a\"b\\c\/\b\f\n\r\t\u00e9x""#,
            "[]",
            "{}",
            " [ 1 , [ ] , { } , \"x\" ] ",
            r#"{"a":{"b":[1,{"c":null}]},"d":"é😀"}"#,
            "\"0123456789abcdefghij\"",
            "[[[[[]]]]]",
        ] {
            assert!(valid(t), "{t}");
        }
    }

    #[test]
    fn refuses_what_json_refuses() {
        // Numbers beyond f64 are kept, not refused (see `agrees_with_serde_json`).
        assert!(valid("[1e400]") && serde_json::from_str::<serde_json::Value>("[1e400]").is_err());
        for t in [
            "",
            " ",
            "01",
            "1.",
            ".5",
            "-",
            "1e",
            "+1",
            "tru",
            "nul",
            "\"abc",
            "\"a\\x\"",
            "\"\\u12g4\"",
            "\"\t\"",
            "[1,]",
            "[,1]",
            "{\"a\"}",
            "{\"a\":}",
            "{\"a\":1,}",
            "{,}",
            "{1:2}",
            "[1 2]",
            "{\"a\":1 \"b\":2}",
            "[}",
            "{]",
            "[",
            "{",
            "1 2",
            "{\"a\":[1}",
            "[\"a\":1]",
        ] {
            assert!(!valid(t), "{t:?}");
            assert!(serde_json::from_str::<serde_json::Value>(t).is_err(), "{t:?} is JSON after all");
        }
    }

    #[test]
    fn values_come_back_as_their_raw_text() {
        let text = r#" {"a" : [1, {"b": "c"}] , "k\u0065y": "v\n", "n": -1.0e3} "#;
        let mut s = Scanner::new(text.as_bytes()).unwrap();
        let mut f = s.object().unwrap().unwrap();
        let mut seen = Vec::new();
        while let Some(k) = s.next_key(&mut f).unwrap() {
            seen.push((k.into_owned(), s.value().unwrap().to_string()));
        }
        s.end().unwrap();
        assert_eq!(
            seen,
            [
                ("a".to_string(), r#"[1, {"b": "c"}]"#.to_string()),
                ("key".to_string(), r#""v\n""#.to_string()),
                ("n".to_string(), "-1.0e3".to_string())
            ]
        );
    }

    #[test]
    fn nesting_is_bounded() {
        let deep = "[".repeat(MAX_DEPTH + 1) + &"]".repeat(MAX_DEPTH + 1);
        let err = Scanner::new(deep.as_bytes()).unwrap().value().unwrap_err();
        assert_eq!(err.what, TOO_DEEP);
        let ok = "[".repeat(MAX_DEPTH) + &"]".repeat(MAX_DEPTH);
        assert!(valid(&ok));
    }

    #[test]
    fn errors_name_the_byte() {
        let err = |t: &str| {
            Scanner::new(t.as_bytes()).and_then(|mut s| s.value().and_then(|_| s.end())).unwrap_err()
        };
        assert_eq!(err(r#"{"a": tru}"#), ScanError { at: 6, what: "invalid literal" });
        assert_eq!(err(r#"[1, "a\u00g1"]"#), ScanError { at: 6, what: "invalid \\u escape in a string" });
        assert_eq!(err("[\"a\x01\"]"), ScanError { at: 3, what: "control character in a string" });
        assert_eq!(err(r#"[1 2]"#), ScanError { at: 3, what: "expected ',' or ']' in an array" });
        assert_eq!(err(r#"{"a":1} x"#), ScanError { at: 8, what: "unexpected data after the JSON value" });
        // A string that runs past a block boundary and never ends.
        let long = format!("[\"{}", "x".repeat(200));
        assert_eq!(err(&long), ScanError { at: 202, what: "unterminated string" });
        // Broken UTF-8 is named at the byte where the broken character starts, also when it
        // crosses a block boundary or the valid character before it does.
        let bytes = |b: &[u8]| Scanner::new(b).and_then(|mut s| s.value().and_then(|_| s.end())).unwrap_err();
        assert_eq!(bytes(b"[\"ab\xc3(\"]"), ScanError { at: 4, what: "invalid UTF-8" });
        for pad in 55..66 {
            let mut b = vec![b' '; pad];
            b.extend_from_slice("[\"😀".as_bytes());
            b.extend_from_slice(b"\xe2\x82\"]");
            assert_eq!(bytes(&b), ScanError { at: pad + 6, what: "invalid UTF-8" }, "pad {pad}");
        }
        assert_eq!(bytes(b"[\"\xf0\x9f\x98"), ScanError { at: 2, what: "invalid UTF-8" });
    }

    impl Isa {
        /// Every instruction set this CPU can run.
        fn all_here() -> Vec<Isa> {
            let mut all = vec![Isa::Baseline];
            #[cfg(target_arch = "x86_64")]
            {
                if std::arch::is_x86_feature_detected!("avx2") {
                    all.push(Isa::Avx2);
                }
                if Isa::detect() == Isa::Avx512 {
                    all.push(Isa::Avx512);
                }
            }
            all
        }
    }

    /// Each instruction set's scanner gives the same verdict on the same text.
    #[test]
    fn every_instruction_set_scans_alike() {
        let text =
            format!("[{}]", vec![r#"{"a":"x\"y\\","b":[1,-2.5e3,true,null],"é😀":"\u00e9"}"#; 40].join(","));
        let scan =
            |t: &str, isa| Scanner::with_isa(t.as_bytes(), isa).and_then(|mut s| s.value().map(str::len));
        let broken = text.replace(r"\u00e9", r"\u00g9");
        for isa in Isa::all_here() {
            assert_eq!(scan(&text, isa), Ok(text.len()), "{isa:?}");
            assert_eq!(
                scan(&broken, isa),
                Err(ScanError { at: 50, what: "invalid \\u escape in a string" }),
                "{isa:?}"
            );
        }
    }

    #[test]
    fn classifiers_agree_on_every_byte_value() {
        for b in 0..=255u8 {
            let mut block = [b; 64];
            block[7] = b'"';
            block[40] = b'{';
            for isa in Isa::all_here() {
                assert_eq!(Classes::of(&block, isa), Classes::of_bytes(&block), "byte {b:#04x}, {isa:?}");
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

        /// The SIMD classifiers and the portable one agree on every block.
        #[test]
        fn classifiers_agree(bytes in prop::collection::vec(
            prop_oneof![any::<u8>(), prop::sample::select(b"\"\\ \t\n\r{}[]:,\x1f\x20\x7f\x80".to_vec())], 64)) {
            let block: [u8; 64] = bytes.try_into().unwrap();
            for isa in Isa::all_here() {
                prop_assert_eq!(Classes::of(&block, isa), Classes::of_bytes(&block), "{:?}", isa);
            }
        }

        /// The carry-less multiply computes the same prefix XOR as the shifts.
        #[test]
        fn prefix_xor_agrees(x in any::<u64>()) {
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("pclmulqdq") {
                // SAFETY: the CPU supports PCLMULQDQ.
                prop_assert_eq!(unsafe { prefix_xor_clmul(x) }, prefix_xor(x));
            }
            prop_assert_eq!(prefix_xor(x) >> 63, u64::from(x.count_ones() % 2 == 1));
        }
    }

    /// JSON-ish text: mostly well-formed pieces with random damage.
    fn jsonish() -> impl Strategy<Value = String> {
        let atom = prop_oneof![
            Just("{".to_string()),
            Just("}".to_string()),
            Just("[".to_string()),
            Just("]".to_string()),
            Just(",".to_string()),
            Just(":".to_string()),
            Just(" ".to_string()),
            Just("\"".to_string()),
            Just("\\".to_string()),
            Just("\\u00".to_string()),
            Just("true".to_string()),
            Just("null".to_string()),
            Just("-".to_string()),
            Just(".".to_string()),
            Just("e".to_string()),
            "[0-9]{1,3}",
            "\"[a-z\\\\\"\u{1}é]{0,12}\"",
        ];
        prop::collection::vec(atom, 0..48).prop_map(|v| v.concat())
    }

    /// Strings of valid and broken UTF-8 (truncated, overlong, surrogates, stray
    /// continuation bytes, beyond U+10FFFF) between JSON pieces.
    fn utf8ish() -> impl Strategy<Value = Vec<u8>> {
        let piece = prop_oneof![
            3 => "[a-z\\\"]{0,70}".prop_map(String::into_bytes),
            2 => prop::sample::select(vec!["é", "😀", "€", "\\u00e9", "\"", " "]).prop_map(|s| s.as_bytes().to_vec()),
            1 => prop::sample::select(vec![
                &b"\x80"[..], b"\xc3", b"\xe2\x82", b"\xf0\x9f\x98", b"\xc0\xaf", b"\xed\xa0\x80", b"\xf5\x80\x80\x80",
                b"\xff",
            ]).prop_map(<[u8]>::to_vec),
        ];
        let string = prop::collection::vec(piece, 0..6)
            .prop_map(|v| [b"\"".to_vec(), v.concat(), b"\"".to_vec()].concat());
        let member = prop_oneof![
            4 => string,
            1 => prop::sample::select(vec![&b"1"[..], b"null", b"\xc3\xa9", b"1\xc3\xa9", b"[", b"]"]).prop_map(<[u8]>::to_vec),
        ];
        prop::collection::vec(member, 0..8)
            .prop_map(|v| [b"[".to_vec(), v.join(&b","[..]), b"]".to_vec()].concat())
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 4000, ..ProptestConfig::default() })]

        /// The scanner and serde_json agree on what is JSON.
        #[test]
        fn agrees_with_serde_json(pad in 0usize..70, text in jsonish()) {
            // The padding moves every byte across the 64-byte block boundaries.
            let text = " ".repeat(pad) + &text;
            let ours = valid(&text);
            let theirs = serde_json::from_str::<serde_json::Value>(&text);
            // The one deliberate difference: a number beyond f64 (1e400) is JSON to the
            // scanner, which keeps every number's digits as text (lazy.rs
            // `numbers_keep_their_digits_on_every_path`); serde_json's Value refuses it.
            // There the syntax alone decides: `IgnoredAny` reads numbers without their
            // value, so "1e310{" is still refused for the brace.
            let theirs = match theirs {
                Err(e) if e.to_string().starts_with("number out of range") => {
                    serde_json::from_str::<serde::de::IgnoredAny>(&text).is_ok()
                }
                other => other.is_ok(),
            };
            prop_assert_eq!(ours, theirs, "{:?}", text);
        }

        /// The same on bytes: multi-byte characters, valid and broken, inside and outside
        /// strings and across block boundaries.
        #[test]
        fn agrees_with_serde_json_on_utf8(pad in 0usize..70, text in utf8ish()) {
            let mut bytes = vec![b' '; pad];
            bytes.extend_from_slice(&text);
            let ours = Scanner::new(&bytes).and_then(|mut s| s.value().and_then(|_| s.end())).is_ok();
            let theirs = serde_json::from_slice::<serde_json::Value>(&bytes).is_ok();
            prop_assert_eq!(ours, theirs, "{:?}", String::from_utf8_lossy(&bytes));
        }

        /// Valid documents round-trip: the raw text of every member is what serde_json sees.
        #[test]
        fn raw_members_parse_to_the_same_values(v in arb_json()) {
            let text = serde_json::to_string_pretty(&v).unwrap();
            // Compared with serde_json's reading of the same text (its float printing does
            // not always round-trip, which is not the scanner's business).
            let v: serde_json::Value = serde_json::from_str(&text).unwrap();
            let mut s = Scanner::new(text.as_bytes()).unwrap();
            if let Some(mut f) = s.object().unwrap() {
                while let Some(k) = s.next_key(&mut f).unwrap() {
                    let raw = s.value().unwrap();
                    let member: serde_json::Value = serde_json::from_str(raw).unwrap();
                    prop_assert_eq!(&member, &v[k.as_ref()]);
                }
            } else {
                prop_assert_eq!(serde_json::from_str::<serde_json::Value>(s.value().unwrap()).unwrap(), v);
            }
            s.end().unwrap();
        }
    }

    fn arb_json() -> impl Strategy<Value = serde_json::Value> {
        let leaf = prop_oneof![
            Just(serde_json::Value::Null),
            any::<bool>().prop_map(serde_json::Value::from),
            any::<i64>().prop_map(serde_json::Value::from),
            (-1e9f64..1e9).prop_map(serde_json::Value::from),
            "\\PC{0,10}".prop_map(serde_json::Value::from),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(serde_json::Value::Array),
                prop::collection::btree_map("\\PC{0,6}", inner, 0..6)
                    .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
            ]
        })
    }
}

/// Repeated keys and surrogates: what the scanner decides on its own.
#[cfg(test)]
mod one_answer_tests {
    use super::*;
    use proptest::prelude::*;

    /// Whether `text` scans, and whether it then has a repeated key (by the slow check, run
    /// only when the scan could not show the keys unique).
    fn scan(text: &str) -> Result<Option<Duplicate>, ScanError> {
        let mut s = Scanner::new(text.as_bytes())?;
        s.value()?;
        s.end()?;
        Ok(if s.take_keys_unsure() { first_duplicate(text, |_| false) } else { None })
    }

    fn dup(key: &str, path: &str) -> Result<Option<Duplicate>, ScanError> {
        Ok(Some(Duplicate { key: key.into(), path: path.into() }))
    }

    #[test]
    fn repeated_keys_are_found_however_spelled() {
        for (text, want) in [
            (r#"{"a":1,"a":2}"#, dup("a", "")),
            (r#"{"a":1,"b":2,"a":3}"#, dup("a", "")),
            (r#"{"b":1,"a":2,"b":3}"#, dup("b", "")),
            (r#"{"":1,"":2}"#, dup("", "")),
            (r#"{"a" : 1 , "a" :2}"#, dup("a", "")),
            (r#"{"a":1,"\u0061":2}"#, dup("a", "")),
            (r#"{"\u0061":1,"a":2}"#, dup("a", "")),
            (r#"{"\u0061":1,"]":2,"a":3}"#, dup("a", "")),
            (r#"{"a\"b":1,"a\u0022b":2}"#, dup("a\"b", "")),
            (r#"{"abcdefgh":1,"abcdefgh":2}"#, dup("abcdefgh", "")),
            (r#"{"abcdefghij":1,"abcdefghij":2}"#, dup("abcdefghij", "")),
            (r#"[{"x":[{"k":1,"k":1}]}]"#, dup("k", "[0].x[0]")),
            (r#"{"a.b":{"c":1,"c":2}}"#, dup("c", r#"["a.b"]"#)),
            // Distinct keys, in order or not.
            (r#"{"a":1,"b":2}"#, Ok(None)),
            (r#"{"b":1,"a":2}"#, Ok(None)),
            (r#"{"a":{"a":{"a":1}},"b":{"a":1}}"#, Ok(None)),
            (r#"{"abcdefgh1":1,"abcdefgh2":2,"abcdefgh":3}"#, Ok(None)),
            (r#"{"a":1,"a ":2,"a!":3}"#, Ok(None)),
            (r#"{"\u0061":1,"b":2}"#, Ok(None)),
            (r#"[{"k":1},{"k":1}]"#, Ok(None)),
        ] {
            assert_eq!(scan(text), want, "{text}");
        }
        // Deeper than the levels checked in passing.
        let deep = format!("{}{{\"k\":1,\"k\":2}}{}", "{\"a\":".repeat(40), "}".repeat(40));
        assert_eq!(scan(&deep).unwrap().unwrap().key, "k");
        // The last key ends within 8 bytes of the end of the text.
        assert_eq!(scan(r#"{"b":1,"a":2}"#), Ok(None));
    }

    #[test]
    fn sorted_compact_keys_need_no_second_look() {
        let text = r#"{"apiVersion":"v","kind":"K","metadata":{"labels":{"a":"1","b":"2"},"name":"n","namespace":"ns"},"spec":{"hubField0":1,"hubField1":2,"hubField10":3,"items":[{"name":"a","value":"b"},{"name":"c","value":"d"}]}}"#;
        let mut s = Scanner::new(text.as_bytes()).unwrap();
        s.value().unwrap();
        assert!(!s.take_keys_unsure());
    }

    #[test]
    fn surrogates_must_pair() {
        for ok in [
            r#""\ud83d\ude00""#,
            r#""\uD83D\uDE00x""#,
            r#""\udbff\udfff""#,
            r#""\\ud800""#,
            r#""\ud7ff\ue000""#,
        ] {
            assert!(scan(ok).is_ok(), "{ok}");
            assert!(serde_json::from_str::<serde_json::Value>(ok).is_ok(), "{ok}");
        }
        for (lone, at) in [
            (r#""\ud800""#, 1),
            (r#""\udc00""#, 1),
            (r#""x\ud800y""#, 2),
            (r#""\ud800\u0041""#, 1),
            (r#""\ud800\\udc00""#, 1),
            (r#""\udc00\ud800""#, 1),
            (r#""\ud83d\ude00\ude00""#, 13),
            (r#""\ud800"#, 1),
        ] {
            let err = scan(lone).unwrap_err();
            assert!(err.what.starts_with("lone surrogate"), "{lone}: {err}");
            assert_eq!(err.at, at, "{lone}");
            assert!(serde_json::from_str::<serde_json::Value>(lone).is_err(), "{lone}");
        }
        // Across a block boundary: the pair's halves in two blocks.
        for pad in 50..70 {
            let text = format!("{}\"\\ud83d\\ude00\"", " ".repeat(pad));
            assert!(scan(&text).is_ok(), "pad {pad}");
            let text = format!("{}\"\\ud83d \\ude00\"", " ".repeat(pad));
            assert!(scan(&text).is_err(), "pad {pad}");
        }
    }

    fn arb_key() -> impl Strategy<Value = String> {
        prop::sample::select(vec![
            "a",
            "b",
            "ab",
            "a b",
            "a!",
            "",
            "abcdefgh",
            "abcdefgh1",
            "abcdefgh2",
            r"\u0061",
            r"\u0062",
            "é",
            r"\u00e9",
            r"\ud83d\ude00",
            "😀",
            r#"\\"#,
            r#"\""#,
        ])
        .prop_map(str::to_string)
    }

    fn arb_doc() -> impl Strategy<Value = String> {
        let leaf = prop_oneof![Just("1".to_string()), Just("\"v\"".to_string()), Just("[]".to_string())];
        leaf.prop_recursive(4, 40, 5, |inner| {
            prop_oneof![
                prop::collection::vec((arb_key(), inner.clone(), any::<bool>()), 0..5).prop_map(|m| {
                    let members: Vec<String> = m
                        .into_iter()
                        .map(|(k, v, ws)| if ws { format!("\"{k}\" : {v}") } else { format!("\"{k}\":{v}") })
                        .collect();
                    format!("{{{}}}", members.join(","))
                }),
                prop::collection::vec(inner, 0..4).prop_map(|v| format!("[{}]", v.join(","))),
            ]
        })
    }

    /// serde_json's reading, keeping every member: the first repeated key, depth first.
    fn reference_duplicate(v: &str) -> Option<String> {
        struct Dup(Option<String>);
        impl<'de> serde::de::Visitor<'de> for &mut Dup {
            type Value = ();
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("json")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut m: A) -> Result<(), A::Error> {
                let mut seen = std::collections::HashSet::new();
                while let Some(k) = m.next_key::<String>()? {
                    m.next_value_seed(&mut *self)?;
                    if !seen.insert(k.clone()) && self.0.is_none() {
                        self.0 = Some(k);
                    }
                }
                Ok(())
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut a: A) -> Result<(), A::Error> {
                while a.next_element_seed(&mut *self)?.is_some() {}
                Ok(())
            }
            fn visit_u64<E>(self, _: u64) -> Result<(), E> {
                Ok(())
            }
            fn visit_str<E>(self, _: &str) -> Result<(), E> {
                Ok(())
            }
        }
        impl<'de> serde::de::DeserializeSeed<'de> for &mut Dup {
            type Value = ();
            fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
                d.deserialize_any(self)
            }
        }
        let mut dup = Dup(None);
        serde::de::DeserializeSeed::deserialize(&mut dup, &mut serde_json::Deserializer::from_str(v))
            .unwrap();
        dup.0
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

        /// A document has a repeated key exactly when serde_json, reading every member, sees
        /// one; placed anywhere across block boundaries.
        #[test]
        fn finds_exactly_the_repeated_keys(pad in 0usize..70, doc in arb_doc()) {
            let text = " ".repeat(pad) + &doc;
            let ours = scan(&text).unwrap().is_some();
            prop_assert_eq!(ours, reference_duplicate(&doc).is_some(), "{}", doc);
        }
    }
}

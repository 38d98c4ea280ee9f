//! The served-target Lease annotation codec (`docs/webhook.md`, "The served-target
//! Lease"), shared by the webhook replicas that write it and the operator that reads it.
//!
//! A replica publishes the targets it holds a servable plan for as the sorted, de-duplicated
//! set of names joined by `\n`, gzipped, then base64'd (standard alphabet, padded) into
//! [`ANNOTATION_SERVED_TARGETS`](crate::ANNOTATION_SERVED_TARGETS). Above a size cap it
//! publishes no set at all and sets
//! [`ANNOTATION_SERVED_TRUNCATED`](crate::ANNOTATION_SERVED_TRUNCATED) to `"true"`: a partial
//! set would read as "these targets are not served", which is a lie; "cannot tell" is not.
//! Readers therefore get a [`Report`]: either the exact set, or a reason they cannot tell.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use flate2::Compression;
use flate2::read::GzDecoder;
use flate2::write::GzEncoder;

use crate::{ANNOTATION_SERVED_TARGETS, ANNOTATION_SERVED_TRUNCATED};

/// Default cap on the encoded annotation value. Kubernetes limits all annotations of an
/// object to 256 KiB together; this leaves a quarter of that for everything else.
pub const DEFAULT_MAX_ENCODED_BYTES: usize = 192 * 1024;

/// How far a reader will inflate a set before giving up: a hostile or corrupt annotation
/// must not make the operator allocate without bound.
pub const MAX_DECODED_BYTES: usize = 16 * 1024 * 1024;

/// The annotation value a replica should publish.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Encoded {
    /// The full set, ready for [`ANNOTATION_SERVED_TARGETS`].
    Set(String),
    /// The set did not fit under the cap: publish the truncated marker and no set.
    Truncated { encoded_bytes: usize, cap: usize },
}

impl Encoded {
    /// The annotations to write: the set or the marker, never both. The caller removes the
    /// other key (a merge patch with `null`, or by rebuilding the map).
    pub fn annotations(&self) -> BTreeMap<String, Option<String>> {
        let mut out = BTreeMap::new();
        match self {
            Encoded::Set(v) => {
                out.insert(ANNOTATION_SERVED_TARGETS.to_string(), Some(v.clone()));
                out.insert(ANNOTATION_SERVED_TRUNCATED.to_string(), None);
            }
            Encoded::Truncated { .. } => {
                out.insert(ANNOTATION_SERVED_TARGETS.to_string(), None);
                out.insert(ANNOTATION_SERVED_TRUNCATED.to_string(), Some("true".to_string()));
            }
        }
        out
    }

    pub fn is_truncated(&self) -> bool {
        matches!(self, Encoded::Truncated { .. })
    }
}

/// Encode a target set. Order and duplicates in the input do not matter: the output is a
/// pure function of the set, so an unchanged set publishes byte-identical annotations.
pub fn encode<I, S>(targets: I, max_encoded_bytes: usize) -> Encoded
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    let set: BTreeSet<String> = targets.into_iter().map(|s| s.as_ref().to_string()).collect();
    let joined = set.into_iter().collect::<Vec<_>>().join("\n");
    // Writing to a Vec cannot fail; an error here would be a flate2 bug, and the honest
    // answer to "I could not encode my set" is the same as to "it is too big".
    let mut gz = GzEncoder::new(Vec::new(), Compression::default());
    let compressed = match gz.write_all(joined.as_bytes()).and_then(|()| gz.finish()) {
        Ok(c) => c,
        Err(_) => return Encoded::Truncated { encoded_bytes: usize::MAX, cap: max_encoded_bytes },
    };
    let encoded = STANDARD.encode(compressed);
    if encoded.len() > max_encoded_bytes {
        Encoded::Truncated { encoded_bytes: encoded.len(), cap: max_encoded_bytes }
    } else {
        Encoded::Set(encoded)
    }
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("annotation {ANNOTATION_SERVED_TARGETS} is not valid base64: {0}")]
    Base64(String),
    #[error("annotation {ANNOTATION_SERVED_TARGETS} is not valid gzip: {0}")]
    Gzip(String),
    #[error("annotation {ANNOTATION_SERVED_TARGETS} inflates past {MAX_DECODED_BYTES} bytes")]
    TooLarge,
    #[error("annotation {ANNOTATION_SERVED_TARGETS} does not hold UTF-8 target names")]
    NotUtf8,
}

/// Decode an annotation value produced by [`encode`].
pub fn decode(value: &str) -> Result<BTreeSet<String>, DecodeError> {
    let compressed = STANDARD.decode(value.trim()).map_err(|e| DecodeError::Base64(e.to_string()))?;
    let mut raw = Vec::new();
    // Read one byte past the limit so "exactly at the limit" and "over it" differ.
    let limit = u64::try_from(MAX_DECODED_BYTES).unwrap_or(u64::MAX).saturating_add(1);
    GzDecoder::new(compressed.as_slice())
        .take(limit)
        .read_to_end(&mut raw)
        .map_err(|e| DecodeError::Gzip(e.to_string()))?;
    if raw.len() > MAX_DECODED_BYTES {
        return Err(DecodeError::TooLarge);
    }
    let text = String::from_utf8(raw).map_err(|_| DecodeError::NotUtf8)?;
    Ok(text.split('\n').filter(|s| !s.is_empty()).map(str::to_string).collect())
}

/// Why a reader cannot tell what a replica serves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CannotTell {
    /// The replica marked its set truncated.
    Truncated,
    /// The Lease carries neither the set nor the marker (e.g. an older replica).
    Missing,
    /// The set is present but unreadable.
    Undecodable(DecodeError),
}

/// What one Lease says about its replica.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Report {
    Targets(BTreeSet<String>),
    CannotTell(CannotTell),
}

impl Report {
    /// The exact set, or `None` when the Lease cannot answer.
    pub fn targets(&self) -> Option<&BTreeSet<String>> {
        match self {
            Report::Targets(t) => Some(t),
            Report::CannotTell(_) => None,
        }
    }
}

/// Read a Lease's annotations. The truncated marker wins over any set present, because a
/// writer that marks itself truncated is saying no set it left behind can be trusted.
pub fn read(annotations: &BTreeMap<String, String>) -> Report {
    if annotations.get(ANNOTATION_SERVED_TRUNCATED).is_some_and(|v| v == "true") {
        return Report::CannotTell(CannotTell::Truncated);
    }
    match annotations.get(ANNOTATION_SERVED_TARGETS) {
        None => Report::CannotTell(CannotTell::Missing),
        Some(v) => match decode(v) {
            Ok(set) => Report::Targets(set),
            Err(e) => Report::CannotTell(CannotTell::Undecodable(e)),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn annotations(e: &Encoded) -> BTreeMap<String, String> {
        e.annotations().into_iter().filter_map(|(k, v)| v.map(|v| (k, v))).collect()
    }

    #[test]
    fn round_trip_sorts_and_dedups() {
        let e = encode(["b.example.org", "a.example.org", "b.example.org"], DEFAULT_MAX_ENCODED_BYTES);
        let Encoded::Set(v) = &e else { panic!("small set must fit: {e:?}") };
        let set = decode(v).unwrap();
        assert_eq!(set.into_iter().collect::<Vec<_>>(), ["a.example.org", "b.example.org"]);
        // Order of input does not change the bytes: an unchanged set republishes identically.
        assert_eq!(e, encode(["a.example.org", "b.example.org"], DEFAULT_MAX_ENCODED_BYTES));
        assert_eq!(read(&annotations(&e)).targets().map(BTreeSet::len), Some(2));
    }

    #[test]
    fn empty_set_is_a_set_not_missing() {
        let e = encode(Vec::<String>::new(), DEFAULT_MAX_ENCODED_BYTES);
        assert_eq!(read(&annotations(&e)), Report::Targets(BTreeSet::new()));
    }

    #[test]
    fn over_the_cap_is_marked_truncated_with_no_set() {
        let names: Vec<String> =
            (0..5000).map(|i| format!("xr{i:05}.team{}.example.org", i * 7919 % 1000)).collect();
        let fits = encode(&names, DEFAULT_MAX_ENCODED_BYTES);
        assert!(!fits.is_truncated());
        let Encoded::Set(v) = &fits else { unreachable!() };
        let cap = v.len() - 1;
        let e = encode(&names, cap);
        assert_eq!(e, Encoded::Truncated { encoded_bytes: v.len(), cap });
        let ann = annotations(&e);
        assert!(!ann.contains_key(ANNOTATION_SERVED_TARGETS));
        assert_eq!(ann.get(ANNOTATION_SERVED_TRUNCATED).map(String::as_str), Some("true"));
        assert_eq!(read(&ann), Report::CannotTell(CannotTell::Truncated));
        // The patch removes the stale set when the writer turns truncated.
        assert_eq!(e.annotations().get(ANNOTATION_SERVED_TARGETS), Some(&None));
    }

    #[test]
    fn truncated_marker_beats_a_stale_set() {
        let Encoded::Set(v) = encode(["a"], DEFAULT_MAX_ENCODED_BYTES) else { unreachable!() };
        let ann = BTreeMap::from([
            (ANNOTATION_SERVED_TARGETS.to_string(), v),
            (ANNOTATION_SERVED_TRUNCATED.to_string(), "true".to_string()),
        ]);
        assert_eq!(read(&ann), Report::CannotTell(CannotTell::Truncated));
    }

    #[test]
    fn garbage_and_absence_cannot_tell() {
        assert_eq!(read(&BTreeMap::new()), Report::CannotTell(CannotTell::Missing));
        let bad = |v: &str| read(&BTreeMap::from([(ANNOTATION_SERVED_TARGETS.to_string(), v.to_string())]));
        assert!(matches!(bad("%%%"), Report::CannotTell(CannotTell::Undecodable(DecodeError::Base64(_)))));
        let not_gzip = STANDARD.encode(b"plain text");
        assert!(matches!(bad(&not_gzip), Report::CannotTell(CannotTell::Undecodable(DecodeError::Gzip(_)))));
        let mut gz = GzEncoder::new(Vec::new(), Compression::default());
        gz.write_all(&[0xff, 0xfe, 0x00]).unwrap();
        let not_utf8 = STANDARD.encode(gz.finish().unwrap());
        assert_eq!(bad(&not_utf8), Report::CannotTell(CannotTell::Undecodable(DecodeError::NotUtf8)));
    }

    #[test]
    fn a_gzip_bomb_is_refused() {
        let mut gz = GzEncoder::new(Vec::new(), Compression::best());
        let chunk = vec![b'a'; 1024 * 1024];
        for _ in 0..=(MAX_DECODED_BYTES / chunk.len()) {
            gz.write_all(&chunk).unwrap();
        }
        let bomb = STANDARD.encode(gz.finish().unwrap());
        assert_eq!(decode(&bomb), Err(DecodeError::TooLarge));
    }

    proptest! {
        #[test]
        fn any_set_round_trips(names in proptest::collection::btree_set("[a-z0-9][a-z0-9.-]{0,60}", 0..200)) {
            let e = encode(&names, DEFAULT_MAX_ENCODED_BYTES);
            let Encoded::Set(v) = e else { return Err(TestCaseError::fail("fits")) };
            prop_assert_eq!(decode(&v).unwrap(), names);
        }

        #[test]
        fn decode_never_panics(s in ".{0,200}") {
            let _ = decode(&s);
        }
    }
}

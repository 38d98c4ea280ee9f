//! Reading a ConversionReview body into one contiguous buffer, bounded by the body limit.
//!
//! The engine scans one slice, so the body's frames must be joined. Each frame is copied into
//! a buffer sized from `Content-Length` as it arrives, while it is still in cache, and its
//! memory goes back to the HTTP/2 codec at once, instead of every frame being kept until the
//! last one and joined cold.

use axum::body::{Body, Bytes};
use http::HeaderMap;
use http_body_util::BodyExt;

/// Why a body could not be read.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    /// Larger than the limit, by its `Content-Length` or by the bytes that arrived.
    #[error("the body exceeds the {limit}-byte limit")]
    TooLarge { limit: usize },
    /// The connection failed or the client reset the stream mid-body.
    #[error("cannot read the body: {0}")]
    Read(axum::Error),
}

/// Reads the whole body, at most `limit` bytes.
pub async fn read(headers: &HeaderMap, mut body: Body, limit: usize) -> Result<Bytes, BodyError> {
    let declared = headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(BodyError::TooLarge { limit });
    }
    let mut received = 0usize;
    // One frame that turns out to be the whole body is kept as it is, without a copy; the
    // join starts at the second.
    let mut first: Option<Bytes> = None;
    let mut joined = Vec::new();
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame.map_err(BodyError::Read)?.into_data() else {
            continue; // trailers carry nothing a review needs
        };
        received += data.len();
        if received > limit {
            return Err(BodyError::TooLarge { limit });
        }
        if first.is_none() && joined.is_empty() {
            first = Some(data);
            continue;
        }
        if let Some(head) = first.take() {
            // A declared length within the limit sizes the buffer once; otherwise it grows.
            joined.reserve_exact(declared.map_or(0, |n| n as usize).max(received));
            joined.extend_from_slice(&head);
        }
        joined.extend_from_slice(&data);
    }
    Ok(first.unwrap_or_else(|| Bytes::from(joined)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::stream;

    fn chunked(parts: &[&'static [u8]]) -> Body {
        let frames: Vec<Result<Bytes, std::io::Error>> =
            parts.iter().map(|p| Ok(Bytes::from_static(p))).collect();
        Body::from_stream(stream::iter(frames))
    }

    fn length(n: usize) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(http::header::CONTENT_LENGTH, n.to_string().parse().unwrap());
        h
    }

    #[tokio::test]
    async fn frames_are_joined_in_order() {
        let got = read(&HeaderMap::new(), chunked(&[b"ab", b"", b"cde", b"f"]), 100).await.unwrap();
        assert_eq!(&got[..], b"abcdef");
        let got = read(&length(6), chunked(&[b"abc", b"def"]), 6).await.unwrap();
        assert_eq!(&got[..], b"abcdef");
    }

    #[tokio::test]
    async fn a_single_frame_is_not_copied() {
        static WHOLE: &[u8] = b"{\"kind\":\"ConversionReview\"}";
        let got = read(&length(WHOLE.len()), chunked(&[WHOLE]), 100).await.unwrap();
        assert_eq!(got.as_ptr(), WHOLE.as_ptr());
        assert!(read(&HeaderMap::new(), chunked(&[]), 100).await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn over_the_limit_by_declaration_or_by_arrival() {
        // Declared too large: refused before a byte is read.
        let err = read(&length(11), chunked(&[b"0123456789", b"x"]), 10).await.unwrap_err();
        assert!(matches!(err, BodyError::TooLarge { limit: 10 }), "{err}");
        // Undeclared (or understated) and too large: refused at the frame that crosses it.
        let err = read(&HeaderMap::new(), chunked(&[b"01234", b"56789", b"x"]), 10).await.unwrap_err();
        assert!(matches!(err, BodyError::TooLarge { limit: 10 }), "{err}");
        let err = read(&length(3), chunked(&[b"0123456789x"]), 10).await.unwrap_err();
        assert!(matches!(err, BodyError::TooLarge { limit: 10 }), "{err}");
        // Exactly at the limit is fine.
        assert_eq!(read(&HeaderMap::new(), chunked(&[b"01234", b"56789"]), 10).await.unwrap().len(), 10);
    }

    #[tokio::test]
    async fn a_broken_stream_is_a_read_error() {
        let frames: Vec<Result<Bytes, std::io::Error>> =
            vec![Ok(Bytes::from_static(b"{\"a\":")), Err(std::io::Error::other("connection reset"))];
        let err = read(&HeaderMap::new(), Body::from_stream(stream::iter(frames)), 100).await.unwrap_err();
        assert!(matches!(err, BodyError::Read(_)), "{err}");
        assert!(err.to_string().contains("connection reset"), "{err}");
    }
}

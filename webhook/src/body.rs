//! Reading a ConversionReview body into one contiguous buffer, bounded by the body limit.
//!
//! The engine scans one slice, so the body's frames must be joined. Each frame is copied into
//! a buffer sized from `Content-Length` as it arrives, while it is still in cache, and its
//! memory goes back to the HTTP/2 codec at once, instead of every frame being kept until the
//! last one and joined cold.
//!
//! Every byte is reserved from the replica's [`Budget`] before it is kept (the declared
//! length up front, else frame by frame), and the whole read must finish by the request's
//! deadline, so a body trickled byte by byte cannot hold its connection past it.

use std::time::Instant;

use axum::body::{Body, Bytes};
use http::HeaderMap;
use http_body_util::BodyExt;

use crate::budget::{Budget, BudgetError, Reservation};

/// Why a body could not be read.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    /// Larger than the limit, by its `Content-Length` or by the bytes that arrived.
    #[error("the body exceeds the {limit}-byte limit")]
    TooLarge { limit: usize },
    /// The connection failed or the client reset the stream mid-body.
    #[error("cannot read the body: {0}")]
    Read(axum::Error),
    /// The body had not fully arrived by the request's deadline.
    #[error("the body had not fully arrived by the deadline ({received} bytes received)")]
    Timeout { received: usize },
    /// The replica's in-flight byte budget could not hold it in time.
    #[error(transparent)]
    Budget(#[from] BudgetError),
}

/// A body read in full, with the budget reservation that covers it.
#[derive(Debug)]
pub struct Read {
    pub bytes: Bytes,
    pub reservation: Reservation,
    /// Whether the budget was short at some point, so the read had to wait for it.
    pub waited: bool,
}

/// Reads the whole body, at most `limit` bytes, by `deadline`, reserving every byte from
/// `budget` first. `waited` is set as soon as the read had to wait for the budget.
pub async fn read(
    headers: &HeaderMap,
    body: Body,
    limit: usize,
    budget: &Budget,
    deadline: Instant,
) -> Result<Read, BodyError> {
    let mut received = 0;
    let mut waited = false;
    let reading = read_inner(headers, body, limit, budget, deadline, &mut received, &mut waited);
    let result = tokio::time::timeout_at(deadline.into(), reading).await;
    match result {
        Ok(Ok((bytes, reservation))) => Ok(Read { bytes, reservation, waited }),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(BodyError::Timeout { received }),
    }
}

async fn read_inner(
    headers: &HeaderMap,
    mut body: Body,
    limit: usize,
    budget: &Budget,
    deadline: Instant,
    received: &mut usize,
    waited: &mut bool,
) -> Result<(Bytes, Reservation), BodyError> {
    let declared = headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(BodyError::TooLarge { limit });
    }
    let mut reservation = budget.empty();
    if let Some(n) = declared {
        budget.grow(&mut reservation, n as usize, deadline, waited).await?;
    }
    // One frame that turns out to be the whole body is kept as it is, without a copy; the
    // join starts at the second.
    let mut first: Option<Bytes> = None;
    let mut joined = Vec::new();
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame.map_err(BodyError::Read)?.into_data() else {
            continue; // trailers carry nothing a review needs
        };
        *received += data.len();
        if *received > limit {
            return Err(BodyError::TooLarge { limit });
        }
        // Undeclared (or understated) lengths reserve as they arrive.
        let short = received.saturating_sub(reservation.len());
        budget.grow(&mut reservation, short, deadline, waited).await?;
        if first.is_none() && joined.is_empty() {
            first = Some(data);
            continue;
        }
        if let Some(head) = first.take() {
            // A declared length within the limit sizes the buffer once; otherwise it grows.
            joined.reserve_exact(declared.map_or(0, |n| n as usize).max(*received));
            joined.extend_from_slice(&head);
        }
        joined.extend_from_slice(&data);
    }
    // An overstated length gives back what never came.
    reservation.resize(*received);
    Ok((first.unwrap_or_else(|| Bytes::from(joined)), reservation))
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::stream;
    use std::time::Duration;

    fn far() -> Instant {
        Instant::now() + Duration::from_secs(60)
    }

    /// Reads with a budget that never binds.
    async fn rd(headers: &HeaderMap, body: Body, limit: usize) -> Result<Bytes, BodyError> {
        let budget = Budget::new(1 << 30, Default::default());
        read(headers, body, limit, &budget, far()).await.map(|r| r.bytes)
    }

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
        let got = rd(&HeaderMap::new(), chunked(&[b"ab", b"", b"cde", b"f"]), 100).await.unwrap();
        assert_eq!(&got[..], b"abcdef");
        let got = rd(&length(6), chunked(&[b"abc", b"def"]), 6).await.unwrap();
        assert_eq!(&got[..], b"abcdef");
    }

    #[tokio::test]
    async fn a_single_frame_is_not_copied() {
        static WHOLE: &[u8] = b"{\"kind\":\"ConversionReview\"}";
        let got = rd(&length(WHOLE.len()), chunked(&[WHOLE]), 100).await.unwrap();
        assert_eq!(got.as_ptr(), WHOLE.as_ptr());
        assert!(rd(&HeaderMap::new(), chunked(&[]), 100).await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn over_the_limit_by_declaration_or_by_arrival() {
        // Declared too large: refused before a byte is read.
        let err = rd(&length(11), chunked(&[b"0123456789", b"x"]), 10).await.unwrap_err();
        assert!(matches!(err, BodyError::TooLarge { limit: 10 }), "{err}");
        // Undeclared (or understated) and too large: refused at the frame that crosses it.
        let err = rd(&HeaderMap::new(), chunked(&[b"01234", b"56789", b"x"]), 10).await.unwrap_err();
        assert!(matches!(err, BodyError::TooLarge { limit: 10 }), "{err}");
        let err = rd(&length(3), chunked(&[b"0123456789x"]), 10).await.unwrap_err();
        assert!(matches!(err, BodyError::TooLarge { limit: 10 }), "{err}");
        // Exactly at the limit is fine.
        assert_eq!(rd(&HeaderMap::new(), chunked(&[b"01234", b"56789"]), 10).await.unwrap().len(), 10);
    }

    #[tokio::test]
    async fn a_broken_stream_is_a_read_error() {
        let frames: Vec<Result<Bytes, std::io::Error>> =
            vec![Ok(Bytes::from_static(b"{\"a\":")), Err(std::io::Error::other("connection reset"))];
        let err = rd(&HeaderMap::new(), Body::from_stream(stream::iter(frames)), 100).await.unwrap_err();
        assert!(matches!(err, BodyError::Read(_)), "{err}");
        assert!(err.to_string().contains("connection reset"), "{err}");
    }

    #[tokio::test]
    async fn every_byte_is_reserved_and_an_overstated_length_is_given_back() {
        let budget = Budget::new(100, Default::default());
        let got = read(&length(50), chunked(&[b"abc", b"def"]), 100, &budget, far()).await.unwrap();
        assert_eq!((got.reservation.len(), budget.available(), got.waited), (6, 94, false));
        let got2 = read(
            &HeaderMap::new(),
            chunked(&[b"0123456789", b"0123456789", b"0123456789"]),
            100,
            &budget,
            far(),
        )
        .await
        .unwrap();
        assert_eq!((got2.reservation.len(), budget.available()), (30, 64));
        drop((got, got2));
        assert_eq!(budget.available(), 100);
    }

    #[tokio::test]
    async fn a_body_the_budget_cannot_hold_waits_then_is_refused() {
        let budget = Budget::new(10, Default::default());
        let soon = Instant::now() + Duration::from_millis(50);
        let err = read(&length(11), chunked(&[b"0123456789x"]), 100, &budget, soon).await.unwrap_err();
        assert!(matches!(err, BodyError::Budget(_)), "{err}");
        let held = read(&length(8), chunked(&[b"01234567"]), 100, &budget, soon).await.unwrap();
        let soon = Instant::now() + Duration::from_millis(50);
        let err = read(&HeaderMap::new(), chunked(&[b"abc"]), 100, &budget, soon).await.unwrap_err();
        assert!(err.to_string().contains("--max-inflight-bytes"), "{err}");
        drop(held);
    }

    #[tokio::test]
    async fn a_trickled_body_stops_at_the_deadline() {
        let slow = stream::unfold(0, |i| async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            Some((Ok::<_, std::io::Error>(Bytes::from_static(b"x")), i + 1))
        });
        let budget = Budget::new(10_000, Default::default());
        let deadline = Instant::now() + Duration::from_millis(150);
        let err = read(&length(1000), Body::from_stream(slow), 2000, &budget, deadline).await.unwrap_err();
        let BodyError::Timeout { received } = err else { panic!("{err}") };
        assert!((3..=10).contains(&received), "{received}");
        assert!(Instant::now() < deadline + Duration::from_millis(100));
    }
}

//! The replica's in-flight byte budget: request bodies (and the answers built from them) hold
//! a reservation from one shared pool, so any number of clients, connections and streams
//! together cannot make the process hold more than `--max-inflight-bytes` of reviews.
//!
//! A request reserves its `Content-Length` up front, or its frames as they arrive; beyond the
//! budget it waits (FIFO, so a large review is not starved by small ones) until its deadline
//! and is then refused. The reservation travels with the response body and is released when
//! hyper has written or dropped it, so a client that never reads its answer keeps counting.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// One permit per byte; tokio acquires at most `u32::MAX` permits at once.
const MAX_ONE_RESERVATION: usize = u32::MAX as usize;

/// The shared pool.
#[derive(Clone, Debug)]
pub struct Budget {
    total: usize,
    permits: Arc<Semaphore>,
    /// Bytes reserved right now, for `dco_webhook_inflight_bytes`.
    gauge: Gauge,
}

/// Why bytes could not be reserved.
#[derive(Debug, thiserror::Error)]
pub enum BudgetError {
    #[error(
        "the replica's in-flight byte budget ({total} bytes, --max-inflight-bytes) cannot hold {wanted} more bytes; retry, add replicas, or raise --max-inflight-bytes (and the memory limit) on dco-webhook"
    )]
    Exhausted { total: usize, wanted: usize },
}

impl Budget {
    pub fn new(total: usize, gauge: Gauge) -> Self {
        let total = total.min(Semaphore::MAX_PERMITS);
        Budget { total, permits: Arc::new(Semaphore::new(total)), gauge }
    }

    pub fn total(&self) -> usize {
        self.total
    }

    /// Bytes not reserved right now.
    pub fn available(&self) -> usize {
        self.permits.available_permits()
    }

    /// An empty reservation, to grow as bytes arrive.
    pub fn empty(&self) -> Reservation {
        Reservation { permit: None, budget: self.clone() }
    }

    /// Adds `n` bytes to `r`, waiting until `deadline` for them to be free. `waited` is set
    /// when the budget was short at first, for the budget-wait metric.
    pub async fn grow(
        &self,
        r: &mut Reservation,
        n: usize,
        deadline: Instant,
        waited: &mut bool,
    ) -> Result<(), BudgetError> {
        if n == 0 {
            return Ok(());
        }
        let exhausted = || BudgetError::Exhausted { total: self.total, wanted: n };
        // More than the whole budget would wait forever.
        if n > self.total || n > MAX_ONE_RESERVATION || r.len() + n > self.total {
            return Err(exhausted());
        }
        let permit = match self.permits.clone().try_acquire_many_owned(n as u32) {
            Ok(p) => p,
            Err(_) => {
                *waited = true;
                let wait = self.permits.clone().acquire_many_owned(n as u32);
                match tokio::time::timeout_at(deadline.into(), wait).await {
                    Ok(Ok(p)) => p,
                    _ => return Err(exhausted()),
                }
            }
        };
        self.gauge.inc_by(n as i64);
        match &mut r.permit {
            Some(held) => held.merge(permit),
            slot => *slot = Some(permit),
        }
        Ok(())
    }

    /// Adds `n` bytes to `r` only if they are free now.
    pub fn try_grow(&self, r: &mut Reservation, n: usize) -> bool {
        if n == 0 {
            return true;
        }
        let Ok(permit) = u32::try_from(n)
            .map_err(drop)
            .and_then(|n| self.permits.clone().try_acquire_many_owned(n).map_err(drop))
        else {
            return false;
        };
        self.gauge.inc_by(n as i64);
        match &mut r.permit {
            Some(held) => held.merge(permit),
            slot => *slot = Some(permit),
        }
        true
    }
}

/// Bytes held from the budget; released on drop.
#[derive(Debug)]
pub struct Reservation {
    permit: Option<OwnedSemaphorePermit>,
    budget: Budget,
}

impl Reservation {
    pub fn len(&self) -> usize {
        self.permit.as_ref().map_or(0, OwnedSemaphorePermit::num_permits)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Makes the reservation cover `n` bytes: gives back the excess, or takes the missing
    /// bytes if they are free now (an answer already built is memory in use either way, so
    /// it is never refused here).
    pub fn resize(&mut self, n: usize) {
        let held = self.len();
        if n < held {
            if let Some(excess) = self.permit.as_mut().and_then(|p| p.split(held - n)) {
                self.budget.gauge.dec_by(excess.num_permits() as i64);
                drop(excess);
            }
        } else if n > held {
            let budget = self.budget.clone();
            budget.try_grow(self, n - held);
        }
    }
}

/// A reservation at least this large hands the freed heap back to the kernel when it ends
/// (its review's body, answer and working memory are gone by then).
const RELEASE_AFTER_BYTES: usize = 4 << 20;

impl Drop for Reservation {
    fn drop(&mut self) {
        self.budget.gauge.dec_by(self.len() as i64);
        if self.len() >= RELEASE_AFTER_BYTES {
            crate::alloc::release_free_memory_soon();
        }
    }
}

/// A response body that keeps its reservation until hyper has written or dropped it.
pub struct Held<B> {
    inner: B,
    _reservation: Reservation,
}

impl<B> Held<B> {
    pub fn new(inner: B, reservation: Reservation) -> Self {
        Held { inner, _reservation: reservation }
    }
}

impl<B: Body<Data = Bytes> + Unpin> Body for Held<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn budget(n: usize) -> Budget {
        Budget::new(n, Gauge::default())
    }

    #[tokio::test]
    async fn reservations_add_up_and_come_back_on_drop() {
        let b = budget(100);
        let soon = Instant::now() + Duration::from_millis(50);
        let mut waited = false;
        let mut r = b.empty();
        b.grow(&mut r, 60, soon, &mut waited).await.unwrap();
        b.grow(&mut r, 30, soon, &mut waited).await.unwrap();
        assert_eq!((r.len(), b.available(), waited), (90, 10, false));
        assert_eq!(b.gauge.get(), 90);
        // Beyond the budget: waits until the deadline, then refuses, naming the flag.
        let mut other = b.empty();
        let err = b.grow(&mut other, 20, soon, &mut waited).await.unwrap_err();
        assert!(waited);
        assert!(err.to_string().contains("--max-inflight-bytes"), "{err}");
        drop(r);
        assert_eq!((b.available(), b.gauge.get()), (100, 0));
    }

    #[tokio::test]
    async fn a_waiter_gets_the_bytes_when_they_are_released() {
        let b = budget(100);
        let mut r = b.empty();
        let mut waited = false;
        b.grow(&mut r, 100, Instant::now(), &mut waited).await.unwrap();
        let b2 = b.clone();
        let waiter = tokio::spawn(async move {
            let mut mine = b2.empty();
            let mut waited = false;
            b2.grow(&mut mine, 40, Instant::now() + Duration::from_secs(5), &mut waited)
                .await
                .map(|()| waited)
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(r);
        assert!(waiter.await.unwrap().unwrap(), "it had to wait");
    }

    #[tokio::test]
    async fn more_than_the_whole_budget_is_refused_at_once() {
        let b = budget(100);
        let mut r = b.empty();
        let mut waited = false;
        let far = Instant::now() + Duration::from_secs(60);
        let t = Instant::now();
        assert!(b.grow(&mut r, 101, far, &mut waited).await.is_err());
        b.grow(&mut r, 50, far, &mut waited).await.unwrap();
        assert!(b.grow(&mut r, 51, far, &mut waited).await.is_err());
        assert!(t.elapsed() < Duration::from_secs(1));
    }

    #[test]
    fn resize_gives_back_or_takes_what_is_free() {
        let b = budget(100);
        let mut r = b.empty();
        assert!(b.try_grow(&mut r, 80));
        r.resize(30);
        assert_eq!((r.len(), b.available(), b.gauge.get()), (30, 70, 30));
        r.resize(90);
        assert_eq!((r.len(), b.available()), (90, 10));
        let mut other = b.empty();
        assert!(!b.try_grow(&mut other, 11));
        r.resize(200); // not free: keeps what it has
        assert_eq!(r.len(), 90);
    }
}

//! The errors every watch stream yields (docs/operations.md, "Metrics"), by the watched kind
//! and a bounded class of the error: a refused list or watch (`forbidden`) shows here before
//! anything else tells of it, since a watch retries with backoff and never stops.

use futures::{Stream, StreamExt};
use kube::runtime::watcher;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use dco_api::metrics::register;

use crate::observability::metrics::Register;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WatchErrorLabels {
    pub kind: &'static str,
    pub reason: &'static str,
}

#[derive(Clone, Debug, Default)]
pub struct WatchMetrics {
    pub errors: Family<WatchErrorLabels, Counter>,
}

impl Register for WatchMetrics {
    fn register(&self, registry: &mut Registry) {
        register(
            registry,
            "watch_errors",
            "Errors the watches yielded (each is retried with backoff), by kind and reason",
            self.errors.clone(),
        );
    }
}

/// The class of a watch error: the apiserver's answer by its code (`forbidden` 403,
/// `unauthorized` 401, `not_found` 404, `expired` 410), `other` for any other answer or a
/// failure to reach it.
pub fn reason(e: &watcher::Error) -> &'static str {
    let code = match e {
        watcher::Error::WatchError(s) => Some(s.code),
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => match e {
            kube::Error::Api(s) => Some(s.code),
            _ => None,
        },
        watcher::Error::NoResourceVersion => None,
    };
    match code {
        Some(401) => "unauthorized",
        Some(403) => "forbidden",
        Some(404) => "not_found",
        Some(410) => "expired",
        _ => "other",
    }
}

impl WatchMetrics {
    /// `events` unchanged, each error counted under `kind`.
    pub fn counted<T, S>(
        &self,
        kind: &'static str,
        events: S,
    ) -> impl Stream<Item = S::Item> + Send + use<T, S>
    where
        S: Stream<Item = Result<T, watcher::Error>> + Send,
    {
        let errors = self.errors.clone();
        events.inspect(move |ev| {
            if let Err(e) = ev {
                errors.get_or_create(&WatchErrorLabels { kind, reason: reason(e) }).inc();
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;

    fn api(code: u16) -> kube::Error {
        kube::Error::Api(Box::new(Status::failure("refused", "Reason").with_code(code)))
    }

    #[test]
    fn reasons_are_a_bounded_class_of_the_answer() {
        assert_eq!(reason(&watcher::Error::InitialListFailed(api(403))), "forbidden");
        assert_eq!(reason(&watcher::Error::WatchStartFailed(api(401))), "unauthorized");
        assert_eq!(reason(&watcher::Error::WatchFailed(api(404))), "not_found");
        let gone = Status::failure("too old resource version", "Expired").with_code(410);
        assert_eq!(reason(&watcher::Error::WatchError(Box::new(gone))), "expired");
        assert_eq!(reason(&watcher::Error::InitialListFailed(api(500))), "other");
        assert_eq!(reason(&watcher::Error::NoResourceVersion), "other");
    }

    #[tokio::test]
    async fn every_error_of_a_stream_is_counted_and_passed_on() {
        let m = WatchMetrics::default();
        let events = futures::stream::iter(vec![
            Err(watcher::Error::InitialListFailed(api(403))),
            Ok(1),
            Err(watcher::Error::InitialListFailed(api(403))),
            Err(watcher::Error::NoResourceVersion),
        ]);
        let got: Vec<_> = m.counted("Secret", events).collect().await;
        assert_eq!(got.len(), 4, "the stream is unchanged");
        let n = |reason| m.errors.get_or_create(&WatchErrorLabels { kind: "Secret", reason }).get();
        assert_eq!((n("forbidden"), n("other")), (2, 1));
    }
}

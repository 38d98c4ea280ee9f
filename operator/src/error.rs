//! The operator's errors: each names the object and what to do, and carries a short label
//! for the failure metric.

use crate::pki::CertError;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{action} {kind} {name}: {source}")]
    Kube {
        action: &'static str,
        kind: &'static str,
        name: String,
        #[source]
        source: kube::Error,
    },

    #[error("finalizer of {kind} {name}: {source}")]
    Finalizer {
        kind: &'static str,
        name: String,
        #[source]
        source: Box<kube::runtime::finalizer::Error<Error>>,
    },

    #[error("ConversionWebhookServer {server}: {source}")]
    Certificate {
        server: String,
        #[source]
        source: CertError,
    },

    /// Deletion is held on purpose; the message says how to release it.
    #[error("{0}")]
    DeletionBlocked(String),

    /// The object is not yet in a state the reconcile can act on (not an API failure).
    #[error("{0}")]
    NotReady(String),

    /// A write of a reconcile the shard gate had let through was not made: the pass no
    /// longer holds (docs/sharding.md, "After a pause"). Not a failure: the reconcile is
    /// tried again after a renew interval, by whichever replica owns the shard then.
    #[error(
        "stopped before {write}: {}",
        if *paused {
            "this process was paused (stopped, frozen or starved) since the reconcile began or since its last renewal; tried again once its Leases are renewed"
        } else {
            "this replica no longer owns the object's shard (its Lease was not renewed within the renew deadline, or another replica took it); the owner reconciles it"
        }
    )]
    Fenced {
        write: &'static str,
        /// Why: a pause of this process (`true`), or the shard not owned any more.
        paused: bool,
    },

    #[error("{what}: {source}")]
    Serialize {
        what: String,
        #[source]
        source: serde_json::Error,
    },
}

impl Error {
    /// A low-cardinality label for `dco_operator_reconcile_errors_total`.
    pub fn metric_label(&self) -> String {
        match self {
            Error::Kube { action, kind, .. } => format!("{action}_{kind}").to_lowercase().replace(' ', "_"),
            Error::Finalizer { source, .. } => match source.as_ref() {
                kube::runtime::finalizer::Error::ApplyFailed(e)
                | kube::runtime::finalizer::Error::CleanupFailed(e) => e.metric_label(),
                _ => "finalizer".to_string(),
            },
            Error::Certificate { .. } => "certificate".to_string(),
            Error::DeletionBlocked(_) => "deletion_blocked".to_string(),
            Error::NotReady(_) => "not_ready".to_string(),
            Error::Fenced { .. } => "fenced".to_string(),
            Error::Serialize { .. } => "serialize".to_string(),
        }
    }

    /// A write refused for its precondition (409: the object changed since this reconcile
    /// read it, most likely written by another replica or a user): re-read and decide again.
    pub fn is_conflict(&self) -> bool {
        matches!(self, Error::Kube { source: kube::Error::Api(e), .. } if e.code == 409)
    }

    /// The fence stopped the reconcile ([`Error::Fenced`]), also inside the finalizer's wrapper.
    pub fn fenced(&self) -> Option<(&'static str, bool)> {
        match self {
            Error::Fenced { write, paused } => Some((write, *paused)),
            Error::Finalizer { source, .. } => match source.as_ref() {
                kube::runtime::finalizer::Error::ApplyFailed(e)
                | kube::runtime::finalizer::Error::CleanupFailed(e) => e.fenced(),
                _ => None,
            },
            _ => None,
        }
    }

    /// [`Error::is_conflict`], also inside the finalizer's wrapper.
    pub fn conflict(&self) -> bool {
        match self {
            Error::Finalizer { source, .. } => match source.as_ref() {
                kube::runtime::finalizer::Error::ApplyFailed(e)
                | kube::runtime::finalizer::Error::CleanupFailed(e) => e.is_conflict(),
                _ => false,
            },
            e => e.is_conflict(),
        }
    }

    pub fn kube(
        action: &'static str,
        kind: &'static str,
        name: impl Into<String>,
    ) -> impl FnOnce(kube::Error) -> Self {
        let name = name.into();
        move |source| Error::Kube { action, kind, name, source }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_low_cardinality() {
        let e = Error::Kube {
            action: "apply",
            kind: "Deployment",
            name: "dco-system/dco-webhook-a".into(),
            source: kube::Error::LinesCodecMaxLineLengthExceeded,
        };
        assert_eq!(e.metric_label(), "apply_deployment");
        let f = Error::Finalizer {
            kind: "CRDConversionConfig",
            name: "x".into(),
            source: Box::new(kube::runtime::finalizer::Error::CleanupFailed(Error::DeletionBlocked(
                "held".into(),
            ))),
        };
        assert_eq!(f.metric_label(), "deletion_blocked");
    }
}

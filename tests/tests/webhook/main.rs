//! dco-webhook on the local cluster, run by the test as the operator would run it (a
//! Deployment, its Service, RBAC and serving Secret: `dco_tests::hand_run_webhook_setup`), so
//! that what is proven is the webhook's own behaviour (docs/webhook.md). One binary; each
//! module is one test in a namespace of its own, with cluster-scoped names of its own, so they
//! run side by side.
//!
//! * [`serve`]: conversion through the apiserver, served-target Leases, holding during a move.
//! * [`drift_policy`]: `driftPolicy` FailClosed and KeepServingStale.
//! * [`metadata_less_review`]: a ConversionReview whose object has no `metadata`.
//!
//! Rolling restarts of a server's webhook Pods are `webhook_shutdown` (a binary of its own:
//! it installs the chart and counts failed requests under load).

mod drift_policy;
mod metadata_less_review;
mod serve;

//! What the webhook needs from a compiled plan and from the compiler, as traits, so the
//! registry, the HTTP surface and the sync loop are independent of how plans are built
//! (the engine in production, small hand-made plans in tests).

use std::sync::Arc;

use dco_api::config::ConversionSpec;

/// A ConversionReview answered by a plan: the response body and what metrics need.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reviewed {
    /// The full ConversionReview response JSON, same apiVersion as the request.
    pub body: bytes::Bytes,
    pub uid: String,
    /// Objects in the request.
    pub objects: usize,
    /// `Some(message)` when the response carries a Failure result (an object could not be
    /// converted; the message names it and the path).
    pub failure: Option<String>,
    /// The desiredAPIVersion as an index of [`ServablePlan::versions`] (`None`: none of them).
    pub to: Option<usize>,
    /// What happened to the objects by the version each came from (indexes of
    /// [`ServablePlan::versions`]), for `dco_webhook_conversions_total` (`signals.rs`).
    pub tally: Vec<dco_engine::Tally>,
}

/// A request body that is not a ConversionReview the plan can answer: HTTP 400.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BadReview {
    #[error("the body is not a ConversionReview: {0}")]
    Malformed(String),
    #[error("the ConversionReview has no .request; the apiserver always sends one")]
    MissingRequest,
}

/// A plan that can answer ConversionReviews for one target.
pub trait ServablePlan: Send + Sync + 'static {
    fn hub_version(&self) -> &str;
    /// Hub and spokes.
    fn versions(&self) -> Vec<String>;
    /// Stable digest of (spec, schema): the config's `status.lastAppliedPlanHash`.
    fn hash(&self) -> String;
    /// Bytes in, bytes out. Must not panic; an object that cannot be converted is a
    /// Failure result in `Reviewed`, not an error.
    fn review(&self, body: &[u8]) -> Result<Reviewed, BadReview>;
}

/// The outcome of compiling one config against its target.
pub struct Compilation {
    /// Present only when the compile had zero errors.
    pub plan: Option<Arc<dyn ServablePlan>>,
    /// One line per error, each naming spoke, rule and path.
    pub errors: Vec<String>,
    /// Per error only where it is (spoke, rule, strategy, paths), without its text, which
    /// can quote schema field names and enum values.
    pub locations: Vec<String>,
    pub warnings: Vec<String>,
}

/// Builds plans. Pure and synchronous: the sync loop calls it off the async runtime.
pub trait Compiler: Send + Sync + 'static {
    /// `target` is the live CustomResourceDefinition or CompositeResourceDefinition as JSON,
    /// with `apiVersion` and `kind` set.
    fn compile(&self, spec: &ConversionSpec, target: &serde_json::Value) -> Compilation;
}

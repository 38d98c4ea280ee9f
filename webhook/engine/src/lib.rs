//! dco's conversion engine: pure functions from rules, schemas and JSON objects to compiled
//! plans, diagnostics and converted objects. No Kubernetes client, no async runtime, no HTTP.
//!
//! - [`target`]: the CRD/XRD schema sources; [`schema`]: flattening to leaf paths.
//! - [`compile()`]: claims, verdicts, leftovers and [`Diagnostic`]s → a [`Plan`].
//! - [`Plan::convert`] / [`Plan::convert_value`]: one object to another version.
//! - [`review::convert_review`]: a ConversionReview body in, the response body out.
//! - [`limits`]: the nesting limit, the stack a converting thread needs, and the [`limits::Budget`]
//!   a caller stops a conversion with.

pub mod cel;
pub mod compile;
pub mod convert;
pub mod crossplane;
pub mod diagnostic;
pub mod duration;
mod lazy;
pub mod limits;
pub mod patch;
pub mod plan;
pub mod quantity;
pub mod review;
pub mod router;
mod scan;
pub mod schema;
pub mod strategies;
mod stream;
pub mod target;
pub mod template;
pub mod validate;
pub mod value;

pub use compile::{Compiled, Report, compile};
pub use convert::{ConvertError, ConvertErrorDetail, Direction, FailureClass};
pub use dco_api::rules::Strategy;
pub use diagnostic::{Diagnostic, Severity};
#[doc(hidden)]
pub use lazy::Via;
pub use plan::Plan;
pub use review::{ObjectResult, ReviewError, ReviewOutcome, Tally, convert_review, envelope};
pub use target::{Target, TargetError, VersionSchema};

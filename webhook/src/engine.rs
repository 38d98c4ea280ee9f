//! The production compiler and plan: `dco_engine` behind the webhook's traits.

use std::sync::Arc;

use dco_api::config::ConversionSpec;
use dco_engine::{Plan, ReviewError, Target};

use crate::plan::{BadReview, Compilation, Compiler, Reviewed, ServablePlan};

/// Compiles with `dco_engine::compile`.
#[derive(Clone, Copy, Debug, Default)]
pub struct EngineCompiler;

impl Compiler for EngineCompiler {
    fn compile(&self, spec: &ConversionSpec, target: &serde_json::Value) -> Compilation {
        let target = match Target::from_value(target) {
            Ok(t) => t,
            Err(e) => return Compilation { plan: None, errors: vec![e.to_string()], warnings: Vec::new() },
        };
        let compiled = dco_engine::compile(spec, &target);
        let errors = compiled.report.errors().map(ToString::to_string).collect();
        let warnings = compiled.report.warnings().map(ToString::to_string).collect();
        Compilation { plan: compiled.plan.map(|p| EnginePlan(p).into_servable()), errors, warnings }
    }
}

/// A compiled engine plan.
pub struct EnginePlan(pub Arc<Plan>);

impl EnginePlan {
    fn into_servable(self) -> Arc<dyn ServablePlan> {
        Arc::new(self)
    }
}

impl ServablePlan for EnginePlan {
    fn hub_version(&self) -> &str {
        self.0.hub_version()
    }

    fn versions(&self) -> Vec<String> {
        self.0.versions().into_iter().map(str::to_string).collect()
    }

    fn hash(&self) -> String {
        self.0.hash()
    }

    fn review(&self, body: &[u8]) -> Result<Reviewed, BadReview> {
        match dco_engine::convert_review(&self.0, body) {
            Ok(o) => {
                // The JSON may start past the buffer's beginning (see `ResponseBody`); the
                // slice shares the buffer rather than copying ~15 MB.
                let (buf, start) = o.body.into_parts();
                let body = bytes::Bytes::from(buf).slice(start..);
                Ok(Reviewed { body, uid: o.uid, objects: o.objects, failure: o.failure })
            }
            Err(ReviewError::Malformed(m)) => Err(BadReview::Malformed(m)),
            Err(ReviewError::MissingRequest) => Err(BadReview::MissingRequest),
        }
    }
}

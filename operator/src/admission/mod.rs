//! The operator's own validating admission webhook (docs/admission.md), served beside the
//! conversion webhooks of `dco-webhook`. Every replica serves it; it is stateless and
//! reads the caches the operator already holds (the servers), plus what a rule needs at
//! admission time (the live target, the configs of every shard), each read bounded.
//!
//! - [`config`] and [`server`]: the rules, pure functions of (object, old object, what it
//!   depends on) → [`Verdict`], unit-tested without a cluster.
//! - [`serve`]: `POST /validate` over HTTPS, taking `admission.k8s.io/v1` AdmissionReviews.
//! - [`registration`]: the serving certificate (a Secret in the operator's namespace, issued by
//!   the operator or, [`issued`], by cert-manager), the
//!   Service and the `ValidatingWebhookConfiguration`, kept current by every replica; with
//!   `--xrd-guard` also the `MutatingWebhookConfiguration` of [`xrd_guard`].
//! - [`xrd_guard`]: `POST /mutate-xrd`, the optional guard that keeps dco's `spec.conversion`
//!   on XRD updates by other writers (Crossplane's package manager).
//!
//! The controllers keep their own checks (admission can be bypassed or raced): what is refused
//! here also surfaces as a condition when it slips through.

pub mod config;
pub mod issued;
pub mod metrics;
pub mod registration;
pub mod serve;
pub mod server;
pub mod xrd_guard;

/// How many denials (or warnings) one answer lists; the rest are counted.
const MAX_LISTED: usize = 10;

/// The outcome of the rules for one object.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Verdict {
    pub allowed: bool,
    /// Every denial, joined; `None` when allowed.
    pub message: Option<String>,
    /// Shown by kubectl as `Warning: ...`, allowed or not.
    pub warnings: Vec<String>,
}

/// What the rules of one object found, before it becomes a [`Verdict`].
#[derive(Clone, Debug, Default)]
pub struct Findings {
    /// `<Kind> <name>`, the head of every denial.
    object: String,
    denials: Vec<String>,
    warnings: Vec<String>,
}

impl Findings {
    pub fn new(kind: &str, name: &str) -> Self {
        Findings { object: format!("{kind} {name}"), ..Findings::default() }
    }

    /// A refusal: `path` is the field it is about, `text` what is wrong and the fix.
    pub fn deny(&mut self, path: &str, text: impl AsRef<str>) {
        self.denials.push(if path.is_empty() {
            text.as_ref().to_string()
        } else {
            format!("{path}: {}", text.as_ref())
        });
    }

    pub fn warn(&mut self, path: &str, text: impl AsRef<str>) {
        self.warnings.push(if path.is_empty() {
            format!("{}: {}", self.object, text.as_ref())
        } else {
            format!("{} {path}: {}", self.object, text.as_ref())
        });
    }

    pub fn denials(&self) -> &[String] {
        &self.denials
    }

    pub fn verdict(self) -> Verdict {
        let mut warnings = self.warnings;
        if warnings.len() > MAX_LISTED {
            let more = warnings.len() - MAX_LISTED;
            warnings.truncate(MAX_LISTED);
            warnings.push(format!("{}: and {more} more warning(s)", self.object));
        }
        if self.denials.is_empty() {
            return Verdict { allowed: true, message: None, warnings };
        }
        let mut listed: Vec<&str> = self.denials.iter().take(MAX_LISTED).map(String::as_str).collect();
        let more = self.denials.len().saturating_sub(MAX_LISTED);
        let tail = if more > 0 { format!("; and {more} more") } else { String::new() };
        let message = if listed.len() == 1 {
            format!("{}: {}{tail}", self.object, listed.remove(0))
        } else {
            format!("{}: {} problems: {}{tail}", self.object, self.denials.len(), listed.join("; "))
        };
        Verdict { allowed: false, message: Some(message), warnings }
    }
}

/// The rules of one kind, in the style of linkerd2's policy-controller admission: a pure
/// check of the object against the old one and the facts the caller gathered for it.
pub trait Validate {
    /// What the rules read besides the object and the old one.
    type Facts;
    fn validate(op: Operation, new: Option<&Self>, old: Option<&Self>, facts: &Self::Facts) -> Verdict;
}

/// The operations the webhook is registered for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    Create,
    Update,
    Delete,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_denial_reads_as_one_sentence_and_many_are_counted() {
        let mut f = Findings::new("CRDConversionConfig", "c");
        f.deny("spec.spokes[0].version", "v2 is the hub version; remove this spoke");
        let v = f.clone().verdict();
        assert!(!v.allowed);
        assert_eq!(
            v.message.as_deref(),
            Some("CRDConversionConfig c: spec.spokes[0].version: v2 is the hub version; remove this spoke")
        );
        for i in 0..12 {
            f.deny(&format!("spec.x[{i}]"), "bad");
        }
        let m = f.verdict().message.unwrap();
        assert!(m.starts_with("CRDConversionConfig c: 13 problems: spec.spokes[0].version"), "{m}");
        assert!(m.ends_with("; and 3 more"), "{m}");
        let mut ok = Findings::new("ConversionWebhookServer", "s");
        ok.warn("spec.x", "looks odd");
        assert_eq!(
            ok.verdict(),
            Verdict {
                allowed: true,
                message: None,
                warnings: vec!["ConversionWebhookServer s spec.x: looks odd".into()]
            }
        );
    }
}

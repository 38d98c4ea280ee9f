//! Which config is served when several name one target (docs/configuration.md,
//! "XRDConversionConfig and CRDConversionConfig"). Admission refuses a second config for a
//! target, but it can be bypassed or raced, so the operator's controllers and every webhook
//! replica decide too, and must decide alike: the operator lets only the chosen config write
//! the target, the replicas serve only the chosen config's plan. One rule, here, for both:
//! of the configs naming one target name, across both kinds, the first by (kind, name) is
//! chosen. Pure, and independent of the order the configs come in.
//!
//! The two shapes it is asked in: per target, which config is served ([`choose`], the
//! webhook's sync pass over all its configs), and where one config stands among the others
//! naming its target ([`standing`], the operator's reconcile of one config).

use std::collections::BTreeMap;

/// A config as the choice sees it. A config is identified by (kind, name): two entries with
/// the same kind and name are one config.
pub trait Claim {
    /// `XRDConversionConfig`, `CRDConversionConfig` (or the webhook's `file` in static mode).
    fn kind(&self) -> &str;
    fn name(&self) -> &str;
    /// The target name the config names.
    fn target(&self) -> &str;
}

impl<C: Claim + ?Sized> Claim for &C {
    fn kind(&self) -> &str {
        (**self).kind()
    }
    fn name(&self) -> &str {
        (**self).name()
    }
    fn target(&self) -> &str {
        (**self).target()
    }
}

/// `(kind, name, target)`.
impl Claim for (&str, &str, &str) {
    fn kind(&self) -> &str {
        self.0
    }
    fn name(&self) -> &str {
        self.1
    }
    fn target(&self) -> &str {
        self.2
    }
}

/// The configs naming one target: the one served and the others, ignored (sorted by kind,
/// then name, each config once).
#[derive(Debug)]
pub struct Choice<'a, C: ?Sized> {
    pub chosen: &'a C,
    pub ignored: Vec<&'a C>,
}

/// The rule: whether `a` is served rather than `b` (both naming one target).
fn before(a: &impl Claim, b: &impl Claim) -> std::cmp::Ordering {
    (a.kind(), a.name()).cmp(&(b.kind(), b.name()))
}

/// Per target name, the config served and the ones ignored, over `configs` in any order.
pub fn choose<'a, C: Claim + ?Sized>(
    configs: impl IntoIterator<Item = &'a C>,
) -> BTreeMap<&'a str, Choice<'a, C>> {
    let mut by_target: BTreeMap<&'a str, Vec<&'a C>> = BTreeMap::new();
    for c in configs {
        by_target.entry(c.target()).or_default().push(c);
    }
    by_target
        .into_iter()
        .map(|(target, mut cs)| {
            cs.sort_by(before);
            cs.dedup_by(|a, b| before(a, b).is_eq());
            let chosen = cs.remove(0);
            (target, Choice { chosen, ignored: cs })
        })
        .collect()
}

/// Where one config stands among the configs naming its target. Others are named
/// `"<kind> <name>"`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Standing {
    /// The only config naming its target.
    Alone,
    /// Chosen; these others name the same target and are ignored.
    Chosen { ignored: Vec<String> },
    /// Not chosen: this one is.
    Ignored { chosen: String },
}

/// The standing of config `kind`/`name` naming `target`, among `configs` (of either kind and
/// any target; the config itself may or may not be among them, e.g. when it was created
/// after they were read).
pub fn standing<C: Claim>(
    kind: &str,
    name: &str,
    target: &str,
    configs: impl IntoIterator<Item = C>,
) -> Standing {
    let configs: Vec<C> = configs.into_iter().collect();
    let this = (kind, name, target);
    let claims: Vec<(&str, &str, &str)> = std::iter::once(this)
        .chain(configs.iter().filter(|c| c.target() == target).map(|c| (c.kind(), c.name(), c.target())))
        .collect();
    let Some(Choice { chosen, ignored }) = choose(&claims).remove(target) else { return Standing::Alone };
    let label = |c: &(&str, &str, &str)| format!("{} {}", c.0, c.1);
    if !before(chosen, &this).is_eq() {
        Standing::Ignored { chosen: label(chosen) }
    } else if ignored.is_empty() {
        Standing::Alone
    } else {
        Standing::Chosen { ignored: ignored.into_iter().map(label).collect() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CCC: &str = "CRDConversionConfig";
    const XCC: &str = "XRDConversionConfig";

    #[test]
    fn the_first_by_kind_then_name_is_chosen_across_both_kinds() {
        let t = "xwidgets.example.org";
        let all = [(XCC, "a", t), (CCC, "z", t), (CCC, "other", "gadgets.example.org")];
        let chosen = choose(&all);
        assert_eq!(chosen[t].chosen, &(CCC, "z", t), "CRD… sorts before XRD…");
        assert_eq!(chosen[t].ignored, vec![&(XCC, "a", t)]);
        assert_eq!(standing(CCC, "z", t, all), Standing::Chosen { ignored: vec![format!("{XCC} a")] });
        assert_eq!(standing(XCC, "a", t, all), Standing::Ignored { chosen: format!("{CCC} z") });
        assert_eq!(standing(CCC, "other", "gadgets.example.org", all), Standing::Alone);
        // Not among those read (created since): judged the same way.
        assert_eq!(standing(CCC, "y", t, &all[..1]), Standing::Chosen { ignored: vec![format!("{XCC} a")] });
        // A config listed twice is one config.
        assert_eq!(standing(XCC, "a", t, [(XCC, "a", t), (XCC, "a", t)]), Standing::Alone);
    }
}

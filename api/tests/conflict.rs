//! The conflict choice (src/conflict.rs) asked the two ways dco asks it: the webhook's sync
//! pass chooses per target over all its configs (`choose` over owned views, as
//! webhook/src/sync.rs's `ConfigView`), the operator judges one config among those naming its
//! target as read from the apiserver (`standing` over borrowed refs, as
//! operator/src/config/conflict.rs), with or without the config itself in the list. Over any
//! set of configs in any order, both must agree, or a replica serves a config whose
//! controller holds it back.

use std::collections::{BTreeMap, BTreeSet};

use dco_api::conflict::{Claim, Standing, choose, standing};
use proptest::prelude::*;

/// A config as the webhook's pass holds it: owned strings.
#[derive(Clone, Debug)]
struct View {
    kind: String,
    name: String,
    target: String,
}

impl Claim for View {
    fn kind(&self) -> &str {
        &self.kind
    }
    fn name(&self) -> &str {
        &self.name
    }
    fn target(&self) -> &str {
        &self.target
    }
}

/// A config as the operator's reconcile reads it: a static kind, owned name and target.
#[derive(Clone, Debug)]
struct Ref {
    kind: &'static str,
    name: String,
    target: String,
}

impl Claim for Ref {
    fn kind(&self) -> &str {
        self.kind
    }
    fn name(&self) -> &str {
        &self.name
    }
    fn target(&self) -> &str {
        &self.target
    }
}

const KINDS: [&str; 2] = ["XRDConversionConfig", "CRDConversionConfig"];

/// Configs with distinct (kind, name), each naming one of a few targets (so targets are
/// often shared), and two orders of them.
fn configs() -> impl Strategy<Value = (Vec<View>, Vec<View>)> {
    proptest::collection::btree_map((0..2usize, "[a-d]{1,2}"), 0..4usize, 0..24)
        .prop_map(|m| {
            m.into_iter()
                .map(|((k, name), t)| View {
                    kind: KINDS[k].into(),
                    name,
                    target: format!("t{t}.example.org"),
                })
                .collect::<Vec<_>>()
        })
        .prop_flat_map(|v| (Just(v.clone()).prop_shuffle(), Just(v).prop_shuffle()))
}

fn label(kind: &str, name: &str) -> String {
    format!("{kind} {name}")
}

/// Per target: (chosen, ignored), as labels.
fn webhook_choice(configs: &[View]) -> BTreeMap<String, (String, Vec<String>)> {
    choose(configs)
        .into_iter()
        .map(|(t, c)| {
            let ignored = c.ignored.iter().map(|i| label(&i.kind, &i.name)).collect();
            (t.to_string(), (label(&c.chosen.kind, &c.chosen.name), ignored))
        })
        .collect()
}

proptest! {
    #[test]
    fn one_config_per_target_in_any_order_and_the_operator_and_webhook_agree((order1, order2) in configs()) {
        let choice = webhook_choice(&order1);

        // Exactly one chosen per target named; chosen and ignored are exactly its configs.
        let targets: BTreeSet<&str> = order1.iter().map(|c| c.target.as_str()).collect();
        prop_assert_eq!(choice.keys().map(String::as_str).collect::<BTreeSet<_>>(), targets);
        for (t, (chosen, ignored)) in &choice {
            let mut all: Vec<String> =
                order1.iter().filter(|c| &c.target == t).map(|c| label(&c.kind, &c.name)).collect();
            all.sort();
            prop_assert_eq!(chosen, &all[0], "the first by kind, then name");
            prop_assert_eq!(ignored, &all[1..].to_vec());
        }

        // Independent of the order.
        prop_assert_eq!(&webhook_choice(&order2), &choice);

        // The operator, judging each config alone, in the other order, with and without the
        // config itself among those it read, stands where the webhook put it.
        let refs: Vec<Ref> = order2
            .iter()
            .map(|c| Ref { kind: KINDS.into_iter().find(|k| *k == c.kind).unwrap(), name: c.name.clone(), target: c.target.clone() })
            .collect();
        let mut served = BTreeMap::new();
        for c in &order1 {
            let (chosen, ignored) = &choice[&c.target];
            let expected = if chosen != &label(&c.kind, &c.name) {
                Standing::Ignored { chosen: chosen.clone() }
            } else if ignored.is_empty() {
                Standing::Alone
            } else {
                Standing::Chosen { ignored: ignored.clone() }
            };
            let with_itself = standing(&c.kind, &c.name, &c.target, refs.iter());
            let without = standing(&c.kind, &c.name, &c.target, refs.iter().filter(|r| !(r.kind == c.kind && r.name == c.name)));
            prop_assert_eq!(&with_itself, &expected);
            prop_assert_eq!(&without, &expected);
            if !matches!(with_itself, Standing::Ignored { .. }) {
                *served.entry(c.target.as_str()).or_insert(0) += 1;
            }
        }
        prop_assert!(served.values().all(|n| *n == 1), "one config per target proceeds: {served:?}");
        prop_assert_eq!(served.len(), choice.len());
    }
}

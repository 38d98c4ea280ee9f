//! Two configs for one target (docs/configuration.md, "XRDConversionConfig and
//! CRDConversionConfig"): admission refuses them, but it can be bypassed or raced, so the
//! controllers decide too, by the rule every webhook replica applies (`dco_api::conflict`:
//! of the configs naming one target name, across both kinds, the first by (kind, name) is
//! chosen). The chosen one proceeds; the others never write the target, and both sides say
//! so in a `Conflict` condition. Pure, over the configs naming the target, from the index of
//! every config (`crate::config_refs`, fed by an unsharded watch: this replica's config caches
//! hold only its shards).

use crate::kinds::ConfigRef;

/// Where one config stands among the configs naming its target.
pub use dco_api::conflict::Standing as ConflictStanding;

/// What the operator says of a standing: the handover machine's fact and the `Conflict`
/// condition.
pub trait Said {
    /// The handover machine's fact: only an ignored config is held back.
    fn fact(&self, target_desc: &str) -> Result<(), String>;
    /// `(reason, message)` of the `Conflict` condition, `None` when there is no conflict.
    fn condition(&self, target_desc: &str) -> Option<(&'static str, String)>;
}

impl Said for ConflictStanding {
    fn fact(&self, target_desc: &str) -> Result<(), String> {
        match self {
            ConflictStanding::Ignored { chosen } => Err(ignored_message(chosen, target_desc)),
            _ => Ok(()),
        }
    }

    fn condition(&self, target_desc: &str) -> Option<(&'static str, String)> {
        match self {
            ConflictStanding::Alone => None,
            ConflictStanding::Chosen { ignored } => Some((
                reason::CHOSEN,
                format!(
                    "{} also name{} {target_desc}; this config is the one served (the first by kind, then name, as every webhook replica chooses) and the other is ignored: delete one of them",
                    ignored.join(", "),
                    if ignored.len() == 1 { "s" } else { "" }
                ),
            )),
            ConflictStanding::Ignored { chosen } => {
                Some((reason::IGNORED, ignored_message(chosen, target_desc)))
            }
        }
    }
}

pub mod reason {
    /// This config is served; another one naming the same target is ignored.
    pub const CHOSEN: &str = "ChosenOverAnother";
    /// Another config naming the same target is served; this one is ignored.
    pub const IGNORED: &str = "Conflict";
}

fn ignored_message(chosen: &str, target_desc: &str) -> String {
    format!(
        "{chosen} also names {target_desc} and is the one served (the first by kind, then name, as every webhook replica chooses); this config is ignored and never writes the target: delete one of them"
    )
}

impl dco_api::conflict::Claim for ConfigRef {
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

/// The standing of config `kind`/`name` naming `target`, among `configs` (either kind; the
/// config itself may or may not be among them). Deleting configs count, as they do for the
/// webhook replicas: a chosen config being deleted keeps the target until it is gone.
pub fn judge(kind: &str, name: &str, target: &str, configs: &[ConfigRef]) -> ConflictStanding {
    dco_api::conflict::standing(kind, name, target, configs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(kind: &'static str, name: &str, target: &str) -> ConfigRef {
        ConfigRef {
            kind,
            name: name.into(),
            target: target.into(),
            pin: None,
            assigned: None,
            phase: None,
            source: None,
            destination: None,
            settled: false,
        }
    }

    const CCC: &str = "CRDConversionConfig";
    const XCC: &str = "XRDConversionConfig";

    #[test]
    fn the_first_by_kind_then_name_is_chosen_across_both_kinds() {
        let t = "xwidgets.example.org";
        let all = vec![cfg(XCC, "a", t), cfg(CCC, "z", t), cfg(CCC, "other", "gadgets.example.org")];
        // The same order as the webhook replicas' (target, kind, name): CRD… before XRD…
        assert_eq!(
            judge(CCC, "z", t, &all),
            ConflictStanding::Chosen { ignored: vec!["XRDConversionConfig a".into()] }
        );
        assert_eq!(
            judge(XCC, "a", t, &all),
            ConflictStanding::Ignored { chosen: "CRDConversionConfig z".into() }
        );
        assert_eq!(judge(CCC, "other", "gadgets.example.org", &all), ConflictStanding::Alone);
        // A config not in the list yet (created since) is judged the same way.
        assert_eq!(
            judge(CCC, "y", t, &all[..1]),
            ConflictStanding::Chosen { ignored: vec!["XRDConversionConfig a".into()] }
        );
        // Within one kind, by name; three configs: one chosen, two ignored.
        let three = vec![cfg(CCC, "b", t), cfg(CCC, "a", t), cfg(CCC, "c", t)];
        assert_eq!(
            judge(CCC, "a", t, &three),
            ConflictStanding::Chosen {
                ignored: vec!["CRDConversionConfig b".into(), "CRDConversionConfig c".into()]
            }
        );
        assert_eq!(
            judge(CCC, "c", t, &three),
            ConflictStanding::Ignored { chosen: "CRDConversionConfig a".into() }
        );
    }

    #[test]
    fn the_messages_name_the_other_config_and_the_fix() {
        let desc = "CustomResourceDefinition widgets.example.org";
        let ignored = ConflictStanding::Ignored { chosen: "CRDConversionConfig a".into() };
        let (reason, msg) = ignored.condition(desc).unwrap();
        assert_eq!(reason, "Conflict");
        assert_eq!(
            msg,
            "CRDConversionConfig a also names CustomResourceDefinition widgets.example.org and is the one served (the first by kind, then name, as every webhook replica chooses); this config is ignored and never writes the target: delete one of them"
        );
        assert_eq!(ignored.fact(desc), Err(msg));
        let chosen = ConflictStanding::Chosen { ignored: vec!["XRDConversionConfig b".into()] };
        let (reason, msg) = chosen.condition(desc).unwrap();
        assert_eq!(reason, "ChosenOverAnother");
        assert!(msg.starts_with("XRDConversionConfig b also names CustomResourceDefinition widgets.example.org; this config is the one served"), "{msg}");
        assert!(msg.ends_with("delete one of them"), "{msg}");
        assert_eq!(chosen.fact(desc), Ok(()));
        assert_eq!(ConflictStanding::Alone.condition(desc), None);
    }
}

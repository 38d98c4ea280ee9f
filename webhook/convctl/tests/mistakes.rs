//! The mistakes people make in a config, table-tested: each gets its exit code (2 for input
//! that is no config, 1 for a config its schema refuses), one message naming the place (file,
//! line and column, field path) and the fix, and no follow-on error after it.

mod common;
use common::*;

/// How a case changes the shipped widgets config (or replaces it, or the flag it is given to).
enum Make {
    /// Replace the first occurrence of `from` in the config by `to`.
    Edit(&'static str, &'static str),
    /// Insert `text` after the first line containing `after`.
    Insert(&'static str, &'static str),
    /// The whole file.
    Raw(&'static [u8]),
    /// The target definition given as --config.
    XrdAsConfig,
}

struct Case {
    name: &'static str,
    make: Make,
    code: i32,
    /// What the one message must contain: the path, the fix, and `:LINE:` of the mistake
    /// (`line` is the line of the edited text, found in the written file).
    wants: &'static [&'static str],
    line_of: Option<&'static str>,
}

const FOREACH: &str = "        - strategy: ForEach
          forEach:
            hubItemsPath: spec.items
            spokeItemsPath: spec.items
            rules:
              - strategy: Delete
                delete: {path: old, existsOn: Hub}
                wehn: {path: kind, equals: a}
";

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "top-level spec key",
            make: Make::Edit("  hubVersion: v3", "  hubVersoin: v3"),
            code: 1,
            wants: &["spec.hubVersoin", "unknown key `hubVersoin`", "did you mean `hubVersion`?"],
            line_of: Some("hubVersoin"),
        },
        Case {
            name: "spoke key rule for rules",
            make: Make::Edit("    - version: v1\n      rules:", "    - version: v1\n      rule:"),
            code: 1,
            wants: &["spec.spokes[1].rule", "spoke v1", "did you mean `rules`?"],
            line_of: Some("rule:"),
        },
        Case {
            name: "rule key wehn",
            make: Make::Insert(
                "typeCoerce: {path: spec.priority}",
                "          wehn: {path: spec.size, equals: Small}\n",
            ),
            code: 1,
            wants: &["spec.spokes[0].rules[4].wehn", "spoke v2, rule 4 (TypeCoerce)", "did you mean `when`?"],
            line_of: Some("wehn"),
        },
        Case {
            name: "acknowledgeLossey",
            make: Make::Edit("acknowledgeLossy: true", "acknowledgeLossey: true"),
            code: 1,
            wants: &["spec.spokes[0].rules[2].acknowledgeLossey", "did you mean `acknowledgeLossy`?"],
            line_of: Some("acknowledgeLossey"),
        },
        Case {
            name: "hubPth in a params block",
            make: Make::Edit("{hubPath: spec.storageGB", "{hubPth: spec.storageGB"),
            code: 1,
            wants: &["spec.spokes[0].rules[0].fieldRename.hubPth", "did you mean `hubPath`?"],
            line_of: Some("hubPth"),
        },
        Case {
            name: "nested rule in BranchMap",
            make: Make::Edit(
                "fieldRename: {hubPath: bucket, spokePath: name}",
                "fieldRename: {hubPath: bucket, spokePth: name}",
            ),
            code: 1,
            wants: &[
                "spec.spokes[0].rules[9].branchMap.branches[0].rules[0].fieldRename.spokePth",
                "rule 9.0 (FieldRename)",
                "did you mean `spokePath`?",
            ],
            line_of: Some("spokePth"),
        },
        Case {
            name: "nested rule in ForEach",
            make: Make::Insert("      rules:", FOREACH),
            code: 1,
            wants: &[
                "spec.spokes[0].rules[0].forEach.rules[0].wehn",
                "rule 0.0 (Delete)",
                "did you mean `when`?",
            ],
            line_of: Some("wehn"),
        },
        Case {
            name: "misspelt strategy",
            make: Make::Edit("strategy: FieldRename", "strategy: FieldRenam"),
            code: 1,
            wants: &[
                "spec.spokes[0].rules[0].strategy",
                "unknown strategy `FieldRenam`",
                "did you mean `FieldRename`?",
            ],
            line_of: Some("FieldRenam\n"),
        },
        Case {
            name: "misspelt kind",
            make: Make::Edit("kind: XRDConversionConfig", "kind: XRDConversionConfg"),
            code: 2,
            wants: &["kind `XRDConversionConfg`", "did you mean `XRDConversionConfig`?"],
            line_of: Some("XRDConversionConfg"),
        },
        Case {
            name: "duplicate key",
            make: Make::Insert("  hubVersion: v3", "  hubVersion: v2\n"),
            code: 2,
            wants: &["key `hubVersion` is written twice", "spec.hubVersion", "lines 9 and 10", "keep one"],
            line_of: Some("hubVersion: v2"),
        },
        Case {
            name: "tab indentation",
            make: Make::Edit("  hubVersion: v3", "\thubVersion: v3"),
            code: 2,
            wants: &["indented with a tab", "replace the tab with spaces"],
            line_of: Some("\thubVersion"),
        },
        Case {
            name: "empty file",
            make: Make::Raw(b""),
            code: 2,
            wants: &["the file is empty", "--config expects an XRDConversionConfig or CRDConversionConfig"],
            line_of: None,
        },
        Case {
            name: "only comments",
            make: Make::Raw(b"# nothing yet\n---\n"),
            code: 2,
            wants: &["the file is empty"],
            line_of: None,
        },
        Case {
            name: "no config in the file",
            make: Make::Raw(b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"),
            code: 2,
            wants: &[
                ":1:1: document 1",
                "no conversion config in 1 document(s) (kinds: ConfigMap)",
                "--config expects",
            ],
            line_of: None,
        },
        Case {
            name: "the XRD given as --config",
            make: Make::XrdAsConfig,
            code: 2,
            wants: &["this is a CompositeResourceDefinition (xwidgets.example.org)", "give it with --xrd"],
            line_of: Some("kind: CompositeResourceDefinition"),
        },
        Case {
            name: "another target than the definition",
            make: Make::Edit("name: xwidgets.example.org", "name: gadgets.example.org"),
            code: 1,
            wants: &[
                "spec.targetXRD.name",
                "targets gadgets.example.org but the given definition is xwidgets.example.org",
                "give the matching definition or fix the target name",
            ],
            line_of: Some("gadgets"),
        },
    ]
}

/// The 1-based line of the first occurrence of `needle` in `text`.
fn line_of(text: &str, needle: &str) -> usize {
    let at = text.find(needle).unwrap_or_else(|| panic!("{needle:?} in the written file"));
    text[..at].matches('\n').count() + 1
}

#[test]
fn each_mistake_gets_one_located_message_with_its_fix() {
    let dir = scratch("mistakes");
    let shipped = std::fs::read_to_string(ex("widgets-config.yaml")).unwrap();
    let mut failures = Vec::new();
    for (i, case) in cases().into_iter().enumerate() {
        let path = dir.join(format!("case{i}.yaml"));
        let bytes: Vec<u8> = match case.make {
            Make::Edit(from, to) => {
                assert!(shipped.contains(from), "{}: {from:?} in the shipped config", case.name);
                shipped.replacen(from, to, 1).into_bytes()
            }
            Make::Insert(after, text) => {
                let at = shipped.find(after).expect("anchor");
                let eol = at + shipped[at..].find('\n').unwrap() + 1;
                format!("{}{text}{}", &shipped[..eol], &shipped[eol..]).into_bytes()
            }
            Make::Raw(b) => b.to_vec(),
            Make::XrdAsConfig => std::fs::read(ex("widgets-xrd.yaml")).unwrap(),
        };
        std::fs::write(&path, &bytes).unwrap();
        let file = path.to_str().unwrap();
        let o = convctl(&["validate", "--config", file, "--xrd", &ex("widgets-xrd.yaml")]);
        let err = stderr(&o);
        let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
        let mut wants: Vec<String> = case.wants.iter().map(|s| s.to_string()).collect();
        wants.push(file.to_string());
        if let Some(needle) = case.line_of {
            wants.push(format!("{file}:{}:", line_of(&String::from_utf8_lossy(&bytes), needle)));
        }
        let missing: Vec<&String> = wants.iter().filter(|w| !err.contains(w.as_str())).collect();
        if code(&o) != case.code || lines.len() != 1 || !missing.is_empty() || !stdout(&o).is_empty() {
            failures.push(format!(
                "{}: exit {} (want {}), {} error line(s), missing {missing:?}\nstderr: {err}stdout: {}",
                case.name,
                code(&o),
                case.code,
                lines.len(),
                stdout(&o)
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn a_byte_order_mark_is_dropped() {
    let dir = scratch("bom");
    let shipped = std::fs::read(ex("widgets-config.yaml")).unwrap();
    let path = dir.join("config.yaml");
    std::fs::write(&path, [b"\xef\xbb\xbf".as_slice(), &shipped].concat()).unwrap();
    let o = convctl(&["validate", "--config", path.to_str().unwrap(), "--xrd", &ex("widgets-xrd.yaml")]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    assert!(stdout(&o).starts_with("ok: xwidgets"), "{}", stdout(&o));
    // The target definition and samples are read the same way.
    let xrd = dir.join("xrd.yaml");
    let text = std::fs::read(ex("widgets-xrd.yaml")).unwrap();
    std::fs::write(&xrd, [b"\xef\xbb\xbf".as_slice(), &text].concat()).unwrap();
    let o = convctl(&["validate", "--config", path.to_str().unwrap(), "--xrd", xrd.to_str().unwrap()]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
}

#[test]
fn several_mistakes_are_each_reported_once() {
    let dir = scratch("several");
    let text = std::fs::read_to_string(ex("widgets-config.yaml"))
        .unwrap()
        .replacen("strategy: FieldRename", "strategy: FieldRenam", 1)
        .replacen("acknowledgeLossy: true", "acknowledgeLossey: true", 1);
    let path = dir.join("config.yaml");
    std::fs::write(&path, text).unwrap();
    let o = convctl(&["validate", "--config", path.to_str().unwrap(), "--xrd", &ex("widgets-xrd.yaml")]);
    assert_eq!(code(&o), 1);
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 2, "{err}");
    assert!(
        err.contains("did you mean `FieldRename`?") && err.contains("did you mean `acknowledgeLossy`?"),
        "{err}"
    );
}

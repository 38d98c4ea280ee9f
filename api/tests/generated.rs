//! The generated CRDs: what they contain, and that the chart's copies are current.

use dco_api::rules::Strategy;

fn repo_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[test]
fn crdgen_output_has_three_kinds_and_all_strategies() {
    let yaml = dco_api::crds_yaml();
    for kind in ["XRDConversionConfig", "CRDConversionConfig", "ConversionWebhookServer"] {
        assert!(yaml.contains(&format!("kind: {kind}")), "{kind} missing from crdgen output");
    }
    for s in Strategy::ALL {
        assert!(yaml.contains(&format!("- {}\n", s.name())), "strategy {s} missing from the enum");
    }
    assert_eq!(Strategy::ALL.len(), 30);
}

#[test]
fn chart_crds_match_crdgen() {
    let dir = repo_root().join("charts/dco/crds");
    let mut expected: Vec<String> = Vec::new();
    for (file, yaml) in dco_api::crd_files() {
        let path = dir.join(&file);
        let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            on_disk == yaml,
            "{} differs from `cargo run --bin crdgen -- --out-dir charts/dco/crds`; regenerate it",
            path.display()
        );
        expected.push(file);
    }
    let mut present: Vec<String> = std::fs::read_dir(&dir)
        .expect("charts/dco/crds exists")
        .map(|e| e.expect("readable entry").file_name().to_string_lossy().into_owned())
        .collect();
    present.sort();
    expected.sort();
    assert_eq!(present, expected, "charts/dco/crds holds files crdgen does not generate");
}

#[test]
fn every_rule_carries_the_params_block_cel_checks() {
    let crd = serde_json::to_value(&dco_api::crds()[0]).unwrap();
    let rule = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["spokes"]
        ["items"]["properties"]["rules"]["items"];
    let checks = rule["x-kubernetes-validations"].as_array().expect("rule items carry CEL checks");
    assert_eq!(checks.len(), 30);
    assert!(checks.iter().any(|c| c["rule"] == "has(self.fieldRename) == (self.strategy == 'FieldRename')"));
    // Nested rules cannot recurse in a CRD schema: they are kept opaque and checked by admission.
    let nested = &rule["properties"]["forEach"]["properties"]["rules"]["items"];
    assert_eq!(nested["x-kubernetes-preserve-unknown-fields"], true);
}

/// Every `format` in the CRDs is one the apiserver knows: an unknown one (schemars writes
/// `uint32` for a u32) makes every `helm install` of the chart print `Warning: unrecognized
/// format`. The list is the formats the apiserver's CRD validation accepts
/// (apiextensions-apiserver's supported formats, plus the OpenAPI number formats).
#[test]
fn crd_formats_are_known_to_the_apiserver() {
    const KNOWN: &[&str] = &[
        "int32",
        "int64",
        "float",
        "double",
        "byte",
        "binary",
        "date",
        "date-time",
        "datetime",
        "duration",
        "password",
        "uri",
        "email",
        "hostname",
        "ipv4",
        "ipv6",
        "cidr",
        "mac",
        "uuid",
        "uuid3",
        "uuid4",
        "uuid5",
        "bsonobjectid",
        "isbn",
        "isbn10",
        "isbn13",
        "creditcard",
        "ssn",
        "hexcolor",
        "rgbcolor",
    ];
    fn walk(path: &str, v: &serde_json::Value, bad: &mut Vec<String>) {
        match v {
            serde_json::Value::Object(m) => {
                if let Some(f) = m.get("format").and_then(|f| f.as_str())
                    && !KNOWN.contains(&f)
                {
                    bad.push(format!("{path}: format {f}"));
                }
                for (k, v) in m {
                    walk(&format!("{path}.{k}"), v, bad);
                }
            }
            serde_json::Value::Array(a) => {
                for (i, v) in a.iter().enumerate() {
                    walk(&format!("{path}[{i}]"), v, bad);
                }
            }
            _ => {}
        }
    }
    let mut bad = Vec::new();
    for crd in dco_api::crds() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        walk(&name, &serde_json::to_value(&crd).unwrap(), &mut bad);
    }
    assert!(
        bad.is_empty(),
        "formats the apiserver does not know (drop them with crate::schema::unsigned): {bad:#?}"
    );
}

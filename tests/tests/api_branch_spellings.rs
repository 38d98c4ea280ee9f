//! A BranchMap written the reference project's way (`hubBranch`/`spokeBranch`) passes the
//! apiserver as it passes convctl: dco's CRD schema declares both spellings (docs/convctl.md,
//! "Reading configs: what is refused"), keeps what was written, and its CEL rules refuse a
//! branch with both spellings or with neither.

use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

async fn install_crds(client: &kube::Client) -> Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in dco_api::crds() {
        let name = crd.metadata.name.clone().context("crd name")?;
        crds.patch(&name, &PatchParams::apply("dco-tests").force(), &Patch::Apply(&crd))
            .await
            .with_context(|| format!("applying CRD {name}"))?;
        dco_tests::wait_crd_established(&crds, &name, Duration::from_secs(30)).await?;
    }
    Ok(())
}

fn config(name: &str, branch: Value) -> Value {
    json!({
        "apiVersion": dco_api::API_VERSION, "kind": "CRDConversionConfig", "metadata": {"name": name},
        "spec": {
            "targetCRD": {"name": "widgets.example.org"},
            "hubVersion": "v2",
            "spokes": [{"version": "v1", "rules": [{
                "strategy": "BranchMap",
                "branchMap": {"hubPath": "spec.store", "spokePath": "spec.store", "branches": [branch]},
            }]}],
        },
    })
}

async fn dry_run(api: &Api<DynamicObject>, obj: Value) -> Result<DynamicObject, kube::Error> {
    let o: DynamicObject = serde_json::from_value(obj).map_err(kube::Error::SerdeError)?;
    api.create(&PostParams { dry_run: true, ..Default::default() }, &o).await
}

#[tokio::test]
async fn the_reference_branch_spelling_passes_the_apiserver_and_reads_as_dco_s() -> Result<()> {
    let client = dco_tests::client().await?;
    install_crds(&client).await?;
    let gvk = GroupVersionKind::gvk(dco_api::GROUP, dco_api::VERSION, "CRDConversionConfig");
    let api: Api<DynamicObject> =
        Api::all_with(client, &ApiResource::from_gvk_with_plural(&gvk, "crdconversionconfigs"));
    let name = dco_tests::unique_name("branch-spelling");

    // The reference's spelling is kept as written (not pruned), and dco's types read it.
    let created =
        dry_run(&api, config(&name, json!({"hubBranch": "s3", "spokeBranch": "objectStore"}))).await?;
    let branch = &created.data["spec"]["spokes"][0]["rules"][0]["branchMap"]["branches"][0];
    assert_eq!(branch["hubBranch"], "s3", "{branch}");
    assert_eq!(branch["spokeBranch"], "objectStore", "{branch}");
    let spec: dco_api::config::CRDConversionConfigSpec =
        serde_json::from_value(created.data["spec"].clone())?;
    let rule = &spec.conversion.spokes[0].rules[0];
    let b = &rule.branch_map.as_ref().context("branchMap")?.branches[0];
    assert_eq!((b.hub.as_str(), b.spoke.as_str()), ("s3", "objectStore"));

    // dco's spelling, and a mix of the two, pass too.
    dry_run(&api, config(&name, json!({"hub": "s3", "spoke": "objectStore"}))).await?;
    dry_run(&api, config(&name, json!({"hub": "s3", "spokeBranch": "objectStore"}))).await?;

    // Both spellings, or neither, are refused with the fix.
    let refused = |r: Result<DynamicObject, kube::Error>| match r {
        Ok(_) => panic!("the apiserver accepted a branch that names its key twice or never"),
        Err(kube::Error::Api(s)) => s.message,
        Err(e) => panic!("unexpected error: {e}"),
    };
    let both = dry_run(&api, config(&name, json!({"hub": "s3", "hubBranch": "s3", "spoke": "o"}))).await;
    let msg = refused(both);
    assert!(msg.contains("a branch names its hub key once: set `hub` (or `hubBranch`"), "{msg}");
    let neither = dry_run(&api, config(&name, json!({"spoke": "o"}))).await;
    let msg = refused(neither);
    assert!(msg.contains("a branch names its hub key once"), "{msg}");
    Ok(())
}

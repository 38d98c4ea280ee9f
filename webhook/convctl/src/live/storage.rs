//! What retiring a version depends on, read from one cluster: the target and its definition,
//! `status.storedVersions` of every CRD backing it, the configs that name it, for an XRD the
//! Compositions of its kind, and how many objects it has. Used by `versions --live` (and
//! `--check-unserve`) and `plan --live` (docs/convctl.md, "Retiring a version").
//!
//! Every LIST is paged ([`paged::PAGE`] objects, or [`COUNT_PAGE`] metadata-only entries, a
//! request): memory holds one page plus the few Compositions and configs that match.

use dco_api::config::TargetKind;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams};
use serde_json::Value;

use crate::live::{paged, target};
use crate::unserve::{CompositionRef, ConfigRef};
use crate::versions::Definition;

/// Metadata-only entries per LIST request when counting objects.
pub const COUNT_PAGE: u32 = 500;
/// At most this many Compositions are read per cluster.
pub const MAX_COMPOSITIONS: usize = 50_000;
const COMPOSITION_CRD: &str = "compositions.apiextensions.crossplane.io";

/// The facts of one target on one cluster.
pub struct Live {
    pub target: target::LiveTarget,
    pub def: Definition,
    /// `status.storedVersions` per backing CRD (an XRD's generated CRDs; one not rendered yet
    /// has none).
    pub stored: Vec<(String, Vec<String>)>,
    pub configs: Vec<ConfigRef>,
    /// The configs as the config reader reads them (the first gives each version's role).
    pub loaded: Vec<crate::load::Config>,
    /// Configs that name the target but cannot be read: their hub is unknown.
    pub unreadable: Vec<String>,
    /// For an XRD: its kind's Compositions; `None` for a CRD.
    pub compositions: Option<Vec<CompositionRef>>,
}

/// Reads target `name` of `kind` and the facts around it from `client` (`label` names the
/// cluster in messages).
pub async fn read(client: &Client, label: &str, kind: TargetKind, name: &str) -> Result<Live, String> {
    let t = target::read(client, kind, name).await?;
    let def = Definition::from_value(t.target.clone(), &t.value);
    let mut stored = Vec::new();
    for (crd, json) in target::generated(client, &t).await? {
        let versions = json
            .as_ref()
            .and_then(|j| j.pointer("/status/storedVersions"))
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
            .unwrap_or_default();
        stored.push((crd, versions));
    }
    let mut configs = Vec::new();
    let mut loaded = Vec::new();
    let mut unreadable = Vec::new();
    for c in target::configs(client, label, kind, name).await? {
        match c {
            Ok(c) => {
                configs.push(ConfigRef {
                    kind: kind_of(kind).into(),
                    name: c.name.clone(),
                    file: None,
                    hub: c.config.spec.hub_version.clone(),
                    spokes: c.config.spec.spokes.iter().map(|s| s.version.clone()).collect(),
                });
                loaded.push(c.config);
            }
            Err(e) => unreadable.push(e),
        }
    }
    let compositions = match kind {
        TargetKind::Crd => None,
        TargetKind::Xrd => Some(compositions(client, &def).await?),
    };
    Ok(Live { target: t, def, stored, configs, loaded, unreadable, compositions })
}

fn kind_of(kind: TargetKind) -> &'static str {
    match kind {
        TargetKind::Crd => "CRDConversionConfig",
        TargetKind::Xrd => "XRDConversionConfig",
    }
}

/// The Compositions whose `compositeTypeRef` is of the XRD's group and kind (any version),
/// listed a page at a time; none when Crossplane's Composition kind is not served.
async fn compositions(client: &Client, def: &Definition) -> Result<Vec<CompositionRef>, String> {
    let gvk = GroupVersionKind::gvk(dco_api::target::XRD_GROUP, "v1", "Composition");
    let api: Api<DynamicObject> =
        Api::all_with(client.clone(), &ApiResource::from_gvk_with_plural(&gvk, "compositions"));
    let prefix = format!("{}/", def.target.group());
    let kind = def.target.resource_kind().to_string();
    // No Composition kind (Crossplane's CRDs absent): there is no Composition.
    let crds: Api<
        k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    > = Api::all(client.clone());
    let installed = crds
        .get_opt(COMPOSITION_CRD)
        .await
        .map_err(|e| format!("reading CustomResourceDefinition {COMPOSITION_CRD}: {e}"))?;
    if installed.is_none() {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    paged::each(&api, &ListParams::default(), "Compositions", MAX_COMPOSITIONS, |o| {
        let v = serde_json::to_value(&o).map_err(|e| format!("a Composition: {e}"))?;
        if let Some(c) = crate::unserve::composition_of(&v, None)
            && c.kind == kind
            && c.api_version.starts_with(&prefix)
        {
            out.push(c);
        }
        Ok(())
    })
    .await?;
    Ok(out)
}

/// How many objects each backing CRD has, counted by a metadata-only LIST at its storage
/// version, [`COUNT_PAGE`] a request (memory: one page of metadata).
pub async fn count(client: &Client, live: &Live) -> Result<Vec<(String, u64)>, String> {
    let mut out = Vec::new();
    for (crd, json) in target::generated(client, &live.target).await? {
        let Some(json) = json else {
            out.push((crd, 0));
            continue;
        };
        let s = |p: &str| json.pointer(p).and_then(Value::as_str).unwrap_or_default().to_string();
        let version = json
            .pointer("/spec/versions")
            .and_then(Value::as_array)
            .and_then(|vs| vs.iter().find(|v| v.get("storage").and_then(Value::as_bool) == Some(true)))
            .and_then(|v| v.get("name").and_then(Value::as_str))
            .unwrap_or_default()
            .to_string();
        let gvk = GroupVersionKind::gvk(&s("/spec/group"), &version, &s("/spec/names/kind"));
        let ar = ApiResource::from_gvk_with_plural(&gvk, &s("/spec/names/plural"));
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
        let mut lp = ListParams::default().limit(COUNT_PAGE);
        let mut n = 0u64;
        loop {
            let page = api
                .list_metadata(&lp)
                .await
                .map_err(|e| format!("counting the objects of {crd} at {version}: {e}"))?;
            n += page.items.len() as u64;
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(t) => lp.continue_token = Some(t),
                None => break,
            }
        }
        out.push((crd, n));
    }
    Ok(out)
}

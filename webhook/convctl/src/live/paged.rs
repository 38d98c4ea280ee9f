//! Paged reads: every LIST a live command makes asks for at most [`PAGE`] objects and follows
//! the continue token, handing each object to the caller as it arrives, so memory holds one
//! page plus what the caller keeps, however many objects the cluster has.

use kube::api::{Api, ListParams};
use serde::de::DeserializeOwned;

/// Objects per LIST request.
pub const PAGE: u32 = 500;

/// Visits every object `api` lists under `lp` (its label and field selectors), page by page.
/// Stops with an error naming `what` and the bound when more than `max` objects come, and
/// whenever `visit` returns an error.
pub async fn each<K, F>(
    api: &Api<K>,
    lp: &ListParams,
    what: &str,
    max: usize,
    mut visit: F,
) -> Result<usize, String>
where
    K: Clone + DeserializeOwned + std::fmt::Debug,
    F: FnMut(K) -> Result<(), String>,
{
    let mut lp = lp.clone().limit(PAGE);
    let mut seen = 0usize;
    loop {
        let page = api.list(&lp).await.map_err(|e| format!("listing {what}: {e}"))?;
        for o in page.items {
            seen += 1;
            if seen > max {
                return Err(format!(
                    "listing {what}: more than {max} objects, over this command's bound; narrow the selection"
                ));
            }
            visit(o)?;
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => lp.continue_token = Some(token),
            None => return Ok(seen),
        }
    }
}

/// Whether a kube error is the apiserver's 404 (an unknown kind or a missing object).
pub fn not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

//! The admission webhook (admission/), with `--admission-service`: its listener, its
//! registration, and its withdrawal by the last replica to stop.

use std::sync::Arc;

use anyhow::Context as _;
use tokio::net::TcpListener;

use super::Lifecycle;
use super::health::Instruments;
use crate::admission::registration::{self, Registration};
use crate::admission::serve::{self, CertResolver};
use crate::cli::Args;
use crate::context::Context;
use crate::status_metrics::AdmissionCertificate;

/// The admission webhook once started: its listener's task and what it registered.
#[derive(Default)]
pub struct Admission {
    served: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
    registered: Option<Registration>,
}

/// Serves and registers the webhook, and returns once it serves a certificate: the replica
/// turns Ready only then, since the apiserver's calls go to whichever Ready Pod the Service
/// picks. Without `--admission-service`, nothing.
pub async fn start(
    args: &Args,
    ctx: &Arc<Context>,
    metrics: &Instruments,
    listener: Option<TcpListener>,
    lifecycle: &Lifecycle,
) -> anyhow::Result<Admission> {
    let Some((svc_ns, svc)) = &args.admission_service else {
        anyhow::ensure!(
            !args.xrd_guard,
            "--xrd-guard needs --admission-service: the guard is served by the admission webhook's listener"
        );
        return Ok(Admission::default());
    };
    let certs = Arc::new(CertResolver::default());
    let reg = registration(args, svc_ns, svc)?;
    metrics.status.set_admission(AdmissionCertificate {
        secret: format!("{svc_ns}/{}", reg.serving_secret()),
        certs: certs.clone(),
    });
    let adm = serve::Admission {
        client: ctx.client.clone(),
        servers: ctx.stores.servers.clone(),
        selector: args.selector.clone(),
        metrics: metrics.admission.clone(),
        xrd_guard: args.xrd_guard.then(|| {
            Arc::new(crate::admission::xrd_guard::Guard {
                servers: ctx.stores.servers.clone(),
                namespace: ctx.settings.namespace.clone(),
                restores: metrics.admission.xrd_guard_restores.clone(),
            })
        }),
    };
    let router = serve::router(adm);
    let listener = listener.context("the admission listener is bound with --admission-service")?;
    let serving = serve::serve(listener, certs.clone(), router, lifecycle.stop.clone());
    let served = crate::shutdown::spawn_listener(lifecycle.readiness.clone(), "admission", serving);
    tokio::spawn(registration::run(
        ctx.client.clone(),
        reg.clone(),
        certs.clone(),
        ctx.settings.cert_lifetimes,
        metrics.admission.registration.clone(),
    ));
    while !certs.loaded() {
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    tracing::info!("admission webhook serving");
    Ok(Admission { served: Some(served), registered: Some(reg) })
}

/// The certificate, Service, ValidatingWebhookConfiguration and (`--xrd-guard`) the
/// MutatingWebhookConfiguration the flags ask for.
fn registration(args: &Args, svc_ns: &str, svc: &str) -> anyhow::Result<Registration> {
    Ok(Registration {
        service_namespace: svc_ns.to_string(),
        service: svc.to_string(),
        port: i32::from(args.admission_port),
        target_port: i32::from(args.admission_listen.port()),
        pod_selector: args
            .admission_pod_selector
            .as_deref()
            .map(crate::cli::parse_labels)
            .transpose()
            .map_err(anyhow::Error::msg)?,
        webhook_name: args
            .admission_webhook_name
            .clone()
            .unwrap_or_else(|| registration::default_webhook_name(args.selector.as_deref())),
        object_selector: args
            .selector
            .as_deref()
            .filter(|s| !s.is_empty())
            .map(registration::object_selector)
            .transpose()
            .map_err(anyhow::Error::msg)?,
        owner: args.admission_configuration,
        xrd_guard: args.xrd_guard,
        failure_policy: args.admission_failure_policy,
        tls_secret: args.admission_tls_secret.clone().filter(|s| !s.is_empty()),
    })
}

impl Admission {
    /// Waits for the listener's drain, then, on the last replica to stop, takes the webhooks
    /// out: with `failurePolicy: Fail` they would refuse every write of dco's kinds while no
    /// replica runs.
    pub async fn stop(self, client: &kube::Client) -> anyhow::Result<()> {
        if let Some(served) = self.served {
            served.await.context("the admission listener")??;
        }
        if let Some(reg) = self.registered {
            registration::withdraw_if_last(client, &reg).await;
        }
        Ok(())
    }
}

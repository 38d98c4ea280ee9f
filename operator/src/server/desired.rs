//! The objects a ConversionWebhookServer is made of, as pure functions of its spec: the
//! Deployment of dco-webhook, its Service, ServiceAccount, namespaced Role (its served-target
//! Leases), ClusterRole (reading configs, servers, targets and Pods), the bindings, and an
//! HPA and PDB when asked for. The controller server-side applies them as they come out.

use std::collections::BTreeMap;

use dco_api::ConversionWebhookServer;
use dco_api::server::ServiceType;
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, DeploymentStrategy, RollingUpdateDeployment};
use k8s_openapi::api::autoscaling::v2::{
    CrossVersionObjectReference, HorizontalPodAutoscaler, HorizontalPodAutoscalerSpec, MetricSpec,
    MetricTarget, ResourceMetricSource,
};
use k8s_openapi::api::core::v1::{
    Capabilities, Container, ContainerPort, EnvVar, EnvVarSource, HTTPGetAction, ObjectFieldSelector,
    PodSecurityContext, PodSpec, PodTemplateSpec, Probe, SeccompProfile, SecretVolumeSource, SecurityContext,
    Service, ServiceAccount, ServicePort, Volume, VolumeMount,
};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::Resource;

use crate::context::OperatorSettings;
use crate::names::{ServerNames, service_spec};

pub const CONTAINER: &str = "webhook";
pub const PORT_NAME: &str = "https";
/// The plain-HTTP admin port (/metrics, /debug/registry): not in the Service, so a
/// NetworkPolicy can open the conversion port alone to the apiserver.
pub const ADMIN_PORT_NAME: &str = "admin";
/// Where the serving Secret is mounted in the webhook container.
pub const TLS_MOUNT: &str = "/etc/dco/tls";
const TLS_VOLUME: &str = "serving-cert";
/// The uid and gid the webhook runs as: numeric, so the kubelet can check `runAsNonRoot`
/// without reading the image's `USER` (65532 is distroless' `nonroot`).
pub const RUN_AS: i64 = 65532;

/// Pod Security "restricted" at Pod level: non-root with a numeric uid/gid, the runtime's
/// default seccomp profile. `fsGroup` lets that uid read the mounted volumes whatever their mode.
pub fn pod_security_context() -> PodSecurityContext {
    PodSecurityContext {
        run_as_non_root: Some(true),
        run_as_user: Some(RUN_AS),
        run_as_group: Some(RUN_AS),
        fs_group: Some(RUN_AS),
        seccomp_profile: Some(SeccompProfile {
            type_: "RuntimeDefault".to_string(),
            localhost_profile: None,
        }),
        ..PodSecurityContext::default()
    }
}

/// Pod Security "restricted" at container level, repeated from the Pod's so the container is
/// compliant on its own: no privilege escalation, every capability dropped, and a read-only
/// root filesystem — dco-webhook writes no file (it reads its certificate, `--static-dir` and
/// the API; logs go to stdout), so it needs no writable `/tmp`.
pub fn container_security_context() -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        read_only_root_filesystem: Some(true),
        run_as_non_root: Some(true),
        run_as_user: Some(RUN_AS),
        run_as_group: Some(RUN_AS),
        capabilities: Some(Capabilities { drop: Some(vec!["ALL".to_string()]), add: None }),
        seccomp_profile: Some(SeccompProfile {
            type_: "RuntimeDefault".to_string(),
            localhost_profile: None,
        }),
        ..SecurityContext::default()
    }
}

/// Flags of dco-webhook the operator sets itself; `extraArgs` may not override them.
pub const MANAGED_FLAGS: &[&str] = &[
    "--instance",
    "--service-name",
    "--server-selector",
    "--listen",
    "--admin-listen",
    "--tls-cert-file",
    "--tls-key-file",
    "--pod-name",
    "--pod-namespace",
    "--static-dir",
];

/// Split `extraArgs` into the ones passed on and the ones refused because they would
/// override a managed flag, in both the `--flag=value` and the `--flag value` form (the value
/// goes with its flag). Admission will refuse those too; this is the controller's backstop.
pub fn split_extra_args(extra: &[String]) -> (Vec<String>, Vec<String>) {
    let (mut kept, mut refused) = (Vec::new(), Vec::new());
    let mut args = extra.iter().peekable();
    while let Some(a) = args.next() {
        let (flag, inline) = match a.split_once('=') {
            Some((f, _)) => (f, true),
            None => (a.as_str(), false),
        };
        if !MANAGED_FLAGS.contains(&flag) {
            kept.push(a.clone());
            continue;
        }
        refused.push(a.clone());
        if !inline && let Some(v) = args.next_if(|v| !v.starts_with('-')) {
            refused.push(v.clone());
        }
    }
    (kept, refused)
}

/// The last value of `flag` in `args` (`--flag=v` or `--flag v`; a flag given twice takes its
/// last value in dco-webhook), parsed as a duration; `default` when absent or unparsable
/// (dco-webhook then refuses to start, and no grace period matters).
fn duration_flag(args: &[String], flag: &str, default: u64) -> u64 {
    let mut value = None;
    let mut it = args.iter().peekable();
    while let Some(a) = it.next() {
        match a.split_once('=') {
            Some((f, v)) if f == flag => value = Some(v.to_string()),
            None if a == flag => value = it.next_if(|v| !v.starts_with('-')).cloned(),
            _ => {}
        }
    }
    value
        .and_then(|v| dco_engine::duration::parse_flag(&v).ok())
        .map_or(default, |d| d.as_secs_f64().ceil() as u64)
}

/// dco-webhook's stop, from its flags (webhook/src/run.rs): SIGTERM, not Ready for
/// `--shutdown-delay` (5 s) while still serving, then up to `--shutdown-timeout` (25 s) for the
/// connections to close; the grace period exceeds both by 10 s, or the kubelet's SIGKILL
/// would cut reviews in flight.
pub fn webhook_grace_seconds(args: &[String]) -> i64 {
    let delay = duration_flag(args, "--shutdown-delay", 5);
    let timeout = duration_flag(args, "--shutdown-timeout", 25);
    i64::try_from(delay.saturating_add(timeout).saturating_add(10)).unwrap_or(i64::MAX)
}

/// The port the webhook listens on, from `--listen` (`host:port`, `$(POD_IP):9443`).
pub fn listen_port(listen: &str) -> i32 {
    listen.rsplit(':').next().and_then(|p| p.parse::<u16>().ok()).map_or(9443, i32::from)
}

/// `--admin-listen`: the admin port on `--listen`'s host (`$(POD_IP):8080` next to
/// `$(POD_IP):9443`), so Pods that share a network namespace (the local cluster) do not collide.
pub fn admin_listen(settings: &OperatorSettings) -> String {
    let host = settings.webhook_listen.rsplit_once(':').map_or("0.0.0.0", |(h, _)| h);
    format!("{host}:{}", settings.webhook_admin_port)
}

fn meta(name: &str, namespace: Option<&str>, names: &ServerNames, owner: &OwnerReference) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_string()),
        namespace: namespace.map(str::to_string),
        labels: Some(names.labels()),
        owner_references: Some(vec![owner.clone()]),
        ..ObjectMeta::default()
    }
}

/// The server as the controlling owner of its objects, so deleting it garbage-collects them.
pub fn owner(cws: &ConversionWebhookServer) -> Option<OwnerReference> {
    cws.controller_owner_ref(&())
}

/// The webhook image of a server: `spec.image.digest` pins `<repository>@<digest>`; a
/// `spec.image.repository` without tag or digest takes `--webhook-image`'s tag and digest (a
/// mirror of the same image); nothing set is `--webhook-image` itself.
pub fn image(cws: &ConversionWebhookServer, settings: &OperatorSettings) -> String {
    fn nonempty(v: Option<&String>) -> Option<&str> {
        v.map(String::as_str).filter(|v| !v.is_empty())
    }
    let spec = cws.spec.image.as_ref();
    let repo = nonempty(spec.and_then(|i| i.repository.as_ref()));
    let tag = nonempty(spec.and_then(|i| i.tag.as_ref()));
    let digest = nonempty(spec.and_then(|i| i.digest.as_ref()));
    let default = ImageRef::parse(&settings.webhook_image);
    match (repo, tag, digest) {
        (None, _, None) => settings.webhook_image.clone(),
        (repo, _, Some(digest)) => format!("{}@{digest}", repo.unwrap_or(default.repository)),
        (Some(repo), Some(tag), None) => format!("{repo}:{tag}"),
        (Some(repo), None, None) => ImageRef { repository: repo, ..default }.to_string(),
    }
}

/// An image reference split into repository, tag and digest
/// (`reg:5000/a/b:v1@sha256:…` → `reg:5000/a/b`, `v1`, `sha256:…`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ImageRef<'a> {
    pub repository: &'a str,
    pub tag: Option<&'a str>,
    pub digest: Option<&'a str>,
}

impl<'a> ImageRef<'a> {
    pub fn parse(image: &'a str) -> Self {
        let (name, digest) = match image.split_once('@') {
            Some((n, d)) => (n, Some(d)),
            None => (image, None),
        };
        // A colon after the last slash is the tag's; one before it is a registry's port.
        match name.rsplit_once(':').filter(|(_, t)| !t.contains('/')) {
            Some((repository, tag)) => ImageRef { repository, tag: Some(tag), digest },
            None => ImageRef { repository: name, tag: None, digest },
        }
    }
}

impl std::fmt::Display for ImageRef<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.repository)?;
        if let Some(t) = self.tag {
            write!(f, ":{t}")?;
        }
        if let Some(d) = self.digest {
            write!(f, "@{d}")?;
        }
        Ok(())
    }
}

/// The dco-webhook arguments: the managed flags, the operator-wide extras, then the server's
/// accepted `extraArgs` (later flags win in clap, but managed ones are never repeated).
pub fn args(cws: &ConversionWebhookServer, names: &ServerNames, settings: &OperatorSettings) -> Vec<String> {
    let mut args = vec![
        format!("--instance={}", names.server),
        format!("--service-name={}", names.service()),
        format!("--listen={}", settings.webhook_listen),
        format!("--admin-listen={}", admin_listen(settings)),
        format!("--tls-cert-file={TLS_MOUNT}/tls.crt"),
        format!("--tls-key-file={TLS_MOUNT}/tls.key"),
    ];
    // The replicas resolve over the servers this operator sees (`--selector`), or a target
    // could be assigned here by the operator and elsewhere by the replicas.
    if let Some(sel) = &settings.selector {
        args.push(format!("--server-selector={sel}"));
    }
    args.extend(split_extra_args(&settings.webhook_args).0);
    args.extend(split_extra_args(&cws.spec.extra_args).0);
    args
}

fn field_env(name: &str, path: &str) -> EnvVar {
    EnvVar {
        name: name.to_string(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: path.to_string(),
                ..ObjectFieldSelector::default()
            }),
            ..EnvVarSource::default()
        }),
        ..EnvVar::default()
    }
}

pub fn deployment(
    cws: &ConversionWebhookServer,
    names: &ServerNames,
    settings: &OperatorSettings,
    owner: &OwnerReference,
) -> Deployment {
    let spec = &cws.spec;
    let port = listen_port(&settings.webhook_listen);
    let mut env = vec![
        field_env("POD_NAME", "metadata.name"),
        field_env("POD_NAMESPACE", "metadata.namespace"),
        field_env("POD_IP", "status.podIP"),
    ];
    env.extend(spec.extra_env.iter().cloned());
    let mut mounts = vec![VolumeMount {
        name: TLS_VOLUME.to_string(),
        mount_path: TLS_MOUNT.to_string(),
        read_only: Some(true),
        ..VolumeMount::default()
    }];
    mounts.extend(spec.extra_volume_mounts.iter().cloned());
    let mut volumes = vec![Volume {
        name: TLS_VOLUME.to_string(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(names.tls_secret.clone()),
            ..SecretVolumeSource::default()
        }),
        ..Volume::default()
    }];
    volumes.extend(spec.extra_volumes.iter().cloned());
    let webhook_args = args(cws, names, settings);
    let probe = |path: &str, period: i32, failures: i32, initial: i32| Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.to_string()),
            port: IntOrString::String(PORT_NAME.to_string()),
            scheme: Some("HTTPS".to_string()),
            ..HTTPGetAction::default()
        }),
        period_seconds: Some(period),
        failure_threshold: Some(failures),
        initial_delay_seconds: Some(initial),
        timeout_seconds: Some(2),
        ..Probe::default()
    };
    let container = Container {
        name: CONTAINER.to_string(),
        image: Some(image(cws, settings)),
        image_pull_policy: spec.image.as_ref().and_then(|i| i.pull_policy.clone()),
        args: Some(webhook_args.clone()),
        env: Some(env),
        ports: Some(vec![
            ContainerPort {
                name: Some(PORT_NAME.to_string()),
                container_port: port,
                protocol: Some("TCP".to_string()),
                ..ContainerPort::default()
            },
            ContainerPort {
                name: Some(ADMIN_PORT_NAME.to_string()),
                container_port: i32::from(settings.webhook_admin_port),
                protocol: Some("TCP".to_string()),
                ..ContainerPort::default()
            },
        ]),
        readiness_probe: Some(probe("/readyz", 2, 3, 0)),
        liveness_probe: Some(probe("/healthz", 10, 6, 10)),
        resources: spec.resources.clone(),
        volume_mounts: Some(mounts),
        security_context: Some(container_security_context()),
        // dco-webhook writes no termination log: its log's last lines (the error it exits
        // with) become the termination message, which the server's status quotes
        // (`status::pod_failures`).
        termination_message_policy: Some("FallbackToLogsOnError".to_string()),
        ..Container::default()
    };
    let mut pod_labels = spec.pod_labels.clone();
    pod_labels.extend(names.labels());
    let pod_spec = PodSpec {
        containers: vec![container],
        service_account_name: Some(names.service_account(cws)),
        security_context: Some(pod_security_context()),
        volumes: Some(volumes),
        node_selector: (!spec.node_selector.is_empty()).then(|| spec.node_selector.clone()),
        tolerations: (!spec.tolerations.is_empty()).then(|| spec.tolerations.clone()),
        affinity: spec.affinity.clone(),
        priority_class_name: spec.priority_class_name.clone(),
        topology_spread_constraints: (!spec.topology_spread_constraints.is_empty())
            .then(|| spec.topology_spread_constraints.clone()),
        termination_grace_period_seconds: Some(webhook_grace_seconds(&webhook_args)),
        ..PodSpec::default()
    };
    Deployment {
        metadata: meta(&names.workload, Some(&names.namespace), names, owner),
        spec: DeploymentSpec {
            // With an HPA the replica count is the HPA's: not sending it leaves it to that manager.
            replicas: spec.autoscaling.is_none().then_some(spec.replicas),
            selector: LabelSelector { match_labels: Some(names.selector()), match_expressions: None },
            // Never fewer ready replicas than asked for during a rollout: reviews keep flowing.
            strategy: Some(DeploymentStrategy {
                type_: Some("RollingUpdate".to_string()),
                rolling_update: Some(RollingUpdateDeployment {
                    max_unavailable: Some(IntOrString::Int(0)),
                    max_surge: Some(IntOrString::Int(1)),
                }),
            }),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(pod_labels),
                    annotations: (!spec.pod_annotations.is_empty()).then(|| spec.pod_annotations.clone()),
                    ..ObjectMeta::default()
                }),
                spec: Some(pod_spec),
            },
            ..DeploymentSpec::default()
        },
        status: None,
    }
}

pub fn service(cws: &ConversionWebhookServer, names: &ServerNames, owner: &OwnerReference) -> Service {
    let s = service_spec(cws);
    let mut metadata = meta(names.service(), Some(&names.namespace), names, owner);
    metadata.annotations = (!s.annotations.is_empty()).then(|| s.annotations.clone());
    Service {
        metadata,
        spec: Some(k8s_openapi::api::core::v1::ServiceSpec {
            type_: Some(
                match s.type_ {
                    ServiceType::ClusterIP => "ClusterIP",
                    ServiceType::NodePort => "NodePort",
                    ServiceType::LoadBalancer => "LoadBalancer",
                }
                .to_string(),
            ),
            selector: Some(names.selector()),
            ports: Some(vec![ServicePort {
                name: Some(PORT_NAME.to_string()),
                port: s.port,
                target_port: Some(IntOrString::String(PORT_NAME.to_string())),
                protocol: Some("TCP".to_string()),
                ..ServicePort::default()
            }]),
            ..k8s_openapi::api::core::v1::ServiceSpec::default()
        }),
        status: None,
    }
}

/// `None` when the server names its own ServiceAccount (the operator does not create it).
pub fn service_account(
    cws: &ConversionWebhookServer,
    names: &ServerNames,
    owner: &OwnerReference,
) -> Option<ServiceAccount> {
    cws.spec.service_account_name.as_deref().filter(|s| !s.is_empty()).is_none().then(|| ServiceAccount {
        metadata: meta(&names.workload, Some(&names.namespace), names, owner),
        ..ServiceAccount::default()
    })
}

fn rule(groups: &[&str], resources: &[&str], verbs: &[&str]) -> PolicyRule {
    let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    PolicyRule {
        api_groups: Some(v(groups)),
        resources: Some(v(resources)),
        verbs: v(verbs),
        ..PolicyRule::default()
    }
}

/// What a replica does in its own namespace only: server-side apply its served-target Lease
/// (webhook/src/lease.rs: apply creates or patches), and read its own Pod, the Lease's owner.
/// Namespaced, so the operator that grants it needs these rights only where servers run
/// (charts/dco/templates/rbac.yaml).
pub fn role(names: &ServerNames, owner: &OwnerReference) -> Role {
    Role {
        metadata: meta(&names.workload, Some(&names.namespace), names, owner),
        rules: Some(vec![
            rule(&["coordination.k8s.io"], &["leases"], &["get", "create", "update", "patch"]),
            rule(&[""], &["pods"], &["get"]),
        ]),
    }
}

/// Reading what the replicas compile and serve, which lives cluster-wide: configs, servers
/// and targets.
pub fn cluster_role(names: &ServerNames, owner: &OwnerReference) -> ClusterRole {
    let read = ["get", "list", "watch"];
    ClusterRole {
        metadata: meta(&names.cluster_role, None, names, owner),
        rules: Some(vec![
            rule(
                &[dco_api::GROUP],
                &["xrdconversionconfigs", "crdconversionconfigs", "conversionwebhookservers"],
                &read,
            ),
            rule(&["apiextensions.k8s.io"], &["customresourcedefinitions"], &read),
            rule(&["apiextensions.crossplane.io"], &["compositeresourcedefinitions"], &read),
        ]),
        aggregation_rule: None,
    }
}

fn subject(cws: &ConversionWebhookServer, names: &ServerNames) -> Subject {
    Subject {
        kind: "ServiceAccount".to_string(),
        name: names.service_account(cws),
        namespace: Some(names.namespace.clone()),
        api_group: None,
    }
}

pub fn role_binding(
    cws: &ConversionWebhookServer,
    names: &ServerNames,
    owner: &OwnerReference,
) -> RoleBinding {
    RoleBinding {
        metadata: meta(&names.workload, Some(&names.namespace), names, owner),
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".to_string()),
            kind: "Role".to_string(),
            name: names.workload.clone(),
        },
        subjects: Some(vec![subject(cws, names)]),
    }
}

pub fn cluster_role_binding(
    cws: &ConversionWebhookServer,
    names: &ServerNames,
    owner: &OwnerReference,
) -> ClusterRoleBinding {
    ClusterRoleBinding {
        metadata: meta(&names.cluster_role, None, names, owner),
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".to_string()),
            kind: "ClusterRole".to_string(),
            name: names.cluster_role.clone(),
        },
        subjects: Some(vec![subject(cws, names)]),
    }
}

pub fn hpa(
    cws: &ConversionWebhookServer,
    names: &ServerNames,
    owner: &OwnerReference,
) -> Option<HorizontalPodAutoscaler> {
    let a = cws.spec.autoscaling.as_ref()?;
    Some(HorizontalPodAutoscaler {
        metadata: meta(&names.workload, Some(&names.namespace), names, owner),
        spec: HorizontalPodAutoscalerSpec {
            scale_target_ref: CrossVersionObjectReference {
                api_version: Some("apps/v1".to_string()),
                kind: "Deployment".to_string(),
                name: names.workload.clone(),
            },
            min_replicas: Some(a.min_replicas),
            max_replicas: a.max_replicas,
            metrics: Some(vec![MetricSpec {
                type_: "Resource".to_string(),
                resource: Some(ResourceMetricSource {
                    name: "cpu".to_string(),
                    target: MetricTarget {
                        type_: "Utilization".to_string(),
                        average_utilization: Some(a.target_cpu_utilization_percentage.unwrap_or(80)),
                        ..MetricTarget::default()
                    },
                }),
                ..MetricSpec::default()
            }]),
            behavior: None,
        },
        status: None,
    })
}

pub fn pdb(
    cws: &ConversionWebhookServer,
    names: &ServerNames,
    owner: &OwnerReference,
) -> Option<PodDisruptionBudget> {
    let p = cws.spec.pod_disruption_budget.as_ref()?;
    Some(PodDisruptionBudget {
        metadata: meta(&names.workload, Some(&names.namespace), names, owner),
        spec: Some(PodDisruptionBudgetSpec {
            selector: Some(LabelSelector { match_labels: Some(names.selector()), match_expressions: None }),
            min_available: p.min_available.clone(),
            max_unavailable: p.max_unavailable.clone(),
            ..PodDisruptionBudgetSpec::default()
        }),
        status: None,
    })
}

/// Every workload object of a server, as the controller applies them (the Secrets come from
/// the certificate step, which decides whether they must change).
#[derive(Clone, Debug)]
pub struct Objects {
    pub service_account: Option<ServiceAccount>,
    pub role: Role,
    pub role_binding: RoleBinding,
    pub cluster_role: ClusterRole,
    pub cluster_role_binding: ClusterRoleBinding,
    pub service: Service,
    pub deployment: Deployment,
    pub hpa: Option<HorizontalPodAutoscaler>,
    pub pdb: Option<PodDisruptionBudget>,
}

pub fn objects(
    cws: &ConversionWebhookServer,
    names: &ServerNames,
    settings: &OperatorSettings,
    owner: &OwnerReference,
) -> Objects {
    Objects {
        service_account: service_account(cws, names, owner),
        role: role(names, owner),
        role_binding: role_binding(cws, names, owner),
        cluster_role: cluster_role(names, owner),
        cluster_role_binding: cluster_role_binding(cws, names, owner),
        service: service(cws, names, owner),
        deployment: deployment(cws, names, settings, owner),
        hpa: hpa(cws, names, owner),
        pdb: pdb(cws, names, owner),
    }
}

/// A Secret of this server with `data`.
pub fn secret(
    name: &str,
    type_: &str,
    data: &BTreeMap<String, Vec<u8>>,
    names: &ServerNames,
    owner: &OwnerReference,
) -> k8s_openapi::api::core::v1::Secret {
    k8s_openapi::api::core::v1::Secret {
        metadata: meta(name, Some(&names.namespace), names, owner),
        type_: Some(type_.to_string()),
        data: Some(data.iter().map(|(k, v)| (k.clone(), k8s_openapi::ByteString(v.clone()))).collect()),
        ..k8s_openapi::api::core::v1::Secret::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dco_api::ConversionWebhookServerSpec;

    fn cws(yaml: &str) -> ConversionWebhookServer {
        let spec: ConversionWebhookServerSpec = serde_yaml::from_str(yaml).unwrap();
        let mut c = ConversionWebhookServer::new("pool-a", spec);
        c.metadata.uid = Some("uid-a".into());
        c
    }

    fn settings() -> OperatorSettings {
        OperatorSettings { webhook_listen: "$(POD_IP):9443".into(), ..OperatorSettings::default() }
    }

    #[test]
    fn the_webhook_grace_period_outlasts_its_shutdown_flags() {
        let a = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(webhook_grace_seconds(&a(&["--instance=x"])), 40, "5 s delay + 25 s timeout + 10");
        assert_eq!(webhook_grace_seconds(&a(&["--shutdown-delay=20s", "--shutdown-timeout", "1m"])), 90);
        // The last value wins, as in dco-webhook.
        assert_eq!(webhook_grace_seconds(&a(&["--shutdown-delay=20s", "--shutdown-delay=500ms"])), 36);
        assert_eq!(webhook_grace_seconds(&a(&["--shutdown-delay", "nonsense"])), 40);
    }

    #[test]
    fn deployment_runs_dco_webhook_with_the_managed_flags_then_extra_args() {
        let c = cws(
            "{replicas: 3, namespace: team, extraArgs: ['--drain-period=5s', '--instance=evil'], extraEnv: [{name: RUST_LOG, value: debug}]}",
        );
        let names = ServerNames::of(&c, "dco-system");
        let o = owner(&c).unwrap();
        let d = deployment(&c, &names, &settings(), &o);
        assert_eq!(d.metadata.namespace.as_deref(), Some("team"));
        assert_eq!(d.metadata.owner_references.as_ref().unwrap()[0].uid, "uid-a");
        let spec = d.spec;
        assert_eq!(spec.replicas, Some(3));
        let pod = spec.template.spec.unwrap();
        let ctr = &pod.containers[0];
        assert_eq!(
            ctr.args.as_deref().unwrap(),
            [
                "--instance=pool-a",
                "--service-name=dco-webhook-pool-a",
                "--listen=$(POD_IP):9443",
                "--admin-listen=$(POD_IP):8080",
                "--tls-cert-file=/etc/dco/tls/tls.crt",
                "--tls-key-file=/etc/dco/tls/tls.key",
                "--drain-period=5s",
            ]
        );
        let env: Vec<_> = ctr.env.as_ref().unwrap().iter().map(|e| e.name.as_str()).collect();
        assert_eq!(env, ["POD_NAME", "POD_NAMESPACE", "POD_IP", "RUST_LOG"]);
        // An operator scoped by --selector hands it on: its replicas resolve over the same
        // servers it does, and a server cannot override that.
        let scoped = OperatorSettings { selector: Some("team=a".into()), ..settings() };
        let c = cws("{extraArgs: ['--server-selector=other', '--server-selector', 'x']}");
        let d = deployment(&c, &names, &scoped, &o);
        let args = d.spec.template.spec.unwrap().containers[0].args.clone().unwrap();
        assert_eq!(
            args.iter().filter(|a| a.starts_with("--server-selector")).collect::<Vec<_>>(),
            ["--server-selector=team=a"]
        );
        assert!(!args.contains(&"x".to_string()), "{args:?}");
        let probe = ctr.readiness_probe.as_ref().unwrap().http_get.as_ref().unwrap();
        assert_eq!((probe.path.as_deref(), probe.scheme.as_deref()), (Some("/readyz"), Some("HTTPS")));
        let ports: Vec<_> =
            ctr.ports.as_ref().unwrap().iter().map(|p| (p.name.as_deref(), p.container_port)).collect();
        assert_eq!(ports, [(Some("https"), 9443), (Some("admin"), 8080)]);
        // The probes stay on the conversion port, where the kubelet always found them.
        let live = ctr.liveness_probe.as_ref().unwrap().http_get.as_ref().unwrap();
        assert_eq!(
            (live.path.as_deref(), live.port.clone()),
            (Some("/healthz"), IntOrString::String("https".into()))
        );
        assert_eq!(
            pod.volumes.unwrap()[0].secret.as_ref().unwrap().secret_name.as_deref(),
            Some("dco-webhook-pool-a-tls")
        );
        assert_eq!(pod.service_account_name.as_deref(), Some("dco-webhook-pool-a"));
        assert_eq!(ctr.image.as_deref(), Some(settings().webhook_image.as_str()));
        // The error dco-webhook exits with reaches the Pod's status, and so the server's.
        assert_eq!(ctr.termination_message_policy.as_deref(), Some("FallbackToLogsOnError"));
    }

    /// The checks of Pod Security "restricted" (k8s.io/pod-security-admission, policy
    /// `restricted` v1.25+) that a rendered Pod can fail, each on the value the kubelet would
    /// use: the container's own, else the Pod's.
    fn restricted_violations(pod: &PodSpec) -> Vec<String> {
        let mut out = Vec::new();
        let psc = pod.security_context.clone().unwrap_or_default();
        for f in [pod.host_network, pod.host_pid, pod.host_ipc] {
            if f == Some(true) {
                out.push("host namespaces".to_string());
            }
        }
        let allowed = |v: &Volume| {
            v.config_map.is_some()
                || v.csi.is_some()
                || v.downward_api.is_some()
                || v.empty_dir.is_some()
                || v.ephemeral.is_some()
                || v.persistent_volume_claim.is_some()
                || v.projected.is_some()
                || v.secret.is_some()
        };
        for v in pod.volumes.iter().flatten().filter(|v| !allowed(v)) {
            out.push(format!("volume {}", v.name));
        }
        if psc.run_as_user == Some(0) {
            out.push("pod runAsUser 0".to_string());
        }
        for c in pod.containers.iter().chain(pod.init_containers.iter().flatten()) {
            let sc = c.security_context.clone().unwrap_or_default();
            let n = &c.name;
            if sc.privileged == Some(true) {
                out.push(format!("{n}: privileged"));
            }
            if sc.allow_privilege_escalation != Some(false) {
                out.push(format!("{n}: allowPrivilegeEscalation"));
            }
            let caps = sc.capabilities.clone().unwrap_or_default();
            if !caps.drop.unwrap_or_default().iter().any(|d| d == "ALL") {
                out.push(format!("{n}: capabilities.drop ALL"));
            }
            if caps.add.unwrap_or_default().iter().any(|a| a != "NET_BIND_SERVICE") {
                out.push(format!("{n}: capabilities.add"));
            }
            if sc.run_as_non_root.or(psc.run_as_non_root) != Some(true) {
                out.push(format!("{n}: runAsNonRoot"));
            }
            if sc.run_as_user.or(psc.run_as_user).is_none_or(|u| u == 0) {
                // Not a restricted check itself, but without a numeric uid the kubelet can only
                // check runAsNonRoot against the image's USER, which may be a name.
                out.push(format!("{n}: no numeric non-zero runAsUser"));
            }
            let seccomp = sc.seccomp_profile.clone().or(psc.seccomp_profile.clone());
            if !seccomp.is_some_and(|p| p.type_ == "RuntimeDefault" || p.type_ == "Localhost") {
                out.push(format!("{n}: seccompProfile"));
            }
            if sc.read_only_root_filesystem != Some(true) {
                out.push(format!("{n}: readOnlyRootFilesystem"));
            }
            for p in c.ports.iter().flatten() {
                if p.host_port.is_some_and(|h| h != 0) {
                    out.push(format!("{n}: hostPort"));
                }
            }
        }
        out
    }

    #[test]
    fn webhook_pods_pass_pod_security_restricted() {
        let c = cws(
            "{extraVolumes: [{name: scratch, emptyDir: {}}], extraVolumeMounts: [{name: scratch, mountPath: /scratch}]}",
        );
        let names = ServerNames::of(&c, "dco-system");
        let o = owner(&c).unwrap();
        let pod = deployment(&c, &names, &settings(), &o).spec.template.spec.unwrap();
        assert_eq!(restricted_violations(&pod), Vec::<String>::new());
        let psc = pod.security_context.as_ref().unwrap();
        assert_eq!(
            (psc.run_as_non_root, psc.run_as_user, psc.run_as_group, psc.fs_group),
            (Some(true), Some(65532), Some(65532), Some(65532))
        );
        assert_eq!(psc.seccomp_profile.as_ref().unwrap().type_, "RuntimeDefault");
        let sc = pod.containers[0].security_context.as_ref().unwrap();
        assert_eq!(
            (sc.allow_privilege_escalation, sc.read_only_root_filesystem, sc.run_as_non_root, sc.run_as_user),
            (Some(false), Some(true), Some(true), Some(65532))
        );
        assert_eq!(sc.capabilities.as_ref().unwrap().drop.as_deref(), Some(&["ALL".to_string()][..]));
        assert_eq!(sc.seccomp_profile.as_ref().unwrap().type_, "RuntimeDefault");
        // The check itself can fail: the same Pod without its contexts violates restricted.
        let mut bare = pod.clone();
        bare.security_context = None;
        bare.containers[0].security_context = None;
        let v = restricted_violations(&bare);
        for want in [
            "allowPrivilegeEscalation",
            "capabilities.drop ALL",
            "runAsNonRoot",
            "seccompProfile",
            "readOnlyRootFilesystem",
        ] {
            assert!(v.iter().any(|x| x.ends_with(want)), "{want} not in {v:?}");
        }
    }

    #[test]
    fn autoscaling_leaves_replicas_to_the_hpa() {
        let c = cws("{autoscaling: {minReplicas: 2, maxReplicas: 5}}");
        let names = ServerNames::of(&c, "dco-system");
        let o = owner(&c).unwrap();
        assert_eq!(deployment(&c, &names, &settings(), &o).spec.replicas, None);
        let h = hpa(&c, &names, &o).unwrap().spec;
        assert_eq!((h.min_replicas, h.max_replicas), (Some(2), 5));
        assert!(pdb(&c, &names, &o).is_none());
    }

    #[test]
    fn service_and_rbac() {
        let c = cws("{service: {port: 8443}, serviceAccountName: mine}");
        let names = ServerNames::of(&c, "dco-system");
        let o = owner(&c).unwrap();
        let s = service(&c, &names, &o).spec.unwrap();
        let p = &s.ports.unwrap()[0];
        assert_eq!((p.port, p.target_port.clone()), (8443, Some(IntOrString::String("https".into()))));
        assert_eq!(s.selector.unwrap(), names.selector());
        assert!(service_account(&c, &names, &o).is_none(), "a named ServiceAccount is the user's");
        assert_eq!(role_binding(&c, &names, &o).subjects.unwrap()[0].name, "mine");
        let r = role(&names, &o).rules.unwrap();
        assert_eq!(r[0].resources.as_deref().unwrap(), ["leases"]);
        assert_eq!(r[0].verbs, ["get", "create", "update", "patch"]);
        assert_eq!(
            (r[1].resources.as_deref().unwrap(), &r[1].verbs[..]),
            (&["pods".to_string()][..], &["get".to_string()][..])
        );
        // Nothing cluster-wide that the namespaced Role can do: no Pods, no Leases.
        let cluster = cluster_role(&names, &o).rules.unwrap();
        assert!(
            cluster.iter().flat_map(|r| r.resources.iter().flatten()).all(|r| r != "pods" && r != "leases"),
            "{cluster:?}"
        );
        assert!(cluster.iter().all(|r| r.verbs == ["get", "list", "watch"]), "{cluster:?}");
    }

    #[test]
    fn image_defaults_and_overrides() {
        let s = OperatorSettings {
            webhook_image: "registry.local/dco-webhook:v9".into(),
            ..OperatorSettings::default()
        };
        assert_eq!(image(&cws("{}"), &s), "registry.local/dco-webhook:v9");
        assert_eq!(image(&cws("{image: {repository: mirror/dco-webhook}}"), &s), "mirror/dco-webhook:v9");
        assert_eq!(
            image(&cws("{image: {repository: mirror/dco-webhook, tag: dev}}"), &s),
            "mirror/dco-webhook:dev"
        );
        let d = format!("sha256:{}", "ab".repeat(32));
        // A digest pins the image; the tag is ignored, the repository defaults to the operator's.
        assert_eq!(
            image(&cws(&format!("{{image: {{digest: '{d}'}}}}")), &s),
            format!("registry.local/dco-webhook@{d}")
        );
        assert_eq!(
            image(&cws(&format!("{{image: {{repository: 'm:5000/w', tag: dev, digest: '{d}'}}}}")), &s),
            format!("m:5000/w@{d}")
        );
        // --webhook-image pinned by digest: a mirror repository takes its tag and digest.
        let pinned = OperatorSettings { webhook_image: format!("reg:5000/dco-webhook:v9@{d}"), ..s.clone() };
        assert_eq!(image(&cws("{}"), &pinned), format!("reg:5000/dco-webhook:v9@{d}"));
        assert_eq!(
            image(&cws("{image: {repository: 'mirror:5000/w'}}"), &pinned),
            format!("mirror:5000/w:v9@{d}")
        );
        let no_tag = OperatorSettings { webhook_image: format!("reg:5000/dco-webhook@{d}"), ..s.clone() };
        assert_eq!(image(&cws("{image: {repository: mirror/w}}"), &no_tag), format!("mirror/w@{d}"));
        assert_eq!(
            image(&cws(&format!("{{image: {{digest: '{d}'}}}}")), &no_tag),
            format!("reg:5000/dco-webhook@{d}")
        );
    }

    #[test]
    fn admin_listen_follows_the_listen_host() {
        assert_eq!(admin_listen(&settings()), "$(POD_IP):8080");
        let s = OperatorSettings { webhook_admin_port: 9090, ..OperatorSettings::default() };
        assert_eq!(admin_listen(&s), "0.0.0.0:9090");
        // extraArgs cannot move it.
        assert_eq!(split_extra_args(&["--admin-listen=0.0.0.0:1".into()]).1.len(), 1);
    }

    #[test]
    fn listen_ports() {
        assert_eq!(listen_port("0.0.0.0:9443"), 9443);
        assert_eq!(listen_port("$(POD_IP):8443"), 8443);
        assert_eq!(listen_port("nonsense"), 9443);
    }
}

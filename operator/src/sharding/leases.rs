//! The Coordinator's Lease I/O (docs/sharding.md, "The Coordinator"): one tick reads the
//! member and shard Leases with one LIST, lets `coordinator::tick` decide, and carries out its
//! actions — renewing `dco-operator-member-<replicaId>`, taking, renewing and freeing
//! `dco-operator-shard-<i>` with resourceVersion-guarded updates (a conflict is the other
//! replica winning; the next tick decides again), deleting long-gone members — then publishes
//! the shards this replica owns from what its writes returned. `runtime/sharding.rs` starts it on a
//! thread of its own (`run.rs`) and hands its snapshot to the reconcile gates (`gate.rs`) and
//! the sharded watches.

use std::collections::BTreeMap;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use tokio::sync::watch;

use super::coordinator::{
    self, CoordinatorSettings, LeaseAction, MemberLease, ShardLease, ShardOwnership, View,
};
use super::gate::Gate;
use crate::names::selector_hash;

/// Labels every coordinator Lease carries: the component and its role.
pub const LABEL_COMPONENT: &str = "sharding.dco.rs/component";
pub const LABEL_ROLE: &str = "sharding.dco.rs/role";
pub const COMPONENT: &str = "dco-operator";
pub(super) const ROLE_MEMBER: &str = "member";
pub(super) const ROLE_SHARD: &str = "shard";

/// The names of one operator's coordinator Leases. Operators that share a lease namespace
/// with different `--selector`s manage different objects, so they must not divide one set of
/// shards between them: each selector is a group of its own — `dco-operator`, or
/// `dco-operator-<hash of the selector>` — in the Lease names and the component label.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseNames {
    group: String,
}

impl Default for LeaseNames {
    fn default() -> Self {
        LeaseNames { group: COMPONENT.to_string() }
    }
}

impl LeaseNames {
    pub fn for_selector(selector: Option<&str>) -> Self {
        match selector.filter(|s| !s.trim().is_empty()) {
            None => LeaseNames::default(),
            Some(s) => LeaseNames { group: format!("{COMPONENT}-{}", selector_hash(s)) },
        }
    }

    /// The value of [`LABEL_COMPONENT`] on this group's Leases.
    pub fn group(&self) -> &str {
        &self.group
    }

    pub fn member(&self, id: &str) -> String {
        format!("{}-member-{id}", self.group)
    }

    pub fn shard(&self, index: u32) -> String {
        format!("{}-shard-{index}", self.group)
    }

    pub(super) fn member_id<'a>(&self, name: &'a str) -> Option<&'a str> {
        name.strip_prefix(self.group.as_str())?.strip_prefix("-member-")
    }

    pub(super) fn shard_index(&self, name: &str) -> Option<u32> {
        name.strip_prefix(self.group.as_str())?.strip_prefix("-shard-")?.parse().ok()
    }
}

/// The Pod this replica runs in, when its member Lease can name it as owner: the garbage
/// collector then deletes the member Lease once the Pod is gone, so member Leases of old Pods
/// do not pile up when their replica could not delete its own (`helm uninstall` removes the
/// operator's RBAC with its Deployment), and the others take that replica's shards at once
/// (coordinator.rs `holder_left`). An ownerReference names an owner in the dependent's own
/// namespace, so only a replica whose Leases live in its Pod's namespace has one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodRef {
    pub name: String,
    pub uid: String,
}

impl PodRef {
    /// From the downward API's Pod name, namespace and uid (`POD_NAME`, `POD_NAMESPACE`,
    /// `POD_UID`): none unless all three are set and the Leases live in that namespace.
    pub fn of(
        name: Option<&str>,
        namespace: Option<&str>,
        uid: Option<&str>,
        lease_namespace: &str,
    ) -> Option<Self> {
        let set = |v: Option<&str>| v.map(str::trim).filter(|v| !v.is_empty()).map(str::to_string);
        let (name, namespace, uid) = (set(name)?, set(namespace)?, set(uid)?);
        (namespace == lease_namespace).then_some(PodRef { name, uid })
    }

    /// From this process's environment (the chart sets the three variables).
    pub fn from_env(lease_namespace: &str) -> Option<Self> {
        let var = |k: &str| std::env::var(k).ok();
        PodRef::of(
            var("POD_NAME").as_deref(),
            var("POD_NAMESPACE").as_deref(),
            var("POD_UID").as_deref(),
            lease_namespace,
        )
    }

    pub(super) fn owner_reference(&self) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
        k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            api_version: "v1".into(),
            kind: "Pod".into(),
            name: self.name.clone(),
            uid: self.uid.clone(),
            // Neither controller nor blocking: blockOwnerDeletion would need delete on pods.
            controller: None,
            block_owner_deletion: None,
        }
    }
}

/// What one tick did, for logs and metrics.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TickReport {
    pub taken: Vec<u32>,
    pub freed: Vec<u32>,
    /// Writes another replica won (a changed resourceVersion, or a create that found the Lease).
    pub conflicts: usize,
    pub members_deleted: usize,
    /// Whether the owned set changed (the OnChange callbacks run then).
    pub changed: bool,
    /// When the next tick is due early (`coordinator::Tick::wake_at`).
    pub wake_at: Option<Timestamp>,
    /// Shards whose ownership lapsed during the tick (renewed too late: a slow apiserver, or
    /// a paused process); they are ours again only from this tick on.
    pub lapsed: usize,
}

/// The Coordinator's view after its last successful tick: for `/debug/shards` and for the
/// pacing that divides `--rebalance-qps` among the live members.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    pub me: String,
    pub at: Option<Timestamp>,
    pub shards: u32,
    /// Live members, this replica among them, sorted.
    pub live: Vec<String>,
    /// Each shard's holder as the Leases read after this tick's writes (`None`: free).
    pub owners: BTreeMap<u32, Option<String>>,
    /// The shards this replica owns.
    pub owned: Vec<u32>,
}

/// One replica's Coordinator: its Leases in `api` (the lease namespace).
pub struct Membership {
    pub(super) api: Api<Lease>,
    pub(super) names: LeaseNames,
    pub(super) settings: CoordinatorSettings,
    pub(super) me: String,
    pub(super) last_renewal: Option<Timestamp>,
    pub(super) owned: watch::Sender<ShardOwnership>,
    pub(super) snapshot: watch::Sender<Snapshot>,
    /// This replica's member Lease as last written: what its ownership Events are about.
    pub(super) member: Option<Lease>,
    /// Records an Event on the member Lease per change of the owned shards (`kubectl describe
    /// lease dco-operator-member-<id>`); none in unit tests.
    pub(super) recorder: Option<kube::runtime::events::Recorder>,
    /// The Pod that owns this replica's member Lease, if it runs in one ([`PodRef`]).
    pub(super) pod: Option<PodRef>,
    /// This process's pauses: the gate owns nothing after one until a tick renews (`pause.rs`).
    pub(super) pauses: std::sync::Arc<super::pause::Pauses>,
}

impl Membership {
    pub fn new(api: Api<Lease>, settings: CoordinatorSettings, me: String) -> Self {
        let snapshot = Snapshot { me: me.clone(), shards: settings.shards.count(), ..Snapshot::default() };
        Membership {
            api,
            names: LeaseNames::default(),
            settings,
            me,
            last_renewal: None,
            owned: watch::Sender::new(ShardOwnership::default()),
            snapshot: watch::Sender::new(snapshot),
            member: None,
            recorder: None,
            pod: None,
            pauses: std::sync::Arc::new(super::pause::Pauses::started()),
        }
    }

    /// The Pod this replica runs in: its member Lease carries an ownerReference to it.
    pub fn with_pod(mut self, pod: Option<PodRef>) -> Self {
        self.pod = pod;
        self
    }

    /// This operator's Lease names (default: those of an operator without `--selector`).
    pub fn with_names(mut self, names: LeaseNames) -> Self {
        self.names = names;
        self
    }

    /// The view after each tick.
    pub fn snapshot(&self) -> watch::Receiver<Snapshot> {
        self.snapshot.subscribe()
    }

    /// The reconcile gate over this Coordinator's owned set.
    pub fn gate(&self) -> Gate {
        let mut gate = Gate::new(self.settings.shards, self.owned()).with_pauses(self.pauses.clone());
        gate.lapse_retry = self.settings.renew_interval.unsigned_abs();
        gate
    }

    /// The owned set, current after every tick (the reconcile gate reads it at reconcile
    /// time, `ShardOwnership::owns`, so a replica whose ticks stop also stops owning).
    pub fn owned(&self) -> watch::Receiver<ShardOwnership> {
        self.owned.subscribe()
    }

    /// One tick at `now`.
    pub async fn tick(&mut self, now: Timestamp) -> Result<TickReport, kube::Error> {
        let lp = ListParams::default().labels(&format!("{LABEL_COMPONENT}={}", self.names.group()));
        let leases = self.api.list(&lp).await?.items;
        let (members, shards) = read(&self.names, &leases);
        let view = View {
            now,
            me: &self.me,
            last_renewal: self.last_renewal,
            members: &members,
            shard_leases: &shards,
        };
        let decided = coordinator::tick(&self.settings, &view);
        let mut report = TickReport { wake_at: decided.wake_at, ..TickReport::default() };
        // The shard Leases as they are after this tick's writes.
        let mut after: BTreeMap<u32, ShardLease> = shards.into_iter().map(|l| (l.index, l)).collect();
        // Shard Leases whose write conflicted: another replica wrote them since the LIST (it
        // took them, expired or left), so what was read says nothing about them any more.
        let mut lost = std::collections::BTreeSet::new();
        let by_name: BTreeMap<&str, &Lease> =
            leases.iter().filter_map(|l| Some((l.metadata.name.as_deref()?, l))).collect();
        for action in &decided.actions {
            match action {
                LeaseAction::RenewMember => {
                    let name = self.names.member(&self.me);
                    let lease =
                        self.lease(&name, ROLE_MEMBER, Some(now), by_name.get(name.as_str()).copied());
                    match self.write(&name, lease).await? {
                        Some(written) => {
                            self.last_renewal = Some(now);
                            self.member = Some(written);
                        }
                        None => report.conflicts += 1,
                    }
                }
                LeaseAction::Take { shard, .. }
                | LeaseAction::Renew { shard, .. }
                | LeaseAction::Free { shard, .. } => {
                    let name = self.names.shard(*shard);
                    let old = by_name.get(name.as_str()).copied();
                    let holding = !matches!(action, LeaseAction::Free { .. });
                    let mut lease = self.lease(&name, ROLE_SHARD, holding.then_some(now), old);
                    if matches!(action, LeaseAction::Take { .. })
                        && let Some(spec) = lease.spec.as_mut()
                    {
                        spec.acquire_time = Some(MicroTime(now));
                        spec.lease_transitions =
                            Some(old.and_then(|o| o.spec.as_ref()?.lease_transitions).unwrap_or(0) + 1);
                    }
                    match self.write(&name, lease).await? {
                        Some(written) => {
                            if let Some(l) = shard_lease(&self.names, &written) {
                                after.insert(l.index, l);
                            }
                            match action {
                                LeaseAction::Take { .. } => report.taken.push(*shard),
                                LeaseAction::Free { .. } => report.freed.push(*shard),
                                _ => {}
                            }
                        }
                        None => {
                            report.conflicts += 1;
                            lost.insert(*shard);
                        }
                    }
                }
                LeaseAction::DeleteMember { id, resource_version } => {
                    // Conditioned on what was read: a member that renewed since keeps its Lease.
                    let dp = DeleteParams {
                        preconditions: Some(kube::api::Preconditions {
                            resource_version: Some(resource_version.clone()),
                            uid: None,
                        }),
                        ..DeleteParams::default()
                    };
                    match self.api.delete(&self.names.member(id), &dp).await {
                        Ok(_) => report.members_deleted += 1,
                        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
                        Err(e) => return Err(e),
                    }
                }
            }
        }
        let after: Vec<ShardLease> = after.into_values().collect();
        let kept: Vec<ShardLease> = after.iter().filter(|l| !lost.contains(&l.index)).cloned().collect();
        let owned = ShardOwnership::of(&self.settings, &self.me, self.last_renewal, &kept, &decided.wanted);
        let mut live = decided.live.clone();
        live.sort();
        self.snapshot.send_replace(Snapshot {
            me: self.me.clone(),
            at: Some(now),
            shards: self.settings.shards.count(),
            live,
            owners: self
                .settings
                .shards
                .all()
                .map(|i| {
                    (i, after.iter().find(|l| l.index == i).and_then(|l| l.holder().map(str::to_string)))
                })
                .collect(),
            owned: owned.at(now).into_iter().collect(),
        });
        // A change is a change of the held set (takes and frees): it restarts the shard-scoped
        // watches and re-enqueues every held object. A lapse is not one: the watches keep what
        // is held, and the reconcile gate retries what it stopped (context.rs `not_ours`).
        // Lapses are counted at the moment of publishing: a slow tick can outlive the renew
        // deadline of the set it replaces.
        let published = Timestamp::now();
        report.changed = self.owned.send_if_modified(|o| {
            report.lapsed = o.at(now).len().saturating_sub(o.at(published).len());
            let changed = o.held() != owned.held();
            *o = owned;
            changed
        });
        Ok(report)
    }

    /// Leaves (shutdown): deletes this replica's member Lease, then frees every shard Lease it
    /// holds, so another replica takes them at its next tick (nudged by the free) instead of
    /// waiting out the lease duration. The member Lease goes first: while it reads live, the
    /// others' assignment still gives this replica its share (coordinator.rs `live_members`),
    /// and a freed shard would stay untaken until the member Lease expired — measured in a
    /// rolling `helm upgrade` (tests/tests/chart_upgrade.rs): 30 s without a reconcile of
    /// those shards.
    pub async fn free_all(&mut self) -> Result<usize, kube::Error> {
        self.owned.send_replace(ShardOwnership::default());
        match self.api.delete(&self.names.member(&self.me), &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e),
        }
        self.member = None;
        let lp = ListParams::default()
            .labels(&format!("{LABEL_COMPONENT}={},{LABEL_ROLE}={ROLE_SHARD}", self.names.group()));
        let mut freed = 0;
        for l in self.api.list(&lp).await?.items {
            let holder = l.spec.as_ref().and_then(|s| s.holder_identity.as_deref());
            let Some(name) = l.metadata.name.clone() else { continue };
            if holder != Some(self.me.as_str()) {
                continue;
            }
            let lease = self.lease(&name, ROLE_SHARD, None, Some(&l));
            if self.write(&name, lease).await?.is_some() {
                freed += 1;
            }
        }
        Ok(freed)
    }

    /// The Lease to write: held by us (renewed at `renewed`) or free (`None`), carrying the
    /// resourceVersion of `old` so the write fails if it changed since it was read.
    fn lease(&self, name: &str, role: &str, renewed: Option<Timestamp>, old: Option<&Lease>) -> Lease {
        let duration = i32::try_from(self.settings.lease_duration.as_secs()).unwrap_or(i32::MAX);
        let old_spec = old.and_then(|o| o.spec.clone()).unwrap_or_default();
        Lease {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                resource_version: old.and_then(|o| o.metadata.resource_version.clone()),
                labels: Some(BTreeMap::from([
                    (LABEL_COMPONENT.to_string(), self.names.group().to_string()),
                    (LABEL_ROLE.to_string(), role.to_string()),
                    (dco_api::LABEL_MANAGED_BY.to_string(), dco_api::MANAGED_BY.to_string()),
                ])),
                owner_references: self
                    .pod
                    .as_ref()
                    .filter(|_| role == ROLE_MEMBER)
                    .map(|p| vec![p.owner_reference()]),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: renewed.map(|_| self.me.clone()),
                lease_duration_seconds: Some(duration),
                renew_time: renewed.map(MicroTime),
                acquire_time: renewed.and(old_spec.acquire_time),
                lease_transitions: old_spec.lease_transitions,
                ..LeaseSpec::default()
            }),
        }
    }

    /// Creates the Lease, or replaces it at the resourceVersion it carries. `None` when
    /// another replica got there first (409: a changed resourceVersion, or it exists).
    async fn write(&self, name: &str, lease: Lease) -> Result<Option<Lease>, kube::Error> {
        let pp = PostParams {
            field_manager: Some(crate::names::FIELD_MANAGER.to_string()),
            ..PostParams::default()
        };
        let result = if lease.metadata.resource_version.is_some() {
            self.api.replace(name, &pp, &lease).await
        } else {
            self.api.create(&pp, &lease).await
        };
        match result {
            Ok(l) => Ok(Some(l)),
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// The member and shard Leases among `leases`, by role label and name.
pub(super) fn read(names: &LeaseNames, leases: &[Lease]) -> (Vec<MemberLease>, Vec<ShardLease>) {
    let mut members = Vec::new();
    let mut shards = Vec::new();
    for l in leases {
        let role = l.metadata.labels.as_ref().and_then(|m| m.get(LABEL_ROLE)).map(String::as_str);
        match role {
            Some(ROLE_MEMBER) => {
                let Some(name) = l.metadata.name.as_deref() else { continue };
                let Some(id) = names.member_id(name) else { continue };
                let renewed = l.spec.as_ref().and_then(|s| s.renew_time.as_ref()).map(|t| t.0);
                let resource_version = l.metadata.resource_version.clone().unwrap_or_default();
                let joined = l.metadata.creation_timestamp.as_ref().map(|t| t.0);
                members.push(MemberLease { id: id.to_string(), renewed, joined, resource_version });
            }
            Some(ROLE_SHARD) => shards.extend(shard_lease(names, l)),
            _ => {}
        }
    }
    (members, shards)
}

pub(super) fn shard_lease(names: &LeaseNames, l: &Lease) -> Option<ShardLease> {
    let index = names.shard_index(l.metadata.name.as_deref()?)?;
    let spec = l.spec.clone().unwrap_or_default();
    Some(ShardLease {
        index,
        holder: spec.holder_identity,
        renewed: spec.renew_time.map(|t| t.0),
        duration: SignedDuration::from_secs(i64::from(spec.lease_duration_seconds.unwrap_or(0))),
        resource_version: l.metadata.resource_version.clone().unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sharding::shard::Shards;
    use crate::testing::mock_client;
    use http::{Method, StatusCode};
    use serde_json::json;

    const NS: &str = "dco-system";
    const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/dco-system/leases";

    fn settings(shards: u32) -> CoordinatorSettings {
        CoordinatorSettings::new(
            Shards::new(shards).unwrap(),
            SignedDuration::from_secs(30),
            SignedDuration::from_secs(10),
        )
    }

    fn list(items: Vec<serde_json::Value>) -> serde_json::Value {
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "LeaseList", "metadata": {"resourceVersion": "10"}, "items": items})
    }

    fn conflict() -> serde_json::Value {
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Conflict", "code": 409, "message": "the object has been modified"})
    }

    /// A fresh replica alone: it creates its member Lease and every shard Lease, labelled and
    /// held by it, and then owns every shard.
    #[tokio::test]
    async fn a_lone_replica_creates_its_leases_and_owns_every_shard() {
        let (client, mut api) = mock_client();
        let pod = PodRef { name: "op-a".into(), uid: "0b5e6c1e-3f0a-4d7e-9a53-5c2a1f0d9e11".into() };
        let mut m =
            Membership::new(Api::namespaced(client, NS), settings(2), "op-a".into()).with_pod(Some(pod));
        let owned = m.owned();
        let now = Timestamp::now();
        let tick = tokio::spawn(async move { (m.tick(now).await, m) });

        let x = api.expect(Method::GET, LEASES).await;
        assert!(x.query.contains("labelSelector=sharding.dco.rs%2Fcomponent%3Ddco-operator"), "{}", x.query);
        x.ok(&list(vec![]));
        for name in ["dco-operator-member-op-a", "dco-operator-shard-0", "dco-operator-shard-1"] {
            let x = api.expect(Method::POST, LEASES).await;
            assert_eq!(x.body["metadata"]["name"], name);
            // The member Lease is the Pod's, for the garbage collector; shard Leases outlive it.
            let owners = &x.body["metadata"]["ownerReferences"];
            if name.contains("member") {
                assert_eq!(
                    owners,
                    &json!([{"apiVersion": "v1", "kind": "Pod", "name": "op-a", "uid": "0b5e6c1e-3f0a-4d7e-9a53-5c2a1f0d9e11"}])
                );
            } else {
                assert!(owners.is_null(), "{name}: {owners}");
            }
            assert_eq!(x.body["spec"]["holderIdentity"], "op-a");
            assert_eq!(x.body["spec"]["leaseDurationSeconds"], 30);
            assert_eq!(x.body["metadata"]["labels"]["sharding.dco.rs/component"], "dco-operator");
            let mut written = x.body.clone();
            written["metadata"]["resourceVersion"] = json!("11");
            x.ok(&written);
        }
        let (report, _m) = tick.await.unwrap();
        let report = report.unwrap();
        assert_eq!((report.taken, report.changed), (vec![0, 1], true));
        assert_eq!(owned.borrow().at(now), [0, 1].into());
    }

    /// A take another replica won (409) is not owned; the tick reports the conflict and does
    /// not fail.
    #[tokio::test]
    async fn a_lost_take_is_not_owned() {
        let (client, mut api) = mock_client();
        let mut m = Membership::new(Api::namespaced(client, NS), settings(1), "op-a".into());
        let now = Timestamp::now();
        let tick = tokio::spawn(async move { (m.tick(now).await, m) });
        api.expect(Method::GET, LEASES).await.ok(&list(vec![]));
        let x = api.expect(Method::POST, LEASES).await;
        let b = x.body.clone();
        x.ok(&b);
        api.expect(Method::POST, LEASES).await.reply(StatusCode::CONFLICT, &conflict());
        let (report, m) = tick.await.unwrap();
        let report = report.unwrap();
        assert_eq!((report.taken.len(), report.conflicts, report.changed), (0, 1, false));
        assert!(m.owned().borrow().at(now).is_empty());
    }

    /// A shard held by a live other replica is left alone until it expires; a replica gone
    /// for 10 lease durations has its member Lease deleted.
    #[tokio::test]
    async fn a_live_holder_keeps_its_shard_and_a_long_gone_member_is_deleted() {
        let (client, mut api) = mock_client();
        let mut m = Membership::new(Api::namespaced(client, NS), settings(1), "op-a".into());
        let now = Timestamp::now();
        let ts = |t: Timestamp| json!(t.to_string());
        let lease = |name: &str, role: &str, holder: &str, renewed: Timestamp| {
            json!({"metadata": {"name": name, "resourceVersion": "5",
                "labels": {"sharding.dco.rs/component": "dco-operator", "sharding.dco.rs/role": role}},
                "spec": {"holderIdentity": holder, "leaseDurationSeconds": 30, "renewTime": ts(renewed)}})
        };
        let tick = tokio::spawn(async move { (m.tick(now).await, m) });
        api.expect(Method::GET, LEASES).await.ok(&list(vec![
            lease("dco-operator-member-op-b", "member", "op-b", now - SignedDuration::from_secs(2)),
            lease("dco-operator-member-op-gone", "member", "op-gone", now - SignedDuration::from_secs(600)),
            lease("dco-operator-shard-0", "shard", "op-b", now - SignedDuration::from_secs(2)),
        ]));
        // Renew its member Lease; the shard stays op-b's; op-gone's member Lease goes.
        let x = api.expect(Method::POST, LEASES).await;
        assert_eq!(x.body["metadata"]["name"], "dco-operator-member-op-a");
        let b = x.body.clone();
        x.ok(&b);
        let x = api.expect(Method::DELETE, &format!("{LEASES}/dco-operator-member-op-gone")).await;
        // Only as read: had op-gone renewed since, the delete would conflict.
        assert_eq!(x.body["preconditions"]["resourceVersion"], "5", "{}", x.body);
        x.ok(&json!({"kind": "Status", "apiVersion": "v1", "status": "Success"}));
        let (report, m) = tick.await.unwrap();
        let report = report.unwrap();
        assert_eq!((report.taken.len(), report.members_deleted), (0, 1));
        assert!(m.owned().borrow().at(now).is_empty());
    }
    /// Leaving: the member Lease is deleted before the shard Leases are freed, and only this
    /// replica's shards are freed. Then the survivor, reading the Leases as they are after it,
    /// takes the freed shards at its next tick rather than when the member Lease would expire.
    #[tokio::test]
    async fn leaving_deletes_the_member_lease_first_and_the_survivor_takes_the_shards_at_once() {
        let now = Timestamp::now();
        let ts = |t: Timestamp| json!(t.to_string());
        let lease = |name: &str, role: &str, holder: Option<&str>, renewed: Option<Timestamp>| {
            json!({"metadata": {"name": name, "resourceVersion": "5",
                "labels": {"sharding.dco.rs/component": "dco-operator", "sharding.dco.rs/role": role}},
                "spec": {"holderIdentity": holder, "leaseDurationSeconds": 30, "renewTime": renewed.map(ts)}})
        };
        let recent = Some(now - SignedDuration::from_secs(1));
        let (client, mut api) = mock_client();
        let mut m = Membership::new(Api::namespaced(client, NS), settings(2), "op-a".into());
        let leave = tokio::spawn(async move { m.free_all().await });
        api.expect(Method::DELETE, &format!("{LEASES}/dco-operator-member-op-a"))
            .await
            .ok(&json!({"kind": "Status", "apiVersion": "v1", "status": "Success"}));
        let x = api.expect(Method::GET, LEASES).await;
        assert!(x.query.contains("sharding.dco.rs%2Frole%3Dshard"), "{}", x.query);
        x.ok(&list(vec![
            lease("dco-operator-shard-0", "shard", Some("op-a"), recent),
            lease("dco-operator-shard-1", "shard", Some("op-b"), recent),
        ]));
        let x = api.expect(Method::PUT, &format!("{LEASES}/dco-operator-shard-0")).await;
        assert_eq!(x.body["spec"]["holderIdentity"], json!(null), "freed: {}", x.body);
        assert_eq!(x.body["metadata"]["resourceVersion"], "5");
        let b = x.body.clone();
        x.ok(&b);
        assert_eq!(leave.await.unwrap().unwrap(), 1);

        let (client, mut api) = mock_client();
        let mut b = Membership::new(Api::namespaced(client, NS), settings(2), "op-b".into());
        let tick = tokio::spawn(async move { (b.tick(now).await, b) });
        api.expect(Method::GET, LEASES).await.ok(&list(vec![
            lease("dco-operator-member-op-b", "member", Some("op-b"), recent),
            lease("dco-operator-shard-0", "shard", None, None),
            lease("dco-operator-shard-1", "shard", Some("op-b"), recent),
        ]));
        for name in ["dco-operator-member-op-b", "dco-operator-shard-0", "dco-operator-shard-1"] {
            let x = api.expect(Method::PUT, &format!("{LEASES}/{name}")).await;
            assert_eq!(x.body["spec"]["holderIdentity"], "op-b", "{name}");
            let b = x.body.clone();
            x.ok(&b);
        }
        let (report, b) = tick.await.unwrap();
        assert_eq!(report.unwrap().taken, vec![0]);
        assert_eq!(b.owned().borrow().at(now), [0, 1].into());
    }

    #[test]
    fn each_selector_has_lease_names_of_its_own() {
        let (none, a, b) = (
            LeaseNames::for_selector(None),
            LeaseNames::for_selector(Some("team=a")),
            LeaseNames::for_selector(Some("team=b")),
        );
        assert_eq!(none, LeaseNames::for_selector(Some(" ")));
        assert_eq!(
            (none.member("op-a").as_str(), none.shard(7).as_str()),
            ("dco-operator-member-op-a", "dco-operator-shard-7")
        );
        assert_eq!(a.group(), format!("dco-operator-{}", selector_hash("team=a")));
        assert_ne!(a.group(), b.group());
        assert_eq!(a.member_id(&a.member("op-1")), Some("op-1"));
        assert_eq!(a.shard_index(&a.shard(31)), Some(31));
        // The names of one group never read as another's.
        assert_eq!(none.member_id(&a.member("op-1")), None);
        assert_eq!(none.shard_index(&a.shard(3)), None);
        assert_eq!(a.shard_index(&b.shard(3)), None);
        assert_eq!(a.shard_index(&format!("{}-shard-x", a.group())), None);
    }

    #[test]
    fn only_a_pod_in_the_lease_namespace_owns_the_member_lease() {
        let uid = "0b5e6c1e-3f0a-4d7e-9a53-5c2a1f0d9e11";
        assert_eq!(
            PodRef::of(Some("op-a"), Some("dco-system"), Some(uid), "dco-system"),
            Some(PodRef { name: "op-a".into(), uid: uid.into() })
        );
        // An ownerReference names an owner in the Lease's own namespace: elsewhere the
        // collector would find no such Pod and delete the Lease of a running replica.
        assert_eq!(PodRef::of(Some("op-a"), Some("dco-system"), Some(uid), "leases"), None);
        assert_eq!(PodRef::of(Some("op-a"), Some("dco-system"), None, "dco-system"), None);
        assert_eq!(PodRef::of(Some(" "), Some("dco-system"), Some(uid), "dco-system"), None);
        assert_eq!(PodRef::of(None, None, None, "dco-system"), None, "not in a Pod: local processes");
    }
}

//! Which TDSets a watched object's change reconciles: the mappers of the controller's
//! watches (targets, owned Deployments, HPAs, the operator's slices).

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};

use crate::api::TDSet;
use crate::cache::{Cached, TDSetRef};
use crate::controller::io::target::hpa_view;
use crate::controller::state::{GroupIndex, TargetIndex, Wakeups};
use crate::memo::OwnWrites;
use crate::workload::intercept;

/// How long the groups a workload's change concerns only for their counts wait, so that a
/// burst of such changes (`kubectl label --all`) reconciles each of them about once.
const COUNTS_SETTLE: Duration = Duration::from_secs(5);

/// What a workload watch's mapper reads besides the object.
#[derive(Clone)]
pub(super) struct TargetRouting {
    pub index: TargetIndex,
    pub groups: GroupIndex,
    pub hpas: Store<HorizontalPodAutoscaler>,
    pub own_writes: Arc<OwnWrites>,
    pub wakeups: Arc<Wakeups>,
    /// The TDSets this operator (or shard) reconciles: only they are woken later.
    pub tdsets: Store<Cached<TDSet>>,
}

/// Maps a change of a built-in scalable object to the TDSets that reference it, directly or
/// through an HPA that scales it, and to the groups that select it or carry its record.
pub(super) fn on_target<K: Resource<DynamicType = ()>>(
    routing: &TargetRouting,
) -> impl Fn(PartialObjectMeta<K>) -> Vec<TDSetRef> + Send + Sync + 'static {
    let TargetRouting {
        index,
        groups,
        hpas,
        own_writes,
        wakeups,
        tdsets,
    } = routing.clone();
    move |o| {
        let ns = o.namespace().unwrap_or_default();
        let (group, kind) = (K::group(&()), K::kind(&()));
        // Our own `/scale` write coming back: the TDSet that made it knows, and nobody else
        // is concerned (a second reconcile per target at a boundary, each reading it live).
        // Also after a relist: an object still at the revision we produced has not changed
        // since we wrote it, so the watch missed nothing of it.
        let key = OwnWrites::target_key(&ns, &group, &kind, &o.name_any());
        if own_writes.seen(&key, o.metadata.resource_version.as_deref()) {
            return Vec::new();
        }
        let mut out = affected(&index, &hpas, &ns, &group, &kind, &o.name_any());
        // The Deployment controller copies a Deployment's annotations, a group's record
        // included, to its ReplicaSets, and never takes them off: a ReplicaSet is its
        // Deployment's, never a group's, and its changes must not wake a former holder.
        if copies_its_deployment(&o) {
            return out;
        }
        let generation = o.metadata.generation;
        let key = (ns.as_str(), group.as_ref(), kind.as_ref(), o.name_any());
        let groups = groups.affected(
            (key.0, key.1, key.2, key.3.as_str()),
            generation,
            o.labels(),
            o.annotations(),
        );
        let later = tokio::time::Instant::now() + COUNTS_SETTLE;
        for r in groups.soon.iter().filter(|r| tdsets.get(r).is_some()) {
            wakeups.set(&ns, &r.name, later);
        }
        out.extend(groups.now);
        out
    }
}

/// Whether an object is controlled by a Deployment (a ReplicaSet), whose annotations it
/// copies.
fn copies_its_deployment<K: Resource>(o: &K) -> bool {
    o.owner_references()
        .iter()
        .any(|r| r.controller == Some(true) && r.kind == "Deployment" && r.api_version == "apps/v1")
}

/// Maps a change of an owned Deployment to its TDSet, and to any TDSet that references it
/// (the target watches leave owned objects out, see `target_watch`).
pub(super) fn on_owned_deployment(
    index: &TargetIndex,
    hpas: &Store<HorizontalPodAutoscaler>,
) -> impl Fn(Cached<Deployment>) -> Vec<TDSetRef> + Send + Sync + use<> {
    let (index, hpas) = (index.clone(), hpas.clone());
    move |d| {
        let ns = d.namespace();
        let mut out: Vec<TDSetRef> = d
            .owner_references()
            .iter()
            .filter_map(|o| ObjectRef::from_owner_ref(ns.as_deref(), o, ()))
            .collect();
        out.extend(affected(
            &index,
            &hpas,
            ns.as_deref().unwrap_or_default(),
            &Deployment::group(&()),
            &Deployment::kind(&()),
            &d.name_any(),
        ));
        out
    }
}

/// The TDSets to reconcile when a watched object changes: those that reference it, and, for
/// a workload an HPA scales, those that reference that HPA.
fn affected(
    ctx_index: &TargetIndex,
    hpas: &kube::runtime::reflector::Store<HorizontalPodAutoscaler>,
    ns: &str,
    group: &str,
    kind: &str,
    name: &str,
) -> Vec<TDSetRef> {
    let mut out = ctx_index.lookup(ns, group, kind, name);
    for h in hpas.state() {
        if h.namespace().as_deref() != Some(ns) {
            continue;
        }
        if let Some(v) = hpa_view(&h)
            && v.target.kind == kind
            && v.target.name == name
            && v.target.group() == group
        {
            out.extend(ctx_index.lookup(ns, "autoscaling", "HorizontalPodAutoscaler", &v.name));
        }
    }
    out
}

/// Maps a change of an HPA to the TDSets that reference it or the workload it scales.
pub(super) fn on_hpa(
    index: &TargetIndex,
) -> impl Fn(HorizontalPodAutoscaler) -> Vec<TDSetRef> + Send + Sync + 'static {
    let index = index.clone();
    move |h| {
        let ns = h.namespace().unwrap_or_default();
        let mut out = index.lookup(&ns, "autoscaling", "HorizontalPodAutoscaler", &h.name_any());
        if let Some(v) = hpa_view(&h) {
            out.extend(index.lookup(&ns, v.target.group(), &v.target.kind, &v.target.name));
        }
        out
    }
}

/// The TDSet a slice of the operator's names (and owns): a slice changed or deleted by
/// someone else is put back by its reconcile.
pub(super) fn on_wake_slice(s: EndpointSlice) -> Option<TDSetRef> {
    let tdset = s.labels().get(intercept::TDSET_LABEL).cloned();
    tdset.map(|t| ObjectRef::new(&t).within(&s.namespace().unwrap_or_default()))
}

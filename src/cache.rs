//! What the operator's caches keep of the objects it watches.
//!
//! At 10 000 TDSets the caches were most of the operator's memory (see BENCHMARKS.md). Two
//! things cut them down: objects are pruned to what a reconcile reads (`Prune`), and TDSets
//! and owned objects are kept as compact JSON rather than as structs (`Cached`), whose
//! mostly-`None` fields still take their full size: 2.4 KiB for a `Deployment` and another
//! 2.1 KiB for each `Container`, before any of their contents; a TDSet's status with its
//! three conditions is about 1 KiB as structs and strings, 0.7 KiB as JSON.
//!
//! What the operator wrote and the caches do not show yet is in `memo.rs`.

use std::fmt;
use std::marker::PhantomData;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::{Container, PodSpec, Service, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::api::{TDSet, TDSetStatus};
use crate::error::{Error, Result};
use crate::workload::owned::TEMPLATE_LABEL;

/// Drops what the operator never reads: managedFields, annotations, server defaults and
/// status conditions, which are most of an object's size.
pub trait Prune {
    fn prune(&mut self);
}

/// Whether a TDSet controls the object (its ownerReference, which a tenant can only point
/// at a TDSet of their own namespace). The watches select owned objects by label, and any
/// tenant can set a label: an object a TDSet does not control is cached as its metadata
/// alone, so labelling Deployments cannot make the operator hold their pod specs.
fn controlled_by_a_tdset(m: &ObjectMeta) -> bool {
    m.owner_references.iter().flatten().any(|o| {
        o.controller == Some(true) && o.kind == "TDSet" && o.api_version.starts_with("schedule.rs/")
    })
}

fn prune_meta(m: &mut ObjectMeta) {
    m.managed_fields = None;
    m.annotations = None;
    m.creation_timestamp = None;
}

impl Prune for Deployment {
    fn prune(&mut self) {
        // A `template` Deployment is compared field by field with the user's pod template, so
        // its cache keeps the whole template; a `container` one needs only image and ports.
        let full_template = self
            .metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.contains_key(TEMPLATE_LABEL));
        prune_meta(&mut self.metadata);
        if !controlled_by_a_tdset(&self.metadata) {
            (self.spec, self.status) = (None, None);
            return;
        }
        if let Some(spec) = self.spec.as_mut() {
            spec.strategy = None;
            spec.revision_history_limit = None;
            spec.progress_deadline_seconds = None;
            spec.min_ready_seconds = None;
            if let Some(m) = spec.template.metadata.as_mut() {
                prune_meta(m);
            }
            if let Some(pod) = spec.template.spec.as_mut().filter(|_| !full_template) {
                let containers = std::mem::take(&mut pod.containers)
                    .into_iter()
                    .map(|c| Container {
                        name: c.name,
                        image: c.image,
                        ports: c.ports,
                        ..Container::default()
                    })
                    .collect();
                *pod = PodSpec {
                    containers,
                    ..PodSpec::default()
                };
            }
        }
        if let Some(status) = self.status.as_mut() {
            status.conditions = None;
            status.collision_count = None;
        }
    }
}

impl Prune for Service {
    fn prune(&mut self) {
        prune_meta(&mut self.metadata);
        if !controlled_by_a_tdset(&self.metadata) {
            (self.spec, self.status) = (None, None);
            return;
        }
        if let Some(spec) = self.spec.take() {
            self.spec = Some(ServiceSpec {
                type_: spec.type_,
                selector: spec.selector,
                ports: spec.ports,
                ..ServiceSpec::default()
            });
        }
        self.status = None;
    }
}

impl Prune for HorizontalPodAutoscaler {
    fn prune(&mut self) {
        prune_meta(&mut self.metadata);
        self.metadata.labels = None;
        if let Some(spec) = self.spec.as_mut() {
            spec.metrics = None;
            spec.behavior = None;
        }
        if let Some(status) = self.status.as_mut() {
            status.conditions = None;
            status.current_metrics = None;
        }
    }
}

/// Labels stay: a shard reads them to know whether it still takes the TDSet. (An operator that
/// is not a shard drops them before they reach the cache, see `watches::route`.)
impl Prune for TDSet {
    fn prune(&mut self) {
        // Its creationTimestamp is its claim on what it selects (the oldest claim holds):
        // a reconcile reads it from the cached spec it runs on, never from an index that
        // may have moved past that spec.
        let created = self.metadata.creation_timestamp.take();
        prune_meta(&mut self.metadata);
        self.metadata.creation_timestamp = created;
    }
}

/// A pruned owned object as its cache keeps it. Identity and ownership stay typed, because
/// the controller maps each event to the owning TDSet through them; everything else is one
/// JSON string, decoded only when a reconcile of that TDSet reads it.
pub struct Cached<K> {
    metadata: ObjectMeta,
    rest: Box<str>,
    kind: PhantomData<fn() -> K>,
}

impl<K> Cached<K>
where
    K: Resource + Prune + Serialize + DeserializeOwned,
{
    pub fn new(mut obj: K) -> Self {
        obj.prune();
        let m = obj.meta_mut();
        let metadata = ObjectMeta {
            name: m.name.take(),
            namespace: m.namespace.take(),
            uid: m.uid.take(),
            resource_version: m.resource_version.take(),
            generation: m.generation.take(),
            deletion_timestamp: m.deletion_timestamp.take(),
            creation_timestamp: m.creation_timestamp.take(),
            owner_references: m.owner_references.take(),
            ..ObjectMeta::default()
        };
        // Serialising a k8s-openapi struct does not fail; should it ever, `object` reports it.
        let rest = serde_json::to_string(&obj).unwrap_or_default().into();
        Cached {
            metadata,
            rest,
            kind: PhantomData,
        }
    }

    /// The pruned object, whole again.
    pub fn object(&self) -> Result<K> {
        let mut obj: K = serde_json::from_str(&self.rest).map_err(|source| Error::Serialize {
            what: "a cached object",
            source,
        })?;
        let m = obj.meta_mut();
        m.name.clone_from(&self.metadata.name);
        m.namespace.clone_from(&self.metadata.namespace);
        m.uid.clone_from(&self.metadata.uid);
        m.resource_version
            .clone_from(&self.metadata.resource_version);
        m.generation = self.metadata.generation;
        m.deletion_timestamp
            .clone_from(&self.metadata.deletion_timestamp);
        m.creation_timestamp
            .clone_from(&self.metadata.creation_timestamp);
        m.owner_references
            .clone_from(&self.metadata.owner_references);
        Ok(obj)
    }
}

impl Cached<TDSet> {
    /// Only the status, for the per-TDSet metrics: decoding it skips the spec.
    pub fn status(&self) -> Option<TDSetStatus> {
        #[derive(serde::Deserialize)]
        struct StatusOnly {
            status: Option<TDSetStatus>,
        }
        serde_json::from_str::<StatusOnly>(&self.rest)
            .ok()
            .and_then(|s| s.status)
    }
}

/// kube-runtime's controller asks that what it reconciles can be decoded; a `Cached` object
/// decodes as its kind and is then pruned and compacted like one from the watch.
impl<'de, K> serde::Deserialize<'de> for Cached<K>
where
    K: Resource + Prune + Serialize + DeserializeOwned,
{
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        K::deserialize(d).map(Cached::new)
    }
}

// Written by hand: derives would require `K: Clone` / `K: Debug`, which `Cached` does not hold.
impl<K> Clone for Cached<K> {
    fn clone(&self) -> Self {
        Cached {
            metadata: self.metadata.clone(),
            rest: self.rest.clone(),
            kind: PhantomData,
        }
    }
}

impl<K> fmt::Debug for Cached<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cached")
            .field("metadata", &self.metadata)
            .field("rest", &self.rest)
            .finish()
    }
}

/// The cache of `K` is addressed like `K` itself (same kind, group and plural), so store
/// lookups and owner mapping work unchanged.
/// How the controller names a TDSet: it reconciles the cached form (see `Cached`).
pub type TDSetRef = kube::runtime::reflector::ObjectRef<Cached<TDSet>>;

/// The name alone (no uid or resourceVersion), of a TDSet or its cached form.
pub fn tdset_ref(tdset: &impl Resource) -> TDSetRef {
    use kube::ResourceExt;
    tdset_ref_named(&tdset.namespace().unwrap_or_default(), &tdset.name_any())
}

pub fn tdset_ref_named(namespace: &str, name: &str) -> TDSetRef {
    kube::runtime::reflector::ObjectRef::new(name).within(namespace)
}

impl<K: Resource> Resource for Cached<K> {
    type DynamicType = K::DynamicType;
    type Scope = K::Scope;

    fn kind(dt: &Self::DynamicType) -> std::borrow::Cow<'_, str> {
        K::kind(dt)
    }
    fn group(dt: &Self::DynamicType) -> std::borrow::Cow<'_, str> {
        K::group(dt)
    }
    fn version(dt: &Self::DynamicType) -> std::borrow::Cow<'_, str> {
        K::version(dt)
    }
    fn plural(dt: &Self::DynamicType) -> std::borrow::Cow<'_, str> {
        K::plural(dt)
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::workload::owned::tests::{container_mut, tdset};
    use crate::workload::owned::{
        desired_deployment, desired_service, is_owned_by, is_satisfied_by,
    };

    fn served(mut d: Deployment) -> Deployment {
        // What the API server adds.
        d.metadata.uid = Some("d-uid".into());
        d.metadata.resource_version = Some("42".into());
        d.metadata.generation = Some(3);
        d.metadata.annotations = Some(BTreeMap::from([(
            "deployment.kubernetes.io/revision".into(),
            "1".into(),
        )]));
        d.spec
            .as_mut()
            .unwrap()
            .template
            .spec
            .as_mut()
            .unwrap()
            .dns_policy = Some("ClusterFirst".into());
        container_mut(&mut d).image_pull_policy = Some("Always".into());
        d
    }

    #[test]
    fn a_pruned_deployment_still_satisfies_and_still_detects_drift() {
        let t = tdset("web");
        let desired = desired_deployment(&t, 3).unwrap().unwrap();
        let mut observed = served(desired.clone());
        observed.prune();
        assert!(is_satisfied_by(&desired, &observed));
        assert!(is_owned_by(&observed, &t));
        observed.spec.as_mut().unwrap().replicas = Some(9);
        assert!(!is_satisfied_by(&desired, &observed));
    }

    #[test]
    fn a_cached_object_comes_back_as_the_pruned_object() {
        let t = tdset("web");
        let desired = desired_deployment(&t, 3).unwrap().unwrap();
        let observed = served(desired.clone());
        let cached = Cached::new(observed.clone());
        assert!(
            is_owned_by(&cached, &t),
            "ownership is read without decoding"
        );
        assert_eq!(cached.meta().uid.as_deref(), Some("d-uid"));
        let back = cached.object().unwrap();
        let mut pruned = observed;
        pruned.prune();
        assert_eq!(back, pruned);
        assert!(is_satisfied_by(&desired, &back));
        let mut drifted = back.clone();
        container_mut(&mut drifted).image = Some("evil".into());
        assert!(!is_satisfied_by(
            &desired,
            &Cached::new(drifted).object().unwrap()
        ));

        let svc = desired_service(&t).unwrap().unwrap();
        assert_eq!(Cached::new(svc.clone()).object().unwrap(), svc);
    }

    #[test]
    fn a_labelled_deployment_no_tdset_controls_is_cached_as_metadata_only() {
        let t = tdset("web");
        let mut forged = served(desired_deployment(&t, 3).unwrap().unwrap());
        // The operator's labels, set by a tenant on a Deployment of their own.
        forged.metadata.owner_references = None;
        let cached = Cached::new(forged.clone()).object().unwrap();
        assert_eq!(cached.spec, None);
        assert_eq!(cached.status, None);
        assert_eq!(cached.metadata.labels, forged.metadata.labels);
        assert!(!is_owned_by(&cached, &t));
    }

    #[test]
    fn a_cached_tdset_keeps_its_finalizers_spec_and_status() {
        let mut t = tdset("web");
        t.metadata.uid = Some("t-uid".into());
        t.metadata.resource_version = Some("7".into());
        t.metadata.generation = Some(2);
        t.metadata.finalizers = Some(vec!["schedule.rs/restore".into()]);
        t.metadata.labels = Some(BTreeMap::from([("team".into(), "shop".into())]));
        t.status = Some(crate::api::TDSetStatus {
            desired_replicas: Some(3),
            next_transition_time: Some("2026-05-01T17:00:00Z".into()),
            conditions: vec![crate::api::Condition {
                type_: "Available".into(),
                status: "True".into(),
                reason: "Ready".into(),
                message: "3/3 replicas ready".into(),
                last_transition_time: "2026-05-01T09:00:00Z".into(),
                observed_generation: Some(2),
            }],
            ..Default::default()
        });
        let cached = Cached::new(t.clone());
        assert_eq!(cached.meta().generation, Some(2));
        assert_eq!(
            cached.status(),
            t.status,
            "the metrics read the status alone"
        );
        let mut pruned = t.clone();
        pruned.prune();
        let json = |t: &TDSet| serde_json::to_value(t).unwrap();
        assert_eq!(json(&cached.object().unwrap()), json(&pruned));
        assert!(pruned.metadata.finalizers.is_some() && pruned.metadata.labels.is_some());
        // As kube-runtime would decode it.
        let decoded: Cached<TDSet> =
            serde_json::from_value(serde_json::to_value(&t).unwrap()).unwrap();
        assert_eq!(json(&decoded.object().unwrap()), json(&pruned));
    }
}

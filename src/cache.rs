//! What the operator's caches keep of the objects it watches.
//!
//! At 10 000 TDSets the caches were most of the operator's memory (see BENCHMARKS.md). Two
//! things cut them down: objects are pruned to what a reconcile reads (`Prune`), and owned
//! objects are kept as compact JSON rather than as k8s-openapi structs (`Cached`), whose
//! mostly-`None` fields still take their full size: 2.4 KiB for a `Deployment` and another
//! 2.1 KiB for each `Container`, before any of their contents.
//!
//! `StatusMemo` lays the operator's own status writes over the TDSet cache until the watch
//! has delivered them.

use std::collections::HashMap;
use std::fmt;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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

impl Prune for TDSet {
    fn prune(&mut self) {
        prune_meta(&mut self.metadata);
        self.metadata.labels = None;
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
        m.owner_references
            .clone_from(&self.metadata.owner_references);
        Ok(obj)
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

/// The statuses this operator queued or wrote that its TDSet cache may not show yet ("read
/// your own writes"). A reconcile can run before the bookkeeping lane has sent its status, or
/// before the watch delivers it; computed from the stale status, the next status would differ
/// in its transition times, or lose what only status remembers (a target's original count),
/// and be written again.
#[derive(Default)]
pub struct StatusMemo {
    written: Mutex<HashMap<String, Written>>,
}

struct Written {
    /// resourceVersion the status write produced; `None` while it is queued. A queued status
    /// is the TDSet's status as far as this operator is concerned, whatever the cache shows:
    /// only the operator writes status.
    produced: Option<String>,
    /// Shared with the lane's queue: a burst of 10 000 statuses is held once.
    status: Arc<TDSetStatus>,
    at: Instant,
}

/// Whether the cached revision `cached` is older than `produced`. The API server's
/// resourceVersions are etcd revisions, which increase; should one not parse as a number,
/// the cache is taken as caught up (the memo then costs at most a repeated write).
fn older(cached: Option<&str>, produced: Option<&str>) -> bool {
    match (
        cached.and_then(|c| c.parse::<u64>().ok()),
        produced.and_then(|p| p.parse::<u64>().ok()),
    ) {
        (Some(c), Some(p)) => c < p,
        _ => false,
    }
}

impl StatusMemo {
    /// Bounds the memo; past it a stale cache costs a repeated write, nothing worse.
    const MAX: usize = 16384;
    /// Entries normally go once the cache catches up; this clears those of deleted TDSets.
    const MAX_AGE: Duration = Duration::from_secs(300);

    /// The TDSet's status as far as this operator knows: the one it queued, or the one it
    /// wrote while the cached TDSet is a revision from before that write.
    pub fn current(&self, tdset: &TDSet) -> Option<TDSetStatus> {
        let Some(uid) = tdset.meta().uid.as_deref() else {
            return tdset.status.clone();
        };
        let Ok(mut written) = self.written.lock() else {
            return tdset.status.clone();
        };
        let cached = tdset.meta().resource_version.as_deref();
        match written.get(uid) {
            Some(w) if w.produced.is_none() || older(cached, w.produced.as_deref()) => {
                return Some(TDSetStatus::clone(&w.status));
            }
            Some(_) => {
                written.remove(uid);
            }
            None => {}
        }
        tdset.status.clone()
    }

    /// Records a status queued for `tdset`.
    pub fn queued(&self, tdset: &TDSet, status: Arc<TDSetStatus>) {
        let (Some(uid), Ok(mut written)) = (tdset.meta().uid.clone(), self.written.lock()) else {
            return;
        };
        if written.len() >= Self::MAX {
            written.retain(|_, w| w.at.elapsed() < Self::MAX_AGE);
        }
        if written.len() < Self::MAX || written.contains_key(&uid) {
            written.insert(
                uid,
                Written {
                    produced: None,
                    status,
                    at: Instant::now(),
                },
            );
        }
    }

    /// A queued status has been written and produced revision `produced` (`None`: the TDSet
    /// is gone, or the write gave up). Kept only when it is still the status on record: a
    /// newer one queued meanwhile stays.
    pub fn written(&self, uid: &str, status: &TDSetStatus, produced: Option<String>) {
        let Ok(mut written) = self.written.lock() else {
            return;
        };
        match written.get_mut(uid) {
            Some(w) if *w.status == *status => match produced {
                Some(rv) => w.produced = Some(rv),
                None => {
                    written.remove(uid);
                }
            },
            _ => {}
        }
    }
}

/// The owned objects this operator wrote that its caches may not show yet. A reconcile that
/// runs before the watch delivers the operator's own write (queued by an older event of the
/// same object) would see the old replica count, write the same thing again and report a
/// second scale. While the cached object is older than our write and what we want has not
/// changed since, the write is known to be in place.
#[derive(Default)]
pub struct OwnWrites {
    written: Mutex<HashMap<String, OwnWrite>>,
}

struct OwnWrite {
    produced: u64,
    desired: u64,
    at: Instant,
}

impl OwnWrites {
    const MAX: usize = 16384;
    const MAX_AGE: Duration = Duration::from_secs(300);

    /// A fingerprint of what is wanted (the desired object, serialised).
    pub fn fingerprint<T: serde::Serialize>(desired: &T) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        serde_json::to_vec(desired).unwrap_or_default().hash(&mut h);
        h.finish()
    }

    /// Records that `key` was written as `desired` and produced revision `produced`.
    pub fn record(&self, key: &str, desired: u64, produced: Option<&str>) {
        let (Some(produced), Ok(mut w)) =
            (produced.and_then(|p| p.parse().ok()), self.written.lock())
        else {
            return;
        };
        if w.len() >= Self::MAX {
            w.retain(|_, e| e.at.elapsed() < Self::MAX_AGE);
        }
        if w.len() < Self::MAX || w.contains_key(key) {
            w.insert(
                key.to_string(),
                OwnWrite {
                    produced,
                    desired,
                    at: Instant::now(),
                },
            );
        }
    }

    /// Whether our write of exactly `desired` is newer than the cached revision `cached`.
    /// Forgets the entry once the cache has caught up.
    pub fn in_place(&self, key: &str, desired: u64, cached: Option<&str>) -> bool {
        let Ok(mut w) = self.written.lock() else {
            return false;
        };
        let Some(e) = w.get(key) else { return false };
        match cached.and_then(|c| c.parse::<u64>().ok()) {
            Some(c) if c < e.produced => e.desired == desired,
            _ => {
                w.remove(key);
                false
            }
        }
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

    const UID: &str = "memo-uid";

    fn at(rv: &str, status: Option<TDSetStatus>) -> TDSet {
        let mut t = tdset("web");
        t.metadata.resource_version = Some(rv.into());
        t.metadata.uid = Some(UID.into());
        t.status = status;
        t
    }

    #[test]
    fn status_memo_answers_for_a_stale_cache_and_forgets_once_it_catches_up() {
        let memo = StatusMemo::default();
        let ours = TDSetStatus {
            desired_replicas: Some(3),
            ..TDSetStatus::default()
        };
        assert_eq!(memo.current(&at("1", None)), None);
        memo.queued(&at("1", None), Arc::new(ours.clone()));
        // Queued: it is the status, whatever revision the cache holds (only we write status).
        assert_eq!(memo.current(&at("2", None)), Some(ours.clone()));
        memo.written(UID, &ours, Some("3".into()));
        // The cache still holds revision 1: the status is what we wrote over it.
        assert_eq!(memo.current(&at("1", None)), Some(ours.clone()));
        // Revision 2 is another write made before ours (3): still not our status.
        assert_eq!(memo.current(&at("2", None)), Some(ours.clone()));
        // The cache moved past our write: it is the truth again, whatever it says.
        let theirs = TDSetStatus {
            desired_replicas: Some(5),
            ..TDSetStatus::default()
        };
        assert_eq!(memo.current(&at("4", Some(theirs.clone()))), Some(theirs));
        // ... and the entry is gone, so a revision-1 object is no longer overlaid.
        assert_eq!(memo.current(&at("1", None)), None);
    }

    #[test]
    fn own_writes_answer_for_a_stale_cache_only_while_it_is_stale() {
        let w = OwnWrites::default();
        let want = OwnWrites::fingerprint(&serde_json::json!({"replicas": 4}));
        let other = OwnWrites::fingerprint(&serde_json::json!({"replicas": 5}));
        assert!(!w.in_place("ns/web", want, Some("10")));
        w.record("ns/web", want, Some("12"));
        assert!(
            w.in_place("ns/web", want, Some("10")),
            "cache older than our write"
        );
        assert!(
            !w.in_place("ns/web", other, Some("10")),
            "something else is wanted now"
        );
        assert!(
            !w.in_place("ns/web", want, Some("12")),
            "the cache caught up"
        );
        assert!(
            !w.in_place("ns/web", want, Some("10")),
            "and the entry is gone"
        );
    }

    #[test]
    fn a_newer_queued_status_survives_the_write_of_an_older_one() {
        let memo = StatusMemo::default();
        let (one, two) = (
            TDSetStatus {
                desired_replicas: Some(1),
                ..TDSetStatus::default()
            },
            TDSetStatus {
                desired_replicas: Some(2),
                ..TDSetStatus::default()
            },
        );
        memo.queued(&at("1", None), Arc::new(one.clone()));
        memo.queued(&at("1", None), Arc::new(two.clone()));
        memo.written(UID, &one, Some("5".into()));
        assert_eq!(
            memo.current(&at("9", None)),
            Some(two.clone()),
            "still queued"
        );
        // A TDSet that is gone: the entry goes.
        memo.written(UID, &two, None);
        assert_eq!(memo.current(&at("9", None)), None);
    }
}

//! Which TDSets reference which object: the claims of the `scaleTargetRef` form (the target
//! its spec names, and the one its status still records), who holds each object (the oldest
//! claim), and the original count each TDSet's status records. Fed by the TDSet watch (see
//! `watches::route`), read by the claims rule, the scale form and the group form.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, RwLock};

use kube::ResourceExt;

use crate::api::{TDSet, TargetStatus};
use crate::cache::{TDSetRef, tdset_ref, tdset_ref_named};

/// (namespace, group, kind, name) of a referenced object.
type TargetKey = (String, String, String, String);

/// Which TDSets reference which object, so a change of a target (or of an HPA that scales it)
/// reconciles exactly the TDSets concerned, without scanning every TDSet per event. It also
/// says which of them holds the object: the oldest claim (creationTimestamp, then name).
#[derive(Clone, Default)]
pub struct TargetIndex(Arc<RwLock<Index>>);

/// A TDSet's claim on a target, ordered as holding goes: older first, then by name.
type Claim = (String, String);

#[derive(Default)]
struct Index {
    by_target: HashMap<TargetKey, BTreeSet<Claim>>,
    by_tdset: HashMap<TDSetRef, Claims>,
}

/// A target's key as the index keeps it.
fn owned_key((ns, group, kind, name): (&str, &str, &str, &str)) -> TargetKey {
    (ns.into(), group.into(), kind.into(), name.into())
}

/// What one TDSet claims, and the original count its status records.
#[derive(PartialEq)]
struct Claims {
    keys: Vec<TargetKey>,
    claim: Claim,
    recorded: Option<Recorded>,
    /// Being deleted: it lets go of what it holds, so nothing is handed over to it.
    deleting: bool,
}

/// The count a TDSet's status records as its target's own (`originalReplicas`), and of which
/// object (uid).
#[derive(PartialEq)]
struct Recorded {
    key: TargetKey,
    uid: String,
    original: i32,
    /// The count it sets (`desiredReplicas`): its original is the own count of an object
    /// only while the object runs what it set.
    sets: Option<i32>,
    /// An HPA's own `maxReplicas` (`originalMaxReplicas`), while a ceiling of its schedule's
    /// replaces it.
    original_max: Option<i32>,
}

/// The target the TDSet's status records, and its key.
fn status_target(tdset: &TDSet) -> Option<(TargetKey, &TargetStatus)> {
    let t = tdset.status.as_ref()?.target.as_ref()?;
    let ns = tdset.namespace().unwrap_or_default();
    (!t.name.is_empty()).then(|| (owned_key((&ns, t.group(), &t.kind, &t.name)), t))
}

fn recorded(tdset: &TDSet) -> Option<Recorded> {
    let (key, t) = status_target(tdset)?;
    Some(Recorded {
        key,
        uid: t.uid.clone()?,
        original: t.original_replicas?,
        sets: tdset.status.as_ref()?.desired_replicas,
        original_max: t.original_max_replicas,
    })
}

/// What a TDSet claims: the target its spec names, and the one its status still records. The
/// latter differs only while a retargeted TDSet has not yet let go of its old target (given
/// its count back): until its status names the new one, nobody else takes the old one over,
/// or it would record the count this TDSet set as its own original.
pub(crate) fn claimed(tdset: &TDSet) -> Vec<TargetKey> {
    let ns = tdset.namespace().unwrap_or_default();
    let spec = tdset.spec.scale_target_ref.as_ref();
    let spec = spec.map(|r| owned_key((&ns, r.group(), &r.kind, &r.name)));
    let recorded = status_target(tdset).map(|(key, _)| key);
    let mut keys: Vec<TargetKey> = spec.into_iter().chain(recorded).collect();
    keys.dedup();
    keys
}

impl TargetIndex {
    /// Records the TDSet's targets (see `claimed`); returns the other TDSets whose claim may
    /// have changed hands (those on a target it left or joined), to be reconciled.
    pub fn update(&self, tdset: &TDSet) -> Vec<TDSetRef> {
        self.update_moved(tdset).1
    }

    /// `update`, and whether the TDSet's claims moved (a target taken or left).
    pub fn update_moved(&self, tdset: &TDSet) -> (bool, Vec<TDSetRef>) {
        let Ok(mut index) = self.0.write() else {
            return (false, vec![]);
        };
        let me = tdset_ref(tdset);
        let ns = tdset.namespace().unwrap_or_default();
        let keys = claimed(tdset);
        let claims = Claims {
            claim: super::group_index::claim_of(tdset),
            recorded: recorded(tdset),
            deleting: tdset.metadata.deletion_timestamp.is_some(),
            keys,
        };
        match index.by_tdset.get(&me) {
            Some(known) if *known == claims => return (false, vec![]),
            Some(known) if known.keys == claims.keys && known.claim == claims.claim => {
                // Only the recorded original (or the deletion) changed: nobody's claim moved.
                index.by_tdset.insert(me, claims);
                return (false, vec![]);
            }
            None if claims.keys.is_empty() => return (false, vec![]),
            _ => {}
        }
        let mut others = index.unlink(&me);
        if !claims.keys.is_empty() {
            for key in &claims.keys {
                let set = index.by_target.entry(key.clone()).or_default();
                others.extend(set.iter().map(|(_, name)| tdset_ref_named(&ns, name)));
                set.insert(claims.claim.clone());
            }
            index.by_tdset.insert(me, claims);
        }
        (true, others)
    }

    /// The original TDSet `who`'s status records for the object `uid` (durably: what the
    /// watch has seen), whatever it sets now; none while it is being deleted (it gives its
    /// targets back, nothing is handed to it).
    pub fn original_of(&self, key: (&str, &str, &str, &str), uid: &str, who: &str) -> Option<i32> {
        let index = self.0.read().ok()?;
        let claims = index.by_tdset.get(&tdset_ref_named(key.0, who))?;
        let r = index.recorded(key, uid, who)?;
        (!claims.deleting).then_some(r.original)
    }

    /// The own `maxReplicas` of the HPA `uid` that another TDSet's status records (it set a
    /// ceiling and has not given it back): the ceiling the HPA has is that TDSet's, not the
    /// HPA's own, for a TDSet taking the HPA over from it. Kept while that TDSet is deleted:
    /// until its record is gone it may not have given the ceiling back.
    pub fn original_max_elsewhere(
        &self,
        key: (&str, &str, &str, &str),
        uid: &str,
        me: &str,
    ) -> Option<i32> {
        let index = self.0.read().ok()?;
        let claims = index.by_target.get(&owned_key(key))?;
        claims.iter().find_map(|(_, other)| {
            (other != me)
                .then(|| index.recorded(key, uid, other)?.original_max)
                .flatten()
        })
    }

    /// The own `maxReplicas` TDSet `who`'s status records for the HPA `uid`, if any (see
    /// `original_of`).
    pub fn original_max_of(
        &self,
        key: (&str, &str, &str, &str),
        uid: &str,
        who: &str,
    ) -> Option<i32> {
        let index = self.0.read().ok()?;
        index.recorded(key, uid, who)?.original_max
    }

    /// The TDSets of the namespace whose claims are younger than `than`: those a group with
    /// that claim may hold workloads of (an older claim holds whatever the group does). An
    /// HPA's claim beats any group's, so TDSets that claim HPAs are left out.
    pub fn younger_in_namespace(&self, ns: &str, than: &Claim) -> Vec<TDSetRef> {
        self.0
            .read()
            .map(|index| {
                index
                    .by_tdset
                    .iter()
                    .filter(|(r, c)| {
                        r.namespace.as_deref() == Some(ns)
                            && c.claim > *than
                            && c.keys.iter().any(|k| k.2 != "HorizontalPodAutoscaler")
                    })
                    .map(|(r, _)| r.clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The own count another TDSet's status records for the object `uid` (its original), if
    /// the object runs `current`, the count that TDSet sets: what a TDSet taking the object
    /// over from it (an older claim arriving) must take for the own count, rather than the
    /// count that TDSet set. A record of a TDSet that did not set `current` (it waited,
    /// someone changed the count since) says nothing of it.
    pub fn original_elsewhere(
        &self,
        key: (&str, &str, &str, &str),
        uid: &str,
        me: &str,
        current: i32,
    ) -> Option<(String, i32)> {
        let index = self.0.read().ok()?;
        let claims = index.by_target.get(&owned_key(key))?;
        claims.iter().find_map(|(_, other)| {
            let r = index.recorded(key, uid, other).filter(|_| other != me)?;
            (r.sets == Some(current)).then(|| (other.clone(), r.original))
        })
    }

    /// Forgets the TDSet; returns the others that claimed its target.
    pub fn remove(&self, tdset: &TDSet) -> Vec<TDSetRef> {
        self.remove_ref(&tdset_ref(tdset))
    }

    /// Forgets the TDSet `me`; returns the others that claimed its target.
    pub fn remove_ref(&self, me: &TDSetRef) -> Vec<TDSetRef> {
        self.0
            .write()
            .map(|mut index| index.unlink(me))
            .unwrap_or_default()
    }

    /// Forgets every TDSet `keep` refuses (not in a relist); returns the others that claimed
    /// their targets.
    pub fn retain(&self, keep: impl Fn(&TDSetRef) -> bool) -> Vec<TDSetRef> {
        let Ok(mut index) = self.0.write() else {
            return vec![];
        };
        let gone: Vec<TDSetRef> = index
            .by_tdset
            .keys()
            .filter(|r| !keep(r))
            .cloned()
            .collect();
        gone.iter()
            .flat_map(|r| index.unlink(r))
            .filter(|r| keep(r))
            .collect()
    }

    pub fn lookup(&self, ns: &str, group: &str, kind: &str, name: &str) -> Vec<TDSetRef> {
        self.claims(ns, group, kind, name)
            .iter()
            .map(|(_, n)| tdset_ref_named(ns, n))
            .collect()
    }

    /// The TDSet that holds the object: the oldest of those that reference it.
    pub fn holder(&self, ns: &str, group: &str, kind: &str, name: &str) -> Option<String> {
        self.claims(ns, group, kind, name)
            .into_iter()
            .next()
            .map(|(_, n)| n)
    }

    /// The claims on an object, oldest first.
    pub fn claims(&self, ns: &str, group: &str, kind: &str, name: &str) -> Vec<Claim> {
        let key = (
            ns.to_string(),
            group.to_string(),
            kind.to_string(),
            name.to_string(),
        );
        self.0
            .read()
            .ok()
            .and_then(|index| {
                index
                    .by_target
                    .get(&key)
                    .map(|s| s.iter().cloned().collect())
            })
            .unwrap_or_default()
    }
}

impl Index {
    /// What TDSet `who`'s status records of the object `uid` at `key`, if anything.
    fn recorded(&self, key: (&str, &str, &str, &str), uid: &str, who: &str) -> Option<&Recorded> {
        let r = self
            .by_tdset
            .get(&tdset_ref_named(key.0, who))?
            .recorded
            .as_ref()?;
        (r.key == owned_key(key) && r.uid == uid).then_some(r)
    }

    /// Removes the TDSet's claims; returns the TDSets left claiming what it claimed.
    fn unlink(&mut self, me: &TDSetRef) -> Vec<TDSetRef> {
        let Some(Claims {
            keys: old, claim, ..
        }) = self.by_tdset.remove(me)
        else {
            return vec![];
        };
        let mut others = Vec::new();
        for key in old {
            let Some(set) = self.by_target.get_mut(&key) else {
                continue;
            };
            set.remove(&claim);
            others.extend(set.iter().map(|(_, name)| tdset_ref_named(&key.0, name)));
            if set.is_empty() {
                self.by_target.remove(&key);
            }
        }
        others
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::TDSetStatus;

    fn claiming(name: &str, created: &str, target: &str) -> TDSet {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "schedule.rs/v1", "kind": "TDSet",
            "metadata": {"name": name, "namespace": "dev", "creationTimestamp": created},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
                     "schedulingConfig": [], "defaultReplica": 1}
        }))
        .unwrap()
    }

    fn recording(mut t: TDSet, target: &str) -> TDSet {
        t.status = Some(TDSetStatus {
            target: Some(crate::api::TargetStatus {
                api_version: "apps/v1".into(),
                kind: "Deployment".into(),
                name: target.into(),
                field: "spec.replicas".into(),
                original_replicas: Some(1),
                ..Default::default()
            }),
            ..TDSetStatus::default()
        });
        t
    }

    /// A retargeted TDSet holds its old target until its status no longer records it (it has
    /// given the count back): a younger claim taking it over sooner would record the count the
    /// older one set as the workload's own.
    #[test]
    fn a_retargeted_tdset_holds_its_old_target_until_its_status_lets_go() {
        let index = TargetIndex::default();
        let holder = |name: &str| index.holder("dev", "apps", "Deployment", name);
        let older = recording(claiming("older", "2026-01-01T00:00:00Z", "web"), "web");
        index.update(&older);
        index.update(&claiming("younger", "2026-02-01T00:00:00Z", "web"));
        assert_eq!(holder("web").as_deref(), Some("older"));

        // Pointed elsewhere; the status still records web.
        let moved = recording(claiming("older", "2026-01-01T00:00:00Z", "api"), "web");
        let woken = index.update(&moved);
        assert_eq!(holder("web").as_deref(), Some("older"));
        assert_eq!(holder("api").as_deref(), Some("older"));
        assert!(woken.iter().all(|r| r.name == "younger"), "{woken:?}");

        // Web given back: the status records api now, and the younger is woken to take web.
        let woken = index.update(&recording(moved, "api"));
        assert_eq!(holder("web").as_deref(), Some("younger"));
        assert_eq!(holder("api").as_deref(), Some("older"));
        assert!(woken.iter().any(|r| r.name == "younger"), "{woken:?}");
        // Nothing changed, nobody woken.
        let same = recording(claiming("older", "2026-01-01T00:00:00Z", "api"), "api");
        assert!(index.update(&same).is_empty());
    }
}

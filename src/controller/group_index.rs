//! Which group TDSets select what, in every namespace (whichever shard reconciles them), so a
//! change of a workload wakes the groups it concerns, and one writer per workload holds
//! between groups: the oldest claim (creationTimestamp, then name) holds a workload.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, RwLock};

use kube::{Resource, ResourceExt};

use super::context::{TDSetRef, tdset_ref, tdset_ref_named};
use crate::api::{GroupKind, TDSet};
use crate::workload::group::{HELD_BY, Selector};

/// A TDSet's claim, ordered as holding goes: older first, then by name.
pub type Claim = (String, String);

/// What one group TDSet selects.
#[derive(Clone, Debug)]
pub struct GroupEntry {
    pub kinds: Vec<GroupKind>,
    /// `None` when the selector is invalid: it selects nothing (the TDSet reports it).
    pub selector: Option<Selector>,
    pub exclude: BTreeSet<String>,
}

impl GroupEntry {
    /// Whether it selects a workload of this kind, name and labels (the excluded included).
    pub fn selects(&self, group: &str, kind: &str, labels: &BTreeMap<String, String>) -> bool {
        self.kinds
            .iter()
            .any(|k| k.group() == group && k.kind() == kind)
            && self.selector.as_ref().is_some_and(|s| s.matches(labels))
    }
}

/// The groups of one namespace, by claim.
type Groups = BTreeMap<Claim, Arc<GroupEntry>>;

#[derive(Clone, Default)]
pub struct GroupIndex(Arc<RwLock<HashMap<String, Groups>>>);

/// A TDSet's claim: its creationTimestamp (as RFC 3339, which sorts in time order) and name.
pub fn claim_of(tdset: &TDSet) -> Claim {
    let created = tdset
        .meta()
        .creation_timestamp
        .as_ref()
        .and_then(|t| serde_json::to_string(t).ok())
        .unwrap_or_default();
    (created, tdset.name_any())
}

impl GroupIndex {
    /// Records (or forgets, when it has no group form) the TDSet's group; returns the other
    /// groups of its namespace, whose holdings may have changed hands.
    pub fn update(&self, tdset: &TDSet) -> Vec<TDSetRef> {
        let ns = tdset.namespace().unwrap_or_default();
        let entry = tdset
            .spec
            .scale_target_selector
            .as_ref()
            .map(|s| GroupEntry {
                kinds: s.kinds(),
                selector: Selector::compile(&s.selector).ok(),
                exclude: s.exclude.iter().cloned().collect(),
            });
        let Ok(mut index) = self.0.write() else {
            return vec![];
        };
        let groups = index.entry(ns.clone()).or_default();
        let claim = claim_of(tdset);
        let before = groups.remove(&claim);
        let changed = match (&before, &entry) {
            (None, None) => false,
            (Some(a), Some(b)) => {
                !(a.kinds == b.kinds && a.selector == b.selector && a.exclude == b.exclude)
            }
            _ => true,
        };
        if let Some(e) = entry {
            groups.insert(claim.clone(), Arc::new(e));
        }
        let others = if changed {
            groups
                .keys()
                .filter(|c| **c != claim)
                .map(|(_, name)| tdset_ref_named(&ns, name))
                .collect()
        } else {
            vec![]
        };
        if groups.is_empty() {
            index.remove(&ns);
        }
        others
    }

    /// Forgets the TDSet; returns the other groups of its namespace.
    pub fn remove(&self, tdset: &TDSet) -> Vec<TDSetRef> {
        let ns = tdset.namespace().unwrap_or_default();
        let me = tdset_ref(tdset);
        let Ok(mut index) = self.0.write() else {
            return vec![];
        };
        let Some(groups) = index.get_mut(&ns) else {
            return vec![];
        };
        groups.retain(|(_, name), _| *name != me.name);
        let others = groups
            .keys()
            .map(|(_, name)| tdset_ref_named(&ns, name))
            .collect();
        if groups.is_empty() {
            index.remove(&ns);
        }
        others
    }

    /// The claim of the group TDSet `name`: the index has it from the watch, whose objects
    /// carry the creationTimestamp the compact cache leaves out.
    pub fn claim(&self, ns: &str, name: &str) -> Option<Claim> {
        let index = self.0.read().ok()?;
        index.get(ns)?.keys().find(|(_, n)| n == name).cloned()
    }

    /// The groups of a namespace, oldest claim first.
    pub fn in_namespace(&self, ns: &str) -> Vec<(Claim, Arc<GroupEntry>)> {
        self.0
            .read()
            .ok()
            .and_then(|index| {
                index
                    .get(ns)
                    .map(|g| g.iter().map(|(c, e)| (c.clone(), e.clone())).collect())
            })
            .unwrap_or_default()
    }

    /// The groups a change of this workload concerns: those that select it, and the one whose
    /// record it carries (it may have to be given back).
    pub fn affected(
        &self,
        ns: &str,
        group: &str,
        kind: &str,
        labels: &BTreeMap<String, String>,
        annotations: &BTreeMap<String, String>,
    ) -> Vec<TDSetRef> {
        let holder = annotations.get(HELD_BY);
        self.in_namespace(ns)
            .into_iter()
            .filter(|((_, name), e)| holder == Some(name) || e.selects(group, kind, labels))
            .map(|((_, name), _)| tdset_ref_named(ns, &name))
            .collect()
    }
}

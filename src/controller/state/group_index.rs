//! Which group TDSets select what, in every namespace (whichever shard reconciles them), so a
//! change of a workload wakes the groups it concerns, and one writer per workload holds
//! between groups: the oldest claim (creationTimestamp, then name) holds a workload.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, RwLock};

use kube::{Resource, ResourceExt};

use crate::api::{GroupKind, TDSet};
use crate::cache::{TDSetRef, tdset_ref_named};
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

    /// Whether it would hold workload `name` if it were the oldest claim on it: it selects
    /// it and does not exclude it.
    pub fn would_hold(
        &self,
        (group, kind, name): (&str, &str, &str),
        labels: &BTreeMap<String, String>,
    ) -> bool {
        self.selects(group, kind, labels) && !self.exclude.contains(name)
    }
}

/// The groups of one namespace, by claim.
type Groups = BTreeMap<Claim, Arc<GroupEntry>>;

#[derive(Clone, Default)]
pub struct GroupIndex {
    groups: Arc<RwLock<HashMap<String, Groups>>>,
    /// What the last event of each workload a group cares about showed.
    seen: Arc<Mutex<HashMap<WorkloadKey, Seen>>>,
}

/// (namespace, group, kind, name) of a workload.
type WorkloadKey = (String, String, String, String);

/// What of a workload's event matters to a group: its spec (generation), its labels (which
/// group selects it) and whose record it carries. An event that changes none of them (the
/// workload controller's status updates, several per scale) wakes nobody, so a boundary of a
/// thousand workloads does not list them a thousand times over.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Seen {
    generation: Option<i64>,
    labels: u64,
    holder: Option<String>,
}

/// Workloads remembered at most (of the namespaces that have groups); past it the memory
/// starts again (an event then wakes its groups once more, the younger ones a moment later:
/// only lists too many).
const MAX_SEEN: usize = 65_536;

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
        self.update_changed(tdset).1
    }

    /// `update`, and whether the TDSet's group changed (came, went, or selects otherwise).
    pub fn update_changed(&self, tdset: &TDSet) -> (bool, Vec<TDSetRef>) {
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
        let Ok(mut index) = self.groups.write() else {
            return (false, vec![]);
        };
        let groups = index.entry(ns.clone()).or_default();
        let claim = claim_of(tdset);
        let before = groups.remove(&claim);
        // A TDSet of the same name created again (deleted while the watch was down): its old
        // claim is a ghost.
        let name = tdset.name_any();
        let len = groups.len();
        groups.retain(|(_, n), _| *n != name);
        let ghosts = groups.len() != len;
        let changed = ghosts
            || match (&before, &entry) {
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
        (changed, others)
    }

    /// The group TDSets of a namespace.
    pub fn refs_in_namespace(&self, ns: &str) -> Vec<TDSetRef> {
        self.in_namespace(ns)
            .into_iter()
            .map(|((_, name), _)| tdset_ref_named(ns, &name))
            .collect()
    }

    /// Forgets the TDSet; returns the other groups of its namespace.
    pub fn remove(&self, tdset: &TDSet) -> Vec<TDSetRef> {
        self.remove_named(&tdset.namespace().unwrap_or_default(), &tdset.name_any())
    }

    /// Forgets TDSet `name` of namespace `ns`; returns the other groups of its namespace.
    pub fn remove_named(&self, ns: &str, name: &str) -> Vec<TDSetRef> {
        let Ok(mut index) = self.groups.write() else {
            return vec![];
        };
        let Some(groups) = index.get_mut(ns) else {
            return vec![];
        };
        groups.retain(|(_, n), _| n != name);
        let others = groups.keys().map(|(_, n)| tdset_ref_named(ns, n)).collect();
        if groups.is_empty() {
            index.remove(ns);
        }
        others
    }

    /// Forgets every group `keep` refuses (not in a relist); returns the other groups of their
    /// namespaces.
    pub fn retain(&self, keep: impl Fn(&TDSetRef) -> bool) -> Vec<TDSetRef> {
        let Ok(mut index) = self.groups.write() else {
            return vec![];
        };
        let mut others = Vec::new();
        for (ns, groups) in index.iter_mut() {
            let before = groups.len();
            groups.retain(|(_, name), _| keep(&tdset_ref_named(ns, name)));
            if groups.len() != before {
                others.extend(groups.keys().map(|(_, name)| tdset_ref_named(ns, name)));
            }
        }
        index.retain(|_, groups| !groups.is_empty());
        others
    }

    /// The claim of the group TDSet `name`, as the index has it.
    #[cfg(test)]
    pub fn claim(&self, ns: &str, name: &str) -> Option<Claim> {
        let index = self.groups.read().ok()?;
        index.get(ns)?.keys().find(|(_, n)| n == name).cloned()
    }

    /// The groups of a namespace, oldest claim first.
    pub fn in_namespace(&self, ns: &str) -> Vec<(Claim, Arc<GroupEntry>)> {
        self.groups
            .read()
            .ok()
            .and_then(|index| {
                index
                    .get(ns)
                    .map(|g| g.iter().map(|(c, e)| (c.clone(), e.clone())).collect())
            })
            .unwrap_or_default()
    }

    /// The groups a change of this workload concerns, now: the one whose record it carries (it
    /// may have to be given back), and the one next in line, the oldest claim that selects it
    /// and does not exclude it (it holds it, or takes it once the holder lets go). Younger
    /// groups that select it are not woken at once: they hold nothing of it, and a `rollout
    /// restart` of a namespace under 300 groups would otherwise list it 300 times. Only what
    /// they count of it (matched, excluded, conflicting) can change, and only when it appears
    /// or its labels change: those are `soon`, to be woken once for a burst of such changes.
    /// Nothing when the change is one no group acts on (see `Seen`).
    pub fn affected(
        &self,
        (ns, group, kind, name): (&str, &str, &str, &str),
        generation: Option<i64>,
        labels: &BTreeMap<String, String>,
        annotations: &BTreeMap<String, String>,
    ) -> Affected {
        let holder = annotations.get(HELD_BY);
        let key = (
            ns.to_string(),
            group.to_string(),
            kind.to_string(),
            name.to_string(),
        );
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        labels.hash(&mut hasher);
        let now = Seen {
            generation,
            labels: hasher.finish(),
            holder: holder.cloned(),
        };
        let Ok(index) = self.groups.read() else {
            return Affected::default();
        };
        let Some(groups) = index.get(ns) else {
            if let Ok(mut seen) = self.seen.lock() {
                seen.remove(&key);
            }
            return Affected::default();
        };
        let next = groups
            .iter()
            .find(|(_, e)| e.would_hold((group, kind, name), labels))
            .map(|((_, n), _)| n);
        let holding = holder.and_then(|h| groups.keys().find(|(_, n)| n == h).map(|(_, n)| n));
        let mut concerned: Vec<&String> = holding.into_iter().chain(next).collect();
        concerned.dedup();
        let Ok(mut seen) = self.seen.lock() else {
            return Affected::default();
        };
        let before = seen.get(&key).cloned();
        if before.as_ref() == Some(&now) {
            return Affected::default();
        }
        // Whose counts of it may have changed: with new labels, or a workload not seen
        // before (created, or seen before the index had its groups), any group's: which
        // selected it before is not kept.
        let soon: Vec<&String> = match &before {
            Some(b) if b.labels == now.labels => vec![],
            _ => groups.keys().map(|(_, n)| n).collect(),
        };
        let soon: Vec<TDSetRef> = soon
            .into_iter()
            .filter(|n| !concerned.contains(n))
            .map(|n| tdset_ref_named(ns, n))
            .collect();
        let concerned: Vec<TDSetRef> = concerned
            .into_iter()
            .map(|n| tdset_ref_named(ns, n))
            .collect();
        // Kept whether or not a group selects it now: what its labels were is what tells
        // a later change apart from a new workload.
        if seen.len() >= MAX_SEEN {
            seen.clear();
        }
        seen.insert(key, now);
        Affected {
            now: concerned,
            soon,
        }
    }
}

/// The groups a workload's change concerns (see `GroupIndex::affected`).
#[derive(Debug, Default)]
pub struct Affected {
    /// To be reconciled now: the holder, and the next in line.
    pub now: Vec<TDSetRef>,
    /// Other groups whose counts of it may have changed, to be reconciled once a burst of
    /// such changes is over.
    pub soon: Vec<TDSetRef>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(name: &str, created: &str) -> TDSet {
        let mut t: TDSet = serde_json::from_value(serde_json::json!({
            "apiVersion": "schedule.rs/v1", "kind": "TDSet",
            "metadata": {"name": name, "namespace": "dev", "creationTimestamp": created},
            "spec": {"scaleTargetSelector": {"selector": {"matchLabels": {"env": "dev"}}},
                     "schedulingConfig": []}
        }))
        .unwrap();
        t.spec.default_replica = None;
        t
    }

    fn labels(env: &str) -> BTreeMap<String, String> {
        BTreeMap::from([("env".to_string(), env.to_string())])
    }

    #[test]
    fn only_changes_a_group_acts_on_wake_it() {
        let index = GroupIndex::default();
        index.update(&group("night", "2026-01-01T00:00:00Z"));
        let key = ("dev", "apps", "Deployment", "api");
        let none = BTreeMap::new();
        let woken = |g, l: &BTreeMap<_, _>, a: &BTreeMap<_, _>| {
            index
                .affected(key, Some(g), l, a)
                .now
                .iter()
                .map(|r| r.name.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(woken(1, &labels("dev"), &none), ["night"], "a joiner");
        assert!(
            woken(1, &labels("dev"), &none).is_empty(),
            "a status update"
        );
        assert_eq!(
            woken(2, &labels("dev"), &none),
            ["night"],
            "its spec changed"
        );
        // Labelled out, still carrying the record: the holder is woken to give it back.
        let record = BTreeMap::from([(HELD_BY.to_string(), "night".to_string())]);
        assert_eq!(woken(2, &labels("qa"), &record), ["night"]);
        assert!(
            woken(2, &labels("qa"), &BTreeMap::new()).is_empty(),
            "no group's"
        );
        assert_eq!(woken(2, &labels("dev"), &none), ["night"], "back in");
    }

    /// Of the groups that select a workload only the oldest (which holds it) is woken by its
    /// changes, with the holder its record names; a younger one only once the older ones
    /// exclude it.
    #[test]
    fn a_workloads_change_wakes_its_holder_and_the_next_in_line_only() {
        let index = GroupIndex::default();
        for (i, name) in ["a", "b", "c", "d"].iter().enumerate() {
            index.update(&group(name, &format!("2026-01-0{}T00:00:00Z", i + 1)));
        }
        let key = ("dev", "apps", "Deployment", "api");
        let mut generation = 0;
        let mut woken = |a: &BTreeMap<String, String>| {
            generation += 1;
            let mut names: Vec<String> = index
                .affected(key, Some(generation), &labels("dev"), a)
                .now
                .into_iter()
                .map(|r| r.name)
                .collect();
            names.sort();
            names
        };
        assert_eq!(woken(&BTreeMap::new()), ["a"]);
        let record = |h: &str| BTreeMap::from([(HELD_BY.to_string(), h.to_string())]);
        assert_eq!(woken(&record("a")), ["a"]);
        assert_eq!(
            woken(&record("c")),
            ["a", "c"],
            "a holder younger than the next in line"
        );
        assert_eq!(woken(&record("gone")), ["a"], "a holder that is no group");
        let mut a = group("a", "2026-01-01T00:00:00Z");
        if let Some(s) = a.spec.scale_target_selector.as_mut() {
            s.exclude = vec!["api".into()];
        }
        index.update(&a);
        assert_eq!(
            woken(&record("a")),
            ["a", "b"],
            "the holder excludes it: b is next"
        );
    }

    /// Younger groups that select a workload count it (matched, conflicting): they are woken
    /// later when it appears or its labels change, and not for its other changes.
    #[test]
    fn younger_groups_are_woken_later_when_what_they_count_may_have_changed() {
        let index = GroupIndex::default();
        for (i, name) in ["a", "b", "c"].iter().enumerate() {
            index.update(&group(name, &format!("2026-01-0{}T00:00:00Z", i + 1)));
        }
        let key = ("dev", "apps", "Deployment", "api");
        let names = |refs: &[TDSetRef]| refs.iter().map(|r| r.name.clone()).collect::<Vec<_>>();
        let record = BTreeMap::from([(HELD_BY.to_string(), "a".to_string())]);
        let woken = |g, env, a: &BTreeMap<String, String>| {
            let affected = index.affected(key, Some(g), &labels(env), a);
            (names(&affected.now), names(&affected.soon))
        };
        let (none, nobody): (Vec<String>, Vec<String>) = (vec![], vec![]);
        assert_eq!(
            woken(1, "dev", &BTreeMap::new()),
            (vec!["a".into()], vec!["b".into(), "c".into()]),
            "it appears"
        );
        assert_eq!(
            woken(1, "dev", &record),
            (vec!["a".into()], nobody.clone()),
            "held"
        );
        assert_eq!(
            woken(2, "dev", &record),
            (vec!["a".into()], nobody.clone()),
            "a rollout"
        );
        assert_eq!(
            woken(2, "qa", &record),
            (vec!["a".into()], vec!["b".into(), "c".into()]),
            "labelled out: those that selected it are not known"
        );
        assert_eq!(woken(2, "qa", &record), (none, nobody), "nothing new");
    }

    #[test]
    fn the_oldest_claim_comes_first_and_the_others_are_told_when_one_changes() {
        let index = GroupIndex::default();
        assert!(index.update(&group("b", "2026-01-02T00:00:00Z")).is_empty());
        let others = index.update(&group("a", "2026-01-01T00:00:00Z"));
        assert_eq!(
            others.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(),
            ["b"]
        );
        let order: Vec<String> = index
            .in_namespace("dev")
            .into_iter()
            .map(|((_, n), _)| n)
            .collect();
        assert_eq!(order, ["a", "b"]);
        assert_eq!(
            index.claim("dev", "b").map(|(_, n)| n).as_deref(),
            Some("b")
        );
        assert_eq!(
            index
                .remove(&group("a", "2026-01-01T00:00:00Z"))
                .iter()
                .map(|r| r.name.as_str())
                .collect::<Vec<_>>(),
            ["b"]
        );
    }

    /// A relist that no longer shows a TDSet (deleted while the watch was down) takes its
    /// group and its claim out of the indexes, and wakes those they held back.
    #[test]
    fn a_tdset_missing_from_a_relist_no_longer_holds_anything() {
        let groups = GroupIndex::default();
        groups.update(&group("old", "2026-01-01T00:00:00Z"));
        groups.update(&group("new", "2026-02-01T00:00:00Z"));
        let mut by_ref = group("ref", "2026-01-15T00:00:00Z");
        by_ref.spec.scale_target_selector = None;
        by_ref.spec.scale_target_ref = Some(crate::api::ScaleTargetRef {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            name: "api".into(),
        });
        let mut later = by_ref.clone();
        later.metadata.name = Some("later".into());
        later.metadata.creation_timestamp = group("x", "2026-03-01T00:00:00Z")
            .metadata
            .creation_timestamp;
        let targets = super::super::target_index::TargetIndex::default();
        targets.update(&by_ref);
        targets.update(&later);

        let relisted = |r: &TDSetRef| r.name != "old" && r.name != "ref";
        let woken: Vec<String> = groups
            .retain(relisted)
            .into_iter()
            .map(|r| r.name)
            .collect();
        assert_eq!(woken, ["new"]);
        let names: Vec<String> = groups
            .in_namespace("dev")
            .into_iter()
            .map(|((_, n), _)| n)
            .collect();
        assert_eq!(names, ["new"]);

        let woken: Vec<String> = targets
            .retain(relisted)
            .into_iter()
            .map(|r| r.name)
            .collect();
        assert_eq!(woken, ["later"]);
        let holder = targets.holder("dev", "apps", "Deployment", "api");
        assert_eq!(holder.as_deref(), Some("later"));
        // A relist that shows everything changes nothing.
        assert!(groups.retain(|_| true).is_empty());
        assert!(targets.retain(|_| true).is_empty());
    }

    /// Deleted and created again while the watch was down: the new TDSet's claim replaces
    /// the old one, which would otherwise hold its workloads as an older claim.
    #[test]
    fn a_tdset_created_again_under_its_name_keeps_only_its_new_claim() {
        let groups = GroupIndex::default();
        groups.update(&group("night", "2026-01-01T00:00:00Z"));
        groups.update(&group("night", "2026-03-01T00:00:00Z"));
        let claims: Vec<Claim> = groups
            .in_namespace("dev")
            .into_iter()
            .map(|(c, _)| c)
            .collect();
        assert_eq!(claims.len(), 1, "{claims:?}");
        assert_eq!(groups.claim("dev", "night"), claims.first().cloned());
        assert!(claims[0].0.contains("2026-03-01"), "{claims:?}");
    }
}

//! What a shard keeps of other shards' TDSets, namespace by namespace, as the watch shows them.

use std::cell::RefCell;
use std::collections::HashSet;

use super::*;
use crate::cache::tdset_ref;

/// A group TDSet `name` of namespace `ns`, of shard `shard` (label `shard`), created at
/// second `created` of the day.
fn group(ns: &str, name: &str, shard: &str, created: u32) -> TDSet {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "schedule.rs/v1", "kind": "TDSet",
        "metadata": {"name": name, "namespace": ns, "labels": {"shard": shard},
                     "creationTimestamp": format!("2026-01-01T00:00:{created:02}Z")},
        "spec": {"scaleTargetSelector": {"selector": {"matchLabels": {"env": "dev"}}},
                 "schedulingConfig": []}
    }))
    .unwrap()
}

/// Shard `a`, its indexes, and the namespaces where a reconcile of it runs.
struct Shard {
    scope: Scope,
    groups: GroupIndex,
    busy: RefCell<HashSet<String>>,
}

impl Shard {
    fn new() -> Shard {
        let groups = GroupIndex::default();
        Shard {
            scope: Scope::new(
                TargetIndex::default(),
                groups.clone(),
                IntGauge::new("indexed", "-").unwrap(),
                IntCounter::new("fills", "-").unwrap(),
            ),
            groups,
            busy: RefCell::default(),
        }
    }

    /// The watch shows `t` (as `route` does: into the indexes, or out of them).
    fn shows(&self, t: &TDSet, listing: bool) {
        let owns = t.labels().get("shard").map(String::as_str) == Some("a");
        let busy = |ns: &str| self.busy.borrow().contains(ns);
        if self.scope.admit(t, owns, listing, &busy) {
            self.groups.update(t);
        } else {
            self.groups.remove(t);
        }
    }

    fn deletes(&self, t: &TDSet) {
        self.groups.remove(t);
        self.scope.deleted(t, &|ns| self.busy.borrow().contains(ns));
    }

    /// The groups the index has in `ns`, by name.
    fn indexed(&self, ns: &str) -> Vec<String> {
        let mut names: Vec<String> = self
            .groups
            .in_namespace(ns)
            .into_iter()
            .map(|((_, n), _)| n)
            .collect();
        names.sort();
        names
    }

    /// The namespace whose fill is queued, if any.
    fn queued_fill(&self) -> Option<String> {
        use futures::FutureExt;
        self.scope.next_fill().now_or_never()
    }

    fn others(&self) -> i64 {
        self.scope.indexed.get()
    }
}

#[test]
fn another_shards_tdsets_are_kept_only_where_this_shard_has_its_own() {
    let s = Shard::new();
    s.shows(&group("dev", "b-old", "b", 1), false);
    s.shows(&group("prod", "b-prod", "b", 2), false);
    assert!(s.indexed("dev").is_empty());
    assert_eq!(s.others(), 0);
    assert_eq!(s.queued_fill(), None);

    // Shard a's first TDSet in dev: dev is listed afresh, and a writes nothing there meanwhile.
    let mine = group("dev", "a-new", "a", 3);
    s.shows(&mine, false);
    assert!(!s.scope.ready("dev"));
    assert_eq!(s.queued_fill().as_deref(), Some("dev"));
    s.scope
        .fill_page("dev", &[group("dev", "b-old", "b", 1), mine.clone()]);
    let woken = s.scope.fill_done("dev", &|_| false);
    assert_eq!(woken, vec!["a-new".to_string()]);
    assert!(s.scope.ready("dev"));
    assert_eq!(s.indexed("dev"), ["a-new", "b-old"]);
    assert!(s.indexed("prod").is_empty());
    assert_eq!(s.others(), 1);

    // Another shard's TDSet arriving in dev now is kept at once.
    s.shows(&group("dev", "b-later", "b", 4), false);
    assert_eq!(s.indexed("dev"), ["a-new", "b-later", "b-old"]);
    assert_eq!(s.queued_fill(), None);
}

#[test]
fn a_fill_never_overwrites_what_the_watch_showed_meanwhile() {
    let s = Shard::new();
    s.shows(&group("dev", "b-edited", "b", 1), false);
    s.shows(&group("dev", "b-deleted", "b", 2), false);
    s.shows(&group("dev", "a", "a", 3), false);
    assert_eq!(s.queued_fill().as_deref(), Some("dev"));
    // While the list is on its way: one is edited (it no longer selects anything), one deleted.
    let mut edited = group("dev", "b-edited", "b", 1);
    edited.spec.scale_target_selector = None;
    s.shows(&edited, false);
    s.deletes(&group("dev", "b-deleted", "b", 2));
    // The list was read before those changes.
    s.scope.fill_page(
        "dev",
        &[
            group("dev", "b-edited", "b", 1),
            group("dev", "b-deleted", "b", 2),
            group("dev", "b-listed", "b", 5),
        ],
    );
    s.scope.fill_done("dev", &|_| false);
    assert_eq!(s.indexed("dev"), ["a", "b-listed"]);
}

#[test]
fn a_list_in_namespace_order_needs_no_fill_and_keeps_only_what_it_needs() {
    let s = Shard::new();
    s.scope.list_started(&|_| false);
    // dev: another shard's, then a's, then another shard's.
    s.shows(&group("dev", "b1", "b", 1), true);
    s.shows(&group("dev", "mine", "a", 2), true);
    s.shows(&group("dev", "b2", "b", 3), true);
    // prod: only another shard's.
    s.shows(&group("prod", "b3", "b", 4), true);
    assert_eq!(s.indexed("prod"), ["b3"], "kept while the list is in prod");
    s.shows(&group("qa", "b4", "b", 5), true);
    assert!(
        s.indexed("prod").is_empty(),
        "let go of once the list left prod"
    );
    let seen: HashSet<_> = ["dev/b1", "dev/mine", "dev/b2", "prod/b3", "qa/b4"]
        .iter()
        .map(|r| {
            let (ns, name) = r.split_once('/').unwrap();
            tdset_ref_named(ns, name)
        })
        .collect();
    s.scope.list_done(&seen, &|_| false);
    assert!(s.indexed("qa").is_empty());
    assert_eq!(s.indexed("dev"), ["b1", "b2", "mine"]);
    assert!(s.scope.ready("dev"));
    assert_eq!(s.queued_fill(), None);
    assert_eq!(s.others(), 2);
}

/// A shard whose initial list is in namespace dev: more of another shard's TDSets than it
/// keeps provisionally, then one of its own.
fn listing_a_crowded_dev() -> Shard {
    let s = Shard::new();
    s.scope.list_started(&|_| false);
    for i in 0..=PROVISIONAL {
        s.shows(&group("dev", &format!("b{i:03}"), "b", 1), true);
    }
    s.shows(&group("dev", "mine", "a", 2), true);
    s
}

#[test]
fn a_namespace_too_large_to_keep_provisionally_is_filled_after_the_list() {
    let s = listing_a_crowded_dev();
    assert!(!s.scope.ready("dev"));
    assert_eq!(s.queued_fill(), None, "decided when the list leaves dev");
    s.shows(&group("prod", "mine", "a", 2), true);
    assert_eq!(s.queued_fill().as_deref(), Some("dev"));
    assert!(!s.scope.ready("dev"));
    assert!(s.scope.ready("prod"));
}

#[test]
fn a_list_out_of_namespace_order_is_filled_where_it_came_back() {
    let s = Shard::new();
    s.scope.list_started(&|_| false);
    s.shows(&group("dev", "b1", "b", 1), true);
    s.shows(&group("prod", "b2", "b", 2), true);
    // dev again: the list is not in namespace order; b1 was let go of.
    s.shows(&group("dev", "mine", "a", 3), true);
    assert_eq!(s.queued_fill().as_deref(), Some("dev"));
    assert!(!s.scope.ready("dev"));
}

#[test]
fn a_namespace_is_let_go_of_only_once_no_reconcile_runs_there() {
    let s = Shard::new();
    s.shows(&group("dev", "mine", "a", 1), false);
    s.shows(&group("dev", "b1", "b", 2), false);
    assert_eq!(s.indexed("dev"), ["b1", "mine"]);
    // a's TDSet moves to shard b while its reconcile runs: what it yields to stays.
    s.busy.borrow_mut().insert("dev".into());
    s.shows(&group("dev", "mine", "b", 1), false);
    assert_eq!(s.indexed("dev"), ["b1", "mine"]);
    s.busy.borrow_mut().clear();
    s.scope.idle("dev", &|_| false);
    assert!(s.indexed("dev").is_empty());
    assert_eq!(s.others(), 0);
    // Back to shard a: dev is filled again before a writes there.
    s.shows(&group("dev", "mine", "a", 1), false);
    assert_eq!(s.queued_fill().as_deref(), Some("dev"));
    assert!(!s.scope.ready("dev"));
}

#[test]
fn a_tdset_deleted_while_the_watch_was_down_lets_its_namespace_go() {
    let s = Shard::new();
    let mine = group("dev", "mine", "a", 1);
    s.shows(&mine, false);
    s.shows(&group("dev", "b1", "b", 2), false);
    s.scope.list_started(&|_| false);
    s.shows(&group("dev", "b1", "b", 2), true);
    let seen = HashSet::from([tdset_ref(&group("dev", "b1", "b", 2))]);
    s.scope.list_done(&seen, &|_| false);
    s.groups.retain(|r| seen.contains(r));
    assert!(s.indexed("dev").is_empty());
    assert_eq!(s.others(), 0);
}

#[test]
fn a_list_cut_short_in_a_namespace_leaves_it_to_a_fill() {
    let s = listing_a_crowded_dev();
    // The watch fails mid-namespace and lists again.
    s.scope.list_started(&|_| false);
    assert_eq!(s.queued_fill().as_deref(), Some("dev"));
    assert!(!s.scope.ready("dev"));
}

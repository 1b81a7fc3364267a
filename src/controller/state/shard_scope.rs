//! Which other shards' TDSets a shard keeps in its indexes: only those of the namespaces where
//! it has TDSets of its own. A claim is per namespace (a group selects, a `scaleTargetRef`
//! names, only in its own namespace), so one writer per workload needs no more; a shard beside
//! 1000 other shards' groups of the largest size the schema allows held 191.6 kB of index for
//! each of them (BENCHMARKS.md, `shardindex`).
//!
//! A namespace's index is *complete* while every other shard's TDSet of it that the watch has
//! shown is in it. It stops being complete when one is left out (the namespace had none of
//! this shard's TDSets then); the names left out are kept (a name each, not its claims), so a
//! namespace whose left-out TDSets are all deleted, or shown again where they are indexed, is
//! complete again. When this shard's first TDSet arrives in an incomplete namespace, the
//! namespace is listed afresh (a *fill*), and nothing is written for this shard's TDSets there
//! until it is complete again (`ready`): a group that did not know an older group of another
//! shard would take its workloads.
//!
//! During the watch's initial list, which the API server gives namespace by namespace, a few
//! of another shard's TDSets (`PROVISIONAL`) are indexed while the list is in their namespace,
//! in case one of this shard's follows; so a restart needs no fill where a namespace is
//! small, and holds at most that many it did not need. A namespace still incomplete when the
//! list leaves it (more than that, or left out before the list) is filled; so is one a list
//! out of namespace order comes back to (taken as outside a list).
//!
//! The indexes change only under this module's lock (`admit`, `deleted`, `list_done` run the
//! caller's index update inside it), so a fill's page, a namespace let go of and a watch event
//! never interleave. A fill whose list was read before a relist ended is read again: that
//! relist may have shown a TDSet deleted while the watch was down only by its absence.
//!
//! A namespace is let go of (its other shards' TDSets forgotten) once it has none of this
//! shard's TDSets and no reconcile of one runs there (`busy`): a reconcile that began before
//! its TDSet moved away still reads the claims it yields to.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Mutex;

use kube::ResourceExt;
use prometheus::{IntCounter, IntGauge};

use super::group_index::GroupIndex;
use super::target_index::TargetIndex;
use crate::api::TDSet;
use crate::cache::{TDSetRef, tdset_ref_named};

/// Another shard's TDSets indexed at most per namespace while an initial list is in it and
/// this shard has none there (yet).
#[cfg(not(test))]
pub const PROVISIONAL: usize = 128;
/// Small under test, so the model checks (5 TDSets per namespace) go past it.
#[cfg(test)]
pub const PROVISIONAL: usize = 2;

/// What the shard's indexes hold of other shards, and the fills under way.
pub struct Scope {
    inner: Mutex<Inner>,
    targets: TargetIndex,
    groups: GroupIndex,
    queued: tokio::sync::Notify,
    /// Other shards' TDSets in the indexes.
    indexed: IntGauge,
    fills: IntCounter,
}

#[derive(Default)]
struct Inner {
    /// This shard's TDSets, by namespace.
    own: HashMap<String, HashSet<String>>,
    /// Other shards' TDSets in the indexes, by namespace.
    others: HashMap<String, HashSet<String>>,
    /// Other shards' TDSets not in the indexes, by namespace (never an empty set): those
    /// namespaces are incomplete.
    incomplete: HashMap<String, HashSet<String>>,
    /// Namespaces being filled, with the TDSets the watch has shown since the fill began
    /// (what a list read earlier says of them is older).
    filling: HashMap<String, HashSet<String>>,
    to_fill: VecDeque<String>,
    listing: Option<Listing>,
    /// Initial lists ended: a fill read before the last one ended is stale.
    lists_done: u64,
}

/// Where an initial list is.
#[derive(Default)]
struct Listing {
    at: Option<At>,
    /// Namespaces the list has left.
    left: HashSet<String>,
}

struct At {
    ns: String,
    provisional: usize,
}

impl Scope {
    pub fn new(
        targets: TargetIndex,
        groups: GroupIndex,
        indexed: IntGauge,
        fills: IntCounter,
    ) -> Scope {
        // A new leadership term starts with empty indexes.
        indexed.set(0);
        Scope {
            inner: Mutex::default(),
            targets,
            groups,
            queued: tokio::sync::Notify::new(),
            indexed,
            fills,
        }
    }

    /// A TDSet the watch shows (`listing`: in a list; `owns`: this shard reconciles it).
    /// `index(keep)` puts it into the indexes, or takes it out of them, under this module's
    /// lock; what it returns is returned.
    pub fn admit<R>(
        &self,
        t: &TDSet,
        owns: bool,
        listing: bool,
        busy: &dyn Fn(&str) -> bool,
        index: impl FnOnce(bool) -> R,
    ) -> R {
        let Ok(mut inner) = self.inner.lock() else {
            return index(true);
        };
        let keep = self.decide(&mut inner, t, owns, listing, busy);
        index(keep)
    }

    fn decide(
        &self,
        inner: &mut Inner,
        t: &TDSet,
        owns: bool,
        listing: bool,
        busy: &dyn Fn(&str) -> bool,
    ) -> bool {
        let (ns, name) = (t.namespace().unwrap_or_default(), t.name_any());
        if let Some(seen) = inner.filling.get_mut(&ns) {
            seen.insert(name.clone());
        }
        if listing {
            self.list_at(inner, &ns, busy);
        }
        if owns {
            self.forget_other(inner, &ns, &name);
            inner.forget_unindexed(&ns, &name);
            let own = inner.own.entry(ns.clone()).or_default();
            let first = own.is_empty();
            own.insert(name);
            if first && !inner.listing_in(&ns) {
                self.fill_if_incomplete(inner, &ns);
            }
            return true;
        }
        if inner.forget_own(&ns, &name) {
            // Moved to another shard: was it this shard's last TDSet there?
            self.settle(inner, &ns, busy);
        }
        if inner.interesting(&ns, busy) {
            self.add_other(inner, &ns, &name);
            return true;
        }
        if let Some(at) = inner.listing_at(&ns) {
            if at.provisional < PROVISIONAL {
                at.provisional += 1;
                self.add_other(inner, &ns, &name);
                return true;
            }
        }
        self.forget_other(inner, &ns, &name);
        inner.incomplete.entry(ns).or_default().insert(name);
        false
    }

    /// A TDSet the watch shows deleted; `unindex` takes it out of the indexes, under this
    /// module's lock (a fill's page read before the deletion cannot put it back).
    pub fn deleted<R>(
        &self,
        t: &TDSet,
        busy: &dyn Fn(&str) -> bool,
        unindex: impl FnOnce() -> R,
    ) -> R {
        let (ns, name) = (t.namespace().unwrap_or_default(), t.name_any());
        let Ok(mut inner) = self.inner.lock() else {
            return unindex();
        };
        if let Some(seen) = inner.filling.get_mut(&ns) {
            seen.insert(name.clone());
        }
        let out = unindex();
        self.forget_other(&mut inner, &ns, &name);
        inner.forget_unindexed(&ns, &name);
        if inner.forget_own(&ns, &name) {
            self.settle(&mut inner, &ns, busy);
        }
        out
    }

    /// An initial list begins (the watch's first, or after it expired).
    pub fn list_started(&self, busy: &dyn Fn(&str) -> bool) {
        let Ok(mut inner) = self.inner.lock() else {
            return;
        };
        let cut = inner.listing.replace(Listing::default()).and_then(|l| l.at);
        if let Some(at) = cut {
            self.leave(&mut inner, at, busy);
        }
    }

    /// The list is over; `seen` is what it showed: what it did not show was deleted meanwhile,
    /// and `retain` takes those out of the indexes, under this module's lock.
    pub fn list_done<R>(
        &self,
        seen: &HashSet<TDSetRef>,
        busy: &dyn Fn(&str) -> bool,
        retain: impl FnOnce() -> R,
    ) -> R {
        let Ok(mut inner) = self.inner.lock() else {
            return retain();
        };
        // A fill read before now may show what this list showed deleted by its absence.
        inner.lists_done += 1;
        let out = retain();
        if let Some(at) = inner.listing.take().and_then(|l| l.at) {
            self.leave(&mut inner, at, busy);
        }
        let shown = |ns: &str, name: &str| seen.contains(&tdset_ref_named(ns, name));
        let mut emptied = Vec::new();
        for (ns, names) in inner.own.iter_mut() {
            names.retain(|n| shown(ns, n));
            if names.is_empty() {
                emptied.push(ns.clone());
            }
        }
        let mut gone = 0;
        for (ns, names) in inner.others.iter_mut() {
            let before = names.len();
            names.retain(|n| shown(ns, n));
            gone += before - names.len();
        }
        inner.others.retain(|_, names| !names.is_empty());
        self.indexed.sub(gone as i64);
        for (ns, names) in inner.incomplete.iter_mut() {
            names.retain(|n| shown(ns, n));
        }
        inner.incomplete.retain(|_, names| !names.is_empty());
        for ns in emptied {
            inner.own.remove(&ns);
            self.settle(&mut inner, &ns, busy);
        }
        out
    }

    /// Whether this shard's TDSets of the namespace may be written: its index is complete.
    pub fn ready(&self, ns: &str) -> bool {
        self.inner.lock().is_ok_and(|inner| {
            !inner.incomplete.contains_key(ns) && !inner.filling.contains_key(ns)
        })
    }

    /// A reconcile in the namespace ended (or a TDSet of it was let go of): a namespace kept
    /// only for it is let go of.
    pub fn idle(&self, ns: &str, busy: &dyn Fn(&str) -> bool) {
        if let Ok(mut inner) = self.inner.lock()
            && !inner.own.contains_key(ns)
        {
            self.settle(&mut inner, ns, busy);
        }
    }

    /// The next namespace to fill, when there is one.
    pub async fn next_fill(&self) -> String {
        loop {
            let queued = self.queued.notified();
            if let Some(ns) = self
                .inner
                .lock()
                .ok()
                .and_then(|mut i| i.to_fill.pop_front())
            {
                return ns;
            }
            queued.await;
        }
    }

    /// A fill's list is about to be read: the lists ended so far, which `fill_page` checks.
    pub fn fill_reading(&self) -> u64 {
        self.inner.lock().map_or(0, |inner| inner.lists_done)
    }

    /// Part of a fill's list, read after `read` (from `fill_reading`): what the watch has not
    /// shown since the fill began goes into the indexes. `false`: an initial list ended since
    /// it was read; nothing was applied, and the list is to be read again.
    pub fn fill_page(&self, ns: &str, read: u64, listed: &[TDSet]) -> bool {
        let Ok(mut inner) = self.inner.lock() else {
            return false;
        };
        if inner.lists_done != read {
            return false;
        }
        let Some(seen) = inner.filling.get(ns) else {
            return true;
        };
        let fresh: Vec<&TDSet> = listed
            .iter()
            .filter(|t| !seen.contains(&t.name_any()))
            .collect();
        for t in fresh {
            self.targets.update(t);
            self.groups.update(t);
            let name = t.name_any();
            if !inner.own.get(ns).is_some_and(|own| own.contains(&name)) {
                self.add_other(&mut inner, ns, &name);
            }
        }
        true
    }

    /// The fill is over: the namespace is complete. Returns this shard's TDSets there, which
    /// waited for it.
    pub fn fill_done(&self, ns: &str, busy: &dyn Fn(&str) -> bool) -> Vec<String> {
        let Ok(mut inner) = self.inner.lock() else {
            return vec![];
        };
        inner.filling.remove(ns);
        inner.incomplete.remove(ns);
        self.fills.inc();
        self.settle(&mut inner, ns, busy);
        inner
            .own
            .get(ns)
            .map(|own| own.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// The list moved to namespace `ns`: the namespace it left is settled.
    fn list_at(&self, inner: &mut Inner, ns: &str, busy: &dyn Fn(&str) -> bool) {
        let Some(listing) = inner.listing.as_mut() else {
            return;
        };
        if listing.at.as_ref().is_some_and(|at| at.ns == ns) {
            return;
        }
        let left = listing.at.take();
        if let Some(at) = &left {
            listing.left.insert(at.ns.clone());
        }
        if !listing.left.contains(ns) {
            listing.at = Some(At {
                ns: ns.to_string(),
                provisional: 0,
            });
        }
        if let Some(at) = left {
            self.leave(inner, at, busy);
        }
    }

    /// The list left a namespace (or was cut short in it): filled if this shard has TDSets
    /// there and it is incomplete; let go of if it has none.
    fn leave(&self, inner: &mut Inner, at: At, busy: &dyn Fn(&str) -> bool) {
        if inner.interesting(&at.ns, busy) {
            self.fill_if_incomplete(inner, &at.ns);
        } else {
            self.settle(inner, &at.ns, busy);
        }
    }

    fn fill_if_incomplete(&self, inner: &mut Inner, ns: &str) {
        if inner.incomplete.contains_key(ns) && !inner.filling.contains_key(ns) {
            inner.filling.insert(ns.to_string(), HashSet::new());
            inner.to_fill.push_back(ns.to_string());
            self.queued.notify_one();
        }
    }

    /// A namespace this shard may have no TDSets left in: its other shards' TDSets are
    /// forgotten, once no reconcile runs there.
    fn settle(&self, inner: &mut Inner, ns: &str, busy: &dyn Fn(&str) -> bool) {
        if inner.interesting(ns, busy) {
            // Let go of by `idle` once nothing runs there.
            return;
        }
        if inner.listing_in(ns) {
            // Settled when the list leaves it.
            return;
        }
        let Some(names) = inner.others.remove(ns) else {
            return;
        };
        self.indexed.sub(names.len() as i64);
        for name in &names {
            self.targets.remove_ref(&tdset_ref_named(ns, name));
            self.groups.remove_named(ns, name);
        }
        inner
            .incomplete
            .entry(ns.to_string())
            .or_default()
            .extend(names);
    }

    fn add_other(&self, inner: &mut Inner, ns: &str, name: &str) {
        inner.forget_unindexed(ns, name);
        if inner
            .others
            .entry(ns.to_string())
            .or_default()
            .insert(name.to_string())
        {
            self.indexed.inc();
        }
    }

    fn forget_other(&self, inner: &mut Inner, ns: &str, name: &str) {
        if let Some(names) = inner.others.get_mut(ns)
            && names.remove(name)
        {
            self.indexed.dec();
            if names.is_empty() {
                inner.others.remove(ns);
            }
        }
    }
}

impl Inner {
    /// Another shard's TDSet is indexed now, or gone, or this shard's.
    fn forget_unindexed(&mut self, ns: &str, name: &str) {
        if let Some(names) = self.incomplete.get_mut(ns)
            && names.remove(name)
            && names.is_empty()
        {
            self.incomplete.remove(ns);
        }
    }

    /// Whether this shard needs the namespace's claims: it has TDSets there, a reconcile of
    /// one still runs, or a fill is under way.
    fn interesting(&self, ns: &str, busy: &dyn Fn(&str) -> bool) -> bool {
        self.own.contains_key(ns) || self.filling.contains_key(ns) || busy(ns)
    }

    /// Whether this shard's TDSet `name` was known; the namespace is dropped from `own` when
    /// it was its last.
    fn forget_own(&mut self, ns: &str, name: &str) -> bool {
        let Some(own) = self.own.get_mut(ns) else {
            return false;
        };
        let was = own.remove(name);
        if own.is_empty() {
            self.own.remove(ns);
        }
        was
    }

    fn listing_at(&mut self, ns: &str) -> Option<&mut At> {
        self.listing
            .as_mut()
            .and_then(|l| l.at.as_mut())
            .filter(|at| at.ns == ns)
    }

    fn listing_in(&self, ns: &str) -> bool {
        self.listing
            .as_ref()
            .and_then(|l| l.at.as_ref())
            .is_some_and(|at| at.ns == ns)
    }
}

#[cfg(test)]
mod tests;

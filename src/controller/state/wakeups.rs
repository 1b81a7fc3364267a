//! When each TDSet is to be reconciled next, kept compactly and handed to the controller a
//! few at a time.
//!
//! Every reason to reconcile a TDSet of its own (its next transition, `intervalMint`, a change
//! of the TDSet seen by the watch, the first look after a start) is a wakeup here.
//! kube-runtime's own queue keeps each pending request as two clones of an `ObjectRef` in a
//! hash map and a timer wheel, about 370 bytes per TDSet; a start against 10 000 TDSets queued
//! all of them at once. Here a TDSet's wakeup is one shared `"namespace/name"` keyed by its
//! instant, and the controller is handed at most `limit` due ones that have not started yet,
//! which is all it can run anyway.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::Stream;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::cache::{TDSetRef, tdset_ref_named};

/// A handed-over wakeup whose reconcile has not started after this long no longer counts
/// against the limit (its TDSet may have gone before the controller looked it up).
const HANDED_FOR: Duration = Duration::from_secs(10);

/// At most one pending wakeup per TDSet, the earliest asked for.
pub struct Wakeups {
    inner: Mutex<Inner>,
    /// Wakes the stream when an earlier wakeup is set, room frees up or the gate opens.
    changed: Notify,
    limit: usize,
    /// Nothing is handed over before this is set (the caches are not synced yet).
    open: AtomicBool,
}

#[derive(Default)]
struct Inner {
    at: HashMap<Arc<str>, Instant>,
    queue: BTreeSet<(Instant, Arc<str>)>,
    /// Handed to the controller and not started yet, with when.
    handed: HashMap<Arc<str>, Instant>,
}

/// What the stream does next.
enum Next {
    Hand(Vec<TDSetRef>),
    /// Nothing to hand before this instant (or a change), or before a change at all.
    Wait(Option<Instant>),
}

fn key(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

impl Inner {
    fn remove(&mut self, key: &str) {
        if let Some((key, at)) = self.at.remove_entry(key) {
            self.queue.remove(&(at, key));
        }
    }
}

impl Wakeups {
    /// `limit`: due wakeups handed to the controller and not started, at most. Nothing is
    /// handed over until `open` is called.
    pub fn new(limit: usize) -> Self {
        Wakeups {
            inner: Mutex::default(),
            changed: Notify::new(),
            limit: limit.max(1),
            open: AtomicBool::new(false),
        }
    }

    pub fn open(&self) {
        self.open.store(true, Ordering::SeqCst);
        self.changed.notify_one();
    }

    /// Reconcile `namespace/name` at `when`, or earlier if an earlier wakeup is pending: the
    /// earlier one may stand for a change this reconcile has not seen.
    pub fn set(&self, namespace: &str, name: &str, when: Instant) {
        let Ok(mut inner) = self.inner.lock() else {
            return;
        };
        let key = key(namespace, name);
        if inner.at.get(key.as_str()).is_some_and(|t| *t <= when) {
            return;
        }
        inner.remove(&key);
        let key: Arc<str> = key.into();
        let earliest = inner.queue.first().map(|(t, _)| *t);
        inner.at.insert(key.clone(), when);
        inner.queue.insert((when, key));
        drop(inner);
        if earliest.is_none_or(|t| when < t) {
            self.changed.notify_one();
        }
    }

    /// Reconcile `namespace/name` as soon as there is room.
    pub fn now(&self, namespace: &str, name: &str) {
        self.set(namespace, name, Instant::now());
    }

    /// The reconcile of `namespace/name` has started: it covers every wakeup due by now, and
    /// frees its place among the handed ones. Returns whether a wakeup of it was due.
    pub fn started(&self, namespace: &str, name: &str) -> bool {
        let Ok(mut inner) = self.inner.lock() else {
            return false;
        };
        let key = key(namespace, name);
        let was_due = inner
            .at
            .get(key.as_str())
            .is_some_and(|t| *t <= Instant::now());
        if was_due {
            inner.remove(&key);
        }
        let freed = inner.handed.remove(key.as_str()).is_some();
        drop(inner);
        if freed {
            self.changed.notify_one();
        }
        was_due || freed
    }

    /// Whether a wakeup due by `now` has not started yet (queued, or handed to the controller).
    pub fn pending_due(&self, now: Instant) -> bool {
        self.inner.lock().is_ok_and(|inner| {
            !inner.handed.is_empty() || inner.queue.first().is_some_and(|(at, _)| *at <= now)
        })
    }

    /// No wakeup for `namespace/name` (deleted).
    pub fn forget(&self, namespace: &str, name: &str) {
        if let Ok(mut inner) = self.inner.lock() {
            let key = key(namespace, name);
            inner.remove(&key);
            if inner.handed.remove(key.as_str()).is_some() {
                drop(inner);
                self.changed.notify_one();
            }
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.inner.lock().map(|i| i.at.len()).unwrap_or_default()
    }

    fn next(&self, now: Instant) -> Next {
        if !self.open.load(Ordering::SeqCst) {
            return Next::Wait(None);
        }
        let Ok(mut inner) = self.inner.lock() else {
            return Next::Wait(None);
        };
        inner.handed.retain(|_, t| *t + HANDED_FOR > now);
        let room = self.limit.saturating_sub(inner.handed.len());
        let mut out = Vec::new();
        while out.len() < room
            && let Some((at, _)) = inner.queue.first()
            && *at <= now
        {
            if let Some((_, key)) = inner.queue.pop_first() {
                inner.at.remove(&key);
                if let Some((ns, name)) = key.split_once('/') {
                    out.push(tdset_ref_named(ns, name));
                }
                inner.handed.insert(key, now);
            }
        }
        if !out.is_empty() {
            return Next::Hand(out);
        }
        let next_due = inner.queue.first().map(|(t, _)| *t);
        if room == 0 {
            // Full: wait for a start (notified), or for the oldest handed one to lapse.
            let lapse = inner.handed.values().min().map(|t| *t + HANDED_FOR);
            Next::Wait(lapse)
        } else {
            Next::Wait(next_due)
        }
    }

    /// Due TDSets, as room allows; never ends.
    pub fn triggers(self: Arc<Self>) -> impl Stream<Item = TDSetRef> + Send {
        let batches = futures::stream::unfold(self, |this| async move {
            loop {
                // A change between `next` and the wait is not missed: `notify_one` leaves a
                // permit when nobody waits yet.
                match this.next(Instant::now()) {
                    Next::Hand(batch) => return Some((batch, this)),
                    Next::Wait(Some(until)) => {
                        tokio::select! {
                            () = tokio::time::sleep_until(until) => {}
                            () = this.changed.notified() => {}
                        }
                    }
                    Next::Wait(None) => this.changed.notified().await,
                }
            }
        });
        futures::StreamExt::flat_map(batches, futures::stream::iter)
    }
}

impl crate::controller::lane::Due for Wakeups {
    fn pending(&self, now: Instant) -> bool {
        self.pending_due(now)
    }
}

#[cfg(test)]
mod tests {
    use futures::StreamExt;

    use super::*;

    fn names(refs: Vec<TDSetRef>) -> Vec<String> {
        refs.into_iter()
            .map(|r| format!("{}/{}", r.namespace.unwrap_or_default(), r.name))
            .collect()
    }

    /// Wakeups already open, as after the caches synced.
    fn opened(limit: usize) -> Arc<Wakeups> {
        let w = Arc::new(Wakeups::new(limit));
        w.open();
        w
    }

    fn started(w: &Wakeups, r: &TDSetRef) {
        w.started(r.namespace.as_deref().unwrap_or_default(), &r.name);
    }

    #[tokio::test(start_paused = true)]
    async fn each_tdset_is_triggered_at_its_instant_in_order() {
        let w = opened(16);
        let t0 = Instant::now();
        w.set("a", "late", t0 + Duration::from_secs(30));
        w.set("a", "early", t0 + Duration::from_secs(10));
        w.set("b", "early", t0 + Duration::from_secs(10));
        let mut s = Box::pin(w.clone().triggers());

        let first = s.next().await.unwrap();
        assert_eq!(Instant::now() - t0, Duration::from_secs(10));
        let second = s.next().await.unwrap();
        assert_eq!(
            names(vec![first, second]),
            ["a/early", "b/early"],
            "same instant: both, at it"
        );
        assert_eq!(w.len(), 1);
        let third = s.next().await.unwrap();
        assert_eq!(Instant::now() - t0, Duration::from_secs(30));
        assert_eq!(names(vec![third]), ["a/late"]);
        assert_eq!(w.len(), 0, "a fired wakeup is gone");
    }

    #[tokio::test(start_paused = true)]
    async fn the_earliest_wakeup_stands_and_forget_removes() {
        let w = opened(16);
        let t0 = Instant::now();
        w.set("a", "x", t0 + Duration::from_secs(10));
        w.set("a", "x", t0 + Duration::from_secs(20));
        w.set("a", "gone", t0 + Duration::from_secs(5));
        w.forget("a", "gone");
        assert_eq!(w.len(), 1);
        let mut s = Box::pin(w.clone().triggers());
        let only = s.next().await.unwrap();
        assert_eq!(
            Instant::now() - t0,
            Duration::from_secs(10),
            "a later wakeup does not push back an earlier one"
        );
        assert_eq!(names(vec![only]), ["a/x"]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_started_reconcile_covers_what_was_due_but_not_what_comes_later() {
        let w = opened(16);
        let t0 = Instant::now();
        w.now("a", "x");
        w.started("a", "x");
        assert_eq!(w.len(), 0, "due by the start: covered");
        w.set("a", "x", t0 + Duration::from_secs(60));
        w.started("a", "x");
        assert_eq!(w.len(), 1, "a transition later than the start stays");
    }

    #[tokio::test(start_paused = true)]
    async fn at_most_limit_are_handed_over_until_they_start() {
        let w = opened(2);
        for i in 0..5 {
            w.now("a", &format!("t{i}"));
        }
        let mut s = Box::pin(w.clone().triggers());
        let a = s.next().await.unwrap();
        let b = s.next().await.unwrap();
        assert_eq!(names(vec![a.clone(), b]), ["a/t0", "a/t1"]);
        let t0 = Instant::now();
        let waiting = tokio::time::timeout(Duration::from_secs(1), s.next()).await;
        assert!(waiting.is_err(), "no third before one has started");
        started(&w, &a);
        assert_eq!(names(vec![s.next().await.unwrap()]), ["a/t2"]);
        // One handed over and never started (its TDSet went) stops counting after a while.
        let c = s.next().await;
        assert!(
            c.is_some() && Instant::now() - t0 >= HANDED_FOR,
            "the lapsed one freed its place"
        );
        w.forget("a", "t2");
        assert_eq!(
            names(vec![s.next().await.unwrap()]),
            ["a/t4"],
            "a forgotten one frees its place at once"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn nothing_is_handed_over_before_the_gate_opens() {
        let w = Arc::new(Wakeups::new(16));
        w.now("a", "x");
        let mut s = Box::pin(w.clone().triggers());
        let early = tokio::time::timeout(Duration::from_secs(60), s.next()).await;
        assert!(early.is_err(), "closed: nothing handed over");
        w.open();
        assert_eq!(names(vec![s.next().await.unwrap()]), ["a/x"]);
    }

    #[tokio::test(start_paused = true)]
    async fn an_earlier_wakeup_set_while_waiting_is_not_late() {
        let w = opened(16);
        let t0 = Instant::now();
        w.set("a", "late", t0 + Duration::from_secs(3600));
        let mut s = Box::pin(w.clone().triggers());
        let setter = {
            let w = w.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_secs(1)).await;
                w.set("a", "soon", Instant::now() + Duration::from_secs(2));
            })
        };
        let first = s.next().await.unwrap();
        assert_eq!(Instant::now() - t0, Duration::from_secs(3));
        assert_eq!(names(vec![first]), ["a/soon"]);
        setter.await.unwrap();

        // And with nothing pending at all, the first wakeup set is seen.
        let w = opened(16);
        let mut s = Box::pin(w.clone().triggers());
        let w2 = w.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            w2.now("b", "y");
        });
        assert_eq!(names(vec![s.next().await.unwrap()]), ["b/y"]);
    }
}

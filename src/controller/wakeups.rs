//! When each TDSet is to be reconciled next (its next transition, or `intervalMint`), kept
//! compactly and fed to the controller as triggers.
//!
//! kube-runtime's own requeue (`Action::requeue`) keeps two copies of a full `ObjectRef`
//! (name, namespace, uid, resourceVersion) per pending object in a hash map and a timer
//! wheel: about 500 bytes per TDSet, 5 MB of a 10 000-TDSet operator's heap, for an instant
//! and a name. Here one shared `"namespace/name"` string is keyed by its instant.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use futures::Stream;
use kube::runtime::reflector::ObjectRef;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::TDSetRef;

/// At most one pending wakeup per TDSet: the latest reconcile knows best, so setting one
/// replaces the one before (earlier or later).
#[derive(Default)]
pub struct Wakeups {
    inner: Mutex<Inner>,
    /// Wakes the stream when a wakeup earlier than the one it sleeps for is set.
    changed: Notify,
}

#[derive(Default)]
struct Inner {
    at: HashMap<Arc<str>, Instant>,
    queue: BTreeSet<(Instant, Arc<str>)>,
}

impl Wakeups {
    /// Reconcile `namespace/name` at `when` (and not at any instant set before).
    pub fn set(&self, namespace: &str, name: &str, when: Instant) {
        let Ok(mut inner) = self.inner.lock() else {
            return;
        };
        let key: Arc<str> = format!("{namespace}/{name}").into();
        let earliest = inner.queue.first().map(|(t, _)| *t);
        if let Some((key, old)) = inner.at.remove_entry(&key) {
            inner.queue.remove(&(old, key));
        }
        inner.at.insert(key.clone(), when);
        inner.queue.insert((when, key));
        drop(inner);
        if earliest.is_none_or(|t| when < t) {
            self.changed.notify_one();
        }
    }

    /// No wakeup for `namespace/name` (deleted).
    pub fn forget(&self, namespace: &str, name: &str) {
        if let Ok(mut inner) = self.inner.lock() {
            let key = format!("{namespace}/{name}");
            if let Some((key, at)) = inner.at.remove_entry(key.as_str()) {
                inner.queue.remove(&(at, key));
            }
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.inner.lock().map(|i| i.at.len()).unwrap_or_default()
    }

    /// Everything due at `now`, removed; otherwise the instant of the next.
    fn due(&self, now: Instant) -> Result<Vec<TDSetRef>, Option<Instant>> {
        let Ok(mut inner) = self.inner.lock() else {
            return Err(None);
        };
        let mut out = Vec::new();
        while let Some((at, _)) = inner.queue.first()
            && *at <= now
        {
            if let Some((_, key)) = inner.queue.pop_first() {
                inner.at.remove(&key);
                if let Some((ns, name)) = key.split_once('/') {
                    out.push(ObjectRef::new(name).within(ns));
                }
            }
        }
        if out.is_empty() {
            Err(inner.queue.first().map(|(t, _)| *t))
        } else {
            Ok(out)
        }
    }

    /// The TDSets whose instant has come, as they come; never ends.
    pub fn triggers(self: Arc<Self>) -> impl Stream<Item = TDSetRef> + Send {
        let batches = futures::stream::unfold(self, |this| async move {
            loop {
                // A wakeup set between `due` and the wait is not missed: `notify_one` leaves
                // a permit when nobody waits yet.
                match this.due(Instant::now()) {
                    Ok(batch) => return Some((batch, this)),
                    Err(Some(next)) => {
                        tokio::select! {
                            () = tokio::time::sleep_until(next) => {}
                            () = this.changed.notified() => {}
                        }
                    }
                    Err(None) => this.changed.notified().await,
                }
            }
        });
        futures::StreamExt::flat_map(batches, futures::stream::iter)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use futures::StreamExt;

    use super::*;

    fn names(refs: Vec<TDSetRef>) -> Vec<String> {
        refs.into_iter()
            .map(|r| format!("{}/{}", r.namespace.unwrap_or_default(), r.name))
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn each_tdset_is_triggered_at_its_instant_in_order() {
        let w = Arc::new(Wakeups::default());
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
    async fn setting_again_replaces_and_forget_removes() {
        let w = Arc::new(Wakeups::default());
        let t0 = Instant::now();
        w.set("a", "x", t0 + Duration::from_secs(10));
        w.set("a", "x", t0 + Duration::from_secs(20));
        w.set("a", "gone", t0 + Duration::from_secs(5));
        w.forget("a", "gone");
        assert_eq!(w.len(), 1);
        let mut s = Box::pin(w.clone().triggers());
        let only = s.next().await.unwrap();
        assert_eq!(Instant::now() - t0, Duration::from_secs(20));
        assert_eq!(names(vec![only]), ["a/x"]);
    }

    #[tokio::test(start_paused = true)]
    async fn an_earlier_wakeup_set_while_waiting_is_not_late() {
        let w = Arc::new(Wakeups::default());
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
        let w = Arc::new(Wakeups::default());
        let mut s = Box::pin(w.clone().triggers());
        let w2 = w.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            w2.set("b", "y", Instant::now());
        });
        assert_eq!(names(vec![s.next().await.unwrap()]), ["b/y"]);
    }
}

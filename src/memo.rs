//! What the operator wrote that its caches may not show yet ("read your own writes"): the
//! statuses it queued or sent, and the owned objects it applied. A reconcile consults these
//! before trusting a cached copy that predates its own write.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kube::Resource;

use crate::api::{RequestWakeStatus, TDSet, TDSetStatus};

/// The statuses this operator queued or wrote that its TDSet cache may not show yet ("read
/// your own writes"). A reconcile can run before the bookkeeping lane has sent its status, or
/// before the watch delivers it; computed from the stale status, the next status would differ
/// in its transition times, or lose what only status remembers (a target's original count),
/// and be written again.
///
/// An entry outlives the watch's echo of it by `GRACE` (a reconcile's deadline and more): the
/// echo is seen before the cache is given it, and a reconcile may have read the cache before
/// either; forgotten at the echo, such a reconcile computed from the status before ours (a
/// group's joining workload taken for a boundary's, a target's original count lost).
#[derive(Default)]
pub struct StatusMemo {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    written: HashMap<String, Written>,
    /// Entries the watch caught up with, oldest first, to forget once `GRACE` has passed.
    caught_up: VecDeque<(Instant, String)>,
}

struct Written {
    /// resourceVersion the status write produced; `None` while it is queued. A queued status
    /// is the TDSet's status as far as this operator is concerned, whatever the cache shows:
    /// only the operator writes status.
    produced: Option<String>,
    /// Shared with the lane's queue: a burst of 10 000 statuses is held once.
    status: Arc<TDSetStatus>,
    at: Instant,
    /// When the watch delivered the revision `produced` (the entry then goes after `GRACE`).
    caught_up: Option<Instant>,
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
    /// How long an entry outlives the watch catching up with it: longer than any reconcile
    /// may take from reading the cache to asking `current`, its deadline (60 s,
    /// `controller::RECONCILE_DEADLINE`, checked there).
    pub const GRACE: Duration = Duration::from_secs(65);

    /// The TDSet's status as far as this operator knows: the one it queued, or the one it
    /// wrote while the cached TDSet is a revision from before that write.
    pub fn current(&self, tdset: &TDSet) -> Option<TDSetStatus> {
        let Some(uid) = tdset.meta().uid.as_deref() else {
            return tdset.status.clone();
        };
        let Ok(mut inner) = self.inner.lock() else {
            return tdset.status.clone();
        };
        let written = &mut inner.written;
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

    /// The TDSet's status as far as it is known to be in the API: the one this operator
    /// wrote (not one still queued), else the cached one.
    pub fn durable(&self, tdset: &TDSet) -> Option<TDSetStatus> {
        let written = tdset.meta().uid.as_deref().and_then(|uid| {
            let inner = self.inner.lock().ok()?;
            let w = inner.written.get(uid)?;
            w.produced.as_ref()?;
            Some(TDSetStatus::clone(&w.status))
        });
        written.or_else(|| tdset.status.clone())
    }

    /// The TDSet cache now holds `tdset` (`deleted`: it was deleted). Returns whether `tdset`
    /// is exactly what our own status write produced (the watch echoing it): a status write
    /// changes nothing but the status, and that status is ours, so there is nothing to
    /// reconcile. At a boundary of 10 000 TDSets each status write otherwise came back as a
    /// reconcile that wrote nothing and kept the lane from its turn.
    ///
    /// A written status the cache has caught up with is marked here and forgotten `GRACE`
    /// later (by any later call), rather than at the TDSet's next reconcile, which may be
    /// hours away: the memo holds only writes in flight, not a second copy of every status.
    pub fn seen(&self, tdset: &TDSet, deleted: bool) -> bool {
        self.seen_at(tdset, deleted, Instant::now())
    }

    fn seen_at(&self, tdset: &TDSet, deleted: bool, now: Instant) -> bool {
        let (Some(uid), Ok(mut inner)) = (tdset.meta().uid.as_deref(), self.inner.lock()) else {
            return false;
        };
        inner.forget_caught_up(now);
        let cached = tdset.meta().resource_version.as_deref();
        let Some(w) = inner.written.get_mut(uid) else {
            return false;
        };
        // The wake endpoint writes status too (`requestWake`): an event at the revision our
        // write produced is not our echo when it carries a wake-up ours did not (our retry can
        // answer with a revision the endpoint's write produced).
        let wake = |s: Option<&TDSetStatus>| {
            s.and_then(|s| s.request_wake.as_ref())
                .map(|w| RequestWakeStatus {
                    phase: None,
                    ..w.clone()
                })
        };
        let echo = cached.is_some()
            && w.produced.as_deref() == cached
            && wake(tdset.status.as_ref()) == wake(Some(&w.status));
        if deleted {
            inner.written.remove(uid);
        } else if w.produced.is_some()
            && !older(cached, w.produced.as_deref())
            && w.caught_up.is_none()
        {
            w.caught_up = Some(now);
            inner.caught_up.push_back((now, uid.to_string()));
        }
        echo
    }

    /// Records `status` as written at `produced` outside the lane (a shard let go of the
    /// TDSet): what `current` returns while the cache is older.
    pub fn replace(&self, uid: &str, status: TDSetStatus, produced: Option<String>) {
        if let Ok(mut inner) = self.inner.lock() {
            inner.written.insert(
                uid.to_string(),
                Written {
                    produced,
                    status: Arc::new(status),
                    at: Instant::now(),
                    caught_up: None,
                },
            );
        }
    }

    /// Forgets what this operator wrote of a TDSet (a shard let go of it).
    pub fn forget(&self, uid: &str) {
        if let Ok(mut inner) = self.inner.lock() {
            inner.written.remove(uid);
        }
    }

    /// Records a status queued for `tdset`.
    pub fn queued(&self, tdset: &TDSet, status: Arc<TDSetStatus>) {
        let (Some(uid), Ok(mut inner)) = (tdset.meta().uid.clone(), self.inner.lock()) else {
            return;
        };
        inner.forget_caught_up(Instant::now());
        let written = &mut inner.written;
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
                    caught_up: None,
                },
            );
        }
    }

    /// A queued status has been written and produced revision `produced` (`None`: the TDSet
    /// is gone, or the write gave up). Kept only when it is still the status on record: a
    /// newer one queued meanwhile stays.
    pub fn written(&self, uid: &str, status: &TDSetStatus, produced: Option<String>) {
        let Ok(mut inner) = self.inner.lock() else {
            return;
        };
        let written = &mut inner.written;
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

impl Inner {
    /// Forgets the entries the watch caught up with `GRACE` ago or more (and not queued again
    /// since: a new status clears the mark).
    fn forget_caught_up(&mut self, now: Instant) {
        while let Some((at, _)) = self.caught_up.front() {
            if now.saturating_duration_since(*at) < StatusMemo::GRACE {
                break;
            }
            let Some((at, uid)) = self.caught_up.pop_front() else {
                break;
            };
            if self
                .written
                .get(&uid)
                .is_some_and(|w| w.caught_up == Some(at))
            {
                self.written.remove(&uid);
            }
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
    /// How long an entry outlives the watch catching up with it: longer than any reconcile
    /// takes from reading the cache to asking `in_place`.
    const GRACE: Duration = Duration::from_secs(10);
    /// Kept even when full: a watch delivers a write seconds after it, not a minute; an entry
    /// forgotten too early costs one repeated write, never a lost one.
    const RECENT: Duration = Duration::from_secs(60);

    /// The key of an owned object: the same for the write and for the watch that sees it.
    pub fn key(namespace: &str, name: &str) -> String {
        format!("{namespace}/{name}")
    }

    /// The key of a `scaleTargetRef` target written through `/scale`.
    pub fn target_key(namespace: &str, group: &str, kind: &str, name: &str) -> String {
        format!("{namespace}/{group}/{kind}/{name}")
    }

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
        // Full: forget the oldest writes first. Ramps at 10 000 TDSets, or owned Deployments
        // and `scaleTargetRef` targets together, write more than `MAX` within `MAX_AGE`; a
        // new write's entry matters more than one whose echo is long past.
        let now = Instant::now();
        for age in [Self::MAX_AGE, Self::RECENT] {
            if w.len() >= Self::MAX {
                w.retain(|_, e| now.duration_since(e.at) < age);
            }
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

    /// The cache now holds `key` at revision `cached`. Returns whether that revision is exactly
    /// what our own write produced (the watch echoing it): a reconcile for it would find the
    /// write in place and do nothing.
    ///
    /// Our write the cache has caught up with is forgotten (see `StatusMemo::seen`), once no
    /// reconcile can still hold a copy of the cache read before it caught up (one read just
    /// before this event, on another thread, would otherwise find no entry and write again).
    pub fn seen(&self, key: &str, cached: Option<&str>) -> bool {
        let Ok(mut w) = self.written.lock() else {
            return false;
        };
        let Some(e) = w.get(key) else {
            return false;
        };
        let cached = cached.and_then(|c| c.parse::<u64>().ok());
        let echo = cached == Some(e.produced);
        if e.at.elapsed() >= Self::GRACE && cached.is_none_or(|c| c >= e.produced) {
            w.remove(key);
        }
        echo
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
    use super::*;
    use crate::workload::owned::tests::tdset;

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

    /// The watch's echo is seen before the cache is given it, and a reconcile may have read the
    /// cache before either: the status before ours must not come back in that window.
    #[test]
    fn a_reconcile_that_read_the_cache_before_the_echo_still_sees_our_status() {
        let memo = StatusMemo::default();
        let before = TDSetStatus {
            desired_replicas: Some(3),
            ..TDSetStatus::default()
        };
        let ours = TDSetStatus {
            desired_replicas: Some(0),
            ..TDSetStatus::default()
        };
        memo.queued(&at("1", Some(before.clone())), Arc::new(ours.clone()));
        memo.written(UID, &ours, Some("3".into()));
        let now = Instant::now();
        assert!(memo.seen_at(&at("3", Some(ours.clone())), false, now));
        assert_eq!(
            memo.current(&at("1", Some(before.clone()))),
            Some(ours.clone())
        );
        // Another TDSet's event within the grace forgets nothing.
        let mut other = at("7", None);
        other.metadata.uid = Some("other".into());
        memo.seen_at(&other, false, now + StatusMemo::GRACE / 2);
        assert_eq!(
            memo.current(&at("1", Some(before.clone()))),
            Some(ours.clone())
        );
        // Past the grace, any event forgets it: the cache has long been given the echo.
        memo.seen_at(&other, false, now + StatusMemo::GRACE);
        assert_eq!(memo.current(&at("1", Some(before.clone()))), Some(before));
    }

    #[test]
    fn only_the_revision_our_status_write_produced_is_its_echo() {
        let memo = StatusMemo::default();
        let ours = TDSetStatus {
            desired_replicas: Some(3),
            ..TDSetStatus::default()
        };
        memo.queued(&at("1", None), Arc::new(ours.clone()));
        // Queued, not written: no revision of it is ours yet.
        assert!(!memo.seen(&at("1", None), false));
        memo.written(UID, &ours, Some("3".into()));
        // Before it (someone else's write): not an echo.
        assert!(!memo.seen(&at("2", None), false));
        // A TDSet of another uid at the same revision is not ours.
        let mut other = at("3", Some(ours.clone()));
        other.metadata.uid = Some("other".into());
        assert!(!memo.seen(&other, false));
        assert!(memo.seen(&at("3", Some(ours.clone())), false));
        // Caught up: forgotten, so a later change at another revision is not an echo either.
        assert!(!memo.seen(&at("4", Some(ours)), false));
    }

    /// Our retry of a status write can answer with the revision the wake endpoint's write
    /// produced (ours changed nothing more): that revision carries a wake-up ours did not, and
    /// is reconciled, not taken for our echo.
    #[test]
    fn a_revision_with_a_wake_up_we_did_not_write_is_no_echo() {
        let memo = StatusMemo::default();
        let ours = TDSetStatus {
            desired_replicas: Some(0),
            ..TDSetStatus::default()
        };
        memo.queued(&at("1", None), Arc::new(ours.clone()));
        memo.written(UID, &ours, Some("5".into()));
        let woken = TDSetStatus {
            request_wake: Some(RequestWakeStatus {
                since: Some("2026-05-01T22:00:00Z".into()),
                until: Some("2026-05-01T22:30:00Z".into()),
                ..Default::default()
            }),
            ..ours.clone()
        };
        assert!(!memo.seen(&at("5", Some(woken)), false));
        // Ours, with only our phase on it: an echo.
        let phased = TDSetStatus {
            request_wake: Some(RequestWakeStatus {
                phase: Some(crate::api::RequestWakePhase::Ended),
                ..Default::default()
            }),
            ..ours.clone()
        };
        let mut ours_phased = ours.clone();
        ours_phased.request_wake = phased.request_wake.clone();
        memo.queued(&at("5", None), Arc::new(ours_phased.clone()));
        memo.written(UID, &ours_phased, Some("6".into()));
        assert!(memo.seen(&at("6", Some(phased)), false));
    }

    #[test]
    fn a_queued_status_is_known_but_only_a_written_one_is_durable() {
        let memo = StatusMemo::default();
        let cached = TDSetStatus {
            desired_replicas: Some(1),
            ..TDSetStatus::default()
        };
        let ours = TDSetStatus {
            desired_replicas: Some(3),
            ..TDSetStatus::default()
        };
        memo.queued(&at("1", Some(cached.clone())), Arc::new(ours.clone()));
        assert_eq!(
            memo.current(&at("1", Some(cached.clone()))),
            Some(ours.clone())
        );
        assert_eq!(
            memo.durable(&at("1", Some(cached.clone()))),
            Some(cached.clone())
        );
        memo.written(UID, &ours, Some("2".into()));
        assert_eq!(memo.durable(&at("1", Some(cached))), Some(ours));
    }

    #[test]
    fn only_the_revision_our_own_write_produced_is_its_echo() {
        let w = OwnWrites::default();
        let want = OwnWrites::fingerprint(&serde_json::json!({"replicas": 4}));
        assert!(!w.seen("ns/web", Some("12")));
        w.record("ns/web", want, Some("12"));
        assert!(w.seen("ns/web", Some("12")));
        // Someone else's change after ours, a revision that is not a number, another object.
        assert!(!w.seen("ns/web", Some("13")));
        assert!(!w.seen("ns/web", Some("x")));
        assert!(!w.seen("ns/web", None));
        assert!(!w.seen("ns/api", Some("12")));
    }

    #[test]
    fn a_full_record_of_own_writes_makes_room_for_a_new_one() {
        let w = OwnWrites::default();
        let want = OwnWrites::fingerprint(&serde_json::json!({"replicas": 4}));
        let two_minutes_ago = Instant::now()
            .checked_sub(Duration::from_secs(120))
            .expect("the clock is past two minutes");
        if let Ok(mut m) = w.written.lock() {
            for i in 0..OwnWrites::MAX {
                let e = OwnWrite {
                    produced: 1,
                    desired: want,
                    at: two_minutes_ago,
                };
                m.insert(format!("ns/old-{i}"), e);
            }
        }
        // Ramps of many TDSets: more writes within `MAX_AGE` than the record holds.
        w.record("ns/web", want, Some("12"));
        assert!(w.in_place("ns/web", want, Some("10")));
        assert!(w.written.lock().map(|m| m.len()).unwrap_or(0) < OwnWrites::MAX);
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
    fn the_watch_delivering_our_write_empties_the_memo_without_a_reconcile() {
        let memo = StatusMemo::default();
        let ours = TDSetStatus {
            desired_replicas: Some(3),
            ..TDSetStatus::default()
        };
        memo.queued(&at("1", None), Arc::new(ours.clone()));
        memo.seen(&at("2", None), false);
        assert_eq!(
            memo.current(&at("2", None)),
            Some(ours.clone()),
            "queued: kept"
        );
        memo.written(UID, &ours, Some("3".into()));
        memo.seen(&at("2", None), false);
        assert_eq!(
            memo.current(&at("1", None)),
            Some(ours.clone()),
            "not caught up: kept"
        );
        let now = Instant::now();
        memo.seen_at(&at("3", Some(ours.clone())), false, now);
        assert_eq!(
            memo.current(&at("1", None)),
            Some(ours.clone()),
            "caught up: kept for a reconcile that read the cache before"
        );
        memo.seen_at(&at("3", Some(ours.clone())), false, now + StatusMemo::GRACE);
        assert_eq!(
            memo.current(&at("1", None)),
            None,
            "caught up a grace ago: forgotten"
        );
        memo.queued(&at("4", None), Arc::new(ours.clone()));
        memo.seen(&at("4", None), true);
        assert_eq!(memo.current(&at("4", None)), None, "deleted: forgotten");

        let w = OwnWrites::default();
        let want = OwnWrites::fingerprint(&serde_json::json!({"replicas": 4}));
        w.record("ns/web", want, Some("12"));
        w.seen("ns/web", Some("11"));
        assert!(
            w.in_place("ns/web", want, Some("11")),
            "not caught up: kept"
        );
        // Caught up: a reconcile that read the cache just before still finds our write...
        w.seen("ns/web", Some("12"));
        assert!(
            w.in_place("ns/web", want, Some("11")),
            "caught up a moment ago: kept for a reconcile that read the cache before"
        );
        // ...and once that moment is past, the entry goes.
        if let Ok(mut m) = w.written.lock()
            && let Some(e) = m.get_mut("ns/web")
        {
            e.at -= OwnWrites::GRACE;
        }
        w.seen("ns/web", Some("12"));
        assert!(
            !w.in_place("ns/web", want, Some("11")),
            "caught up: forgotten"
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

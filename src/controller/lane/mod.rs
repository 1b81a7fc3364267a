//! The bookkeeping lane: TDSet status writes and Events, sent after the workload writes.
//!
//! At a shared boundary (09:00 on a Monday) every TDSet's Deployment, `/scale` or HPA write is
//! what users wait for; the status and the Event saying so can be read a second later. So a
//! reconcile makes its workload write itself and hands status and Events to this lane, which
//! sends them while no workload write is under way and no reconcile is due (a boundary's are
//! all due at once, so its statuses and Events follow its last workload write). Under sustained
//! workload writes with nothing due, one per writer goes every `MAX_DEFER`; while reconciles
//! stay due, one per writer every `MAX_DUE_DEFER`: they never starve.
//!
//! - Statuses coalesce per TDSet: one superseded before it is sent is never sent, and one
//!   TDSet's statuses are written one at a time, in order.
//! - Events are all sent, in order, once each (the reconcile only emits real changes).
//! - The lane is bounded: Events by `EVENT_QUEUE`; statuses by `STATUS_QUEUE` while no
//!   reconcile is due, and by the TDSets themselves (one each) while a boundary's are: every
//!   status of a boundary waits for its scaling, however many TDSets share it, and a due
//!   reconcile never waits for room. A full queue makes its publisher wait and gives
//!   bookkeeping the turn until it is half empty, so a reconcile waiting for room never holds
//!   the lane back.
//! - A crash with writes still queued loses nothing that matters: the next reconcile computes
//!   the same status from the workload and writes it; only the Events of that moment are lost.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use futures::future::BoxFuture;
use k8s_openapi::api::events::v1::Event;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use tokio::sync::Notify;
use tracing::{debug, warn};

use crate::api::{TDSet, TDSetStatus};
use crate::error::{Error, Result};
use crate::memo::StatusMemo;
use crate::telemetry::Metrics;
use crate::workload::owned::FIELD_MANAGER;

mod event;
pub(crate) use event::{EventNote, EventType, Events, note, truncate};

/// Events waiting at most; past it `publish` waits for room. A boundary sends one per TDSet,
/// so this is the largest boundary whose Events all wait for its scaling (about 0.6 KB each:
/// 10 MiB when full; BENCHMARKS.md, issue 25).
const EVENT_QUEUE: usize = 16384;
/// TDSets with a status waiting at most while nothing is due (a converge of thousands, whose
/// reconciles would otherwise queue every status while their workload writes go on); past it
/// a new one waits for room. While a boundary is due there is no such bound: one per TDSet.
const STATUS_QUEUE: usize = 2048;
/// Concurrent bookkeeping requests.
const WRITERS: usize = 16;
/// The lane writes once no workload write has run for this long...
const QUIET: Duration = Duration::from_millis(50);
/// ...or, under sustained workload writes, after waiting this long (one write, then wait again).
const MAX_DEFER: Duration = Duration::from_secs(1);
/// ...or, while reconciles are due (a boundary being worked through), after this long. Above
/// the scale phase of a boundary of thousands (BENCHMARKS.md), so only a stream of due
/// reconciles that never ends is cut into.
const MAX_DUE_DEFER: Duration = Duration::from_secs(30);
/// A failed status write is retried after this, doubling up to `RETRY_MAX`.
const RETRY_MIN: Duration = Duration::from_millis(500);
const RETRY_MAX: Duration = Duration::from_secs(30);

/// Whether reconciles are due that have not started (the wakeup scheduler knows).
pub trait Due: Send + Sync {
    fn pending(&self, now: Instant) -> bool;
}

/// Tracks the workload writes in flight, and the reconciles due, so that bookkeeping can stay
/// out of their way.
#[derive(Default)]
pub struct Priority {
    in_flight: AtomicUsize,
    /// Of those, the reconciles that were due (a boundary's): bookkeeping waits for them
    /// without `MAX_DEFER`.
    due_in_flight: AtomicUsize,
    last_done: Mutex<Option<Instant>>,
    due: Option<Arc<dyn Due>>,
}

/// Held while a reconcile observes and writes its workload.
pub struct WorkloadTurn<'a> {
    priority: &'a Priority,
    due: bool,
}

impl Priority {
    pub fn with_due(due: Arc<dyn Due>) -> Self {
        Priority {
            due: Some(due),
            ..Priority::default()
        }
    }

    /// Held from a reconcile's start until its workload is written. It counts as due until
    /// `not_due` says otherwise, so that it is due without a gap from the moment its wakeup
    /// stops counting.
    pub fn workload(&self) -> WorkloadTurn<'_> {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        self.due_in_flight.fetch_add(1, Ordering::SeqCst);
        WorkloadTurn {
            priority: self,
            due: true,
        }
    }

    /// Reconciles are due, or running since they were.
    fn due(&self, now: Instant) -> bool {
        self.due_in_flight.load(Ordering::SeqCst) > 0
            || self.due.as_ref().is_some_and(|d| d.pending(now))
    }

    /// Whether no workload write has been in flight for `QUIET`, and none is due.
    fn quiet(&self, now: Instant) -> bool {
        if self.in_flight.load(Ordering::SeqCst) > 0 || self.due(now) {
            return false;
        }
        let last = self.last_done.lock().ok().and_then(|l| *l);
        last.is_none_or(|t| now.duration_since(t) >= QUIET)
    }
}

impl WorkloadTurn<'_> {
    /// This reconcile was not due (a watch event, not a wakeup that came due).
    pub fn not_due(&mut self) {
        if std::mem::take(&mut self.due) {
            self.priority.due_in_flight.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

impl Drop for WorkloadTurn<'_> {
    fn drop(&mut self) {
        if let Ok(mut last) = self.priority.last_done.lock() {
            *last = Some(Instant::now());
        }
        self.not_due();
        self.priority.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A status to write: the whole status of one TDSet, applied under the operator's manager.
#[derive(Clone, Debug, PartialEq)]
pub struct StatusWrite {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub status: Arc<TDSetStatus>,
    /// Failed attempts so far (for the retry backoff).
    pub attempts: u32,
}

#[derive(Debug)]
enum Job {
    Status(Box<StatusWrite>),
    Event(Box<EventNote>),
}

/// What is waiting; pure bookkeeping of the bookkeeping, unit-tested below.
#[derive(Default)]
struct Queue {
    statuses: HashMap<String, StatusWrite>,
    /// TDSets with a status waiting, oldest first.
    order: VecDeque<String>,
    /// TDSets whose status is being written: their next one waits for it.
    writing: HashSet<String>,
    /// Statuses waiting to be retried, and when.
    retry_at: HashMap<String, Instant>,
    events: VecDeque<EventNote>,
    /// Set when either queue fills (statuses only while nothing is due), cleared once both are
    /// half empty: meanwhile bookkeeping has the turn (Events first while theirs is over half
    /// full).
    flushing: bool,
    superseded: u64,
}

impl Queue {
    /// Queues a status; one already waiting for the same TDSet is replaced (returns true).
    /// `order` holds a uid exactly while `statuses` does.
    fn push_status(&mut self, s: StatusWrite) -> bool {
        let uid = s.uid.clone();
        match self.statuses.insert(uid.clone(), s) {
            Some(_) => {
                self.superseded += 1;
                true
            }
            None => {
                self.order.push_back(uid);
                false
            }
        }
    }

    /// Takes the status waiting for `uid` out of the queue, if any.
    fn take_status(&mut self, uid: &str) -> Option<StatusWrite> {
        let s = self.statuses.remove(uid)?;
        self.order.retain(|u| u != uid);
        self.retry_at.remove(uid);
        Some(s)
    }

    /// Statuses first (what `kubectl get` shows), then Events; Events first while their queue
    /// is full (a publisher is waiting). A TDSet whose previous status is still being written,
    /// or that waits for a retry, is skipped.
    fn pop(&mut self, now: Instant, due: bool) -> Option<Job> {
        if self.events_full() || (!due && self.statuses_full()) {
            self.flushing = true;
        }
        if self.flushing
            && self.events.len() <= EVENT_QUEUE / 2
            && (due || self.statuses.len() <= STATUS_QUEUE / 2)
        {
            self.flushing = false;
        }
        if self.flushing
            && self.events.len() > EVENT_QUEUE / 2
            && let Some(e) = self.events.pop_front()
        {
            return Some(Job::Event(Box::new(e)));
        }
        let pos = self.order.iter().position(|uid| {
            !self.writing.contains(uid) && self.retry_at.get(uid).is_none_or(|t| *t <= now)
        });
        if let Some(pos) = pos {
            let uid = self.order.remove(pos)?;
            self.retry_at.remove(&uid);
            let s = self.statuses.remove(&uid)?;
            self.writing.insert(uid);
            return Some(Job::Status(Box::new(s)));
        }
        self.events.pop_front().map(|e| Job::Event(Box::new(e)))
    }

    /// A status write ended; a failed one is queued again unless a newer one is waiting.
    fn done(&mut self, uid: &str, failed: Option<StatusWrite>, now: Instant) {
        self.writing.remove(uid);
        if let Some(mut s) = failed
            && !self.statuses.contains_key(uid)
        {
            s.attempts += 1;
            let wait = RETRY_MIN
                .saturating_mul(1 << s.attempts.min(8))
                .min(RETRY_MAX);
            self.retry_at.insert(uid.to_string(), now + wait);
            self.statuses.insert(uid.to_string(), s);
            self.order.push_back(uid.to_string());
        }
    }

    fn events_full(&self) -> bool {
        self.events.len() >= EVENT_QUEUE
    }

    fn statuses_full(&self) -> bool {
        self.statuses.len() >= STATUS_QUEUE
    }

    /// Whether bookkeeping has the turn regardless of workload writes.
    fn full(&self, due: bool) -> bool {
        self.flushing || self.events_full() || (!due && self.statuses_full())
    }

    fn is_empty(&self) -> bool {
        self.statuses.is_empty() && self.events.is_empty() && self.writing.is_empty()
    }

    fn waiting(&self) -> usize {
        self.statuses.len() + self.events.len()
    }
}

/// Where the lane's writes go: the API server, or a recorder in tests.
pub trait Sink: Send + Sync + 'static {
    /// Applies a status; returns the resourceVersion it produced.
    fn status(&self, s: &StatusWrite) -> BoxFuture<'_, Result<Option<String>>>;
    fn event(&self, e: &EventNote) -> BoxFuture<'_, Result<()>>;
}

pub struct KubeSink {
    pub client: Client,
    pub instance: String,
}

impl Sink for KubeSink {
    fn status(&self, s: &StatusWrite) -> BoxFuture<'_, Result<Option<String>>> {
        let api: Api<TDSet> = Api::namespaced(self.client.clone(), &s.namespace);
        // The uid is a precondition: a status queued for a TDSet that was deleted and created
        // again under its name is refused (409), never written onto the new one.
        // Of `requestWake` only the phase is the reconcile's (see `reconciles_part`).
        let reduced;
        let status = match &s.status.request_wake {
            Some(w) => {
                reduced = TDSetStatus {
                    request_wake: w.reconciles_part(),
                    ..TDSetStatus::clone(&s.status)
                };
                &reduced
            }
            None => &*s.status,
        };
        let body = serde_json::json!({
            "apiVersion": "schedule.rs/v1",
            "kind": "TDSet",
            "metadata": {"name": &s.name, "uid": &s.uid},
            "status": status,
        });
        let (ns, name) = (s.namespace.clone(), s.name.clone());
        Box::pin(async move {
            let written = api
                .patch_status(
                    &name,
                    &PatchParams::apply(FIELD_MANAGER).force(),
                    &Patch::Apply(&body),
                )
                .await
                .map_err(Error::kube(format!("patching status of TDSet {ns}/{name}")))?;
            Ok(written.metadata.resource_version)
        })
    }

    fn event(&self, e: &EventNote) -> BoxFuture<'_, Result<()>> {
        let event = e.to_event(&self.instance);
        let ns = event.metadata.namespace.clone().unwrap_or_default();
        let api: Api<Event> = Api::namespaced(self.client.clone(), &ns);
        Box::pin(async move {
            api.create(&PostParams::default(), &event)
                .await
                .map(|_| ())
                .map_err(Error::kube(format!("creating an Event in {ns}")))
        })
    }
}

struct Shared {
    queue: Mutex<Queue>,
    /// Wakes writers when work arrives or a write ends.
    work: Notify,
    /// Wakes publishers waiting for room in a queue.
    room: Notify,
    priority: Arc<Priority>,
    memo: Arc<StatusMemo>,
    metrics: Arc<Metrics>,
    /// Where writes go; `write_now` uses it directly.
    sink: Arc<dyn Sink>,
    /// Set by `drain`: no more deferring to workload writes, and writers stop once empty.
    draining: std::sync::atomic::AtomicBool,
    /// Set when `drain` gives up: writers stop at once.
    closed: std::sync::atomic::AtomicBool,
    /// The writers, aborted by `close`.
    writers: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

/// A TDSet's status being written by `Lane::write_now`, outside the writers.
struct WriteTurn<'a> {
    shared: &'a Shared,
    uid: &'a str,
    /// The queued status it took the place of, to queue again if it was not written.
    superseded: Option<StatusWrite>,
}

impl Drop for WriteTurn<'_> {
    fn drop(&mut self) {
        if let Ok(mut q) = self.shared.queue.lock() {
            q.done(self.uid, None, Instant::now());
            if let Some(old) = self.superseded.take() {
                q.push_status(old);
            }
            self.shared
                .metrics
                .bookkeeping_pending
                .set(q.waiting() as i64);
        }
        self.shared.work.notify_one();
    }
}

/// The lane; cloning shares it. Its writers stop after `drain`.
#[derive(Clone)]
pub struct Lane {
    shared: Arc<Shared>,
}

impl Lane {
    pub fn start(
        sink: Arc<dyn Sink>,
        priority: Arc<Priority>,
        memo: Arc<StatusMemo>,
        metrics: Arc<Metrics>,
    ) -> Lane {
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue::default()),
            work: Notify::new(),
            room: Notify::new(),
            priority,
            memo,
            metrics,
            sink: sink.clone(),
            draining: Default::default(),
            closed: Default::default(),
            writers: Mutex::new(Vec::new()),
        });
        let writers = (0..WRITERS)
            .map(|_| tokio::spawn(writer(shared.clone(), sink.clone())))
            .collect();
        if let Ok(mut w) = shared.writers.lock() {
            *w = writers;
        }
        Lane { shared }
    }

    /// Queues a status write (replacing one still waiting for the same TDSet) and records it
    /// as the TDSet's current status for the reconciles that run before it is written. Waits
    /// only while nothing is due, the queue is full and it holds nothing for this TDSet.
    pub async fn status(&self, tdset: &TDSet, s: StatusWrite) {
        self.shared.memo.queued(tdset, s.status.clone());
        let mut s = Some(s);
        let priority = self.shared.priority.clone();
        self.enqueue(|q| {
            let Some(w) = s.take_if(|w| {
                !q.statuses_full()
                    || q.statuses.contains_key(&w.uid)
                    || priority.due(Instant::now())
            }) else {
                return false;
            };
            if q.push_status(w) {
                self.shared.metrics.bookkeeping_superseded.inc();
            }
            true
        })
        .await;
    }

    /// Writes a status now and returns once the API server has it, for what must be durable
    /// before the workload write that needs it (a target's original count). One TDSet's
    /// statuses stay in order: a status of it still queued is superseded by this one, and
    /// one being written is waited for first. Never deferred to workload writes: the caller
    /// is one.
    pub async fn write_now(&self, tdset: &TDSet, s: StatusWrite) -> Result<()> {
        // Hands the TDSet back to the writers however this ends: written, failed, or dropped
        // mid-request (the reconcile's deadline, a lost lease). The status it superseded is
        // due again unless this one was written.
        let mut turn = self.turn(&s.uid).await;
        self.shared.metrics.write("tdsets/status", "apply");
        let result = self.shared.sink.status(&s).await;
        if let Ok(produced) = &result {
            // Recorded only once written: what the memo says is durable must be.
            self.shared.memo.queued(tdset, s.status.clone());
            self.shared
                .memo
                .written(&s.uid, &s.status, produced.clone());
            turn.superseded = None;
        }
        drop(turn);
        result.map(|_| ())
    }

    /// Runs `f` (a shard letting go of a TDSet) with that TDSet's statuses out of the way: one
    /// being written is waited for, and one queued is dropped, never sent after `f`.
    pub async fn without_status<T>(&self, uid: &str, f: impl Future<Output = T>) -> T {
        let mut turn = self.turn(uid).await;
        turn.superseded = None;
        let out = f.await;
        drop(turn);
        out
    }

    /// Takes the TDSet's turn from the writers: waits while one of them writes its status,
    /// takes the status still queued (`superseded`).
    async fn turn<'a>(&'a self, uid: &'a str) -> WriteTurn<'a> {
        let superseded = loop {
            let taken = self.shared.queue.lock().ok().and_then(|mut q| {
                if q.writing.contains(uid) {
                    return None;
                }
                q.writing.insert(uid.to_string());
                Some(q.take_status(uid))
            });
            if let Some(taken) = taken {
                break taken;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        WriteTurn {
            shared: &self.shared,
            uid,
            superseded,
        }
    }

    /// Queues an Event; waits only while the queue is full.
    pub async fn event(&self, e: EventNote) {
        let mut e = Some(e);
        self.enqueue(|q| {
            let Some(e) = e.take_if(|_| !q.events_full()) else {
                return false;
            };
            q.events.push_back(e);
            true
        })
        .await;
    }

    /// Queues a reconcile's Events (sent after the workload writes). Waits only when the Event
    /// queue is full.
    ///
    /// Each Event is created once: the operator emits only on real changes, so kube's Recorder,
    /// which keeps every Event for six minutes to aggregate repeats and scans that cache on each
    /// publish, would cost memory in proportion to the TDSets and buy nothing.
    pub async fn publish_all(&self, events: Events) {
        for e in events {
            self.event(e).await;
        }
    }

    /// Runs `push` on the queue until it takes its item; while the queue is full, the writers
    /// take the turn (see `Queue::full`) and this waits for them to make room.
    async fn enqueue(&self, mut push: impl FnMut(&mut Queue) -> bool) {
        loop {
            let room = self.shared.room.notified();
            let pushed = self.shared.queue.lock().is_ok_and(|mut q| {
                let pushed = push(&mut q);
                if pushed {
                    self.shared
                        .metrics
                        .bookkeeping_pending
                        .set(q.waiting() as i64);
                }
                pushed
            });
            self.shared.work.notify_one();
            if pushed {
                return;
            }
            // Room, or a look again: whether a reconcile is due changes without a notification.
            let _ = tokio::time::timeout(Duration::from_millis(100), room).await;
        }
    }

    /// Stops at once, sending nothing more: writes in progress are abandoned and what is
    /// queued is dropped (leadership is lost; the next leader recomputes every status).
    pub fn close(&self) {
        self.shared.closed.store(true, Ordering::SeqCst);
        if let Ok(mut writers) = self.shared.writers.lock() {
            for w in writers.drain(..) {
                w.abort();
            }
        }
        let left = self.shared.queue.lock().map(|q| q.waiting()).unwrap_or(0);
        if left > 0 {
            warn!(left, "dropped queued status writes and Events");
        }
    }

    /// Waits until everything queued has been sent (at most `limit`), the writers left running:
    /// what a test does between one reconcile and the next.
    #[cfg(test)]
    pub async fn settle(&self, limit: Duration) {
        let deadline = Instant::now() + limit;
        self.shared.work.notify_waiters();
        while Instant::now() < deadline {
            let empty = (self.shared.queue.lock())
                .map(|q| q.is_empty())
                .unwrap_or(true);
            if empty {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Writes everything still queued, without deferring to workload writes, for at most
    /// `limit` (shutdown, loss of leadership).
    pub async fn drain(&self, limit: Duration) {
        self.shared.draining.store(true, Ordering::SeqCst);
        self.shared.work.notify_waiters();
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            let empty = self
                .shared
                .queue
                .lock()
                .map(|q| q.is_empty())
                .unwrap_or(true);
            if empty {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.shared.closed.store(true, Ordering::SeqCst);
        self.shared.work.notify_waiters();
        let left = self.shared.queue.lock().map(|q| q.waiting()).unwrap_or(0);
        if left > 0 {
            warn!(
                left,
                "stopping with status writes or Events not yet sent; the next reconcile writes the statuses again"
            );
        }
    }
}

/// One writer: waits for work and for its turn, writes, repeats.
async fn writer(s: Arc<Shared>, sink: Arc<dyn Sink>) {
    let mut deferred_since: Option<Instant> = None;
    loop {
        if s.closed.load(Ordering::SeqCst) {
            return;
        }
        let work = s.work.notified();
        let now = Instant::now();
        let due = s.priority.due(now);
        let (has_work, full) = s
            .queue
            .lock()
            .map(|q| (q.waiting() > 0, q.full(due)))
            .unwrap_or((false, false));
        let draining = s.draining.load(Ordering::SeqCst);
        if !has_work {
            if draining {
                return;
            }
            deferred_since = None;
            // Re-check periodically: a retry comes due without a notification.
            let _ = tokio::time::timeout(Duration::from_millis(500), work).await;
            continue;
        }
        let since = *deferred_since.get_or_insert(now);
        // A full queue means a reconcile is waiting for room: bookkeeping goes now, until both
        // queues are half empty.
        let waited = now.duration_since(since);
        let turn = draining
            || full
            || s.priority.quiet(now)
            || waited >= MAX_DUE_DEFER
            || (waited >= MAX_DEFER && !due);
        if !turn {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        }
        deferred_since = None;
        let job = s.queue.lock().ok().and_then(|mut q| q.pop(now, due));
        let Some(job) = job else {
            // Only retries not yet due, or TDSets being written by another writer.
            let _ = tokio::time::timeout(Duration::from_millis(200), work).await;
            continue;
        };
        s.room.notify_waiters();
        match job {
            Job::Status(w) => {
                s.metrics.write("tdsets/status", "apply");
                let result = sink.status(&w).await;
                let failed = match result {
                    Ok(produced) => {
                        s.memo.written(&w.uid, &w.status, produced);
                        None
                    }
                    Err(e) if e.is_not_found() || e.is_conflict() => {
                        s.memo.written(&w.uid, &w.status, None);
                        debug!(tdset = %format!("{}/{}", w.namespace, w.name), "TDSet gone (or replaced); status dropped");
                        None
                    }
                    Err(e) => {
                        warn!(tdset = %format!("{}/{}", w.namespace, w.name), error = %e, attempts = w.attempts + 1, "status write failed; will retry");
                        Some(*w.clone())
                    }
                };
                if let Ok(mut q) = s.queue.lock() {
                    q.done(&w.uid, failed, Instant::now());
                    s.metrics.bookkeeping_pending.set(q.waiting() as i64);
                }
                s.work.notify_one();
            }
            Job::Event(e) => {
                s.metrics.write("events", "create");
                if let Err(err) = sink.event(&e).await {
                    warn!(error = %err, reason = ?e.reason, "could not publish Event");
                }
                if let Ok(q) = s.queue.lock() {
                    s.metrics.bookkeeping_pending.set(q.waiting() as i64);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;

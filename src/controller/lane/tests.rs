//! The lane's behaviour with paused time and a recording sink.

use super::*;

/// Records what the lane sends, in order.
#[derive(Default)]
struct Recorder {
    sent: Mutex<Vec<String>>,
    /// Held (written) by a test: status writes wait, as for an API server that is slow.
    hold: tokio::sync::RwLock<()>,
}

impl Sink for Recorder {
    fn status(&self, s: &StatusWrite) -> BoxFuture<'_, Result<Option<String>>> {
        let line = format!("{}={}", s.uid, s.status.desired_replicas.unwrap_or(-1));
        Box::pin(async move {
            let _answered = self.hold.read().await;
            self.sent.lock().unwrap().push(line);
            Ok(Some("1".into()))
        })
    }
    fn event(&self, e: &EventNote) -> BoxFuture<'_, Result<()>> {
        self.sent.lock().unwrap().push(e.reason.clone());
        Box::pin(async { Ok(()) })
    }
}

fn tdset(uid: &str) -> TDSet {
    let mut t = TDSet::new(uid, Default::default());
    t.metadata.uid = Some(uid.into());
    t.metadata.namespace = Some("ns".into());
    t
}

/// A lane writing to a recorder.
fn started(memo: Arc<StatusMemo>) -> (Arc<Recorder>, Arc<Priority>, Lane) {
    let rec = Arc::new(Recorder::default());
    let priority = Arc::new(Priority::default());
    let metrics = Arc::new(Metrics::new().unwrap());
    let lane = Lane::start(rec.clone(), priority.clone(), memo, metrics);
    (rec, priority, lane)
}

/// Lets the lane's writers run for `d` of (paused) time.
async fn run_for(d: Duration) {
    tokio::time::sleep(d).await;
}

#[tokio::test(start_paused = true)]
async fn the_lane_waits_for_workload_writes_then_sends_everything() {
    let memo = Arc::new(StatusMemo::default());
    let (rec, priority, lane) = started(memo.clone());

    let turn = priority.workload();
    lane.status(&tdset("a"), write("a", 1)).await;
    lane.event(event("ScaledUp")).await;
    lane.status(&tdset("a"), write("a", 2)).await;
    // What a reconcile reads before the write: the queued status.
    assert_eq!(
        memo.current(&tdset("a")).and_then(|s| s.desired_replicas),
        Some(2)
    );
    run_for(MAX_DEFER / 2).await;
    assert!(
        rec.sent.lock().unwrap().is_empty(),
        "nothing while the workload write runs"
    );
    drop(turn);
    run_for(QUIET * 4).await;
    assert_eq!(*rec.sent.lock().unwrap(), ["a=2", "ScaledUp"]);
    lane.drain(Duration::from_secs(1)).await;
}

#[tokio::test(start_paused = true)]
async fn write_now_is_written_before_it_returns_and_a_dropped_one_hands_the_tdset_back() {
    let memo = Arc::new(StatusMemo::default());
    let (rec, priority, lane) = started(memo.clone());
    // Inside a workload turn (the caller is a workload write): not deferred.
    let turn = priority.workload();
    lane.status(&tdset("a"), write("a", 1)).await;
    lane.write_now(&tdset("a"), write("a", 2)).await.unwrap();
    assert_eq!(
        *rec.sent.lock().unwrap(),
        ["a=2"],
        "the queued a=1 is superseded"
    );
    assert_eq!(
        memo.durable(&tdset("a")).and_then(|s| s.desired_replicas),
        Some(2)
    );
    drop(turn);

    // A write_now dropped mid-request (a reconcile's deadline) must not leave the TDSet
    // marked as being written, or its statuses would never be sent again.
    lane.status(&tdset("b"), write("b", 1)).await;
    let held = rec.hold.write().await;
    let stuck = tokio::time::timeout(
        Duration::from_millis(100),
        lane.write_now(&tdset("b"), write("b", 2)),
    )
    .await;
    assert!(stuck.is_err(), "the held write did not time out");
    drop(held);
    lane.status(&tdset("b"), write("b", 3)).await;
    run_for(QUIET * 4).await;
    assert_eq!(*rec.sent.lock().unwrap(), ["a=2", "b=3"]);
    lane.drain(Duration::from_secs(1)).await;
}

#[tokio::test(start_paused = true)]
async fn a_publisher_waiting_for_room_is_never_stuck_behind_its_own_workload_turn() {
    let (rec, priority, lane) = started(Arc::new(StatusMemo::default()));
    // A reconcile holds its workload turn while it publishes more Events than fit.
    let _turn = priority.workload();
    let n = EVENT_QUEUE + 100;
    let publisher = tokio::spawn({
        let lane = lane.clone();
        async move {
            for i in 0..n {
                lane.event(event(&format!("E{i}"))).await;
            }
        }
    });
    run_for(MAX_DEFER / 4).await;
    let sent = rec.sent.lock().unwrap().len();
    assert!(
        publisher.is_finished(),
        "the publisher got room without waiting for MAX_DEFER ({sent} sent)"
    );
    assert!(sent >= 100, "Events went out to make room: {sent}");
    lane.drain(Duration::from_secs(5)).await;
    assert_eq!(rec.sent.lock().unwrap().len(), n);
}

/// A converge (nothing due): statuses are held at most `STATUS_QUEUE` at a time, the publisher
/// waits for room, and all are written.
#[tokio::test(start_paused = true)]
async fn a_storm_of_statuses_with_nothing_due_is_held_at_most_status_queue_at_a_time() {
    let (rec, priority, lane) = started(Arc::new(StatusMemo::default()));
    // The API server answers nothing for now: writes pile up.
    let stalled = rec.hold.write().await;
    let mut turn = priority.workload();
    turn.not_due();
    let n = STATUS_QUEUE * 2;
    let publisher = tokio::spawn({
        let lane = lane.clone();
        async move {
            for i in 0..n {
                let uid = format!("t{i}");
                lane.status(&tdset(&uid), write(&uid, 3)).await;
            }
        }
    });
    run_for(MAX_DEFER * 2).await;
    let waiting = lane.shared.queue.lock().unwrap().statuses.len();
    assert!(waiting <= STATUS_QUEUE, "{waiting} statuses held at once");
    assert!(!publisher.is_finished(), "the publisher waits for room");
    // Room for a TDSet already waiting: it supersedes in place.
    lane.status(&tdset("t100"), write("t100", 4)).await;
    drop(stalled);
    publisher.await.unwrap();
    lane.drain(Duration::from_secs(5)).await;
    let sent = rec.sent.lock().unwrap();
    assert_eq!(sent.len(), n, "every status written once");
    assert!(sent.contains(&"t100=4".to_string()));
}

/// A boundary of 10 000: every status waits for the scaling (none makes its reconcile wait),
/// held one per TDSet however often each is superseded, and all are written after.
#[tokio::test(start_paused = true)]
async fn a_storm_of_statuses_never_makes_a_reconcile_wait_and_holds_one_per_tdset() {
    let (rec, priority, lane) = started(Arc::new(StatusMemo::default()));
    let due = priority.workload();
    let n = 10_000;
    for round in 1..=3 {
        for i in 0..n {
            let uid = format!("t{i}");
            // Would hang here (paused clock, nothing written while due) if it waited for room.
            lane.status(&tdset(&uid), write(&uid, round)).await;
        }
    }
    run_for(MAX_DEFER * 2).await;
    assert_eq!(
        rec.sent.lock().unwrap().len(),
        0,
        "nothing before the scaling ends"
    );
    assert_eq!(lane.shared.queue.lock().unwrap().statuses.len(), n);
    drop(due);
    lane.drain(Duration::from_secs(60)).await;
    let sent = rec.sent.lock().unwrap();
    assert_eq!(sent.len(), n, "every TDSet's status written once");
    assert!(sent.iter().all(|s| s.ends_with("=3")), "only the newest");
}

#[tokio::test(start_paused = true)]
async fn under_sustained_workload_writes_bookkeeping_still_trickles_out() {
    let (rec, priority, lane) = started(Arc::new(StatusMemo::default()));
    let mut turn = priority.workload();
    turn.not_due();
    for i in 0..(WRITERS * 3) {
        lane.event(event(&format!("E{i}"))).await;
    }
    run_for(MAX_DEFER + QUIET).await;
    let sent = rec.sent.lock().unwrap().len();
    assert!(
        (1..=WRITERS).contains(&sent),
        "one per writer per MAX_DEFER, got {sent}"
    );
    lane.drain(Duration::from_secs(5)).await;
    assert_eq!(
        rec.sent.lock().unwrap().len(),
        WRITERS * 3,
        "drain sends everything"
    );
}

/// A boundary: reconciles that came due hold statuses and Events back until their workload
/// writes are done, past `MAX_DEFER`; only a stream of due reconciles lasting `MAX_DUE_DEFER`
/// is cut into (one per writer).
#[tokio::test(start_paused = true)]
async fn while_due_reconciles_write_their_workloads_bookkeeping_waits() {
    let (rec, priority, lane) = started(Arc::new(StatusMemo::default()));
    let due = priority.workload();
    for i in 0..(WRITERS * 3) {
        lane.event(event(&format!("E{i}"))).await;
    }
    run_for(MAX_DEFER * 5).await;
    assert_eq!(
        rec.sent.lock().unwrap().len(),
        0,
        "nothing before the due write"
    );
    run_for(MAX_DUE_DEFER).await;
    let sent = rec.sent.lock().unwrap().len();
    assert!(
        (1..=WRITERS).contains(&sent),
        "one per writer per MAX_DUE_DEFER, got {sent}"
    );
    drop(due);
    run_for(QUIET * 2).await;
    assert_eq!(
        rec.sent.lock().unwrap().len(),
        WRITERS * 3,
        "all sent once the due write is done"
    );
}

fn write(uid: &str, desired: i32) -> StatusWrite {
    StatusWrite {
        namespace: "ns".into(),
        name: uid.into(),
        uid: uid.into(),
        status: Arc::new(TDSetStatus {
            desired_replicas: Some(desired),
            ..Default::default()
        }),
        attempts: 0,
    }
}

fn event(reason: &str) -> EventNote {
    EventNote {
        regarding: Default::default(),
        type_: EventType::Normal,
        reason: reason.into(),
        note: String::new(),
        at: k8s_openapi::jiff::Timestamp::now(),
    }
}

fn popped(q: &mut Queue, now: Instant) -> Vec<String> {
    let mut out = vec![];
    while let Some(job) = q.pop(now, false) {
        match job {
            Job::Status(s) => {
                out.push(format!("{}={}", s.uid, s.status.desired_replicas.unwrap()));
                q.done(&s.uid, None, now);
            }
            Job::Event(e) => out.push(e.reason),
        }
    }
    out
}

#[test]
fn a_superseded_status_is_never_sent_and_events_all_are() {
    let mut q = Queue::default();
    let now = Instant::now();
    q.push_status(write("a", 1));
    q.events.push_back(event("ScaledUp"));
    q.push_status(write("b", 1));
    q.push_status(write("a", 2));
    q.events.push_back(event("ScaledDown"));
    q.push_status(write("a", 3));
    assert_eq!(q.superseded, 2);
    assert_eq!(
        popped(&mut q, now),
        ["a=3", "b=1", "ScaledUp", "ScaledDown"]
    );
    assert!(q.is_empty());
}

#[test]
fn one_tdsets_statuses_are_written_one_at_a_time_in_order() {
    let mut q = Queue::default();
    let now = Instant::now();
    q.push_status(write("a", 1));
    let Some(Job::Status(first)) = q.pop(now, false) else {
        panic!("expected a status")
    };
    // While a=1 is being written, a=2 arrives; it waits for a=1, b goes first.
    q.push_status(write("a", 2));
    q.push_status(write("b", 5));
    let Some(Job::Status(next)) = q.pop(now, false) else {
        panic!("expected a status")
    };
    assert_eq!(next.uid, "b");
    assert!(q.pop(now, false).is_none(), "a=2 must wait for a=1");
    q.done(&first.uid, None, now);
    let Some(Job::Status(last)) = q.pop(now, false) else {
        panic!("expected a status")
    };
    assert_eq!(
        (last.uid.as_str(), last.status.desired_replicas),
        ("a", Some(2))
    );
}

#[test]
fn a_failed_status_is_retried_later_unless_a_newer_one_is_waiting() {
    let mut q = Queue::default();
    let now = Instant::now();
    q.push_status(write("a", 1));
    let Some(Job::Status(s)) = q.pop(now, false) else {
        panic!()
    };
    q.done(&s.uid, Some(*s.clone()), now);
    assert!(q.pop(now, false).is_none(), "not before its retry is due");
    let Some(Job::Status(again)) = q.pop(now + RETRY_MAX, false) else {
        panic!("retried")
    };
    assert_eq!(again.attempts, 1);
    // A newer status arrives while the retry is being written: the failure is not requeued.
    q.push_status(write("a", 2));
    q.done(&again.uid, Some(*again.clone()), now);
    assert_eq!(popped(&mut q, now + RETRY_MAX), ["a=2"]);
}

#[test]
fn bookkeeping_waits_while_workload_writes_run() {
    let p = Priority::default();
    let now = Instant::now();
    assert!(p.quiet(now), "nothing ran yet");
    let turn = p.workload();
    assert!(!p.quiet(now + QUIET * 10));
    drop(turn);
    assert!(!p.quiet(Instant::now()), "just ended: not quiet yet");
    assert!(p.quiet(Instant::now() + QUIET));
}

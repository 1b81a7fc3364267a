use super::*;

fn degraded(state: &str, reason: &str, message: &str) -> TDSetStatus {
    TDSetStatus {
        conditions: vec![Condition {
            type_: DEGRADED.into(),
            status: state.into(),
            reason: reason.into(),
            message: message.into(),
            last_transition_time: "2026-12-03T00:00:00Z".into(),
            observed_generation: None,
        }],
        ..TDSetStatus::default()
    }
}

#[test]
fn a_change_of_degraded_is_said_once_and_a_return_to_as_expected_not_at_all() {
    let ok = degraded("False", reason::AS_EXPECTED, "");
    let bad = degraded("True", "TargetNotFound", "gone");
    let said = |from: &TDSetStatus, to: &TDSetStatus| degraded_warning(Some(from), to);
    assert_eq!(
        said(&ok, &bad),
        Some(("TargetNotFound".into(), "gone".into()))
    );
    assert_eq!(
        said(&bad, &bad),
        None,
        "a problem that persists is said once"
    );
    assert_eq!(said(&bad, &ok), None);
    let worse = degraded("True", "TargetNotFound", "gone again");
    assert_eq!(said(&bad, &worse).map(|w| w.1), Some("gone again".into()));
    assert_eq!(
        degraded_warning(None, &bad).map(|w| w.0),
        Some("TargetNotFound".into()),
        "a first status with a problem says it"
    );
}

static MISSING: Missing = Missing {
    reason: reason::DEPLOYMENT_MISSING,
    message: String::new(),
};

fn inputs<'a>(
    prev: Option<&'a TDSetStatus>,
    eval: &'a Evaluation,
    problem: Option<&'a Problem>,
    now: &str,
) -> Inputs<'a> {
    Inputs {
        previous: prev,
        generation: Some(1),
        evaluation: Some(eval),
        next: None,
        next_write: None,
        warnings: &[],
        notices: &[],
        workload: Err(&MISSING),
        target: None,
        group: None,
        saved: None,
        problem,
        suspended: false,
        change: None,
        ceiling: None,
        shard: None,
        requested: None,
        idle: None,
        now: DateTime::parse_from_rfc3339(now)
            .unwrap()
            .with_timezone(&Utc),
    }
}

#[test]
fn a_failed_reconcile_changes_only_degraded() {
    let eval = Evaluation {
        replicas: 4,
        level: 4,
        window: Some(0),
        window_label: Some("office".into()),
        override_label: None,
        holiday: false,
        ramp: None,
        ceiling: None,
        ahead_of: None,
        woken_until: None,
        idle_since: None,
        scheduled: 4,
    };
    let ok = next_status(&inputs(None, &eval, None, "2026-01-01T00:00:00Z"));
    let p = Problem::ApiError("connection refused".into());
    let failed = with_failure(Some(&ok), Some(1), &p, utc("2026-01-01T00:05:00Z"));
    assert_eq!(failed.desired_replicas, Some(4));
    assert_eq!(failed.active_window.as_deref(), Some("office"));
    for type_ in [AVAILABLE, PROGRESSING] {
        assert_eq!(find(Some(&failed), type_), find(Some(&ok), type_));
    }
    let d = find(Some(&failed), DEGRADED).unwrap();
    assert_eq!(
        (d.status.as_str(), d.reason.as_str(), d.message.as_str()),
        ("True", "ReconcileError", "connection refused")
    );
    assert_eq!(d.last_transition_time, "2026-01-01T00:05:00Z");
    // With no status yet, the failure is still recorded.
    let first = with_failure(None, Some(1), &p, utc("2026-01-01T00:05:00Z"));
    assert_eq!(first.conditions.len(), 1);
}

fn utc(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

/// What the schedule says outside every window: `defaultReplica` applies.
fn default_level(replicas: i32) -> Evaluation {
    Evaluation {
        replicas,
        level: replicas,
        window: None,
        window_label: None,
        override_label: None,
        holiday: false,
        ramp: None,
        ceiling: None,
        ahead_of: None,
        woken_until: None,
        idle_since: None,
        scheduled: replicas,
    }
}

#[test]
fn last_transition_time_moves_only_when_status_flips() {
    let eval = default_level(2);
    let s1 = next_status(&inputs(None, &eval, None, "2026-01-01T00:00:00Z"));
    let degraded1 = find(Some(&s1), DEGRADED).unwrap().clone();
    assert_eq!(degraded1.status, "False");
    let s2 = next_status(&inputs(Some(&s1), &eval, None, "2026-01-01T01:00:00Z"));
    assert_eq!(
        s1, s2,
        "same inputs later: identical status, so nothing to write"
    );
    let p = Problem::InvalidSpec("spec.timeZone: unknown".into());
    let s3 = next_status(&inputs(Some(&s2), &eval, Some(&p), "2026-01-01T02:00:00Z"));
    let d3 = find(Some(&s3), DEGRADED).unwrap();
    assert_eq!(
        (d3.status.as_str(), d3.reason.as_str()),
        ("True", "InvalidSpec")
    );
    assert_eq!(d3.last_transition_time, "2026-01-01T02:00:00Z");
}

fn entry(at: &str, applied: Option<&str>, to: i32) -> HistoryEntry {
    HistoryEntry {
        at: at.into(),
        applied_at: applied.map(Into::into),
        ready_at: None,
        from: Some(1),
        to: Some(to),
        level: None,
        reason: "window".into(),
        message: None,
    }
}

#[test]
fn a_failed_change_of_ceiling_alone_is_no_change_of_count_in_history() {
    let previous = TDSetStatus {
        desired_replicas: Some(10),
        replicas: Some(10),
        next_transition_time: Some("2026-01-01T18:00:00Z".into()),
        next_replicas: Some(10),
        desired_max_replicas: Some(50),
        next_max_replicas: Some(20),
        ..TDSetStatus::default()
    };
    let problem = Problem::ApiError("refused".into());
    let now = DateTime::parse_from_rfc3339("2026-01-01T18:00:01Z")
        .unwrap()
        .with_timezone(&Utc);
    assert_eq!(failed_transition(Some(&previous), &problem, now), None);
    // A change of count is recorded as it failed.
    let count = TDSetStatus {
        next_replicas: Some(2),
        ..previous
    };
    let entry = failed_transition(Some(&count), &problem, now).unwrap();
    assert_eq!((entry.from, entry.to), (Some(10), Some(2)));
    // The count set before, not the pods the workload's controller has reported so far.
    let lagging = TDSetStatus {
        replicas: Some(0),
        ..count
    };
    let entry = failed_transition(Some(&lagging), &problem, now).unwrap();
    assert_eq!(entry.from, Some(10));
}

#[test]
fn history_is_newest_first_and_bounded() {
    let mut status = TDSetStatus::default();
    for minute in 0..25 {
        let at = format!("2026-01-01T00:{minute:02}:00Z");
        status.history = recorded(Some(&status), entry(&at, Some(&at), minute));
    }
    assert_eq!(status.history.len(), MAX_HISTORY);
    assert_eq!(status.history[0].to, Some(24));
    assert_eq!(status.history[9].to, Some(15));
}

#[test]
fn a_failed_change_is_replaced_by_its_retry_which_keeps_the_failure() {
    let p = Problem::ApiError("refused".into());
    let previous = TDSetStatus {
        replicas: Some(3),
        next_transition_time: Some("2026-01-01T00:10:00Z".into()),
        next_replicas: Some(5),
        history: vec![entry(
            "2026-01-01T00:00:00Z",
            Some("2026-01-01T00:00:01Z"),
            3,
        )],
        ..TDSetStatus::default()
    };
    // Not due yet: a failure records nothing.
    let early = with_failure(Some(&previous), Some(1), &p, utc("2026-01-01T00:09:59Z"));
    assert_eq!(early.history, previous.history);
    // Due: the failed attempt, twice (retries), is one entry.
    let once = with_failure(Some(&previous), Some(1), &p, utc("2026-01-01T00:10:01Z"));
    let twice = with_failure(Some(&once), Some(1), &p, utc("2026-01-01T00:10:06Z"));
    assert_eq!(twice.history.len(), 2);
    let failed = &twice.history[0];
    assert_eq!(
        (
            failed.at.as_str(),
            failed.applied_at.as_ref(),
            failed.from,
            failed.to
        ),
        ("2026-01-01T00:10:00Z", None, Some(3), Some(5))
    );
    assert!(failed.message.as_deref().unwrap().contains("refused"));
    let long = Problem::ApiError("x".repeat(5000));
    let clipped = with_failure(Some(&previous), Some(1), &long, utc("2026-01-01T00:10:01Z"));
    assert_eq!(
        clipped.history[0].message.as_ref().unwrap().chars().count(),
        512
    );
    // The retry that lands takes its place and keeps why it was late.
    let mut landed = entry("2026-01-01T00:10:00Z", Some("2026-01-01T00:10:12Z"), 5);
    landed.from = None;
    let after = recorded(Some(&twice), landed);
    assert_eq!(after.len(), 2);
    assert_eq!(after[0].applied_at.as_deref(), Some("2026-01-01T00:10:12Z"));
    assert_eq!(after[0].from, Some(3));
    assert!(after[0].message.as_deref().unwrap().contains("refused"));

    // A scale-up written ahead fails at its write, and is recorded then, at its transition.
    let ahead = TDSetStatus {
        next_write_time: Some("2026-01-01T00:09:00Z".into()),
        ..previous.clone()
    };
    let before = with_failure(Some(&ahead), Some(1), &p, utc("2026-01-01T00:08:59Z"));
    assert_eq!(before.history, previous.history);
    let led = with_failure(Some(&ahead), Some(1), &p, utc("2026-01-01T00:09:01Z"));
    assert_eq!(led.history.len(), 2);
    assert_eq!(
        (led.history[0].at.as_str(), led.history[0].to),
        ("2026-01-01T00:10:00Z", Some(5))
    );
}

#[test]
fn a_shard_names_itself_and_an_unsharded_operator_keeps_the_claim_it_finds() {
    let eval = default_level(2);
    let previous = TDSetStatus {
        shard: Some("a".into()),
        ..TDSetStatus::default()
    };
    let now = "2026-05-01T12:00:00Z";
    let as_shard = |shard| Inputs {
        shard,
        ..inputs(Some(&previous), &eval, None, now)
    };
    assert_eq!(
        next_status(&as_shard(Some("b"))).shard.as_deref(),
        Some("b")
    );
    // Unsharded, the field is left as found: rewriting it away every reconcile would be a
    // write that never converges (the claim's owner is another manager operation).
    assert_eq!(next_status(&as_shard(None)).shard.as_deref(), Some("a"));
    assert_eq!(next_status(&inputs(None, &eval, None, now)).shard, None);
}

#[test]
fn a_change_found_applied_is_recorded_once_saying_so() {
    let at = utc("2026-05-01T22:00:00Z");
    let now = utc("2026-05-01T22:00:07Z");
    let entry = |to: i32| HistoryEntry {
        at: "2026-05-01T20:00:00Z".into(),
        to: Some(to),
        reason: "window".into(),
        ..HistoryEntry::default()
    };
    // The newest entry put it to sleep; a status written since says 2 (a reconcile that
    // found a cache not synced) without an entry: the history is what counts.
    let asleep = TDSetStatus {
        desired_replicas: Some(2),
        history: vec![entry(0)],
        ..TDSetStatus::default()
    };
    let e = found_applied(Some(&asleep), Some(2), "woken by a request".into(), at, now)
        .expect("0 in the history, 2 now and nothing written: it landed before a restart");
    assert_eq!((e.from, e.to), (Some(0), Some(2)));
    assert_eq!(e.at, "2026-05-01T22:00:00Z");
    assert_eq!(e.applied_at, None, "when it landed is not known");
    assert!(
        e.message
            .unwrap()
            .contains("found applied at 2026-05-01T22:00:07.000Z")
    );
    // Already in the history, or nothing on record: nothing to say.
    let awake = TDSetStatus {
        history: vec![entry(2)],
        ..TDSetStatus::default()
    };
    assert_eq!(
        found_applied(Some(&awake), Some(2), "x".into(), at, now),
        None
    );
    assert_eq!(found_applied(None, Some(2), "x".into(), at, now), None);
    assert_eq!(
        found_applied(Some(&asleep), None, "x".into(), at, now),
        None
    );
    // No entry at all but the wake endpoint's wake-up: recorded, its count before unknown;
    // and not again once the history has it, nor for a status with nothing at all.
    let woken: TDSetStatus = serde_json::from_value(serde_json::json!({
        "requestWake": {"since": "2026-05-01T21:59:58Z", "until": "2026-05-01T22:29:58Z"}}))
    .unwrap();
    let reason = "woken by a request until 2026-05-01T22:29:58Z".to_string();
    let e = found_applied(Some(&woken), Some(2), reason.clone(), at, now)
        .expect("the wake-up the endpoint recorded");
    assert_eq!((e.from, e.to), (None, Some(2)));
    let mut recorded = woken.clone();
    recorded.history = vec![e];
    assert_eq!(
        found_applied(Some(&recorded), Some(2), reason, at, now),
        None
    );
    assert_eq!(
        found_applied(Some(&TDSetStatus::default()), Some(2), "x".into(), at, now),
        None
    );
}

//! `settle` and `lead_at`: what each reconcile makes of the scale-ups in history.

use super::*;

fn t(s: &str) -> DateTime<Utc> {
    parse_rfc3339(s).unwrap()
}

/// What a reconcile at `now` saw, the operator leading since long before.
fn seen(readiness: Readiness, written_now: bool, now: DateTime<Utc>) -> Seen {
    Seen {
        readiness,
        written_now,
        since: t("2026-01-01T00:00:00Z"),
        now,
    }
}

fn entry(at: &str, applied: Option<&str>, from: i32, to: i32) -> HistoryEntry {
    HistoryEntry {
        at: at.into(),
        applied_at: applied.map(Into::into),
        from: Some(from),
        to: Some(to),
        reason: "window".into(),
        ..Default::default()
    }
}

fn spec(warm_up: serde_json::Value) -> TDSetSpec {
    serde_json::from_value(serde_json::json!({
        "container": {"image": "nginx", "port": 80}, "defaultReplica": 1,
        "schedulingConfig": [], "warmUp": warm_up
    }))
    .unwrap()
}

#[test]
fn a_scale_up_is_measured_from_its_write_and_late_against_its_transition() {
    let spec = spec(serde_json::json!({"mode": "Measured", "lead": "10s"}));
    let mut status = TDSetStatus {
        history: vec![entry(
            "2026-05-04T09:00:00Z",
            Some("2026-05-04T08:59:50Z"),
            1,
            5,
        )],
        ..Default::default()
    };
    // Not ready yet: nothing changes but the lead's basis.
    let now = t("2026-05-04T08:59:58Z");
    assert!(settle(&spec, &mut status, seen(Readiness::Reported(4), false, now)).is_empty());
    assert_eq!(status.history[0].ready_at, None);
    assert_eq!(status.warm_up.as_ref().unwrap().basis, LeadBasis::Guess);
    assert_eq!(awaiting(&status), Some(t("2026-05-04T08:59:50Z")));

    let now = t("2026-05-04T09:00:12Z");
    let risen = settle(&spec, &mut status, seen(Readiness::Reported(5), false, now));
    assert_eq!(risen.len(), 1);
    assert_eq!(risen[0].took(), Duration::seconds(22));
    assert_eq!(risen[0].late(), Duration::seconds(12));
    assert_eq!(risen[0].early_replica_seconds(), 0.0);
    assert_eq!(
        status.history[0].ready_at.as_deref(),
        Some("2026-05-04T09:00:12.000Z")
    );
    let w = status.warm_up.clone().unwrap();
    assert_eq!((w.samples, w.basis), (vec![22], LeadBasis::Measured));
    assert_eq!(w.lead, "27s");
    assert_eq!(awaiting(&status), None);
    // Seen ready once: a later reconcile measures nothing again.
    let later = t("2026-05-04T09:01:00Z");
    assert!(
        settle(
            &spec,
            &mut status,
            seen(Readiness::Reported(5), false, later)
        )
        .is_empty()
    );
    assert_eq!(status.warm_up.unwrap().samples, vec![22]);
}

#[test]
fn ready_before_its_transition_is_early_and_costs_replica_seconds() {
    let spec = spec(serde_json::json!({"mode": "Fixed", "lead": "1m"}));
    let mut status = TDSetStatus {
        history: vec![entry(
            "2026-05-04T09:00:00Z",
            Some("2026-05-04T08:59:00Z"),
            2,
            5,
        )],
        ..Default::default()
    };
    let now = t("2026-05-04T08:59:40Z");
    let risen = settle(&spec, &mut status, seen(Readiness::Reported(5), false, now));
    assert_eq!(risen[0].late(), Duration::zero());
    assert_eq!(risen[0].early_replica_seconds(), 60.0);
    // Fixed keeps its lead, and the samples, for a person to compare.
    let w = status.warm_up.unwrap();
    assert_eq!(
        (w.lead.as_str(), w.basis, w.samples),
        ("1m", LeadBasis::Fixed, vec![40])
    );
}

#[test]
fn a_ramps_earlier_steps_are_measured_before_its_later_ones() {
    let spec = spec(serde_json::json!({"mode": "Measured"}));
    let mut status = TDSetStatus {
        history: vec![
            entry("2026-05-04T09:02:00Z", Some("2026-05-04T09:02:00Z"), 4, 6),
            entry("2026-05-04T09:01:00Z", Some("2026-05-04T09:01:00Z"), 2, 4),
            entry("2026-05-04T09:00:00Z", Some("2026-05-04T09:00:00Z"), 6, 2),
            entry("2026-05-04T08:00:00Z", Some("2026-05-04T08:00:00Z"), 1, 6),
        ],
        ..Default::default()
    };
    let now = t("2026-05-04T09:02:30Z");
    let risen = settle(&spec, &mut status, seen(Readiness::Reported(4), false, now));
    // The step to 4 is ready, the step to 6 is not; the scale-down ends the look, so the
    // scale-up before it (never seen ready) is not measured now.
    assert_eq!(risen.len(), 1);
    assert_eq!((risen[0].from, risen[0].to), (2, 4));
    assert_eq!(status.history[0].ready_at, None);
    assert!(status.history[1].ready_at.is_some());
    assert_eq!(status.history[3].ready_at, None);
    assert_eq!(status.warm_up.unwrap().samples, vec![90]);
}

#[test]
fn what_was_ready_when_written_and_what_cannot_be_read_are_not_samples() {
    let spec = spec(serde_json::json!({"mode": "Measured", "lead": "30s"}));
    let written = || TDSetStatus {
        history: vec![entry(
            "2026-05-04T09:00:00Z",
            Some("2026-05-04T09:00:00Z"),
            1,
            3,
        )],
        ..Default::default()
    };
    let now = t("2026-05-04T09:00:00Z");
    let mut status = written();
    let risen = settle(&spec, &mut status, seen(Readiness::Reported(3), true, now));
    assert!(!risen[0].sampled);
    assert!(status.history[0].ready_at.is_some());
    assert_eq!(status.warm_up.unwrap().basis, LeadBasis::Guess);

    let mut status = written();
    assert!(settle(&spec, &mut status, seen(Readiness::NotReported, true, now)).is_empty());
    let w = status.warm_up.unwrap();
    assert_eq!((w.lead.as_str(), w.basis), ("30s", LeadBasis::NotReported));

    // A scale-down, a failed write: nothing awaited.
    let mut status = TDSetStatus {
        history: vec![entry("2026-05-04T09:00:00Z", None, 1, 3)],
        ..Default::default()
    };
    assert!(settle(&spec, &mut status, seen(Readiness::Reported(3), false, now)).is_empty());
    assert_eq!(awaiting(&status), None);
}

#[test]
fn samples_are_bounded_newest_first_and_gone_with_the_warm_up() {
    let spec_on = spec(serde_json::json!({"mode": "Measured"}));
    let mut status = TDSetStatus::default();
    for i in 0..15 {
        let at = t("2026-05-04T09:00:00Z") + Duration::hours(i);
        status.history.insert(
            0,
            entry(
                &crate::preview::rfc3339(at),
                Some(&crate::preview::rfc3339(at)),
                1,
                2,
            ),
        );
        let now = at + Duration::seconds(i + 1);
        settle(
            &spec_on,
            &mut status,
            seen(Readiness::Reported(2), false, now),
        );
        status.history.insert(
            0,
            entry(
                &crate::preview::rfc3339(now),
                Some(&crate::preview::rfc3339(now)),
                2,
                1,
            ),
        );
    }
    let samples = status.warm_up.clone().unwrap().samples;
    assert_eq!(samples.len(), MAX_WARM_UP_SAMPLES);
    assert_eq!(samples[0], 15);
    let off = spec(serde_json::json!({"mode": "Off"}));
    settle(
        &off,
        &mut status,
        seen(Readiness::Reported(2), false, t("2026-05-05T09:00:00Z")),
    );
    assert_eq!(status.warm_up, None);
}

#[test]
fn durations_read_as_the_spec_writes_them() {
    assert_eq!(duration(Duration::zero()), "0s");
    assert_eq!(duration(Duration::seconds(45)), "45s");
    assert_eq!(duration(Duration::seconds(90)), "1m30s");
    assert_eq!(duration(Duration::seconds(3600)), "1h");
}

/// The first sample (20 s) comes in before the transition and makes the lead (25 s) shorter
/// than the guess (2m) the scale-up was written with: the scale-up stays written, it is not
/// taken back and written again cold.
#[test]
fn a_lead_learnt_shorter_never_takes_back_a_scale_up_already_written() {
    let spec: TDSetSpec = serde_json::from_value(serde_json::json!({
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
        "defaultReplica": 1,
        "schedulingConfig": [{"startTime": 9, "endTime": 17, "replica": 5}],
        "warmUp": {"mode": "Measured", "lead": "2m"}
    }))
    .unwrap();
    let schedule = crate::schedule::Schedule::compile(&spec).unwrap();
    let write = t("2026-05-04T08:58:00Z");
    let (eval, _, _) = schedule.led_at(write, lead_at(&spec, None, write));
    assert_eq!(eval.replicas, 5);
    let mut status = TDSetStatus {
        history: vec![entry(
            "2026-05-04T09:00:00Z",
            Some("2026-05-04T08:58:00Z"),
            1,
            5,
        )],
        ..Default::default()
    };
    let ready = t("2026-05-04T08:58:20Z");
    settle(
        &spec,
        &mut status,
        seen(Readiness::Reported(5), false, ready),
    );
    assert_eq!(status.warm_up.as_ref().unwrap().lead, "25s");
    let lead = lead_at(&spec, Some(&status), ready);
    assert_eq!(lead, Duration::seconds(100));
    assert_eq!(schedule.led_at(ready, lead).0.replicas, 5);
    // Once its transition has passed, the learnt lead is the lead.
    let after = t("2026-05-04T09:00:01Z");
    assert_eq!(lead_at(&spec, Some(&status), after), Duration::seconds(25));
    // Turned Off meanwhile: no lead at all, as asked.
    let mut off = spec.clone();
    off.warm_up = None;
    assert_eq!(lead_at(&off, Some(&status), ready), Duration::zero());
}

/// A scale-up written again before it was ready (a group's retry of the writes that did not
/// land, a count someone put back) is one scale-up: one sample, from the first write.
#[test]
fn a_scale_up_written_twice_is_one_sample_from_its_first_write() {
    let spec = spec(serde_json::json!({"mode": "Measured"}));
    let mut status = TDSetStatus {
        history: vec![
            entry("2026-05-04T09:00:30Z", Some("2026-05-04T09:00:30Z"), 6, 10),
            entry("2026-05-04T09:00:00Z", Some("2026-05-04T09:00:00Z"), 2, 10),
        ],
        ..Default::default()
    };
    let now = t("2026-05-04T09:01:00Z");
    let risen = settle(
        &spec,
        &mut status,
        seen(Readiness::Reported(10), false, now),
    );
    assert_eq!(risen.len(), 1);
    assert_eq!(risen[0].applied_at, t("2026-05-04T09:00:00Z"));
    assert!(status.history.iter().all(|e| e.ready_at.is_some()));
    assert_eq!(status.warm_up.unwrap().samples, vec![60]);
}

/// A scale-up written before this operator began leading (it was down, or another replica
/// led) may have been ready hours before anyone looked: its lateness is recorded, but it is
/// no sample, or one restart would hold the lead at `max` for the next nine scale-ups.
#[test]
fn what_was_written_before_this_operator_led_is_no_sample() {
    let spec = spec(serde_json::json!({"mode": "Measured"}));
    let mut status = TDSetStatus {
        history: vec![entry(
            "2026-05-04T09:00:00Z",
            Some("2026-05-04T09:00:00Z"),
            1,
            5,
        )],
        warm_up: Some(WarmUpStatus {
            lead: "13s".into(),
            basis: LeadBasis::Measured,
            samples: vec![8, 8, 8, 8],
        }),
        ..Default::default()
    };
    let now = t("2026-05-04T12:00:00Z");
    let seen = Seen {
        since: t("2026-05-04T11:59:00Z"),
        ..seen(Readiness::Reported(5), false, now)
    };
    let risen = settle(&spec, &mut status, seen);
    assert_eq!(risen[0].late(), Duration::hours(3));
    assert!(!risen[0].sampled);
    let w = status.warm_up.unwrap();
    assert_eq!((w.lead.as_str(), w.samples.len()), ("13s", 4));
}

/// Counts from a status edited by hand do not overflow.
#[test]
fn extreme_counts_in_status_do_not_overflow() {
    let spec = spec(serde_json::json!({"mode": "Measured"}));
    let mut status = TDSetStatus {
        history: vec![entry(
            "2026-05-04T09:00:00Z",
            Some("2026-05-04T08:00:00Z"),
            i32::MIN,
            i32::MAX,
        )],
        ..Default::default()
    };
    let now = t("2026-05-04T08:30:00Z");
    let risen = settle(
        &spec,
        &mut status,
        seen(Readiness::Reported(i32::MAX), false, now),
    );
    assert!(risen[0].early_replica_seconds() > 0.0);
}

#[test]
fn a_scale_up_late_past_the_grace_brings_a_warning_that_says_by_how_much_and_what_writes_ahead() {
    let rise = |ready_at: &str| Rise {
        at: t("2026-12-03T08:00:00Z"),
        applied_at: t("2026-12-03T08:00:00Z"),
        ready_at: t(ready_at),
        from: 0,
        to: 3,
        sampled: true,
    };
    assert_eq!(late_warning(&rise("2026-12-03T08:00:05Z"), None), None);
    let said = late_warning(&rise("2026-12-03T08:00:40Z"), None).unwrap_or_default();
    assert!(
        said.starts_with("3 replicas were ready 40s after their transition"),
        "{said}"
    );
    assert!(said.ends_with("by a lead fixed or measured"), "{said}");
}

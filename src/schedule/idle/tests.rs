use chrono::{DateTime, Duration, Timelike, Utc};
use proptest::prelude::*;

use crate::api::{RequestWakeStatus, TDSetSpec};
use crate::schedule::{Count, Schedule, wake};

fn t(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

/// 3 replicas 09:00-17:00 UTC, `default` outside it, `idle` as given.
fn spec(default: i32, idle: serde_json::Value) -> TDSetSpec {
    serde_json::from_value(serde_json::json!({
        "container": {"image": "nginx", "port": 80},
        "defaultReplica": default,
        "schedulingConfig": [{"startTime": "09:00", "endTime": "17:00", "replica": 3}],
        "wakeOnRequest": {"services": [{"name": "web"}], "wakeFor": "30m"},
        "idle": idle,
    }))
    .unwrap()
}

fn idle(during: &str, after: &str) -> serde_json::Value {
    serde_json::json!({
        "after": after,
        "during": during,
        "signals": [{"prometheus": {"template": "traefik"}}],
    })
}

/// `spec`'s schedule, quiet since `quiet` (a request wake-up `woken` on record, if any).
fn quiet(spec: &TDSetSpec, quiet: &str, woken: Option<(&str, &str)>) -> Schedule {
    let schedule = Schedule::compile(spec).unwrap();
    let schedule = match woken {
        Some((since, until)) => {
            let status = RequestWakeStatus {
                since: Some(since.into()),
                until: Some(until.into()),
                ..Default::default()
            };
            wake::woken(schedule, spec, Some(&status), t(since))
        }
        None => schedule,
    };
    schedule.with_idle(spec, Some((t(quiet), None)))
}

fn count(s: &Schedule, at: &str) -> Count {
    s.evaluate(t(at)).count()
}

#[test]
fn a_request_wake_up_ends_once_nobody_has_come_for_after() {
    let spec = spec(0, idle("RequestWakeUps", "10m"));
    let s = quiet(
        &spec,
        "2026-05-01T22:05:00Z",
        Some(("2026-05-01T22:00:00Z", "2026-05-01T22:30:00Z")),
    );
    assert_eq!(count(&s, "2026-05-01T22:14:59Z"), Count::Replicas(3));
    let asleep = s.evaluate(t("2026-05-01T22:15:00Z"));
    assert_eq!(asleep.count(), Count::Replicas(0));
    assert_eq!(asleep.idle_since, Some(t("2026-05-01T22:05:00Z")));
    // The sleep is a transition the operator wakes up for, at its instant.
    let next = s.next_transition(t("2026-05-01T22:06:00Z")).unwrap();
    assert_eq!((next.at, next.replicas), (t("2026-05-01T22:15:00Z"), 0));
    assert_eq!(
        s.idle_sleeps_at(t("2026-05-01T22:06:00Z")),
        Some(t("2026-05-01T22:15:00Z"))
    );
}

#[test]
fn blind_signals_leave_it_as_it_was_a_sleep_begun_holds_none_begins() {
    // `Always` inside the 09:00-17:00 window, after 10m, quiet since 10:00.
    let spec = spec(0, idle("Always", "10m"));
    let blind = |from: &str| {
        Schedule::compile(&spec)
            .unwrap()
            .with_idle(&spec, Some((t("2026-05-01T10:00:00Z"), Some(t(from)))))
    };
    // Blind from 10:20, asleep since 10:10: it stays asleep, and no transition wakes it.
    let s = blind("2026-05-01T10:20:00Z");
    assert_eq!(count(&s, "2026-05-01T12:00:00Z"), Count::Replicas(0));
    // Blind from 10:05, before the sleep would have begun: awake, and none begins.
    let s = blind("2026-05-01T10:05:00Z");
    assert_eq!(count(&s, "2026-05-01T10:30:00Z"), Count::Replicas(3));
    assert_eq!(s.idle_sleeps_at(t("2026-05-01T10:06:00Z")), None);
    let next = s.next_transition(t("2026-05-01T10:06:00Z")).unwrap();
    assert_eq!(
        (next.at, next.replicas),
        (t("2026-05-01T17:00:00Z"), 0),
        "the window's end"
    );
    // A request wake-up while blind (a rise after it) is not ended by idleness.
    let status = RequestWakeStatus {
        since: Some("2026-05-01T22:00:00Z".into()),
        until: Some("2026-05-01T22:30:00Z".into()),
        ..Default::default()
    };
    let woken = wake::woken(
        Schedule::compile(&spec).unwrap(),
        &spec,
        Some(&status),
        t("2026-05-01T22:00:00Z"),
    )
    .with_idle(
        &spec,
        Some((t("2026-05-01T10:00:00Z"), Some(t("2026-05-01T10:20:00Z")))),
    );
    assert_eq!(count(&woken, "2026-05-01T22:20:00Z"), Count::Replicas(3));
}

#[test]
fn blind_no_sleep_begins_where_during_only_later_lets_it_and_a_broken_one_is_not_taken_up_again() {
    // OutsideWindows, awake all day (default 3), the window 09:00-17:00 too; quiet since 12:00.
    let spec = spec(3, idle("OutsideWindows", "30m"));
    let at = |quiet: &str, blind: &str| {
        Schedule::compile(&spec)
            .unwrap()
            .with_idle(&spec, Some((t(quiet), Some(t(blind)))))
    };
    // Blind from 13:00, awake then (inside the window): at 17:00 the window ends, and it stays
    // awake (seeing, it would have slept).
    let s = at("2026-05-01T12:00:00Z", "2026-05-01T13:00:00Z");
    assert_eq!(count(&s, "2026-05-01T17:30:00Z"), Count::Replicas(3));
    let seeing = Schedule::compile(&spec)
        .unwrap()
        .with_idle(&spec, Some((t("2026-05-01T12:00:00Z"), None)));
    assert_eq!(count(&seeing, "2026-05-01T17:30:00Z"), Count::Replicas(0));
    // Asleep by idleness at night when blind from 02:00: asleep on; the window's start at 09:00
    // wakes it, and at 17:00 it does not sleep again blind.
    let s = at("2026-05-01T00:00:00Z", "2026-05-01T02:00:00Z");
    assert_eq!(count(&s, "2026-05-01T05:00:00Z"), Count::Replicas(0));
    assert_eq!(count(&s, "2026-05-01T10:00:00Z"), Count::Replicas(3));
    assert_eq!(count(&s, "2026-05-01T18:00:00Z"), Count::Replicas(3));
    let next = s.next_transition(t("2026-05-01T05:00:00Z")).unwrap();
    assert_eq!((next.at, next.replicas), (t("2026-05-01T09:00:00Z"), 3));
}

#[test]
fn a_quiet_from_before_a_wake_up_counts_from_the_wake_up() {
    // Nobody came all evening; a request at 22:00 wakes it: `after` counts from then.
    let spec = spec(0, idle("RequestWakeUps", "10m"));
    let s = quiet(
        &spec,
        "2026-05-01T19:00:00Z",
        Some(("2026-05-01T22:00:00Z", "2026-05-01T22:30:00Z")),
    );
    assert_eq!(count(&s, "2026-05-01T22:09:59Z"), Count::Replicas(3));
    assert_eq!(count(&s, "2026-05-01T22:10:00Z"), Count::Replicas(0));
}

#[test]
fn by_default_idleness_never_sleeps_a_window() {
    let spec = spec(0, idle("RequestWakeUps", "10m"));
    let s = quiet(&spec, "2026-05-01T09:30:00Z", None);
    assert_eq!(count(&s, "2026-05-01T12:00:00Z"), Count::Replicas(3));
    assert_eq!(s.idle_sleeps_at(t("2026-05-01T12:00:00Z")), None);
}

#[test]
fn outside_windows_sleeps_the_default_hours_and_no_window() {
    let spec = spec(1, idle("OutsideWindows", "30m"));
    let s = quiet(&spec, "2026-05-01T18:00:00Z", None);
    assert_eq!(count(&s, "2026-05-01T18:29:00Z"), Count::Replicas(1));
    assert_eq!(count(&s, "2026-05-01T18:30:00Z"), Count::Replicas(0));
    // The window wakes it at its start, and is never slept.
    assert_eq!(count(&s, "2026-05-02T09:00:00Z"), Count::Replicas(3));
    assert_eq!(count(&s, "2026-05-02T16:59:00Z"), Count::Replicas(3));
    // Nobody came all day: asleep as soon as the window ends (`after` ran from its start).
    assert_eq!(count(&s, "2026-05-02T17:00:00Z"), Count::Replicas(0));
}

#[test]
fn always_sleeps_inside_a_window_until_the_next_windows_start() {
    let spec = spec(0, idle("Always", "30m"));
    let s = quiet(&spec, "2026-05-01T10:00:00Z", None);
    assert_eq!(count(&s, "2026-05-01T10:29:00Z"), Count::Replicas(3));
    assert_eq!(count(&s, "2026-05-01T10:30:00Z"), Count::Replicas(0));
    assert_eq!(count(&s, "2026-05-01T16:00:00Z"), Count::Replicas(0));
    // The next window's start wakes it; still nobody: asleep again `after` later.
    assert_eq!(count(&s, "2026-05-02T09:00:00Z"), Count::Replicas(3));
    assert_eq!(count(&s, "2026-05-02T09:30:00Z"), Count::Replicas(0));
    let wake = s.next_transition(t("2026-05-01T20:00:00Z")).unwrap();
    assert_eq!((wake.at, wake.replicas), (t("2026-05-02T09:00:00Z"), 3));
}

#[test]
fn an_override_is_never_ended_by_idleness() {
    let mut spec = spec(0, idle("Always", "30m"));
    spec.overrides = serde_json::from_value(serde_json::json!([
        {"start": "2026-05-01T10:00:00Z", "end": "2026-05-01T12:00:00Z", "replica": 5, "reason": "demo"}
    ]))
    .unwrap();
    let s = quiet(&spec, "2026-05-01T09:00:00Z", None);
    assert_eq!(count(&s, "2026-05-01T09:45:00Z"), Count::Replicas(0));
    assert_eq!(count(&s, "2026-05-01T11:00:00Z"), Count::Replicas(5));
    // Nobody came during it either: asleep again at its end (5 to 3 is no rise).
    assert_eq!(count(&s, "2026-05-01T12:00:00Z"), Count::Replicas(0));
}

#[test]
fn windows_sleeps_only_inside_the_windows_it_lists() {
    let mut idle = idle("Windows", "30m");
    idle["windows"] = serde_json::json!([{"startTime": "12:00", "endTime": "14:00"}]);
    let spec = spec(0, idle);
    let s = quiet(&spec, "2026-05-01T09:00:00Z", None);
    assert_eq!(count(&s, "2026-05-01T11:00:00Z"), Count::Replicas(3));
    assert_eq!(count(&s, "2026-05-01T12:00:00Z"), Count::Replicas(0));
    assert_eq!(count(&s, "2026-05-01T14:00:00Z"), Count::Replicas(3));
    let next = s.next_transition(t("2026-05-01T11:00:00Z")).unwrap();
    assert_eq!((next.at, next.replicas), (t("2026-05-01T12:00:00Z"), 0));
}

#[test]
fn asleep_by_the_schedule_is_no_idle_sleep() {
    let spec = spec(0, idle("Always", "1m"));
    let s = quiet(&spec, "2026-05-01T00:00:00Z", None);
    let night = s.evaluate(t("2026-05-01T20:00:00Z"));
    assert_eq!(
        (night.count(), night.idle_since),
        (Count::Replicas(0), None)
    );
}

#[test]
fn without_a_quiet_nothing_changes() {
    let spec = spec(0, idle("Always", "1m"));
    let plain = Schedule::compile(&spec).unwrap();
    let s = Schedule::compile(&spec).unwrap().with_idle(&spec, None);
    for at in ["2026-05-01T10:00:00Z", "2026-05-01T20:00:00Z"] {
        assert_eq!(s.evaluate(t(at)), plain.evaluate(t(at)));
    }
}

/// A random spec: up to three windows on the quarter hour, a default, a zone, and idleness
/// in one of its forms (`Windows` with one stretch of its own).
fn arbitrary() -> impl Strategy<Value = (TDSetSpec, DateTime<Utc>, i64)> {
    let window = (0u16..96, 1u16..96, 0i32..4).prop_map(|(s, len, r)| {
        let (start, end) = (s * 15, (s * 15 + len * 15) % 1440);
        serde_json::json!({
            "startTime": format!("{:02}:{:02}", start / 60, start % 60),
            "endTime": format!("{:02}:{:02}", end / 60, end % 60),
            "replica": r,
        })
    });
    let during = prop::sample::select(vec!["OutsideWindows", "Always", "Windows"]);
    let tz = prop::sample::select(vec!["UTC", "Europe/Berlin", "America/New_York"]);
    (
        prop::collection::vec(window, 0..3),
        0i32..3,
        during,
        1i64..180,
        tz,
        (0u16..96, 1u16..48),
        // The quiet's start, in minutes from 2026-03-07: four weeks over the spring-forward of
        // America/New_York (03-08) and of Europe/Berlin (03-29).
        0i64..(24 * 1440),
        // The instant asked, in minutes after the quiet began.
        0i64..(2 * 1440),
    )
        .prop_filter_map(
            "windows must not start where they end",
            |(ws, default, during, after, tz, (is, ilen), q, dt)| {
                if ws.iter().any(|w| w["startTime"] == w["endTime"]) {
                    return None;
                }
                let mut idle = serde_json::json!({
                    "after": format!("{after}m"),
                    "during": during,
                    "signals": [{"prometheus": {"template": "traefik", "service": "web"}}],
                });
                if during == "Windows" {
                    let (start, end) = (is * 15, (is * 15 + ilen * 15) % 1440);
                    idle["windows"] = serde_json::json!([{
                        "startTime": format!("{:02}:{:02}", start / 60, start % 60),
                        "endTime": format!("{:02}:{:02}", end / 60, end % 60),
                    }]);
                }
                let spec: TDSetSpec = serde_json::from_value(serde_json::json!({
                    "container": {"image": "nginx", "port": 80},
                    "defaultReplica": default,
                    "timeZone": tz,
                    "schedulingConfig": ws,
                    "idle": idle,
                }))
                .ok()?;
                let quiet = t("2026-03-07T00:00:00Z") + Duration::minutes(q);
                Some((spec, quiet, dt))
            },
        )
}

/// Whether an idle window of `spec` covers `at` (the oracle's own reading of `windows`).
fn in_idle_window(spec: &TDSetSpec, at: DateTime<Utc>) -> bool {
    let tz: chrono_tz::Tz = spec.time_zone_name().parse().unwrap();
    let local = at.with_timezone(&tz);
    let minute = (local.hour() * 60 + local.minute()) as u16;
    (spec.idle.iter().flat_map(|i| i.windows.iter().flatten())).any(|w| {
        let (s, e) = (w.start_time.minute_of_day(), w.end_time.minute_of_day());
        if s < e {
            s <= minute && minute < e
        } else {
            minute >= s || minute < e
        }
    })
}

/// The oracle: the schedule without idleness, minute by minute from the quiet's start; 0
/// where `during` lets idleness decide and `after` has passed since the later of the quiet's
/// start and the last rise.
fn oracle(spec: &TDSetSpec, quiet: DateTime<Utc>, at: DateTime<Utc>) -> i32 {
    let plain = Schedule::compile(spec).unwrap();
    let now = plain.evaluate(at);
    let idle = spec.idle.as_ref().unwrap();
    let allowed = match idle.during.unwrap_or_default() {
        crate::api::IdleDuring::OutsideWindows => now.window.is_none(),
        crate::api::IdleDuring::Always => true,
        crate::api::IdleDuring::Windows => in_idle_window(spec, at),
        crate::api::IdleDuring::RequestWakeUps => false,
    };
    if now.level == 0 || now.override_label.is_some() || !allowed {
        return now.replicas;
    }
    let mut rise = quiet;
    let mut before = plain.evaluate(quiet).level;
    let mut m = quiet + Duration::minutes(1);
    while m <= at {
        let level = plain.evaluate(m).level;
        if super::rises(before, level) {
            rise = m;
        }
        before = level;
        m += Duration::minutes(1);
    }
    if at >= rise + super::after(idle) {
        0
    } else {
        now.replicas
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// The idle level is the oracle's at any minute, and it changes only at the transitions
    /// the schedule announces (the operator looks again exactly then).
    #[test]
    fn the_idle_level_is_the_oracles_and_changes_only_at_announced_transitions(
        (spec, quiet, dt) in arbitrary()
    ) {
        let s = Schedule::compile(&spec).unwrap().with_idle(&spec, Some((quiet, None)));
        let at = quiet + Duration::minutes(dt);
        prop_assert_eq!(s.evaluate(at).replicas, oracle(&spec, quiet, at));
        if let Some(next) = s.next_transition(at) {
            prop_assert!(next.at > at);
            let before = s.evaluate(at).replicas;
            let mid = at + (next.at - at) / 2;
            if mid > at && next.at - at <= Duration::hours(6) {
                prop_assert_eq!(s.evaluate(mid).replicas, before);
            }
            prop_assert_eq!(s.evaluate(next.at).replicas, next.replicas);
        }
    }

    /// Idleness only ever puts to sleep: the count is the schedule's, or 0.
    #[test]
    fn idleness_only_puts_to_sleep((spec, quiet, dt) in arbitrary()) {
        let plain = Schedule::compile(&spec).unwrap();
        let s = plain.clone().with_idle(&spec, Some((quiet, None)));
        let at = quiet + Duration::minutes(dt);
        let (idled, scheduled) = (s.evaluate(at).replicas, plain.evaluate(at).replicas);
        prop_assert!(idled == scheduled || idled == 0, "{idled} vs {scheduled}");
    }
}

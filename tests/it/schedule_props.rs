//! Property tests of the schedule engine against brute force, in zones chosen for their DST
//! quirks. No cluster involved.

use chrono::{DateTime, Datelike, Duration, NaiveDate, Offset, TimeZone, Timelike, Utc};
use chrono_tz::Tz;
use proptest::prelude::*;
use tdset_operator::api::{
    ContainerSpec, Day, Holiday, Override, Ramp, RampDirection, TDSetSpec, TimeOfDay, Window,
};
use tdset_operator::schedule::{Count, LedTransition, MAX_LEAD, Schedule, rises};

const ZONES: &[&str] = &[
    "UTC",
    "America/New_York",    // north, 02:00 switches
    "Europe/Berlin",       // north, 02:00/03:00 switches
    "Australia/Sydney",    // south
    "Australia/Lord_Howe", // 30-minute DST
    "Pacific/Chatham",     // +12:45/+13:45
    "America/Havana",      // switches at midnight
    "America/Santiago",    // south, switches at 24:00
    "Asia/Beirut",         // switches at midnight
    "Africa/Casablanca",   // DST suspended for Ramadan
    "America/St_Johns",    // -03:30
    "Asia/Kolkata",        // +05:30, no DST
];

/// Minutes of day that sit on or near typical switch times, mixed with any minute.
fn minute() -> impl Strategy<Value = u16> {
    prop_oneof![
        3 => 0u16..1440,
        2 => prop::sample::select(vec![0u16, 30, 60, 90, 120, 135, 150, 180, 210, 1380, 1410, 1425]),
        1 => (0u16..24).prop_map(|h| h * 60),
    ]
}

fn window() -> impl Strategy<Value = Window> {
    (
        minute(),
        minute(),
        0i32..6,
        prop::option::of(prop::collection::btree_set(0usize..7, 1..=7)),
        any::<bool>(),
    )
        .prop_filter("start != end", |(s, e, ..)| s != e)
        .prop_map(|(s, e, replica, days, as_hour)| {
            let t = |m: u16| {
                if as_hour && m % 60 == 0 {
                    TimeOfDay::hour((m / 60) as u8).unwrap()
                } else {
                    TimeOfDay::hm((m / 60) as u8, (m % 60) as u8).unwrap()
                }
            };
            Window {
                name: None,
                start_time: t(s),
                end_time: t(e),
                replica,
                max_replica: None,
                days: days.map(|d| d.into_iter().map(|i| Day::ALL[i]).collect()),
            }
        })
}

fn spec() -> impl Strategy<Value = TDSetSpec> {
    (
        prop::sample::select(ZONES),
        prop::collection::vec(window(), 0..6),
        0i32..6,
    )
        .prop_map(|(tz, windows, default)| TDSetSpec {
            container: Some(ContainerSpec {
                image: "app".into(),
                port: 8080,
            }),
            template: None,
            scale_target_ref: None,
            on_delete: None,
            service: None,
            scheduling_config: windows,
            default_replica: Some(default),
            interval_mint: None,
            time_zone: Some(tz.to_string()),
            ..TDSetSpec::default()
        })
}

fn offset_changes(tz: Tz, year: i32) -> Vec<DateTime<Utc>> {
    let start = Utc.with_ymd_and_hms(year, 1, 1, 0, 0, 0).unwrap();
    let off = |t: DateTime<Utc>| tz.offset_from_utc_datetime(&t.naive_utc()).fix();
    (0..(366 * 24))
        .map(|h| start + Duration::hours(h))
        .filter(|&t| off(t) != off(t - Duration::hours(1)))
        .collect()
}

/// "now": anywhere in 2025..2028, or within two days of one of the zone's offset changes.
fn instant_for(spec: &TDSetSpec, near_change: bool, pick: usize, secs: i64) -> DateTime<Utc> {
    let tz: Tz = spec.time_zone_name().parse().unwrap();
    if near_change {
        let changes = offset_changes(tz, 2026);
        if !changes.is_empty() {
            return changes[pick % changes.len()] - Duration::days(2)
                + Duration::seconds(secs % (4 * 86_400));
        }
    }
    Utc.with_ymd_and_hms(2025, 1, 1, 0, 0, 0).unwrap()
        + Duration::seconds(secs % (3 * 365 * 86_400))
}

/// An independent formulation of "which window applies": each window covers a set of
/// minutes of the week, starting on its start day; the first covering window wins.
fn oracle(spec: &TDSetSpec, at: DateTime<Utc>) -> i32 {
    let tz: Tz = spec.time_zone_name().parse().unwrap();
    let local = at.with_timezone(&tz).naive_local();
    let week_minute = local.weekday().num_days_from_monday() as i64 * 1440
        + local.hour() as i64 * 60
        + local.minute() as i64;
    for w in &spec.scheduling_config {
        let (s, e) = (
            w.start_time.minute_of_day() as i64,
            w.end_time.minute_of_day() as i64,
        );
        let len = (e - s).rem_euclid(1440);
        let days: Vec<i64> = match &w.days {
            None => (0..7).collect(),
            Some(d) => d.iter().map(|d| d.index() as i64).collect(),
        };
        for d in days {
            let from = d * 1440 + s;
            if (week_minute - from).rem_euclid(7 * 1440) < len {
                return w.replica;
            }
        }
    }
    spec.default_replica.expect("a number")
}

fn next_whole_minute(t: DateTime<Utc>) -> DateTime<Utc> {
    let floor = DateTime::from_timestamp(t.timestamp() - t.timestamp().rem_euclid(60), 0).unwrap();
    floor + Duration::minutes(1)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn next_transition_agrees_with_minute_scan(spec in spec(), near in any::<bool>(), pick in 0usize..16, secs in 0i64..i64::MAX / 2) {
        let now = instant_for(&spec, near, pick, secs);
        let schedule = Schedule::compile(&spec).unwrap();
        let current = schedule.evaluate(now).replicas;
        prop_assert_eq!(current, oracle(&spec, now), "evaluate disagrees with the oracle at {}", now);

        let next = schedule.next_transition(now);
        let horizon = now + Duration::days(3);
        // Brute force: the first whole minute after now where the oracle's count differs.
        let mut t = next_whole_minute(now);
        let mut scanned = None;
        while t <= horizon {
            if oracle(&spec, t) != current {
                scanned = Some((t, oracle(&spec, t)));
                break;
            }
            t += Duration::minutes(1);
        }
        match next {
            Some(n) => {
                prop_assert!(n.at > now, "next {} is not after now {}", n.at, now);
                prop_assert_ne!(n.replicas, current);
                prop_assert_eq!(schedule.evaluate(n.at).replicas, n.replicas);
                if n.at <= horizon {
                    prop_assert_eq!(scanned, Some((n.at, n.replicas)), "now {} zone {}", now, spec.time_zone_name());
                } else {
                    prop_assert_eq!(scanned, None);
                }
            }
            None => prop_assert_eq!(scanned, None, "engine says never, scan found a change; now {}", now),
        }
    }

    #[test]
    fn transitions_are_strictly_increasing_and_real(spec in spec(), secs in 0i64..i64::MAX / 2) {
        let from = instant_for(&spec, false, 0, secs);
        let schedule = Schedule::compile(&spec).unwrap();
        let mut last = (from, schedule.evaluate(from).replicas);
        for t in schedule.transitions(from, from + Duration::days(8)) {
            prop_assert!(t.at > last.0);
            prop_assert_ne!(t.replicas, last.1);
            // Constant in between: sampled at the midpoint.
            let mid = last.0 + (t.at - last.0) / 2;
            prop_assert_eq!(schedule.evaluate(mid).replicas, last.1);
            last = (t.at, t.replicas);
        }
    }
}

fn utc(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

fn one_window(tz: &str, start: (u8, u8), end: (u8, u8)) -> Schedule {
    Schedule::compile(&TDSetSpec {
        container: Some(ContainerSpec {
            image: "app".into(),
            port: 80,
        }),
        template: None,
        scale_target_ref: None,
        on_delete: None,
        service: None,
        scheduling_config: vec![Window {
            name: Some("w".into()),
            start_time: TimeOfDay::hm(start.0, start.1).unwrap(),
            end_time: TimeOfDay::hm(end.0, end.1).unwrap(),
            replica: 9,
            max_replica: None,
            days: None,
        }],
        default_replica: Some(1),
        interval_mint: None,
        time_zone: Some(tz.into()),
        ..TDSetSpec::default()
    })
    .unwrap()
}

#[test]
fn contract_example_new_york_spring_forward() {
    let s = one_window("America/New_York", (2, 30), (4, 0));
    let t = s.next_transition(utc("2026-03-08T00:00:00Z")).unwrap();
    assert_eq!((t.at, t.replicas), (utc("2026-03-08T07:00:00Z"), 9));
}

#[test]
fn contract_example_berlin_fall_back() {
    let s = one_window("Europe/Berlin", (2, 0), (2, 30));
    let got: Vec<_> = s
        .transitions(utc("2026-10-24T22:00:00Z"), utc("2026-10-25T03:00:00Z"))
        .into_iter()
        .map(|t| (t.at, t.replicas))
        .collect();
    let want = vec![
        (utc("2026-10-25T00:00:00Z"), 9),
        (utc("2026-10-25T00:30:00Z"), 1),
        (utc("2026-10-25T01:00:00Z"), 9),
        (utc("2026-10-25T01:30:00Z"), 1),
    ];
    assert_eq!(got, want);
}

#[test]
fn lord_howe_half_hour_shift() {
    // Lord Howe springs forward 02:00 -> 02:30 local on 2026-10-04 (15:00Z, +10:30 -> +11).
    let s = one_window("Australia/Lord_Howe", (2, 15), (5, 0));
    let t = s.next_transition(utc("2026-10-03T12:00:00Z")).unwrap();
    assert_eq!(
        t.at,
        utc("2026-10-03T15:30:00Z"),
        "the 02:15 boundary is inside the gap: it fires when the gap ends"
    );
}

#[test]
fn midnight_switch_zone_havana() {
    // Havana springs forward at 00:00 -> 01:00 on 2026-03-08; a window starting 00:30 starts at 01:00 CDT.
    let s = one_window("America/Havana", (0, 30), (6, 0));
    let t = s.next_transition(utc("2026-03-07T12:00:00Z")).unwrap();
    let local = t.at.with_timezone(&"America/Havana".parse::<Tz>().unwrap());
    assert_eq!((local.hour(), local.minute()), (1, 0));
    assert_eq!(
        local.date_naive(),
        NaiveDate::from_ymd_opt(2026, 3, 8).unwrap()
    );
}

#[test]
fn next_transition_is_never_now_even_on_a_boundary() {
    let s = one_window("UTC", (9, 0), (17, 0));
    let at = utc("2026-05-01T09:00:00Z");
    assert_eq!(s.evaluate(at).replicas, 9);
    assert_eq!(
        s.next_transition(at).unwrap().at,
        utc("2026-05-01T17:00:00Z")
    );
}

// ---- Holidays, overrides and ramps, against a minute-by-minute brute force. ----

/// A spec with holidays and overrides near `base`, windows that may name `Hol`, and maybe a
/// ramp. Everything sits on whole minutes, as a level change does in any real zone.
fn calendar_spec() -> impl Strategy<Value = (TDSetSpec, DateTime<Utc>)> {
    let windows = prop::collection::vec(
        (window(), any::<bool>()).prop_map(|(mut w, hol)| {
            if hol && let Some(days) = w.days.as_mut() {
                days.push(Day::Hol);
            }
            w
        }),
        0..5,
    );
    let holidays = prop::collection::vec((-2i64..4, 0i64..3), 0..3);
    let overrides =
        prop::collection::vec((-3000i64..3000, 1i64..600, 0i32..7, any::<bool>()), 0..3);
    let ramp = prop::option::of((1i32..4, 1i64..31, 0usize..3));
    (
        prop::sample::select(ZONES),
        windows,
        0i32..6,
        any::<bool>(),
        0usize..16,
        0i64..i64::MAX / 2,
        holidays,
        overrides,
        ramp,
    )
        .prop_map(
            |(tz, windows, default, near, pick, secs, holidays, overrides, ramp)| {
                let mut spec = TDSetSpec {
                    container: Some(ContainerSpec {
                        image: "app".into(),
                        port: 80,
                    }),
                    scheduling_config: windows,
                    default_replica: Some(default),
                    time_zone: Some(tz.to_string()),
                    ..TDSetSpec::default()
                };
                let base = next_whole_minute(instant_for(&spec, near, pick, secs));
                let tzv: Tz = tz.parse().unwrap();
                let today = base.with_timezone(&tzv).date_naive();
                spec.holidays = holidays
                    .into_iter()
                    .map(|(from, len)| {
                        let a = today + Duration::days(from);
                        let b = a + Duration::days(len);
                        Holiday(if len == 0 {
                            a.to_string()
                        } else {
                            format!("{a}/{b}")
                        })
                    })
                    .collect();
                spec.overrides = overrides
                    .into_iter()
                    .map(|(start, len, replica, reason)| Override {
                        start: (base + Duration::minutes(start)).to_rfc3339(),
                        end: (base + Duration::minutes(start + len)).to_rfc3339(),
                        replica: Some(replica),
                        max_replica: None,
                        reason: reason.then(|| format!("o{start}")),
                    })
                    .collect();
                spec.ramp = ramp.map(|(step, every, direction)| Ramp {
                    step,
                    every: format!("{every}m"),
                    direction: Some(
                        [RampDirection::Both, RampDirection::Up, RampDirection::Down][direction],
                    ),
                });
                (spec, base)
            },
        )
}

/// The level by a different formulation: overrides first; then, for each window, the two
/// dates it could have started on, with the holiday rule applied to the start date.
fn oracle_level(spec: &TDSetSpec, at: DateTime<Utc>) -> i32 {
    for o in &spec.overrides {
        let (s, e) = (utc(&o.start), utc(&o.end));
        if s <= at && at < e {
            return o.replica.expect("a number");
        }
    }
    let tz: Tz = spec.time_zone_name().parse().unwrap();
    let local = at.with_timezone(&tz).naive_local();
    let is_holiday = |d: NaiveDate| {
        spec.holidays.iter().any(|h| {
            let (a, b) = h.0.split_once('/').unwrap_or((&h.0, &h.0));
            let parse = |s: &str| NaiveDate::parse_from_str(s, "%Y-%m-%d").unwrap();
            parse(a) <= d && d <= parse(b)
        })
    };
    let minute = local.hour() as i64 * 60 + local.minute() as i64;
    for w in &spec.scheduling_config {
        let (s, e) = (
            w.start_time.minute_of_day() as i64,
            w.end_time.minute_of_day() as i64,
        );
        let len = (e - s).rem_euclid(1440);
        for (date, extra) in [(local.date(), 0), (local.date() - Duration::days(1), 1440)] {
            let m = minute + extra;
            if !(s <= m && m < s + len) {
                continue;
            }
            let starts = match &w.days {
                None => true,
                Some(days) if is_holiday(date) => days.contains(&Day::Hol),
                Some(days) => days.contains(&Day::from_chrono(date.weekday())),
            };
            if starts {
                return w.replica;
            }
        }
    }
    spec.default_replica.expect("a number")
}

/// The count at every whole minute of `[from, from + minutes)`, from the contract's formula
/// evaluated by brute force over a minute grid of levels.
fn oracle_counts(spec: &TDSetSpec, from: DateTime<Utc>, minutes: i64) -> Vec<i32> {
    let Some(ramp) = &spec.ramp else {
        return (0..minutes)
            .map(|k| oracle_level(spec, from + Duration::minutes(k)))
            .collect();
    };
    let every = ramp.every.trim_end_matches('m').parse::<i64>().unwrap();
    let direction = ramp.direction.unwrap_or_default();
    let (up, down) = (
        direction != RampDirection::Down,
        direction != RampDirection::Up,
    );
    let levels: Vec<i32> = spec
        .scheduling_config
        .iter()
        .map(|w| w.replica)
        .chain(spec.overrides.iter().filter_map(|o| o.replica))
        .chain(spec.default_replica)
        .collect();
    let spread = (levels.iter().max().unwrap() - levels.iter().min().unwrap()) as i64;
    let reach = (spread + ramp.step as i64 - 1) / ramp.step as i64 * every;
    let grid: Vec<i32> = (-reach..minutes + reach)
        .map(|k| oracle_level(spec, from + Duration::minutes(k)))
        .collect();
    let at = |k: i64| grid[(k + reach) as usize];
    (0..minutes)
        .map(|t| {
            let mut r = at(t);
            for k in 1..=reach {
                let drop = ramp.step * ((k + every - 1) / every) as i32;
                if down {
                    r = r.max(at(t - k) - drop);
                }
                if up {
                    r = r.max(at(t + k) - drop);
                }
            }
            r.max(0)
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 160, ..ProptestConfig::default() })]

    #[test]
    fn holidays_overrides_and_ramps_agree_with_minute_scan((spec, base) in calendar_spec(), offset in -1440i64..2880, secs in 0i64..60, anchor in 0usize..3, which in 0usize..8, before in 0i64..90) {
        let schedule = match Schedule::compile(&spec) {
            Ok(s) => s,
            // A generated ramp may be too long for its levels; that is the engine's call.
            Err(e) => { prop_assert!(e.iter().all(|e| e.field == "spec.ramp"), "{:?}", e); return Ok(()); }
        };
        // Anywhere around `base`, or shortly before an override's edge or a holiday's midnight.
        let edges: Vec<DateTime<Utc>> = match anchor {
            1 => spec.overrides.iter().flat_map(|o| [utc(&o.start), utc(&o.end)]).collect(),
            2 => {
                let tz: Tz = spec.time_zone_name().parse().unwrap();
                spec.holidays
                    .iter()
                    .filter_map(|h| {
                        let day = NaiveDate::parse_from_str(&h.0[..10], "%Y-%m-%d").ok()?;
                        tz.from_local_datetime(&day.and_hms_opt(0, 0, 0)?).earliest()
                    })
                    .map(|t| next_whole_minute(t.with_timezone(&Utc) - Duration::seconds(1)))
                    .collect()
            }
            _ => vec![],
        };
        let minute = match edges.get(which % edges.len().max(1)) {
            Some(edge) => *edge - Duration::minutes(before),
            None => base + Duration::minutes(offset),
        };
        let now = minute + Duration::seconds(secs);
        let scan = 1440;
        let counts = oracle_counts(&spec, minute, scan + 1);
        let current = schedule.evaluate(now).replicas;
        prop_assert_eq!(current, counts[0], "count at {} ({})", now, spec.time_zone_name());
        prop_assert_eq!(schedule.evaluate(now).level, oracle_level(&spec, now));

        let scanned = (1..=scan)
            .find(|&k| counts[k as usize] != current)
            .map(|k| (minute + Duration::minutes(k), counts[k as usize]));
        match schedule.next_transition(now) {
            Some(n) => {
                prop_assert!(n.at > now, "next {} is not after now {}", n.at, now);
                prop_assert_eq!(schedule.evaluate(n.at).replicas, n.replicas);
                if n.at <= minute + Duration::minutes(scan) {
                    prop_assert_eq!(scanned, Some((n.at, n.replicas)), "now {} zone {}", now, spec.time_zone_name());
                } else {
                    prop_assert_eq!(scanned, None);
                }
            }
            None => prop_assert_eq!(scanned, None, "engine says never, scan found a change; now {}", now),
        }
    }
}

/// What `led` writes at `x` as the listing says it: the count of the last transition whose
/// write has started by `x`, else what was written at `now`.
fn listed_at(list: &[LedTransition], at_now: Count, x: DateTime<Utc>) -> Count {
    list.iter()
        .take_while(|l| l.write_at <= x)
        .last()
        .map_or(at_now, |l| l.transition.count())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 160, ..ProptestConfig::default() })]

    /// `warmUp`: only a rise is written early, by at most the lead and never before the
    /// transition before it; what the schedule says is unchanged; and the listing `preview`
    /// shows agrees with what the controller writes at every instant.
    #[test]
    fn only_rises_lead_and_the_listing_agrees_with_the_writes((spec, base) in calendar_spec(), offset in -1440i64..2880, lead_s in 0i64..5400, probes in prop::collection::vec(0i64..86_400, 8)) {
        let schedule = match Schedule::compile(&spec) {
            Ok(s) => s,
            Err(e) => { prop_assert!(e.iter().all(|e| e.field == "spec.ramp"), "{:?}", e); return Ok(()); }
        };
        let now = base + Duration::minutes(offset);
        let lead = Duration::seconds(lead_s);
        let capped = lead.min(MAX_LEAD);
        let led = schedule.led(now, lead);
        let plain = schedule.evaluate(now).count();
        // What the reconcile computes in one pass agrees with the parts.
        let (eval, next, next_write) = schedule.led_at(now, lead);
        prop_assert_eq!(eval, schedule.evaluate_led(now, lead));
        prop_assert_eq!(next, schedule.next_transition(now));
        prop_assert_eq!(next_write, schedule.next_led_write(now, lead));
        if let (Count::Replicas(w), Count::Replicas(p)) = (led.count, plain) {
            prop_assert!(w >= p, "{w} written at {now} where the schedule says {p}");
        }
        if led.count != plain {
            let t = led.ahead_of.expect("written ahead of a transition");
            prop_assert_eq!(Some(t), schedule.next_transition(now));
            prop_assert!(t.at - now <= capped);
            prop_assert!(rises(plain, t.count()));
        }
        let list = schedule.led_transitions(now, now + Duration::days(2), lead);
        let mut previous: Option<DateTime<Utc>> = None;
        for l in &list {
            prop_assert!(l.write_at <= l.transition.at && l.lead() <= capped, "{:?}", l);
            if !rises(l.from, l.transition.count()) {
                prop_assert_eq!(l.write_at, l.transition.at);
            }
            if let Some(p) = previous {
                prop_assert!(l.write_at >= p, "{:?} written before the transition at {}", l, p);
            }
            previous = Some(l.transition.at);
        }
        for x in list.iter().map(|l| l.write_at).filter(|x| *x > now && *x <= now + Duration::days(1))
            .chain(probes.iter().map(|s| now + Duration::seconds(*s)))
        {
            prop_assert_eq!(schedule.led(x, lead).count, listed_at(&list, led.count, x), "at {}", x);
        }
    }
}

//! The schedule: which replica count applies at an instant, and when it changes next.
//!
//! Pure functions of a spec and an instant; no client, no clock. Windows are wall-clock times
//! in the spec's zone, so the answer at an instant depends only on the local (date, time) at
//! that instant. That makes DST fall out of the conversion: a repeated local hour is simply
//! visited twice, and a boundary inside a skipped hour has been passed when the gap ends.

use std::fmt;

use chrono::{
    DateTime, Datelike, Duration, NaiveDate, NaiveDateTime, NaiveTime, Offset, TimeZone, Timelike,
    Utc,
};
use chrono_tz::Tz;

use crate::api::{Day, MAX_REPLICAS, MAX_WINDOWS, TDSetSpec};
use crate::workload::Source;

/// How far ahead `next_transition` looks before it concludes that the count never changes.
/// The count is a weekly-periodic function of local time, so two weeks see every local
/// (weekday, minute) at least once even if a DST gap hides some of them in one week.
const HORIZON: Duration = Duration::days(15);

/// A spec compiled for evaluation: the zone resolved, times in minutes, days as a bitmask.
#[derive(Clone, Debug)]
pub struct Schedule {
    tz: Tz,
    windows: Vec<CompiledWindow>,
    default_replicas: i32,
    /// Sorted, deduplicated minutes of the day at which some window starts or ends, always
    /// including 0 so that day-filtered windows are re-evaluated at midnight.
    boundaries: Vec<u16>,
}

#[derive(Clone, Debug)]
struct CompiledWindow {
    start: u16,
    end: u16,
    replicas: i32,
    /// Bit `d` set when the window may start on weekday `d` (0 = Monday).
    days: u8,
    label: String,
}

/// What the schedule says at one instant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Evaluation {
    pub replicas: i32,
    /// Index into `schedulingConfig` of the window that applies, if any.
    pub window: Option<usize>,
    /// That window's label (its name or "HH:MM-HH:MM").
    pub window_label: Option<String>,
}

/// The next change of the replica count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transition {
    pub at: DateTime<Utc>,
    pub replicas: i32,
}

/// A spec the API server accepted but the engine cannot evaluate, or a field that breaks the
/// schema (for manifests that never went through an API server, as with `preview`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpecError {
    /// JSON path of the field, e.g. `spec.timeZone`.
    pub field: String,
    pub message: String,
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// Something worth telling the user that does not stop the schedule from working.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Warning {
    /// Two windows are active at the same local time; the earlier in the list wins there.
    Overlap {
        first: usize,
        first_label: String,
        second: usize,
        second_label: String,
        example: String,
    },
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Warning::Overlap {
                first,
                first_label,
                second,
                second_label,
                example,
            } => write!(
                f,
                "windows schedulingConfig[{first}] ({first_label}) and schedulingConfig[{second}] ({second_label}) overlap \
                 (e.g. {example}); schedulingConfig[{first}] wins there"
            ),
        }
    }
}

impl Schedule {
    /// Compiles a spec, checking everything the schema checks plus what it cannot (the zone).
    /// Every problem is returned, not just the first.
    pub fn compile(spec: &TDSetSpec) -> Result<Schedule, Vec<SpecError>> {
        let mut errors = validate(spec);
        let tz = match spec.time_zone_name().parse::<Tz>() {
            Ok(tz) => Some(tz),
            Err(_) => {
                errors.push(SpecError {
                    field: "spec.timeZone".into(),
                    message: format!(
                        "unknown time zone {:?}; use an IANA name such as \"Europe/Berlin\" or \"America/New_York\"",
                        spec.time_zone_name()
                    ),
                });
                None
            }
        };
        let Some(tz) = tz.filter(|_| errors.is_empty()) else {
            return Err(errors);
        };
        let windows: Vec<CompiledWindow> = spec
            .scheduling_config
            .iter()
            .map(|w| CompiledWindow {
                start: w.start_time.minute_of_day(),
                end: w.end_time.minute_of_day(),
                replicas: w.replica,
                days: match &w.days {
                    None => 0x7f,
                    Some(days) => days.iter().fold(0u8, |m, d| m | 1 << d.index()),
                },
                label: w.label(),
            })
            .collect();
        let mut boundaries: Vec<u16> = windows
            .iter()
            .flat_map(|w| [w.start, w.end])
            .chain([0])
            .collect();
        boundaries.sort_unstable();
        boundaries.dedup();
        Ok(Schedule {
            tz,
            windows,
            default_replicas: spec.default_replica,
            boundaries,
        })
    }

    pub fn time_zone(&self) -> Tz {
        self.tz
    }

    /// The replica count and active window at `at`.
    pub fn evaluate(&self, at: DateTime<Utc>) -> Evaluation {
        let local = at.with_timezone(&self.tz).naive_local();
        match self.active_at_local(local) {
            Some(i) => Evaluation {
                replicas: self.windows[i].replicas,
                window: Some(i),
                window_label: Some(self.windows[i].label.clone()),
            },
            None => Evaluation {
                replicas: self.default_replicas,
                window: None,
                window_label: None,
            },
        }
    }

    fn replicas_at(&self, at: DateTime<Utc>) -> i32 {
        let local = at.with_timezone(&self.tz).naive_local();
        self.active_at_local(local)
            .map_or(self.default_replicas, |i| self.windows[i].replicas)
    }

    /// First window in list order that is active at this local wall-clock time.
    fn active_at_local(&self, local: NaiveDateTime) -> Option<usize> {
        let minute = (local.hour() * 60 + local.minute()) as u16;
        let today = local.weekday().num_days_from_monday();
        let yesterday = (today + 6) % 7;
        self.windows.iter().position(|w| {
            if w.start < w.end {
                w.days & (1 << today) != 0 && w.start <= minute && minute < w.end
            } else {
                // Wraps midnight: the evening part belongs to today's start, the morning part
                // to yesterday's, because `days` names the day a window starts on.
                (w.days & (1 << today) != 0 && minute >= w.start)
                    || (w.days & (1 << yesterday) != 0 && minute < w.end)
            }
        })
    }

    /// The earliest instant strictly after `now` at which the replica count changes, and the
    /// count from then on; `None` when it never changes.
    ///
    /// Walks forward through the only instants where the count can change: local times that
    /// hit a window boundary, and instants where the zone's UTC offset changes (DST), which
    /// can jump local time over a boundary or back before one.
    pub fn next_transition(&self, now: DateTime<Utc>) -> Option<Transition> {
        if self
            .windows
            .iter()
            .all(|w| w.replicas == self.default_replicas)
        {
            return None;
        }
        let current = self.replicas_at(now);
        let limit = now + HORIZON;
        let mut t = now;
        while t < limit {
            let local = t.with_timezone(&self.tz).naive_local();
            // Same offset assumed until the next offset change, which is checked below.
            let boundary_instant = t + (self.next_boundary_after(local) - local);
            t = match self.offset_change_in(t, boundary_instant) {
                Some(change) => change,
                None => boundary_instant,
            };
            let replicas = self.replicas_at(t);
            if replicas != current {
                return Some(Transition { at: t, replicas });
            }
        }
        None
    }

    /// The first boundary local time strictly after `local` (today's, or tomorrow's first).
    fn next_boundary_after(&self, local: NaiveDateTime) -> NaiveDateTime {
        let date = local.date();
        for &m in &self.boundaries {
            let candidate = date.and_time(minute_to_time(m));
            if candidate > local {
                return candidate;
            }
        }
        let tomorrow = date.succ_opt().unwrap_or(NaiveDate::MAX);
        tomorrow.and_time(minute_to_time(self.boundaries[0]))
    }

    /// The first whole second in `(from, to]` at which the UTC offset differs from the one at
    /// `from`. Probes hourly so two changes close together are not mistaken for none, then
    /// bisects to the second.
    fn offset_change_in(&self, from: DateTime<Utc>, to: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let offset_at = |t: DateTime<Utc>| self.tz.offset_from_utc_datetime(&t.naive_utc()).fix();
        let base = offset_at(from);
        let mut lo = from;
        while lo < to {
            let hi = (lo + Duration::hours(1)).min(to);
            if offset_at(hi) != base {
                // Invariant: offset(lo) == base, offset(hi) != base; narrow to whole seconds.
                let mut lo_s = lo.timestamp();
                let mut hi_s = hi.timestamp();
                if hi.timestamp_subsec_nanos() != 0 {
                    hi_s += 1; // offsets change on whole seconds; hi's second start may still be base
                }
                while hi_s - lo_s > 1 {
                    let mid = lo_s + (hi_s - lo_s) / 2;
                    let mid_t = DateTime::from_timestamp(mid, 0)?;
                    if offset_at(mid_t) == base {
                        lo_s = mid;
                    } else {
                        hi_s = mid;
                    }
                }
                let change = DateTime::from_timestamp(hi_s, 0)?;
                return (change > from).then_some(change);
            }
            lo = hi;
        }
        None
    }

    /// Every change of the replica count in `(from, to]`, in order.
    pub fn transitions(&self, from: DateTime<Utc>, to: DateTime<Utc>) -> Vec<Transition> {
        let mut out = Vec::new();
        let mut t = from;
        while let Some(next) = self.next_transition(t) {
            if next.at > to {
                break;
            }
            out.push(next);
            t = next.at;
        }
        out
    }

    /// Pairs of windows that are active at the same local time somewhere in the week.
    pub fn warnings(&self) -> Vec<Warning> {
        const WEEK: usize = 7 * 1440;
        let coverage: Vec<Vec<bool>> = self
            .windows
            .iter()
            .map(|w| {
                let mut minutes = vec![false; WEEK];
                for d in 0..7usize {
                    if w.days & (1 << d) == 0 {
                        continue;
                    }
                    let len = if w.start < w.end {
                        w.end - w.start
                    } else {
                        1440 - w.start + w.end
                    };
                    for k in 0..len as usize {
                        minutes[(d * 1440 + w.start as usize + k) % WEEK] = true;
                    }
                }
                minutes
            })
            .collect();
        let mut out = Vec::new();
        for i in 0..self.windows.len() {
            for j in i + 1..self.windows.len() {
                if let Some(m) = (0..WEEK).find(|&m| coverage[i][m] && coverage[j][m]) {
                    out.push(Warning::Overlap {
                        first: i,
                        first_label: self.windows[i].label.clone(),
                        second: j,
                        second_label: self.windows[j].label.clone(),
                        example: format!(
                            "{} {:02}:{:02}",
                            Day::ALL[m / 1440],
                            (m % 1440) / 60,
                            m % 60
                        ),
                    });
                }
            }
        }
        out
    }
}

fn minute_to_time(m: u16) -> NaiveTime {
    NaiveTime::from_hms_opt(u32::from(m / 60), u32::from(m % 60), 0).unwrap_or(NaiveTime::MIN)
}

/// The schema's rules, for specs that never passed an API server (files given to `preview`),
/// and as a second line of defence in the controller. Types and the HH:MM format are enforced
/// by deserialisation already.
pub fn validate(spec: &TDSetSpec) -> Vec<SpecError> {
    let mut errors = Vec::new();
    if let Err(e) = Source::of(spec) {
        errors.push(e);
    }
    let mut err = |field: String, message: String| errors.push(SpecError { field, message });
    if let Some(c) = &spec.container {
        if c.image.trim().is_empty() || c.image.chars().any(char::is_whitespace) {
            err(
                "spec.container.image".into(),
                "must be a non-empty image reference without spaces".into(),
            );
        }
        if !(1..=65535).contains(&c.port) {
            err(
                "spec.container.port".into(),
                format!("{} is out of range 1..65535", c.port),
            );
        }
    }
    if let Some(t) = &spec.template {
        let containers = t
            .spec
            .as_ref()
            .map(|p| p.containers.as_slice())
            .unwrap_or_default();
        if containers.is_empty() {
            err(
                "spec.template.spec.containers".into(),
                "the pod template needs at least one container".into(),
            );
        }
        for (i, c) in containers.iter().enumerate() {
            if c.image.as_deref().is_none_or(|i| i.trim().is_empty()) {
                err(
                    format!("spec.template.spec.containers[{i}].image"),
                    "is required".into(),
                );
            }
        }
    }
    if spec.service.is_some() && spec.scale_target_ref.is_some() {
        err(
            "spec.service".into(),
            "needs an owned Deployment (spec.container or spec.template)".into(),
        );
    }
    if spec.on_delete.is_some() && spec.scale_target_ref.is_none() {
        err(
            "spec.onDelete".into(),
            "applies to spec.scaleTargetRef only".into(),
        );
    }
    if let Some(svc) = &spec.service
        && !(1..=65535).contains(&svc.port)
    {
        err(
            "spec.service.port".into(),
            format!("{} is out of range 1..65535", svc.port),
        );
    }
    if !(0..=MAX_REPLICAS).contains(&spec.default_replica) {
        err(
            "spec.defaultReplica".into(),
            format!("{} is out of range 0..{MAX_REPLICAS}", spec.default_replica),
        );
    }
    if let Some(i) = spec.interval_mint
        && !(1..=1440).contains(&i)
    {
        err(
            "spec.intervalMint".into(),
            format!("{i} is out of range 1..1440 (minutes)"),
        );
    }
    if spec.scheduling_config.len() > MAX_WINDOWS {
        err(
            "spec.schedulingConfig".into(),
            format!(
                "{} windows; at most {MAX_WINDOWS} are allowed",
                spec.scheduling_config.len()
            ),
        );
    }
    for (i, w) in spec.scheduling_config.iter().enumerate() {
        if w.start_time.minute_of_day() == w.end_time.minute_of_day() {
            err(
                format!("spec.schedulingConfig[{i}].endTime"),
                "endTime must differ from startTime (a window needs a length; use startTime > endTime to wrap midnight)"
                    .into(),
            );
        }
        if !(0..=MAX_REPLICAS).contains(&w.replica) {
            err(
                format!("spec.schedulingConfig[{i}].replica"),
                format!("{} is out of range 0..{MAX_REPLICAS}", w.replica),
            );
        }
        if let Some(days) = &w.days {
            if days.is_empty() {
                err(
                    format!("spec.schedulingConfig[{i}].days"),
                    "must name at least one day, or be omitted".into(),
                );
            }
            for (k, d) in days.iter().enumerate() {
                if days[..k].contains(d) {
                    err(
                        format!("spec.schedulingConfig[{i}].days[{k}]"),
                        format!("duplicate day {d}"),
                    );
                }
            }
        }
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{ContainerSpec, TimeOfDay, Window};

    fn spec(tz: &str, windows: Vec<Window>, default: i32) -> TDSetSpec {
        TDSetSpec {
            container: Some(ContainerSpec {
                image: "nginx".into(),
                port: 80,
            }),
            template: None,
            scale_target_ref: None,
            on_delete: None,
            service: None,
            scheduling_config: windows,
            default_replica: default,
            interval_mint: None,
            time_zone: Some(tz.into()),
        }
    }

    fn w(start: &str, end: &str, replica: i32) -> Window {
        Window {
            name: None,
            start_time: TimeOfDay::parse_hhmm(start).unwrap(),
            end_time: TimeOfDay::parse_hhmm(end).unwrap(),
            replica,
            days: None,
        }
    }

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn spring_forward_boundary_in_gap_takes_effect_when_gap_ends() {
        // New York 2026-03-08 02:00 EST -> 03:00 EDT; 02:30 does not exist.
        let s =
            Schedule::compile(&spec("America/New_York", vec![w("02:30", "05:00", 7)], 1)).unwrap();
        assert_eq!(s.evaluate(at("2026-03-08T06:59:59Z")).replicas, 1);
        assert_eq!(s.evaluate(at("2026-03-08T07:00:00Z")).replicas, 7);
        let next = s.next_transition(at("2026-03-08T05:00:00Z")).unwrap();
        assert_eq!(
            next,
            Transition {
                at: at("2026-03-08T07:00:00Z"),
                replicas: 7
            }
        );
    }

    #[test]
    fn fall_back_repeated_hour_is_active_twice() {
        // Berlin 2026-10-25 repeats 02:00-03:00 local (00:00Z-01:00Z CEST, 01:00Z-02:00Z CET).
        let s = Schedule::compile(&spec("Europe/Berlin", vec![w("02:00", "02:30", 4)], 1)).unwrap();
        let got = s.transitions(at("2026-10-24T23:00:00Z"), at("2026-10-25T03:00:00Z"));
        let want = [
            ("2026-10-25T00:00:00Z", 4),
            ("2026-10-25T00:30:00Z", 1),
            ("2026-10-25T01:00:00Z", 4),
            ("2026-10-25T01:30:00Z", 1),
        ];
        assert_eq!(
            got,
            want.map(|(t, r)| Transition {
                at: at(t),
                replicas: r
            })
            .to_vec()
        );
    }

    #[test]
    fn seed_manifest_hours() {
        let windows = vec![
            w("09:00", "17:00", 5),
            w("17:00", "19:00", 3),
            w("19:00", "00:00", 2),
            w("01:00", "07:00", 2),
            w("07:00", "09:00", 3),
        ];
        let s = Schedule::compile(&spec("UTC", windows, 3)).unwrap();
        assert_eq!(s.evaluate(at("2026-05-01T12:00:00Z")).replicas, 5);
        assert_eq!(s.evaluate(at("2026-05-01T23:59:59Z")).replicas, 2);
        assert_eq!(s.evaluate(at("2026-05-02T00:30:00Z")).replicas, 3); // gap 00:00-01:00: default
        assert_eq!(s.evaluate(at("2026-05-02T00:30:00Z")).window, None);
        let next = s.next_transition(at("2026-05-01T18:59:59Z")).unwrap();
        assert_eq!(
            next,
            Transition {
                at: at("2026-05-01T19:00:00Z"),
                replicas: 2
            }
        );
        // 19:00-00:00 (2) then 00:00-01:00 default (3).
        assert_eq!(
            s.next_transition(at("2026-05-01T19:00:00Z")).unwrap().at,
            at("2026-05-02T00:00:00Z")
        );
    }

    #[test]
    fn days_filter_by_start_day() {
        let mut win = w("22:00", "06:00", 9);
        win.days = Some(vec![Day::Fri]);
        let s = Schedule::compile(&spec("UTC", vec![win], 0)).unwrap();
        // 2026-11-20 is a Friday.
        assert_eq!(s.evaluate(at("2026-11-20T23:00:00Z")).replicas, 9);
        assert_eq!(s.evaluate(at("2026-11-21T05:59:00Z")).replicas, 9); // Saturday morning
        assert_eq!(s.evaluate(at("2026-11-21T23:00:00Z")).replicas, 0); // Saturday night
        assert_eq!(s.evaluate(at("2026-11-23T01:00:00Z")).replicas, 0); // Monday morning
        let next = s.next_transition(at("2026-11-21T06:00:00Z")).unwrap();
        assert_eq!(next.at, at("2026-11-27T22:00:00Z"));
    }

    #[test]
    fn never_changes() {
        let s = Schedule::compile(&spec("UTC", vec![], 2)).unwrap();
        assert_eq!(s.next_transition(at("2026-01-01T00:00:00Z")), None);
        let s = Schedule::compile(&spec(
            "UTC",
            vec![w("00:00", "12:00", 5), w("12:00", "00:00", 5)],
            3,
        ))
        .unwrap();
        assert_eq!(s.evaluate(at("2026-01-01T13:00:00Z")).replicas, 5);
        assert_eq!(s.next_transition(at("2026-01-01T00:00:00Z")), None);
    }

    #[test]
    fn overlap_is_a_warning_and_first_wins() {
        let s = Schedule::compile(&spec(
            "UTC",
            vec![w("09:00", "17:00", 5), w("16:00", "18:00", 2)],
            1,
        ))
        .unwrap();
        assert_eq!(s.evaluate(at("2026-01-01T16:30:00Z")).replicas, 5);
        let warnings = s.warnings();
        assert_eq!(warnings.len(), 1);
        assert!(
            warnings[0].to_string().contains("schedulingConfig[0]"),
            "{}",
            warnings[0]
        );
    }

    #[test]
    fn unknown_zone_is_a_spec_error_naming_the_field() {
        let err = Schedule::compile(&spec("Mars/Olympus_Mons", vec![], 1)).unwrap_err();
        assert_eq!(err[0].field, "spec.timeZone");
    }
}

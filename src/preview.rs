//! `tdset-operator preview`: what a TDSet manifest will do, computed by the same schedule
//! module the controller uses, from a file and never a cluster.

use std::fmt::Write as _;

use chrono::{DateTime, Duration, SecondsFormat, Utc};
use serde::Serialize;

use crate::api::{TDCalendar, TDSet};
use crate::error::{Error, Result};
use crate::schedule::{Count, OWN, Schedule, SharedHolidays, unreadable};

/// Reads one TDSet manifest (YAML or JSON) and checks it as the API server and the
/// controller would, reporting every problem with its field path.
pub fn load_manifest(path: &str) -> Result<(TDSet, Schedule)> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
        path: path.into(),
        source,
    })?;
    parse_manifest(path, &text)
}

pub fn parse_manifest(path: &str, text: &str) -> Result<(TDSet, Schedule)> {
    let tdset: TDSet = parse_object(path, text, "TDSet")?;
    let (schedule, _) = compile(path, &tdset, &[], &Default::default())?;
    Ok((tdset, schedule))
}

/// Reads one TDCalendar manifest (YAML or JSON), for `preview --calendar`.
pub fn load_calendar(path: &str) -> Result<TDCalendar> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
        path: path.into(),
        source,
    })?;
    parse_object(path, &text, "TDCalendar")
}

/// A calendar's iCalendar document as read for a preview: its dates, or why there are none.
pub type Document = std::result::Result<Vec<crate::api::Holiday>, String>;

/// Compiles a TDSet's schedule with the calendars it names among `calendars` (and the dates of
/// their iCalendar documents, by calendar, as `documents` has read them); returns the names it
/// gives that are not among them (their dates do not apply, as in the controller).
pub fn compile(
    path: &str,
    tdset: &TDSet,
    calendars: &[TDCalendar],
    documents: &std::collections::HashMap<String, Document>,
) -> Result<(Schedule, Vec<String>)> {
    let mut found = Vec::new();
    let mut missing = Vec::new();
    for name in &tdset.spec.calendars {
        let calendar = calendars
            .iter()
            .find(|c| c.metadata.name.as_deref() == Some(name.0.as_str()));
        let Some(c) = calendar else {
            missing.push(name.0.clone());
            continue;
        };
        // As in the controller: a calendar whose dates cannot be read is left out.
        let mut bad = unreadable(&c.spec.holidays);
        let document = match (&c.spec.ics, documents.get(&name.0)) {
            (None, _) => None,
            (Some(_), Some(Ok(dates))) => Some(dates),
            (Some(_), Some(Err(why))) => {
                bad.push(why.clone());
                None
            }
            (Some(_), None) => {
                bad.push(
                    "its iCalendar document is in a ConfigMap, which a preview of a file does \
                     not read (`kubectl tdset preview NAME` does)"
                        .into(),
                );
                None
            }
        };
        if bad.is_empty() {
            found.push(SharedHolidays {
                calendar: &name.0,
                holidays: &c.spec.holidays,
            });
            if let Some(dates) = document {
                found.push(SharedHolidays {
                    calendar: &name.0,
                    holidays: dates,
                });
            }
        } else {
            missing.push(format!(
                "{} (dates it cannot read: {})",
                name.0,
                bad.join("; ")
            ));
        }
    }
    let schedule =
        Schedule::compile_with(&tdset.spec, &found).map_err(|errors| Error::Manifest {
            path: path.into(),
            message: errors
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("\n  "),
        })?;
    Ok((schedule, missing))
}

/// What preview says of calendars a TDSet names that it was not given.
pub fn missing_calendars_note(missing: &[String], how: &str) -> Option<String> {
    (!missing.is_empty()).then(|| {
        format!(
            "note: TDCalendar {} not {how}; its dates are not applied here\n",
            missing.join(", ")
        )
    })
}

/// A `schedule.rs/v1` object of `kind`, with decode errors carrying the field path.
fn parse_object<T: serde::de::DeserializeOwned>(path: &str, text: &str, kind: &str) -> Result<T> {
    let manifest_err = |message: String| Error::Manifest {
        path: path.into(),
        message,
    };
    // Through a generic value first so decode errors can carry the field path.
    let value: serde_json::Value = serde_saphyr::from_str(text)
        .map_err(|e| manifest_err(format!("not valid YAML or JSON: {e}")))?;
    let field = |f: &str| {
        value
            .get(f)
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .to_string()
    };
    let (api_version, found) = (field("apiVersion"), field("kind"));
    if api_version != "schedule.rs/v1" || found != kind {
        return Err(manifest_err(format!(
            "expected apiVersion: schedule.rs/v1 and kind: {kind}, found apiVersion: {api_version:?} kind: {found:?}"
        )));
    }
    serde_path_to_error::deserialize(value).map_err(|e| {
        let field = e.path().to_string();
        manifest_err(format!("{field}: {}", e.into_inner()))
    })
}

pub fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

fn is_false(b: &bool) -> bool {
    !b
}

#[derive(Serialize, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PointPreview {
    pub at: String,
    pub time_zone: String,
    /// The count the operator sets (`R(t)`); null for the level `own` (group form).
    pub desired_replicas: Option<i32>,
    /// True when the level is `own`: each workload of the group runs its own count.
    #[serde(skip_serializing_if = "is_false")]
    pub own: bool,
    /// The level the schedule asks for (`L(t)`); differs from `desiredReplicas` mid-ramp.
    pub level: Option<i32>,
    /// HPA form: the HPA's `maxReplicas` the schedule sets now (`maxReplica`); absent: the
    /// HPA's own.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_replicas: Option<i32>,
    pub active_window: Option<String>,
    pub active_override: Option<String>,
    pub holiday: bool,
    /// Why the count is what it is.
    pub reason: String,
    pub next_transition_time: Option<String>,
    pub next_replicas: Option<i32>,
    /// The ceiling from the next transition on (see `maxReplicas`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_max_replicas: Option<i32>,
    /// When the next transition's write starts, when that is before it: a scale-up written
    /// ahead (`spec.warmUp`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_write_time: Option<String>,
    /// True when the next transition is to the level `own`.
    #[serde(skip_serializing_if = "is_false")]
    pub next_own: bool,
    /// `spec.suspend`: the schedule is shown, but the operator writes nothing meanwhile.
    pub suspended: bool,
}

/// What the operator writes at `at`, with scale-ups `lead` ahead (`spec.warmUp`), as the
/// controller computes it.
pub fn at(schedule: &Schedule, at: DateTime<Utc>, suspended: bool, lead: Duration) -> PointPreview {
    let eval = schedule.evaluate_led(at, lead);
    let next = schedule.next_transition(at);
    let next_write = schedule
        .next_led_write(at, lead)
        .filter(|w| next.is_some_and(|n| *w < n.at));
    PointPreview {
        at: rfc3339(at),
        time_zone: schedule.time_zone().name().to_string(),
        desired_replicas: eval.count().replicas(),
        own: eval.count() == Count::Own,
        level: Count::of(eval.level).replicas(),
        max_replicas: eval.ceiling,
        reason: eval.why(),
        active_window: eval.window_label,
        active_override: eval.override_label,
        holiday: eval.holiday,
        next_transition_time: next.map(|n| rfc3339(n.at)),
        next_replicas: next.and_then(|n| n.count().replicas()),
        next_max_replicas: next.and_then(|n| n.ceiling),
        next_write_time: next_write.map(rfc3339),
        next_own: next.is_some_and(|n| n.count() == Count::Own),
        suspended,
    }
}

#[derive(Serialize, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RangePreview {
    pub from: String,
    pub to: String,
    pub time_zone: String,
    pub initial_replicas: Option<i32>,
    /// HPA form: the ceiling at `from`, when the schedule sets one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub initial_max_replicas: Option<i32>,
    #[serde(skip_serializing_if = "is_false")]
    pub initial_own: bool,
    pub initial_window: Option<String>,
    pub initial_reason: String,
    pub transitions: Vec<TransitionOut>,
}

#[derive(Serialize, Debug, PartialEq)]
pub struct TransitionOut {
    pub at: String,
    /// Null for the level `own`.
    pub replicas: Option<i32>,
    /// HPA form: `maxReplicas` from then on, when the schedule sets it.
    #[serde(rename = "maxReplicas", skip_serializing_if = "Option::is_none")]
    pub max_replicas: Option<i32>,
    #[serde(skip_serializing_if = "is_false")]
    pub own: bool,
    pub window: Option<String>,
    /// Why: a window, a holiday, an override, or a ramp step.
    pub reason: String,
    /// When its write starts, when that is before `at`: a scale-up written ahead
    /// (`spec.warmUp`).
    #[serde(rename = "writeAt", skip_serializing_if = "Option::is_none")]
    pub write_at: Option<String>,
}

/// The transitions in `(from, to]`, each with when its write starts (scale-ups `lead` ahead,
/// `spec.warmUp`), as the controller writes them.
pub fn range(
    schedule: &Schedule,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    lead: Duration,
) -> RangePreview {
    let initial = schedule.evaluate_led(from, lead);
    RangePreview {
        from: rfc3339(from),
        to: rfc3339(to),
        time_zone: schedule.time_zone().name().to_string(),
        initial_replicas: initial.count().replicas(),
        initial_max_replicas: initial.ceiling,
        initial_own: initial.count() == Count::Own,
        initial_reason: initial.why(),
        initial_window: initial.window_label,
        transitions: schedule
            .led_transitions(from, to, lead)
            .into_iter()
            .map(|l| {
                let t = l.transition;
                let eval = schedule.evaluate(t.at);
                TransitionOut {
                    at: rfc3339(t.at),
                    replicas: t.count().replicas(),
                    max_replicas: t.ceiling,
                    own: t.count() == Count::Own,
                    reason: eval.why(),
                    window: eval.window_label,
                    write_at: (l.write_at < t.at).then(|| rfc3339(l.write_at)),
                }
            })
            .collect(),
    }
}

fn local(schedule: &Schedule, t: DateTime<Utc>) -> String {
    t.with_timezone(&schedule.time_zone())
        .format("%a %Y-%m-%d %H:%M:%S %Z")
        .to_string()
}

pub fn point_table(schedule: &Schedule, p: &PointPreview, at: DateTime<Utc>) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "at:        {} ({})", p.at, local(schedule, at));
    let _ = writeln!(s, "replicas:  {}", shown(p.desired_replicas));
    if let Some(max) = p.max_replicas {
        let _ = writeln!(s, "ceiling:   {max} (the HPA's maxReplicas)");
    }
    let _ = writeln!(s, "why:       {}", p.reason);
    if p.suspended {
        let _ = writeln!(
            s,
            "suspended: spec.suspend is true; the operator writes nothing meanwhile"
        );
    }
    match schedule.next_transition(at) {
        Some(n) => {
            let _ = writeln!(
                s,
                "next:      {} ({}) -> {}",
                p.next_transition_time.as_deref().unwrap_or(""),
                local(schedule, n.at),
                match n.count() {
                    Count::Replicas(r) => format!("{r} replicas"),
                    Count::Own => "own (each workload's own count)".into(),
                }
            );
            if let Some(w) = p.next_write_time.as_deref().and_then(parse_rfc3339) {
                let _ = writeln!(
                    s,
                    "written:   {} ({}), {} ahead, to be ready by then (warmUp)",
                    rfc3339(w),
                    local(schedule, w),
                    ahead(n.at - w)
                );
            }
        }
        None => {
            let _ = writeln!(s, "next:      never (the replica count does not change)");
        }
    }
    s
}

/// A count, or "own".
fn shown(replicas: Option<i32>) -> String {
    replicas.map_or_else(|| "own".into(), |r| r.to_string())
}

pub fn range_table(schedule: &Schedule, r: &RangePreview) -> String {
    // A MAX column (an HPA's ceiling) only where the schedule sets one.
    let ceilings =
        r.initial_max_replicas.is_some() || r.transitions.iter().any(|t| t.max_replicas.is_some());
    let row = |s: &mut String, at: &str, replicas: Option<i32>, max: Option<i32>, reason: &str| {
        let replicas = shown(replicas);
        let local = parse_rfc3339(at)
            .map(|t| local(schedule, t))
            .unwrap_or_default();
        let max = match (ceilings, max) {
            (false, _) => String::new(),
            (true, Some(m)) => format!(" {m:>5}"),
            (true, None) => format!(" {:>5}", "own"),
        };
        let _ = writeln!(s, "{at:<22} {local:<34} {replicas:>8}{max}  {reason}");
    };
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<22} {:<34} {:>8}{}  WHY",
        "AT (UTC)",
        format!("LOCAL ({})", r.time_zone),
        "REPLICAS",
        if ceilings { "   MAX" } else { "" }
    );
    row(
        &mut s,
        &r.from,
        r.initial_replicas,
        r.initial_max_replicas,
        &r.initial_reason,
    );
    for t in &r.transitions {
        let reason = match t.write_at.as_deref().and_then(parse_rfc3339) {
            Some(w) => format!(
                "{} (written from {}, {} ahead: warmUp)",
                t.reason,
                local(schedule, w),
                parse_rfc3339(&t.at).map_or_else(String::new, |at| ahead(at - w))
            ),
            None => t.reason.clone(),
        };
        row(&mut s, &t.at, t.replicas, t.max_replicas, &reason);
    }
    s
}

/// A lead as people write it: "2m", "1m30s", "45s".
fn ahead(d: Duration) -> String {
    let secs = d.num_seconds().max(0);
    let (m, s) = (secs / 60, secs % 60);
    match (m, s) {
        (0, s) => format!("{s}s"),
        (m, 0) => format!("{m}m"),
        (m, s) => format!("{m}m{s}s"),
    }
}

pub fn parse_rfc3339(s: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(s)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

/// A step chart of replicas over `[from, to)`: one column per equal slice of time, each
/// showing the highest count in its slice, so a short window is never hidden.
pub fn chart(schedule: &Schedule, from: DateTime<Utc>, to: DateTime<Utc>, width: usize) -> String {
    let width = width.clamp(10, 400);
    let span = (to - from).max(Duration::seconds(1));
    let slice = span / width as i32;
    let transitions = schedule.transitions(from, to);
    let mut columns = Vec::with_capacity(width);
    for c in 0..width {
        let start = from + slice * c as i32;
        let end = start + slice;
        // `own` (OWN, below every count) shows as its own shade over the full height.
        let mut peak = schedule.evaluate(start).replicas;
        for t in transitions.iter().filter(|t| t.at > start && t.at < end) {
            peak = peak.max(t.replicas);
        }
        columns.push(peak);
    }
    let has_own = columns.contains(&OWN);
    let max = columns.iter().copied().max().unwrap_or(0).max(1);
    let height = (max as usize).min(12);
    let label_w = max.to_string().len();
    let mut s = String::new();
    let _ = writeln!(
        s,
        "replicas over {} .. {} ({})",
        local(schedule, from),
        local(schedule, to),
        schedule.time_zone().name()
    );
    for row in (1..=height).rev() {
        // Row `row` is filled when the column reaches this share of the maximum.
        let threshold = (row as f64 / height as f64) * max as f64;
        let label = if row == height || row == 1 || row == height.div_ceil(2) {
            format!("{:>label_w$}", threshold.round() as i64)
        } else {
            " ".repeat(label_w)
        };
        let bar: String = columns
            .iter()
            .map(|&v| {
                if v == OWN {
                    '░'
                } else if v as f64 >= threshold - 1e-9 && v > 0 {
                    '█'
                } else {
                    ' '
                }
            })
            .collect();
        let _ = writeln!(s, "{label} ┤{bar}");
    }
    let _ = writeln!(
        s,
        "{} └{}",
        " ".repeat(label_w.saturating_sub(1)).to_string() + "0",
        "─".repeat(width)
    );
    // Time ticks: about every 12 columns, in the schedule's zone.
    let mut ticks = vec![' '; width + 1];
    let mut labels = String::new();
    let fmt = if span > Duration::days(2) {
        "%a %H:%M"
    } else {
        "%H:%M"
    };
    let step = if span > Duration::days(2) {
        width / 7
    } else {
        12
    }
    .max(1);
    let mut c = 0;
    while c < width {
        ticks[c] = '^';
        let t = (from + slice * c as i32)
            .with_timezone(&schedule.time_zone())
            .format(fmt)
            .to_string();
        while labels.chars().count() < c {
            labels.push(' ');
        }
        if labels.chars().count() == c {
            labels.push_str(&t);
        }
        c += step;
    }
    let pad = " ".repeat(label_w + 2);
    let _ = writeln!(s, "{pad}{}", ticks.iter().collect::<String>().trim_end());
    let _ = writeln!(s, "{pad}{labels}");
    let _ = writeln!(
        s,
        "{} change(s) in range; each column is {} min",
        transitions.len(),
        slice.num_minutes().max(1)
    );
    if has_own {
        let _ = writeln!(s, "░ own: each workload runs its own count");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEED: &str = include_str!("../examples/tdset_helloworld.yaml");

    #[test]
    fn seed_manifest_parses_and_previews() {
        let (_, s) = parse_manifest("seed", SEED).unwrap();
        let p = at(
            &s,
            parse_rfc3339("2026-05-01T12:00:00Z").unwrap(),
            false,
            Duration::zero(),
        );
        assert_eq!(p.desired_replicas, Some(5));
        assert_eq!(p.active_window.as_deref(), Some("09:00-17:00"));
        assert_eq!(
            p.next_transition_time.as_deref(),
            Some("2026-05-01T17:00:00Z")
        );
        assert_eq!(p.next_replicas, Some(3));
    }

    #[test]
    fn bad_field_is_named() {
        let bad = SEED.replace("startTime: 9 ", "startTime: 25 ");
        let err = parse_manifest("bad.yaml", &bad).unwrap_err().to_string();
        assert!(err.contains("spec.schedulingConfig[0].startTime"), "{err}");
        let bad = SEED.replace("endTime: 17", "endTime: 9");
        let err = parse_manifest("bad.yaml", &bad).unwrap_err().to_string();
        assert!(err.contains("spec.schedulingConfig[0].endTime"), "{err}");
    }

    #[test]
    fn the_range_table_has_a_max_column_only_where_the_schedule_sets_ceilings() {
        let hpa = r#"
apiVersion: schedule.rs/v1
kind: TDSet
metadata: {name: web}
spec:
  scaleTargetRef: {apiVersion: autoscaling/v2, kind: HorizontalPodAutoscaler, name: web}
  defaultReplica: 2
  schedulingConfig:
  - {name: day, startTime: "08:00", endTime: "18:00", replica: 10, maxReplica: 50}
  - {name: evening, startTime: "18:00", endTime: "22:00", replica: 10, maxReplica: 20}
"#;
        let (_, s) = parse_manifest("hpa", hpa).unwrap();
        let from = parse_rfc3339("2026-05-01T07:00:00Z").unwrap();
        let r = range(&s, from, from + Duration::hours(16), Duration::zero());
        let table = range_table(&s, &r);
        assert!(
            table.lines().next().unwrap().contains("REPLICAS   MAX"),
            "{table}"
        );
        // The night: the HPA's own; the evening changes the ceiling alone.
        assert!(table.lines().nth(1).unwrap().contains("  own  "), "{table}");
        let evening = table.lines().find(|l| l.contains("18:00:00Z")).unwrap();
        assert!(evening.contains("      10    20  "), "{table}");
        let (_, plain) = parse_manifest("seed", SEED).unwrap();
        let r = range(&plain, from, from + Duration::hours(16), Duration::zero());
        assert!(!range_table(&plain, &r).contains("MAX"));
    }

    #[test]
    fn chart_shows_peak() {
        let (_, s) = parse_manifest("seed", SEED).unwrap();
        let from = parse_rfc3339("2026-05-01T00:00:00Z").unwrap();
        let c = chart(&s, from, from + Duration::days(1), 96);
        assert!(c.lines().any(|l| l.starts_with("5 ┤")), "{c}");
    }
}

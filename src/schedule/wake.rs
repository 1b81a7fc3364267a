//! A wake-up by a request (`spec.wakeOnRequest`) as the schedule sees it: while the spec has
//! the workloads asleep (level 0, no override), a request wake-up in force gives them the
//! count they wake to. It ranks below overrides (someone decided that span) and below any
//! window or default that has them awake already; when it ends the schedule applies again.
//!
//! Pure: the wake-up's span comes from `status.requestWake` (written when the proxy reported
//! a request), bounded here by the spec's `wakeFor`, so a shorter `wakeFor` takes effect at
//! once and no status, however written, keeps a TDSet awake past what its spec allows.

use chrono::{DateTime, Duration, Utc};

use super::{OWN, Schedule, SpecError};
use crate::api::{
    DEFAULT_HOLD, DEFAULT_WAKE_FOR, MAX_IGNORE, MAX_WAKE_SERVICES, RequestWakeStatus, TDSetSpec,
    WakeIgnore, WakeOnRequest, WakeRequest,
};

/// The most level changes `awake_level` looks through for a count above 0.
const MAX_LOOKED: usize = 64;

/// A request wake-up compiled into a schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Woken {
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
    /// The level it wakes to: `OWN` in the group form, else a count above 0.
    pub replicas: i32,
}

impl Woken {
    pub fn covers(&self, at: DateTime<Utc>) -> bool {
        self.start <= at && at < self.end
    }
}

/// `wakeFor`, or its default (the schema bounds it; an unreadable one is the default).
pub fn wake_for(w: &WakeOnRequest) -> Duration {
    w.wake_for
        .as_deref()
        .and_then(super::parse_duration)
        .unwrap_or(DEFAULT_WAKE_FOR)
}

/// `hold`, or its default.
pub fn hold(w: &WakeOnRequest) -> Duration {
    w.hold
        .as_deref()
        .and_then(super::parse_duration)
        .unwrap_or(DEFAULT_HOLD)
}

/// The span of the request wake-up `status` records, while it is in force at `now`: none
/// without `spec.wakeOnRequest` or once it has ended.
pub fn span(
    spec: &TDSetSpec,
    status: Option<&RequestWakeStatus>,
    now: DateTime<Utc>,
) -> Option<(DateTime<Utc>, DateTime<Utc>)> {
    recorded(spec, status, now).filter(|(_, until)| now < *until)
}

/// The span `status` records, ended or not, as far as the spec allows it: it ends at most
/// `wakeFor` after its last extension (`extendedAt`, else its start), so a shorter `wakeFor`
/// takes effect at once and no status, however written, keeps a TDSet awake longer.
fn recorded(
    spec: &TDSetSpec,
    status: Option<&RequestWakeStatus>,
    now: DateTime<Utc>,
) -> Option<(DateTime<Utc>, DateTime<Utc>)> {
    let w = spec.wake_on_request.as_ref()?;
    let status = status?;
    let parse = |s: &Option<String>| {
        s.as_deref()
            .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
            .map(|t| t.with_timezone(&Utc))
    };
    let since = parse(&status.since)?.min(now);
    let extended = parse(&status.extended_at)
        .unwrap_or(since)
        .clamp(since, now);
    let until = parse(&status.until)?.min(extended + wake_for(w));
    (since < until).then_some((since, until))
}

/// The most memory one compiled user agent pattern may take: a tenant's pattern has a
/// bounded cost in the operator and in the proxy.
const PATTERN_SIZE_LIMIT: usize = 256 * 1024;

/// Which requests wake nothing (`wakeOnRequest.ignore`), compiled.
#[derive(Clone, Debug, Default)]
pub struct Ignore {
    user_agents: Option<regex::bytes::RegexSet>,
    paths: Vec<String>,
}

impl Ignore {
    /// Compiles `ignore` as the API server reads it (RE2: `\w` and `\b` are ASCII), with
    /// what it leaves out: a pattern this engine refuses (RE2 and it differ at the edges, e.g.
    /// `\Q...\E`) or one past the size limit is left out, and named, so that it can be
    /// reported, never allowed to stop anything else.
    pub fn compile(ignore: Option<&WakeIgnore>) -> (Ignore, Vec<SpecError>) {
        let Some(ignore) = ignore else {
            return (Ignore::default(), Vec::new());
        };
        let mut left_out = Vec::new();
        let usable: Vec<&String> = (ignore.user_agents.iter().enumerate())
            .filter_map(|(i, p)| match pattern(p) {
                Ok(_) => Some(p),
                Err(e) => {
                    left_out.push(SpecError {
                        field: format!("spec.wakeOnRequest.ignore.userAgents[{i}]"),
                        message: format!("left out: not a pattern the wake proxy can use: {e}"),
                    });
                    None
                }
            })
            .collect();
        let user_agents = (!usable.is_empty())
            .then(|| {
                regex::bytes::RegexSetBuilder::new(usable)
                    .unicode(false)
                    .size_limit(PATTERN_SIZE_LIMIT * MAX_IGNORE)
                    .build()
                    .ok()
            })
            .flatten();
        let ignore = Ignore {
            user_agents,
            paths: ignore.paths.clone(),
        };
        (ignore, left_out)
    }

    /// Whether a request with this path (its query left out) and user agent wakes nothing.
    pub fn ignores(&self, path: Option<&str>, user_agent: Option<&str>) -> bool {
        let path = path.map(|p| p.split(['?', '#']).next().unwrap_or(p));
        let by_path = path.is_some_and(|p| {
            self.paths.iter().any(|i| match i.strip_suffix('*') {
                Some(prefix) => p.starts_with(prefix),
                None => p == i,
            })
        });
        let by_agent = match (&self.user_agents, user_agent) {
            (Some(set), Some(ua)) => set.is_match(ua.as_bytes()),
            _ => false,
        };
        by_path || by_agent
    }
}

fn pattern(p: &str) -> Result<regex::bytes::Regex, regex::Error> {
    regex::bytes::RegexBuilder::new(p)
        .unicode(false)
        .size_limit(PATTERN_SIZE_LIMIT)
        .build()
}

/// What the schema checks of `spec.wakeOnRequest`, for specs that never passed an API
/// server. Patterns are not compiled here: one this engine refuses never stops a schedule
/// (see `Ignore::compile`).
pub(super) fn check(spec: &TDSetSpec, errors: &mut Vec<SpecError>) {
    let Some(w) = &spec.wake_on_request else {
        return;
    };
    let mut err = |field: String, message: String| errors.push(SpecError { field, message });
    if w.services.is_empty() || w.services.len() > MAX_WAKE_SERVICES {
        err(
            "spec.wakeOnRequest.services".into(),
            format!("names 1 to {MAX_WAKE_SERVICES} Services"),
        );
    }
    let dns_label = |s: &str| {
        !s.is_empty()
            && s.len() <= 63
            && s.starts_with(|c: char| c.is_ascii_lowercase())
            && !s.ends_with('-')
            && s.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    };
    for (i, s) in w.services.iter().enumerate() {
        if !dns_label(&s.name) {
            err(
                format!("spec.wakeOnRequest.services[{i}].name"),
                format!("{:?} is not a Service name (a DNS label)", s.name),
            );
        }
        if w.services[..i].iter().any(|o| o.name == s.name) {
            err(
                format!("spec.wakeOnRequest.services[{i}]"),
                format!("Service {} is named twice", s.name),
            );
        }
    }
    let within = |d: &Option<String>, lo: Duration, hi: Duration| {
        d.as_deref()
            .is_none_or(|d| super::parse_duration(d).is_some_and(|d| d >= lo && d <= hi))
    };
    if !within(&w.wake_for, Duration::minutes(1), Duration::hours(24)) {
        err(
            "spec.wakeOnRequest.wakeFor".into(),
            "must be a duration from 1m to 24h".into(),
        );
    }
    if !within(&w.hold, Duration::seconds(1), Duration::seconds(60)) {
        err(
            "spec.wakeOnRequest.hold".into(),
            "must be a duration from 1s to 60s".into(),
        );
    }
    if let Some(ignore) = &w.ignore {
        for (i, p) in ignore.paths.iter().enumerate() {
            if !p.starts_with('/') {
                err(
                    format!("spec.wakeOnRequest.ignore.paths[{i}]"),
                    "must start with /".into(),
                );
            }
        }
    }
    if spec.ramp.is_some() && spec.scale_target_selector.is_some() {
        errors.push(SpecError {
            field: "spec.wakeOnRequest".into(),
            message: "a group woken by a request runs each workload at its own count, which a \
                      ramp cannot step toward: remove spec.ramp or spec.wakeOnRequest"
                .into(),
        });
    }
}

/// How close to its full length a wake-up in force may be and still not be written again:
/// a steady stream of requests extends it about once a minute, not once per request.
pub fn refresh_slack(w: &WakeOnRequest) -> Duration {
    (wake_for(w) / 10).min(Duration::minutes(1))
}

/// What the wake endpoint records for a request to a Service of this TDSet at `now`
/// (`reported`: the requests the proxy counted since its last report, this one included):
/// a wake-up from now for `wakeFor`, or the one in force extended. `None`: nothing to write
/// (no `spec.wakeOnRequest`, or the wake-up in force already reaches within `refresh_slack`
/// of where this request would take it).
pub fn extend(
    spec: &TDSetSpec,
    recorded: Option<&RequestWakeStatus>,
    now: DateTime<Utc>,
    request: &WakeRequest,
    reported: i64,
) -> Option<RequestWakeStatus> {
    let w = spec.wake_on_request.as_ref()?;
    let until = now + wake_for(w);
    let in_force = span(spec, recorded, now).and(recorded);
    if let Some(r) = in_force
        && let Some((_, current)) = span(spec, Some(r), now)
        && current + refresh_slack(w) >= until
    {
        return None;
    }
    let rfc3339 = |t: DateTime<Utc>| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    Some(match in_force {
        Some(r) => RequestWakeStatus {
            phase: None,
            since: r.since.clone().or_else(|| Some(rfc3339(now))),
            extended_at: Some(rfc3339(now)),
            until: Some(rfc3339(until)),
            request: r.request.clone().or_else(|| Some(request.clone())),
            requests: Some(r.requests.unwrap_or(0).saturating_add(reported.max(0))),
        },
        None => RequestWakeStatus {
            phase: None,
            since: Some(rfc3339(now)),
            extended_at: Some(rfc3339(now)),
            until: Some(rfc3339(until)),
            request: Some(request.clone()),
            requests: Some(reported.max(0)),
        },
    })
}

/// `schedule` with the request wake-up `status` records at `now`, if the spec allows it (the
/// controller and `kubectl tdset preview NAME` both read a live TDSet through this).
pub fn woken(
    schedule: Schedule,
    spec: &TDSetSpec,
    status: Option<&RequestWakeStatus>,
    now: DateTime<Utc>,
) -> Schedule {
    // An ended wake-up stays in the schedule while a ramp down from it may still be stepping.
    match recorded(spec, status, now).filter(|(_, until)| now < *until + schedule.reach) {
        Some((since, until)) => {
            let level = schedule.awake_level(spec.scale_target_selector.is_some(), now);
            schedule.with_request_wake(since, until, level)
        }
        None => schedule,
    }
}

impl Schedule {
    /// This schedule with a request wake-up from `start` to `end` (exclusive) waking to
    /// `replicas` wherever the spec has the workloads asleep.
    pub fn with_request_wake(
        mut self,
        start: DateTime<Utc>,
        end: DateTime<Utc>,
        replicas: i32,
    ) -> Schedule {
        if start >= end {
            return self;
        }
        self.woken = Some(Woken {
            start,
            end,
            replicas,
        });
        // The look-ahead reaches a day past the wake-up, as it does past an override.
        let past = end + Duration::days(1) + self.reach;
        self.lookahead_until = Some(self.lookahead_until.map_or(past, |u| u.max(past)));
        self
    }

    /// The level a request wakes the workloads to at `now`: in the group form each its own
    /// count; otherwise the next count above 0 the schedule gives (the count they will be
    /// woken to anyway), else the highest count it ever gives, else 1.
    pub fn awake_level(&self, group: bool, now: DateTime<Utc>) -> i32 {
        if group {
            return OWN;
        }
        let mut t = now;
        for _ in 0..MAX_LOOKED {
            let Some(change) = self.next_level_change(t) else {
                break;
            };
            if change.after > 0 {
                return change.after;
            }
            t = change.at;
        }
        self.windows
            .iter()
            .map(|w| w.replicas)
            .chain(self.overrides.iter().map(|o| o.replicas))
            .chain([self.default_replicas])
            .max()
            .filter(|&n| n > 0)
            .unwrap_or(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{TDSetSpec, WakeIgnore, WakeService};
    use crate::schedule::Count;

    fn t(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    /// Asleep by default, 3 replicas 09:00-17:00 and 5 from 17:00 to 18:00, UTC.
    fn spec() -> TDSetSpec {
        serde_json::from_value(serde_json::json!({
            "container": {"image": "nginx", "port": 80},
            "defaultReplica": 0,
            "schedulingConfig": [
                {"startTime": "09:00", "endTime": "17:00", "replica": 3},
                {"startTime": "17:00", "endTime": "18:00", "replica": 5},
                {"startTime": "20:00", "endTime": "21:00", "replica": 0, "name": "quiet"}
            ],
            "wakeOnRequest": {"services": [{"name": "web"}], "wakeFor": "30m"}
        }))
        .unwrap()
    }

    fn woken_at(spec: &TDSetSpec, since: &str, until: &str, now: DateTime<Utc>) -> Schedule {
        let status = RequestWakeStatus {
            since: Some(since.into()),
            until: Some(until.into()),
            ..Default::default()
        };
        woken(Schedule::compile(spec).unwrap(), spec, Some(&status), now)
    }

    #[test]
    fn a_request_at_night_wakes_to_the_next_days_count_until_it_ends() {
        let spec = spec();
        let now = t("2026-05-01T22:00:00Z");
        let s = woken_at(&spec, "2026-05-01T22:00:00Z", "2026-05-01T22:30:00Z", now);
        let e = s.evaluate(now);
        assert_eq!(e.count(), Count::Replicas(3));
        assert_eq!(e.woken_until, Some(t("2026-05-01T22:30:00Z")));
        assert!(
            e.why()
                .contains("woken by a request until 2026-05-01T22:30:00Z")
        );
        let next = s.next_transition(now).unwrap();
        assert_eq!((next.at, next.replicas), (t("2026-05-01T22:30:00Z"), 0));
        assert_eq!(
            s.evaluate(t("2026-05-01T22:30:00Z")).count(),
            Count::Replicas(0)
        );
    }

    #[test]
    fn a_window_with_a_count_wins_and_the_wake_up_resumes_after_it_if_still_in_force() {
        let spec = spec();
        let now = t("2026-05-01T08:50:00Z");
        let s = woken_at(&spec, "2026-05-01T08:50:00Z", "2026-05-01T09:20:00Z", now);
        assert_eq!(s.evaluate(now).count(), Count::Replicas(3));
        let at_nine = s.evaluate(t("2026-05-01T09:00:00Z"));
        assert_eq!(at_nine.window_label.as_deref(), Some("09:00-17:00"));
        assert_eq!(at_nine.woken_until, None, "the window, not the request");
    }

    /// A holiday is asleep like any other hour outside the windows: a request wakes it, to the
    /// count of the next window that starts (the working day after), and only for `wakeFor`.
    #[test]
    fn on_a_holiday_a_request_wakes_it_to_the_next_working_days_count() {
        let mut spec: TDSetSpec = serde_json::from_value(serde_json::json!({
            "container": {"image": "nginx", "port": 80},
            "defaultReplica": 0,
            "timeZone": "Europe/Berlin",
            "holidays": ["2026-12-25"],
            "schedulingConfig": [{"startTime": "09:00", "endTime": "17:00", "replica": 4,
                                  "days": ["Mon", "Tue", "Wed", "Thu", "Fri"]}],
            "wakeOnRequest": {"services": [{"name": "web"}], "wakeFor": "30m"}
        }))
        .unwrap();
        // Friday 25 December, 11:00 in Berlin: a weekday, but a holiday.
        let now = t("2026-12-25T10:00:00Z");
        let asleep = Schedule::compile(&spec).unwrap();
        assert_eq!(asleep.evaluate(now).count(), Count::Replicas(0));
        let s = woken_at(&spec, "2026-12-25T10:00:00Z", "2026-12-25T10:30:00Z", now);
        let e = s.evaluate(now);
        assert_eq!(e.count(), Count::Replicas(4));
        assert_eq!(e.woken_until, Some(t("2026-12-25T10:30:00Z")));
        let next = s.next_transition(now).unwrap();
        assert_eq!((next.at, next.replicas), (t("2026-12-25T10:30:00Z"), 0));
        // Without the holiday, the window is in force and the request changes nothing.
        spec.holidays = Default::default();
        let s = woken_at(&spec, "2026-12-25T10:00:00Z", "2026-12-25T10:30:00Z", now);
        assert_eq!(s.evaluate(now).woken_until, None);
    }

    #[test]
    fn a_window_at_zero_is_asleep_and_a_request_wakes_it() {
        let spec = spec();
        let now = t("2026-05-01T20:10:00Z");
        let s = woken_at(&spec, "2026-05-01T20:10:00Z", "2026-05-01T20:40:00Z", now);
        assert_eq!(s.evaluate(now).count(), Count::Replicas(3));
    }

    #[test]
    fn an_override_at_zero_is_not_woken() {
        let mut spec = spec();
        spec.overrides = vec![
            serde_json::from_value(serde_json::json!({
                "start": "2026-05-01T21:00:00Z", "end": "2026-05-02T06:00:00Z", "replica": 0,
                "reason": "maintenance"
            }))
            .unwrap(),
        ];
        let now = t("2026-05-01T22:00:00Z");
        let s = woken_at(&spec, "2026-05-01T22:00:00Z", "2026-05-01T22:30:00Z", now);
        assert_eq!(s.evaluate(now).count(), Count::Replicas(0));
    }

    #[test]
    fn the_spec_bounds_the_wake_up() {
        let mut spec = spec();
        let now = t("2026-05-01T22:00:00Z");
        let far = RequestWakeStatus {
            since: Some("2026-05-01T22:00:00Z".into()),
            until: Some("2026-05-09T00:00:00Z".into()),
            ..Default::default()
        };
        assert_eq!(
            span(&spec, Some(&far), now),
            Some((now, t("2026-05-01T22:30:00Z"))),
            "never past wakeFor from its start, without an extension"
        );
        let over = RequestWakeStatus {
            until: Some("2026-05-01T21:59:00Z".into()),
            ..Default::default()
        };
        assert_eq!(span(&spec, Some(&over), now), None, "ended");
        spec.wake_on_request = None;
        assert_eq!(span(&spec, Some(&far), now), None, "wakeOnRequest removed");
    }

    #[test]
    fn a_request_starts_a_wake_up_and_a_stream_of_them_extends_it_about_once_a_minute() {
        let spec = spec();
        let req = WakeRequest {
            service: "web:http".into(),
            method: Some("GET".into()),
            path: Some("/".into()),
            ..Default::default()
        };
        let now = t("2026-05-01T22:00:00Z");
        let first = extend(&spec, None, now, &req, 1).unwrap();
        assert_eq!(first.since.as_deref(), Some("2026-05-01T22:00:00Z"));
        assert_eq!(first.until.as_deref(), Some("2026-05-01T22:30:00Z"));
        assert_eq!(first.requests, Some(1));
        // 30 s later: within a minute of its full length, nothing to write.
        assert_eq!(
            extend(&spec, Some(&first), now + Duration::seconds(30), &req, 5),
            None
        );
        // 2 min later: extended, since and the first request kept, requests added.
        let second = extend(&spec, Some(&first), now + Duration::minutes(2), &req, 7).unwrap();
        assert_eq!(second.since, first.since);
        assert_eq!(second.until.as_deref(), Some("2026-05-01T22:32:00Z"));
        assert_eq!(second.request, first.request);
        assert_eq!(second.requests, Some(8));
        // After it ended, a new wake-up.
        let third = extend(&spec, Some(&second), t("2026-05-01T23:00:00Z"), &req, 1).unwrap();
        assert_eq!(third.since.as_deref(), Some("2026-05-01T23:00:00Z"));
        assert_eq!(third.requests, Some(1));
        let mut off = spec.clone();
        off.wake_on_request = None;
        assert_eq!(extend(&off, None, now, &req, 1), None);
    }

    #[test]
    fn ignored_requests_by_path_or_user_agent() {
        let ignore = Ignore::compile(Some(&WakeIgnore {
            user_agents: vec!["(?i)(bot|crawler)".into(), "^kube-probe/".into()],
            paths: vec!["/healthz".into(), "/.well-known/*".into()],
        }))
        .0;
        assert!(ignore.ignores(Some("/healthz?full=1"), Some("curl/8")));
        assert!(ignore.ignores(Some("/.well-known/acme"), None));
        assert!(ignore.ignores(Some("/"), Some("Googlebot/2.1")));
        assert!(ignore.ignores(None, Some("kube-probe/1.34")));
        assert!(!ignore.ignores(Some("/healthzz"), Some("Mozilla/5.0")));
        assert!(!ignore.ignores(Some("/docs"), None));
        assert!(!Ignore::default().ignores(Some("/healthz"), Some("bot")));
    }

    #[test]
    fn a_pattern_the_engine_refuses_is_left_out_and_named_never_stopping_the_schedule() {
        let (ignore, left_out) = Ignore::compile(Some(&WakeIgnore {
            // RE2 accepts all four; \Q..\E and a literal {...} are RE2's alone, and ASCII
            // \w (as RE2 reads it) keeps the counted ones small.
            user_agents: vec![
                "(?i)\\b\\w{3,20}bot\\b".into(),
                "\\Qa.b\\E".into(),
                "\\w{6}".into(),
                "(bot".into(),
            ],
            paths: vec![],
        }));
        let fields: Vec<&str> = left_out.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "spec.wakeOnRequest.ignore.userAgents[1]",
                "spec.wakeOnRequest.ignore.userAgents[3]"
            ]
        );
        assert!(ignore.ignores(None, Some("Mozilla/5.0 (compatible; Googlebot/2.1)")));
        assert!(ignore.ignores(None, Some("abcdef")));
        assert!(!ignore.ignores(None, Some("curl")));
        // The schedule of a spec with such patterns compiles.
        let mut spec = spec();
        spec.wake_on_request.as_mut().unwrap().ignore = Some(WakeIgnore {
            user_agents: vec!["(bot".into()],
            paths: vec![],
        });
        assert!(Schedule::compile(&spec).is_ok());
        spec.wake_on_request.as_mut().unwrap().wake_for = Some("30s".into());
        spec.wake_on_request
            .as_mut()
            .unwrap()
            .services
            .push(WakeService {
                name: "Web".into(),
                ports: vec![],
            });
        let fields: Vec<String> = crate::schedule::validate(&spec)
            .into_iter()
            .map(|e| e.field)
            .collect();
        assert_eq!(
            fields,
            [
                "spec.wakeOnRequest.services[1].name",
                "spec.wakeOnRequest.wakeFor"
            ]
        );
    }

    #[test]
    fn a_shorter_wake_for_takes_effect_at_once_and_the_end_is_fixed() {
        let mut spec = spec();
        spec.wake_on_request.as_mut().unwrap().wake_for = Some("24h".into());
        let req = WakeRequest::default();
        let t0 = t("2026-05-01T22:00:00Z");
        let long = extend(&spec, None, t0, &req, 1).unwrap();
        spec.wake_on_request.as_mut().unwrap().wake_for = Some("1m".into());
        // Wherever it is evaluated, it ends a minute after its last extension.
        for later in [10, 30, 59] {
            let now = t0 + Duration::seconds(later);
            assert_eq!(
                span(&spec, Some(&long), now).map(|(_, u)| u),
                Some(t("2026-05-01T22:01:00Z"))
            );
        }
        assert_eq!(span(&spec, Some(&long), t0 + Duration::seconds(61)), None);
    }

    #[test]
    fn a_ramp_down_from_a_wake_up_steps_after_it_ends() {
        let mut spec = spec();
        spec.ramp =
            Some(serde_json::from_value(serde_json::json!({"step": 1, "every": "1m"})).unwrap());
        let status = RequestWakeStatus {
            since: Some("2026-05-01T22:00:00Z".into()),
            extended_at: Some("2026-05-01T22:00:00Z".into()),
            until: Some("2026-05-01T22:30:00Z".into()),
            ..Default::default()
        };
        let at = |s: &str| {
            let now = t(s);
            woken(Schedule::compile(&spec).unwrap(), &spec, Some(&status), now)
                .evaluate(now)
                .count()
        };
        assert_eq!(at("2026-05-01T22:29:00Z"), Count::Replicas(3));
        assert_eq!(
            at("2026-05-01T22:30:30Z"),
            Count::Replicas(2),
            "one step down"
        );
        assert_eq!(at("2026-05-01T22:31:30Z"), Count::Replicas(1));
        assert_eq!(at("2026-05-01T22:40:00Z"), Count::Replicas(0));
    }

    #[test]
    fn a_group_wakes_to_its_own_counts_and_a_schedule_never_awake_to_one() {
        let group: TDSetSpec = serde_json::from_value(serde_json::json!({
            "scaleTargetSelector": {"selector": {"matchLabels": {"a": "b"}}},
            "defaultReplica": 0,
            "schedulingConfig": [],
            "wakeOnRequest": {"services": [{"name": "web"}]}
        }))
        .unwrap();
        let now = t("2026-05-01T22:00:00Z");
        let s = Schedule::compile(&group).unwrap();
        assert_eq!(s.awake_level(true, now), OWN);
        let mut never = spec();
        never.scheduling_config.clear();
        let s = Schedule::compile(&never).unwrap();
        assert_eq!(s.awake_level(false, now), 1);
        let w = WakeOnRequest {
            services: vec![WakeService {
                name: "web".into(),
                ports: vec![],
            }],
            ..Default::default()
        };
        assert_eq!((wake_for(&w), hold(&w)), (DEFAULT_WAKE_FOR, DEFAULT_HOLD));
    }
}

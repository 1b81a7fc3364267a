//! Where idleness stands (`status.idle`), from what each signal read: pure. Every signal that
//! answers must say quiet; one that cannot answer makes it Unknown, which is never idle: the
//! TDSet stays as it was (a quiet not yet long enough is forgotten, nobody knows what came
//! meanwhile; a sleep by idleness holds, so a Prometheus that restarts wakes nothing, and a
//! request through the wake proxy still wakes it).

use chrono::{DateTime, Utc};

use crate::api::{Idle, IdlePhase, IdleSignal, IdleSignalStatus, IdleStatus, TrafficTemplate};
use crate::preview::{parse_rfc3339, rfc3339};
use crate::schedule::idle::after;
use crate::status::reason;
use crate::workload::traffic::Rates;

/// What one signal read, and when (its source's instant, not the reconcile's: a status that
/// says the same is not written again).
#[derive(Clone, Debug, PartialEq)]
pub struct Read {
    pub reading: Reading,
    pub at: DateTime<Utc>,
}

/// What one signal read.
#[derive(Clone, Debug, PartialEq)]
pub enum Reading {
    /// Requests a second to the signal's Services, summed.
    Requests(f64),
    /// The workload's CPU, as a share of its requests (0.2 = 20 %).
    Cpu(f64),
    /// It could not answer: why, and the reason the `IdleSignal` condition gives.
    Unknown {
        reason: &'static str,
        message: String,
    },
}

/// A signal's name, as `status.idle.signals[].signal` gives it.
pub fn signal_name(s: &IdleSignal) -> String {
    match (&s.prometheus, &s.cpu) {
        (Some(p), _) => {
            let what = match (p.template, &p.query) {
                (Some(t), _) => template_name(t).to_string(),
                (None, Some(_)) => "query".to_string(),
                (None, None) => "?".to_string(),
            };
            match &p.service {
                Some(service) => format!("prometheus/{what} {service}"),
                None => format!("prometheus/{what}"),
            }
        }
        (None, _) => "cpu".to_string(),
    }
}

/// A template's name as the spec writes it.
pub fn template_name(t: TrafficTemplate) -> &'static str {
    match t {
        TrafficTemplate::Traefik => "traefik",
        TrafficTemplate::IngressNginx => "ingress-nginx",
        TrafficTemplate::Envoy => "envoy",
        TrafficTemplate::Istio => "istio",
        TrafficTemplate::Linkerd => "linkerd",
    }
}

/// How long an answer counts, reads every `every`: three reads, and at least a minute (a slow
/// Prometheus makes a read take up to its timeout). The rates' window is never shorter
/// (`TrafficOptions::new`), so two answers that count leave no request between them unseen.
pub fn fresh_for(every: std::time::Duration) -> chrono::Duration {
    let three = chrono::Duration::from_std(every * 3).unwrap_or(chrono::Duration::MAX);
    three.max(chrono::Duration::minutes(1))
}

/// What each of `idle`'s signals reads where no source of signals is configured: Unknown.
pub fn without_source(idle: &Idle, now: DateTime<Utc>) -> Vec<Read> {
    (idle.signals.iter())
        .map(|_| Read {
            reading: Reading::Unknown {
                reason: reason::NO_SIGNAL_SOURCE,
                message: "this operator reads no traffic signal (no Prometheus is configured)"
                    .into(),
            },
            at: now,
        })
        .collect()
}

/// What Prometheus last answered to a query: when, and the rates or why there are none (the
/// `IdleSignal` reason and a message).
pub type Answered<'a> = (DateTime<Utc>, Result<&'a Rates, (&'static str, &'a str)>);

/// What `signal` reads of the Services `services` in `ns` (its own `service`, else these),
/// from `answer`, its query's last answer (`None`: not asked yet), which counts only while no
/// older than `fresh_for`. A Service with no series cannot answer: never seen is not idle.
pub fn reading_of(
    signal: &IdleSignal,
    answer: Option<Answered<'_>>,
    fresh_for: chrono::Duration,
    ns: &str,
    services: &[&str],
    now: DateTime<Utc>,
) -> Read {
    let unknown = |reason: &'static str, message: String, at| Read {
        reading: Reading::Unknown { reason, message },
        at,
    };
    let Some(p) = &signal.prometheus else {
        return unknown(
            reason::SIGNAL_NOT_READ,
            "the CPU signal is not read yet (metrics.k8s.io)".into(),
            now,
        );
    };
    if !crate::workload::traffic::readable(p) {
        let t = p.template.map_or("?", template_name);
        return unknown(
            reason::SIGNAL_NOT_READ,
            format!("the {t} template is not read yet: give the query instead"),
            now,
        );
    }
    let Some((at, rates)) = answer else {
        return unknown(reason::NOT_READ_YET, "not asked yet".into(), now);
    };
    if now - at > fresh_for {
        return unknown(
            reason::SIGNAL_STALE,
            format!(
                "the last answer is from {}: the reads have fallen behind",
                rfc3339(at)
            ),
            at,
        );
    }
    let rates = match rates {
        Ok(rates) => rates,
        Err((reason, message)) => return unknown(reason, message.to_string(), at),
    };
    let own = p.service.as_deref().map(|s| vec![s]);
    let mut sum = 0.0;
    for service in own.as_deref().unwrap_or(services) {
        match rates.get(ns, service) {
            Some(r) => sum += r,
            None => {
                return unknown(
                    reason::NO_SERIES,
                    format!("the query gives no series for Service {ns}/{service}"),
                    at,
                );
            }
        }
    }
    Read {
        reading: Reading::Requests(sum),
        at,
    }
}

/// Whether `rate` requests a second is traffic under the threshold `below` (`threshold`): at
/// it or above; without one, any request at all.
pub fn is_traffic(below: Option<f64>, rate: f64) -> bool {
    match below {
        Some(t) => rate >= t,
        None => rate > 0.0,
    }
}

/// Requests a second under which a Service is idle; `None`: any request at all is traffic.
pub fn threshold(idle: &Idle) -> Option<f64> {
    idle.below_requests_per_second
        .as_deref()
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|t| t.is_finite() && *t > 0.0)
}

/// The share of its requests above which a workload is busy ("20%" is 0.2).
fn busy_above(s: &IdleSignal) -> f64 {
    (s.cpu.as_ref())
        .and_then(|c| c.busy_above.trim_end_matches('%').parse::<f64>().ok())
        .map_or(1.0, |p| p / 100.0)
}

/// `status.idle` at `now`: `readings` are `idle.signals`' in order (a missing one cannot
/// answer); `previous` the status before; `traffic_at` the last request the wake proxy held
/// or relayed (its own counts are traffic too). A quiet that begins now begins at the latest
/// reading that saw it. While the phase holds, each signal keeps the reading that decided it
/// (a value read every interval is no change to write).
pub fn observe(
    idle: &Idle,
    readings: &[Read],
    previous: Option<&IdleStatus>,
    traffic_at: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> IdleStatus {
    let mut next = observe_now(idle, readings, previous, traffic_at, now);
    if let Some(p) = previous.filter(|p| p.phase == next.phase) {
        for (s, was) in next.signals.iter_mut().zip(&p.signals) {
            if s.signal == was.signal && s.unknown == was.unknown {
                *s = was.clone();
            }
        }
    }
    next
}

fn observe_now(
    idle: &Idle,
    readings: &[Read],
    previous: Option<&IdleStatus>,
    traffic_at: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> IdleStatus {
    let below = threshold(idle);
    let mut signals = Vec::with_capacity(idle.signals.len());
    let mut unknown = None;
    let mut active = false;
    for (i, signal) in idle.signals.iter().enumerate() {
        let name = signal_name(signal);
        let read = readings.get(i);
        let (value, why) = match read.map(|r| &r.reading) {
            Some(Reading::Requests(r)) => {
                active |= is_traffic(below, *r);
                (Some(format!("{r:.2} req/s")), None)
            }
            Some(Reading::Cpu(c)) => {
                active |= *c > busy_above(signal);
                (Some(format!("{:.0}%", c * 100.0)), None)
            }
            Some(Reading::Unknown { reason, message }) => {
                unknown.get_or_insert(*reason);
                (None, Some(message.clone()))
            }
            None => {
                unknown.get_or_insert(reason::NO_SIGNAL_SOURCE);
                (None, Some("not read".to_string()))
            }
        };
        signals.push(IdleSignalStatus {
            signal: name,
            value,
            read_at: read.filter(|_| why.is_none()).map(|r| rfc3339(r.at)),
            unknown: why,
        });
    }
    if let Some(reason) = unknown {
        // Blind since the oldest reading that could not answer (a stale answer's own instant).
        let blind = (idle.signals.iter().enumerate())
            .filter_map(|(i, _)| readings.get(i))
            .filter(|r| matches!(r.reading, Reading::Unknown { .. }))
            .map(|r| r.at.min(now))
            .min()
            .unwrap_or(now);
        // The quiet that had the workloads asleep is kept while the sleep holds (the schedule
        // holds it, and begins none); a request the proxy saw since, or a sleep that broke,
        // ends it.
        let asleep = |p: &IdleStatus| {
            (p.sleeps_at.as_deref())
                .and_then(parse_rfc3339)
                .is_some_and(|s| s <= now)
        };
        let (quiet_since, unknown_since) = match previous {
            Some(p) if p.phase == IdlePhase::Unknown => (
                p.quiet_since.clone().filter(|_| asleep(p)),
                p.unknown_since.clone(),
            ),
            Some(p) if p.phase == IdlePhase::Idle && asleep(p) => {
                (p.quiet_since.clone(), Some(rfc3339(blind)))
            }
            _ => (None, Some(rfc3339(blind))),
        };
        let requested =
            |q: &String| parse_rfc3339(q).is_some_and(|q| traffic_at.is_some_and(|t| t > q));
        let quiet_since = quiet_since.filter(|q| !requested(q));
        return IdleStatus {
            phase: IdlePhase::Unknown,
            reason: Some(reason.to_string()),
            quiet_since,
            unknown_since,
            signals,
            ..IdleStatus::default()
        };
    }
    if active {
        return IdleStatus {
            phase: IdlePhase::Active,
            signals,
            ..IdleStatus::default()
        };
    }
    // Quiet: since the quiet on record began, if it went on unbroken (or was kept through a
    // blind spell: what came meanwhile through the wake proxy is a rise the schedule counts
    // from, or the request below); else from now. Never before the last request the proxy saw.
    let kept = previous.and_then(quiet_since).map(|t| t.min(now));
    let read_at = readings.iter().map(|r| r.at.min(now)).max().unwrap_or(now);
    let since = kept.unwrap_or(read_at);
    let since = traffic_at.map_or(since, |t| since.max(t.min(now)));
    let phase = if now >= since + after(idle) {
        IdlePhase::Idle
    } else {
        IdlePhase::Quiet
    };
    IdleStatus {
        phase,
        quiet_since: Some(rfc3339(since)),
        signals,
        ..IdleStatus::default()
    }
}

/// The instant the quiet on record began, where there is one (Quiet, Idle, or Unknown after
/// Idle).
pub fn quiet_since(status: &IdleStatus) -> Option<DateTime<Utc>> {
    status.quiet_since.as_deref().and_then(parse_rfc3339)
}

/// What the schedule counts idleness from (`Schedule::with_idle`): the quiet on record and,
/// Unknown, since when it is blind.
pub fn idleness(status: &IdleStatus) -> Option<(DateTime<Utc>, Option<DateTime<Utc>>)> {
    let since = quiet_since(status)?;
    match status.phase {
        IdlePhase::Quiet | IdlePhase::Idle => Some((since, None)),
        IdlePhase::Unknown => {
            let blind = status.unknown_since.as_deref().and_then(parse_rfc3339);
            // Blind since an instant no one wrote: as blind as the quiet's start.
            Some((since, Some(blind.unwrap_or(since))))
        }
        IdlePhase::Active => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    /// 10m, under 0.5 req/s of Traefik's counter for web, and the CPU veto above 20 %.
    fn idle() -> Idle {
        serde_json::from_value(serde_json::json!({
            "after": "10m",
            "belowRequestsPerSecond": "0.5",
            "signals": [
                {"prometheus": {"template": "traefik", "service": "web"}},
                {"cpu": {"busyAbove": "20%"}}
            ]
        }))
        .unwrap()
    }

    fn fresh() -> chrono::Duration {
        fresh_for(std::time::Duration::from_secs(30))
    }

    /// `observe` of one reading of each signal at `at` (`now` as well), after `previous`.
    fn seen(requests: f64, cpu: f64, at: &str, previous: Option<&IdleStatus>) -> IdleStatus {
        observe(&idle(), &read(requests, cpu, at), previous, None, t(at))
    }

    fn read(requests: f64, cpu: f64, at: &str) -> Vec<Read> {
        vec![
            Read {
                reading: Reading::Requests(requests),
                at: t(at),
            },
            Read {
                reading: Reading::Cpu(cpu),
                at: t(at),
            },
        ]
    }

    #[test]
    fn quiet_from_the_reading_that_saw_it_then_idle_after_after() {
        let first = observe(
            &idle(),
            &read(0.1, 0.05, "2026-05-01T10:00:00Z"),
            None,
            None,
            t("2026-05-01T10:00:20Z"),
        );
        assert_eq!(first.phase, IdlePhase::Quiet);
        assert_eq!(first.quiet_since.as_deref(), Some("2026-05-01T10:00:00Z"));
        assert_eq!(first.signals[0].value.as_deref(), Some("0.10 req/s"));
        assert_eq!(first.signals[1].value.as_deref(), Some("5%"));
        let later = observe(
            &idle(),
            &read(0.0, 0.05, "2026-05-01T10:10:00Z"),
            Some(&first),
            None,
            t("2026-05-01T10:10:05Z"),
        );
        assert_eq!(later.phase, IdlePhase::Idle);
        assert_eq!(later.quiet_since, first.quiet_since, "the quiet goes on");
    }

    #[test]
    fn while_the_phase_holds_the_readings_that_decided_it_are_kept() {
        let first = seen(0.1, 0.05, "2026-05-01T10:00:00Z", None);
        let next = seen(0.2, 0.07, "2026-05-01T10:00:30Z", Some(&first));
        assert_eq!(next, first, "nothing to write");
        let idle_now = seen(0.0, 0.0, "2026-05-01T10:10:00Z", Some(&next));
        assert_eq!(idle_now.phase, IdlePhase::Idle);
        assert_eq!(
            idle_now.signals[0].read_at.as_deref(),
            Some("2026-05-01T10:10:00Z"),
            "a new phase, the reading that made it"
        );
    }

    #[test]
    fn a_query_reads_the_services_of_the_signal_each_of_them_seen() {
        let signal: IdleSignal = serde_json::from_value(serde_json::json!(
            {"prometheus": {"query": "sum by (namespace, service) (rate(x[1m]))"}}
        ))
        .unwrap();
        let mut rates = Rates::new();
        rates.insert("dev", "web", 0.25);
        rates.insert("dev", "api", 0.5);
        let at = t("2026-05-01T10:00:00Z");
        let both = reading_of(
            &signal,
            Some((at, Ok(&rates))),
            fresh(),
            "dev",
            &["web", "api"],
            at,
        );
        assert_eq!(
            both,
            Read {
                reading: Reading::Requests(0.75),
                at
            }
        );
        let unseen = reading_of(
            &signal,
            Some((at, Ok(&rates))),
            fresh(),
            "dev",
            &["web", "docs"],
            at,
        );
        assert!(
            matches!(
                unseen.reading,
                Reading::Unknown {
                    reason: reason::NO_SERIES,
                    ..
                }
            ),
            "{unseen:?}"
        );
        let failed = reading_of(
            &signal,
            Some((at, Err((reason::PROMETHEUS_UNREACHABLE, "refused")))),
            fresh(),
            "dev",
            &["web"],
            at,
        );
        assert!(matches!(
            failed.reading,
            Reading::Unknown {
                reason: reason::PROMETHEUS_UNREACHABLE,
                ..
            }
        ));
        let unasked = reading_of(&signal, None, fresh(), "dev", &["web"], at);
        assert!(matches!(
            unasked.reading,
            Reading::Unknown {
                reason: reason::NOT_READ_YET,
                ..
            }
        ));
        // An answer older than three reads (and a minute) is no reading: the loop fell behind.
        assert_eq!(fresh(), chrono::Duration::seconds(90));
        let old = reading_of(
            &signal,
            Some((at, Ok(&rates))),
            fresh(),
            "dev",
            &["web", "api"],
            at + chrono::Duration::seconds(91),
        );
        assert!(
            matches!(
                old.reading,
                Reading::Unknown {
                    reason: reason::SIGNAL_STALE,
                    ..
                }
            ),
            "{old:?}"
        );
    }

    #[test]
    fn traffic_or_a_busy_workload_is_active_and_ends_the_quiet() {
        let quiet = seen(0.0, 0.0, "2026-05-01T10:00:00Z", None);
        let busy = seen(0.0, 0.3, "2026-05-01T10:01:00Z", Some(&quiet));
        assert_eq!((busy.phase, busy.quiet_since), (IdlePhase::Active, None));
        let traffic = seen(0.5, 0.0, "2026-05-01T10:01:00Z", Some(&quiet));
        assert_eq!(
            traffic.phase,
            IdlePhase::Active,
            "at the threshold is traffic"
        );
        let again = seen(0.0, 0.0, "2026-05-01T10:02:00Z", Some(&traffic));
        assert_eq!(
            again.quiet_since.as_deref(),
            Some("2026-05-01T10:02:00Z"),
            "a new quiet"
        );
    }

    #[test]
    fn without_a_threshold_any_request_is_traffic() {
        let mut any = idle();
        any.below_requests_per_second = None;
        let s = observe(
            &any,
            &read(0.01, 0.0, "2026-05-01T10:00:00Z"),
            None,
            None,
            t("2026-05-01T10:00:00Z"),
        );
        assert_eq!(s.phase, IdlePhase::Active);
    }

    #[test]
    fn a_request_the_proxy_saw_is_traffic() {
        let quiet = seen(0.0, 0.0, "2026-05-01T10:00:00Z", None);
        let s = observe(
            &idle(),
            &read(0.0, 0.0, "2026-05-01T10:20:00Z"),
            Some(&quiet),
            Some(t("2026-05-01T10:15:00Z")),
            t("2026-05-01T10:20:00Z"),
        );
        assert_eq!(
            (s.phase, s.quiet_since.as_deref()),
            (IdlePhase::Quiet, Some("2026-05-01T10:15:00Z"))
        );
    }

    #[test]
    fn a_signal_that_cannot_answer_is_unknown_and_forgets_a_quiet_not_yet_idle() {
        let quiet = seen(0.0, 0.0, "2026-05-01T10:00:00Z", None);
        let mut reads = read(0.0, 0.0, "2026-05-01T10:30:00Z");
        reads[0].reading = Reading::Unknown {
            reason: "PrometheusUnreachable",
            message: "connection refused".into(),
        };
        let s = observe(
            &idle(),
            &reads,
            Some(&quiet),
            None,
            t("2026-05-01T10:30:00Z"),
        );
        assert_eq!(
            (s.phase, s.quiet_since.as_deref()),
            (IdlePhase::Unknown, None)
        );
        assert_eq!(s.reason.as_deref(), Some("PrometheusUnreachable"));
        assert_eq!(s.signals[0].unknown.as_deref(), Some("connection refused"));
        assert_eq!(idleness(&s), None, "the schedule counts nothing from it");
        assert_eq!(s.unknown_since.as_deref(), Some("2026-05-01T10:30:00Z"));
        // A signal not read at all (fewer readings than signals) cannot answer either.
        let short = observe(
            &idle(),
            &reads[1..],
            Some(&quiet),
            None,
            t("2026-05-01T10:30:00Z"),
        );
        assert_eq!(short.phase, IdlePhase::Unknown);
        // With no source configured, every signal is Unknown.
        let none = observe(
            &idle(),
            &without_source(&idle(), t("2026-05-01T10:30:00Z")),
            None,
            None,
            t("2026-05-01T10:30:00Z"),
        );
        assert_eq!(
            (none.phase, none.reason.as_deref()),
            (IdlePhase::Unknown, Some(reason::NO_SIGNAL_SOURCE))
        );
    }

    #[test]
    fn blind_while_asleep_by_idleness_keeps_the_quiet_until_a_request_or_a_break() {
        let quiet = seen(0.0, 0.0, "2026-05-01T10:00:00Z", None);
        let mut idle_now = seen(0.0, 0.0, "2026-05-01T10:11:00Z", Some(&quiet));
        assert_eq!(idle_now.phase, IdlePhase::Idle);
        // As the schedule said: asleep by idleness since 10:10.
        idle_now.sleeps_at = Some("2026-05-01T10:10:00Z".into());
        let mut reads = read(0.0, 0.0, "2026-05-01T10:20:00Z");
        reads[0].reading = Reading::Unknown {
            reason: "PrometheusUnreachable",
            message: "connection refused".into(),
        };
        let blind_at = |previous: &IdleStatus, traffic: Option<&str>, now: &str| {
            let mut s = observe(&idle(), &reads, Some(previous), traffic.map(t), t(now));
            // The schedule's answer, as resolve writes it: still asleep since 10:10 where kept.
            s.sleeps_at = idleness(&s).map(|_| "2026-05-01T10:10:00Z".to_string());
            s
        };
        let blind = blind_at(&idle_now, None, "2026-05-01T10:20:00Z");
        assert_eq!(blind.phase, IdlePhase::Unknown);
        assert_eq!(
            idleness(&blind),
            Some((t("2026-05-01T10:00:00Z"), Some(t("2026-05-01T10:20:00Z")))),
            "the quiet kept, blind from the reading that could not answer"
        );
        let still = blind_at(&blind, None, "2026-05-01T10:25:00Z");
        assert_eq!(still, blind, "blind on: nothing to write");
        // A request the wake proxy saw while blind ends the kept quiet.
        let woken = blind_at(&blind, Some("2026-05-01T10:24:00Z"), "2026-05-01T10:25:00Z");
        assert_eq!(idleness(&woken), None);
        // So does a sleep that broke while blind (the schedule says none any more).
        let mut broke = blind.clone();
        broke.sleeps_at = None;
        let after = observe(
            &idle(),
            &reads,
            Some(&broke),
            None,
            t("2026-05-01T10:26:00Z"),
        );
        assert_eq!(idleness(&after), None);
        // Idle but not asleep when it went blind (`during` kept it awake): nothing is kept.
        let mut awake = idle_now.clone();
        awake.sleeps_at = None;
        let unkept = observe(
            &idle(),
            &reads,
            Some(&awake),
            None,
            t("2026-05-01T10:20:00Z"),
        );
        assert_eq!(idleness(&unkept), None);
        // It answers again, quiet: the quiet goes on from where it was, Idle at once.
        let back = seen(0.0, 0.0, "2026-05-01T10:30:00Z", Some(&still));
        assert_eq!(
            (back.phase, back.quiet_since.as_deref(), back.unknown_since),
            (IdlePhase::Idle, Some("2026-05-01T10:00:00Z"), None)
        );
        // Or with traffic: Active.
        let busy = seen(2.0, 0.0, "2026-05-01T10:30:00Z", Some(&still));
        assert_eq!((busy.phase, idleness(&busy)), (IdlePhase::Active, None));
    }
}

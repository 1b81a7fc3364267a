//! Logs (tracing, text or JSON) and Prometheus metrics.

use std::sync::{Arc, Mutex};

use kube::ResourceExt;
use kube::runtime::reflector::Store;
use prometheus::{Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, Opts, Registry};

use crate::api::{OrderDirection, TDSet, TDSetStatus, WarmUpMode};
use crate::cache::Cached;
use crate::error::Result;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Installs the global subscriber. `filter` is an `EnvFilter` directive such as `info` or
/// `tdset_operator=debug,kube=info`.
pub fn init_logging(filter: &str, format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_new(filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stdout());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(true)
        .with_ansi(ansi);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
}

/// The outcomes `tdset_wake_reports_total` counts.
pub const WAKE_OUTCOMES: [&str; 7] = [
    "written",
    "extended-already",
    "refused",
    "forbidden",
    "unauthenticated",
    "invalid",
    "error",
];

pub struct Metrics {
    pub registry: Registry,
    pub reconciles: IntCounterVec,
    pub reconcile_errors: IntCounterVec,
    pub reconcile_duration: Histogram,
    pub scale_operations: IntCounterVec,
    pub writes: IntCounterVec,
    pub leader: IntGauge,
    /// From the instant a transition was due to the moment its workload write succeeded.
    pub transition_lag: Histogram,
    /// For each scale-up, how long after its transition its count was ready (0: by then), by
    /// the TDSet's `warmUp.mode` (Off, Fixed, Measured).
    pub scale_up_lateness: prometheus::HistogramVec,
    /// For each scale-up, from its write to its count ready.
    pub scale_up_ready: Histogram,
    /// Replicas a scale-up added times how long before its transition they were ready: what
    /// warming up spent against replicas ready exactly at the transition.
    pub warm_up_early: prometheus::Counter,
    /// Tiers of an ordered group passed over for their timeout, by direction.
    pub tier_timeouts: IntCounterVec,
    /// Status writes and Events queued behind the workload writes.
    pub bookkeeping_pending: IntGauge,
    /// Queued statuses replaced by a newer one before they were sent.
    pub bookkeeping_superseded: IntCounter,
    /// 1 when the watches stream their initial lists, 0 when they list in pages.
    pub streaming_lists: IntGauge,
    /// TDSets this shard matches that another shard still holds.
    pub shard_waiting: IntGauge,
    /// Other shards' TDSets in this shard's indexes (those of namespaces where it has its own).
    pub shard_others_indexed: IntGauge,
    /// Namespaces listed afresh because this shard's first TDSet arrived there.
    pub shard_index_fills: IntCounter,
    /// Reports of the wake proxy by outcome (written, extended-already, refused, forbidden,
    /// unauthenticated, invalid, error).
    pub wake_reports: IntCounterVec,
    /// Traffic queries for `spec.idle`, by outcome, and their durations.
    pub idle_queries: IntCounterVec,
    pub idle_query_duration: Histogram,
    tdsets: Arc<Mutex<Option<Store<Cached<TDSet>>>>>,
    /// Replica-seconds saved per TDSet ("ns/name"), integrated at each reconcile.
    saved: Arc<Mutex<std::collections::HashMap<String, SavedClock>>>,
}

/// A TDSet's replica-seconds saved so far, and the replicas saved since `since`.
#[derive(Clone, Copy, Debug)]
struct SavedClock {
    total: f64,
    replicas: i64,
    since: chrono::DateTime<chrono::Utc>,
}

impl Metrics {
    pub fn new() -> Result<Metrics> {
        Self::for_shard(None)
    }

    /// A shard's metrics carry its name (label `shard`), so alerts and dashboards tell the
    /// shards apart (`sum by (shard) (tdset_leader)`). The per-TDSet series do not need it.
    pub fn for_shard(shard: Option<&str>) -> Result<Metrics> {
        let labels =
            shard.map(|s| std::collections::HashMap::from([("shard".to_string(), s.to_string())]));
        let registry = Registry::new_custom(None, labels)?;
        let reconciles = IntCounterVec::new(
            Opts::new("tdset_reconciles_total", "Reconciles by result (ok, error)"),
            &["result"],
        )?;
        let reconcile_errors = IntCounterVec::new(
            Opts::new(
                "tdset_reconcile_errors_total",
                "Failed reconciles by error kind",
            ),
            &["kind"],
        )?;
        let wake_reports = IntCounterVec::new(
            Opts::new(
                "tdset_wake_reports_total",
                "Requests the wake proxy reported to the wake endpoint, by outcome",
            ),
            &["outcome"],
        )?;
        let idle_queries = IntCounterVec::new(
            Opts::new(
                "tdset_idle_queries_total",
                "Traffic queries asked of Prometheus for spec.idle (one per distinct query per interval), by outcome (ok, error)",
            ),
            &["outcome"],
        )?;
        let idle_query_duration = Histogram::with_opts(
            HistogramOpts::new(
                "tdset_idle_query_duration_seconds",
                "Time one traffic query for spec.idle took, its answer read",
            )
            .buckets(vec![
                0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
            ]),
        )?;
        let reconcile_duration = Histogram::with_opts(
            HistogramOpts::new(
                "tdset_reconcile_duration_seconds",
                "Time spent in one reconcile",
            )
            .buckets(vec![
                0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
            ]),
        )?;
        let scale_operations = IntCounterVec::new(
            Opts::new(
                "tdset_scale_operations_total",
                "Deployment replica changes made by the operator, by direction (up, down)",
            ),
            &["direction"],
        )?;
        let writes = IntCounterVec::new(
            Opts::new(
                "tdset_api_writes_total",
                "Write requests the operator sent to the API server, by resource and verb",
            ),
            &["resource", "verb"],
        )?;
        let leader = IntGauge::new(
            "tdset_leader",
            "1 while this instance holds the leader lease (or runs without election)",
        )?;
        let transition_lag = Histogram::with_opts(
            HistogramOpts::new(
                "tdset_transition_lag_seconds",
                "From the instant a scheduled change was due to the moment the workload write for it succeeded",
            )
            .buckets(vec![
                0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0,
            ]),
        )?;
        // Seconds to minutes: pods start in seconds, a new node takes minutes.
        let readiness_buckets = vec![
            0.0, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0,
        ];
        let scale_up_lateness = prometheus::HistogramVec::new(
            HistogramOpts::new(
                "tdset_scale_up_lateness_seconds",
                "For each scale-up, how long after its transition its new count was ready (0 when ready by then), by the TDSet's warmUp mode (Off, Fixed, Measured)",
            )
            .buckets(readiness_buckets.clone()),
            &["warm_up"],
        )?;
        let scale_up_ready = Histogram::with_opts(
            HistogramOpts::new(
                "tdset_scale_up_ready_seconds",
                "For each scale-up, from the write of its new count until that many replicas were ready",
            )
            .buckets(readiness_buckets),
        )?;
        let warm_up_early = prometheus::Counter::new(
            "tdset_warm_up_early_replica_seconds_total",
            "Replicas scale-ups added, times how long before their transition they were ready: what warmUp spent against replicas ready exactly at the transition",
        )?;
        let tier_timeouts = IntCounterVec::new(
            Opts::new(
                "tdset_group_tier_timeouts_total",
                "Tiers of an ordered group (scaleTargetSelector.order) not there by their tierTimeout: the next tier was written anyway",
            ),
            &["direction"],
        )?;
        let bookkeeping_pending = IntGauge::new(
            "tdset_bookkeeping_pending",
            "Status writes and Events waiting behind the workload writes",
        )?;
        let bookkeeping_superseded = IntCounter::new(
            "tdset_bookkeeping_superseded_total",
            "Queued status writes replaced by a newer status of the same TDSet before they were sent",
        )?;
        let streaming_lists = IntGauge::new(
            "tdset_watch_streaming_lists",
            "1 when the watches receive their initial lists as a stream (the API server's WatchList), 0 when they list in pages",
        )?;
        let shard_waiting = IntGauge::new(
            "tdset_shard_handovers_waiting",
            "TDSets this shard matches that another shard still holds (it has not let go, nor is it proven gone)",
        )?;
        let shard_others_indexed = IntGauge::new(
            "tdset_shard_other_tdsets_indexed",
            "Other shards' TDSets this shard keeps in its indexes: those of the namespaces where it has TDSets of its own",
        )?;
        let shard_index_fills = IntCounter::new(
            "tdset_shard_index_fills_total",
            "Namespaces whose TDSets this shard listed afresh because its first TDSet arrived there",
        )?;
        let tdsets = Arc::new(Mutex::new(None));
        registry.register(Box::new(shard_waiting.clone()))?;
        registry.register(Box::new(shard_others_indexed.clone()))?;
        registry.register(Box::new(shard_index_fills.clone()))?;
        registry.register(Box::new(streaming_lists.clone()))?;
        registry.register(Box::new(bookkeeping_pending.clone()))?;
        registry.register(Box::new(bookkeeping_superseded.clone()))?;
        registry.register(Box::new(reconciles.clone()))?;
        registry.register(Box::new(reconcile_errors.clone()))?;
        registry.register(Box::new(reconcile_duration.clone()))?;
        registry.register(Box::new(scale_operations.clone()))?;
        registry.register(Box::new(writes.clone()))?;
        registry.register(Box::new(leader.clone()))?;
        registry.register(Box::new(transition_lag.clone()))?;
        registry.register(Box::new(scale_up_lateness.clone()))?;
        registry.register(Box::new(scale_up_ready.clone()))?;
        registry.register(Box::new(warm_up_early.clone()))?;
        registry.register(Box::new(tier_timeouts.clone()))?;
        registry.register(Box::new(wake_reports.clone()))?;
        registry.register(Box::new(idle_queries.clone()))?;
        registry.register(Box::new(idle_query_duration.clone()))?;
        #[cfg(target_os = "linux")]
        registry.register(Box::new(
            prometheus::process_collector::ProcessCollector::for_self(),
        ))?;
        // Every known label value at 0 from the start: a query by that label (a dashboard's
        // panel, an alert's `rate`) has its series before the first event.
        for result in ["ok", "error"] {
            reconciles.with_label_values(&[result]);
        }
        for kind in crate::error::Error::METRIC_LABELS {
            reconcile_errors.with_label_values(&[kind]);
        }
        for outcome in ["ok", "error"] {
            idle_queries.with_label_values(&[outcome]);
        }
        for outcome in WAKE_OUTCOMES {
            wake_reports.with_label_values(&[outcome]);
        }
        for direction in ["up", "down"] {
            scale_operations.with_label_values(&[direction]);
        }
        for mode in [WarmUpMode::Off, WarmUpMode::Fixed, WarmUpMode::Measured] {
            scale_up_lateness.with_label_values(&[&format!("{mode:?}")]);
        }
        for direction in [OrderDirection::Waking, OrderDirection::Sleeping] {
            tier_timeouts.with_label_values(&[&format!("{direction:?}")]);
        }
        Ok(Metrics {
            registry,
            reconciles,
            reconcile_errors,
            reconcile_duration,
            scale_operations,
            writes,
            leader,
            transition_lag,
            scale_up_lateness,
            scale_up_ready,
            warm_up_early,
            tier_timeouts,
            bookkeeping_pending,
            bookkeeping_superseded,
            streaming_lists,
            shard_waiting,
            shard_others_indexed,
            shard_index_fills,
            wake_reports,
            idle_queries,
            idle_query_duration,
            tdsets,
            saved: Default::default(),
        })
    }

    /// One traffic query asked (`spec.idle`): its outcome and how long it took.
    pub fn idle_query(&self, outcome: &str, seconds: f64) {
        self.idle_queries.with_label_values(&[outcome]).inc();
        self.idle_query_duration.observe(seconds);
    }

    /// Adds what a TDSet saved since its last reconcile (`replicas` saved from `now` on), to
    /// `tdset_saved_replica_seconds_total`.
    pub fn saved(&self, key: &str, replicas: i64, now: chrono::DateTime<chrono::Utc>) {
        let Ok(mut saved) = self.saved.lock() else {
            return;
        };
        let clock = saved.entry(key.to_string()).or_insert(SavedClock {
            total: 0.0,
            replicas,
            since: now,
        });
        let elapsed = (now - clock.since).num_milliseconds().max(0) as f64 / 1000.0;
        clock.total += clock.replicas as f64 * elapsed;
        clock.replicas = replicas;
        clock.since = now;
    }

    /// Forgets a TDSet that is gone.
    pub fn forget_saved(&self, key: &str) {
        if let Ok(mut saved) = self.saved.lock() {
            saved.remove(key);
        }
    }

    /// Per-TDSet series are read from this cache at scrape time, so a deleted TDSet's series
    /// disappear with it.
    pub fn set_tdset_store(&self, store: Option<Store<Cached<TDSet>>>) {
        if let Ok(mut s) = self.tdsets.lock() {
            *s = store;
        }
    }

    pub fn write(&self, resource: &str, verb: &str) {
        self.writes.with_label_values(&[resource, verb]).inc();
    }

    /// The whole exposition text (tests; the HTTP server streams `chunks` instead).
    pub fn render(&self) -> String {
        self.chunks().collect()
    }

    /// The exposition text in pieces: the registry's series, then the per-TDSet series a few
    /// hundred TDSets at a time. Built through the registry, 10 000 TDSets' 130 000 series took
    /// several hundred MiB per scrape; written as text in chunks, a scrape holds one chunk.
    pub fn chunks(&self) -> impl Iterator<Item = String> + Send + 'static {
        let mut head = String::new();
        let families = self.registry.gather();
        if prometheus::TextEncoder::new()
            .encode_utf8(&families, &mut head)
            .is_err()
        {
            head.clear();
        }
        let tdsets: Vec<Arc<Cached<TDSet>>> = self
            .tdsets
            .lock()
            .ok()
            .and_then(|s| s.as_ref().map(|s| s.state()))
            .unwrap_or_default();
        let tdsets = Arc::new(tdsets);
        let saved = Arc::new(self.saved.lock().map(|s| s.clone()).unwrap_or_default());
        let per_family = (0..FAMILIES.len()).flat_map(move |family| {
            let (tdsets, saved) = (tdsets.clone(), saved.clone());
            let n = tdsets.len().div_ceil(CHUNK);
            (0..n.max(1)).map(move |chunk| {
                let from = (chunk * CHUNK).min(tdsets.len());
                let to = (from + CHUNK).min(tdsets.len());
                render_family(family, chunk == 0, &tdsets[from..to], &saved)
            })
        });
        std::iter::once(head).chain(per_family)
    }
}

/// TDSets rendered per chunk of the per-TDSet series.
const CHUNK: usize = 256;

/// How a per-TDSet family reads a status: one gauge value, or one series per condition and
/// state (the kube-state-metrics shape).
#[derive(Clone, Copy)]
enum Series {
    Gauge(fn(&TDSetStatus) -> Option<f64>),
    Conditions,
    /// One series while `Degraded` is true, with its reason (a conflict, a contest, ...).
    DegradedReason,
    /// `tdset_saved_replica_seconds_total`, from the operator's memory (a counter: it starts
    /// again at 0 when the operator restarts, as Prometheus counters do).
    SavedSeconds,
}

/// The per-TDSet families: name, help, what they read.
const FAMILIES: [(&str, &str, Series); 11] = [
    (
        "tdset_desired_replicas",
        "Replicas the schedule wants now",
        Series::Gauge(|s| s.desired_replicas.map(f64::from)),
    ),
    (
        "tdset_next_transition_timestamp_seconds",
        "Unix time of the next replica change (absent when none is scheduled)",
        Series::Gauge(|s| {
            s.next_transition_time
                .as_deref()
                .and_then(crate::preview::parse_rfc3339)
                .map(|ts| ts.timestamp() as f64)
        }),
    ),
    (
        "tdset_current_replicas",
        "Replicas the workload runs, as last observed",
        Series::Gauge(|s| s.replicas.map(f64::from)),
    ),
    (
        "tdset_ready_replicas",
        "Ready replicas of the workload, as last observed (absent when the workload reports none)",
        Series::Gauge(|s| s.ready_replicas.map(f64::from)),
    ),
    (
        "tdset_warm_up_lead_seconds",
        "How far ahead of its transition the next scale-up is written (spec.warmUp; absent without it)",
        Series::Gauge(|s| {
            crate::schedule::parse_duration(&s.warm_up.as_ref()?.lead)
                .map(|d| d.num_seconds() as f64)
        }),
    ),
    (
        "tdset_saved_replicas",
        "Replicas not running now that the baseline would run (the workload's own count, or the highest count an owned Deployment's spec sets)",
        Series::Gauge(|s| s.savings.as_ref().map(|v| v.replicas as f64)),
    ),
    (
        "tdset_saved_cpu_cores",
        "CPU cores the pods of the saved replicas would request",
        Series::Gauge(|s| {
            let cpu = &s.savings.as_ref()?.cpu;
            crate::workload::savings::quantity_value(cpu)
        }),
    ),
    (
        "tdset_saved_memory_bytes",
        "Memory bytes the pods of the saved replicas would request",
        Series::Gauge(|s| {
            let memory = &s.savings.as_ref()?.memory;
            crate::workload::savings::quantity_value(memory)
        }),
    ),
    (
        "tdset_saved_replica_seconds_total",
        "Replica-seconds saved since this operator started leading: saved replicas integrated over time between reconciles",
        Series::SavedSeconds,
    ),
    (
        "tdset_status_condition",
        "1 for the status each condition of a TDSet has (type Available, Progressing, Degraded; status true, false, unknown), 0 for the others",
        Series::Conditions,
    ),
    (
        "tdset_degraded_reason",
        "1 while the TDSet is Degraded, labelled with the condition's reason (ConflictingTDSet, ConflictingWriter, InvalidSpec, ...); absent otherwise",
        Series::DegradedReason,
    ),
];

/// One family's lines for some TDSets (with its HELP and TYPE when `header`).
fn render_family(
    family: usize,
    header: bool,
    tdsets: &[Arc<Cached<TDSet>>],
    saved: &std::collections::HashMap<String, SavedClock>,
) -> String {
    use std::fmt::Write as _;
    let (name, help, series) = FAMILIES[family];
    // Labels in alphabetical order, as the prometheus crate writes them.
    let mut out = String::with_capacity(tdsets.len() * 96 + 256);
    if header {
        let kind = match series {
            Series::SavedSeconds => "counter",
            _ => "gauge",
        };
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }
    for t in tdsets {
        let (ns, tname) = (t.namespace().unwrap_or_default(), t.name_any());
        if let Series::SavedSeconds = series {
            if let Some(c) = saved.get(&format!("{ns}/{tname}")) {
                let (ns, tname) = (escape(&ns), escape(&tname));
                let _ = writeln!(
                    out,
                    "{name}{{name=\"{tname}\",namespace=\"{ns}\"}} {}",
                    c.total
                );
            }
            continue;
        }
        // Decoded per family: a scrape holds one chunk's lines, never every status at once.
        let Some(status) = &t.status() else { continue };
        let (ns, tname) = (escape(&ns), escape(&tname));
        match series {
            Series::Gauge(value) => {
                if let Some(v) = value(status) {
                    let _ = writeln!(out, "{name}{{name=\"{tname}\",namespace=\"{ns}\"}} {v}");
                }
            }
            Series::SavedSeconds => {}
            Series::DegradedReason => {
                if let Some(c) = status.conditions.iter().find(|c| {
                    c.type_ == crate::status::DEGRADED && c.status.eq_ignore_ascii_case("true")
                }) {
                    let reason = escape(&c.reason);
                    let _ = writeln!(
                        out,
                        "{name}{{name=\"{tname}\",namespace=\"{ns}\",reason=\"{reason}\"}} 1"
                    );
                }
            }
            Series::Conditions => {
                for c in &status.conditions {
                    let type_ = escape(&c.type_);
                    for state in ["true", "false", "unknown"] {
                        let on = i64::from(c.status.eq_ignore_ascii_case(state));
                        let _ = writeln!(
                            out,
                            "{name}{{name=\"{tname}\",namespace=\"{ns}\",status=\"{state}\",type=\"{type_}\"}} {on}"
                        );
                    }
                }
            }
        }
    }
    out
}

/// A label value as the text format wants it.
fn escape(v: &str) -> std::borrow::Cow<'_, str> {
    if v.contains(['\\', '"', '\n']) {
        v.replace('\\', "\\\\")
            .replace('"', "\\\"")
            .replace('\n', "\\n")
            .into()
    } else {
        v.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Condition;
    use kube::runtime::watcher;

    fn tdset(i: usize) -> TDSet {
        let mut t = TDSet::new(&format!("t{i}"), Default::default());
        t.metadata.namespace = Some("shop".into());
        t.metadata.uid = Some(format!("uid-{i}"));
        t.status = Some(TDSetStatus {
            desired_replicas: Some(3),
            replicas: Some(2),
            conditions: vec![Condition {
                type_: "Degraded".into(),
                status: "False".into(),
                reason: "AsExpected".into(),
                message: String::new(),
                last_transition_time: "2026-05-01T09:00:00Z".into(),
                observed_generation: None,
            }],
            ..Default::default()
        });
        t
    }

    #[test]
    fn per_tdset_series_come_in_chunks_each_family_whole_and_headed_once() {
        let metrics = Metrics::new().unwrap();
        let (reader, mut writer) = kube::runtime::reflector::store::<Cached<TDSet>>();
        let n = CHUNK * 2 + 10;
        for i in 0..n {
            writer.apply_watcher_event(&watcher::Event::Apply(Cached::new(tdset(i))));
        }
        metrics.set_tdset_store(Some(reader));
        let chunks: Vec<String> = metrics.chunks().collect();
        assert!(chunks.len() > FAMILIES.len(), "several chunks per family");
        let text = chunks.concat();
        let lines_of = |family: &str| {
            text.lines()
                .filter(|l| l.starts_with(&format!("{family}{{")))
                .count()
        };
        assert_eq!(lines_of("tdset_desired_replicas"), n);
        assert_eq!(lines_of("tdset_current_replicas"), n);
        assert_eq!(lines_of("tdset_ready_replicas"), 0, "absent when unknown");
        assert_eq!(lines_of("tdset_status_condition"), 3 * n);
        assert!(text.contains(
            "tdset_status_condition{name=\"t7\",namespace=\"shop\",status=\"false\",type=\"Degraded\"} 1"
        ));
        for (family, _, _) in FAMILIES {
            assert_eq!(text.matches(&format!("# TYPE {family} ")).count(), 1);
            // Contiguous: no other family's line between its first and last.
            let positions: Vec<usize> = text
                .lines()
                .enumerate()
                .filter(|(_, l)| l.starts_with(&format!("{family}{{")))
                .map(|(i, _)| i)
                .collect();
            if let (Some(first), Some(last)) = (positions.first(), positions.last()) {
                assert_eq!(last - first + 1, positions.len(), "{family} interleaved");
            }
        }
    }

    #[test]
    fn a_degraded_tdset_has_one_series_with_its_reason_and_the_others_none() {
        let metrics = Metrics::new().unwrap();
        let (reader, mut writer) = kube::runtime::reflector::store::<Cached<TDSet>>();
        let mut conflicting = tdset(1);
        let status = conflicting.status.as_mut().unwrap();
        status.conditions[0].status = "True".into();
        status.conditions[0].reason = "ConflictingTDSet".into();
        for t in [conflicting, tdset(2)] {
            writer.apply_watcher_event(&watcher::Event::Apply(Cached::new(t)));
        }
        metrics.set_tdset_store(Some(reader));
        let text = metrics.render();
        let lines: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("tdset_degraded_reason{"))
            .collect();
        assert_eq!(
            lines,
            ["tdset_degraded_reason{name=\"t1\",namespace=\"shop\",reason=\"ConflictingTDSet\"} 1"]
        );
    }

    #[test]
    fn counters_by_a_known_label_start_at_zero_for_each_value() {
        let text = Metrics::new().unwrap().render();
        for series in [
            "tdset_reconcile_errors_total{kind=\"deadline\"} 0",
            "tdset_reconciles_total{result=\"error\"} 0",
            "tdset_scale_operations_total{direction=\"down\"} 0",
            "tdset_group_tier_timeouts_total{direction=\"Sleeping\"} 0",
            "tdset_scale_up_lateness_seconds_count{warm_up=\"Measured\"} 0",
        ] {
            assert!(text.contains(series), "{series} missing");
        }
    }

    #[test]
    fn saved_replica_seconds_integrate_what_was_saved_between_reconciles() {
        let metrics = Metrics::new().unwrap();
        let (reader, mut writer) = kube::runtime::reflector::store::<Cached<TDSet>>();
        writer.apply_watcher_event(&watcher::Event::Apply(Cached::new(tdset(1))));
        metrics.set_tdset_store(Some(reader));
        let t0 = chrono::DateTime::parse_from_rfc3339("2026-05-01T20:00:00Z")
            .unwrap()
            .with_timezone(&chrono::Utc);
        let at = |s| t0 + chrono::Duration::seconds(s);
        metrics.saved("shop/t1", 3, at(0));
        metrics.saved("shop/t1", 0, at(10)); // 3 replicas for 10 s
        metrics.saved("shop/t1", 2, at(20)); // none for 10 s
        let line = "tdset_saved_replica_seconds_total{name=\"t1\",namespace=\"shop\"} 30";
        assert!(metrics.render().contains(line), "{}", metrics.render());
        metrics.forget_saved("shop/t1");
        assert!(
            !metrics
                .render()
                .contains("tdset_saved_replica_seconds_total{")
        );
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
        assert_eq!(escape("plain"), "plain");
    }
}

//! Logs (tracing, text or JSON) and Prometheus metrics.

use std::sync::{Arc, Mutex};

use kube::ResourceExt;
use kube::runtime::reflector::Store;
use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, Opts, Registry};

use crate::api::TDSet;
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
    /// Status writes and Events queued behind the workload writes.
    pub bookkeeping_pending: IntGauge,
    /// Queued statuses replaced by a newer one before they were sent.
    pub bookkeeping_superseded: IntCounter,
    tdsets: Arc<Mutex<Option<Store<TDSet>>>>,
}

impl Metrics {
    pub fn new() -> Result<Metrics> {
        let registry = Registry::new();
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
        let bookkeeping_pending = IntGauge::new(
            "tdset_bookkeeping_pending",
            "Status writes and Events waiting behind the workload writes",
        )?;
        let bookkeeping_superseded = IntCounter::new(
            "tdset_bookkeeping_superseded_total",
            "Queued status writes replaced by a newer status of the same TDSet before they were sent",
        )?;
        let tdsets = Arc::new(Mutex::new(None));
        registry.register(Box::new(bookkeeping_pending.clone()))?;
        registry.register(Box::new(bookkeeping_superseded.clone()))?;
        registry.register(Box::new(reconciles.clone()))?;
        registry.register(Box::new(reconcile_errors.clone()))?;
        registry.register(Box::new(reconcile_duration.clone()))?;
        registry.register(Box::new(scale_operations.clone()))?;
        registry.register(Box::new(writes.clone()))?;
        registry.register(Box::new(leader.clone()))?;
        registry.register(Box::new(transition_lag.clone()))?;
        registry.register(Box::new(TdsetCollector::new(tdsets.clone())?))?;
        #[cfg(target_os = "linux")]
        registry.register(Box::new(
            prometheus::process_collector::ProcessCollector::for_self(),
        ))?;
        Ok(Metrics {
            registry,
            reconciles,
            reconcile_errors,
            reconcile_duration,
            scale_operations,
            writes,
            leader,
            transition_lag,
            bookkeeping_pending,
            bookkeeping_superseded,
            tdsets,
        })
    }

    /// Per-TDSet series are read from this cache at scrape time, so a deleted TDSet's series
    /// disappear with it.
    pub fn set_tdset_store(&self, store: Option<Store<TDSet>>) {
        if let Ok(mut s) = self.tdsets.lock() {
            *s = store;
        }
    }

    pub fn write(&self, resource: &str, verb: &str) {
        self.writes.with_label_values(&[resource, verb]).inc();
    }

    pub fn render(&self) -> String {
        let mut buf = String::new();
        let families = self.registry.gather();
        if prometheus::TextEncoder::new()
            .encode_utf8(&families, &mut buf)
            .is_err()
        {
            buf.clear();
        }
        buf
    }
}

struct TdsetCollector {
    store: Arc<Mutex<Option<Store<TDSet>>>>,
    desc: Vec<Desc>,
}

/// The per-TDSet series, read from the TDSet cache at scrape time.
const SERIES: [(&str, &str); 4] = [
    ("tdset_desired_replicas", "Replicas the schedule wants now"),
    (
        "tdset_next_transition_timestamp_seconds",
        "Unix time of the next replica change (absent when none is scheduled)",
    ),
    (
        "tdset_current_replicas",
        "Replicas the workload runs, as last observed",
    ),
    (
        "tdset_ready_replicas",
        "Ready replicas of the workload, as last observed (absent when the workload reports none)",
    ),
];
const CONDITION: (&str, &str) = (
    "tdset_status_condition",
    "1 for the status each condition of a TDSet has (type Available, Progressing, Degraded; status true, false, unknown), 0 for the others",
);

impl TdsetCollector {
    fn new(store: Arc<Mutex<Option<Store<TDSet>>>>) -> Result<Self> {
        let labels = vec!["namespace".to_string(), "name".to_string()];
        let mut desc = SERIES
            .iter()
            .map(|(name, help)| {
                Desc::new(
                    name.to_string(),
                    help.to_string(),
                    labels.clone(),
                    Default::default(),
                )
            })
            .collect::<std::result::Result<Vec<_>, _>>()?;
        desc.push(Desc::new(
            CONDITION.0.into(),
            CONDITION.1.into(),
            vec![
                "namespace".into(),
                "name".into(),
                "type".into(),
                "status".into(),
            ],
            Default::default(),
        )?);
        Ok(TdsetCollector { store, desc })
    }
}

impl Collector for TdsetCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.desc.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let Some(store) = self.store.lock().ok().and_then(|s| s.clone()) else {
            return vec![];
        };
        let gauges: Vec<prometheus::IntGaugeVec> = SERIES
            .iter()
            .filter_map(|(name, help)| {
                prometheus::IntGaugeVec::new(Opts::new(*name, *help), &["namespace", "name"]).ok()
            })
            .collect();
        let Ok(conditions) = prometheus::IntGaugeVec::new(
            Opts::new(CONDITION.0, CONDITION.1),
            &["namespace", "name", "type", "status"],
        ) else {
            return vec![];
        };
        if gauges.len() != SERIES.len() {
            return vec![];
        }
        for t in store.state() {
            let ns = t.namespace().unwrap_or_default();
            let name = t.name_any();
            let Some(status) = &t.status else { continue };
            let next = status
                .next_transition_time
                .as_deref()
                .and_then(crate::preview::parse_rfc3339)
                .map(|ts| ts.timestamp());
            let values = [
                status.desired_replicas.map(i64::from),
                next,
                status.replicas.map(i64::from),
                status.ready_replicas.map(i64::from),
            ];
            for (gauge, value) in gauges.iter().zip(values) {
                if let Some(v) = value {
                    gauge.with_label_values(&[&ns, &name]).set(v);
                }
            }
            for c in &status.conditions {
                for state in ["true", "false", "unknown"] {
                    let on = c.status.eq_ignore_ascii_case(state);
                    conditions
                        .with_label_values(&[&ns, &name, &c.type_, state])
                        .set(i64::from(on));
                }
            }
        }
        let mut out: Vec<MetricFamily> = gauges.iter().flat_map(|g| g.collect()).collect();
        out.extend(conditions.collect());
        out
    }
}

//! Logs (tracing, text or JSON) and Prometheus metrics.

use std::sync::{Arc, Mutex};

use kube::ResourceExt;
use kube::runtime::reflector::Store;
use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{Histogram, HistogramOpts, IntCounterVec, IntGauge, Opts, Registry};

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
        let tdsets = Arc::new(Mutex::new(None));
        registry.register(Box::new(reconciles.clone()))?;
        registry.register(Box::new(reconcile_errors.clone()))?;
        registry.register(Box::new(reconcile_duration.clone()))?;
        registry.register(Box::new(scale_operations.clone()))?;
        registry.register(Box::new(writes.clone()))?;
        registry.register(Box::new(leader.clone()))?;
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

impl TdsetCollector {
    fn new(store: Arc<Mutex<Option<Store<TDSet>>>>) -> Result<Self> {
        let labels = vec!["namespace".to_string(), "name".to_string()];
        let desc = vec![
            Desc::new(
                "tdset_desired_replicas".into(),
                "Replicas the schedule wants now".into(),
                labels.clone(),
                Default::default(),
            )?,
            Desc::new(
                "tdset_next_transition_timestamp_seconds".into(),
                "Unix time of the next replica change (absent when none is scheduled)".into(),
                labels,
                Default::default(),
            )?,
        ];
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
        let desired = prometheus::IntGaugeVec::new(
            Opts::new("tdset_desired_replicas", "Replicas the schedule wants now"),
            &["namespace", "name"],
        );
        let next = prometheus::IntGaugeVec::new(
            Opts::new(
                "tdset_next_transition_timestamp_seconds",
                "Unix time of the next replica change (absent when none is scheduled)",
            ),
            &["namespace", "name"],
        );
        let (Ok(desired), Ok(next)) = (desired, next) else {
            return vec![];
        };
        for t in store.state() {
            let ns = t.namespace().unwrap_or_default();
            let name = t.name_any();
            let Some(status) = &t.status else { continue };
            if let Some(d) = status.desired_replicas {
                desired.with_label_values(&[&ns, &name]).set(i64::from(d));
            }
            if let Some(ts) = status
                .next_transition_time
                .as_deref()
                .and_then(crate::preview::parse_rfc3339)
            {
                next.with_label_values(&[&ns, &name]).set(ts.timestamp());
            }
        }
        let mut out = desired.collect();
        out.extend(next.collect());
        out
    }
}

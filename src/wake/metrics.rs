//! The wake proxy's own figures, registered beside the process's on its `/metrics`: what
//! became of each connection, how many are held now, how long a held one waited before its
//! first byte was relayed, and what became of each report.

use prometheus::{Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, Opts, Registry};

use crate::error::Result;

/// What became of a connection (`tdset_wake_proxy_connections_total{outcome}`).
pub mod outcome {
    /// Relayed at once: the workload was ready (the operator's slice not yet gone).
    pub const RELAYED: &str = "relayed";
    /// Held, then relayed once the workload was ready.
    pub const WOKEN: &str = "woken";
    /// Matched `ignore`: answered, nothing woken.
    pub const IGNORED: &str = "ignored";
    /// `hold` ran out first: 503 / UNAVAILABLE with Retry-After.
    pub const TIMED_OUT: &str = "timed-out";
    /// Past a Service's caps: past its held connections, answered at once as if timed out;
    /// past its open connections (or its namespace's, or this client's to it), closed.
    pub const OVER_CAP: &str = "over-cap";
    /// Closed at accept: the proxy's connections at their cap.
    pub const REFUSED: &str = "refused";
    /// No endpoint of the woken workload could be reached: 502.
    pub const UNREACHABLE: &str = "unreachable";
    /// On a port no slice names.
    pub const NO_ROUTE: &str = "no-route";
    /// A head refused (too large), or none sent in time.
    pub const BAD_HEAD: &str = "bad-head";

    pub const ALL: [&str; 9] = [
        RELAYED,
        WOKEN,
        IGNORED,
        TIMED_OUT,
        OVER_CAP,
        REFUSED,
        UNREACHABLE,
        NO_ROUTE,
        BAD_HEAD,
    ];
}

pub struct ProxyMetrics {
    pub connections: IntCounterVec,
    pub held: IntGauge,
    /// Connections open now within the caps: being read, held or relayed.
    pub open: IntGauge,
    /// From a held connection's arrival to its first byte relayed.
    pub held_seconds: Histogram,
    /// Reports by result (`sent`, `retried`, `dropped`).
    pub reports: IntCounterVec,
    /// 1 while the operator's wake endpoint answers (the proxy is not ready otherwise).
    pub operator_reachable: IntGauge,
    /// The Services' own EndpointSlices kept now (what the proxy relays to is read from them).
    pub own_slices: IntGauge,
    /// Slices left out past a Service's cap.
    pub own_slices_left_out: IntCounter,
}

impl ProxyMetrics {
    pub fn register(registry: &Registry) -> Result<ProxyMetrics> {
        let connections = IntCounterVec::new(
            Opts::new(
                "tdset_wake_proxy_connections_total",
                "Connections to the wake proxy by what became of them",
            ),
            &["outcome"],
        )?;
        let held = IntGauge::new(
            "tdset_wake_proxy_held",
            "Connections the wake proxy holds now, waiting for their workload",
        )?;
        let held_seconds = Histogram::with_opts(
            HistogramOpts::new(
                "tdset_wake_proxy_held_seconds",
                "From a held connection's arrival to its first byte relayed to the woken workload",
            )
            .buckets(vec![0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 45.0, 60.0]),
        )?;
        let reports = IntCounterVec::new(
            Opts::new(
                "tdset_wake_proxy_reports_total",
                "Wake reports the proxy sent the operator, by result (sent, retried, dropped)",
            ),
            &["result"],
        )?;
        let operator_reachable = IntGauge::new(
            "tdset_wake_proxy_operator_reachable",
            "1 while the operator's wake endpoint answers the proxy; 0: requests cannot wake anything, and the proxy is not ready",
        )?;
        let open = IntGauge::new(
            "tdset_wake_proxy_open",
            "Connections open now within the wake proxy's caps: being read, held or relayed",
        )?;
        registry.register(Box::new(open.clone()))?;
        let own_slices = IntGauge::new(
            "tdset_wake_proxy_own_slices",
            "The Services' own EndpointSlices (of the trusted managers) the wake proxy keeps now, compacted to where each Service answers",
        )?;
        let own_slices_left_out = IntCounter::new(
            "tdset_wake_proxy_own_slices_left_out_total",
            "EndpointSlices of a Service's own left out because the Service already had as many as the proxy keeps",
        )?;
        registry.register(Box::new(own_slices.clone()))?;
        registry.register(Box::new(own_slices_left_out.clone()))?;
        registry.register(Box::new(operator_reachable.clone()))?;
        registry.register(Box::new(connections.clone()))?;
        registry.register(Box::new(held.clone()))?;
        registry.register(Box::new(held_seconds.clone()))?;
        registry.register(Box::new(reports.clone()))?;
        // Every series from the start, so a rate is defined before the first of each.
        for o in outcome::ALL {
            connections.with_label_values(&[o]);
        }
        for r in ["sent", "retried", "dropped"] {
            reports.with_label_values(&[r]);
        }
        Ok(ProxyMetrics {
            connections,
            held,
            open,
            held_seconds,
            reports,
            operator_reachable,
            own_slices,
            own_slices_left_out,
        })
    }

    pub fn count(&self, outcome: &str) {
        self.connections.with_label_values(&[outcome]).inc();
    }
}

//! The wake proxy (`tdset-operator wake-proxy`): a wing of its own, beside the controller, that
//! imports only the pure core and the API types. While a TDSet's workloads are asleep, the
//! operator's EndpointSlices send its Services' connections here; the proxy reads a request's
//! head, reports it to the operator's wake endpoint, holds the connection until the Service's
//! own endpoints are ready, and forwards it there.
//!
//! - `caps`: what one Service or one client may take of the proxy;
//! - `head`: what is read of a connection before deciding (an HTTP/1.x head, h2c, plain TCP);
//! - `reply`: what the proxy answers itself (503 with Retry-After, a self-reloading page);
//! - `h2`: the same for an HTTP/2 connection (gRPC's UNAVAILABLE);
//! - `routes`: which Service a proxy port stands for, and where that Service answers (pure);
//! - `watch`: the EndpointSlices those are read from;
//! - `operator`: where the operator's wake endpoint is (a URL, or its Service's ClusterIP),
//!   and whether it answers;
//! - `report`: the wake intents sent to the operator, one at a time per TDSet;
//! - `serve`: the listeners and the held connections;
//! - `metrics`: the proxy's figures.

pub mod caps;
pub mod h2;
pub mod head;
pub mod metrics;
pub mod operator;
pub mod reply;
pub mod report;
pub mod routes;
pub mod serve;
pub mod watch;

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::Client;
use tracing::{info, warn};

use crate::error::Result;
use crate::http::Health;

/// How the proxy runs.
#[derive(Clone, Debug)]
pub struct ProxyOptions {
    pub ip: IpAddr,
    /// The proxy ports (the operator allocates from the same range).
    pub ports: (u16, u16),
    pub report_to: report::ReportTo,
    pub caps: caps::Caps,
    /// The managers whose slices are a Service's own (see `routes::targets`).
    pub trusted: Vec<String>,
    /// The one namespace whose Services are intercepted (the operator's `--namespace`); none:
    /// every namespace.
    pub namespace: Option<String>,
    /// How long a stopping proxy may take to answer or relay what it holds.
    pub drain: Duration,
    /// This pod's address (the downward API's `status.podIP`): stopping, the proxy keeps
    /// serving while a slice of the operator's still names it.
    pub pod_ip: Option<IpAddr>,
}

/// A stopping proxy keeps its ports open at least this long, and until no connection has come
/// for this long: the operator takes a stopping pod out of every slice (its pods' readiness is
/// watched) and kube-proxy everywhere follows within seconds; what arrives meanwhile is served
/// as ever.
const DRAIN_QUIET: Duration = Duration::from_secs(5);

/// How long the operator's endpoint may go unanswered before the proxy says it is not ready.
const UNREACHED_FOR: Duration = Duration::from_secs(30);

/// Binds every proxy port, follows the slices, and serves until `stop` resolves, then drains:
/// not ready, the ports still open, until what it holds or relays is done (at most
/// `opts.drain`). `health` turns ready once every port is bound and the routes have been
/// read; the proxy's figures go into `registry` (what its `/metrics` shows).
pub async fn run(
    client: Client,
    opts: ProxyOptions,
    health: Arc<Health>,
    registry: &prometheus::Registry,
    stop: impl Future<Output = ()>,
) -> Result<()> {
    let metrics = Arc::new(metrics::ProxyMetrics::register(registry)?);
    let seen = Arc::new(watch::Seen::new(opts.trusted, metrics.clone()));
    let reporter = report::Reporter::new(opts.report_to, metrics.clone());
    let listeners = serve::listen(
        opts.ip,
        opts.ports,
        seen.clone(),
        reporter.clone(),
        metrics,
        opts.caps,
    )
    .await?;
    let mut following = tokio::spawn(watch::follow(client, seen.clone(), opts.namespace));
    // Ready once the routes have been read and the operator has answered; not ready once it
    // has not for `UNREACHED_FOR` (a proxy that cannot ask for a wake-up must not have
    // workloads put to sleep behind it), which an operator's restart stays within.
    let serving = async {
        seen.synced().await;
        let mut answered: Option<Instant> = None;
        loop {
            if reporter.probe().await {
                answered = Some(Instant::now());
            }
            health.set_ready(answered.is_some_and(|at| at.elapsed() < UNREACHED_FOR));
            tokio::time::sleep(report::PROBE_EVERY).await;
        }
    };
    tokio::select! {
        _ = serving => {}
        _ = &mut following => return Ok(()),
        _ = stop => {}
    }
    health.set_ready(false);
    let address = opts.pod_ip.map(|ip| ip.to_string());
    let named = || address.as_deref().is_some_and(|a| seen.names_address(a));
    drain(&listeners, named, opts.drain).await;
    following.abort();
    Ok(())
}

/// Waits until no slice names this pod (`named`), nothing is open and no connection has come
/// for `DRAIN_QUIET`, or `limit`. With thousands of sleeping Services the operator takes a
/// while to rewrite every slice; until it has, kube-proxy may still send connections here.
async fn drain(listening: &serve::Listening, named: impl Fn() -> bool, limit: Duration) {
    let started = Instant::now();
    info!(
        open = listening.open(),
        "stopping: draining what the proxy holds and relays"
    );
    loop {
        let open = listening.open();
        let quiet = started.elapsed() >= DRAIN_QUIET && listening.quiet_for() >= DRAIN_QUIET;
        if open == 0 && quiet && !named() {
            info!(took_ms = started.elapsed().as_millis() as u64, "drained");
            return;
        }
        if started.elapsed() >= limit {
            warn!(
                open,
                named = named(),
                limit_secs = limit.as_secs(),
                "drain limit reached; closing what is left"
            );
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

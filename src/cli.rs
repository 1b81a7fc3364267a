//! The command line: `run` (the operator), `crd` (print the CRD), `preview` (what a manifest
//! will do, without a cluster).

use chrono::{DateTime, Duration, Utc};
use clap::{Parser, Subcommand, ValueEnum};

use crate::error::{Error, Result};
use crate::preview;
use crate::schedule::Schedule;

#[derive(Parser, Debug)]
#[command(
    name = "tdset-operator",
    version,
    about = "Scales a Deployment by time of day (TDSet, schedule.rs/v1)"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

// Parsed once at start: the size of the largest variant costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the operator.
    Run(RunArgs),
    /// Print a CustomResourceDefinition as YAML (what crds/ holds).
    Crd {
        /// Which one: `tdset` (crds/tdset.yaml) or `tdcalendar` (crds/tdcalendar.yaml).
        #[arg(value_enum, default_value_t = CrdKind::Tdset)]
        kind: CrdKind,
    },
    /// Show what a TDSet manifest does at an instant or over a range. Never talks to a cluster.
    Preview(PreviewArgs),
    /// Run the wake proxy (`spec.wakeOnRequest`): it answers for Services whose workloads are
    /// asleep, reports their requests to the operator, and forwards them once awake.
    WakeProxy(WakeProxyArgs),
}

#[derive(clap::Args, Debug, Clone)]
pub struct WakeProxyArgs {
    /// Kubeconfig file; default: in-cluster config, then $KUBECONFIG / ~/.kube/config.
    #[arg(long, env = "TDSET_KUBECONFIG")]
    pub kubeconfig: Option<std::path::PathBuf>,
    /// The address the proxy ports are bound on (`::` takes IPv4 and IPv6; where IPv6 is off,
    /// 0.0.0.0 is taken instead).
    #[arg(long, env = "TDSET_WAKE_PROXY_IP", default_value = "::")]
    pub ip: std::net::IpAddr,
    /// The proxy ports, `FROM-TO`: one listener each; the operator gives each intercepted
    /// Service port one of them (its `--wake-proxy-ports` must be the same).
    #[arg(long, env = "TDSET_WAKE_PROXY_PORTS", default_value = "20000-20255", value_parser = port_range)]
    pub ports: (u16, u16),
    /// The operator's wake endpoint as a URL (its `--wake-addr`, through its Service), e.g.
    /// `http://tdset-operator-wake.tdset-system.svc:8081`; needs cluster DNS for a name.
    #[arg(
        long,
        env = "TDSET_WAKE_OPERATOR_URL",
        conflicts_with = "operator_service"
    )]
    pub operator_url: Option<String>,
    /// The operator's wake Service, `NAMESPACE/NAME:PORT`: its ClusterIP is read through the
    /// API (read again every minute, and after a failure), so no cluster DNS is needed. The
    /// chart's default.
    #[arg(long, env = "TDSET_WAKE_OPERATOR_SERVICE",
          required_unless_present = "operator_url", value_parser = operator_service)]
    pub operator_service: Option<crate::wake::operator::OperatorAt>,
    /// The proxy's token for the audience `wake.tdset.schedule.rs` (a projected
    /// ServiceAccount token; read again at every report, as the kubelet rotates it).
    #[arg(
        long,
        env = "TDSET_WAKE_TOKEN_FILE",
        default_value = "/var/run/secrets/tdset-wake/token"
    )]
    pub token_file: std::path::PathBuf,
    /// Connections open at once, in all.
    #[arg(long, env = "TDSET_WAKE_MAX_CONNECTIONS", default_value_t = 4096,
          value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub max_connections: u32,
    /// Connections open at once through the Services of one namespace (at most half of
    /// --max-connections); past it a connection is closed.
    #[arg(long, env = "TDSET_WAKE_MAX_PER_NAMESPACE", default_value_t = 1024,
          value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub max_per_namespace: u32,
    /// Connections open at once from one client address to one Service (at most half of
    /// --max-per-service): counted per Service, as an ingress controller's few addresses carry
    /// every tenant's clients. Past it a connection is closed.
    #[arg(long, env = "TDSET_WAKE_MAX_PER_SOURCE", default_value_t = 128,
          value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub max_per_source: u32,
    /// Connections open at once through one Service, read, held or relayed (at most
    /// --max-per-namespace); past it a connection is closed.
    #[arg(long, env = "TDSET_WAKE_MAX_PER_SERVICE", default_value_t = 512,
          value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub max_per_service: u32,
    /// Connections held for one Service at once (at most --max-per-service); past it a
    /// request is answered 503 at once.
    #[arg(long, env = "TDSET_WAKE_MAX_HELD_PER_SERVICE", default_value_t = 256,
          value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub max_held_per_service: u32,
    /// A relayed connection that moves no byte either way for this long is closed.
    #[arg(long, env = "TDSET_WAKE_RELAY_IDLE_SECONDS", default_value_t = 120,
          value_parser = clap::value_parser!(u32).range(1..=86_400))]
    pub relay_idle_seconds: u32,
    /// The managers (`endpointslice.kubernetes.io/managed-by`) whose EndpointSlices are a
    /// Service's own: the proxy relays only to their pods. Any other writer's slice for the
    /// Service is never a target.
    #[arg(
        long,
        env = "TDSET_WAKE_TRUSTED_ENDPOINT_MANAGERS",
        value_delimiter = ',',
        default_value = "endpointslice-controller.k8s.io"
    )]
    pub trust_endpoints_managed_by: Vec<String>,
    /// Intercept only this namespace's Services (the operator's `--namespace`; default: all).
    #[arg(long, env = "TDSET_NAMESPACE")]
    pub namespace: Option<String>,
    /// Stopping (SIGTERM), the longest the proxy keeps serving to answer or relay what it
    /// holds (a held request lasts at most its `hold`, 60 s); then what is left is closed. The
    /// pod's terminationGracePeriodSeconds must be longer.
    #[arg(long, env = "TDSET_WAKE_DRAIN_SECONDS", default_value_t = 60,
          value_parser = clap::value_parser!(u32).range(0..=3600))]
    pub drain_seconds: u32,
    /// This pod's IP (the chart sets it from `status.podIP`): stopping, the proxy keeps serving
    /// while any of the operator's slices names it.
    #[arg(long, env = "TDSET_POD_IP")]
    pub pod_ip: Option<std::net::IpAddr>,
    /// Address for /metrics, /healthz and /readyz.
    #[arg(long, env = "TDSET_METRICS_ADDR", default_value = "0.0.0.0:8080")]
    pub metrics_addr: std::net::SocketAddr,
    #[arg(long, env = "TDSET_LOG", default_value = "info")]
    pub log_level: String,
    #[arg(long, env = "TDSET_LOG_FORMAT", value_enum, default_value_t = crate::telemetry::LogFormat::Text)]
    pub log_format: crate::telemetry::LogFormat,
}

/// `FROM-TO`, at most 1024 ports (one listener each).
fn operator_service(s: &str) -> Result<crate::wake::operator::OperatorAt, String> {
    s.parse()
}

fn port_range(s: &str) -> Result<(u16, u16), String> {
    let (from, to) = s
        .split_once('-')
        .ok_or("expected FROM-TO, e.g. 20000-20255")?;
    let from: u16 = from.trim().parse().map_err(|e| format!("FROM: {e}"))?;
    let to: u16 = to.trim().parse().map_err(|e| format!("TO: {e}"))?;
    if from == 0 || to < from || to - from >= 1024 {
        return Err("FROM must be at least 1 and TO at least FROM, 1024 ports at most".into());
    }
    Ok((from, to))
}

#[derive(clap::Args, Debug, Clone)]
pub struct RunArgs {
    /// Kubeconfig file; default: in-cluster config, then $KUBECONFIG / ~/.kube/config.
    #[arg(long, env = "TDSET_KUBECONFIG")]
    pub kubeconfig: Option<std::path::PathBuf>,
    /// Watch only this namespace (default: all namespaces).
    #[arg(long, env = "TDSET_NAMESPACE")]
    pub namespace: Option<String>,
    /// Address for /metrics, /healthz and /readyz.
    #[arg(long, env = "TDSET_METRICS_ADDR", default_value = "0.0.0.0:8080")]
    pub metrics_addr: std::net::SocketAddr,
    /// Address of the wake endpoint, where the wake proxy reports requests to the Services
    /// of TDSets asleep (`spec.wakeOnRequest`); off when not set.
    #[arg(long, env = "TDSET_WAKE_ADDR")]
    pub wake_addr: Option<std::net::SocketAddr>,
    /// The wake proxy's ServiceAccount (`namespace/name`): only its tokens may report requests.
    /// Default: `tdset-operator-wake-proxy` (the chart's name for it, deploy/) in the operator's namespace.
    #[arg(long, env = "TDSET_WAKE_PROXY_SERVICE_ACCOUNT")]
    pub wake_proxy_service_account: Option<String>,
    /// The wake proxy's Service (`namespace/name`), whose EndpointSlices list its pods: the
    /// addresses the operator's slices send a sleeping Service's connections to. Default:
    /// `tdset-operator-wake-proxy` (the chart's name for it, deploy/) in the operator's namespace. Used only with `--wake-addr`.
    #[arg(long, env = "TDSET_WAKE_PROXY_SERVICE")]
    pub wake_proxy_service: Option<String>,
    /// The wake proxy's ports, `FROM-TO` (its own `--ports`): each intercepted Service port
    /// is given one.
    #[arg(long, env = "TDSET_WAKE_PROXY_PORTS", default_value = "20000-20255", value_parser = port_range)]
    pub wake_proxy_ports: (u16, u16),
    /// The most of those ports the Services of one namespace may hold at once, so one
    /// namespace cannot take the whole range; past it a Service is refused with reason
    /// `WakeOnRequestRefused`, naming the namespace's share.
    #[arg(long, env = "TDSET_WAKE_PROXY_PORTS_PER_NAMESPACE", default_value_t = 64,
          value_parser = clap::value_parser!(u16).range(1..))]
    pub wake_proxy_ports_per_namespace: u16,
    /// The managers whose EndpointSlices are a Service's own (the proxy's
    /// `--trust-endpoints-managed-by`): only their ready endpoints take the proxy out of a
    /// Service's path, as only theirs are where the proxy relays to.
    #[arg(
        long,
        env = "TDSET_WAKE_TRUSTED_ENDPOINT_MANAGERS",
        value_delimiter = ',',
        default_value = "endpointslice-controller.k8s.io"
    )]
    pub wake_trust_endpoints_managed_by: Vec<String>,
    /// Only the holder of a Lease reconciles (run several replicas for failover).
    #[arg(long, env = "TDSET_LEADER_ELECT", default_value_t = false, action = clap::ArgAction::Set)]
    pub leader_elect: bool,
    #[arg(long, env = "TDSET_LEASE_NAME", default_value = "tdset-operator")]
    pub lease_name: String,
    /// Namespace of the Lease; default: the pod's namespace, else "default".
    #[arg(long, env = "TDSET_LEASE_NAMESPACE")]
    pub lease_namespace: Option<String>,
    /// Seconds a lease stays valid without renewal (the longest failover).
    #[arg(long, env = "TDSET_LEASE_DURATION", default_value_t = 15)]
    pub lease_duration: u64,
    /// Identity of this instance (pod name); default: hostname.
    #[arg(long, env = "TDSET_INSTANCE")]
    pub instance: Option<String>,
    /// Reconciles run at once.
    #[arg(long, env = "TDSET_CONCURRENCY", default_value_t = 16)]
    pub concurrency: u16,
    /// How watches receive their initial lists: `stream` (WatchList, one object at a time,
    /// Kubernetes >= 1.32 by default), `pages` (500 at a time), or `auto` (stream when the API
    /// server supports it).
    #[arg(long, env = "TDSET_INITIAL_LIST", value_enum, default_value_t = crate::controller::InitialList::Auto)]
    pub initial_list: crate::controller::InitialList,
    /// Namespaces where TDSets with `container` or `template` may run pods under the
    /// operator's identity: `*` (all), `none`, or a comma-separated list. Elsewhere such a
    /// TDSet is Degraded (FormNotAllowed) and nothing is created.
    #[arg(long, env = "TDSET_POD_FORMS_IN", default_value = "*")]
    pub pod_forms_in: crate::workload::AllowedIn,
    /// Namespaces where group TDSets (`scaleTargetSelector`) may write the workloads their
    /// selector picks: `*` (all), `none`, or a comma-separated list. Elsewhere such a TDSet is
    /// Degraded (FormNotAllowed) and writes nothing. The chart grants `patch` on StatefulSets
    /// and CronJobs only when this is not `none`.
    #[arg(long, env = "TDSET_GROUP_FORM_IN", default_value = "*")]
    pub group_form_in: crate::workload::AllowedIn,
    /// The most workloads one group TDSet reads per reconcile of what it selects (and as many
    /// of what carries its label): a selector that picks more schedules the first ones (by
    /// kind, then name) and is Degraded (TooManyWorkloads). Bounds the memory and the
    /// requests of one reconcile.
    #[arg(long, env = "TDSET_GROUP_MAX_WORKLOADS", default_value_t = 2000)]
    pub group_max_workloads: usize,
    /// Prometheus's base URL, where `spec.idle` reads traffic (one query per distinct text
    /// per interval, for every TDSet). Unset: no signal can answer, and idleness puts nothing
    /// to sleep.
    #[arg(long, env = "TDSET_PROMETHEUS_URL")]
    pub prometheus_url: Option<String>,
    /// How often `spec.idle`'s queries are asked, in seconds.
    #[arg(long, env = "TDSET_IDLE_READ_INTERVAL", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub idle_read_interval: u64,
    /// The seconds the templates' rates are taken over (PromQL's `rate(...[N s])`): at least
    /// four of Prometheus's scrape intervals, so one request is seen; a request stops counting
    /// this long after it. Never less than an answer counts (three `--idle-read-interval`s, at
    /// least 60 s): it is raised to that.
    #[arg(long, env = "TDSET_IDLE_RATE_WINDOW", default_value_t = 120, value_parser = clap::value_parser!(u64).range(10..=3600))]
    pub idle_rate_window: u64,
    /// Run as this shard: reconcile only the TDSets `--shard-selector` matches, holding the
    /// Lease `<lease-name>-<shard>` (leader election is always on for a shard: its Lease is
    /// how the other shards know whether it is alive).
    #[arg(long, env = "TDSET_SHARD", requires = "shard_selector")]
    pub shard: Option<String>,
    /// The labels of this shard's TDSets, as kubectl writes a selector (`shard=a`,
    /// `team in (x,y)`, `!legacy`).
    #[arg(long, env = "TDSET_SHARD_SELECTOR", requires = "shard")]
    pub shard_selector: Option<String>,
    /// Log filter, e.g. `info` or `tdset_operator=debug,kube=info`.
    #[arg(long, env = "TDSET_LOG", default_value = "info")]
    pub log_level: String,
    #[arg(long, env = "TDSET_LOG_FORMAT", value_enum, default_value_t = crate::telemetry::LogFormat::Text)]
    pub log_format: crate::telemetry::LogFormat,
    /// Testing aid: run the schedule as if the clock read this instant now (RFC 3339); it
    /// then advances in real time. Never set in production.
    #[arg(long, env = "TDSET_FAKE_NOW", value_parser = parse_time, hide = true)]
    pub fake_now: Option<DateTime<Utc>>,
}

#[derive(clap::Args, Debug)]
pub struct PreviewArgs {
    /// The TDSet manifest (YAML or JSON).
    #[arg(short = 'f', long = "file")]
    pub file: Option<String>,
    /// A TDCalendar manifest whose dates apply if the TDSet names it (repeatable).
    #[arg(long = "calendar", value_name = "FILE")]
    pub calendars: Vec<String>,
    /// One instant (RFC 3339). Default: now, unless --from/--to are given.
    #[arg(long, value_parser = parse_time, conflicts_with_all = ["from", "to"])]
    pub at: Option<DateTime<Utc>>,
    /// Start of a range (RFC 3339); default: --to minus one day, or now.
    #[arg(long, value_parser = parse_time)]
    pub from: Option<DateTime<Utc>>,
    /// End of a range (RFC 3339); default: --from plus one day.
    #[arg(long, value_parser = parse_time)]
    pub to: Option<DateTime<Utc>>,
    #[arg(short = 'o', long, value_enum, default_value_t = Output::Table)]
    pub output: Output,
    /// Chart width in columns.
    #[arg(long, default_value_t = 96)]
    pub width: usize,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    Table,
    Json,
    Chart,
}

pub(crate) fn parse_time(s: &str) -> Result<DateTime<Utc>, String> {
    preview::parse_rfc3339(s)
        .ok_or_else(|| format!("{s:?} is not an RFC 3339 time such as 2026-03-08T07:00:00Z"))
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrdKind {
    Tdset,
    Tdcalendar,
}

pub fn crd_yaml() -> Result<String> {
    crd_yaml_of(CrdKind::Tdset)
}

pub fn crd_yaml_of(kind: CrdKind) -> Result<String> {
    let crd = match kind {
        CrdKind::Tdset => crate::api::crd()?,
        CrdKind::Tdcalendar => crate::api::calendar_crd(),
    };
    serde_saphyr::to_string(&crd).map_err(|e| Error::Config(format!("serialising the CRD: {e}")))
}

/// Runs `preview`; returns what to print on stdout.
pub fn run_preview(args: &PreviewArgs, now: DateTime<Utc>) -> Result<String> {
    let file = args
        .file
        .as_deref()
        .ok_or_else(|| Error::Config("preview needs a manifest: -f FILE".into()))?;
    let (tdset, _) = preview::load_manifest(file)?;
    let calendars = args
        .calendars
        .iter()
        .map(|path| preview::load_calendar(path))
        .collect::<Result<Vec<_>>>()?;
    let (schedule, missing) = preview::compile(file, &tdset, &calendars, &Default::default())?;
    let out = run_preview_of(args, now, &schedule, &tdset)?;
    Ok(
        match preview::missing_calendars_note(&missing, "given (--calendar FILE)") {
            Some(note) if args.output != Output::Json => format!("{out}{note}"),
            _ => out,
        },
    )
}

/// `preview` of a compiled schedule (from a file, or from a live TDSet for the plugin).
pub fn run_preview_of(
    args: &PreviewArgs,
    now: DateTime<Utc>,
    schedule: &Schedule,
    tdset: &crate::api::TDSet,
) -> Result<String> {
    let spec = &tdset.spec;
    let suspended = spec.is_suspended();
    // A live TDSet (or a manifest with its status) leads by what has been measured.
    let samples = tdset
        .status
        .as_ref()
        .map_or(&[][..], crate::api::TDSetStatus::warm_up_samples);
    let out = preview_output(
        args,
        now,
        schedule,
        suspended,
        crate::schedule::lead_of(spec, samples),
    )?;
    Ok(if suspended && args.output != Output::Json {
        format!(
            "{out}note: spec.suspend is true: this is the schedule, and the operator writes nothing to the workload until it is set back\n"
        )
    } else {
        out
    })
}

fn preview_output(
    args: &PreviewArgs,
    now: DateTime<Utc>,
    schedule: &Schedule,
    suspended: bool,
    lead: Duration,
) -> Result<String> {
    let ranged = args.from.is_some()
        || args.to.is_some()
        || args.output == Output::Chart && args.at.is_none();
    if !ranged {
        let at = args.at.unwrap_or(now);
        let p = preview::at(schedule, at, suspended, lead);
        return match args.output {
            Output::Json => pretty_json(&p),
            Output::Table => Ok(preview::point_table(schedule, &p, at)),
            Output::Chart => Ok(preview::chart(
                schedule,
                at,
                at + Duration::days(1),
                args.width,
            )),
        };
    }
    let (from, to) = match (args.from, args.to) {
        (Some(f), Some(t)) => (f, t),
        (Some(f), None) => (f, f + Duration::days(1)),
        (None, Some(t)) => (t - Duration::days(1), t),
        (None, None) => (now, now + Duration::days(1)),
    };
    if to <= from {
        return Err(Error::Config(format!(
            "--to ({to}) must be after --from ({from})"
        )));
    }
    match args.output {
        Output::Json => pretty_json(&preview::range(schedule, from, to, lead)),
        Output::Table => Ok(preview::range_table(
            schedule,
            &preview::range(schedule, from, to, lead),
        )),
        Output::Chart => Ok(preview::chart(schedule, from, to, args.width)),
    }
}

/// Pretty JSON for any of the preview shapes.
fn pretty_json<T: serde::Serialize>(v: &T) -> Result<String> {
    serde_json::to_string_pretty(v)
        .map(|s| s + "\n")
        .map_err(|source| Error::Serialize {
            what: "preview",
            source,
        })
}

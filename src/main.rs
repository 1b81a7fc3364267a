use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use tdset_operator::cli::{Cli, Command, RunArgs, WakeProxyArgs, crd_yaml_of, run_preview};
use tdset_operator::clock::SystemClock;
use tdset_operator::controller::{
    self, LeaseOptions, RunOptions, ShardOptions, TrafficOptions, WakeOptions, WakeProxyRef,
};
use tdset_operator::http::{self, Health};
use tdset_operator::plugin::PluginCli;
use tdset_operator::shard::ShardSpec;
use tdset_operator::telemetry::{self, Metrics};
use tdset_operator::{Error, Result};
use tracing::{error, info};

// jemalloc, with one arena and freed pages returned to the kernel at once: with glibc's malloc
// a third of the operator's resident memory was allocator overhead (pages kept per thread
// arena after a burst of watch events and list pages). Measured in BENCHMARKS.md (issue 14);
// `_RJEM_MALLOC_CONF` overrides these settings at run time.
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[cfg(feature = "jemalloc")]
#[allow(non_upper_case_globals)]
#[unsafe(export_name = "_rjem_malloc_conf")]
pub static malloc_conf: &[u8; 60] =
    b"narenas:1,tcache_max:4096,dirty_decay_ms:0,muzzy_decay_ms:0\0";

fn main() -> ExitCode {
    if PluginCli::invoked_as_plugin() {
        return plugin(PluginCli::parse());
    }
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Crd { kind } => crd_yaml_of(kind).map(|out| print!("{out}")),
        Command::Preview(args) => run_preview(&args, chrono::Utc::now()).map(|out| print!("{out}")),
        Command::Run(args) => run(args),
        Command::WakeProxy(args) => wake_proxy(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `kubectl tdset ...` (the binary installed as `kubectl-tdset`).
fn plugin(cli: PluginCli) -> ExitCode {
    let result = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::Config(format!("starting the async runtime: {e}")))
        .and_then(|rt| rt.block_on(tdset_operator::plugin::run(cli, chrono::Utc::now())));
    match result {
        Ok(out) => {
            print!("{out}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: RunArgs) -> Result<()> {
    telemetry::init_logging(&args.log_level, args.log_format);
    runtime()?.block_on(async move {
        let result = operate(args).await;
        if let Err(e) = &result {
            error!(error = %e, "operator stopped with an error");
        }
        result
    })
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::Config(format!("starting the async runtime: {e}")))
}

/// `tdset-operator wake-proxy`: the wake proxy's own process (its own Deployment).
fn wake_proxy(args: WakeProxyArgs) -> Result<()> {
    telemetry::init_logging(&args.log_level, args.log_format);
    runtime()?.block_on(async move {
        let client = kube::Client::try_from(kube_config(args.kubeconfig.as_deref()).await?)
            .map_err(|e| Error::Config(format!("building the API client: {e}")))?;
        let metrics = Arc::new(Metrics::new()?);
        let health = Arc::new(Health::default());
        let (addr, _server) =
            http::serve(args.metrics_addr, metrics.clone(), health.clone()).await?;
        info!(%addr, "serving /metrics, /healthz and /readyz");
        let opts = tdset_operator::wake::ProxyOptions {
            ip: args.ip,
            ports: args.ports,
            report_to: tdset_operator::wake::report::ReportTo {
                operator: std::sync::Arc::new(tdset_operator::wake::operator::Operator::new(
                    match (args.operator_url, args.operator_service) {
                        (Some(url), _) => tdset_operator::wake::operator::OperatorAt::Url(url),
                        (None, Some(at)) => at,
                        (None, None) => {
                            return Err(Error::Config(
                                "the wake proxy needs --operator-service or --operator-url".into(),
                            ));
                        }
                    },
                    Some(client.clone()),
                )),
                token_file: args.token_file,
            },
            caps: tdset_operator::wake::caps::Caps {
                connections: args.max_connections as usize,
                per_namespace: args.max_per_namespace as usize,
                per_source: args.max_per_source as usize,
                per_service: args.max_per_service as usize,
                held_per_service: args.max_held_per_service as usize,
                relay_idle: std::time::Duration::from_secs(args.relay_idle_seconds.into()),
            }
            .checked()?,
            trusted: args.trust_endpoints_managed_by,
            namespace: args.namespace,
            drain: std::time::Duration::from_secs(args.drain_seconds.into()),
            pod_ip: args.pod_ip,
        };
        let stop = shutdown_signal("draining what the proxy holds");
        let result = tdset_operator::wake::run(client, opts, health, &metrics.registry, stop).await;
        if let Err(e) = &result {
            error!(error = %e, "the wake proxy stopped with an error");
        }
        result
    })
}

async fn kube_config(path: Option<&std::path::Path>) -> Result<kube::Config> {
    Ok(match path {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path).map_err(|e| {
                Error::Config(format!("reading kubeconfig {}: {e}", path.display()))
            })?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|e| Error::Config(format!("kubeconfig {}: {e}", path.display())))?
        }
        None => kube::Config::infer()
            .await
            .map_err(|e| Error::Config(format!("no cluster configuration found: {e}")))?,
    })
}

async fn operate(args: RunArgs) -> Result<()> {
    let config = kube_config(args.kubeconfig.as_deref()).await?;
    let clients = tdset_operator::clients::Clients::from_config(config)?;
    let metrics = Arc::new(Metrics::for_shard(args.shard.as_deref())?);
    let health = Arc::new(Health::default());
    let (addr, server) = http::serve(args.metrics_addr, metrics.clone(), health.clone()).await?;
    info!(%addr, "serving /metrics, /healthz, /readyz");

    let instance = args
        .instance
        .clone()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| format!("tdset-operator-{}", std::process::id()));
    let clock = match args.fake_now {
        Some(at) => SystemClock::starting_at(at),
        None => SystemClock::default(),
    };
    let lease_namespace = args
        .lease_namespace
        .clone()
        .or_else(|| {
            std::fs::read_to_string("/var/run/secrets/kubernetes.io/serviceaccount/namespace").ok()
        })
        .unwrap_or_else(|| "default".into());
    let shard = match (&args.shard, &args.shard_selector) {
        (Some(name), Some(selector)) => Some(ShardOptions {
            spec: ShardSpec::new(name, selector).map_err(Error::Config)?,
            lease_prefix: args.lease_name.clone(),
            lease_namespace: lease_namespace.clone(),
        }),
        _ => None,
    };
    // Every replica serves it, leader or not (see controller::run::intents).
    let wake_server = serve_wake(&args, &lease_namespace, &clients, clock, &metrics).await?;
    let wake_proxy = wake_proxy_of(&args, &lease_namespace)?;
    let lease = (args.leader_elect || shard.is_some()).then(|| LeaseOptions {
        name: match &shard {
            Some(s) => s.lease_name(&s.spec.name),
            None => args.lease_name.clone(),
        },
        namespace: lease_namespace,
        duration: Duration::from_secs(args.lease_duration.max(1)),
        shard_selector: shard.as_ref().map(|s| s.spec.selector_text.clone()),
    });
    let opts = RunOptions {
        namespace: args.namespace.clone(),
        concurrency: args.concurrency,
        instance,
        initial_list: args.initial_list,
        pod_forms: args.pod_forms_in.clone(),
        group_form: args.group_form_in.clone(),
        group_max_workloads: args.group_max_workloads,
        // Only an operator that sees every TDSet can count a calendar's users.
        report_calendar_usage: args.namespace.is_none() && shard.is_none(),
        shard,
        wake_proxy,
        traffic: args.prometheus_url.clone().map(|url| {
            let every = Duration::from_secs(args.idle_read_interval);
            let o = TrafficOptions::new(url, every, args.idle_rate_window);
            if o.window_secs != args.idle_rate_window {
                tracing::warn!(
                    asked = args.idle_rate_window,
                    used = o.window_secs,
                    "--idle-rate-window is shorter than two reads (--idle-read-interval): raised, or a request could fall between two reads unseen"
                );
            }
            o
        }),
    };
    let result = controller::run(
        clients,
        opts,
        lease,
        Arc::new(clock),
        metrics,
        health,
        shutdown_signal("finishing in-flight reconciles"),
    )
    .await;
    server.abort();
    if let Some(task) = wake_server {
        task.abort();
    }
    info!("shut down");
    result
}

/// The wake endpoint, when `--wake-addr` is set.
/// The wake proxy the operator's slices point at: only with the wake endpoint on, as the
/// proxy reports there.
fn wake_proxy_of(args: &RunArgs, lease_namespace: &str) -> Result<Option<WakeProxyRef>> {
    if args.wake_addr.is_none() {
        return Ok(None);
    }
    let service = args
        .wake_proxy_service
        .clone()
        .unwrap_or_else(|| format!("{lease_namespace}/tdset-operator-wake-proxy"));
    let Some((namespace, name)) = service.split_once('/') else {
        return Err(Error::Config(format!(
            "--wake-proxy-service {service:?} is not namespace/name"
        )));
    };
    Ok(Some(WakeProxyRef {
        namespace: namespace.to_string(),
        service: name.to_string(),
        ports: args.wake_proxy_ports,
        per_namespace: args.wake_proxy_ports_per_namespace,
        trusted: args.wake_trust_endpoints_managed_by.clone(),
    }))
}

async fn serve_wake(
    args: &RunArgs,
    lease_namespace: &str,
    clients: &tdset_operator::clients::Clients,
    clock: SystemClock,
    metrics: &Arc<Metrics>,
) -> Result<Option<tokio::task::JoinHandle<()>>> {
    let Some(addr) = args.wake_addr else {
        return Ok(None);
    };
    let account = args
        .wake_proxy_service_account
        .clone()
        .unwrap_or_else(|| format!("{lease_namespace}/tdset-operator-wake-proxy"));
    let Some((ns, name)) = account.split_once('/') else {
        return Err(Error::Config(format!(
            "--wake-proxy-service-account {account:?} is not namespace/name"
        )));
    };
    let opts = WakeOptions {
        addr,
        proxy_user: format!("system:serviceaccount:{ns}:{name}"),
    };
    let (addr, task) = controller::serve_wake_endpoint(
        clients.requests.clone(),
        Arc::new(clock),
        metrics.clone(),
        opts,
    )
    .await?;
    info!(%addr, proxy = %account, "serving the wake endpoint");
    Ok(Some(task))
}

/// Resolves on SIGTERM or SIGINT.
async fn shutdown_signal(then: &'static str) {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = term => info!("SIGTERM received; {then}"),
        _ = tokio::signal::ctrl_c() => info!("SIGINT received; {then}"),
    }
}

//! The wiring: the watches and their caches (`caches`, `watches`, `calendars`), the context, the lane,
//! the tasks beside the controller (`beside`), and kube-runtime's controller over them with
//! its mappers (`routing`), run until shutdown or loss of leadership (`leader`: Lease-based
//! election around all of it).

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::CronJob;
use kube::runtime::controller::{Config as ControllerConfig, Controller};
use kube::{Client, Resource, ResourceExt};
use tracing::{debug, info, warn};

mod beside;
mod caches;
mod calendars;
pub mod intents;
pub(crate) mod leader;
mod routing;
mod traffic;
pub(crate) mod watches;

use super::driver::{error_policy, reconcile};
use super::lane;
use super::state::{
    Context, Discovery, ShardOptions, Sharding, Traffic, TrafficOptions, WakeProxyRef, api_backoff,
};
use crate::cache::{Cached, TDSetRef};
use crate::clients::Clients;
use crate::clock::Clock;
use crate::error::Result;
use crate::http::Health;
use crate::memo::OwnWrites;
use crate::telemetry::Metrics;
use crate::workload::AllowedIn;
use beside::Beside;
use caches::{Caches, Events, Watches};
use routing::TargetRouting;
use watches::{InitialList, api_for, target_watch};

#[derive(Clone, Debug)]
pub struct RunOptions {
    /// Watch only this namespace; all when `None`.
    pub namespace: Option<String>,
    pub concurrency: u16,
    /// Identity in Events (and the lease holder).
    pub instance: String,
    /// How the watches receive their initial lists.
    pub initial_list: InitialList,
    /// Where `container` and `template` TDSets may run pods.
    pub pod_forms: AllowedIn,
    /// Where group TDSets may write what they select.
    pub group_form: AllowedIn,
    /// The most workloads one group reads per reconcile, past those it holds.
    pub group_max_workloads: usize,
    /// Write each TDCalendar's usage to its status. Only an operator that sees every TDSet
    /// can count them: with several (one per namespace, shards), each would write its own count.
    pub report_calendar_usage: bool,
    /// Run as this shard: reconcile only the TDSets its selector matches.
    pub shard: Option<ShardOptions>,
    /// The wake proxy (`wakeOnRequest`); `None`: no Service is intercepted.
    pub wake_proxy: Option<WakeProxyRef>,
    /// Where `spec.idle` reads traffic; `None`: nowhere (every signal Unknown).
    pub traffic: Option<TrafficOptions>,
}

/// What every reconcile reads: the clients, the caches, the lane.
fn context(
    client: Client,
    opts: &RunOptions,
    caches: &Caches,
    watches: &Watches,
    shard: Option<Arc<Sharding>>,
    (clock, metrics): (Arc<dyn Clock>, Arc<Metrics>),
) -> Arc<Context> {
    // Statuses and Events wait while reconciles are due: a boundary's workload writes first.
    let priority = Arc::new(lane::Priority::with_due(caches.wakeups.clone()));
    let sink = lane::KubeSink {
        client: client.clone(),
        instance: opts.instance.clone(),
    };
    let lane = lane::Lane::start(
        Arc::new(sink),
        priority.clone(),
        caches.statuses.clone(),
        metrics.clone(),
    );
    Arc::new(Context {
        leading_since: clock.now(),
        wake_proxy: opts.wake_proxy.clone(),
        traffic: opts
            .traffic
            .clone()
            .map(|o| (o, Arc::new(Traffic::default()))),
        wake_slices: watches.wake_slices.clone(),
        ports_handed_out: watches.ports_handed_out.clone(),
        discovery: Discovery::new(client.clone()),
        client,
        clock,
        lane,
        priority,
        metrics,
        deployments: watches.deployments.clone(),
        services: watches.services.clone(),
        hpas: watches.hpas.clone(),
        statuses: caches.statuses.clone(),
        own_writes: caches.own_writes.clone(),
        synced: Arc::new(AtomicBool::new(false)),
        wakeups: caches.wakeups.clone(),
        index: caches.index.clone(),
        groups: caches.groups.clone(),
        calendars: watches.calendars.clone(),
        ics: caches.ics.clone(),
        failures: Default::default(),
        contests: Default::default(),
        pod_forms: opts.pod_forms.clone(),
        group_form: opts.group_form.clone(),
        group_max_workloads: opts.group_max_workloads,
        shard,
        tdsets: watches.tdsets.clone(),
    })
}

/// kube-runtime's controller over the watches, until `shutdown`. A TDSet's own changes reach
/// it as wakeups (see state/wakeups.rs): a start against 10 000 TDSets would otherwise queue
/// all of them in kube-runtime at once. A change of a referenced target (metadata watches of
/// the built-in scalable kinds) or of an HPA reconciles the TDSets concerned; other kinds are
/// re-read at intervalMint.
fn controller(
    watch_client: &Client,
    opts: &RunOptions,
    caches: &Caches,
    watches: Watches,
    ctx: Arc<Context>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) -> impl std::future::Future<Output = ()> {
    let Watches {
        stream,
        tdsets,
        tdset_events,
        deployment_events,
        service_events,
        hpa_events,
        wake_slice_events,
        calendar_events,
        ..
    } = watches;
    let ns = &opts.namespace;
    let routing = TargetRouting {
        index: caches.index.clone(),
        groups: caches.groups.clone(),
        hpas: ctx.hpas.clone(),
        own_writes: caches.own_writes.clone(),
        wakeups: caches.wakeups.clone(),
        tdsets: tdsets.clone(),
    };
    let drive_tdset_watch = tdset_events.filter_map(|_| futures::future::ready(None::<TDSetRef>));
    let proxy_moves = match &opts.wake_proxy {
        Some(p) => watches::proxy_moves(
            kube::Api::namespaced(watch_client.clone(), &p.namespace),
            &p.service,
            stream,
            ctx.wake_slices.clone(),
        )
        .boxed(),
        None => futures::stream::empty().boxed(),
    };
    let on_calendar = calendars::on_calendar(&caches.calendar_index, &caches.wakeups, &caches.ics);
    Controller::for_stream(futures::stream::empty(), tdsets)
        .reconcile_on(drive_tdset_watch)
        .reconcile_on(owned_deployment_changes(deployment_events, &routing))
        .reconcile_on(caches.wakeups.clone().triggers())
        .owns_stream(service_events)
        .watches_stream(hpa_events, routing::on_hpa(&caches.index))
        .watches_stream(wake_slice_events, routing::on_wake_slice)
        .reconcile_on(proxy_moves)
        .watches_stream(calendar_events, on_calendar)
        .watches_stream(
            target_watch::<Deployment>(api_for(watch_client, ns), stream),
            routing::on_target(&routing),
        )
        .watches_stream(
            target_watch::<StatefulSet>(api_for(watch_client, ns), stream),
            routing::on_target(&routing),
        )
        .watches_stream(
            target_watch::<ReplicaSet>(api_for(watch_client, ns), stream),
            routing::on_target(&routing),
        )
        .watches_stream(
            target_watch::<CronJob>(api_for(watch_client, ns), stream),
            routing::on_target(&routing),
        )
        .with_config(ControllerConfig::default().concurrency(opts.concurrency))
        .trigger_backoff(api_backoff())
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        .for_each(|res| async move {
            if let Err(e) = res {
                debug!(error = %e, "controller event");
            }
        })
}

/// The TDSets an owned Deployment's change concerns. Watch errors are retried by the watch's
/// own backoff; only changes trigger. Our own write coming back changes nothing we do not
/// know: at a boundary of 10 000 it was a second reconcile of every TDSet, each writing
/// nothing. A relist showing that revision is skipped too: nothing changed since our write.
fn owned_deployment_changes(
    events: Events<Cached<Deployment>>,
    routing: &TargetRouting,
) -> impl futures::Stream<Item = TDSetRef> + Send + use<> {
    let affected = routing::on_owned_deployment(&routing.index, &routing.hpas);
    let own_writes = routing.own_writes.clone();
    events
        .filter_map(move |d| {
            let d = d.ok().filter(|d| {
                let key = OwnWrites::key(&d.namespace().unwrap_or_default(), &d.name_any());
                !own_writes.seen(&key, d.meta().resource_version.as_deref())
            });
            futures::future::ready(d)
        })
        .flat_map(move |d| futures::stream::iter(affected(d)))
}

/// Runs the controller until `shutdown` resolves (in-flight reconciles finish first, then
/// what the lane holds is written) or `lost` does (leadership is gone: everything stops at
/// once and what the lane holds is dropped, since another replica may already lead).
pub(crate) async fn run_controller(
    clients: Clients,
    opts: &RunOptions,
    clock: Arc<dyn Clock>,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
    lost: impl std::future::Future<Output = ()> + Send,
) -> Result<()> {
    let (client, watch_client) = (clients.requests, clients.watches);
    let caches = Caches::new(opts.concurrency);
    let shard = opts.shard.clone().map(|o| {
        Sharding::new(
            o,
            client.clone(),
            caches.index.clone(),
            caches.groups.clone(),
            &metrics,
        )
    });
    if let Some(s) = &shard {
        info!(shard = s.name(), selector = %s.options.spec.selector_text, "running as a shard: only the TDSets the selector matches are reconciled");
    }
    let watches = Watches::open(
        &watch_client,
        (&opts.namespace, opts.initial_list),
        &caches,
        shard.clone(),
        clock.clone(),
    )
    .await;
    metrics.streaming_lists.set(i64::from(watches.stream));
    metrics.set_tdset_store(Some(watches.tdsets.clone()));
    let ctx = context(
        client,
        opts,
        &caches,
        &watches,
        shard,
        (clock, metrics.clone()),
    );
    let beside = Beside::start(
        opts.report_calendar_usage,
        &watch_client,
        &caches,
        &watches,
        &ctx,
        health,
    );
    info!(
        namespace = opts.namespace.as_deref().unwrap_or("(all)"),
        "starting the TDSet controller"
    );
    let lane = ctx.lane.clone();
    let controller = controller(&watch_client, opts, &caches, watches, ctx, shutdown);
    let lost = tokio::select! {
        _ = controller => false,
        _ = lost => true,
    };
    beside.abort();
    if lost {
        // Dropping the controller dropped its reconciles mid-flight; nothing queued is sent.
        lane.close();
        warn!(
            "leadership lost: stopped at once; queued statuses and Events were dropped (the next leader recomputes them)"
        );
    } else {
        // What the lane still holds is written before the process lets go.
        lane.drain(Duration::from_secs(5)).await;
    }
    metrics.set_tdset_store(None);
    info!("controller stopped");
    Ok(())
}

//! The wiring: the watches and their caches (`watches`, `calendars`), the context, the lane,
//! the tasks beside the controller, and kube-runtime's controller over them, run until
//! shutdown or loss of leadership (`leader`: Lease-based election around all of it).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::batch::v1::CronJob;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{Config as ControllerConfig, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::{Resource, ResourceExt};
use tracing::{debug, info, warn};

mod calendars;
pub mod intents;
pub(crate) mod leader;
pub(crate) mod watches;

use super::driver::{error_policy, reconcile};
use super::io::target::hpa_view;
use super::lane;
use super::state::{
    CalendarIndex, Context, Discovery, GroupIndex, IcsSources, PortsHandedOut, ShardOptions,
    Sharding, TargetIndex, WakeProxyRef, Wakeups, api_backoff, fill_loop, let_go_loop,
};
use crate::api::TDSet;
use crate::cache::{Cached, TDSetRef};
use crate::clients::Clients;
use crate::clock::Clock;
use crate::error::Result;
use crate::http::Health;
use crate::memo::{OwnWrites, StatusMemo};
use crate::telemetry::Metrics;
use crate::workload::AllowedIn;
use crate::workload::intercept;
use watches::{InitialList, api_for, hpa_watch, owned_watch, target_watch, tdset_watch};

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
}

/// How long the groups a workload's change concerns only for their counts wait, so that a
/// burst of such changes (`kubectl label --all`) reconciles each of them about once.
const COUNTS_SETTLE: Duration = Duration::from_secs(5);

/// What a workload watch's mapper reads besides the object.
#[derive(Clone)]
struct TargetRouting {
    index: TargetIndex,
    groups: GroupIndex,
    hpas: Store<HorizontalPodAutoscaler>,
    own_writes: Arc<OwnWrites>,
    wakeups: Arc<Wakeups>,
    /// The TDSets this operator (or shard) reconciles: only they are woken later.
    tdsets: Store<Cached<TDSet>>,
}

/// Maps a change of a built-in scalable object to the TDSets that reference it, directly or
/// through an HPA that scales it, and to the groups that select it or carry its record.
fn on_target<K: Resource<DynamicType = ()>>(
    routing: &TargetRouting,
) -> impl Fn(PartialObjectMeta<K>) -> Vec<TDSetRef> + Send + Sync + 'static {
    let TargetRouting {
        index,
        groups,
        hpas,
        own_writes,
        wakeups,
        tdsets,
    } = routing.clone();
    move |o| {
        let ns = o.namespace().unwrap_or_default();
        let (group, kind) = (K::group(&()), K::kind(&()));
        // Our own `/scale` write coming back: the TDSet that made it knows, and nobody else
        // is concerned (a second reconcile per target at a boundary, each reading it live).
        // Also after a relist: an object still at the revision we produced has not changed
        // since we wrote it, so the watch missed nothing of it.
        let key = OwnWrites::target_key(&ns, &group, &kind, &o.name_any());
        if own_writes.seen(&key, o.metadata.resource_version.as_deref()) {
            return Vec::new();
        }
        let mut out = affected(&index, &hpas, &ns, &group, &kind, &o.name_any());
        // The Deployment controller copies a Deployment's annotations, a group's record
        // included, to its ReplicaSets, and never takes them off: a ReplicaSet is its
        // Deployment's, never a group's, and its changes must not wake a former holder.
        if copies_its_deployment(&o) {
            return out;
        }
        let generation = o.metadata.generation;
        let key = (ns.as_str(), group.as_ref(), kind.as_ref(), o.name_any());
        let groups = groups.affected(
            (key.0, key.1, key.2, key.3.as_str()),
            generation,
            o.labels(),
            o.annotations(),
        );
        let later = tokio::time::Instant::now() + COUNTS_SETTLE;
        for r in groups.soon.iter().filter(|r| tdsets.get(r).is_some()) {
            wakeups.set(&ns, &r.name, later);
        }
        out.extend(groups.now);
        out
    }
}

/// Whether an object is controlled by a Deployment (a ReplicaSet), whose annotations it
/// copies.
fn copies_its_deployment<K: Resource>(o: &K) -> bool {
    o.owner_references()
        .iter()
        .any(|r| r.controller == Some(true) && r.kind == "Deployment" && r.api_version == "apps/v1")
}

/// Maps a change of an owned Deployment to its TDSet, and to any TDSet that references it
/// (the target watches leave owned objects out, see `target_watch`).
fn on_owned_deployment(
    index: &TargetIndex,
    hpas: &Store<HorizontalPodAutoscaler>,
) -> impl Fn(Cached<Deployment>) -> Vec<TDSetRef> + Send + Sync + 'static {
    let (index, hpas) = (index.clone(), hpas.clone());
    move |d| {
        let ns = d.namespace();
        let mut out: Vec<TDSetRef> = d
            .owner_references()
            .iter()
            .filter_map(|o| ObjectRef::from_owner_ref(ns.as_deref(), o, ()))
            .collect();
        out.extend(affected(
            &index,
            &hpas,
            ns.as_deref().unwrap_or_default(),
            &Deployment::group(&()),
            &Deployment::kind(&()),
            &d.name_any(),
        ));
        out
    }
}

/// The TDSets to reconcile when a watched object changes: those that reference it, and, for
/// a workload an HPA scales, those that reference that HPA.
fn affected(
    ctx_index: &TargetIndex,
    hpas: &kube::runtime::reflector::Store<HorizontalPodAutoscaler>,
    ns: &str,
    group: &str,
    kind: &str,
    name: &str,
) -> Vec<TDSetRef> {
    let mut out = ctx_index.lookup(ns, group, kind, name);
    for h in hpas.state() {
        if h.namespace().as_deref() != Some(ns) {
            continue;
        }
        if let Some(v) = hpa_view(&h)
            && v.target.kind == kind
            && v.target.name == name
            && v.target.group() == group
        {
            out.extend(ctx_index.lookup(ns, "autoscaling", "HorizontalPodAutoscaler", &v.name));
        }
    }
    out
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
    let client = clients.requests;
    let watch_client = clients.watches;
    let index = TargetIndex::default();
    let groups = GroupIndex::default();
    let calendar_index = CalendarIndex::default();
    let ics = Arc::new(IcsSources::default());
    let statuses = Arc::new(StatusMemo::default());
    let own_writes = Arc::new(OwnWrites::default());
    // Twice what can run, so a reconcile that ends finds the next one already waiting.
    let wakeups = Arc::new(Wakeups::new(usize::from(opts.concurrency) * 2));
    let stream =
        watches::streams_lists(api_for(&watch_client, &opts.namespace), opts.initial_list).await;
    metrics.streaming_lists.set(i64::from(stream));
    let shard = opts
        .shard
        .clone()
        .map(|o| Sharding::new(o, client.clone(), index.clone(), groups.clone(), &metrics));
    if let Some(s) = &shard {
        info!(shard = s.name(), selector = %s.options.spec.selector_text, "running as a shard: only the TDSets the selector matches are reconciled");
    }
    let (tdsets, tdset_stream) = tdset_watch(
        api_for(&watch_client, &opts.namespace),
        watches::TDSetHooks {
            index: index.clone(),
            groups: groups.clone(),
            calendars: calendar_index.clone(),
            statuses: statuses.clone(),
            wakeups: wakeups.clone(),
            shard: shard.clone(),
            relisted: Default::default(),
        },
        stream,
    );
    let (deployments, deploy_stream) =
        owned_watch::<Deployment>(api_for(&watch_client, &opts.namespace), stream);
    let (services, svc_stream) =
        owned_watch::<Service>(api_for(&watch_client, &opts.namespace), stream);
    let (hpas, hpa_stream) = hpa_watch(api_for(&watch_client, &opts.namespace), stream);
    let ports_handed_out = Arc::new(PortsHandedOut::default());
    let (wake_slices, wake_slice_stream) = watches::wake_slice_watch(
        api_for(&watch_client, &opts.namespace),
        stream,
        ports_handed_out.clone(),
        clock.clone(),
    );
    let (calendar_store, calendar_stream) =
        calendars::calendar_watch(kube::Api::all(watch_client.clone()));
    metrics.set_tdset_store(Some(tdsets.clone()));

    // Statuses and Events wait while reconciles are due: a boundary's workload writes first.
    let priority = Arc::new(lane::Priority::with_due(wakeups.clone()));
    let lane = lane::Lane::start(
        Arc::new(lane::KubeSink {
            client: client.clone(),
            instance: opts.instance.clone(),
        }),
        priority.clone(),
        statuses.clone(),
        metrics.clone(),
    );
    let leading_since = clock.now();
    let ctx = Arc::new(Context {
        leading_since,
        wake_proxy: opts.wake_proxy.clone(),
        wake_slices: wake_slices.clone(),
        ports_handed_out,
        client: client.clone(),
        clock,
        lane: lane.clone(),
        priority,
        metrics: metrics.clone(),
        deployments: deployments.clone(),
        services: services.clone(),
        hpas: hpas.clone(),
        discovery: Discovery::new(client.clone()),
        statuses,
        own_writes: own_writes.clone(),
        synced: Arc::new(AtomicBool::new(false)),
        wakeups: wakeups.clone(),
        index: index.clone(),
        groups: groups.clone(),
        calendars: calendar_store.clone(),
        ics: ics.clone(),
        failures: Default::default(),
        contests: Default::default(),
        pod_forms: opts.pod_forms.clone(),
        group_form: opts.group_form.clone(),
        group_max_workloads: opts.group_max_workloads,
        shard: shard.clone(),
        tdsets: tdsets.clone(),
    });
    let letting_go = shard.clone().map(|s| {
        tokio::spawn(let_go_loop(
            s,
            client.clone(),
            lane.clone(),
            ctx.statuses.clone(),
            wakeups.clone(),
            tdsets.clone(),
            metrics.clone(),
        ))
    });
    // Aborted with the controller: a fill's list only feeds the indexes.
    let filling = shard.clone().map(|s| {
        tokio::spawn(fill_loop(
            s,
            client.clone(),
            wakeups.clone(),
            tdsets.clone(),
        ))
    });

    // Ready, and wakeups handed over, once all five caches hold a full list (calendars too: a
    // window must not start on a holiday the operator has not read yet). Polled, not
    // awaited: a store's readiness wakes only its last waiter, and the controller itself
    // waits on the TDSet store.
    let readiness = {
        let (t, d, s, h, c, health, all_synced, wakeups) = (
            tdsets.clone(),
            deployments.clone(),
            services.clone(),
            hpas.clone(),
            calendar_store.clone(),
            health.clone(),
            ctx.synced.clone(),
            wakeups.clone(),
        );
        let ics = ics.clone();
        let w = wake_slices.clone();
        tokio::spawn(async move {
            let synced =
                |r: Option<Result<(), reflector::store::WriterDropped>>| matches!(r, Some(Ok(())));
            loop {
                if synced(t.wait_until_ready().now_or_never())
                    && synced(d.wait_until_ready().now_or_never())
                    && synced(s.wait_until_ready().now_or_never())
                    && synced(h.wait_until_ready().now_or_never())
                    && synced(c.wait_until_ready().now_or_never())
                    && synced(w.wait_until_ready().now_or_never())
                    && ics.ready()
                {
                    info!("caches synced; ready");
                    all_synced.store(true, Ordering::SeqCst);
                    wakeups.open();
                    health.set_ready(true);
                    return;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };

    let usage = opts.report_calendar_usage.then(|| {
        tokio::spawn(calendars::report_usage(
            client.clone(),
            calendar_store.clone(),
            calendar_index.clone(),
            ics.clone(),
            ctx.clock.clone(),
        ))
    });
    // Aborted with the controller: the watches only feed the documents' cache.
    let ics_watches = tokio::spawn(calendars::watch_ics_sources(
        watch_client.clone(),
        calendar_store.clone(),
        ics.clone(),
        calendar_index.clone(),
        wakeups.clone(),
    ));
    info!(
        namespace = opts.namespace.as_deref().unwrap_or("(all)"),
        "starting the TDSet controller"
    );
    // A change of a referenced target (metadata watches of the built-in scalable kinds) or of
    // an HPA reconciles the TDSets concerned; other kinds are re-read at intervalMint.
    let on_hpa = {
        let index = index.clone();
        move |h: HorizontalPodAutoscaler| {
            let ns = h.namespace().unwrap_or_default();
            let mut out =
                index.lookup(&ns, "autoscaling", "HorizontalPodAutoscaler", &h.name_any());
            if let Some(v) = hpa_view(&h) {
                out.extend(index.lookup(&ns, v.target.group(), &v.target.kind, &v.target.name));
            }
            out
        }
    };
    // A TDSet's own changes reach the controller as wakeups (see state/wakeups.rs): a start against
    // 10 000 TDSets would otherwise queue all of them in kube-runtime at once.
    let on_calendar = calendars::on_calendar(&calendar_index, &wakeups, &ics);
    let drive_tdset_watch = tdset_stream.filter_map(|_| futures::future::ready(None::<TDSetRef>));
    let routing = TargetRouting {
        index: index.clone(),
        groups: groups.clone(),
        hpas: hpas.clone(),
        own_writes: own_writes.clone(),
        wakeups: wakeups.clone(),
        tdsets: tdsets.clone(),
    };
    let proxy_moves = match &opts.wake_proxy {
        Some(p) => watches::proxy_moves(
            kube::Api::namespaced(watch_client.clone(), &p.namespace),
            &p.service,
            stream,
            wake_slices.clone(),
        )
        .boxed(),
        None => futures::stream::empty().boxed(),
    };
    let controller = Controller::for_stream(futures::stream::empty(), tdsets)
        .reconcile_on(drive_tdset_watch)
        .reconcile_on({
            let affected = on_owned_deployment(&index, &hpas);
            let own_writes = own_writes.clone();
            // Watch errors are retried by the watch's own backoff; only changes trigger.
            // Our own write coming back changes nothing we do not know: at a boundary of
            // 10 000 it was a second reconcile of every TDSet, each writing nothing. A relist
            // showing that revision is skipped too: nothing changed since our write.
            deploy_stream
                .filter_map(move |d| {
                    let d = d.ok().filter(|d| {
                        let key = OwnWrites::key(&d.namespace().unwrap_or_default(), &d.name_any());
                        !own_writes.seen(&key, d.meta().resource_version.as_deref())
                    });
                    futures::future::ready(d)
                })
                .flat_map(move |d| futures::stream::iter(affected(d)))
        })
        .reconcile_on(wakeups.triggers())
        .owns_stream(svc_stream)
        .watches_stream(hpa_stream, on_hpa)
        .watches_stream(wake_slice_stream, |s: EndpointSlice| {
            // The TDSet a slice names (and owns): a slice changed or deleted by someone else
            // is put back by its reconcile.
            let tdset = s.labels().get(intercept::TDSET_LABEL).cloned();
            tdset.map(|t| ObjectRef::new(&t).within(&s.namespace().unwrap_or_default()))
        })
        .reconcile_on(proxy_moves)
        .watches_stream(calendar_stream, on_calendar)
        .watches_stream(
            target_watch::<Deployment>(api_for(&watch_client, &opts.namespace), stream),
            on_target(&routing),
        )
        .watches_stream(
            target_watch::<StatefulSet>(api_for(&watch_client, &opts.namespace), stream),
            on_target(&routing),
        )
        .watches_stream(
            target_watch::<ReplicaSet>(api_for(&watch_client, &opts.namespace), stream),
            on_target(&routing),
        )
        .watches_stream(
            target_watch::<CronJob>(api_for(&watch_client, &opts.namespace), stream),
            on_target(&routing),
        )
        .with_config(ControllerConfig::default().concurrency(opts.concurrency))
        .trigger_backoff(api_backoff())
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        .for_each(|res| async move {
            if let Err(e) = res {
                debug!(error = %e, "controller event");
            }
        });
    let lost = tokio::select! {
        _ = controller => false,
        _ = lost => true,
    };
    readiness.abort();
    if let Some(letting_go) = letting_go {
        letting_go.abort();
    }
    if let Some(filling) = filling {
        filling.abort();
    }
    if let Some(usage) = usage {
        usage.abort();
    }
    ics_watches.abort();
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

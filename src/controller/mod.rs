//! The controller: the one place that talks to the API server. Each room holds one job:
//!
//! - `mod.rs`: the context and the reconcile driver (one call per stage), the error policy;
//! - `apply.rs`: guarded writes of owned objects; the TDSet's next status, queued;
//! - `scale.rs`, `finalizer.rs`: referenced targets and HPAs; letting go of them (`onDelete`,
//!   retargets);
//! - `claims.rs`: which TDSet holds a referenced object (one writer per workload);
//! - `discovery.rs`: which kind a `scaleTargetRef` names, remembered;
//! - `backoff.rs`: how long a failed reconcile waits before it is retried;
//! - `bookkeeping.rs`: the lane that sends statuses and Events after the workload writes;
//! - `events.rs`: which Events a change produces;
//! - `watches.rs`: the watches and their compact caches;
//! - `wakeups.rs`: when each TDSet is reconciled next, handed to the controller a few at a time;
//! - `shards.rs`: claiming a TDSet for this shard, letting go of the ones it no longer matches;
//! - `leader.rs`: Lease-based leader election around the controller.
//!
//! Each reconcile evaluates the schedule at `ctx.clock.now()`, makes the owned Deployment (and
//! Service) match, writes status, and requeues at the next transition. It reads the owned
//! objects from caches that may be stale, so every write is guarded: creates fail on an
//! existing object instead of overwriting it, and applies carry the observed uid as a
//! precondition, so an object someone else created meanwhile is never written to.

mod apply;
mod backoff;
mod bookkeeping;
mod calendars;
mod claims;
mod discovery;
mod events;
mod finalizer;
mod leader;
mod scale;
mod shards;
mod wakeups;
mod watches;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures::{FutureExt, StreamExt};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::Service;
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::{Client, Resource, ResourceExt};
use tracing::{Instrument, debug, info, info_span, warn};

pub use leader::{LeaseOptions, run};
pub use shards::ShardOptions;

use crate::api::{TDSet, TargetStatus};
use crate::cache::Cached;
pub use crate::clients::Clients;
use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::http::Health;
use crate::memo::{OwnWrites, StatusMemo};
use crate::schedule::Schedule;
use crate::status::{self, Inputs, Missing, Notice, Observed, Problem};
use crate::telemetry::Metrics;
use crate::workload::contest::Contest;
use crate::workload::{PodForms, Source};
use apply::write_status;
pub use watches::InitialList;
use watches::{
    TargetIndex, api_backoff, api_for, hpa_watch, owned_watch, target_watch, tdset_watch,
};

/// Everything a reconcile needs, shared by all of them.
pub struct Context {
    pub client: Client,
    pub clock: Arc<dyn Clock>,
    /// Status writes and Events, sent after the workload writes.
    pub lane: bookkeeping::Lane,
    /// Which reconciles are writing workloads now (the lane waits for them).
    pub priority: Arc<bookkeeping::Priority>,
    pub metrics: Arc<Metrics>,
    /// Owned Deployments and Services (label-selected), pruned and compact.
    pub deployments: Store<Cached<Deployment>>,
    pub services: Store<Cached<Service>>,
    /// HPAs (pruned): what conflict detection and HPA floors look up.
    pub hpas: Store<HorizontalPodAutoscaler>,
    /// Target kinds, as discovery describes them.
    pub discovery: discovery::Discovery,
    pub statuses: Arc<StatusMemo>,
    /// Owned objects written and not yet seen back through the watch.
    pub own_writes: Arc<OwnWrites>,
    /// Set once every cache holds a full list.
    pub synced: Arc<AtomicBool>,
    /// When each TDSet is reconciled next.
    pub wakeups: Arc<wakeups::Wakeups>,
    /// Which TDSets reference which target, and which of them holds it.
    pub index: TargetIndex,
    /// Every TDCalendar.
    pub calendars: Store<crate::api::TDCalendar>,
    /// Consecutive failed reconciles per TDSet ("ns/name"), for the error backoff.
    pub failures: std::sync::Mutex<std::collections::HashMap<String, u32>>,
    /// Where `container` and `template` TDSets may run pods.
    pub pod_forms: PodForms,
    /// Each TDSet's writes to its target, against another writer ("ns/name").
    pub contests: std::sync::Mutex<std::collections::HashMap<String, Contest>>,
    /// The shard this operator is, if it runs as one.
    pub shard: Option<Arc<shards::Sharding>>,
    /// The TDSets this operator reconciles (a shard's own).
    pub tdsets: Store<Cached<TDSet>>,
}

impl Context {
    /// Runs `f` on the TDSet's record of its writes against other writers.
    pub(crate) fn contest<T>(&self, key: &str, f: impl FnOnce(&mut Contest) -> T) -> T {
        match self.contests.lock() {
            Ok(mut contests) => {
                // Deleted TDSets leave entries behind; one without reverts only costs a revert
                // counted as a first write, so those go when the map grows.
                if contests.len() >= 4096 && !contests.contains_key(key) {
                    contests.retain(|_, c| c.has_reverts());
                }
                f(contests.entry(key.to_string()).or_default())
            }
            Err(_) => f(&mut Contest::default()),
        }
    }

    /// Forgets what is kept per TDSet in memory (it is gone).
    fn forget(&self, key: &str) {
        if let Ok(mut c) = self.contests.lock() {
            c.remove(key);
        }
        if let Ok(mut f) = self.failures.lock() {
            f.remove(key);
        }
    }
}

/// What happened to an owned object in this reconcile.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Change {
    Unchanged,
    Created,
    Updated,
}

/// The longest one reconcile may take: a request that hangs (a black-holed connection)
/// holds one TDSet's transitions back for at most this long, then the reconcile is dropped
/// and retried by the error policy.
pub const RECONCILE_DEADLINE: Duration = Duration::from_secs(60);

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
    pub pod_forms: PodForms,
    /// Write each TDCalendar's usage to its status. Only an operator that sees every TDSet
    /// can count them: with several (one per namespace, shards), each would write its own count.
    pub report_calendar_usage: bool,
    /// Run as this shard: reconcile only the TDSets its selector matches.
    pub shard: Option<ShardOptions>,
}

/// How the controller names a TDSet: it reconciles the cached form (see `Cached`).
pub(crate) type TDSetRef = ObjectRef<Cached<TDSet>>;

/// The name alone (no uid or resourceVersion), of a TDSet or its cached form.
pub(crate) fn tdset_ref(tdset: &impl Resource) -> TDSetRef {
    tdset_ref_named(&tdset.namespace().unwrap_or_default(), &tdset.name_any())
}

pub(crate) fn tdset_ref_named(namespace: &str, name: &str) -> TDSetRef {
    ObjectRef::new(name).within(namespace)
}

pub async fn reconcile(cached: Arc<Cached<TDSet>>, ctx: Arc<Context>) -> Result<Action> {
    let (ns, name) = (cached.namespace().unwrap_or_default(), cached.name_any());
    ctx.wakeups.started(&ns, &name);
    if !ctx.synced.load(Ordering::SeqCst) {
        // The TDSets are listed but the owned objects not yet: an owned Deployment missing
        // from the cache would be taken for missing and created again (a restart against
        // 10 000 TDSets sent up to `concurrency` creates the API server refused). Wakeups
        // hand nothing over until then; this one came another way (an owned object's event).
        ctx.wakeups.now(&ns, &name);
        return Ok(Action::await_change());
    }
    // A shard lets go of a TDSet only once no reconcile of it runs, and starts none meanwhile.
    let _running = match &ctx.shard {
        Some(shard) => match shard.enter(&format!("{ns}/{name}")) {
            Some(running) => Some(running),
            None => return Ok(Action::await_change()),
        },
        None => None,
    };
    let tdset = cached.object()?;
    let started = Instant::now();
    let span = info_span!("reconcile", tdset = %format!("{ns}/{name}"));
    let result = match tokio::time::timeout(
        RECONCILE_DEADLINE,
        reconcile_inner(&tdset, &ctx).instrument(span),
    )
    .await
    {
        Ok(result) => result,
        Err(_) => Err(Error::Deadline(RECONCILE_DEADLINE)),
    };
    // The next look is kept by `wakeups`, not by kube-runtime's requeue (see wakeups.rs); a
    // failed reconcile keeps the wakeup it had and is retried by the error policy.
    if result.is_ok()
        && let Ok(mut failures) = ctx.failures.lock()
    {
        failures.remove(&format!("{ns}/{name}"));
    }
    // A shard sets no wakeup for a TDSet it has stopped matching meanwhile: the controller
    // would not find it, and the wakeup would hold a place among those handed over.
    let still_cached =
        || ctx.shard.is_none() || ctx.tdsets.get(&tdset_ref_named(&ns, &name)).is_some();
    match &result {
        Ok(Some(wait)) if still_cached() => {
            ctx.wakeups
                .set(&ns, &name, tokio::time::Instant::now() + *wait)
        }
        Ok(Some(_)) => {}
        Ok(None) => {
            ctx.wakeups.forget(&ns, &name);
            ctx.forget(&format!("{ns}/{name}"));
        }
        Err(_) => {}
    }
    ctx.metrics
        .reconcile_duration
        .observe(started.elapsed().as_secs_f64());
    match &result {
        Ok(_) => ctx.metrics.reconciles.with_label_values(&["ok"]).inc(),
        Err(e) => {
            ctx.metrics.reconciles.with_label_values(&["error"]).inc();
            ctx.metrics
                .reconcile_errors
                .with_label_values(&[e.metric_label()])
                .inc();
            // Best effort: make the failure visible on the TDSet, then let the error policy back
            // off. Only Degraded changes: what status said before is still the best knowledge.
            let problem = Problem::ApiError(e.to_string());
            if let Err(e2) = apply::report_failure(&tdset, &ctx, &problem).await {
                debug!(error = %e2, "could not record the reconcile error in status");
            }
        }
    }
    result.map(|_| Action::await_change())
}

/// Backs off on errors: one broken TDSet is retried on its own schedule (doubling from 5 s
/// to 5 min, each wait spread by +-25 % so TDSets that failed together do not retry
/// together) and never blocks others. A success resets it.
pub fn error_policy(tdset: Arc<Cached<TDSet>>, error: &Error, ctx: Arc<Context>) -> Action {
    let key = format!(
        "{}/{}",
        tdset.namespace().unwrap_or_default(),
        tdset.name_any()
    );
    let attempt = ctx.failures.lock().map_or(0, |mut f| {
        let n = f.entry(key.clone()).or_insert(0);
        *n = n.saturating_add(1);
        *n
    });
    let wait = backoff::after(attempt, backoff::jitter());
    warn!(tdset = %key, %error, attempt, retry_in = ?wait, "reconcile failed");
    Action::requeue(wait)
}

/// One reconcile; what it returns is how long until the TDSet is to be looked at again
/// (none: never, it is going away).
async fn reconcile_inner(tdset: &TDSet, ctx: &Context) -> Result<Option<Duration>> {
    let ns = tdset
        .namespace()
        .ok_or(Error::MissingField("metadata.namespace"))?;
    // Before anything is written for it: a shard writes only the TDSets it has claimed.
    if let Some(wait) = shards::claim(tdset, ctx).await {
        return Ok(Some(wait));
    }
    if tdset.meta().deletion_timestamp.is_some() {
        // Owned objects go with the garbage collector; a referenced target may be restored.
        finalizer::on_delete(tdset, ctx, &ns).await?;
        return Ok(None);
    }
    let now = ctx.clock.now();
    let interval = tdset.spec.check_interval();

    // Schedule: the level now and the next change (pure), with the named calendars' dates.
    let (found, missing_calendars) = calendars::resolve(&ctx.calendars, &tdset.spec);
    let schedule = match Schedule::compile_with(&tdset.spec, &calendars::holidays(&found)) {
        Ok(s) => s,
        Err(errors) => {
            let message = format!(
                "{}; the workload is left as it is until the spec is fixed",
                errors
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; ")
            );
            warn!(%message, "invalid spec");
            apply::report_failure(tdset, ctx, &Problem::InvalidSpec(message)).await?;
            return Ok(Some(interval));
        }
    };
    let source = Source::of(&tdset.spec).map_err(|e| Error::InvalidSpec(vec![e]))?;
    let eval = schedule.evaluate(now);
    let next = schedule.next_transition(now);
    let warnings = schedule.warnings();

    // The change that was due, if its instant has passed: what the transition lag is measured from.
    let previous = ctx.statuses.current(tdset);
    let due = previous
        .as_ref()
        .and_then(|s| s.next_transition_time.as_deref())
        .and_then(crate::preview::parse_rfc3339)
        .filter(|t| *t <= now);

    // Observe and apply, as the mode asks; while suspended, observe only. The bookkeeping lane
    // (status, Events) waits while this runs anywhere.
    let turn = ctx.priority.workload();
    // What the TDSet drove before and no longer describes is let go of first (suspended or
    // not: letting go is not scheduling), so a target's record is never overwritten before it
    // has been given back.
    finalizer::release_previous(tdset, ctx, &ns).await?;
    if matches!(source, Source::Scale(_) | Source::HpaFloor(_)) {
        apply::remove_owned(tdset, ctx, &ns).await?;
    }
    finalizer::ensure(tdset, ctx, &ns).await?;
    let write = if tdset.spec.is_suspended() {
        Write::Never
    } else {
        Write::IfDifferent
    };
    let outcome = match source {
        _ if let Some(refused) = ctx.pod_forms.refuse(source, &ns) => Outcome {
            workload: Err(Missing {
                reason: status::reason::BLOCKED,
                message: "nothing runs: this form is not allowed in this namespace".into(),
            }),
            problem: Some(Problem::FormNotAllowed(refused)),
            notices: vec![],
            target: None,
            retry: None,
            scaled: None,
        },
        Source::Container(_) | Source::Template(_) => {
            apply::reconcile_owned(tdset, ctx, &ns, &eval, write).await?
        }
        Source::Scale(target) => {
            scale::reconcile_scale(tdset, ctx, &ns, target, &eval, write).await?
        }
        Source::HpaFloor(hpa) => scale::reconcile_hpa(tdset, ctx, &ns, hpa, &eval, write).await?,
    };
    drop(turn);

    // A calendar that does not exist is reported, unless the workload has a worse problem.
    let calendar_problem = (!missing_calendars.is_empty())
        .then(|| Problem::CalendarNotFound(calendars::missing_message(&missing_calendars)));
    let problem = outcome.problem.clone().or(calendar_problem);

    if let Some(due) = due.filter(|_| outcome.scaled.is_some()) {
        let lag = (ctx.clock.now() - due).num_milliseconds().max(0) as f64 / 1000.0;
        ctx.metrics.transition_lag.observe(lag);
    }
    // The change, for status.history: at the transition's instant when one was due.
    let change = outcome.scaled.map(|from| crate::api::HistoryEntry {
        at: crate::preview::rfc3339(due.unwrap_or(now)),
        // Milliseconds: how late a change landed is usually well under a second.
        applied_at: Some(
            ctx.clock
                .now()
                .to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        ),
        from: Some(from),
        to: eval.replicas,
        reason: eval.why(),
        message: None,
    });

    // Status (pure), written only when it differs.
    let new_status = status::next_status(&Inputs {
        previous: previous.as_ref(),
        generation: tdset.meta().generation,
        evaluation: Some(&eval),
        next: next.as_ref(),
        warnings: &warnings,
        notices: &outcome.notices,
        workload: outcome.workload.as_ref(),
        target: outcome.target.as_ref(),
        problem: problem.as_ref(),
        suspended: write == Write::Never,
        change,
        shard: ctx.shard.as_ref().map(|s| s.name()),
        now,
    });
    write_status(tdset, ctx, previous.as_ref(), new_status).await?;

    let mut wait = match next {
        Some(n) => (n.at - now).to_std().unwrap_or_default().min(interval),
        None => interval,
    };
    if let Some(retry) = outcome.retry {
        wait = wait.min(retry);
    }
    debug!(replicas = eval.replicas, window = ?eval.window_label, next = ?next.map(|n| n.at), ?wait, "reconciled");
    Ok(Some(wait))
}

/// Maps a change of a built-in scalable object to the TDSets that reference it, directly or
/// through an HPA that scales it.
fn on_target<K: Resource<DynamicType = ()>>(
    index: &TargetIndex,
    hpas: &Store<HorizontalPodAutoscaler>,
) -> impl Fn(PartialObjectMeta<K>) -> Vec<TDSetRef> + Send + Sync + 'static {
    let (index, hpas) = (index.clone(), hpas.clone());
    move |o| {
        scale::affected(
            &index,
            &hpas,
            &o.namespace().unwrap_or_default(),
            &K::group(&()),
            &K::kind(&()),
            &o.name_any(),
        )
    }
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
        out.extend(scale::affected(
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

/// Whether a reconcile may write to the workload (`spec.suspend` says no).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Write {
    IfDifferent,
    Never,
}

/// What observing and applying a workload found, for status and the requeue.
pub(crate) struct Outcome {
    pub workload: std::result::Result<Observed, Missing>,
    pub problem: Option<Problem>,
    pub notices: Vec<Notice>,
    pub target: Option<TargetStatus>,
    /// Look again sooner than the schedule needs (e.g. a target that does not exist yet and
    /// whose kind is not watched).
    pub retry: Option<Duration>,
    /// When this reconcile changed the workload's replica count (or an HPA's floor): the
    /// count before.
    pub scaled: Option<i32>,
}

/// Runs the controller until `shutdown` resolves (in-flight reconciles finish first, then
/// what the lane holds is written) or `lost` does (leadership is gone: everything stops at
/// once and what the lane holds is dropped, since another replica may already lead).
async fn run_controller(
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
    let calendar_index = calendars::CalendarIndex::default();
    let statuses = Arc::new(StatusMemo::default());
    let own_writes = Arc::new(OwnWrites::default());
    // Twice what can run, so a reconcile that ends finds the next one already waiting.
    let wakeups = Arc::new(wakeups::Wakeups::new(usize::from(opts.concurrency) * 2));
    let stream =
        watches::streams_lists(api_for(&watch_client, &opts.namespace), opts.initial_list).await;
    metrics.streaming_lists.set(i64::from(stream));
    let shard = opts
        .shard
        .clone()
        .map(|o| shards::Sharding::new(o, client.clone()));
    if let Some(s) = &shard {
        info!(shard = s.name(), selector = %s.options.spec.selector_text, "running as a shard: only the TDSets the selector matches are reconciled");
    }
    let (tdsets, tdset_stream) = tdset_watch(
        api_for(&watch_client, &opts.namespace),
        watches::TDSetHooks {
            index: index.clone(),
            calendars: calendar_index.clone(),
            statuses: statuses.clone(),
            wakeups: wakeups.clone(),
            shard: shard.clone(),
        },
        stream,
    );
    let (deployments, deploy_stream) =
        owned_watch::<Deployment>(api_for(&watch_client, &opts.namespace), stream);
    let (services, svc_stream) =
        owned_watch::<Service>(api_for(&watch_client, &opts.namespace), stream);
    let (hpas, hpa_stream) = hpa_watch(api_for(&watch_client, &opts.namespace), stream);
    let (calendar_store, calendar_stream) =
        calendars::calendar_watch(kube::Api::all(watch_client.clone()));
    metrics.set_tdset_store(Some(tdsets.clone()));

    let priority = Arc::new(bookkeeping::Priority::default());
    let lane = bookkeeping::Lane::start(
        Arc::new(bookkeeping::KubeSink {
            client: client.clone(),
            instance: opts.instance.clone(),
        }),
        priority.clone(),
        statuses.clone(),
        metrics.clone(),
    );
    let ctx = Arc::new(Context {
        client: client.clone(),
        clock,
        lane: lane.clone(),
        priority,
        metrics: metrics.clone(),
        deployments: deployments.clone(),
        services: services.clone(),
        hpas: hpas.clone(),
        discovery: discovery::Discovery::new(client.clone()),
        statuses,
        own_writes: own_writes.clone(),
        synced: Arc::new(AtomicBool::new(false)),
        wakeups: wakeups.clone(),
        index: index.clone(),
        calendars: calendar_store.clone(),
        failures: Default::default(),
        contests: Default::default(),
        pod_forms: opts.pod_forms.clone(),
        shard: shard.clone(),
        tdsets: tdsets.clone(),
    });
    let letting_go = shard.clone().map(|s| {
        tokio::spawn(shards::let_go_loop(
            s,
            client.clone(),
            lane.clone(),
            ctx.statuses.clone(),
            wakeups.clone(),
            tdsets.clone(),
            metrics.clone(),
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
        tokio::spawn(async move {
            let synced =
                |r: Option<Result<(), reflector::store::WriterDropped>>| matches!(r, Some(Ok(())));
            loop {
                if synced(t.wait_until_ready().now_or_never())
                    && synced(d.wait_until_ready().now_or_never())
                    && synced(s.wait_until_ready().now_or_never())
                    && synced(h.wait_until_ready().now_or_never())
                    && synced(c.wait_until_ready().now_or_never())
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
        ))
    });
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
            if let Some(v) = scale::hpa_view(&h) {
                out.extend(index.lookup(&ns, v.target.group(), &v.target.kind, &v.target.name));
            }
            out
        }
    };
    // A TDSet's own changes reach the controller as wakeups (see wakeups.rs): a start against
    // 10 000 TDSets would otherwise queue all of them in kube-runtime at once.
    let on_calendar = calendars::on_calendar(&calendar_index, &wakeups);
    let drive_tdset_watch = tdset_stream.filter_map(|_| futures::future::ready(None::<TDSetRef>));
    let controller = Controller::for_stream(futures::stream::empty(), tdsets)
        .reconcile_on(drive_tdset_watch)
        .reconcile_on({
            let affected = on_owned_deployment(&index, &hpas);
            // Watch errors are retried by the watch's own backoff; only changes trigger.
            deploy_stream
                .filter_map(|d| futures::future::ready(d.ok()))
                .inspect(move |d| {
                    let key = OwnWrites::key(&d.namespace().unwrap_or_default(), &d.name_any());
                    own_writes.seen(&key, d.meta().resource_version.as_deref());
                })
                .flat_map(move |d| futures::stream::iter(affected(d)))
        })
        .reconcile_on(wakeups.triggers())
        .owns_stream(svc_stream)
        .watches_stream(hpa_stream, on_hpa)
        .watches_stream(calendar_stream, on_calendar)
        .watches_stream(
            target_watch::<Deployment>(api_for(&watch_client, &opts.namespace), stream),
            on_target(&index, &hpas),
        )
        .watches_stream(
            target_watch::<StatefulSet>(api_for(&watch_client, &opts.namespace), stream),
            on_target(&index, &hpas),
        )
        .watches_stream(
            target_watch::<ReplicaSet>(api_for(&watch_client, &opts.namespace), stream),
            on_target(&index, &hpas),
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
    if let Some(usage) = usage {
        usage.abort();
    }
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

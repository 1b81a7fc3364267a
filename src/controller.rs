//! The reconciler: the one place that talks to the API server.
//!
//! Each reconcile evaluates the schedule at `ctx.clock.now()`, makes the owned Deployment (and
//! Service) match, writes status, and requeues at the next transition. It reads the owned
//! objects from caches that may be stale, so every write is guarded: creates fail on an
//! existing object instead of overwriting it, and applies carry the observed uid as a
//! precondition, so an object someone else created meanwhile is never written to.

use std::fmt::Debug;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{FutureExt, StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tracing::{Instrument, debug, info, info_span, warn};

use crate::api::{TDSet, TDSetStatus};
use crate::cache::{Cached, Prune, StatusMemo};
use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::http::Health;
use crate::resources::{self, FIELD_MANAGER};
use crate::schedule::{Evaluation, Schedule};
use crate::status::{self, DEGRADED, Inputs, Problem};
use crate::telemetry::Metrics;

/// Everything a reconcile needs, shared by all of them.
pub struct Context {
    pub client: Client,
    pub clock: Arc<dyn Clock>,
    pub events: EventPublisher,
    pub metrics: Arc<Metrics>,
    /// Owned Deployments and Services (label-selected), pruned and compact.
    pub deployments: Store<Cached<Deployment>>,
    pub services: Store<Cached<Service>>,
    pub statuses: StatusMemo,
}

/// What happened to an owned object in this reconcile.
#[derive(Debug, PartialEq, Eq)]
enum Change {
    Unchanged,
    Created,
    Updated,
}

#[derive(Clone, Debug)]
pub struct RunOptions {
    /// Watch only this namespace; all when `None`.
    pub namespace: Option<String>,
    pub concurrency: u16,
    /// Identity in Events (and the lease holder).
    pub instance: String,
}

pub async fn reconcile(tdset: Arc<TDSet>, ctx: Arc<Context>) -> Result<Action> {
    let started = Instant::now();
    let span = info_span!("reconcile", tdset = %format!("{}/{}", tdset.namespace().unwrap_or_default(), tdset.name_any()));
    let result = reconcile_inner(&tdset, &ctx).instrument(span).await;
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
            // Best effort: make the failure visible on the TDSet, then let the error policy back off.
            let problem = Problem::ApiError(e.to_string());
            if let Err(e2) = report_problem(&tdset, &ctx, &problem, None).await {
                debug!(error = %e2, "could not record the reconcile error in status");
            }
        }
    }
    result
}

/// Backs off on errors: one broken TDSet is retried on its own schedule and never blocks others.
pub fn error_policy(tdset: Arc<TDSet>, error: &Error, _ctx: Arc<Context>) -> Action {
    warn!(tdset = %format!("{}/{}", tdset.namespace().unwrap_or_default(), tdset.name_any()), %error, "reconcile failed; retrying in 15s");
    Action::requeue(Duration::from_secs(15))
}

async fn reconcile_inner(tdset: &TDSet, ctx: &Context) -> Result<Action> {
    if tdset.meta().deletion_timestamp.is_some() {
        // The garbage collector removes the owned objects; nothing to do.
        return Ok(Action::await_change());
    }
    let ns = tdset
        .namespace()
        .ok_or(Error::MissingField("metadata.namespace"))?;
    let name = tdset.name_any();
    let now = ctx.clock.now();
    let interval = tdset.spec.check_interval();
    let cached_deploy = ctx
        .deployments
        .get(&ObjectRef::new(&name).within(&ns))
        .map(|c| c.object())
        .transpose()?;

    let schedule = match Schedule::compile(&tdset.spec) {
        Ok(s) => s,
        Err(errors) => {
            let message = format!(
                "{}; the Deployment is left as it is until the spec is fixed",
                errors
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; ")
            );
            warn!(%message, "invalid spec");
            report_problem(
                tdset,
                ctx,
                &Problem::InvalidSpec(message),
                cached_deploy.as_ref(),
            )
            .await?;
            return Ok(Action::requeue(interval));
        }
    };
    let eval = schedule.evaluate(now);
    let next = schedule.next_transition(now);
    let warnings = schedule.warnings();

    let desired = resources::desired_deployment(tdset, eval.replicas)?;
    let deploy_api: Api<Deployment> = Api::namespaced(ctx.client.clone(), &ns);
    let (deployment, problem) = match ensure(
        ctx,
        tdset,
        &deploy_api,
        "deployments",
        desired,
        cached_deploy.as_ref(),
    )
    .await
    {
        Ok((d, change)) => {
            record_deployment_change(tdset, ctx, &eval, cached_deploy.as_ref(), &change).await;
            (Some(d), None)
        }
        Err(e @ Error::ForeignObject { .. }) => (None, Some(foreign_problem(&e))),
        Err(e) => return Err(e),
    };

    let problem = match (problem, ensure_service(tdset, ctx, &ns).await) {
        (Some(p), _) => Some(p),
        (None, Err(e @ Error::ForeignObject { .. })) => Some(foreign_problem(&e)),
        (None, Err(e)) => return Err(e),
        (None, Ok(())) => None,
    };

    let previous = ctx.statuses.current(tdset);
    let new_status = status::next_status(&Inputs {
        previous: previous.as_ref(),
        generation: tdset.meta().generation,
        evaluation: Some(&eval),
        next: next.as_ref(),
        warnings: &warnings,
        deployment: deployment.as_ref(),
        problem: problem.as_ref(),
        now,
    });
    write_status(tdset, ctx, previous.as_ref(), new_status).await?;

    let wait = match next {
        Some(n) => (n.at - now).to_std().unwrap_or_default().min(interval),
        None => interval,
    };
    debug!(replicas = eval.replicas, window = ?eval.window_label, next = ?next.map(|n| n.at), ?wait, "reconciled");
    Ok(Action::requeue(wait))
}

/// The Degraded problem for an object of the owned name that belongs to someone else.
fn foreign_problem(e: &Error) -> Problem {
    Problem::ForeignObject(format!(
        "{e}; the operator will not adopt, scale or patch it. Delete or rename it, or rename the TDSet"
    ))
}

/// Makes an owned object match `desired`, writing only when it differs. Never writes to an
/// object of that name that this TDSet does not control.
async fn ensure<K>(
    ctx: &Context,
    tdset: &TDSet,
    api: &Api<K>,
    resource: &'static str,
    mut desired: K,
    cached: Option<&K>,
) -> Result<(K, Change)>
where
    K: Resource<DynamicType = ()>
        + k8s_openapi::Resource
        + Clone
        + Debug
        + Serialize
        + DeserializeOwned,
{
    let name = desired.name_any();
    let ns = desired.namespace().unwrap_or_default();
    let foreign = || Error::ForeignObject {
        kind: K::KIND,
        namespace: ns.clone(),
        name: name.clone(),
    };
    let observed = match cached {
        Some(o) => o.clone(),
        None => {
            let pp = PostParams {
                field_manager: Some(FIELD_MANAGER.into()),
                ..PostParams::default()
            };
            ctx.metrics.write(resource, "create");
            match api.create(&pp, &desired).await {
                Ok(created) => return Ok((created, Change::Created)),
                // The cache had not seen it: read the real thing and decide from that.
                Err(kube::Error::Api(s)) if s.code == 409 => api.get(&name).await.map_err(
                    Error::kube(format!("reading existing {resource} {ns}/{name}")),
                )?,
                Err(e) => return Err(Error::kube(format!("creating {resource} {ns}/{name}"))(e)),
            }
        }
    };
    if !resources::is_owned_by(&observed, tdset) {
        return Err(foreign());
    }
    if resources::is_satisfied_by(&desired, &observed) {
        return Ok((observed, Change::Unchanged));
    }
    let uid = observed.meta().uid.clone();
    if !resources::only_replicas_differ(&desired, &observed) {
        // A scale removes nothing, so only other changes need the fields a create left under
        // an Update entry (see `resources::handed_over`). Deferring it to here spares a write
        // per created object; spec changes are rare.
        hand_over_to_apply(ctx, api, resource, &name, uid.as_deref()).await?;
    }
    // The uid turns the apply into "only if it is still the object I looked at".
    desired.meta_mut().uid = uid;
    ctx.metrics.write(resource, "apply");
    let applied = api
        .patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&desired),
        )
        .await
        .map_err(Error::kube(format!("applying {resource} {ns}/{name}")))?;
    Ok((applied, Change::Updated))
}

/// Hands the fields a create left under our Update entry to our Apply entry, if there is
/// such an entry. Reads the live object (the caches drop managedFields) and patches only if
/// neither its uid nor its resourceVersion changed meanwhile, so no other manager's entry is
/// overwritten; retried a few times when another write got in between.
async fn hand_over_to_apply<K>(
    ctx: &Context,
    api: &Api<K>,
    resource: &'static str,
    name: &str,
    uid: Option<&str>,
) -> Result<()>
where
    K: Resource<DynamicType = ()> + Clone + Debug + Serialize + DeserializeOwned,
{
    const ATTEMPTS: usize = 3;
    for attempt in 1..=ATTEMPTS {
        let live = api.get(name).await.map_err(Error::kube(format!(
            "reading {resource} {name} to hand its fields to the apply manager"
        )))?;
        let meta = live.meta();
        if meta.uid.as_deref() != uid {
            // Replaced meanwhile: the uid-guarded apply that follows refuses it.
            return Ok(());
        }
        let Some(fields) = meta
            .managed_fields
            .as_deref()
            .and_then(resources::handed_over)
        else {
            return Ok(());
        };
        let patch: json_patch::Patch = serde_json::from_value(serde_json::json!([
            {"op": "test", "path": "/metadata/uid", "value": meta.uid},
            {"op": "test", "path": "/metadata/resourceVersion", "value": meta.resource_version},
            {"op": "replace", "path": "/metadata/managedFields", "value": fields},
        ]))
        .map_err(|source| Error::Serialize {
            what: "managedFields patch",
            source,
        })?;
        ctx.metrics.write(resource, "patch");
        match api
            .patch(name, &PatchParams::default(), &Patch::Json::<()>(patch))
            .await
        {
            Ok(_) => return Ok(()),
            // A failed test op (422) or a conflict (409): someone wrote in between; look again.
            Err(kube::Error::Api(s)) if (s.code == 409 || s.code == 422) && attempt < ATTEMPTS => {
                debug!(
                    resource,
                    name, attempt, "object changed during the hand-over; retrying"
                );
            }
            Err(e) => {
                return Err(Error::kube(format!(
                    "handing {resource} {name} to the apply manager"
                ))(e));
            }
        }
    }
    Ok(())
}

async fn ensure_service(tdset: &TDSet, ctx: &Context, ns: &str) -> Result<()> {
    let api: Api<Service> = Api::namespaced(ctx.client.clone(), ns);
    let cached = ctx
        .services
        .get(&ObjectRef::new(&tdset.name_any()).within(ns))
        .map(|c| c.object())
        .transpose()?;
    match resources::desired_service(tdset)? {
        Some(desired) => {
            let (_, change) =
                ensure(ctx, tdset, &api, "services", desired, cached.as_ref()).await?;
            if change != Change::Unchanged {
                let verb = if change == Change::Created {
                    "created"
                } else {
                    "updated"
                };
                publish(
                    ctx,
                    tdset,
                    EventType::Normal,
                    "ServiceApplied",
                    format!("{verb} Service {ns}/{}", tdset.name_any()),
                )
                .await;
            }
        }
        // spec.service was removed: delete the Service only if it is ours, and only that one.
        None => {
            if let Some(svc) = cached.filter(|s| resources::is_owned_by(s, tdset)) {
                let dp = DeleteParams {
                    preconditions: Some(Preconditions {
                        uid: svc.metadata.uid.clone(),
                        resource_version: None,
                    }),
                    ..DeleteParams::default()
                };
                ctx.metrics.write("services", "delete");
                match api.delete(&svc.name_any(), &dp).await {
                    Ok(_) | Err(kube::Error::Api(_)) => {}
                    Err(e) => {
                        return Err(Error::kube(format!(
                            "deleting Service {ns}/{}",
                            svc.name_any()
                        ))(e));
                    }
                }
                publish(
                    ctx,
                    tdset,
                    EventType::Normal,
                    "ServiceDeleted",
                    format!(
                        "deleted Service {ns}/{} (spec.service removed)",
                        svc.name_any()
                    ),
                )
                .await;
            }
        }
    }
    Ok(())
}

fn why(eval: &Evaluation) -> String {
    match &eval.window_label {
        Some(w) => format!("window {w} is active"),
        None => "no window is active, defaultReplica applies".into(),
    }
}

async fn record_deployment_change(
    tdset: &TDSet,
    ctx: &Context,
    eval: &Evaluation,
    before: Option<&Deployment>,
    change: &Change,
) {
    let name = format!(
        "{}/{}",
        tdset.namespace().unwrap_or_default(),
        tdset.name_any()
    );
    match change {
        Change::Unchanged => {}
        Change::Created => {
            info!(replicas = eval.replicas, window = ?eval.window_label, "created Deployment");
            let note = format!(
                "created Deployment {name} with {} replicas ({})",
                eval.replicas,
                why(eval)
            );
            publish(ctx, tdset, EventType::Normal, "Created", note).await;
        }
        Change::Updated => {
            let from = before
                .and_then(|d| d.spec.as_ref())
                .and_then(|s| s.replicas);
            let scaled = from.filter(|&f| f != eval.replicas);
            if let Some(from) = scaled {
                let (direction, reason) = if eval.replicas > from {
                    ("up", "ScaledUp")
                } else {
                    ("down", "ScaledDown")
                };
                ctx.metrics
                    .scale_operations
                    .with_label_values(&[direction])
                    .inc();
                info!(from, to = eval.replicas, window = ?eval.window_label, "scaled Deployment");
                let note = format!(
                    "scaled Deployment {name} from {from} to {} replicas: {}",
                    eval.replicas,
                    why(eval)
                );
                publish(ctx, tdset, EventType::Normal, reason, note).await;
            }
            let what = template_changes(before, tdset);
            if what.is_some() || scaled.is_none() {
                let what =
                    what.unwrap_or_else(|| "restored labels, selector or owner reference".into());
                info!(changes = %what, "updated Deployment to match the TDSet");
                publish(
                    ctx,
                    tdset,
                    EventType::Normal,
                    "Updated",
                    format!("updated Deployment {name}: {what}"),
                )
                .await;
            }
        }
    }
}

/// "image a -> b, port 80 -> 8080": what an update changed in the pod template, for Events.
fn template_changes(before: Option<&Deployment>, tdset: &TDSet) -> Option<String> {
    let container = before
        .and_then(|d| d.spec.as_ref())
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|p| p.containers.first());
    let old_image = container.and_then(|c| c.image.clone()).unwrap_or_default();
    let old_port = container
        .and_then(|c| c.ports.as_ref())
        .and_then(|p| p.first())
        .map(|p| p.container_port);
    let mut parts = Vec::new();
    if old_image != tdset.spec.container.image {
        parts.push(format!(
            "image {old_image} -> {}",
            tdset.spec.container.image
        ));
    }
    if old_port != Some(tdset.spec.container.port) {
        parts.push(format!(
            "port {} -> {}",
            old_port.map_or("-".into(), |p| p.to_string()),
            tdset.spec.container.port
        ));
    }
    (!parts.is_empty()).then(|| parts.join(", "))
}

/// Sets Degraded (and a Warning Event when the problem is new) without touching owned objects.
async fn report_problem(
    tdset: &TDSet,
    ctx: &Context,
    problem: &Problem,
    deployment: Option<&Deployment>,
) -> Result<()> {
    let previous = ctx.statuses.current(tdset);
    let new_status = status::next_status(&Inputs {
        previous: previous.as_ref(),
        generation: tdset.meta().generation,
        evaluation: None,
        next: None,
        warnings: &[],
        deployment,
        problem: Some(problem),
        now: ctx.clock.now(),
    });
    write_status(tdset, ctx, previous.as_ref(), new_status).await
}

/// Patches status only when it differs from `previous` (from `StatusMemo::current`), and
/// publishes a Warning when Degraded's reason or message changes (so a persisting problem is
/// reported once, not every reconcile).
async fn write_status(
    tdset: &TDSet,
    ctx: &Context,
    previous: Option<&TDSetStatus>,
    new: TDSetStatus,
) -> Result<()> {
    if previous == Some(&new) {
        return Ok(());
    }
    let old_degraded = status::find(previous, DEGRADED)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()));
    let new_degraded = status::find(Some(&new), DEGRADED)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()));
    debug!(old = ?previous, new = ?new, "status differs; patching");
    let ns = tdset.namespace().unwrap_or_default();
    let api: Api<TDSet> = Api::namespaced(ctx.client.clone(), &ns);
    let body = serde_json::json!({"apiVersion": "schedule.rs/v1", "kind": "TDSet", "status": new});
    ctx.metrics.write("tdsets/status", "apply");
    api.patch_status(
        &tdset.name_any(),
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&body),
    )
    .await
    .map_err(Error::kube(format!(
        "patching status of TDSet {ns}/{}",
        tdset.name_any()
    )))?;
    ctx.statuses.record(tdset, new);
    if old_degraded != new_degraded
        && let Some((state, reason, message)) = new_degraded
        && (state == "True" || reason == "OverlappingWindows")
    {
        publish(ctx, tdset, EventType::Warning, &reason, message).await;
    }
    Ok(())
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum EventType {
    Normal,
    Warning,
}

/// Writes Events (events.k8s.io/v1) for TDSets. Each is created once: the operator emits only
/// on real changes, so kube's Recorder, which keeps every Event for six minutes to aggregate
/// repeats and scans that cache on each publish, cost memory in proportion to the TDSets and
/// bought nothing.
///
/// Events go through a bounded queue written by a fixed number of concurrent requests: a
/// reconcile does not wait for its Event to be written, but a burst (thousands of TDSets
/// created at once) cannot open thousands of requests to the API server either.
#[derive(Clone)]
pub struct EventPublisher {
    tx: tokio::sync::mpsc::Sender<Event>,
}

const EVENT_QUEUE: usize = 256;
const EVENT_WRITERS: usize = 16;

impl EventPublisher {
    /// Starts the writers; they stop when the last publisher is dropped.
    pub fn start(client: Client, instance: String) -> EventPublisher {
        let (tx, rx) = tokio::sync::mpsc::channel::<Event>(EVENT_QUEUE);
        let events =
            futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|e| (e, rx)) });
        tokio::spawn(events.for_each_concurrent(EVENT_WRITERS, move |mut event| {
            let client = client.clone();
            event.reporting_instance = Some(instance.clone());
            async move {
                let ns = event
                    .metadata
                    .namespace
                    .clone()
                    .unwrap_or_else(|| "default".into());
                if let Err(e) = Api::<Event>::namespaced(client, &ns)
                    .create(&PostParams::default(), &event)
                    .await
                {
                    warn!(error = %e, reason = ?event.reason, "could not publish Event");
                }
            }
        }));
        EventPublisher { tx }
    }
}

/// Queues an Event about a TDSet. Waits only when the queue is full.
async fn publish(ctx: &Context, tdset: &TDSet, type_: EventType, reason: &str, note: String) {
    let regarding = tdset.object_ref(&());
    let ns = regarding
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    let event = Event {
        metadata: ObjectMeta {
            // A trailing "-" is the one separator generateName allows.
            generate_name: Some(format!("{}-", regarding.name.as_deref().unwrap_or("tdset"))),
            namespace: Some(ns),
            ..ObjectMeta::default()
        },
        event_time: Some(MicroTime(k8s_openapi::jiff::Timestamp::now())),
        type_: Some(format!("{type_:?}")),
        reason: Some(reason.into()),
        action: Some("Reconcile".into()),
        note: Some(truncate(note, 1000)),
        regarding: Some(regarding),
        reporting_controller: Some(FIELD_MANAGER.into()),
        ..Event::default()
    };
    ctx.metrics.write("events", "create");
    if ctx.events.tx.send(event).await.is_err() {
        warn!(reason, "Event writers have stopped; Event dropped");
    }
}

fn truncate(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut cut = max;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
    }
    s
}

/// A watch of TDSets whose cached objects are pruned to what the operator reads.
fn tdset_watch(
    api: Api<TDSet>,
) -> (
    Store<TDSet>,
    impl futures::Stream<Item = Result<TDSet, watcher::Error>> + Send,
) {
    let (reader, writer) = reflector::store();
    let stream = watcher(api, watcher::Config::default())
        .backoff(api_backoff())
        .modify(|o: &mut TDSet| o.prune())
        .reflect(writer)
        .touched_objects();
    (reader, stream)
}

/// A watch of the owned objects of kind `K` (by label), cached compactly (see `Cached`).
fn owned_watch<K>(
    api: Api<K>,
) -> (
    Store<Cached<K>>,
    impl futures::Stream<Item = Result<Cached<K>, watcher::Error>> + Send,
)
where
    K: Resource<DynamicType = ()>
        + Prune
        + Clone
        + Debug
        + Serialize
        + DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let (reader, writer) = reflector::store();
    let owned = watcher::Config::default()
        .labels(&format!("{}={FIELD_MANAGER}", resources::MANAGED_BY_LABEL));
    let stream = watcher(api, owned)
        .backoff(api_backoff())
        .map_ok(|event| match event {
            watcher::Event::Apply(o) => watcher::Event::Apply(Cached::new(o)),
            watcher::Event::Delete(o) => watcher::Event::Delete(Cached::new(o)),
            watcher::Event::InitApply(o) => watcher::Event::InitApply(Cached::new(o)),
            watcher::Event::Init => watcher::Event::Init,
            watcher::Event::InitDone => watcher::Event::InitDone,
        })
        .reflect(writer)
        .touched_objects();
    (reader, stream)
}

/// Retries against an unreachable API server every few seconds at most: kube's default grows
/// to 30 s per layer, and the watch and the controller each back off, so an operator could sit
/// idle for a minute after the API server was already back.
#[derive(Clone, Copy, Debug)]
struct ApiBackoff {
    next: Duration,
}

impl ApiBackoff {
    const MIN: Duration = Duration::from_millis(250);
    const MAX: Duration = Duration::from_secs(5);
}

impl Iterator for ApiBackoff {
    type Item = Duration;
    fn next(&mut self) -> Option<Duration> {
        let now = self.next;
        self.next = (self.next * 2).min(Self::MAX);
        Some(now)
    }
}

impl kube::runtime::utils::Backoff for ApiBackoff {
    fn reset(&mut self) {
        self.next = Self::MIN;
    }
}

fn api_backoff() -> ApiBackoff {
    ApiBackoff {
        next: ApiBackoff::MIN,
    }
}

fn api_for<K: Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>>(
    client: &Client,
    ns: &Option<String>,
) -> Api<K> {
    match ns {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// Runs the controller until `shutdown` resolves; in-flight reconciles finish first.
pub async fn run_controller(
    client: Client,
    opts: &RunOptions,
    clock: Arc<dyn Clock>,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) -> Result<()> {
    let (tdsets, tdset_stream) = tdset_watch(api_for(&client, &opts.namespace));
    let (deployments, deploy_stream) = owned_watch::<Deployment>(api_for(&client, &opts.namespace));
    let (services, svc_stream) = owned_watch::<Service>(api_for(&client, &opts.namespace));
    metrics.set_tdset_store(Some(tdsets.clone()));

    let ctx = Arc::new(Context {
        client: client.clone(),
        clock,
        events: EventPublisher::start(client.clone(), opts.instance.clone()),
        metrics: metrics.clone(),
        deployments: deployments.clone(),
        services: services.clone(),
        statuses: StatusMemo::default(),
    });

    // Ready once all three caches hold a full list. Polled, not awaited: a store's readiness
    // wakes only its last waiter, and the controller itself waits on the TDSet store.
    let readiness = {
        let (t, d, s, health) = (
            tdsets.clone(),
            deployments.clone(),
            services.clone(),
            health.clone(),
        );
        tokio::spawn(async move {
            let synced =
                |r: Option<Result<(), reflector::store::WriterDropped>>| matches!(r, Some(Ok(())));
            loop {
                if synced(t.wait_until_ready().now_or_never())
                    && synced(d.wait_until_ready().now_or_never())
                    && synced(s.wait_until_ready().now_or_never())
                {
                    info!("caches synced; ready");
                    health.set_ready(true);
                    return;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };

    info!(
        namespace = opts.namespace.as_deref().unwrap_or("(all)"),
        "starting the TDSet controller"
    );
    Controller::for_stream(tdset_stream, tdsets)
        .owns_stream(deploy_stream)
        .owns_stream(svc_stream)
        .with_config(ControllerConfig::default().concurrency(opts.concurrency))
        .trigger_backoff(api_backoff())
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        .for_each(|res| async move {
            if let Err(e) = res {
                debug!(error = %e, "controller event");
            }
        })
        .await;
    readiness.abort();
    metrics.set_tdset_store(None);
    info!("controller stopped");
    Ok(())
}

/// Runs the controller, with Lease-based leader election when `lease` is set: only the
/// holder reconciles; a standby waits, ready, and takes over when the lease expires.
pub async fn run(
    client: Client,
    opts: RunOptions,
    lease: Option<LeaseOptions>,
    clock: Arc<dyn Clock>,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let shutdown = shutdown.shared();
    let Some(lease) = lease else {
        metrics.leader.set(1);
        return run_controller(client, &opts, clock, metrics, health, shutdown).await;
    };
    let manager = kube_lease_manager::LeaseManagerBuilder::new(client.clone(), &lease.name)
        .with_namespace(&lease.namespace)
        .with_identity(&opts.instance)
        .with_duration(lease.duration_seconds)
        .with_grace(lease.grace_seconds)
        .build()
        .await
        .map_err(|e| {
            Error::Config(format!(
                "leader election: cannot use Lease {}/{}: {e}",
                lease.namespace, lease.name
            ))
        })?;
    let (mut leading, task) = manager.watch().await;
    health.set_ready(true);
    info!(lease = %format!("{}/{}", lease.namespace, lease.name), identity = %opts.instance, "waiting for the leader lease");
    loop {
        if !*leading.borrow_and_update() {
            tokio::select! {
                changed = leading.changed() => if changed.is_err() { break } else { continue },
                _ = shutdown.clone() => break,
            }
        }
        info!("acquired the leader lease; reconciling");
        metrics.leader.set(1);
        let mut watch = leading.clone();
        let lost = async move {
            while *watch.borrow_and_update() {
                if watch.changed().await.is_err() {
                    break;
                }
            }
        };
        let stop = {
            let shutdown = shutdown.clone();
            async move {
                tokio::select! { _ = lost => {}, _ = shutdown => {} }
            }
        };
        run_controller(
            client.clone(),
            &opts,
            clock.clone(),
            metrics.clone(),
            health.clone(),
            stop,
        )
        .await?;
        metrics.leader.set(0);
        health.set_ready(true);
        if shutdown.clone().now_or_never().is_some() {
            break;
        }
        warn!("lost the leader lease; standing by");
    }
    drop(leading);
    match task.await {
        Ok(Ok(manager)) => {
            if let Err(e) = manager.release().await {
                warn!(error = %e, "could not release the leader lease; it expires on its own");
            } else {
                info!("released the leader lease");
            }
        }
        Ok(Err(e)) => warn!(error = %e, "leader election ended with an error"),
        Err(e) => warn!(error = %e, "leader election task failed"),
    }
    Ok(())
}

#[derive(Clone, Debug)]
pub struct LeaseOptions {
    pub name: String,
    pub namespace: String,
    pub duration_seconds: u64,
    pub grace_seconds: u64,
}

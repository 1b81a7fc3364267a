//! Referenced targets: reading and writing an existing object's replica count through its
//! `/scale` subresource, and an HPA's `minReplicas`. The operator never creates, owns,
//! relabels or deletes a target; it writes `spec.replicas` (or `spec.minReplicas`) alone,
//! under its own field manager, and only when the value differs.

use std::time::Duration;

use futures::FutureExt;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use kube::ResourceExt;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use tracing::debug;

use super::claims;
use super::context::{Context, Outcome, TDSetRef, Write};
use super::discovery::Resolved;
use super::events::{Events, record_scale};
use crate::api::{ScaleTargetRef, TDSet, TDSetStatus, TargetStatus};
use crate::error::{Error, Result};
use crate::memo::OwnWrites;
use crate::schedule::Evaluation;
use crate::status::{Missing, Notice, Observed, Problem, reason};
use crate::workload::contest::{self, Verdict};
use crate::workload::group;
use crate::workload::hpa::{self, HpaView};
use crate::workload::owned::FIELD_MANAGER;
use crate::workload::savings::{Requests, Saved};
use crate::workload::target::{self, ScaleView};

/// Kinds whose changes a watch reports within seconds; other kinds are re-read at
/// `intervalMint`, or sooner while they are missing.
pub(super) fn is_watched(r: &ScaleTargetRef) -> bool {
    r.is_hpa()
        || (r.group() == "apps"
            && matches!(r.kind.as_str(), "Deployment" | "StatefulSet" | "ReplicaSet"))
}

/// How soon to look again for a target whose kind no watch reports, or after a permission
/// error (RBAC is not watched): one read per TDSet every 15 s, so a grant or a new object
/// takes effect within seconds, without a retry storm.
const LOOK_AGAIN: Duration = Duration::from_secs(15);

/// What a request about a target came to: its value, a problem the TDSet reports and waits
/// out (the object is gone, or RBAC forbids `verb` on `resource` + `subresource`), or an error
/// the reconcile returns (retried with backoff).
struct Request<'a> {
    verb: &'static str,
    target: &'a ScaleTargetRef,
    resource: &'a ApiResource,
    /// "/scale", or "" for the object itself.
    subresource: &'static str,
    ns: &'a str,
}

impl Request<'_> {
    fn answer<T>(&self, result: kube::Result<T>) -> Result<Result<T, Problem>> {
        let (r, ns) = (self.target, self.ns);
        let status = match result {
            Ok(v) => return Ok(Ok(v)),
            Err(kube::Error::Api(s)) => s,
            Err(e) => return Err(self.failed(e)),
        };
        if status.is_not_found() {
            return Ok(Err(Problem::TargetNotFound(format!(
                "{r} does not exist in namespace {ns}; nothing is written until it appears, and the \
                 TDSet picks it up by itself then"
            ))));
        }
        if status.is_forbidden() {
            let group = match self.resource.group.as_str() {
                "" => "\"\"".to_string(),
                g => g.to_string(),
            };
            let resource = format!("{}{}", self.resource.plural, self.subresource);
            return Ok(Err(Problem::Forbidden(format!(
                "the operator may not {verb} {resource} (apiGroup {group}) in namespace {ns}: {msg}. \
                 Grant it with a ClusterRole labelled schedule.rs/aggregate-to-tdset-operator: \"true\" \
                 (rules: apiGroups [{group}], resources [{resource}], verbs [get, patch]); see the README",
                verb = self.verb,
                msg = status.message,
            ))));
        }
        Err(self.failed(kube::Error::Api(status)))
    }

    fn failed(&self, e: kube::Error) -> Error {
        Error::kube(format!(
            "{} {}{} of {} in {}",
            self.verb, self.resource.plural, self.subresource, self.target, self.ns
        ))(e)
    }
}

/// Reads a target's replica count (and readiness, where the kind reports it). For the
/// built-in kinds the object itself is read, for its `status.readyReplicas`; others through
/// `/scale`, which every scalable kind serves the same way.
async fn read(
    ctx: &Context,
    ns: &str,
    r: &ScaleTargetRef,
    res: &Resolved,
) -> Result<Result<ScaleView, Problem>> {
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), ns, &res.resource);
    let request = |subresource| Request {
        verb: "get",
        target: r,
        resource: &res.resource,
        subresource,
        ns,
    };
    if r.group() == "apps" {
        return Ok(request("").answer(api.get(&r.name).await)?.map(|o| {
            let int = |path: &str| {
                o.data
                    .pointer(path)
                    .and_then(serde_json::Value::as_i64)
                    .map(|v| v as i32)
            };
            ScaleView {
                // The API server defaults an absent spec.replicas to 1.
                spec_replicas: int("/spec/replicas").unwrap_or(1),
                status_replicas: int("/status/replicas").unwrap_or(0),
                ready_replicas: Some(int("/status/readyReplicas").unwrap_or(0)),
                uid: o.metadata.uid.clone(),
                replicas_manager: o
                    .metadata
                    .managed_fields
                    .as_deref()
                    .and_then(|m| contest::replicas_manager(m, FIELD_MANAGER)),
                requests: o
                    .data
                    .pointer("/spec/template")
                    .map(Requests::of_template)
                    .unwrap_or_default(),
                labels: o.metadata.labels.clone().unwrap_or_default(),
                own_replicas: group::own_replicas(
                    o.annotations(),
                    int("/spec/replicas").unwrap_or(1),
                ),
            }
        }));
    }
    let view = match request("/scale").answer(api.get_scale(&r.name).await)? {
        Ok(s) => ScaleView {
            uid: s.metadata.uid,
            replicas_manager: None,
            // `/scale` has no annotations: a group's record on the object is read below, where
            // a group may hold it.
            spec_replicas: s.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0),
            own_replicas: s.spec.and_then(|s| s.replicas).unwrap_or(0),
            status_replicas: s.status.map_or(0, |s| s.replicas),
            ready_replicas: None,
            requests: Requests::default(),
            labels: Default::default(),
        },
        Err(p) => return Ok(Err(p)),
    };
    // `/scale` carries no labels; whether a group selects the target needs them, and only a
    // namespace with a group of this kind pays the extra read.
    let grouped = ctx.groups.in_namespace(ns).iter().any(|(_, e)| {
        e.kinds
            .iter()
            .any(|k| k.group() == r.group() && k.kind() == r.kind)
    });
    if !grouped {
        return Ok(Ok(view));
    }
    Ok(request("")
        .answer(api.get_metadata(&r.name).await)?
        .map(|o| ScaleView {
            own_replicas: group::own_replicas(o.annotations(), view.spec_replicas),
            labels: o.metadata.labels.unwrap_or_default(),
            ..view
        }))
}

/// Sets `spec.replicas` through `/scale`, under the operator's field manager, which then owns
/// that field and nothing else. `/scale` never creates an object.
///
/// Server-side apply for the kinds built into the API server; a JSON merge patch for custom
/// resources, whose `/scale` the API server cannot apply to (it answers "request to convert
/// CR to an invalid group/version: autoscaling/v1").
pub(super) async fn write(
    ctx: &Context,
    ns: &str,
    r: &ScaleTargetRef,
    res: &Resolved,
    replicas: i32,
) -> Result<Result<(), Problem>> {
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), ns, &res.resource);
    let built_in = matches!(r.group(), "" | "apps");
    ctx.metrics.write(
        &format!("{}/scale", res.resource.plural),
        if built_in { "apply" } else { "patch" },
    );
    let body = target::scale_body(&r.name, replicas);
    let sent = if built_in {
        let pp = PatchParams::apply(FIELD_MANAGER).force();
        api.patch_scale(&r.name, &pp, &Patch::Apply(&body)).await
    } else {
        let pp = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PatchParams::default()
        };
        let merge = serde_json::json!({"spec": {"replicas": replicas}});
        api.patch_scale(&r.name, &pp, &Patch::Merge(&merge)).await
    };
    let request = Request {
        verb: "patch",
        target: r,
        resource: &res.resource,
        subresource: "/scale",
        ns,
    };
    let produced = sent
        .as_ref()
        .ok()
        .and_then(|s| s.metadata.resource_version.clone());
    let answer = request.answer(sent)?;
    if answer.is_ok() {
        // Its echo through the target watch is then known for ours (see `on_target`).
        let key = OwnWrites::target_key(ns, r.group(), &r.kind, &r.name);
        ctx.own_writes
            .record(&key, OwnWrites::fingerprint(&replicas), produced.as_deref());
    }
    Ok(answer.map(|_| ()))
}

/// Resolves and reads a target, as one step: `Ok(Err)` is a problem to report.
pub(super) async fn resolve_and_read(
    ctx: &Context,
    ns: &str,
    r: &ScaleTargetRef,
) -> Result<Result<(Resolved, ScaleView), Problem>> {
    let res = match ctx.discovery.resolve(r).await? {
        Ok(res) => res,
        Err(p) => return Ok(Err(p)),
    };
    if !res.has_scale {
        return Ok(Err(Problem::ScaleNotSupported(format!(
            "{} {} has no /scale subresource, so the operator cannot set its replicas; \
             target a Deployment, StatefulSet, ReplicaSet, HorizontalPodAutoscaler or a custom \
             resource whose CRD declares subresources.scale",
            r.api_version, r.kind
        ))));
    }
    Ok(read(ctx, ns, r, &res).await?.map(|view| (res, view)))
}

/// The HPA (first by name) that scales `r`, from the cache.
pub(super) fn hpa_scaling(ctx: &Context, ns: &str, r: &ScaleTargetRef) -> Option<String> {
    target::conflicting_hpa(r, &hpas_in(ctx, ns)).map(|h| h.name.clone())
}

/// The HPAs of a namespace, from the cache.
fn hpas_in(ctx: &Context, ns: &str) -> Vec<HpaView> {
    ctx.hpas
        .state()
        .iter()
        .filter(|h| h.namespace().as_deref() == Some(ns))
        .filter_map(|h| hpa_view(h))
        .collect()
}

pub(super) fn hpa_view(h: &HorizontalPodAutoscaler) -> Option<HpaView> {
    let spec = h.spec.as_ref()?;
    Some(HpaView {
        name: h.name_any(),
        min_replicas: spec.min_replicas,
        max_replicas: spec.max_replicas,
        target: ScaleTargetRef {
            api_version: spec
                .scale_target_ref
                .api_version
                .clone()
                .unwrap_or_default(),
            kind: spec.scale_target_ref.kind.clone(),
            name: spec.scale_target_ref.name.clone(),
        },
        current_replicas: h.status.as_ref().and_then(|s| s.current_replicas),
        own_min: group::own_floor(h.annotations(), spec.min_replicas.unwrap_or(1)),
    })
}

/// The target as status records it, and whether its original count is durable: already in
/// the TDSet's status in the API, for this very object (same uid), before any write of ours.
pub(super) struct Record {
    pub status: TargetStatus,
    pub durable: bool,
}

/// What status says about the target. The original count is kept from the first takeover
/// for as long as the TDSet points at the same object. Status is the only place it is
/// remembered, so before recording a new one the TDSet is read live: a freshly started
/// operator may list a revision from before the status that recorded it, and would otherwise
/// take the count it set itself for the original. `observed` is the count to take for the
/// original if none is recorded (the field's value now, or the own count a group recorded on
/// the object it held) and the object's uid.
async fn target_status(
    tdset: &TDSet,
    ctx: &Context,
    ns: &str,
    r: &ScaleTargetRef,
    field: &str,
    observed: Option<(i32, Option<&str>)>,
) -> Result<Record> {
    let uid = observed.and_then(|(_, uid)| uid);
    let same = |t: &TargetStatus| {
        t.names(r)
            && t.field == field
            && match (t.uid.as_deref(), uid) {
                (Some(recorded), Some(seen)) => recorded == seen,
                _ => true,
            }
    };
    let recorded = |status: Option<TDSetStatus>| {
        status
            .and_then(|s| s.target)
            .filter(|t| same(t) && t.original_replicas.is_some())
    };
    // A record only queued in the lane is known, not durable: a crash loses it.
    let mut found = recorded(ctx.statuses.durable(tdset));
    if found.is_none() {
        let live = Api::<TDSet>::namespaced(ctx.client.clone(), ns)
            .get(&tdset.name_any())
            .await
            .map_err(Error::kube(format!(
                "reading TDSet {ns}/{}",
                tdset.name_any()
            )))?;
        found = recorded(live.status);
    }
    let queued = recorded(ctx.statuses.current(tdset));
    Ok(match (found, queued) {
        (Some(t), _) => Record {
            status: TargetStatus {
                uid: t.uid.clone().or(uid.map(String::from)),
                ..t
            },
            durable: true,
        },
        // Recorded before this operator changed anything, not yet written: still the original.
        (None, Some(t)) => Record {
            status: TargetStatus {
                uid: t.uid.clone().or(uid.map(String::from)),
                ..t
            },
            durable: false,
        },
        (None, None) => Record {
            status: TargetStatus {
                api_version: r.api_version.clone(),
                kind: r.kind.clone(),
                name: r.name.clone(),
                uid: uid.map(String::from),
                field: field.into(),
                original_replicas: observed.map(|(count, _)| count),
            },
            durable: false,
        },
    })
}

/// Makes the original count durable before the first write that changes the field, with the
/// count this TDSet sets (`desiredReplicas`): an older claim taking the target over later
/// takes that original for the own count only while the target runs that count.
async fn ensure_durable(
    tdset: &TDSet,
    ctx: &Context,
    record: &mut Record,
    sets: i32,
) -> Result<()> {
    if !record.durable {
        super::apply::write_target_now(tdset, ctx, &record.status, sets).await?;
        record.durable = true;
    }
    Ok(())
}

pub(super) fn problem_outcome(p: Problem, r: &ScaleTargetRef, target: TargetStatus) -> Outcome {
    let retry = match &p {
        Problem::Forbidden(_) => Some(LOOK_AGAIN),
        _ if !is_watched(r) => Some(LOOK_AGAIN),
        _ => None,
    };
    debug!(problem = %p.message(), "target not usable");
    Outcome {
        workload: Err(Missing {
            reason: reason::TARGET_MISSING,
            message: format!("{r} cannot be read or scaled: {}", p.reason()),
        }),
        problem: Some(p),
        notices: vec![],
        target: Some(target),
        retry,
        scaled: None,
        group: None,
        failed: false,
        saved: None,
    }
}

/// `scaleTargetRef` to a kind with `/scale`: replicas follow the schedule, unless an HPA
/// scales the same object (then nothing is written: the two would fight).
pub(super) async fn reconcile_scale(
    tdset: &TDSet,
    ctx: &Context,
    ns: &str,
    r: &ScaleTargetRef,
    eval: &Evaluation,
    write_: Write,
    events: &mut Events,
) -> Result<Outcome> {
    const FIELD: &str = "spec.replicas";
    if let Some(p) = claims::held_elsewhere(tdset, ctx, ns, r) {
        return Ok(claims::held_outcome(tdset, ctx, p, r));
    }
    if ctx.hpas.wait_until_ready().now_or_never().is_none() {
        // Until the HPA cache holds a full list, a conflicting HPA could be missed: write
        // nothing yet and look again in a moment.
        return Ok(Outcome {
            workload: Err(Missing {
                reason: reason::TARGET_MISSING,
                message: "waiting for the HorizontalPodAutoscaler cache to sync".into(),
            }),
            problem: None,
            notices: vec![],
            // Keep what status remembers (the original count), as every other path does.
            target: Some(target_status(tdset, ctx, ns, r, FIELD, None).await?.status),
            retry: Some(Duration::from_secs(1)),
            scaled: None,
            group: None,
            failed: false,
            saved: None,
        });
    }
    let (res, view) = match resolve_and_read(ctx, ns, r).await? {
        Ok(found) => found,
        Err(p) => {
            return Ok(problem_outcome(
                p,
                r,
                target_status(tdset, ctx, ns, r, FIELD, None).await?.status,
            ));
        }
    };
    if let Some(p) = claims::held_by_group(tdset, ctx, ns, r, &view.labels) {
        return Ok(claims::held_outcome(tdset, ctx, p, r));
    }
    let uid = view.uid.as_deref();
    let own = claims::own_count(
        tdset,
        ctx,
        ns,
        r,
        uid,
        view.spec_replicas,
        view.own_replicas,
    );
    let mut record = target_status(tdset, ctx, ns, r, FIELD, Some((own, uid))).await?;
    if let Some(h) = target::conflicting_hpa(r, &hpas_in(ctx, ns)) {
        let p = Problem::ConflictingAutoscaler(format!(
            "HorizontalPodAutoscaler {} also scales {r}; the operator writes nothing rather than fight it. \
             Set spec.scaleTargetRef to {{apiVersion: autoscaling/v2, kind: HorizontalPodAutoscaler, name: {}}} \
             to make the schedule the HPA's floor",
            h.name, h.name
        ));
        let mut out = problem_outcome(p, r, record.status);
        out.workload = Ok(Observed::scale(&r.kind, &r.name, &view, eval.replicas));
        return Ok(out);
    }
    let mut view = view;
    let mut scaled = None;
    let mut retry = None;
    let key = format!("{ns}/{}", tdset.name_any());
    let now = tokio::time::Instant::now();
    if write_ == Write::IfDifferent
        && let Some(replicas) = target::scale_write(eval.replicas, &view)
    {
        if let Verdict::Wait(until) = ctx.contest(&key, |c| c.decide(replicas, now)) {
            // Someone keeps setting it back: put the schedule's count back later, not now.
            retry = Some(until.duration_since(now));
        } else {
            ensure_durable(tdset, ctx, &mut record, eval.replicas).await?;
            if let Err(p) = write(ctx, ns, r, &res, replicas).await? {
                return Ok(problem_outcome(p, r, record.status));
            }
            ctx.contest(&key, |c| c.wrote(replicas, now));
            events.push(record_scale(
                ctx,
                tdset,
                &format!("scaled {r}"),
                view.spec_replicas,
                replicas,
                eval,
            ));
            scaled = Some(view.spec_replicas);
            view.spec_replicas = replicas;
        }
    }
    let problem = ctx.contest(&key, |c| c.fight(now)).map(|_| {
        let who = view
            .replicas_manager
            .as_deref()
            .map_or_else(|| "another writer".to_string(), |m| format!("{m:?}"));
        Problem::ConflictingWriter(format!(
            "spec.replicas of {r} keeps being set back by {who}; the operator now puts the \
             schedule's count back less and less often instead of fighting it. Stop {who} from \
             managing spec.replicas (leave it out of its manifest, or have it ignore the field)"
        ))
    });
    let saved = record
        .status
        .original_replicas
        .map(|own| Saved::removed(own, view.spec_replicas, view.requests));
    Ok(Outcome {
        workload: Ok(Observed::scale(&r.kind, &r.name, &view, eval.replicas)),
        problem,
        notices: vec![],
        target: Some(record.status),
        retry,
        scaled,
        group: None,
        failed: false,
        saved,
    })
}

/// Reads an HPA live (a cache may lag behind the operator's own last write).
pub(super) async fn read_hpa(
    ctx: &Context,
    ns: &str,
    r: &ScaleTargetRef,
) -> Result<Result<(HpaView, Option<String>), Problem>> {
    let api: Api<HorizontalPodAutoscaler> = Api::namespaced(ctx.client.clone(), ns);
    let resource = ApiResource::erase::<HorizontalPodAutoscaler>(&());
    let request = Request {
        verb: "get",
        target: r,
        resource: &resource,
        subresource: "",
        ns,
    };
    Ok(request
        .answer(api.get(&r.name).await)?
        .and_then(|h| match hpa_view(&h) {
            Some(v) => Ok((v, h.uid())),
            None => Err(Problem::TargetNotFound(format!("{r} has no spec"))),
        }))
}

/// Sets an HPA's `spec.minReplicas` (server-side apply, guarded by the uid it was read with).
pub(super) async fn write_min_replicas(
    ctx: &Context,
    ns: &str,
    r: &ScaleTargetRef,
    uid: Option<&str>,
    min: i32,
) -> Result<Result<(), Problem>> {
    let api: Api<HorizontalPodAutoscaler> = Api::namespaced(ctx.client.clone(), ns);
    ctx.metrics.write("horizontalpodautoscalers", "apply");
    let body = hpa::min_replicas_body(&r.name, uid, min);
    match api
        .patch(
            &r.name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&body),
        )
        .await
    {
        Ok(_) => Ok(Ok(())),
        Err(kube::Error::Api(s)) if s.is_forbidden() => Ok(Err(Problem::Forbidden(format!(
            "the operator may not patch HorizontalPodAutoscaler {} in namespace {ns}: {}; its ClusterRole \
             needs patch on autoscaling horizontalpodautoscalers",
            r.name, s.message
        )))),
        // Gone, or replaced by another object of that name (the uid no longer matches).
        Err(kube::Error::Api(s)) if s.is_not_found() || s.is_conflict() => {
            Ok(Err(Problem::TargetNotFound(format!(
                "{r} was deleted (or replaced) while it was being scaled"
            ))))
        }
        Err(e) => Err(Error::kube(format!("setting minReplicas of {r} in {ns}"))(
            e,
        )),
    }
}

/// `scaleTargetRef` to an HPA: the schedule is its floor (see `workload::hpa`).
pub(super) async fn reconcile_hpa(
    tdset: &TDSet,
    ctx: &Context,
    ns: &str,
    r: &ScaleTargetRef,
    eval: &Evaluation,
    write_: Write,
    events: &mut Events,
) -> Result<Outcome> {
    const FIELD: &str = "spec.minReplicas";
    if let Some(p) = claims::held_elsewhere(tdset, ctx, ns, r) {
        return Ok(claims::held_outcome(tdset, ctx, p, r));
    }
    let (mut hpa, uid) = match read_hpa(ctx, ns, r).await? {
        Ok(found) => found,
        Err(p) => {
            return Ok(problem_outcome(
                p,
                r,
                target_status(tdset, ctx, ns, r, FIELD, None).await?.status,
            ));
        }
    };
    // A group's floor on it is not its own (see `group::own_floor`), nor another TDSet's.
    let own = claims::own_count(tdset, ctx, ns, r, uid.as_deref(), hpa.min(), hpa.own_min);
    let observed = Some((own, uid.as_deref()));
    let mut record = target_status(tdset, ctx, ns, r, FIELD, observed).await?;
    // The HPA's own target, read for its count: a floor of 0 is the target asleep.
    let workload_ref = hpa.target.clone();
    let (res, mut target_replicas, unreadable, requests) =
        match resolve_and_read(ctx, ns, &workload_ref).await? {
            Ok((res, view)) => (Some(res), Some(view.spec_replicas), None, view.requests),
            Err(p) => {
                debug!(problem = %p.message(), "the HPA's target cannot be read");
                (None, None, Some(p), Requests::default())
            }
        };
    let mut plan = hpa::plan(eval.replicas, &hpa, target_replicas);
    if write_ == Write::Never {
        plan.min_replicas = None;
        plan.scale_target = None;
    }
    if plan.min_replicas.is_some() || plan.scale_target.is_some() {
        ensure_durable(tdset, ctx, &mut record, eval.replicas).await?;
    }
    let (floor_before, target_before) = (hpa.min(), target_replicas);
    if let Some(min) = plan.min_replicas {
        if let Err(p) = write_min_replicas(ctx, ns, r, uid.as_deref(), min).await? {
            return Ok(problem_outcome(p, r, record.status));
        }
        let change = format!("set HorizontalPodAutoscaler {} minReplicas", r.name);
        events.push(record_scale(ctx, tdset, &change, hpa.min(), min, eval));
        hpa.min_replicas = Some(min);
    }
    if let (Some(n), Some(res)) = (plan.scale_target, res.as_ref()) {
        match write(ctx, ns, &workload_ref, res, n).await? {
            Ok(()) => {
                let change = format!(
                    "scaled {workload_ref} (the target of HorizontalPodAutoscaler {})",
                    r.name
                );
                events.push(record_scale(
                    ctx,
                    tdset,
                    &change,
                    target_replicas.unwrap_or(0),
                    n,
                    eval,
                ));
                target_replicas = Some(n);
            }
            Err(p) => return Ok(problem_outcome(p, r, record.status)),
        }
    }
    let notices = plan
        .clamped_from
        .map(|asked| Notice::Clamped {
            hpa: r.name.clone(),
            asked,
            max: hpa.max_replicas,
        })
        .into_iter()
        .collect();
    // The count before: the target's when it was put to sleep or woken, else the floor's.
    let scaled = plan
        .scale_target
        .map(|_| target_before.unwrap_or(0))
        .or(plan.min_replicas.map(|_| floor_before));
    // Without the target's count, whether it sleeps or runs is unknown: say so, never
    // "Settled" at a count nobody read.
    if let Some(p) = unreadable {
        let mut out = problem_outcome(p, &workload_ref, record.status);
        out.notices = notices;
        out.scaled = scaled;
        if let Err(missing) = &mut out.workload {
            missing.message = format!(
                "the target of HorizontalPodAutoscaler {}: {}",
                r.name, missing.message
            );
        }
        return Ok(out);
    }
    // Against the floor the HPA had before the schedule: it would run at least that many.
    let running_floor = match target_replicas {
        Some(0) => 0,
        _ => hpa.min(),
    };
    let saved = record
        .status
        .original_replicas
        .map(|own| Saved::removed(own, running_floor, requests));
    Ok(Outcome {
        workload: Ok(Observed::hpa(&hpa, plan.floor, target_replicas)),
        problem: None,
        notices,
        target: Some(record.status),
        retry: None,
        scaled,
        group: None,
        failed: false,
        saved,
    })
}

/// The TDSets to reconcile when a watched object changes: those that reference it, and, for
/// a workload an HPA scales, those that reference that HPA.
pub(super) fn affected(
    ctx_index: &super::target_index::TargetIndex,
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

//! The group form's edge: lists the selected kinds in the TDSet's namespace (live: what a
//! workload runs and carries decides a write, never a cache), places each workload (held,
//! excluded, held elsewhere), plans with `workload::group`, and sends each write as one
//! server-side apply guarded by the uid and resourceVersion it was planned from.

use std::time::Duration;

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use tracing::{debug, info, warn};

use super::context::{Context, Outcome, Write as Mode};
use super::events::{EventType, Events, note};
use super::group_index::{Claim, claim_of};
use crate::api::{GroupKind, GroupStatus, NamedKind, ScaleTargetRef, ScaleTargetSelector, TDSet};
use crate::error::{Error, Result};
use crate::schedule::{Count, Evaluation};
use crate::status::{Observed, Problem};
use crate::workload::contest::Verdict;
use crate::workload::group::{self, LeaveReason, Member, Place, Record, Value, Why};
use crate::workload::owned::FIELD_MANAGER;
use crate::workload::savings::{Requests, Saved};

/// Workload writes of one group in flight at once: the API server's pace at a boundary of a
/// thousand, without one TDSet taking every connection.
const WRITES_IN_FLIGHT: usize = 16;
/// Objects per page when listing a kind: what one list holds in memory at once.
const PAGE: u32 = 250;
/// How soon to look again after a write was refused because the workload changed meanwhile.
const STALE_RETRY: Duration = Duration::from_secs(1);

/// One workload as listed, with what the status needs besides the plan's `Member`.
struct Listed {
    member: Member,
    /// What one replica's pod requests (`spec.template`; nothing for a CronJob, whose pods
    /// run only when a job does).
    requests: Requests,
    /// `status.replicas` and `status.readyReplicas`, where the kind reports them.
    running: Option<i32>,
    ready: Option<i32>,
    /// For an HPA: who else sets its floor, if anyone (then this TDSet never does).
    floor_elsewhere: Option<String>,
}

/// A kind a group selects, resolved to its resource.
struct Kind {
    kind: GroupKind,
    resource: ApiResource,
    /// Built into the API server (Deployment, StatefulSet, CronJob): written with one apply
    /// of the object. Other kinds: the record by apply, the count through `/scale`.
    built_in: bool,
    /// Whether the spec selects it. The built-in kinds are always looked at, for records this
    /// TDSet left under an older spec (a kind taken out of `kinds` gives its workloads back).
    selected: bool,
}

fn built_in(k: NamedKind) -> ApiResource {
    let (group, version, kind, plural) = match k {
        NamedKind::Deployment => ("apps", "v1", "Deployment", "deployments"),
        NamedKind::StatefulSet => ("apps", "v1", "StatefulSet", "statefulsets"),
        NamedKind::CronJob => ("batch", "v1", "CronJob", "cronjobs"),
    };
    ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: format!("{group}/{version}"),
        kind: kind.into(),
        plural: plural.into(),
    }
}

/// Resolves the selected kinds, and the built-in kinds not selected; a kind that cannot be used
/// is a problem to report, and the others are still scheduled.
async fn kinds(
    ctx: &Context,
    sel: &ScaleTargetSelector,
    recorded: &[String],
    problems: &mut Vec<Problem>,
) -> Result<Vec<Kind>> {
    let mut out: Vec<Kind> = Vec::new();
    let selected = sel.kinds();
    // Custom kinds this TDSet may have left records on, selected no more: listed for its
    // records only.
    let was_held = recorded
        .iter()
        .map(|k| (GroupKind::parse(k), false))
        .filter(|(k, _)| !selected.iter().any(|s| s.same_kind(k)));
    let wanted: Vec<(GroupKind, bool)> = selected
        .iter()
        .cloned()
        .map(|k| (k, true))
        .chain(was_held)
        .collect();
    for (kind, selected) in wanted {
        match &kind {
            GroupKind::Named(n) => out.push(Kind {
                resource: built_in(*n),
                kind,
                built_in: true,
                selected,
            }),
            GroupKind::Scalable { kind: k, group } => {
                match ctx.discovery.resolve_kind(group, k).await? {
                    Ok(res) if res.has_scale => out.push(Kind {
                        resource: res.resource,
                        kind,
                        built_in: false,
                        selected,
                    }),
                    Ok(_) => problems.push(Problem::ScaleNotSupported(format!(
                        "{k}.{group} has no /scale subresource; its workloads are left alone"
                    ))),
                    Err(p) => problems.push(p),
                }
            }
        }
    }
    for n in [
        NamedKind::Deployment,
        NamedKind::StatefulSet,
        NamedKind::CronJob,
    ] {
        let kind = GroupKind::Named(n);
        if !out.iter().any(|k| k.kind.same_kind(&kind)) {
            out.push(Kind {
                resource: built_in(n),
                kind,
                built_in: true,
                selected: false,
            });
        }
    }
    // The HPAs: an autoscaled workload's count other than 0 is its HPA's floor.
    out.push(Kind {
        kind: GroupKind::Scalable {
            kind: "HorizontalPodAutoscaler".into(),
            group: "autoscaling".into(),
        },
        resource: ApiResource {
            group: "autoscaling".into(),
            version: "v2".into(),
            api_version: "autoscaling/v2".into(),
            kind: "HorizontalPodAutoscaler".into(),
            plural: "horizontalpodautoscalers".into(),
        },
        built_in: true,
        selected: false,
    });
    Ok(out)
}

/// Whether a kind is the HPAs (listed for the floors of autoscaled workloads).
fn is_hpa(kind: &Kind) -> bool {
    kind.resource.group == "autoscaling" && kind.resource.kind == "HorizontalPodAutoscaler"
}

fn forbidden(verb: &str, res: &ApiResource, sub: &str, ns: &str, msg: &str) -> Problem {
    let group = if res.group.is_empty() {
        "\"\"".to_string()
    } else {
        res.group.clone()
    };
    Problem::Forbidden(format!(
        "the operator may not {verb} {}{sub} (apiGroup {group}) in namespace {ns}: {msg}. Grant it \
         with a ClusterRole labelled schedule.rs/aggregate-to-tdset-operator: \"true\" (verbs \
         [get, list, watch, patch]); see the README",
        res.plural
    ))
}

/// Lists one kind in the namespace, page by page, keeping only what the plan reads.
async fn list(
    ctx: &Context,
    ns: &str,
    kind: &Kind,
    labels: &str,
) -> Result<Result<Vec<DynamicObject>, Problem>> {
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), ns, &kind.resource);
    let mut out = Vec::new();
    let mut params = ListParams::default().labels(labels).limit(PAGE);
    loop {
        let page = match api.list(&params).await {
            Ok(page) => page,
            Err(kube::Error::Api(s)) if s.is_forbidden() => {
                return Ok(Err(forbidden("list", &kind.resource, "", ns, &s.message)));
            }
            // The kind is no longer served (its CRD was deleted since discovery ran).
            Err(kube::Error::Api(s)) if s.is_not_found() => {
                return Ok(Err(Problem::TargetNotFound(format!(
                    "{} in {ns} cannot be listed: the API server no longer serves them ({})",
                    kind.resource.plural, s.message
                ))));
            }
            // A selector the API server cannot parse (a key no label may have).
            Err(kube::Error::Api(s)) if s.code == 400 => {
                return Ok(Err(Problem::InvalidSpec(format!(
                    "spec.scaleTargetSelector.selector: the API server refuses it as a label selector ({labels}): {}",
                    s.message
                ))));
            }
            Err(e) => {
                return Err(Error::kube(format!(
                    "listing {} in {ns}",
                    kind.resource.plural
                ))(e));
            }
        };
        let next = page.metadata.continue_.clone().filter(|c| !c.is_empty());
        out.extend(page.items.into_iter().map(|mut o| {
            // Only what the plan and status read is kept.
            o.metadata.managed_fields = None;
            o
        }));
        match next {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(Ok(out)),
        }
    }
}

fn int_at(o: &DynamicObject, path: &str) -> Option<i32> {
    o.data
        .pointer(path)
        .and_then(serde_json::Value::as_i64)
        .map(|v| v as i32)
}

/// What a listed object runs now.
async fn value_of(
    ctx: &Context,
    ns: &str,
    kind: &Kind,
    o: &DynamicObject,
) -> Result<Result<Value, Problem>> {
    if matches!(kind.kind, GroupKind::Named(NamedKind::CronJob)) {
        let suspended = o
            .data
            .pointer("/spec/suspend")
            .and_then(serde_json::Value::as_bool);
        return Ok(Ok(Value::Suspended(suspended.unwrap_or(false))));
    }
    if is_hpa(kind) {
        // The API server defaults an absent minReplicas to 1.
        return Ok(Ok(Value::Floor(
            int_at(o, "/spec/minReplicas").unwrap_or(1),
        )));
    }
    if kind.built_in {
        // The API server defaults an absent spec.replicas to 1.
        return Ok(Ok(Value::Replicas(
            int_at(o, "/spec/replicas").unwrap_or(1),
        )));
    }
    // A custom kind's count lives where its CRD says: `/scale` reads it from there.
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), ns, &kind.resource);
    match api.get_scale(&o.name_any()).await {
        Ok(s) => Ok(Ok(Value::Replicas(
            s.spec.and_then(|s| s.replicas).unwrap_or(0),
        ))),
        Err(kube::Error::Api(s)) if s.is_forbidden() => Ok(Err(forbidden(
            "get",
            &kind.resource,
            "/scale",
            ns,
            &s.message,
        ))),
        Err(kube::Error::Api(s)) if s.is_not_found() => Ok(Err(Problem::TargetNotFound(format!(
            "{} {} was deleted meanwhile",
            kind.kind,
            o.name_any()
        )))),
        Err(e) => Err(Error::kube(format!(
            "reading the scale of {} {} in {ns}",
            kind.kind,
            o.name_any()
        ))(e)),
    }
}

/// What placing a workload needs to know about the TDSet.
struct Placing<'a> {
    tdset: &'a TDSet,
    ctx: &'a Context,
    ns: &'a str,
    sel: &'a ScaleTargetSelector,
    selector: &'a group::Selector,
    /// This TDSet's claim (creationTimestamp, name).
    me: Claim,
}

/// Lists every kind with each of its label selectors (`queries`; what the API server filters
/// never crosses the wire), once per object, and reads what each runs: (index of its kind,
/// the object, its value), and for each kind whether all of it was listed. A kind that cannot
/// be listed or read is a problem to report.
async fn observe(
    ctx: &Context,
    ns: &str,
    kinds: &[Kind],
    queries: impl Fn(&Kind) -> Vec<String>,
    problems: &mut Vec<Problem>,
) -> Result<(Vec<(usize, DynamicObject, Value)>, Vec<bool>)> {
    let mut out = Vec::new();
    let mut listed = vec![true; kinds.len()];
    for (k, kind) in kinds.iter().enumerate() {
        let mut objects: std::collections::BTreeMap<String, DynamicObject> = Default::default();
        for labels in queries(kind) {
            match list(ctx, ns, kind, &labels).await? {
                Ok(found) => {
                    objects.extend(found.into_iter().map(|o| (o.uid().unwrap_or_default(), o)))
                }
                Err(p) => {
                    listed[k] = false;
                    problems.push(p)
                }
            }
        }
        for o in objects.into_values() {
            match value_of(ctx, ns, kind, &o).await? {
                Ok(v) => out.push((k, o, v)),
                Err(p) => {
                    listed[k] = false;
                    problems.push(p)
                }
            }
        }
    }
    Ok((out, listed))
}

/// The plan's view of a listed object.
fn member_of(kind: &Kind, o: &DynamicObject, value: Value, place: Place) -> Member {
    Member {
        api_version: kind.resource.api_version.clone(),
        kind: kind.resource.kind.clone(),
        name: o.name_any(),
        uid: o.uid().unwrap_or_default(),
        resource_version: o.resource_version(),
        value,
        record: Record::read(o.annotations(), value),
        place,
        autoscaled_by: None,
        floor_of: None,
        two_step: !kind.built_in,
    }
}

/// Where a selected (or recorded) workload stands: excluded, held by something else (its
/// controller, the TDSet that owns it, an older claim), or held by this TDSet.
fn place(p: &Placing<'_>, kind: &Kind, o: &DynamicObject) -> Place {
    let Placing {
        tdset,
        ctx,
        ns,
        sel,
        selector,
        me,
    } = p;
    let labels = o.labels();
    let name = o.name_any();
    // The spec decides, not the index (which may not have caught up with it yet).
    if !kind.selected || !selector.matches(labels) {
        return Place::Outside;
    }
    if sel.exclude.contains(&name) {
        return Place::Excluded;
    }
    if let Some(c) = o
        .owner_references()
        .iter()
        .find(|r| r.controller == Some(true))
    {
        let what = if c.kind == "TDSet" && c.api_version.starts_with("schedule.rs/") {
            format!("TDSet {} (which owns it)", c.name)
        } else {
            format!("its controller, {} {}", c.kind, c.name)
        };
        if Some(&c.uid) != tdset.meta().uid.as_ref() {
            return Place::HeldElsewhere(what);
        }
    }
    // The oldest claim holds it: older groups that select it (and do not exclude it), and
    // TDSets that name it in scaleTargetRef.
    let groups = ctx.groups.in_namespace(ns);
    let (group, kind) = (kind.kind.group(), kind.kind.kind());
    let older_group = groups
        .iter()
        .find(|(c, e)| c < me && e.selects(group, kind, labels) && !e.exclude.contains(&name));
    let older_ref = ctx
        .index
        .claims(ns, group, kind, &name)
        .into_iter()
        .find(|c| c < me);
    let holder = match (older_group.map(|(c, _)| c.clone()), older_ref) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    match holder {
        Some((_, holder)) => Place::HeldElsewhere(format!("TDSet {holder} (the older claim)")),
        None => Place::Held,
    }
}

/// Whether an HPA, and so the workload it scales, is someone else's: its controller's (KEDA's
/// ScaledObject owns the HPAs it makes) or a TDSet's that names the HPA in scaleTargetRef.
fn hpa_held_elsewhere(p: &Placing<'_>, o: &DynamicObject) -> Option<String> {
    let hpa = o.name_any();
    if let Some(c) = o
        .owner_references()
        .iter()
        .find(|r| r.controller == Some(true))
    {
        return Some(format!(
            "{} {}, the controller of its HorizontalPodAutoscaler {hpa}",
            c.kind, c.name
        ));
    }
    p.ctx
        .index
        .claims(p.ns, "autoscaling", "HorizontalPodAutoscaler", &hpa)
        .into_iter()
        .next()
        .map(|(_, holder)| {
            format!("TDSet {holder}, which schedules its HorizontalPodAutoscaler {hpa}")
        })
}

/// What one write came to.
enum Sent {
    Done,
    /// Refused: the workload changed since it was listed (409); plan it again.
    Stale(String),
    /// The workload is gone (deleted meanwhile): nothing to write.
    Gone(String),
    /// Refused as invalid (422): by a policy, or because it is gone (`refused` finds out).
    Refused(String),
    Problem(Problem),
}

/// A write refused as invalid: gone (an apply to a deleted object would create it, and fails
/// validation), or refused for what it sets, which is reported and not retried at once.
async fn refused(
    ctx: &Context,
    ns: &str,
    kind: &Kind,
    m: &Member,
    message: String,
) -> Result<Sent> {
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), ns, &kind.resource);
    match api.get_opt(&m.name).await {
        Ok(None) => Ok(Sent::Gone(format!(
            "{} {} was deleted meanwhile",
            m.kind, m.name
        ))),
        Ok(Some(o)) if o.uid().as_deref() != Some(m.uid.as_str()) => Ok(Sent::Gone(format!(
            "{} {} was deleted and created again meanwhile",
            m.kind, m.name
        ))),
        Ok(Some(_)) => Ok(Sent::Problem(Problem::InvalidTemplate(format!(
            "the API server refused to set {} {} ({message}); an admission policy or the kind's \
             own rules forbid it",
            m.kind, m.name
        )))),
        Err(e) => Err(Error::kube(format!(
            "reading {} {} in {ns}",
            m.kind, m.name
        ))(e)),
    }
}

async fn send(
    ctx: &Context,
    ns: &str,
    kind: &Kind,
    m: &Member,
    w: &group::Write,
    holder_uid: &str,
) -> Result<Sent> {
    match write(ctx, ns, kind, m, w, holder_uid).await? {
        Sent::Refused(message) => refused(ctx, ns, kind, m, message).await,
        sent => Ok(sent),
    }
}

async fn write(
    ctx: &Context,
    ns: &str,
    kind: &Kind,
    m: &Member,
    w: &group::Write,
    holder_uid: &str,
) -> Result<Sent> {
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), ns, &kind.resource);
    let apply = PatchParams::apply(FIELD_MANAGER).force();
    let answer = |result: kube::Result<()>, verb: &str, sub: &str| -> Result<Sent> {
        match result {
            Ok(()) => Ok(Sent::Done),
            Err(kube::Error::Api(s)) if s.is_conflict() => Ok(Sent::Stale(format!(
                "{} {} changed since it was read ({})",
                m.kind, m.name, s.message
            ))),
            Err(kube::Error::Api(s)) if s.is_not_found() => Ok(Sent::Gone(format!(
                "{} {} was deleted meanwhile",
                m.kind, m.name
            ))),
            // Refused as invalid: an admission policy or the kind's own rules (an apply to a
            // deleted object, which would create it, fails so too: `refused` tells them apart).
            Err(kube::Error::Api(s)) if s.code == 422 => Ok(Sent::Refused(s.message)),
            Err(kube::Error::Api(s)) if s.is_forbidden() => Ok(Sent::Problem(forbidden(
                verb,
                &kind.resource,
                sub,
                ns,
                &s.message,
            ))),
            // Anything else (a webhook down, a 5xx) fails this write only: the others still land,
            // and the reconcile reports it and is retried.
            Err(e) => Err(Error::kube(format!(
                "{verb} {}{sub} {} in {ns}",
                kind.resource.plural, m.name
            ))(e)),
        }
    };
    let mut body = w.body(m, holder_uid);
    if kind.built_in {
        ctx.metrics.write(&kind.resource.plural, "apply");
        let sent = api.patch(&m.name, &apply, &Patch::Apply(&body)).await;
        return answer(sent.map(|_| ()), "patch", "");
    }
    // The count through /scale (its path is the CRD's), the record by apply of the object:
    // the record first when holding, last when releasing, so a crash in between leaves the
    // own count recorded or already back.
    if let Some(o) = body.as_object_mut() {
        o.remove("spec");
    }
    // Guarded by the resourceVersion it was planned from (or the record's write left): a
    // change by someone else in between is a 409, planned again.
    let merge = |rv: Option<String>| {
        serde_json::json!({
            "metadata": {"resourceVersion": rv},
            "spec": {"replicas": w.to.replicas()},
        })
    };
    let scale_params = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PatchParams::default()
    };
    if w.record.is_some() {
        ctx.metrics.write(&kind.resource.plural, "apply");
        let recorded = api.patch(&m.name, &apply, &Patch::Apply(&body)).await;
        let rv = recorded.as_ref().ok().and_then(|o| o.resource_version());
        match answer(recorded.map(|_| ()), "patch", "")? {
            Sent::Done => {}
            other => return Ok(other),
        }
        ctx.metrics
            .write(&format!("{}/scale", kind.resource.plural), "patch");
        let scaled = api
            .patch_scale(&m.name, &scale_params, &Patch::Merge(&merge(rv)))
            .await;
        answer(scaled.map(|_| ()), "patch", "/scale")
    } else {
        ctx.metrics
            .write(&format!("{}/scale", kind.resource.plural), "patch");
        let scaled = api
            .patch_scale(
                &m.name,
                &scale_params,
                &Patch::Merge(&merge(m.resource_version.clone())),
            )
            .await;
        match answer(scaled.map(|_| ()), "patch", "/scale")? {
            Sent::Done => {}
            other => return Ok(other),
        }
        // The scale changed its resourceVersion: the record goes by uid alone.
        if let Some(meta) = body.get_mut("metadata").and_then(|m| m.as_object_mut()) {
            meta.remove("resourceVersion");
        }
        ctx.metrics.write(&kind.resource.plural, "apply");
        let released = api.patch(&m.name, &apply, &Patch::Apply(&body)).await;
        answer(released.map(|_| ()), "patch", "")
    }
}

/// What the TDSet holds, and the level applied to it.
pub(super) async fn reconcile_group(
    tdset: &TDSet,
    ctx: &Context,
    ns: &str,
    sel: &ScaleTargetSelector,
    eval: &Evaluation,
    mode: Mode,
    events: &mut Events,
) -> Result<Outcome> {
    // The cached TDSet has no creationTimestamp; the index, fed by the watch, has its claim.
    let me = ctx
        .groups
        .claim(ns, &tdset.name_any())
        .unwrap_or_else(|| claim_of(tdset));
    let selector = group::Selector::compile(&sel.selector).map_err(|e| {
        Error::InvalidSpec(vec![crate::schedule::SpecError {
            field: "spec.scaleTargetSelector.selector".into(),
            message: e,
        }])
    })?;
    let placing = Placing {
        tdset,
        ctx,
        ns,
        sel,
        selector: &selector,
        me,
    };
    let mut problems = Vec::new();
    let recorded = recorded_kinds(tdset, ctx);
    let kinds = kinds(ctx, sel, &recorded, &mut problems).await?;
    let name = tdset.name_any();
    let uid = tdset.uid().unwrap_or_default();
    let held = format!("{}={uid}", group::HELD_BY_UID);
    let selected = selector.to_query();
    let queries = |kind: &Kind| {
        let mut q = vec![held.clone()];
        if kind.selected {
            q.push(selected.clone());
        }
        if is_hpa(kind) {
            // All of the namespace's (a few): which ones are floors is known once listed.
            q.push(String::new());
        }
        q
    };
    let (observed, all_listed) = observe(ctx, ns, &kinds, queries, &mut problems).await?;
    let listed: Vec<(usize, Listed)> = observed
        .into_iter()
        .map(|(k, o, value)| {
            let kind = &kinds[k];
            let placed = if is_hpa(kind) {
                Place::Outside
            } else {
                place(&placing, kind, &o)
            };
            let mut member = member_of(kind, &o, value, placed);
            if is_hpa(kind) {
                member.floor_of = Some((
                    o.data
                        .pointer("/spec/scaleTargetRef/name")
                        .and_then(serde_json::Value::as_str)
                        .unwrap_or_default()
                        .to_string(),
                    int_at(&o, "/spec/maxReplicas").unwrap_or(i32::MAX),
                ));
            }
            member.autoscaled_by = super::scale::hpa_scaling(
                ctx,
                ns,
                &ScaleTargetRef {
                    api_version: kind.resource.api_version.clone(),
                    kind: kind.resource.kind.clone(),
                    name: member.name.clone(),
                },
            );
            let requests = match kind.kind {
                GroupKind::Named(NamedKind::CronJob) => Requests::default(),
                _ => o
                    .data
                    .pointer("/spec/template")
                    .map(Requests::of_template)
                    .unwrap_or_default(),
            };
            let listed = Listed {
                requests,
                running: int_at(&o, "/status/replicas"),
                ready: int_at(&o, "/status/readyReplicas"),
                floor_elsewhere: is_hpa(kind)
                    .then(|| hpa_held_elsewhere(&placing, &o))
                    .flatten(),
                member,
            };
            (k, listed)
        })
        .collect();
    let mut members: Vec<Member> = listed.iter().map(|(_, l)| l.member.clone()).collect();
    // A workload whose HPA someone else schedules or manages is theirs: put to sleep by this
    // group, it would be woken by them (KEDA, a scaleTargetRef TDSet on the HPA), and the two
    // would take turns.
    for (_, l) in &listed {
        let Some(by) = &l.floor_elsewhere else {
            continue;
        };
        for m in members.iter_mut().filter(|m| {
            m.place == Place::Held && m.autoscaled_by.as_deref() == Some(l.member.name.as_str())
        }) {
            m.place = Place::HeldElsewhere(by.clone());
        }
    }
    // An HPA is held with the workload whose floor it is (and only then).
    let autoscaled: Vec<(String, String)> = members
        .iter()
        .filter(|m| m.place == Place::Held)
        .filter_map(|m| Some((m.autoscaled_by.clone()?, m.name.clone())))
        .collect();
    for (m, _) in members
        .iter_mut()
        .zip(&listed)
        .filter(|(m, (_, l))| m.floor_of.is_some() && l.floor_elsewhere.is_none())
    {
        let floor_of = m.floor_of.as_ref().map(|(w, _)| w.clone());
        if autoscaled
            .iter()
            .any(|(hpa, workload)| *hpa == m.name && Some(workload) == floor_of.as_ref())
        {
            m.place = Place::Held;
        }
    }
    let level = eval.count();
    let plan = group::plan(&name, level, &members);
    if let Some(p) = conflicts(&members) {
        problems.insert(0, p);
    }
    let mut status = plan.status.clone();
    let mut failed: Vec<(usize, Value, String)> = Vec::new();
    let mut retry = None;
    let mut done = Vec::new();
    let mut fights: Vec<(Member, usize)> = Vec::new();
    let mut first_error = None;
    if mode == Mode::Never {
        failed.extend(
            plan.writes
                .iter()
                .filter(|w| members[w.member].place == Place::Held)
                .map(|w| (w.member, w.to, "spec.suspend is true".to_string())),
        );
    } else {
        // Boxed: an unboxed future borrowing the plan trips rustc's higher-ranked lifetime
        // check where the controller requires the reconcile to be Send.
        let now = tokio::time::Instant::now();
        let key = |m: &Member| format!("{ns}/{name}/{}/{}", m.kind, m.name);
        // Someone else keeps setting a held workload back (a GitOps tool's self-heal): its
        // value is taken as its own each time, and the level applied again less and less
        // often, as for scaleTargetRef.
        let mut writes = Vec::new();
        for w in &plan.writes {
            let m = &members[w.member];
            // A writer that replaces the whole object takes the record with it: its reverts
            // are Schedule writes, and held back the same way (a new level never is).
            if matches!(w.why, Why::ChangedElsewhere { .. } | Why::Schedule)
                && let Verdict::Wait(until) =
                    ctx.contest(&key(m), |c| c.decide(w.to.replicas(), now))
            {
                retry = retry
                    .min(Some(until.duration_since(now)))
                    .or(Some(until.duration_since(now)));
                failed.push((w.member, w.to, "someone else keeps setting it; the schedule's count is put back less and less often".into()));
                continue;
            }
            writes.push(w);
        }
        if !writes.is_empty() {
            let writing: Vec<String> = writes
                .iter()
                .filter(|w| w.record.is_some() && !kinds[listed[w.member].0].built_in)
                .map(|w| kinds[listed[w.member].0].kind.to_string())
                .collect();
            super::apply::write_group_now(tdset, ctx, &writing).await?;
        }
        let futures: Vec<BoxFuture<'_, (&group::Write, Result<Sent>)>> = writes
            .into_iter()
            .map(|w| {
                let kind = &kinds[listed[w.member].0];
                let m = &members[w.member];
                let uid = uid.as_str();
                async move { (w, send(ctx, ns, kind, m, w, uid).await) }.boxed()
            })
            .collect();
        let sends = futures::stream::iter(futures).buffer_unordered(WRITES_IN_FLIGHT);
        // Every write is awaited, whatever the others came to: one workload's failure must not
        // keep the rest of the group from its count.
        let results: Vec<(&group::Write, Result<Sent>)> = sends.collect().await;
        for (w, result) in results {
            let sent = match result {
                Ok(sent) => sent,
                Err(e) => {
                    if members[w.member].place == Place::Held {
                        failed.push((w.member, w.to, e.to_string()));
                    }
                    first_error.get_or_insert(e);
                    continue;
                }
            };
            match sent {
                Sent::Done => {
                    if matches!(w.why, Why::ChangedElsewhere { .. } | Why::Schedule) {
                        ctx.contest(&key(&members[w.member]), |c| c.wrote(w.to.replicas(), now));
                    }
                    if let Some(n) = ctx.contest(&key(&members[w.member]), |c| c.fight(now)) {
                        fights.push((members[w.member].clone(), n));
                    }
                    done.push(w.clone())
                }
                Sent::Stale(why) | Sent::Gone(why) | Sent::Refused(why) => {
                    debug!(%why, "group write refused; looking again");
                    retry = Some(STALE_RETRY);
                    if members[w.member].place == Place::Held {
                        failed.push((w.member, w.to, why));
                    }
                }
                Sent::Problem(p) => {
                    if members[w.member].place == Place::Held {
                        failed.push((w.member, w.to, p.message().to_string()));
                    }
                    problems.push(p);
                }
            }
        }
    }
    let writes_failed = first_error.is_some();
    if let Some(e) = first_error {
        // Looked at again with the error policy's backoff; the writes that landed are
        // reported below anyway.
        warn!(error = %e, "a group write failed");
        problems.push(Problem::ApiError(e.to_string()));
    }
    if let Some((m, n)) = fights.first() {
        problems.insert(
            0,
            Problem::ConflictingWriter(format!(
                "{} {} (and {} more) keep being set back by another writer ({n} times in 10 minutes); \
                 its value is taken as its own count each time and the schedule's put back less and \
                 less often. Stop that writer from managing the count (e.g. Argo CD ignoreDifferences \
                 on /spec/replicas)",
                m.kind,
                m.name,
                fights.len() - 1
            )),
        );
    }
    group::not_reached(&mut status, &members, &failed);
    status.held_kinds = still_held(&name, &kinds, &all_listed, &recorded, &listed, &plan);
    // The level has not changed since the last status: a write of it is a workload joining.
    let previous = ctx.statuses.current(tdset);
    let joining = previous
        .as_ref()
        .is_some_and(|p| p.group.is_some() && p.desired_replicas == level.replicas());
    report(tdset, ctx, eval, &members, &done, joining, events);
    let mut out = outcome(tdset, &listed, &members, &done, status, problems, retry);
    out.failed = writes_failed;
    Ok(out)
}

/// The custom kinds the TDSet's last status says it may have left records on.
fn recorded_kinds(tdset: &TDSet, ctx: &Context) -> Vec<String> {
    ctx.statuses
        .current(tdset)
        .and_then(|s| s.group)
        .map(|g| g.held_kinds)
        .unwrap_or_default()
}

/// The custom kinds that may still carry this TDSet's record: those where a workload does (or
/// is being given one now), and those recorded before that could not be looked through.
fn still_held(
    me: &str,
    kinds: &[Kind],
    all_listed: &[bool],
    recorded: &[String],
    listed: &[(usize, Listed)],
    plan: &group::Plan,
) -> Vec<String> {
    let unseen = recorded.iter().filter(|r| {
        let r = GroupKind::parse(r);
        kinds
            .iter()
            .position(|k| k.kind.same_kind(&r))
            .is_none_or(|k| !all_listed[k])
    });
    let carrying = listed
        .iter()
        .enumerate()
        .filter(|(i, (k, l))| {
            !kinds[*k].built_in
                && (l.member.record.as_ref().is_some_and(|r| r.holder == me)
                    || plan
                        .writes
                        .iter()
                        .any(|w| w.member == *i && w.record.is_some()))
        })
        .map(|(_, (k, _))| kinds[*k].kind.to_string());
    let mut held: Vec<String> = unseen.cloned().chain(carrying).collect();
    held.sort();
    held.dedup();
    held
}

/// The workloads another TDSet (or controller) holds, as the problem this TDSet reports.
fn conflicts(members: &[Member]) -> Option<Problem> {
    let held: Vec<String> = members
        .iter()
        .filter_map(|m| match &m.place {
            Place::HeldElsewhere(by) => Some(format!("{} {} (held by {by})", m.kind, m.name)),
            _ => None,
        })
        .collect();
    let first = held.iter().take(5).cloned().collect::<Vec<_>>().join(", ");
    let more = match held.len().saturating_sub(5) {
        0 => String::new(),
        n => format!(" and {n} more"),
    };
    (!held.is_empty()).then(|| {
        Problem::ConflictingTDSet(format!(
            "{} selected workloads are held elsewhere, and this TDSet writes nothing to them: {first}{more}",
            held.len()
        ))
    })
}

/// The Events of a reconcile's writes: one for the scheduled changes together (a boundary of a
/// thousand workloads is one Event), one per workload that left, was restored or was changed
/// by someone else.
fn report(
    tdset: &TDSet,
    ctx: &Context,
    eval: &Evaluation,
    members: &[Member],
    done: &[group::Write],
    joining: bool,
    events: &mut Events,
) {
    let mut scheduled = Vec::new();
    let mut restored = Vec::new();
    for w in done {
        let m = &members[w.member];
        let what = format!("{} {}", m.kind, m.name);
        match &w.why {
            Why::Schedule if joining && m.record.is_none() => events.push(note(
                tdset,
                EventType::Normal,
                "Joined",
                format!(
                    "{what} joined the group and was set to {} (its own count {} is recorded on it): {}",
                    w.to,
                    w.from.short(),
                    eval.why()
                ),
            )),
            Why::Schedule => {
                scheduled.push(format!("{what} ({} -> {})", w.from.short(), w.to.short()))
            }
            Why::Own => restored.push(format!("{what} ({})", w.to.short())),
            Why::ChangedElsewhere { to } => events.push(note(
                tdset,
                EventType::Normal,
                "ChangedElsewhere",
                format!(
                    "{what} was set to {to} by someone else while this TDSet held it: that is now its own count; \
                     the schedule's level applies again ({} now: {})",
                    w.to,
                    eval.why()
                ),
            )),
            Why::Left(why) => {
                let reason = if matches!(why, LeaveReason::Released) {
                    "Released"
                } else {
                    "Left"
                };
                events.push(note(
                    tdset,
                    EventType::Normal,
                    reason,
                    format!("{what} got its own count back ({}): {why}", w.to),
                ));
            }
        }
    }
    let list = |items: &[String]| {
        let shown: Vec<_> = items.iter().take(5).cloned().collect();
        let more = items.len().saturating_sub(shown.len());
        if more > 0 {
            format!("{} and {more} more", shown.join(", "))
        } else {
            shown.join(", ")
        }
    };
    if !scheduled.is_empty() {
        let (direction, reason) = match eval.count() {
            Count::Replicas(0) => ("down", "ScaledDown"),
            _ => ("up", "Scaled"),
        };
        ctx.metrics
            .scale_operations
            .with_label_values(&[direction])
            .inc_by(scheduled.len() as u64);
        info!(workloads = scheduled.len(), level = %eval.count(), "scaled the group");
        events.push(note(
            tdset,
            EventType::Normal,
            reason,
            format!(
                "set {} workloads to the level {}: {} ({})",
                scheduled.len(),
                eval.count(),
                list(&scheduled),
                eval.why()
            ),
        ));
    }
    if !restored.is_empty() {
        info!(
            workloads = restored.len(),
            "gave the group its own counts back"
        );
        events.push(note(
            tdset,
            EventType::Normal,
            "Restored",
            format!(
                "gave {} workloads their own count back: {} ({})",
                restored.len(),
                list(&restored),
                eval.why()
            ),
        ));
    }
}

fn outcome(
    tdset: &TDSet,
    listed: &[(usize, Listed)],
    members: &[Member],
    done: &[group::Write],
    status: GroupStatus,
    problems: Vec<Problem>,
    retry: Option<Duration>,
) -> Outcome {
    // After the writes that landed: what each held workload is asked to run.
    let mut value: Vec<Value> = members.iter().map(|m| m.value).collect();
    for w in done {
        value[w.member] = w.to;
    }
    let held: Vec<usize> = (0..members.len())
        .filter(|i| members[*i].place == Place::Held && members[*i].floor_of.is_none())
        .collect();
    let current: i32 = held
        .iter()
        .map(|i| listed[*i].1.running.unwrap_or(value[*i].replicas()))
        .sum();
    let wanted: i32 = held.iter().map(|i| value[*i].replicas()).sum();
    let ready = held
        .iter()
        .map(|i| listed[*i].1.ready.or(listed[*i].1.running.map(|_| 0)))
        .sum::<Option<i32>>();
    let settled = status.not_at_schedule.is_empty()
        && status.at_schedule == held.len() as i32
        && held.iter().all(|i| {
            listed[*i]
                .1
                .running
                .is_none_or(|r| r == value[*i].replicas())
        });
    // Against each held workload's own count; a CronJob's suspension removes no steady pods.
    let saved = held
        .iter()
        .filter(|i| matches!(members[**i].value, Value::Replicas(_)))
        .map(|i| {
            let own = members[*i].own().replicas();
            Saved::removed(own, value[*i].replicas(), listed[*i].1.requests)
        })
        .fold(Saved::default(), Saved::plus);
    let scaled = done
        .iter()
        .any(|w| {
            matches!(
                w.why,
                Why::Schedule | Why::Own | Why::ChangedElsewhere { .. }
            )
        })
        .then(|| {
            held.iter()
                .map(|i| members[*i].value.replicas())
                .sum::<i32>()
        });
    if !problems.is_empty() {
        warn!(problems = problems.len(), first = %problems[0].message(), "group problems");
    }
    Outcome {
        workload: Ok(Observed {
            what: format!("the group's {} workloads", held.len()),
            current,
            ready,
            wanted,
            settled,
            hint: Some(format!(
                "see `kubectl get tdset {} -o jsonpath='{{.status.group}}'`",
                tdset.name_any()
            )),
        }),
        problem: problems.into_iter().next(),
        notices: vec![],
        target: None,
        retry,
        scaled,
        group: Some(status),
        failed: false,
        saved: Some(saved),
    }
}

/// What letting go of a group came to.
pub(super) struct Release {
    /// What could not be looked at or written, to report.
    pub problems: Vec<Problem>,
    /// A workload carrying this TDSet's record was refused its own count (a policy, a
    /// webhook, a permission): the group is not done with.
    pub stuck: bool,
}

/// Gives every workload carrying this TDSet's record its own count back (deletion, or the
/// group form left), and says what could not be.
pub(super) async fn release_all(
    tdset: &TDSet,
    ctx: &Context,
    ns: &str,
    sel: Option<&ScaleTargetSelector>,
    events: &mut Events,
) -> Result<Release> {
    let name = tdset.name_any();
    let default = ScaleTargetSelector::default();
    let sel = sel.unwrap_or(&default);
    let mut unlisted = Vec::new();
    let kinds = kinds(ctx, sel, &recorded_kinds(tdset, ctx), &mut unlisted).await?;
    let uid = tdset.uid().unwrap_or_default();
    let mine = |_: &Kind| vec![format!("{}={uid}", group::HELD_BY_UID)];
    // A workload changed between the list and the write (409) is listed and planned again: a
    // record must not be left behind because someone scaled at the wrong moment.
    for attempt in 1..=RELEASE_ATTEMPTS {
        let mut changed = None;
        // Each round's own: a kind that cannot be listed is said once, not once a round.
        let mut problems = unlisted.clone();
        let mut refused = Vec::new();
        for (k, o, value) in observe(ctx, ns, &kinds, mine, &mut problems).await?.0 {
            let kind = &kinds[k];
            let m = member_of(kind, &o, value, Place::Outside);
            for mut w in group::plan(&name, Count::Own, std::slice::from_ref(&m)).writes {
                w.why = Why::Left(LeaveReason::Released);
                match send(ctx, ns, kind, &m, &w, &uid).await? {
                    Sent::Done => {
                        info!(workload = %format!("{} {}", m.kind, m.name), to = %w.to, "released");
                        events.push(note(
                            tdset,
                            EventType::Normal,
                            "Released",
                            format!(
                                "{} {} got its own count back ({}): the TDSet let go of its group",
                                m.kind, m.name, w.to
                            ),
                        ));
                    }
                    Sent::Stale(why) => changed = Some(why),
                    Sent::Gone(_) => {}
                    Sent::Refused(why) => refused.push(Problem::InvalidTemplate(why)),
                    Sent::Problem(p) => refused.push(p),
                }
            }
        }
        match changed {
            Some(why) if attempt == RELEASE_ATTEMPTS => return Err(Error::Contended(why)),
            Some(_) => {}
            None => {
                let stuck = !refused.is_empty();
                refused.extend(problems);
                return Ok(Release {
                    problems: refused,
                    stuck,
                });
            }
        }
    }
    Ok(Release {
        problems: unlisted,
        stuck: false,
    })
}

/// Rounds of listing and writing when letting go, before the reconcile fails and retries.
const RELEASE_ATTEMPTS: usize = 3;

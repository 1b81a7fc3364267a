//! One planned write sent to one workload, and what it came to.

use kube::ResourceExt;
use kube::api::{Api, DynamicObject, Patch, PatchParams};

use crate::controller::state::Context;
use crate::error::{Error, Result};
use crate::status::Problem;
use crate::workload::group::{self, Member};
use crate::workload::owned::FIELD_MANAGER;

use super::observe::{Kind, forbidden};

/// Workload writes of one group in flight at once: the API server's pace at a boundary of a
/// thousand, without one TDSet taking every connection.
pub(super) const WRITES_IN_FLIGHT: usize = 16;

/// What one write came to.
pub(super) enum Sent {
    Done,
    /// Refused: the workload changed since it was listed (409); plan it again.
    Stale(String),
    /// The workload is gone (deleted meanwhile): nothing to write.
    Gone(String),
    Problem(Problem),
}

/// What the API server answered one request of a write: a `Sent`, or refused as invalid
/// (422), which `send` tells apart (gone, or refused by a policy) before anyone sees it.
enum Answer {
    Sent(Sent),
    Invalid(String),
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

/// Sends one planned write to one workload; a refusal as invalid is told apart first.
pub(super) async fn send(
    ctx: &Context,
    ns: &str,
    kind: &Kind,
    m: &Member,
    w: &group::Write,
    holder_uid: &str,
) -> Result<Sent> {
    match write(ctx, ns, kind, m, w, holder_uid).await? {
        Answer::Invalid(message) => refused(ctx, ns, kind, m, message).await,
        Answer::Sent(sent) => Ok(sent),
    }
}

/// Sends `body`, made for member `m` of `kind`, as the group's apply; a refusal as invalid is
/// told apart first.
pub(super) async fn apply_body(
    ctx: &Context,
    ns: &str,
    kind: &Kind,
    m: &Member,
    body: &serde_json::Value,
) -> Result<Sent> {
    match apply(ctx, ns, kind, m, body).await? {
        Answer::Invalid(message) => refused(ctx, ns, kind, m, message).await,
        Answer::Sent(sent) => Ok(sent),
    }
}

/// The group's apply of `body` (forced, under its field manager).
async fn apply(
    ctx: &Context,
    ns: &str,
    kind: &Kind,
    m: &Member,
    body: &serde_json::Value,
) -> Result<Answer> {
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), ns, &kind.resource);
    ctx.metrics.write(&kind.resource.plural, "apply");
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let sent = api.patch(&m.name, &params, &Patch::Apply(body)).await;
    answer(sent.map(|_| ()), "patch", "", ns, kind, m)
}

async fn write(
    ctx: &Context,
    ns: &str,
    kind: &Kind,
    m: &Member,
    w: &group::Write,
    holder_uid: &str,
) -> Result<Answer> {
    let mut body = w.body(m, holder_uid);
    if m.keda {
        // A workload KEDA scales: its record alone (its count is KEDA's, and its ScaledObject
        // carries the schedule's), by apply as every record is, never through /scale. A
        // built-in kind's apply carries its count as read, unchanged (the write is refused if
        // it moved since): server-side apply would reset a field that the operator's earlier
        // applies own and this one left out.
        if !kind.built_in
            && let Some(o) = body.as_object_mut()
        {
            o.remove("spec");
        }
    } else if !kind.built_in {
        let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), ns, &kind.resource);
        return write_custom(ctx, &api, ns, kind, m, w, body).await;
    }
    apply(ctx, ns, kind, m, &body).await
}

/// A custom kind: the count through /scale (its path is the CRD's), the record by apply of
/// the object: the record first when holding, last when releasing, so a crash in between
/// leaves the own count recorded or already back.
async fn write_custom(
    ctx: &Context,
    api: &Api<DynamicObject>,
    ns: &str,
    kind: &Kind,
    m: &Member,
    w: &group::Write,
    mut body: serde_json::Value,
) -> Result<Answer> {
    let apply = PatchParams::apply(FIELD_MANAGER).force();
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
    let answer = |result: kube::Result<()>, sub: &str| answer(result, "patch", sub, ns, kind, m);
    if w.record.is_some() {
        ctx.metrics.write(&kind.resource.plural, "apply");
        let recorded = api.patch(&m.name, &apply, &Patch::Apply(&body)).await;
        let rv = recorded.as_ref().ok().and_then(|o| o.resource_version());
        match answer(recorded.map(|_| ()), "")? {
            Answer::Sent(Sent::Done) => {}
            other => return Ok(other),
        }
        ctx.metrics
            .write(&format!("{}/scale", kind.resource.plural), "patch");
        let scaled = api
            .patch_scale(&m.name, &scale_params, &Patch::Merge(&merge(rv)))
            .await;
        answer(scaled.map(|_| ()), "/scale")
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
        match answer(scaled.map(|_| ()), "/scale")? {
            Answer::Sent(Sent::Done) => {}
            other => return Ok(other),
        }
        // The scale changed its resourceVersion: the record goes by uid alone.
        if let Some(meta) = body.get_mut("metadata").and_then(|m| m.as_object_mut()) {
            meta.remove("resourceVersion");
        }
        ctx.metrics.write(&kind.resource.plural, "apply");
        let released = api.patch(&m.name, &apply, &Patch::Apply(&body)).await;
        answer(released.map(|_| ()), "")
    }
}

/// What the API server's answer to one request (`verb` on `sub`) of a write means.
fn answer(
    result: kube::Result<()>,
    verb: &str,
    sub: &str,
    ns: &str,
    kind: &Kind,
    m: &Member,
) -> Result<Answer> {
    match result {
        Ok(()) => Ok(Answer::Sent(Sent::Done)),
        Err(kube::Error::Api(s)) if s.is_conflict() => Ok(Answer::Sent(Sent::Stale(format!(
            "{} {} changed since it was read ({})",
            m.kind, m.name, s.message
        )))),
        Err(kube::Error::Api(s)) if s.is_not_found() => Ok(Answer::Sent(Sent::Gone(format!(
            "{} {} was deleted meanwhile",
            m.kind, m.name
        )))),
        // Refused as invalid: an admission policy or the kind's own rules (an apply to a
        // deleted object, which would create it, fails so too: `refused` tells them apart).
        // 400 too: an admission webhook that denies without a code.
        Err(kube::Error::Api(s)) if s.code == 422 || s.code == 400 => {
            Ok(Answer::Invalid(s.message))
        }
        Err(kube::Error::Api(s)) if s.is_forbidden() => Ok(Answer::Sent(Sent::Problem(forbidden(
            verb,
            &kind.resource,
            sub,
            ns,
            &s.message,
        )))),
        // Anything else (a webhook down, a 5xx) fails this write only: the others still land,
        // and the reconcile reports it and is retried.
        Err(e) => Err(Error::kube(format!(
            "{verb} {}{sub} {} in {ns}",
            kind.resource.plural, m.name
        ))(e)),
    }
}

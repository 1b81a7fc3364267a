//! The owned form (`container` or `template`): the Deployment the TDSet runs, then its Service,
//! each written only when it differs (the release stage deletes them when the TDSet takes
//! another form).

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Service;
use kube::api::Api;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use tracing::warn;

use crate::api::{ScaleTargetRef, TDSet};
use crate::controller::io::owned::{Change, delete_owned, ensure};
use crate::controller::io::target::hpa_scaling;
use crate::controller::kinds::Turn;
use crate::controller::kinds::events::record_deployment_change;
use crate::controller::lane::{EventType, Events, note};
use crate::controller::state::{Context, Outcome, Scaled, Write};
use crate::error::{Error, Result};
use crate::memo::OwnWrites;
use crate::status::{Missing, Observed, Problem, reason};
use crate::workload::owned;
use crate::workload::savings::{self, Saved};

/// The owned mode (`container` or `template`): the Deployment, then the Service.
/// The form is not allowed in this namespace (`--pod-forms-in`): nothing is created or
/// changed. A Deployment of this TDSet's from before (the flag set since) keeps running as
/// it is, and status says so rather than "nothing runs".
pub(crate) fn refused(turn: Turn<'_>, why: String) -> Result<Outcome> {
    let (tdset, ctx, ns, eval) = (turn.tdset, turn.ctx, turn.ns, turn.eval);
    let name = tdset.name_any();
    let running = ctx
        .deployments
        .get(&ObjectRef::new(&name).within(ns))
        .map(|c| c.object())
        .transpose()?
        .filter(|d| owned::is_owned_by(d, tdset));
    Ok(match running {
        Some(d) => {
            let problem = Problem::FormNotAllowed(format!(
                "{why}. Its Deployment {name}, created before, keeps running as it is (the operator \
                 no longer scales it; delete the TDSet to remove it)"
            ));
            Outcome {
                problem: Some(problem),
                ..Outcome::observed(Ok(Observed::deployment(&d, eval.replicas)))
            }
        }
        None => Outcome::missing(
            Missing {
                reason: reason::BLOCKED,
                message: "nothing runs: this form is not allowed in this namespace".into(),
            },
            Some(Problem::FormNotAllowed(why)),
        ),
    })
}

pub(crate) async fn reconcile(mut turn: Turn<'_>) -> Result<Outcome> {
    let Turn {
        tdset,
        ctx,
        ns,
        eval,
        write,
        events: _,
    } = turn;
    let name = tdset.name_any();
    let cached = ctx
        .deployments
        .get(&ObjectRef::new(&name).within(ns))
        .map(|c| c.object())
        .transpose()?;
    if write == Write::Never {
        // Suspended: report what is there, touch nothing.
        let workload = cached
            .as_ref()
            .filter(|d| owned::is_owned_by(*d, tdset))
            .map(|d| Observed::deployment(d, eval.replicas))
            .ok_or_else(|| Missing {
                reason: reason::DEPLOYMENT_MISSING,
                message: format!(
                    "no Deployment {name} of this TDSet exists (suspended: none is created)"
                ),
            });
        return Ok(Outcome::observed(workload));
    }
    // An HPA that scales this Deployment sets its replicas: they are left to it (the two would
    // revert each other at every HPA sync), and the TDSet says so.
    let hpa = hpa_scaling(
        ctx,
        ns,
        &ScaleTargetRef {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            name: name.clone(),
        },
    );
    let cached_replicas = cached
        .as_ref()
        .and_then(|d| d.spec.as_ref())
        .and_then(|s| s.replicas);
    let replicas = match (&hpa, cached_replicas) {
        (Some(_), Some(n)) => n,
        _ => eval.replicas,
    };
    let (workload, problem, scaled) = deployment(&mut turn, cached.as_ref(), replicas).await?;
    let at_count = scaled.is_none() && hpa.is_none() && cached_replicas == Some(eval.replicas);
    let scaled = scaled.map(Scaled::from_count);
    let problem = problem.or(hpa.map(|h| {
        Problem::ConflictingAutoscaler(format!(
            "HorizontalPodAutoscaler {h} scales Deployment {name}, which this TDSet runs; its replicas are \
             left to the HPA rather than fought over. To schedule the HPA's floor, run the workload \
             elsewhere and set spec.scaleTargetRef to {{apiVersion: autoscaling/v2, kind: \
             HorizontalPodAutoscaler, name: {h}}}"
        ))
    }));
    let problem = match ensure_service(tdset, ctx, ns, turn.events).await {
        Ok(()) => problem,
        Err(e @ Error::ForeignObject { .. }) => problem.or(Some(foreign_problem(&e))),
        Err(Error::InvalidSpec(errors)) => {
            let text = errors
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ");
            problem.or(Some(Problem::InvalidSpec(text)))
        }
        Err(e) => return Err(e),
    };
    Ok(Outcome {
        problem,
        scaled,
        at_count,
        saved: Some(owned_savings(tdset, eval.replicas)),
        ..Outcome::observed(workload)
    })
}

/// The Deployment at `replicas` (the schedule's, or the HPA's): written if it differs from
/// `cached`; what it is then, a problem with it, and the count before if this scaled it.
async fn deployment(
    turn: &mut Turn<'_>,
    cached: Option<&Deployment>,
    replicas: i32,
) -> Result<(
    std::result::Result<Observed, Missing>,
    Option<Problem>,
    Option<i32>,
)> {
    let (tdset, ctx, ns, eval) = (turn.tdset, turn.ctx, turn.ns, turn.eval);
    let name = tdset.name_any();
    let desired =
        owned::desired_deployment(tdset, replicas)?.ok_or(Error::MissingField("spec.container"))?;
    let template_changed = cached.is_some_and(|c| !owned::only_replicas_differ(&desired, c));
    let api: Api<Deployment> = Api::namespaced(ctx.client.clone(), ns);
    let missing = || Missing {
        reason: reason::DEPLOYMENT_MISSING,
        message: format!("no Deployment {name} of this TDSet exists"),
    };
    let before = cached
        .and_then(|d| d.spec.as_ref())
        .and_then(|s| s.replicas);
    let key = OwnWrites::key(ns, &name);
    let fingerprint = OwnWrites::fingerprint(&desired);
    let stale_but_written = cached.is_some_and(|c| {
        ctx.own_writes
            .in_place(&key, fingerprint, c.meta().resource_version.as_deref())
    });
    let result = if stale_but_written {
        // Our own write is newer than the cache and still what is wanted: nothing to do, and
        // nothing to report twice. Its replica count is the one we wrote.
        let mut d = cached.cloned().unwrap_or_default();
        if let Some(spec) = d.spec.as_mut() {
            spec.replicas = Some(replicas);
        }
        Ok((d, Change::Unchanged))
    } else {
        ensure(ctx, tdset, &api, "deployments", desired, cached).await
    };
    match result {
        Ok((d, change)) => {
            if change != Change::Unchanged {
                ctx.own_writes
                    .record(&key, fingerprint, d.meta().resource_version.as_deref());
            }
            // Made at a request wake-up's count (the wake endpoint recorded it before the
            // Deployment existed): a change from the schedule's 0 (a request wakes only what
            // the schedule has asleep), for the history.
            let woken_at_birth =
                change == Change::Created && eval.woken_until.is_some() && replicas > 0;
            let scaled = match before {
                _ if woken_at_birth => Some(0),
                before if change == Change::Updated && before != Some(replicas) => {
                    Some(before.unwrap_or(0))
                }
                _ => None,
            };
            record_deployment_change(
                tdset,
                ctx,
                eval,
                cached,
                &change,
                template_changed,
                turn.events,
            );
            Ok((Ok(Observed::deployment(&d, eval.replicas)), None, scaled))
        }
        Err(e @ Error::ForeignObject { .. }) => {
            Ok((Err(missing()), Some(foreign_problem(&e)), None))
        }
        // The API server rejected the pod template: say why, keep the Deployment as it is,
        // and look again when the spec changes (no retry storm).
        Err(Error::Kube {
            source: kube::Error::Api(s),
            ..
        }) if s.is_invalid() || s.code == 400 => {
            let message = format!(
                "the API server rejected the Deployment: {}; the Deployment is left as it is until spec.template is fixed",
                s.message
            );
            warn!(%message, "invalid pod template");
            let seen = cached.map(|d| Observed::deployment(d, eval.replicas));
            Ok((
                seen.ok_or_else(missing),
                Some(Problem::InvalidTemplate(message)),
                None,
            ))
        }
        Err(e) => Err(e),
    }
}

/// An owned Deployment at `replicas` against the highest count its spec sets.
fn owned_savings(tdset: &TDSet, replicas: i32) -> Saved {
    Saved::removed(
        savings::highest_count(&tdset.spec),
        replicas,
        savings::owned_requests(&tdset.spec),
    )
}

/// The Degraded problem for an object of the owned name that belongs to someone else.
fn foreign_problem(e: &Error) -> Problem {
    Problem::ForeignObject(format!(
        "{e}; the operator will not adopt, scale or patch it. Delete or rename it, or rename the TDSet"
    ))
}

async fn ensure_service(tdset: &TDSet, ctx: &Context, ns: &str, events: &mut Events) -> Result<()> {
    let api: Api<Service> = Api::namespaced(ctx.client.clone(), ns);
    let cached = ctx
        .services
        .get(&ObjectRef::new(&tdset.name_any()).within(ns))
        .map(|c| c.object())
        .transpose()?;
    match owned::desired_service(tdset)? {
        Some(desired) => {
            let (_, change) =
                ensure(ctx, tdset, &api, "services", desired, cached.as_ref()).await?;
            if change != Change::Unchanged {
                let verb = if change == Change::Created {
                    "created"
                } else {
                    "updated"
                };
                events.push(note(
                    tdset,
                    EventType::Normal,
                    "ServiceApplied",
                    format!("{verb} Service {ns}/{}", tdset.name_any()),
                ));
            }
        }
        // spec.service was removed: delete the Service only if it is ours, and only that one.
        None => {
            if delete_owned(ctx, tdset, &api, "services", cached).await? {
                events.push(note(
                    tdset,
                    EventType::Normal,
                    "ServiceDeleted",
                    format!(
                        "deleted Service {ns}/{} (spec.service removed)",
                        tdset.name_any()
                    ),
                ));
            }
        }
    }
    Ok(())
}

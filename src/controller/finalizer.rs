//! `onDelete: Restore`: a finalizer that puts a referenced target back to the count it had
//! when the TDSet took it over. It never blocks a deletion for a target that is gone or that
//! the operator may not write: it says so in an Event and lets go.

use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde_json::json;
use tracing::{info, warn};

use super::Context;
use super::events::{EventType, publish};
use super::scale;
use crate::api::{OnDelete, TDSet};
use crate::error::{Error, Result};
use crate::workload::owned::FIELD_MANAGER;

/// The finalizer the operator sets on TDSets with `onDelete: Restore`.
pub const RESTORE_FINALIZER: &str = "schedule.rs/restore-target";

fn wants_finalizer(tdset: &TDSet) -> bool {
    tdset.spec.scale_target_ref.is_some() && tdset.spec.on_delete == Some(OnDelete::Restore)
}

fn has_finalizer(tdset: &TDSet) -> bool {
    tdset.finalizers().iter().any(|f| f == RESTORE_FINALIZER)
}

/// Sets or clears the finalizer with server-side apply: the operator's field manager owns its
/// own item of `metadata.finalizers` (a set), so other finalizers are never touched.
async fn set_finalizer(tdset: &TDSet, ctx: &Context, ns: &str, present: bool) -> Result<()> {
    let finalizers: Vec<&str> = if present {
        vec![RESTORE_FINALIZER]
    } else {
        vec![]
    };
    let body = json!({
        "apiVersion": "schedule.rs/v1",
        "kind": "TDSet",
        "metadata": {"name": tdset.name_any(), "uid": tdset.meta().uid, "finalizers": finalizers},
    });
    ctx.metrics.write("tdsets", "apply");
    let api: Api<TDSet> = Api::namespaced(ctx.client.clone(), ns);
    match api
        .patch(
            &tdset.name_any(),
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&body),
        )
        .await
    {
        Ok(_) => Ok(()),
        // Deleted meanwhile: nothing to hold any more.
        Err(kube::Error::Api(s)) if !present && (s.is_not_found() || s.is_conflict()) => Ok(()),
        Err(e) => Err(Error::kube(format!(
            "{} the finalizer of TDSet {ns}/{}",
            if present { "adding" } else { "removing" },
            tdset.name_any()
        ))(e)),
    }
}

/// Adds the finalizer when `onDelete: Restore` asks for it, removes it when it no longer does.
pub(super) async fn ensure(tdset: &TDSet, ctx: &Context, ns: &str) -> Result<()> {
    let (want, have) = (wants_finalizer(tdset), has_finalizer(tdset));
    if want != have {
        set_finalizer(tdset, ctx, ns, want).await?;
    }
    Ok(())
}

/// A TDSet being deleted: restore its target if asked to, then let it go.
pub(super) async fn on_delete(tdset: &TDSet, ctx: &Context, ns: &str) -> Result<()> {
    if !has_finalizer(tdset) {
        // Owned objects go with the garbage collector; a target is kept as it is.
        return Ok(());
    }
    let original = ctx
        .statuses
        .current(tdset)
        .and_then(|s| s.target)
        .and_then(|t| t.original_replicas);
    match (&tdset.spec.scale_target_ref, original) {
        (Some(r), Some(original)) if wants_finalizer(tdset) => {
            match scale::restore(ctx, ns, r, original).await? {
                Ok(done) => {
                    info!(%done, "restored the target before deletion");
                    publish(
                        ctx,
                        tdset,
                        EventType::Normal,
                        "Restored",
                        format!("{done} (onDelete: Restore)"),
                    )
                    .await;
                }
                Err(p) => {
                    warn!(problem = %p.message(), "could not restore the target; deleting anyway");
                    publish(
                        ctx,
                        tdset,
                        EventType::Warning,
                        "RestoreFailed",
                        format!(
                            "could not restore {r} to {original}: {}; the TDSet is deleted anyway",
                            p.message()
                        ),
                    )
                    .await;
                }
            }
        }
        (Some(r), None) => {
            publish(
                ctx,
                tdset,
                EventType::Warning,
                "RestoreFailed",
                format!("no original count of {r} was recorded, so there is nothing to restore; the TDSet is deleted anyway"),
            )
            .await;
        }
        _ => {}
    }
    set_finalizer(tdset, ctx, ns, false).await
}

//! The kinds' list: which room holds, and lets go of, the object a `scaleTargetRef` names
//! (the form `Source::referencing` gives it). A new kind is one line in each match here.

use tracing::info;

use super::Turn;
use super::claims;
use super::hold::{self, Held, LetGo, Letting};
use super::{hpa::Hpa, scale::Scale, scaled_object::ScaledObject};
use crate::api::ScaleTargetRef;
use crate::controller::state::{Answer, Outcome};
use crate::error::{Error, Result};
use crate::workload::Source;

/// Holds the object `source` references for one reconcile, as its kind does.
pub(crate) async fn hold(turn: Turn<'_>, source: Source<'_>) -> Result<Outcome> {
    match source {
        Source::Scale(r) => hold::hold::<Scale>(turn, r).await,
        Source::HpaFloor(r) => hold::hold::<Hpa>(turn, r).await,
        Source::ScaledObject(r) => hold::hold::<ScaledObject>(turn, r).await,
        // Not one object held: the forms of their own, which the apply stage gives their turn.
        Source::Container(_) | Source::Template(_) | Source::Group(_) => {
            Err(Error::MissingField("spec.scaleTargetRef"))
        }
    }
}

/// Whether letting go of `r` may write (a finalizer then holds the TDSet's deletion for it):
/// always for an HPA or a ScaledObject (what the schedule set there is given back), for
/// another kind only with `onDelete: Restore`.
pub(crate) fn let_go_writes(r: &ScaleTargetRef, restore: bool) -> bool {
    match Source::referencing(r) {
        Source::HpaFloor(_) | Source::ScaledObject(_) => true,
        _ => restore,
    }
}

/// Lets go of the target `letting.recorded` names, as its kind does: left to another TDSet
/// that holds it with the same own count, else the kind's `Held::let_go`.
/// `r`: the target `letting.recorded` names.
pub(crate) async fn let_go(letting: &Letting<'_>, r: &ScaleTargetRef) -> Answer<LetGo> {
    let recorded = letting.recorded;
    // Held by another TDSet now (an older claim took it over while this one waited) that
    // recorded the same own count (and ceiling): its count is that one's to write, and it
    // gives the own count back when it lets go.
    if let Some(holder) = recorded.original_replicas.and_then(|original| {
        claims::holder_with_same_original(
            letting.tdset,
            letting.ctx,
            letting.ns,
            r,
            recorded.uid.as_deref(),
            original,
            recorded.original_max_replicas,
        )
    }) {
        info!(%holder, deleting = letting.deleting, "left the target to its holder");
        return Ok(Ok(LetGo::default()));
    }
    match Source::referencing(r) {
        Source::ScaledObject(r) => ScaledObject::let_go(letting, r).await,
        Source::HpaFloor(r) => Hpa::let_go(letting, r).await,
        _ => Scale::let_go(letting, r).await,
    }
}

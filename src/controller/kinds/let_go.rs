//! Letting go of a target, whichever kind it is: the kind picked from what the TDSet's status
//! recorded, then its `Held::let_go`.

use super::hold::{Held, LetGo, Letting};
use super::{hpa::Hpa, scale::Scale, scaled_object::ScaledObject};
use crate::api::ScaleTargetRef;
use crate::controller::state::Answer;

/// Whether letting go of `r` may write (a finalizer then holds the TDSet's deletion for it):
/// always for an HPA or a ScaledObject (what the schedule set there is given back), for
/// another kind only with `onDelete: Restore`.
pub(crate) fn let_go_writes(r: &ScaleTargetRef, restore: bool) -> bool {
    r.is_hpa() || r.is_scaled_object() || restore
}

/// Lets go of the target `letting.recorded` names, as its kind does.
/// `r`: the target `letting.recorded` names.
pub(crate) async fn let_go(letting: &Letting<'_>, r: &ScaleTargetRef) -> Answer<LetGo> {
    if r.is_scaled_object() {
        ScaledObject::let_go(letting, r).await
    } else if r.is_hpa() {
        Hpa::let_go(letting, r).await
    } else {
        Scale::let_go(letting, r).await
    }
}

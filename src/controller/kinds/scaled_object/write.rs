//! What both the schedule's turn and the let-go of a ScaledObject use: how long KEDA is given,
//! how often to look, and the writes of a plan.

use std::time::Duration;

use crate::api::ScaleTargetRef;
use crate::controller::io::keda::{self as io, ScaledObjectRead};
use crate::controller::state::{Answer, Context};
use crate::workload::keda::{self, Plan};
use crate::workload::owned::FIELD_MANAGER;

/// How long KEDA is given to answer a write before the TDSet says it has not (letting go waits
/// twice as long before it wakes a workload KEDA left at 0 itself).
pub(crate) const KEDA_GRACE: Duration = Duration::from_secs(30);
/// How often a settled ScaledObject is read again: no watch reports KEDA's status or a
/// change of the workload's count while it is paused.
pub(crate) const CHECK_EVERY: Duration = Duration::from_secs(15);
/// How soon to look again while KEDA is expected to act.
pub(crate) const SOON: Duration = Duration::from_secs(3);

/// The plan's writes: one merge patch, or two where the user's own pause is given back (under
/// a field manager of its own, so it reads as the user's afterwards; the floor and the
/// ceiling stay the operator's). A write of the pause is refused if the ScaledObject changed
/// since it was read (the pause recorded from that read would be stale); floors and ceilings
/// are not guarded (KEDA's status writes move its revision every polling interval). The
/// revision the last write left.
pub(super) async fn write_plan(
    ctx: &Context,
    ns: &str,
    r: &ScaleTargetRef,
    so: &ScaledObjectRead,
    plan: &Plan,
) -> Answer<Option<String>> {
    let fields = (plan.pause.as_ref(), plan.min, plan.max);
    let read_at = plan.pause.as_ref().and(so.view.resource_version.as_deref());
    if !plan.gives_pause_back() {
        return io::write(ctx, ns, (r, so, read_at), FIELD_MANAGER, fields).await;
    }
    let manager = keda::GIVE_BACK_MANAGER;
    let back = io::write(ctx, ns, (r, so, read_at), manager, (fields.0, None, None));
    let given = match back.await? {
        Ok(rv) => rv,
        Err(p) => return Ok(Err(p)),
    };
    if plan.min.is_none() && plan.max.is_none() {
        return Ok(Ok(given));
    }
    io::write(
        ctx,
        ns,
        (r, so, None),
        FIELD_MANAGER,
        (None, plan.min, plan.max),
    )
    .await
}

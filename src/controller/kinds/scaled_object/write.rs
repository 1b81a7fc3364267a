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

/// The contests a TDSet keeps for a ScaledObject.
pub(crate) mod part {
    use crate::controller::kinds::Part;

    /// The schedule's writes: its pause and floor.
    pub(crate) const SCHEDULE: Part = Part("keda");
    /// Its ceiling, contested apart from its floor.
    pub(crate) const CEILING: Part = Part("keda-max");
    /// The turns that make KEDA put a drifted count right.
    pub(crate) const DRIFT: Part = Part("keda-drift");
    /// The unpause of a ScaledObject KEDA left paused.
    pub(crate) const UNPAUSE: Part = Part("keda-unpause");
    /// When a group next reads back a ScaledObject it holds (`Contest::looked`).
    pub(crate) const LOOK: Part = Part("keda-look");
    /// How long KEDA's HPA has been seen missing.
    pub(crate) const HPA: Part = Part("keda-hpa");
    /// Letting go: its writes made (once), and since when KEDA has been seen not running its
    /// workload again.
    pub(crate) const RESUME: Part = Part("keda-resume");
    /// Letting go: KEDA's documented unpause written (once).
    pub(crate) const RESUME_UNPAUSE: Part = Part("keda-resume-unpause");
    /// What a let-go in progress keeps in memory (its writes made once, since when it waits).
    pub(crate) const LETTING_GO: [Part; 2] = [RESUME, RESUME_UNPAUSE];
}

/// Every part (each has a key of its own, tested).
#[cfg(test)]
pub(crate) const PARTS: [crate::controller::kinds::Part; 8] = [
    part::SCHEDULE,
    part::CEILING,
    part::DRIFT,
    part::UNPAUSE,
    part::LOOK,
    part::HPA,
    part::RESUME,
    part::RESUME_UNPAUSE,
];

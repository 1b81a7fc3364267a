//! What the operator does to one object it writes and does not own (`scaleTargetRef`, and
//! the objects a group holds), one room per kind: a pure plan (in `crate::workload`) plus the
//! writes it needs, through `io`.
//!
//! - `hold`: the protocol every kind is held by, written once (`Held`: what each says);
//! - `scale`: a kind with `/scale`;
//! - `hpa`: an HPA, the schedule as its floor (and ceiling);
//! - `scaled_object`: a KEDA ScaledObject: paused, floored, checked, let go of;
//! - `claims`: one writer per object (which TDSet holds a referenced object);
//! - `record`: a referenced target's record in status (its original count);
//! - `events`: which Events a workload change makes.

pub(crate) mod claims;
pub(crate) mod events;
pub(crate) mod hold;
pub(crate) mod hpa;
pub(crate) mod record;
pub(crate) mod scale;
pub(crate) mod scaled_object;

use crate::api::TDSet;
use crate::controller::lane::Events;
use crate::controller::state::{Context, Write};
use crate::schedule::Evaluation;

/// What every form and kind is handed: the TDSet, the context, its namespace, the schedule's
/// level now, whether it may write, and the reconcile's Events to add to.
pub(crate) struct Turn<'a> {
    pub tdset: &'a TDSet,
    pub ctx: &'a Context,
    pub ns: &'a str,
    pub eval: &'a Evaluation,
    pub write: Write,
    pub events: &'a mut Events,
}

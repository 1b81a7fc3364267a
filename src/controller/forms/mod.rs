//! The forms a TDSet's workload takes, one room each: a pure plan (in `crate::workload`) plus
//! the writes it needs, through `io`. Each takes one `Turn` and returns an `Outcome`: what it
//! observed and wrote, for the report stage.
//!
//! - `owned`: `container`/`template`, a Deployment (and Service) the TDSet runs;
//! - `scale_ref`: `scaleTargetRef` to a kind with `/scale`;
//! - `hpa_floor`: `scaleTargetRef` to an HPA, the schedule as its floor;
//! - `scaled_object`: `scaleTargetRef` to a KEDA ScaledObject: paused, floored, checked;
//! - `group`: `scaleTargetSelector`, every selected workload;
//! - `claims`: one writer per workload (which TDSet holds a referenced object);
//! - `target`: a referenced target's record in status (its original count);
//! - `events`: which Events a workload change makes.

pub(crate) mod claims;
pub(crate) mod events;
pub(crate) mod group;
pub(crate) mod hpa_floor;
pub(crate) mod owned;
pub(crate) mod scale_ref;
pub(crate) mod scaled_object;
pub(crate) mod target;

use crate::api::TDSet;
use crate::controller::lane::Events;
use crate::controller::state::{Context, Write};
use crate::schedule::Evaluation;

/// What every form is handed: the TDSet, the context, its namespace, the schedule's level now,
/// whether it may write, and the reconcile's Events to add to.
pub(crate) struct Turn<'a> {
    pub tdset: &'a TDSet,
    pub ctx: &'a Context,
    pub ns: &'a str,
    pub eval: &'a Evaluation,
    pub write: Write,
    pub events: &'a mut Events,
}

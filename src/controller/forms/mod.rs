//! The forms a TDSet's workload takes that are more than one object it holds: a pure plan (in
//! `crate::workload`) plus the writes it needs, through `io`. Each takes one `Turn` and returns
//! an `Outcome`: what it observed and wrote, for the report stage.
//!
//! - `owned`: `container`/`template`, a Deployment (and Service) the TDSet runs;
//! - `group`: `scaleTargetSelector`, every selected workload.
//!
//! `scaleTargetRef` holds one object it does not own: its kind's room in `kinds`.

pub(crate) mod group;
pub(crate) mod owned;

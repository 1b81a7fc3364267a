//! The stages of one reconcile, in the order the driver calls them:
//!
//! - `claim`: a shard writes only the TDSets it has claimed;
//! - `resolve`: the TDSet read once (calendars, schedule, form, the change due);
//! - `release`: what the TDSet drove before and no longer describes is let go of (a deletion,
//!   a retarget, a change of form), and its finalizer set as the spec asks;
//! - `intercept`: wake on request's EndpointSlices, in place before a count goes to 0 and
//!   until the workload's own endpoints are ready again;
//! - `apply`: the form's turn;
//! - `report`: status, history, lag and the next wait.

pub(crate) mod apply;
pub(crate) mod claim;
pub(crate) mod intercept;
pub(crate) mod release;
pub(crate) mod report;
pub(crate) mod resolve;

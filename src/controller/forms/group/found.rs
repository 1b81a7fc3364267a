//! The group as one reconcile found it, shared by the rooms that write it (its KEDA part
//! among them), so that none of them imports the room that drives them.

use std::time::Duration;

use super::observe::Kind;
use super::place::Listed;
use crate::api::TDSet;
use crate::controller::state::Context;
use crate::workload::group::Member;

/// How often a group that has a ScaledObject on record looks again: nothing watches
/// ScaledObjects (one pointed at another workload, or paused by its user, would otherwise wait
/// for the next transition).
pub(super) const SCALED_OBJECT_LOOK: Duration = Duration::from_secs(60);

/// The group as one reconcile found it, for its writes.
pub(super) struct Group<'a> {
    pub(super) tdset: &'a TDSet,
    pub(super) ctx: &'a Context,
    pub(super) ns: &'a str,
    pub(super) uid: &'a str,
    pub(super) kinds: &'a [Kind],
    pub(super) listed: &'a [(usize, Listed)],
    pub(super) members: &'a [Member],
}

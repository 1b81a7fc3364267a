//! What the operator does to one object it writes and does not own (`scaleTargetRef`, and
//! the objects a group holds), one room per kind: a pure plan (in `crate::workload`) plus the
//! writes it needs, through `io`.
//!
//! - `hold`: the protocol every kind is held by, written once (`Held`: what each says);
//! - `list`: the kinds' list: which room holds a `scaleTargetRef`'s object, and lets go of
//!   one a record names;
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
pub(crate) mod list;
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

/// A contest a TDSet keeps beside its own for what a kind writes (see `workload::contest`),
/// under `<namespace>/<name>/<part>`: `Context::forget` drops it with the TDSet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Part(&'static str);

impl Part {
    /// The contest's key for the TDSet `tdset_key` (`<namespace>/<name>`).
    pub(crate) fn key(self, tdset_key: &str) -> String {
        format!("{tdset_key}/{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn each_contest_part_has_a_key_of_its_own() {
        let parts = [&[super::hpa::CEILING][..], &super::scaled_object::PARTS[..]].concat();
        let mut keys: Vec<String> = parts.iter().map(|p| p.key("ns/t")).collect();
        keys.sort();
        keys.dedup();
        assert_eq!(keys.len(), parts.len());
        assert!(keys.contains(&"ns/t/maxReplicas".to_string()));
    }
}

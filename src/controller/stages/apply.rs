//! The apply stage: the form the spec asks for, given its turn (observe only while suspended);
//! a form the namespace does not allow runs nothing.

use super::resolve::Resolved;
use crate::api::TDSet;
use crate::controller::forms::{group, owned};
use crate::controller::kinds::{self, Turn};
use crate::controller::lane::Events;
use crate::controller::state::{Context, Outcome, Write};
use crate::error::Result;
use crate::status::{Missing, Problem, reason};
use crate::workload::Source;

/// Observes the workload and writes what its form's plan asks for.
pub(crate) async fn apply(
    tdset: &TDSet,
    ctx: &Context,
    ns: &str,
    resolved: &Resolved<'_>,
    hold: bool,
    events: &mut Events,
) -> Result<Outcome> {
    // `hold`: this turn must leave the workload as it is (no wake proxy to stand in for it).
    let write = if tdset.spec.is_suspended() || hold {
        Write::Never
    } else {
        Write::IfDifferent
    };
    let turn = Turn {
        tdset,
        ctx,
        ns,
        eval: &resolved.eval,
        write,
        events,
    };
    match resolved.source {
        Source::Group(_) if let Some(refused) = resolved.refused.clone() => {
            // Nothing written, and nothing forgotten: what the group holds (status.group, its
            // kinds), and a target it took over, stay in status for when it is allowed again,
            // deleted, or given another form (each gives back what it holds).
            let previous = ctx.statuses.current(tdset).unwrap_or_default();
            Ok(Outcome {
                group: previous.group,
                target: previous.target,
                ..Outcome::missing(
                    Missing {
                        reason: reason::BLOCKED,
                        message: "this form is not allowed in this namespace: nothing is written"
                            .into(),
                    },
                    Some(Problem::FormNotAllowed(refused)),
                )
            })
        }
        _ if let Some(refused) = resolved.refused.clone() => owned::refused(turn, refused),
        Source::Container(_) | Source::Template(_) => owned::reconcile(turn).await,
        Source::Group(sel) => group::reconcile(turn, sel).await,
        // One object held, by its kind's room (the kinds' list).
        referenced => kinds::list::hold(turn, referenced).await,
    }
}

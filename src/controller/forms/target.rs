//! A referenced target as the TDSet's status records it (its original count, durable before
//! the first write that changes it), and the outcome when the target cannot be used.

use std::time::Duration;

use kube::ResourceExt;
use kube::api::Api;
use tracing::debug;

use crate::api::{ScaleTargetRef, TDSet, TDSetStatus, TargetStatus};
use crate::controller::io::target::is_watched;
use crate::controller::io::tdset::write_target_now;
use crate::controller::state::{Context, Outcome};
use crate::error::{Error, Result};
use crate::status::{Missing, Problem, reason};

/// How soon to look again for a target whose kind no watch reports, or after a permission
/// error (RBAC is not watched): one read per TDSet every 15 s, so a grant or a new object
/// takes effect within seconds, without a retry storm.
const LOOK_AGAIN: Duration = Duration::from_secs(15);

/// The target as status records it, and whether its original count is durable: already in
/// the TDSet's status in the API, for this very object (same uid), before any write of ours.
pub(crate) struct Record {
    pub status: TargetStatus,
    pub durable: bool,
}

/// What status says about the target. The original count is kept from the first takeover
/// for as long as the TDSet points at the same object. Status is the only place it is
/// remembered, so before recording a new one the TDSet is read live: a freshly started
/// operator may list a revision from before the status that recorded it, and would otherwise
/// take the count it set itself for the original. `observed` is the count to take for the
/// original if none is recorded (the field's value now, or the own count a group recorded on
/// the object it held) and the object's uid.
pub(crate) async fn target_status(
    tdset: &TDSet,
    ctx: &Context,
    ns: &str,
    r: &ScaleTargetRef,
    field: &str,
    observed: Option<(i32, Option<&str>)>,
) -> Result<Record> {
    let uid = observed.and_then(|(_, uid)| uid);
    let same = |t: &TargetStatus| {
        t.names(r)
            && t.field == field
            && match (t.uid.as_deref(), uid) {
                (Some(recorded), Some(seen)) => recorded == seen,
                _ => true,
            }
    };
    let recorded = |status: Option<TDSetStatus>| {
        status
            .and_then(|s| s.target)
            .filter(|t| same(t) && t.original_replicas.is_some())
    };
    // A record only queued in the lane is known, not durable: a crash loses it.
    let mut found = recorded(ctx.statuses.durable(tdset));
    if found.is_none() {
        let live = Api::<TDSet>::namespaced(ctx.client.clone(), ns)
            .get(&tdset.name_any())
            .await
            .map_err(Error::kube(format!(
                "reading TDSet {ns}/{}",
                tdset.name_any()
            )))?;
        found = recorded(live.status);
    }
    let queued = recorded(ctx.statuses.current(tdset));
    Ok(match (found, queued) {
        // What this operator decided last, not yet known durable, differs from the durable
        // record (a field set and cleared since, `originalMaxReplicas` or `asleep`, when the
        // cache is older than the last write and a newer status is queued): the decision
        // holds, and is written again before the next change that needs it.
        (Some(t), Some(q)) if q != t => Record {
            status: TargetStatus {
                uid: q.uid.clone().or(uid.map(String::from)),
                ..q
            },
            durable: false,
        },
        (Some(t), _) => Record {
            status: TargetStatus {
                uid: t.uid.clone().or(uid.map(String::from)),
                ..t
            },
            durable: true,
        },
        // Recorded before this operator changed anything, not yet written: still the original.
        (None, Some(t)) => Record {
            status: TargetStatus {
                uid: t.uid.clone().or(uid.map(String::from)),
                ..t
            },
            durable: false,
        },
        (None, None) => Record {
            status: TargetStatus {
                api_version: r.api_version.clone(),
                kind: r.kind.clone(),
                name: r.name.clone(),
                uid: uid.map(String::from),
                field: field.into(),
                original_replicas: observed.map(|(count, _)| count),
                original_max_replicas: None,
                asleep: None,
            },
            durable: false,
        },
    })
}

/// Makes the original count durable before the first write that changes the field, with the
/// count this TDSet sets (`desiredReplicas`): an older claim taking the target over later
/// takes that original for the own count only while the target runs that count.
pub(crate) async fn ensure_durable(
    tdset: &TDSet,
    ctx: &Context,
    record: &mut Record,
    sets: i32,
) -> Result<()> {
    if !record.durable {
        write_target_now(tdset, ctx, &record.status, sets).await?;
        record.durable = true;
    }
    Ok(())
}

/// A target that cannot be read or scaled: the problem reported, what status records of it
/// kept, and a look again soon where no watch would report its change.
pub(crate) fn problem_outcome(p: Problem, r: &ScaleTargetRef, target: TargetStatus) -> Outcome {
    let retry = match &p {
        Problem::Forbidden(_) => Some(LOOK_AGAIN),
        _ if !is_watched(r) => Some(LOOK_AGAIN),
        _ => None,
    };
    debug!(problem = %p.message(), "target not usable");
    let missing = Missing {
        reason: reason::TARGET_MISSING,
        message: format!("{r} cannot be read or scaled: {}", p.reason()),
    };
    Outcome {
        target: Some(target),
        retry,
        ..Outcome::missing(missing, Some(p))
    }
}

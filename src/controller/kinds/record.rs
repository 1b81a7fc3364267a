//! A referenced target as the TDSet's status records it (its original count, durable before
//! the first write that changes it), and the outcome when the target cannot be used.

use std::time::Duration;

use kube::ResourceExt;
use kube::api::Api;
use tracing::debug;

use super::Turn;
use crate::api::{Asleep, ScaleTargetRef, TDSet, TargetStatus};
use crate::controller::io::target::{resolve_and_read, write_if_unchanged};
use crate::controller::io::tdset::write_target_now;
use crate::controller::lane::{EventType, note};
use crate::controller::state::{Answer, Context, Outcome, Write};
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
    /// When `status.asleep` comes from the record of an object of this name since replaced
    /// (see `left_asleep`): that object's own floor, what the workload is woken to.
    pub asleep_floor: Option<i32>,
}

/// What the record of `r` (`field`, the object `uid` now) takes over from `old`, a record of
/// an object of the same name that was deleted and created again since (another uid): none
/// of its counts (they were the old object's), but a workload this TDSet put to sleep
/// through it, which still sleeps and which nobody else would wake, with the old object's
/// own floor to wake it to. `None` when `old` is of this very object, or left none asleep.
pub(crate) fn left_asleep(
    old: &TargetStatus,
    r: &ScaleTargetRef,
    field: &str,
    uid: Option<&str>,
) -> Option<(Asleep, Option<i32>)> {
    let replaced = old.names(r)
        && old.field == field
        && matches!((old.uid.as_deref(), uid), (Some(a), Some(b)) if a != b);
    let asleep = old.asleep.clone().filter(|_| replaced)?;
    Some((asleep, old.original_replicas))
}

/// The workload on record as put to sleep through the target, if it is not `reference` (object
/// `uid`) any more (the target points elsewhere, or that workload was replaced): woken to the
/// own floor it was put to sleep from (the replaced target's, where the record came from one),
/// and taken off the record. `why` says what the target did.
pub(crate) async fn wake_left_behind(
    turn: &mut Turn<'_>,
    record: &mut Record,
    (reference, uid): (&ScaleTargetRef, Option<&str>),
    why: String,
) -> Result<()> {
    let Some(left) = (record.status.asleep.clone()).filter(|a| !asleep_is(a, reference, uid))
    else {
        return Ok(());
    };
    let to = (record.asleep_floor.take())
        .or(record.status.original_replicas)
        .unwrap_or(1)
        .max(1);
    if wake_left(turn, &left, to, why).await? {
        record.status.asleep = None;
    }
    Ok(())
}

/// Wakes `left`, a workload this TDSet put to sleep through its scale target (an HPA, a
/// ScaledObject), to `to`, and says why in an Event. Gone, or not ours to write: nothing is
/// left asleep by this TDSet. Suspended, nothing is written: whether it was tried (else the
/// record of it is kept, and it is woken once the TDSet is resumed).
pub(crate) async fn wake_left(
    turn: &mut Turn<'_>,
    left: &Asleep,
    to: i32,
    why: String,
) -> Result<bool> {
    if turn.write == Write::Never {
        debug!(target = %left.target, why, "suspended: the workload left asleep is woken once resumed");
        return Ok(false);
    }
    match wake_asleep(turn.ctx, turn.ns, left, to).await? {
        Ok(Some(done)) => turn.events.push(note(
            turn.tdset,
            EventType::Normal,
            "Restored",
            format!("{done}: {why}"),
        )),
        Ok(None) => {}
        Err(p) => debug!(problem = %p.message(), "the workload left asleep cannot be woken"),
    }
    Ok(true)
}

/// Whether `asleep` is the workload `reference` (object `uid`).
pub(crate) fn asleep_is(asleep: &Asleep, reference: &ScaleTargetRef, uid: Option<&str>) -> bool {
    asleep.target == *reference
        && match (asleep.uid.as_deref(), uid) {
            (Some(a), Some(b)) => a == b,
            _ => true,
        }
}

/// Wakes a workload this TDSet put to sleep through an HPA or a ScaledObject to `to` replicas: only that very
/// object (its uid), and only while it is still at 0 (someone who woke it meanwhile is left
/// alone). What was done, if anything.
pub(crate) async fn wake_asleep(
    ctx: &Context,
    ns: &str,
    asleep: &Asleep,
    to: i32,
) -> Answer<Option<String>> {
    let (res, view) = match resolve_and_read(ctx, ns, &asleep.target).await? {
        Ok(found) => found,
        Err(p) => return Ok(Err(p)),
    };
    if !asleep_is(asleep, &asleep.target, view.uid.as_deref()) || view.spec_replicas != 0 {
        return Ok(Ok(None));
    }
    let read_at = view.resource_version.as_deref();
    if let Err(p) = write_if_unchanged(ctx, ns, &asleep.target, &res, to, read_at).await? {
        return Ok(Err(p));
    }
    Ok(Ok(Some(format!("woke {} to {to} replicas", asleep.target))))
}

/// What status says about the target. The original count is kept from the first takeover
/// for as long as the TDSet points at the same object. Status is the only place it is
/// remembered, so before recording a new one the TDSet is read live: a freshly started
/// operator may list a revision from before the status that recorded it, and would otherwise
/// take the count it set itself for the original. `observed` is the count to take for the
/// original if none is recorded (the field's value now, or the own count a group recorded on
/// the object it held) and the object's uid. A new record for an object that replaced one of
/// its name keeps the workload left asleep through the old one (`left_asleep`).
pub(crate) async fn target_status(
    tdset: &TDSet,
    ctx: &Context,
    ns: &str,
    r: &ScaleTargetRef,
    field: &str,
    observed: Option<(i32, Option<&str>)>,
) -> Result<Record> {
    let seen = Seen {
        r,
        field,
        uid: observed.and_then(|(_, uid)| uid),
    };
    // A record only queued in the lane is known, not durable: a crash loses it.
    let durable = ctx.statuses.durable(tdset).and_then(|s| s.target);
    let live = match durable.as_ref().is_some_and(|t| seen.records(t)) {
        true => None,
        false => Api::<TDSet>::namespaced(ctx.client.clone(), ns)
            .get(&tdset.name_any())
            .await
            .map_err(Error::kube(format!(
                "reading TDSet {ns}/{}",
                tdset.name_any()
            )))?
            .status
            .and_then(|s| s.target),
    };
    let current = ctx.statuses.current(tdset).and_then(|s| s.target);
    Ok(seen.choose(observed.map(|(count, _)| count), [current, durable, live]))
}

/// The object a record is looked up for: a record names it if it names the reference and the
/// field, and the same uid where both know one.
struct Seen<'a> {
    r: &'a ScaleTargetRef,
    field: &'a str,
    uid: Option<&'a str>,
}

impl Seen<'_> {
    /// Whether `t` is a record of this object with its original count.
    fn records(&self, t: &TargetStatus) -> bool {
        t.names(self.r)
            && t.field == self.field
            && match (t.uid.as_deref(), self.uid) {
                (Some(recorded), Some(seen)) => recorded == seen,
                _ => true,
            }
            && t.original_replicas.is_some()
    }

    fn recorded(&self, target: Option<&TargetStatus>) -> Option<TargetStatus> {
        target.filter(|t| self.records(t)).cloned()
    }

    /// The record to go on from the queued (`current`), the durable and the live status, the
    /// newest first; `observed` is the original when none records one.
    fn choose(
        &self,
        observed: Option<i32>,
        [current, durable, live]: [Option<TargetStatus>; 3],
    ) -> Record {
        let found = self
            .recorded(durable.as_ref())
            .or_else(|| self.recorded(live.as_ref()));
        let queued = self.recorded(current.as_ref());
        let kept = |t: TargetStatus, durable: bool| Record {
            status: TargetStatus {
                uid: t.uid.clone().or(self.uid.map(String::from)),
                ..t
            },
            durable,
            asleep_floor: None,
        };
        match (found, queued) {
            // What this operator decided last, not yet known durable, differs from the durable
            // record (a field set and cleared since, `originalMaxReplicas` or `asleep`, when the
            // cache is older than the last write and a newer status is queued): the decision
            // holds, and is written again before the next change that needs it.
            (Some(t), Some(q)) if q != t => kept(q, false),
            (Some(t), _) => kept(t, true),
            // Recorded before this operator changed anything, not yet written: still the original.
            (None, Some(t)) => kept(t, false),
            (None, None) => {
                // The newest record first: what this operator decided last.
                let left = [current, durable, live]
                    .iter()
                    .flatten()
                    .find_map(|old| left_asleep(old, self.r, self.field, self.uid));
                let (asleep, asleep_floor) = left.unzip();
                Record {
                    status: TargetStatus {
                        api_version: self.r.api_version.clone(),
                        kind: self.r.kind.clone(),
                        name: self.r.name.clone(),
                        uid: self.uid.map(String::from),
                        field: self.field.into(),
                        original_replicas: observed,
                        original_max_replicas: None,
                        asleep,
                        original_pause: None,
                    },
                    durable: false,
                    asleep_floor: asleep_floor.flatten(),
                }
            }
        }
    }
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

/// Kinds whose changes a watch reports within seconds; other kinds are re-read at
/// `intervalMint`, or sooner while they are missing.
pub(crate) fn is_watched(r: &ScaleTargetRef) -> bool {
    r.is_hpa()
        || (r.group() == "apps"
            && matches!(r.kind.as_str(), "Deployment" | "StatefulSet" | "ReplicaSet"))
}

/// Why a kind's object is not read this turn (see `Held::read`).
#[derive(Debug)]
pub(crate) enum Unread {
    /// Not to be read yet (a cache the kind decides from is not synced): why, and when to look
    /// again. Nothing is written meanwhile; the record is kept.
    NotYet(Missing, Duration),
    /// It cannot be held now (gone, forbidden, not served).
    Problem(Problem),
}

impl From<Problem> for Unread {
    fn from(p: Problem) -> Unread {
        Unread::Problem(p)
    }
}

/// A target not read this turn (`why`): the outcome, with what status remembers of it (its
/// original count) kept as every other path keeps it. Gone, the workload left asleep through it
/// is woken where nobody else would (`wake_when_gone`), and taken off the record.
pub(crate) async fn unread(
    turn: &mut Turn<'_>,
    r: &ScaleTargetRef,
    field: &str,
    wake_when_gone: bool,
    why: Unread,
) -> Result<Outcome> {
    let recorded = target_status(turn.tdset, turn.ctx, turn.ns, r, field, None).await?;
    let p = match why {
        Unread::NotYet(missing, retry) => {
            return Ok(Outcome {
                target: Some(recorded.status),
                retry: Some(retry),
                ..Outcome::missing(missing, None)
            });
        }
        Unread::Problem(p) => p,
    };
    let gone = wake_when_gone && matches!(p, Problem::TargetNotFound(_));
    let left = recorded.status.asleep.clone().filter(|_| gone);
    let to = recorded.status.original_replicas.unwrap_or(1).max(1);
    let mut outcome = problem_outcome(p, r, recorded.status);
    if let Some(left) = left
        && wake_left(turn, &left, to, format!("{} {} is gone", r.kind, r.name)).await?
        && let Some(target) = outcome.target.as_mut()
    {
        target.asleep = None;
    }
    Ok(outcome)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn hpa_ref() -> ScaleTargetRef {
        ScaleTargetRef {
            api_version: "autoscaling/v2".into(),
            kind: "HorizontalPodAutoscaler".into(),
            name: "web-hpa".into(),
        }
    }

    /// HPA web-hpa (uid `uid`, own floor 2) put Deployment web to sleep.
    fn record_of(uid: &str) -> TargetStatus {
        TargetStatus {
            api_version: "autoscaling/v2".into(),
            kind: "HorizontalPodAutoscaler".into(),
            name: "web-hpa".into(),
            uid: Some(uid.into()),
            field: "spec.minReplicas".into(),
            original_replicas: Some(2),
            original_max_replicas: Some(10),
            asleep: Some(Asleep {
                target: ScaleTargetRef {
                    api_version: "apps/v1".into(),
                    kind: "Deployment".into(),
                    name: "web".into(),
                },
                uid: Some("uid-web".into()),
            }),
            original_pause: None,
        }
    }

    #[test]
    fn an_hpa_created_again_keeps_the_workload_left_asleep_through_the_old_one() {
        let old = record_of("uid-1");
        let (asleep, floor) =
            left_asleep(&old, &hpa_ref(), "spec.minReplicas", Some("uid-2")).unwrap();
        assert_eq!(asleep, old.asleep.clone().unwrap());
        assert_eq!(floor, Some(2), "woken to the old HPA's own floor");
        // The same object: its record is kept whole, nothing to take over.
        assert_eq!(
            left_asleep(&old, &hpa_ref(), "spec.minReplicas", Some("uid-1")),
            None
        );
        // Not known to be another object (gone, or read without its uid): the record stays.
        assert_eq!(
            left_asleep(&old, &hpa_ref(), "spec.minReplicas", None),
            None
        );
        // Nothing asleep, another name or another field: nothing to take over.
        let awake = TargetStatus {
            asleep: None,
            ..old.clone()
        };
        assert_eq!(
            left_asleep(&awake, &hpa_ref(), "spec.minReplicas", Some("uid-2")),
            None
        );
        let other = ScaleTargetRef {
            name: "api-hpa".into(),
            ..hpa_ref()
        };
        assert_eq!(
            left_asleep(&old, &other, "spec.minReplicas", Some("uid-2")),
            None
        );
        assert_eq!(
            left_asleep(&old, &hpa_ref(), "spec.replicas", Some("uid-2")),
            None
        );
    }
}

//! The protocol every kind a `scaleTargetRef` names is held by, written once: one writer per
//! object (`claims`), one read, the record of its own count (`record`), the reasons it is not
//! written, then the kind's own writes (its pure plan, the durable record first, its contests,
//! its checks). A kind says only what differs (`Held`).

use std::time::Duration;

use kube::ResourceExt;

use super::claims;
use super::record::{Record, Unread, target_status, unread};
use super::{Part, Turn};
use crate::api::{ScaleTargetRef, TDSet, TargetStatus};
use crate::controller::state::{Answer, Context, Outcome};
use crate::error::Result;
use crate::status::Problem;

/// A kind of object a `scaleTargetRef` holds: what `hold` asks of it, step by step.
pub(crate) trait Held {
    /// The field whose own value is recorded (`status.target.field`).
    const FIELD: &'static str;
    /// What one read of the object (and what it needs beside it) gave.
    type Read;

    /// What a let-go in progress keeps among the TDSet's contests: forgotten when the TDSet
    /// schedules the object (again), since that let-go is over.
    const LETTING_GO: &'static [Part] = &[];

    /// Gone, the workload this TDSet put to sleep through it is woken: nobody else would.
    const WAKE_WHEN_GONE: bool = false;

    /// Reads it; `Err`: why it is not held now (not to be read yet, gone, forbidden, not
    /// served).
    async fn read(
        turn: &Turn<'_>,
        r: &ScaleTargetRef,
    ) -> Result<std::result::Result<Self::Read, Unread>>;

    /// A group holds the object (its record on it): left to the group, nothing recorded.
    fn held_by_group(_turn: &Turn<'_>, _r: &ScaleTargetRef, _read: &Self::Read) -> Option<Problem> {
        None
    }

    /// Its own value now and its uid, for the record.
    fn observed(turn: &Turn<'_>, r: &ScaleTargetRef, read: &Self::Read) -> (i32, Option<String>);

    /// Why it is not written, decided with the record at hand (another autoscaler on it):
    /// the outcome then, nothing of the kind's written.
    async fn refused(
        _turn: &mut Turn<'_>,
        _r: &ScaleTargetRef,
        _read: &Self::Read,
        _record: &Record,
    ) -> Result<Option<Outcome>> {
        Ok(None)
    }

    /// The kind's own part: its plan, written (the record made durable first), checked.
    async fn apply(
        turn: &mut Turn<'_>,
        r: &ScaleTargetRef,
        read: Self::Read,
        record: Record,
    ) -> Result<Outcome>;

    /// Lets go of `r` as `recorded` says (the TDSet deleted, or no longer naming it), only on
    /// the object it was recorded from.
    async fn let_go(letting: &Letting<'_>, r: &ScaleTargetRef) -> Answer<LetGo>;
}

/// A target let go of: by which TDSet, as its status recorded it, and how.
pub(crate) struct Letting<'a> {
    pub tdset: &'a TDSet,
    pub ctx: &'a Context,
    pub ns: &'a str,
    pub recorded: &'a TargetStatus,
    /// `onDelete: Restore`: the own count written back.
    pub restore: bool,
    /// The TDSet is deleted: a refusal (a policy, a webhook) is a problem to say, never a
    /// retry that holds the deletion.
    pub deleting: bool,
}

impl Letting<'_> {
    /// A refusal while deleting becomes the problem to say; otherwise it is retried.
    pub(crate) fn refused<T>(&self, result: Answer<T>) -> Answer<T> {
        match result {
            Err(e) if e.is_refused() && self.deleting => Ok(Err(Problem::ApiError(format!(
                "the API server refused it: {e}"
            )))),
            other => other,
        }
    }
}

/// What letting go of a target came to.
#[derive(Debug, Default)]
pub(crate) struct LetGo {
    /// What was done, if anything.
    pub(crate) done: Option<String>,
    /// Not over yet (the workload's autoscaler not yet running it again): look again after
    /// this; the TDSet is kept until then.
    pub(crate) wait: Option<Duration>,
    /// What the autoscaler did not do within its bound (the TDSet goes all the same): the
    /// Warning's reason and message.
    pub(crate) not_resumed: Option<(&'static str, String)>,
}

impl LetGo {
    pub(crate) fn done(done: Option<String>) -> LetGo {
        LetGo {
            done,
            ..LetGo::default()
        }
    }
}

/// Holds `r` as kind `K` for one reconcile.
pub(crate) async fn hold<K: Held>(mut turn: Turn<'_>, r: &ScaleTargetRef) -> Result<Outcome> {
    let (tdset, ctx, ns) = (turn.tdset, turn.ctx, turn.ns);
    let key = format!("{ns}/{}", tdset.name_any());
    for part in K::LETTING_GO {
        ctx.forget_contest(&part.key(&key));
    }
    if let Some(p) = claims::held_elsewhere(tdset, ctx, ns, r) {
        return claims::claimed_outcome(tdset, ctx, ns, p, r).await;
    }
    let read = match K::read(&turn, r).await? {
        Ok(read) => read,
        Err(why) => return unread(&mut turn, r, K::FIELD, K::WAKE_WHEN_GONE, why).await,
    };
    if let Some(p) = K::held_by_group(&turn, r, &read) {
        return Ok(claims::held_outcome(tdset, ctx, p, r));
    }
    let (own, uid) = K::observed(&turn, r, &read);
    let observed = Some((own, uid.as_deref()));
    let record = target_status(tdset, ctx, ns, r, K::FIELD, observed).await?;
    if let Some(out) = K::refused(&mut turn, r, &read, &record).await? {
        return Ok(out);
    }
    K::apply(&mut turn, r, read, record).await
}

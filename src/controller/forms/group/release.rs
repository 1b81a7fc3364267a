//! Letting go of a group: every workload carrying the TDSet's record gets its own count back.

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use kube::ResourceExt;
use tracing::info;

use crate::api::{ScaleTargetSelector, TDSet};
use crate::controller::lane::{EventType, Events, note};
use crate::controller::state::Context;
use crate::error::{Error, Result};
use crate::schedule::Count;
use crate::status::Problem;
use crate::workload::group::{self, LeaveReason, Place, Why};

use super::observe::{Keep, Kind, kinds, member_of, observe, recorded_kinds};
use super::place::{handed_to, keda_targets};
use super::write::{Sent, WRITES_IN_FLIGHT, send};

/// What letting go of a group came to.
pub(crate) struct Release {
    /// What could not be looked at or written, to report.
    pub(crate) problems: Vec<Problem>,
    /// A workload carrying this TDSet's record was refused its own count (a policy, a
    /// webhook, a permission), or a kind that may carry records could not be listed: the
    /// group is not done with.
    pub(crate) stuck: bool,
}

/// Gives every workload carrying this TDSet's record its own count back (deletion, or the
/// group form left), and says what could not be.
pub(crate) async fn release_all(
    tdset: &TDSet,
    ctx: &Context,
    ns: &str,
    sel: Option<&ScaleTargetSelector>,
    events: &mut Events,
) -> Result<Release> {
    let name = tdset.name_any();
    let default = ScaleTargetSelector::default();
    let sel = sel.unwrap_or(&default);
    let mut unlisted = Vec::new();
    let kinds = kinds(ctx, sel, &recorded_kinds(tdset, ctx), &mut unlisted).await?;
    let uid = tdset.uid().unwrap_or_default();
    let mine = |_: &Kind| vec![format!("{}={uid}", group::HELD_BY_UID)];
    // A workload changed between the list and the write (409) is listed and planned again: a
    // record must not be left behind because someone scaled at the wrong moment. What it holds
    // past one reconcile's reads (`--group-max-workloads`) is listed again once the first are
    // given back (they no longer carry its label), until a round gives nothing back.
    let mut attempt = 0;
    // What earlier rounds gave back: a round counts as progress only for a workload given back
    // for the first time (an object that keeps a record whose fields another manager owns is
    // "given back" again and again, and must not keep the loop going).
    let mut given_back = std::collections::HashSet::new();
    let mut round = 0;
    loop {
        round += 1;
        attempt += 1;
        let mut changed = None;
        // Each round's own: a kind that cannot be listed is said once, not once a round.
        let mut problems = unlisted.clone();
        let mut refused = Vec::new();
        let keep = Keep::new(ctx, ns, &name, None, Vec::new());
        let (found, listed) = observe(ctx, ns, &kinds, mine, &keep, &mut problems).await?;
        // A kind that exists but could not be listed (not granted, the API server failing)
        // may still hold records: the group is not done with. One whose CRD is gone is not
        // among `kinds`, and its records went with its objects.
        let unlisted_kind = listed.iter().any(|l| !l);
        let mut writes = Vec::new();
        let keda = keda_targets(&kinds, &found);
        for (k, o, value) in found {
            let kind = &kinds[k];
            let mut m = member_of(kind, &o, value, Place::Outside);
            m.handed_to = handed_to(ctx, ns, kind, &o, &m);
            // Asleep through a ScaledObject it gives back now: its record goes, its count is
            // KEDA's to set.
            m.keda = keda.contains(&(
                kind.resource.group.clone(),
                kind.resource.kind.clone(),
                m.name.clone(),
            ));
            for mut w in group::plan(&name, Count::Own, std::slice::from_ref(&m)).writes {
                w.why = Why::Left(LeaveReason::Released);
                writes.push((kind, m.clone(), w));
            }
        }
        // As a boundary's writes: a few at a time, each awaited whatever the others came to.
        let uid = uid.as_str();
        let sends: Vec<BoxFuture<'_, Released>> = (writes.iter())
            .map(|(kind, m, w)| {
                async move {
                    let what = format!("{} {}", m.kind, m.name);
                    let result = send(ctx, ns, kind, m, w, uid).await;
                    (what, m.uid.clone(), w.clone(), result)
                }
                .boxed()
            })
            .collect();
        let sent: Vec<_> = futures::stream::iter(sends)
            .buffer_unordered(WRITES_IN_FLIGHT)
            .collect()
            .await;
        let mut released = Vec::new();
        let mut progress = false;
        let mut failed = None;
        for (what, workload_uid, w, result) in sent {
            match result {
                Ok(Sent::Done) => {
                    info!(workload = %what, to = %w.to, "released");
                    released.push(format!("{what} ({})", w.to));
                    progress |= given_back.insert(workload_uid);
                }
                Ok(Sent::Stale(why)) => changed = Some(why),
                Ok(Sent::Gone(_)) => {}
                Ok(Sent::Problem(p)) => refused.push(p),
                Err(e) => {
                    failed.get_or_insert(e);
                }
            }
        }
        if !released.is_empty() {
            let shown: Vec<&str> = released.iter().take(5).map(String::as_str).collect();
            let more = match released.len() - shown.len() {
                0 => String::new(),
                n => format!(" and {n} more"),
            };
            events.push(note(
                tdset,
                EventType::Normal,
                "Released",
                format!(
                    "{} workloads got their own count back: {}{more}: the TDSet let go of its group",
                    released.len(),
                    shown.join(", ")
                ),
            ));
        }
        // Those that landed are said; the first that failed outright fails the reconcile.
        if let Some(e) = failed {
            return Err(e);
        }
        let past_cap = (problems.iter()).any(|p| matches!(p, Problem::TooManyWorkloads(_)));
        match changed {
            Some(why) if attempt >= RELEASE_ATTEMPTS => return Err(Error::Contended(why)),
            Some(_) => {}
            None if past_cap && progress && round < RELEASE_ROUNDS => attempt = 0,
            None => {
                let stuck = !refused.is_empty() || unlisted_kind;
                if past_cap {
                    problems.retain(|p| !matches!(p, Problem::TooManyWorkloads(_)));
                    problems.push(left_past_reads(ctx, ns, uid));
                }
                refused.extend(problems);
                return Ok(Release {
                    problems: refused,
                    stuck,
                });
            }
        }
    }
}

/// What carries the TDSet's label past what one reconcile reads and could not be given back
/// (or carries the label with no record of this TDSet: anyone who can read its uid can put it
/// on anything), and how to find it.
fn left_past_reads(ctx: &Context, ns: &str, uid: &str) -> Problem {
    let reads = group::held_reads(ctx.group_max_workloads);
    let label = format!("{}={uid}", group::HELD_BY_UID);
    Problem::TooManyWorkloads(format!(
        "more objects carry this TDSet's label {label} than one reconcile reads ({reads}: twice \
         --group-max-workloads), and the last {reads} read could not be given their own count \
         back; those past them were not read. Find them with: kubectl get \
         deployments,statefulsets,cronjobs,hpa -n {ns} -l {label}"
    ))
}

/// One release sent: the workload (in words, and its uid), the write, what it came to.
type Released = (String, String, group::Write, Result<Sent>);

/// Rounds of listing what it holds past one reconcile's reads and giving it back, before the
/// rest is reported (a bound on the API requests one reconcile sends, whatever a tenant
/// labels).
const RELEASE_ROUNDS: usize = 32;

/// Rounds of listing and writing when letting go, before the reconcile fails and retries.
const RELEASE_ATTEMPTS: usize = 3;

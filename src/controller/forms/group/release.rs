//! Letting go of a group: every workload carrying the TDSet's record gets its own count back.

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use kube::ResourceExt;
use tracing::{info, warn};

use crate::api::{ScaleTargetSelector, TDSet};
use crate::controller::kinds::scaled_object::SOON;
use crate::controller::lane::{EventType, Events, note};
use crate::controller::state::Context;
use crate::error::{Error, Result};
use crate::status::Problem;
use crate::workload::group::{self, KedaRelease, Place, Value};

use super::keda::{forget_keda_wait, kedas_of_asleep, target_of, wait_key, waited};
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
    /// Workloads KEDA scales, asleep on this TDSet's record, that KEDA has not run again yet
    /// since their ScaledObject's pause was given back: the TDSet is kept (bounded) until it has.
    pub(crate) waiting: Vec<String>,
    /// Tried again while KEDA is waited for: what it could not do was said already.
    pub(crate) repeated: bool,
    /// How soon to look again while some are `waiting`.
    pub(crate) wait: Option<std::time::Duration>,
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
    // What KEDA is waited for (see `group::keda_release`), since when, and what it was not
    // waited for any longer.
    let wait_key = wait_key(ns, &name);
    let repeated = ctx.contest(&wait_key[0], |c| c.waits());
    loop {
        round += 1;
        attempt += 1;
        // Each round's own: a kind that cannot be listed is said once, not once a round.
        let mut problems = unlisted.clone();
        let keep = Keep::new(ctx, ns, &name, None, Vec::new());
        let (found, listed) = observe(ctx, ns, &kinds, mine, &keep, &mut problems).await?;
        // A kind that exists but could not be listed (not granted, the API server failing)
        // may still hold records: the group is not done with. One whose CRD is gone is not
        // among `kinds`, and its records went with its objects.
        let unlisted_kind = listed.iter().any(|l| !l);
        let planned = planned(ctx, ns, &name, &kinds, found, &wait_key).await?;
        let uid = uid.as_str();
        let sends = send_round(ctx, ns, uid, &planned, &mut given_back).await;
        say(tdset, ns, &sends, events);
        let (waiting, mut refused) = (planned.waiting, sends.refused);
        // Those that landed are said; the first that failed outright fails the reconcile.
        if let Some(e) = sends.failed {
            return Err(e);
        }
        let past_cap = (problems.iter()).any(|p| matches!(p, Problem::TooManyWorkloads(_)));
        match sends.changed {
            Some(why) if attempt >= RELEASE_ATTEMPTS => return Err(Error::Contended(why)),
            Some(_) => {}
            None if past_cap && sends.progress && round < RELEASE_ROUNDS => attempt = 0,
            None => {
                let stuck = !refused.is_empty() || unlisted_kind;
                if past_cap {
                    problems.retain(|p| !matches!(p, Problem::TooManyWorkloads(_)));
                    problems.push(left_past_reads(ctx, ns, uid));
                }
                refused.extend(problems);
                if waiting.is_empty() {
                    // Over: a later release starts its bound afresh.
                    forget_keda_wait(ctx, ns, &name);
                }
                return Ok(Release {
                    problems: refused,
                    stuck,
                    wait: (!waiting.is_empty()).then_some(SOON),
                    waiting,
                    repeated,
                });
            }
        }
    }
}

/// One round's plan: the writes that give back what was listed, and where KEDA is waited for.
struct Planned<'k> {
    writes: Vec<(&'k Kind, group::Member, group::Write)>,
    /// Workloads KEDA has not run again yet (see `Release::waiting`).
    waiting: Vec<String>,
    /// The uids of those woken directly, KEDA not waited for any longer.
    woken: Vec<String>,
}

/// Plans the release of what one round listed (`found`): each workload's own count back, a
/// workload KEDA scales and that sleeps on this TDSet's record as `group::keda_release` says.
async fn planned<'k>(
    ctx: &Context,
    ns: &str,
    name: &str,
    kinds: &'k [Kind],
    found: Vec<(usize, kube::api::DynamicObject, Value)>,
    wait_key: &[String; 2],
) -> Result<Planned<'k>> {
    let keda = keda_targets(kinds, &found);
    let members: Vec<(usize, group::Member)> = (found.into_iter())
        .map(|(k, o, value)| {
            let kind = &kinds[k];
            let mut m = member_of(kind, &o, value, Place::Outside);
            m.handed_to = handed_to(ctx, ns, kind, &o, &m);
            // Scaled through a ScaledObject it gives back now: its record goes, its count is
            // KEDA's to set.
            m.keda = keda.contains(&target_of(kind, &m));
            (k, m)
        })
        .collect();
    let kedas = kedas_of_asleep(ctx, ns, name, kinds, &members).await?;
    let mut out = Planned {
        writes: Vec::new(),
        waiting: Vec::new(),
        woken: Vec::new(),
    };
    for (k, mut m) in members {
        let kind = &kinds[k];
        let keda = match kedas.as_ref().and_then(|s| s.scaling(kind, &m)) {
            None => None,
            // Whether KEDA scales it is not known: woken directly, at once (a count KEDA then
            // sets over is no harm; one left at 0 with nobody watching is).
            Some(None) => Some(KedaRelease::Wake),
            Some(Some(so)) => {
                let decided = group::keda_release(name, &m, so, waited(ctx, wait_key, so));
                match decided {
                    KedaRelease::Wait => out.waiting.push(format!("{} {}", m.kind, m.name)),
                    KedaRelease::Wake => out.woken.push(m.uid.clone()),
                    // Its count is KEDA's (or its holder's): the record goes, nothing else.
                    KedaRelease::Resumed => m.keda = true,
                }
                Some(decided)
            }
        };
        for w in group::released(name, &m, keda) {
            out.writes.push((kind, m.clone(), w));
        }
    }
    Ok(out)
}

/// What one round's writes came to.
#[derive(Default)]
struct Sends {
    /// Each workload given back, in words with its count.
    released: Vec<String>,
    /// Those of them woken directly, KEDA not waited for any longer.
    woke: Vec<String>,
    /// A workload was given back for the first time.
    progress: bool,
    /// A workload changed between the list and the write (409): listed and planned again.
    changed: Option<String>,
    refused: Vec<Problem>,
    failed: Option<Error>,
}

/// Sends a round's writes as a boundary's are: a few at a time, each awaited whatever the
/// others came to. `given_back`: the workloads given back in earlier rounds (a round counts
/// as progress only for a workload given back for the first time).
async fn send_round(
    ctx: &Context,
    ns: &str,
    uid: &str,
    planned: &Planned<'_>,
    given_back: &mut std::collections::HashSet<String>,
) -> Sends {
    let sends: Vec<BoxFuture<'_, Released>> = (planned.writes.iter())
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
    let mut out = Sends::default();
    for (what, workload_uid, w, result) in sent {
        match result {
            Ok(Sent::Done) => {
                info!(workload = %what, to = %w.to, "released");
                if planned.woken.contains(&workload_uid) {
                    out.woke.push(format!("{what} ({})", w.to));
                }
                out.released.push(format!("{what} ({})", w.to));
                out.progress |= given_back.insert(workload_uid);
            }
            Ok(Sent::Stale(why)) => out.changed = Some(why),
            Ok(Sent::Gone(_)) => {}
            Ok(Sent::Problem(p)) => out.refused.push(p),
            Err(e) => {
                out.failed.get_or_insert(e);
            }
        }
    }
    out
}

/// The Events of a round's writes: those woken directly (said before the release they are
/// part of: an Event that follows is sent after it), and those given back.
fn say(tdset: &TDSet, ns: &str, sends: &Sends, events: &mut Events) {
    if !sends.woke.is_empty() {
        warn!(workloads = ?sends.woke, "KEDA did not run them again; woken directly");
        events.push(note(
            tdset,
            EventType::Warning,
            "KedaNotResumed",
            format!(
                "KEDA did not run {} again within {}s of their ScaledObjects' pause read back \
                 off (or the pause could not be given back within {}s); the operator woke them \
                 to their own count itself. Is KEDA's operator running? `kubectl describe \
                 scaledobjects -n {ns}`",
                sends.woke.join(", "),
                group::KEDA_RESUME_BOUND.as_secs(),
                group::KEDA_RELEASE_AT_MOST.as_secs()
            ),
        ));
    }
    let released = &sends.released;
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

//! The resolve stage: the TDSet read once into what the later stages need. The named
//! calendars (found and missing), the schedule compiled with their dates, the level now and the
//! next change (pure), the workload's form, and the change that was due, if its instant has
//! passed (what the transition lag and the history are measured from).

use kube::ResourceExt;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Datelike, Utc};
use kube::Resource;
use kube::runtime::reflector::{ObjectRef, Store};
use tracing::warn;

use crate::api::{Holiday, IdleStatus, TDCalendar, TDSet, TDSetSpec, TDSetStatus};
use crate::controller::state::{Answer, Context, IcsDates};
use crate::error::Error;
use crate::schedule::{
    Evaluation, Schedule, SharedHolidays, Transition, Warning, unreadable, wake,
};
use crate::status::{self, Problem};
use crate::workload::Source;

/// A TDSet as the stages after this one see it.
pub(crate) struct Resolved<'a> {
    /// The instant the schedule is evaluated at.
    pub now: DateTime<Utc>,
    /// The longest wait before the TDSet is looked at again.
    pub interval: Duration,
    pub source: Source<'a>,
    /// What the schedule says now, with the count to write (a rise written ahead of its
    /// transition included, `warmUp`).
    pub eval: Evaluation,
    /// The schedule's next change.
    pub next: Option<Transition>,
    /// When what is written changes next: the next change, or the start of its write.
    pub next_write: Option<DateTime<Utc>>,
    pub warnings: Vec<Warning>,
    /// The status on record before this reconcile (the lane's queued one, if newer).
    pub previous: Option<TDSetStatus>,
    /// The change that was due, if its instant has passed.
    pub due: Option<DateTime<Utc>>,
    /// Calendars the spec names that do not exist, as the problem reported for them.
    pub calendar_problem: Option<Problem>,
    /// With `spec.wakeOnRequest` and a request wake-up on record: whether it is in force.
    pub requested: Option<bool>,
    /// Why the form may not run in this namespace (`--pod-forms-in`, `--group-form-in`), if
    /// it may not: nothing is written to the workload then.
    pub refused: Option<String>,
    /// With `spec.idle`: where idleness stands (what the schedule counted it from).
    pub idle: Option<IdleStatus>,
}

impl Resolved<'_> {
    /// Whether this reconcile's form may write the workload at all: not while the TDSet is
    /// suspended, nor while its form is refused in its namespace. What depends on the count
    /// being written (the wake proxy put in front of a workload going to 0) asks this, not the
    /// schedule alone.
    pub(crate) fn writes(&self, tdset: &TDSet) -> bool {
        !tdset.spec.is_suspended() && self.refused.is_none()
    }
}

/// Resolves `tdset` at the context's clock. `Ok(Err)`: the spec cannot be evaluated (the
/// problem says why); the workload is then left as it is.
pub(crate) fn resolve<'a>(tdset: &'a TDSet, ctx: &Context) -> Answer<Resolved<'a>> {
    let now = ctx.clock.now();
    // A TDSet with `spec.idle` is woken by the traffic loop when what it reads changes.
    let interval = tdset.spec.check_interval();

    // Schedule: the level now and the next change (pure), with the named calendars' dates.
    let calendars = match read_calendars(ctx, &tdset.spec, now) {
        Ok(read) => read,
        Err(pending) => return Ok(Err(pending)),
    };
    let schedule = match Schedule::compile_with(&tdset.spec, &holidays(&calendars.found)) {
        Ok(s) => s,
        Err(errors) => {
            let message = format!(
                "{}; the workload is left as it is until the spec is fixed",
                errors
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; ")
            );
            warn!(%message, "invalid spec");
            return Ok(Err(Problem::InvalidSpec(message)));
        }
    };
    let source = Source::of(&tdset.spec).map_err(|e| Error::InvalidSpec(vec![e]))?;
    // A request wake-up is read from the TDSet as stored (the wake endpoint writes it), not
    // from the operator's own record of its status.
    let recorded = tdset.status.as_ref().and_then(|s| s.request_wake.as_ref());
    // On record and in force (`Some(true)`), or over (`Some(false)`: ended, or
    // `spec.wakeOnRequest` removed meanwhile).
    let requested = recorded
        .is_some_and(|r| r.until.is_some())
        .then(|| wake::span(&tdset.spec, recorded, now).is_some());
    let schedule = wake::woken(schedule, &tdset.spec, recorded, now);
    let previous = ctx.statuses.current(tdset);
    let (schedule, idle) = idled(schedule, tdset, ctx, previous.as_ref(), now);
    // Measured: from the samples the status keeps (a restart learns nothing again).
    let lead = crate::status::warm_up::lead_at(&tdset.spec, previous.as_ref(), now);
    let (eval, next, next_write) = schedule.led_at(now, lead);
    let warnings = schedule.warnings();

    // A write due: a rise's (ahead of its transition), or any transition's.
    let due = previous
        .as_ref()
        .and_then(|s| {
            s.next_write_time
                .as_deref()
                .or(s.next_transition_time.as_deref())
        })
        .and_then(crate::preview::parse_rfc3339)
        .filter(|t| *t <= now);
    let calendar_problem = calendar_problem(&calendars.unreadable, &calendars.missing);
    let ns = tdset.namespace().unwrap_or_default();
    let refused = match source {
        Source::Group(_) => ctx.group_form.refuse_group(&ns),
        source => ctx.pod_forms.refuse(source, &ns),
    };
    Ok(Ok(Resolved {
        now,
        interval,
        source,
        eval,
        next,
        next_write,
        warnings,
        previous,
        due,
        calendar_problem,
        requested,
        refused,
        idle,
    }))
}

/// `schedule` with the idleness `tdset` reads now (`spec.idle`), and where idleness stands,
/// with when it would sleep if nothing comes.
fn idled(
    schedule: crate::schedule::Schedule,
    tdset: &TDSet,
    ctx: &Context,
    previous: Option<&TDSetStatus>,
    now: DateTime<Utc>,
) -> (crate::schedule::Schedule, Option<IdleStatus>) {
    let mut idle = observe_idle(tdset, ctx, previous, now);
    let schedule = schedule.with_idle(&tdset.spec, idle.as_ref().and_then(status::idle::idleness));
    if let Some(idle) = idle.as_mut() {
        idle.sleeps_at = schedule.idle_sleeps_at(now).map(crate::preview::rfc3339);
    }
    (schedule, idle)
}

/// Where idleness stands for `tdset` (`spec.idle`) at `now`, from what the traffic loop last
/// read (with no Prometheus configured every signal is Unknown, and idleness sleeps nothing).
fn observe_idle(
    tdset: &TDSet,
    ctx: &Context,
    previous: Option<&TDSetStatus>,
    now: DateTime<Utc>,
) -> Option<IdleStatus> {
    let idle = tdset.spec.idle.as_ref()?;
    let ns = tdset.namespace().unwrap_or_default();
    let services: Vec<&str> = (tdset.spec.wake_on_request.iter())
        .flat_map(|w| w.services.iter().map(|s| s.name.as_str()))
        .collect();
    let readings = match &ctx.traffic {
        None => status::idle::without_source(idle, now),
        Some((opts, traffic)) => (idle.signals.iter())
            .map(|s| {
                let answer = (s.prometheus.as_ref())
                    .and_then(|p| crate::workload::traffic::source(p, opts.window_secs))
                    .and_then(|asked| traffic.answer(&asked));
                let answered = answer.as_ref().map(|a| {
                    let rates = match &a.rates {
                        Ok(r) => Ok(&**r),
                        Err((reason, message)) => Err((*reason, message.as_str())),
                    };
                    (a.at, rates)
                });
                let fresh_for = status::idle::fresh_for(opts.every);
                status::idle::reading_of(s, answered, fresh_for, &ns, &services, now)
            })
            .collect(),
    };
    let before = previous.and_then(|p| p.idle.as_ref());
    // The wake proxy's own counts are traffic: the last request it reported.
    let traffic_at = (tdset.status.as_ref())
        .and_then(|s| s.request_wake.as_ref())
        .and_then(|w| w.extended_at.as_deref().or(w.since.as_deref()))
        .and_then(crate::preview::parse_rfc3339);
    Some(status::idle::observe(
        idle, &readings, before, traffic_at, now,
    ))
}

/// The calendars a spec names, as `read_calendars` read them.
struct Named {
    /// Found and readable, with their dates.
    found: Vec<Found>,
    /// With dates the operator cannot read, and why.
    unreadable: Vec<(Arc<TDCalendar>, Vec<String>)>,
    /// The names of those that do not exist.
    missing: Vec<String>,
}

/// The calendars `spec` names, with their dates. `Err`: an iCalendar document is not read yet.
fn read_calendars(ctx: &Context, spec: &TDSetSpec, now: DateTime<Utc>) -> Result<Named, Problem> {
    let (found, missing_calendars) = calendars(&ctx.calendars, spec);
    // A calendar with a date the operator cannot read (stored before the schema checked its
    // dates) is left out, as a missing one is: it must not freeze every TDSet that names it.
    // So is one whose iCalendar document gives no dates (missing, unreadable, refused); one
    // whose document is not read yet holds the TDSet as it is, rather than let it write a
    // count that the document's holidays may change at once.
    let year = now.year();
    let mut pending = Vec::new();
    let (found, unreadable): (Vec<_>, Vec<_>) = found
        .into_iter()
        .map(|c| {
            let mut bad = unreadable(&c.spec.holidays);
            let dates = match c.spec.ics.as_ref().map(|r| ctx.ics.dates(r, year)) {
                None => None,
                Some(IcsDates::Dates(d)) => Some(d),
                Some(IcsDates::Problem(why)) => {
                    bad.push(why);
                    None
                }
                Some(IcsDates::Pending) => {
                    pending.push(c.meta().name.clone().unwrap_or_default());
                    None
                }
            };
            ((c, dates), bad)
        })
        .partition(|(_, bad)| bad.is_empty());
    if !pending.is_empty() {
        return Err(Problem::CalendarInvalid(format!(
            "the iCalendar document of TDCalendar {} is not read yet; the workload is left as \
             it is until it is",
            pending.join(", ")
        )));
    }
    let found: Vec<Found> = found.into_iter().map(|(c, _)| c).collect();
    let unreadable: Vec<(Arc<TDCalendar>, Vec<String>)> = unreadable
        .into_iter()
        .map(|((c, _), bad)| (c, bad))
        .collect();
    Ok(Named {
        found,
        unreadable,
        missing: missing_calendars,
    })
}

/// The calendars a spec names: those found, and the names of those that are not.
fn calendars(store: &Store<TDCalendar>, spec: &TDSetSpec) -> (Vec<Arc<TDCalendar>>, Vec<String>) {
    let mut found = Vec::new();
    let mut missing = Vec::new();
    for name in &spec.calendars {
        match store.get(&ObjectRef::new(&name.0)) {
            Some(c) => found.push(c),
            None => missing.push(name.0.clone()),
        }
    }
    (found, missing)
}

/// A calendar found, with the dates of its iCalendar document, if it has one.
type Found = (Arc<TDCalendar>, Option<Arc<Vec<Holiday>>>);

/// The holidays of the calendars found (their own dates, and those of their iCalendar
/// documents), for `Schedule::compile_with`.
fn holidays(found: &[Found]) -> Vec<SharedHolidays<'_>> {
    found
        .iter()
        .flat_map(|(c, ics)| {
            let calendar = c.meta().name.as_deref().unwrap_or_default();
            std::iter::once(SharedHolidays {
                calendar,
                holidays: &c.spec.holidays,
            })
            .chain(
                ics.as_deref()
                    .map(|holidays| SharedHolidays { calendar, holidays }),
            )
        })
        .collect()
}

/// What a TDSet reports for the calendars it names that cannot be used: unreadable ones first
/// (a fix is due in them), then missing ones.
fn calendar_problem(
    unreadable: &[(Arc<TDCalendar>, Vec<String>)],
    missing: &[String],
) -> Option<Problem> {
    if unreadable.is_empty() {
        return (!missing.is_empty()).then(|| Problem::CalendarNotFound(missing_message(missing)));
    }
    let mut message = unreadable
        .iter()
        .map(|(c, bad)| {
            let name = c.meta().name.as_deref().unwrap_or_default();
            format!(
                "TDCalendar {name} has dates the operator cannot read ({}); none of its dates apply \
                 until it is fixed (kubectl get tdcalendar {name} -o wide)",
                bad.join("; ")
            )
        })
        .collect::<Vec<_>>()
        .join(". ");
    if !missing.is_empty() {
        message = format!("{message}. {}", missing_message(missing));
    }
    Some(Problem::CalendarInvalid(message))
}

/// What a TDSet reports for calendars it names that do not exist.
fn missing_message(missing: &[String]) -> String {
    let names = missing.join(", ");
    let (noun, verb) = if missing.len() == 1 {
        ("TDCalendar", "does")
    } else {
        ("TDCalendars", "do")
    };
    format!(
        "{noun} {names} {verb} not exist; its dates do not apply until it is created (kubectl get tdcalendars)"
    )
}

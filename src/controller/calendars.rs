//! Shared calendars: the `TDCalendar`s the TDSets name, cached whole (they are small and few),
//! and which TDSets name which calendar, so a calendar's change reconciles exactly those
//! TDSets at once.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, RwLock};

use std::time::Duration;

use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use tokio::sync::Notify;
use tracing::debug;

use super::context::{TDSetRef, tdset_ref};
use super::wakeups::Wakeups;
use super::watches::api_backoff;
use crate::api::{TDCalendar, TDCalendarStatus, TDSet, TDSetSpec};
use crate::schedule::{SharedHolidays, holiday_days};
use crate::workload::owned::FIELD_MANAGER;

/// Every `TDCalendar`, cluster-wide.
pub(super) fn calendar_watch(
    api: Api<TDCalendar>,
) -> (
    Store<TDCalendar>,
    impl futures::Stream<Item = Result<TDCalendar, watcher::Error>> + Send,
) {
    let (reader, writer) = reflector::store();
    let stream = watcher(api, watcher::Config::default())
        .backoff(api_backoff())
        .reflect(writer)
        .touched_objects();
    (reader, stream)
}

/// Which TDSets name which calendar; `changed` wakes the usage reporter.
#[derive(Clone, Default)]
pub struct CalendarIndex(Arc<RwLock<Users>>, Arc<Notify>);

#[derive(Default)]
struct Users {
    by_calendar: HashMap<String, HashSet<TDSetRef>>,
    by_tdset: HashMap<TDSetRef, Vec<String>>,
}

impl CalendarIndex {
    pub fn update(&self, tdset: &TDSet) {
        let me = tdset_ref(tdset);
        let names: Vec<String> = tdset.spec.calendars.iter().map(|c| c.0.clone()).collect();
        let Ok(mut users) = self.0.write() else {
            return;
        };
        let had = users.by_tdset.get(&me);
        if had == Some(&names) || (had.is_none() && names.is_empty()) {
            return;
        }
        users.unlink(&me);
        self.1.notify_one();
        if names.is_empty() {
            return;
        }
        for name in &names {
            users
                .by_calendar
                .entry(name.clone())
                .or_default()
                .insert(me.clone());
        }
        users.by_tdset.insert(me, names);
    }

    pub fn remove(&self, tdset: &TDSet) {
        if let Ok(mut users) = self.0.write()
            && users.by_tdset.contains_key(&tdset_ref(tdset))
        {
            users.unlink(&tdset_ref(tdset));
            self.1.notify_one();
        }
    }

    /// The TDSets that name the calendar.
    pub fn users(&self, calendar: &str) -> Vec<TDSetRef> {
        self.0
            .read()
            .ok()
            .and_then(|u| {
                u.by_calendar
                    .get(calendar)
                    .map(|s| s.iter().cloned().collect())
            })
            .unwrap_or_default()
    }
}

impl Users {
    fn unlink(&mut self, me: &TDSetRef) {
        for name in self.by_tdset.remove(me).unwrap_or_default() {
            if let Some(set) = self.by_calendar.get_mut(&name) {
                set.remove(me);
                if set.is_empty() {
                    self.by_calendar.remove(&name);
                }
            }
        }
    }
}

/// The calendars a spec names: those found, and the names of those that are not.
pub(super) fn resolve(
    store: &Store<TDCalendar>,
    spec: &TDSetSpec,
) -> (Vec<Arc<TDCalendar>>, Vec<String>) {
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

/// The holidays of the calendars found, for `Schedule::compile_with`.
pub(super) fn holidays(found: &[Arc<TDCalendar>]) -> Vec<SharedHolidays<'_>> {
    found
        .iter()
        .map(|c| SharedHolidays {
            calendar: c.meta().name.as_deref().unwrap_or_default(),
            holidays: &c.spec.holidays,
        })
        .collect()
}

/// When a calendar changes (or goes), every TDSet that names it is woken through the wakeup
/// scheduler, as a boundary wakes them (kube-runtime's trigger queue was slower for a burst of
/// 1000: BENCHMARKS.md); its usage is reported again.
pub(super) fn on_calendar(
    index: &CalendarIndex,
    wakeups: &Arc<Wakeups>,
) -> impl Fn(TDCalendar) -> Vec<TDSetRef> + Send + Sync + 'static {
    let (index, wakeups) = (index.clone(), wakeups.clone());
    move |c| {
        index.1.notify_one();
        for t in index.users(&c.name_any()) {
            wakeups.now(t.namespace.as_deref().unwrap_or_default(), &t.name);
        }
        vec![]
    }
}

/// Keeps each calendar's `status` (the days it covers, how many TDSets name it) current, for
/// `kubectl get tdcalendars`. Changes are coalesced for a second: at a start every TDSet joins
/// the index, and the calendars are written once, not once per TDSet. Only what differs from
/// the cached status is written.
pub(super) async fn report_usage(client: Client, store: Store<TDCalendar>, index: CalendarIndex) {
    let api: Api<TDCalendar> = Api::all(client);
    loop {
        index.1.notified().await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        if store.wait_until_ready().await.is_err() {
            return;
        }
        for calendar in store.state() {
            let name = calendar.name_any();
            let status = TDCalendarStatus {
                days: Some(holiday_days(&calendar.spec.holidays)),
                used_by: Some(index.users(&name).len() as i64),
            };
            if calendar.status.as_ref() == Some(&status) {
                continue;
            }
            let patch = serde_json::json!({
                "apiVersion": "schedule.rs/v1", "kind": "TDCalendar", "status": status
            });
            if let Err(e) = api
                .patch_status(
                    &name,
                    &PatchParams::apply(FIELD_MANAGER).force(),
                    &Patch::Apply(&patch),
                )
                .await
            {
                // The next change (or the next start) writes it again; usage is informational.
                debug!(calendar = %name, error = %e, "could not report the calendar's usage");
            }
        }
    }
}

/// What a TDSet reports for calendars it names that do not exist.
pub(super) fn missing_message(missing: &[String]) -> String {
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

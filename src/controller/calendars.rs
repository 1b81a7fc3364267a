//! Shared calendars: the `TDCalendar`s the TDSets name, cached whole (they are small and few),
//! and which TDSets name which calendar, so a calendar's change reconciles exactly those
//! TDSets at once.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, RwLock};

use kube::api::Api;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};

use super::watches::api_backoff;
use super::{TDSetRef, tdset_ref};
use crate::api::{TDCalendar, TDSet, TDSetSpec};
use crate::schedule::SharedHolidays;

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

/// Which TDSets name which calendar.
#[derive(Clone, Default)]
pub struct CalendarIndex(Arc<RwLock<Users>>);

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
        if users.by_tdset.get(&me) == Some(&names) {
            return;
        }
        users.unlink(&me);
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
        if let Ok(mut users) = self.0.write() {
            users.unlink(&tdset_ref(tdset));
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

/// The TDSets to reconcile when a calendar changes (or goes).
pub(super) fn on_calendar(
    index: &CalendarIndex,
) -> impl Fn(TDCalendar) -> Vec<TDSetRef> + Send + Sync + 'static {
    let index = index.clone();
    move |c| index.users(&c.name_any())
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

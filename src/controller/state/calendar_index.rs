//! Which TDSets name which calendar, so a calendar's change reconciles exactly those TDSets.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, RwLock};

use tokio::sync::Notify;

use crate::api::TDSet;
use crate::cache::{TDSetRef, tdset_ref};

/// Which TDSets name which calendar; `changed` wakes the usage reporter.
#[derive(Clone, Default)]
pub struct CalendarIndex(Arc<RwLock<Users>>, Arc<Notify>);

#[derive(Default)]
struct Users {
    by_calendar: HashMap<String, HashSet<TDSetRef>>,
    by_tdset: HashMap<TDSetRef, Vec<String>>,
}

impl CalendarIndex {
    /// Wakes the usage reporter.
    pub fn changed(&self) {
        self.1.notify_one();
    }

    /// Until the next `changed`.
    pub async fn notified(&self) {
        self.1.notified().await;
    }

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

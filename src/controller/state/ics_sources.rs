//! The iCalendar documents `TDCalendar`s take dates from (`spec.ics`): the data of each
//! referenced ConfigMap as its watch last showed it, and the dates each document gives, read
//! once per revision and year (the schedule's reconciles share them).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use crate::api::{Holiday, IcsSource};
use crate::schedule::ics;

/// A ConfigMap: (namespace, name).
pub type SourceKey = (String, String);

/// What the watch of one ConfigMap has shown.
#[derive(Clone, Debug, PartialEq)]
pub enum Source {
    /// Not listed yet.
    Pending,
    /// Listed, and not there.
    Missing,
    /// Its watch fails (not granted, most likely): why.
    Failed(String),
    Present {
        resource_version: String,
        data: Arc<BTreeMap<String, String>>,
    },
}

/// A calendar's dates from its document, as a reconcile uses them.
#[derive(Clone, Debug, PartialEq)]
pub enum IcsDates {
    /// Not read yet: a TDSet naming the calendar waits rather than schedule without them.
    Pending,
    Dates(Arc<Vec<Holiday>>),
    /// Why the document gives no dates (missing, unreadable, refused).
    Problem(String),
}

/// A document read in the years around one: (its ConfigMap, its key, the year).
type ReadKey = (SourceKey, String, i32);

/// The documents, and the dates read from them.
#[derive(Default)]
pub struct IcsSources {
    sources: Mutex<HashMap<SourceKey, Source>>,
    /// (source, key, year) -> (the revision read, what it gave).
    read: Mutex<HashMap<ReadKey, (String, IcsDates)>>,
    /// The calendars changed: the set of ConfigMaps to watch may have.
    calendars_changed: Notify,
    /// The ConfigMaps to watch have been worked out from a full list of calendars.
    wanted_once: std::sync::atomic::AtomicBool,
}

pub fn key_of(r: &IcsSource) -> SourceKey {
    (
        r.config_map_ref.namespace.clone(),
        r.config_map_ref.name.clone(),
    )
}

impl IcsSources {
    /// The ConfigMaps to watch are `wanted`: new ones are pending, those no calendar names
    /// any more are forgotten, with their dates.
    pub fn want(&self, wanted: &HashSet<SourceKey>) {
        if let Ok(mut sources) = self.sources.lock() {
            sources.retain(|k, _| wanted.contains(k));
            for k in wanted {
                sources.entry(k.clone()).or_insert(Source::Pending);
            }
        }
        if let Ok(mut read) = self.read.lock() {
            read.retain(|(k, _, _), _| wanted.contains(k));
        }
        self.wanted_once
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// What the watch of `key` shows now. Ignored for a ConfigMap no calendar names.
    pub fn set(&self, key: &SourceKey, source: Source) {
        if let Ok(mut sources) = self.sources.lock()
            && let Some(s) = sources.get_mut(key)
        {
            *s = source;
        }
    }

    /// Whether `key` is still unlisted.
    pub fn pending(&self, key: &SourceKey) -> bool {
        self.sources
            .lock()
            .map(|s| s.get(key) == Some(&Source::Pending))
            .unwrap_or(false)
    }

    /// Whether every document a calendar names has been listed (readiness waits for it, as
    /// for the calendars themselves).
    pub fn ready(&self) -> bool {
        self.wanted_once.load(std::sync::atomic::Ordering::SeqCst)
            && self
                .sources
                .lock()
                .map(|s| !s.values().any(|v| *v == Source::Pending))
                .unwrap_or(true)
    }

    pub fn calendars_changed(&self) {
        self.calendars_changed.notify_one();
    }

    pub async fn notified(&self) {
        self.calendars_changed.notified().await;
    }

    /// The dates `r` gives in the years around `year`.
    pub fn dates(&self, r: &IcsSource, year: i32) -> IcsDates {
        let key = key_of(r);
        let cm = format!("ConfigMap {}/{}", key.0, key.1);
        let source = self
            .sources
            .lock()
            .ok()
            .and_then(|s| s.get(&key).cloned())
            .unwrap_or(Source::Pending);
        let (rv, data) = match source {
            Source::Pending => return IcsDates::Pending,
            Source::Missing => return IcsDates::Problem(format!("{cm} does not exist")),
            Source::Failed(why) => {
                return IcsDates::Problem(format!("{cm} cannot be read: {why}"));
            }
            Source::Present {
                resource_version,
                data,
            } => (resource_version, data),
        };
        let memo = (key, r.config_map_ref.key.clone(), year);
        // Read under the lock: the TDSets an edit wakes all ask at once, and one reads it.
        // A poisoned lock still holds whole entries: the map changes only after a read ends.
        let mut read = self
            .read
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((read_rv, dates)) = read.get(&memo)
            && *read_rv == rv
        {
            return dates.clone();
        }
        let dates = match ics::document_holidays(&data, r, year) {
            Ok(holidays) => IcsDates::Dates(Arc::new(holidays)),
            Err(why) => IcsDates::Problem(why),
        };
        read.insert(memo, (rv, dates.clone()));
        dates
    }
}

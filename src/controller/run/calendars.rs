//! Shared calendars: the `TDCalendar`s the TDSets name, cached whole (they are small and few);
//! a calendar's change reconciles exactly the TDSets that name it, at once; each calendar's
//! usage is reported in its status.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use chrono::Datelike;
use futures::FutureExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use tracing::debug;

use crate::api::{TDCalendar, TDCalendarStatus};
use crate::cache::TDSetRef;
use crate::clock::Clock;
use crate::controller::lane::truncate;
use crate::controller::state::{
    CalendarIndex, IcsDates, IcsSource, IcsSources, SourceKey, Wakeups, api_backoff, key_of,
};
use crate::schedule::{holiday_days, unreadable};
use crate::workload::owned::FIELD_MANAGER;

/// Every `TDCalendar`, cluster-wide.
pub(crate) fn calendar_watch(
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

/// When a calendar changes (or goes), every TDSet that names it is woken through the wakeup
/// scheduler, as a boundary wakes them (kube-runtime's trigger queue was slower for a burst of
/// 1000: BENCHMARKS.md); its usage is reported again.
pub(crate) fn on_calendar(
    index: &CalendarIndex,
    wakeups: &Arc<Wakeups>,
    ics: &Arc<IcsSources>,
) -> impl Fn(TDCalendar) -> Vec<TDSetRef> + Send + Sync + 'static {
    let (index, wakeups, ics) = (index.clone(), wakeups.clone(), ics.clone());
    move |c| {
        index.changed();
        ics.calendars_changed();
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
pub(crate) async fn report_usage(
    client: Client,
    store: Store<TDCalendar>,
    index: CalendarIndex,
    ics: Arc<IcsSources>,
    clock: Arc<dyn Clock>,
) {
    let api: Api<TDCalendar> = Api::all(client);
    loop {
        index.notified().await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        if store.wait_until_ready().await.is_err() {
            return;
        }
        for calendar in store.state() {
            let name = calendar.name_any();
            let mut bad = unreadable(&calendar.spec.holidays);
            let mut holidays = calendar.spec.holidays.clone();
            match calendar
                .spec
                .ics
                .as_ref()
                .map(|r| ics.dates(r, clock.now().year()))
            {
                Some(IcsDates::Dates(dates)) => holidays.extend(dates.iter().cloned()),
                Some(IcsDates::Problem(why)) => bad.push(why),
                Some(IcsDates::Pending) | None => {}
            }
            let status = TDCalendarStatus {
                days: Some(holiday_days(&holidays)),
                used_by: Some(index.users(&name).len() as i64),
                problem: (!bad.is_empty()).then(|| {
                    let text = format!(
                        "{}; the TDSets that name this calendar schedule without its dates until it is fixed",
                        bad.join("; ")
                    );
                    truncate(text, 4096)
                }),
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

/// Watches the ConfigMaps the calendars take iCalendar documents from (`spec.ics`), each
/// alone (a field selector on its name: the operator reads no other ConfigMap), started and
/// stopped as calendars name them. A document's change wakes the TDSets of the calendars
/// that name it, at once, as a calendar's change does.
pub(crate) async fn watch_ics_sources(
    client: Client,
    calendars: Store<TDCalendar>,
    ics: Arc<IcsSources>,
    index: CalendarIndex,
    wakeups: Arc<Wakeups>,
) {
    // Polled, not awaited: a store's readiness wakes only its last waiter (see `run`).
    loop {
        match calendars.wait_until_ready().now_or_never() {
            Some(Ok(())) => break,
            Some(Err(_)) => return,
            None => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    let mut running: HashMap<SourceKey, AbortOnDrop> = HashMap::new();
    loop {
        let wanted: HashSet<SourceKey> = calendars
            .state()
            .iter()
            .filter_map(|c| c.spec.ics.as_ref().map(key_of))
            .collect();
        ics.want(&wanted);
        running.retain(|k, _| wanted.contains(k));
        for key in wanted {
            running.entry(key.clone()).or_insert_with(|| {
                AbortOnDrop(tokio::spawn(watch_one(
                    client.clone(),
                    key,
                    calendars.clone(),
                    ics.clone(),
                    index.clone(),
                    wakeups.clone(),
                )))
            });
        }
        ics.notified().await;
    }
}

/// A task stopped when its handle goes (a ConfigMap no calendar names any more, or the
/// controller stopping).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The watch of one ConfigMap, feeding `ics`.
async fn watch_one(
    client: Client,
    key: SourceKey,
    calendars: Store<TDCalendar>,
    ics: Arc<IcsSources>,
    index: CalendarIndex,
    wakeups: Arc<Wakeups>,
) {
    use futures::StreamExt;
    let api: Api<ConfigMap> = Api::namespaced(client, &key.0);
    let config = watcher::Config::default().fields(&format!("metadata.name={}", key.1));
    let mut events = watcher(api, config).backoff(api_backoff()).boxed();
    let mut listed = false;
    let wake = || {
        index.changed();
        for c in calendars.state() {
            if c.spec.ics.as_ref().map(key_of).as_ref() == Some(&key) {
                for t in index.users(&c.name_any()) {
                    wakeups.now(t.namespace.as_deref().unwrap_or_default(), &t.name);
                }
            }
        }
    };
    while let Some(event) = events.next().await {
        match event {
            Ok(watcher::Event::Init) => listed = false,
            Ok(watcher::Event::InitApply(cm)) => {
                listed = true;
                ics.set(&key, present(&cm));
            }
            Ok(watcher::Event::InitDone) => {
                if !listed {
                    ics.set(&key, IcsSource::Missing);
                }
                wake();
            }
            Ok(watcher::Event::Apply(cm)) => {
                ics.set(&key, present(&cm));
                wake();
            }
            Ok(watcher::Event::Delete(_)) => {
                ics.set(&key, IcsSource::Missing);
                wake();
            }
            Err(e) => {
                // Not granted, most likely: the calendar says so rather than hold its TDSets
                // until a list succeeds. A later list puts the document back.
                debug!(configmap = %format!("{}/{}", key.0, key.1), error = %e, "cannot watch the calendar's ConfigMap");
                if ics.pending(&key) {
                    ics.set(&key, IcsSource::Failed(truncate(e.to_string(), 512)));
                    wake();
                }
            }
        }
    }
}

/// What the operator keeps of a ConfigMap: its revision and its text data.
fn present(cm: &ConfigMap) -> IcsSource {
    IcsSource::Present {
        resource_version: cm.resource_version().unwrap_or_default(),
        data: Arc::new(cm.data.clone().unwrap_or_default()),
    }
}

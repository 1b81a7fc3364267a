//! Shared calendars: the `TDCalendar`s the TDSets name, cached whole (they are small and few);
//! a calendar's change reconciles exactly the TDSets that name it, at once; each calendar's
//! usage is reported in its status.

use std::sync::Arc;
use std::time::Duration;

use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use tracing::debug;

use crate::api::{TDCalendar, TDCalendarStatus};
use crate::cache::TDSetRef;
use crate::controller::lane::truncate;
use crate::controller::state::{CalendarIndex, Wakeups, api_backoff};
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
) -> impl Fn(TDCalendar) -> Vec<TDSetRef> + Send + Sync + 'static {
    let (index, wakeups) = (index.clone(), wakeups.clone());
    move |c| {
        index.changed();
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
pub(crate) async fn report_usage(client: Client, store: Store<TDCalendar>, index: CalendarIndex) {
    let api: Api<TDCalendar> = Api::all(client);
    loop {
        index.notified().await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        if store.wait_until_ready().await.is_err() {
            return;
        }
        for calendar in store.state() {
            let name = calendar.name_any();
            let bad = unreadable(&calendar.spec.holidays);
            let status = TDCalendarStatus {
                days: Some(holiday_days(&calendar.spec.holidays)),
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

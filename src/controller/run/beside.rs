//! The tasks that run beside the controller while this replica leads: a shard's let-go and
//! fill loops, the readiness watch, the calendars' usage report and the iCalendar watches.
//! Each is aborted with the controller: they only feed caches and statuses the next leader
//! recomputes.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::FutureExt;
use kube::Client;
use kube::runtime::reflector;
use tokio::task::JoinHandle;
use tracing::info;

use super::caches::{Caches, Watches};
use crate::controller::state::{Context, fill_loop, let_go_loop};
use crate::http::Health;

/// The running tasks; `abort` stops them all.
pub(super) struct Beside(Vec<JoinHandle<()>>);

impl Beside {
    pub(super) fn start(
        report_calendar_usage: bool,
        watch_client: &Client,
        caches: &Caches,
        watches: &Watches,
        ctx: &Arc<Context>,
        health: Arc<Health>,
    ) -> Self {
        let mut tasks = vec![ready_when_synced(caches, watches, ctx, health)];
        if let Some(s) = &ctx.shard {
            tasks.push(tokio::spawn(let_go_loop(
                s.clone(),
                ctx.client.clone(),
                ctx.lane.clone(),
                ctx.statuses.clone(),
                ctx.wakeups.clone(),
                watches.tdsets.clone(),
                ctx.metrics.clone(),
            )));
            // A fill's list only feeds the indexes.
            tasks.push(tokio::spawn(fill_loop(
                s.clone(),
                ctx.client.clone(),
                ctx.wakeups.clone(),
                watches.tdsets.clone(),
            )));
        }
        if report_calendar_usage {
            tasks.push(tokio::spawn(super::calendars::report_usage(
                ctx.client.clone(),
                watches.calendars.clone(),
                caches.calendar_index.clone(),
                caches.ics.clone(),
                ctx.clock.clone(),
            )));
        }
        // Traffic for `spec.idle`, read while this replica leads.
        if ctx.traffic.is_some() {
            tasks.push(tokio::spawn(super::traffic::read_traffic(ctx.clone())));
        }
        // The watches only feed the documents' cache.
        tasks.push(tokio::spawn(super::calendars::watch_ics_sources(
            watch_client.clone(),
            watches.calendars.clone(),
            caches.ics.clone(),
            caches.calendar_index.clone(),
            caches.wakeups.clone(),
        )));
        Self(tasks)
    }

    pub(super) fn abort(self) {
        for t in self.0 {
            t.abort();
        }
    }
}

/// Ready, and wakeups handed over, once every cache holds a full list (calendars and their
/// documents too: a window must not start on a holiday the operator has not read yet).
/// Polled, not awaited: a store's readiness wakes only its last waiter, and the controller
/// itself waits on the TDSet store.
fn ready_when_synced(
    caches: &Caches,
    watches: &Watches,
    ctx: &Arc<Context>,
    health: Arc<Health>,
) -> JoinHandle<()> {
    let (t, d, s, h, c, w) = (
        watches.tdsets.clone(),
        watches.deployments.clone(),
        watches.services.clone(),
        watches.hpas.clone(),
        watches.calendars.clone(),
        watches.wake_slices.clone(),
    );
    let (ics, all_synced, wakeups) = (
        caches.ics.clone(),
        ctx.synced.clone(),
        caches.wakeups.clone(),
    );
    tokio::spawn(async move {
        let synced =
            |r: Option<Result<(), reflector::store::WriterDropped>>| matches!(r, Some(Ok(())));
        loop {
            if synced(t.wait_until_ready().now_or_never())
                && synced(d.wait_until_ready().now_or_never())
                && synced(s.wait_until_ready().now_or_never())
                && synced(h.wait_until_ready().now_or_never())
                && synced(c.wait_until_ready().now_or_never())
                && synced(w.wait_until_ready().now_or_never())
                && ics.ready()
            {
                info!("caches synced; ready");
                all_synced.store(true, Ordering::SeqCst);
                wakeups.open();
                health.set_ready(true);
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
}

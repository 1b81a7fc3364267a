//! The traffic loop (`spec.idle`): every interval, the distinct queries the TDSets this
//! operator reconciles ask, each asked of Prometheus once whatever the number of TDSets that
//! share it, its answer kept for the reconciles (`state::Traffic`). A TDSet is woken only when
//! what its signal says changes (traffic or none, a Service seen or not, an answer or an
//! error), so 10 000 idle TDSets cost one query and no reconcile while nothing changes. Out of
//! every request path.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use kube::runtime::reflector::Store;
use tracing::{debug, warn};

use crate::api::TDSet;
use crate::cache::Cached;
use crate::controller::io::prometheus::{self, QueryError};
use crate::controller::state::{Context, TrafficAnswer};
use crate::status::reason;
use crate::workload::traffic::{Source, rates, source};

/// The most distinct queries asked per interval: past it the rest are not asked (their
/// signals stay Unknown), so tenants' queries cannot make the operator flood Prometheus.
pub(super) const MAX_QUERIES: usize = 256;

/// A TDSet that asks a query: which Services its signal reads, and the rate under which a
/// Service is idle (`status::idle::threshold`).
struct User {
    ns: String,
    name: String,
    services: Vec<String>,
    below: Option<f64>,
}

/// What an answer says to `user`: for each of its Services, none (no series) or whether it is
/// traffic; or that there is no answer (the reason).
fn says(answer: Option<&TrafficAnswer>, user: &User) -> Result<Vec<Option<bool>>, &'static str> {
    let Some(answer) = answer else {
        return Err(reason::NOT_READ_YET);
    };
    match &answer.rates {
        Ok(rates) => Ok((user.services.iter())
            .map(|s| {
                let rate = rates.get(&user.ns, s)?;
                Some(crate::status::idle::is_traffic(user.below, rate))
            })
            .collect()),
        Err((reason, _)) => Err(reason),
    }
}

/// The distinct queries (a template's, one text) of every TDSet with `spec.idle` in `tdsets`,
/// at most `MAX_QUERIES`, each with the TDSets that ask it; templates over `window_secs`.
fn wanted(tdsets: &Store<Cached<TDSet>>, window_secs: u64) -> BTreeMap<Source, Vec<User>> {
    let mut wanted: BTreeMap<Source, Vec<User>> = BTreeMap::new();
    for cached in tdsets.state() {
        let Ok(tdset) = cached.object() else { continue };
        let Some(idle) = &tdset.spec.idle else {
            continue;
        };
        let below = crate::status::idle::threshold(idle);
        let ns = tdset.metadata.namespace.clone().unwrap_or_default();
        let name = tdset.metadata.name.clone().unwrap_or_default();
        let wake: Vec<String> = (tdset.spec.wake_on_request.iter())
            .flat_map(|w| w.services.iter().map(|s| s.name.clone()))
            .collect();
        for p in idle.signals.iter().filter_map(|s| s.prometheus.as_ref()) {
            let Some(q) = source(p, window_secs) else {
                continue;
            };
            if wanted.len() >= MAX_QUERIES && !wanted.contains_key(&q) {
                continue;
            }
            wanted.entry(q).or_default().push(User {
                ns: ns.clone(),
                name: name.clone(),
                services: p.service.clone().map_or_else(|| wake.clone(), |s| vec![s]),
                below,
            });
        }
    }
    wanted
}

/// Asks every wanted query once per interval, for as long as the operator leads.
pub(super) async fn read_traffic(ctx: Arc<Context>) {
    let Some((opts, traffic)) = ctx.traffic.clone() else {
        return;
    };
    let http = prometheus::http();
    let mut tick = tokio::time::interval(opts.every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let wanted = wanted(&ctx.tdsets, opts.window_secs);
        traffic.retain(&wanted.keys().cloned().collect::<BTreeSet<_>>());
        for (asked, users) in &wanted {
            let query = &asked.query;
            let started = std::time::Instant::now();
            let answer = match prometheus::query(&http, &opts.url, query).await {
                Ok(body) => rates(&body, asked.keys)
                    .map(Arc::new)
                    .map_err(|m| (reason::QUERY_FAILED, m)),
                Err(QueryError::Unreachable(m)) => Err((reason::PROMETHEUS_UNREACHABLE, m)),
                Err(QueryError::Refused(m)) => Err((reason::QUERY_FAILED, m)),
            };
            let outcome = match &answer {
                Ok(_) => "ok",
                Err((reason, message)) => {
                    warn!(%query, reason, %message, "a traffic query gave no answer: its signals are Unknown");
                    "error"
                }
            };
            ctx.metrics
                .idle_query(outcome, started.elapsed().as_secs_f64());
            debug!(%query, outcome, "traffic read");
            let answer = TrafficAnswer {
                at: ctx.clock.now(),
                rates: answer,
            };
            let before = traffic.answer(asked);
            traffic.set(asked, answer.clone());
            // Only those to whom it says something new are looked at now.
            for user in users {
                if says(before.as_ref(), user) != says(Some(&answer), user) {
                    ctx.wakeups.now(&user.ns, &user.name);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::traffic::Rates;

    fn user(below: Option<&str>) -> User {
        let idle: crate::api::Idle = serde_json::from_value(serde_json::json!({
            "after": "5m",
            "belowRequestsPerSecond": below,
            "signals": [{"prometheus": {"query": "q"}}]
        }))
        .unwrap();
        User {
            ns: "dev".into(),
            name: "web".into(),
            services: vec!["web".into(), "api".into()],
            below: crate::status::idle::threshold(&idle),
        }
    }

    fn answer(web: Option<f64>, api: Option<f64>) -> TrafficAnswer {
        let mut rates = Rates::new();
        for (s, r) in [("web", web), ("api", api)] {
            if let Some(r) = r {
                rates.insert("dev", s, r);
            }
        }
        TrafficAnswer {
            at: chrono::Utc::now(),
            rates: Ok(Arc::new(rates)),
        }
    }

    /// A TDSet is woken when its verdict changes, not at every reading of a value.
    #[test]
    fn a_tdset_is_woken_only_when_what_its_signal_says_changes() {
        let u = user(Some("0.5"));
        let (a, b) = (answer(Some(0.1), Some(0.0)), answer(Some(0.3), Some(0.2)));
        assert_eq!(says(Some(&a), &u), says(Some(&b), &u), "quiet either way");
        let busy = answer(Some(0.6), Some(0.0));
        assert_ne!(says(Some(&a), &u), says(Some(&busy), &u));
        let unseen = answer(Some(0.1), None);
        assert_ne!(
            says(Some(&a), &u),
            says(Some(&unseen), &u),
            "a Service no longer seen"
        );
        let failed = TrafficAnswer {
            at: chrono::Utc::now(),
            rates: Err((reason::PROMETHEUS_UNREACHABLE, "refused".into())),
        };
        assert_ne!(says(Some(&a), &u), says(Some(&failed), &u));
        assert_ne!(says(None, &u), says(Some(&a), &u), "the first answer");
        // Without a threshold any request is traffic.
        let any = user(None);
        assert_ne!(
            says(Some(&answer(Some(0.0), Some(0.0))), &any),
            says(Some(&a), &any)
        );
    }
}

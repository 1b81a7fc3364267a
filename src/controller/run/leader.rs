//! Leader election on a `coordination.k8s.io/v1` Lease, as client-go does it: the holder
//! renews every `retry`; a standby takes the lease once it has seen no renewal for the
//! lease's duration (timed by its own clock, from when it saw the record change, so clocks
//! need not agree). A holder that has not renewed for `renew_deadline` (shorter than the
//! duration) stops at once: its controller is dropped mid-reconcile and the statuses and
//! Events it still had queued are dropped, so it writes nothing once another replica may
//! lead. Every request to the Lease has a deadline of its own.

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::{RunOptions, run_controller};
use crate::clients::Clients;
use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::http::Health;
use crate::telemetry::Metrics;
use crate::workload::owned::FIELD_MANAGER;

#[derive(Clone, Debug)]
pub struct LeaseOptions {
    pub name: String,
    pub namespace: String,
    /// How long a lease stays valid without renewal: the longest failover.
    pub duration: Duration,
    /// A shard's selector, published on its Lease (`crate::shard::SELECTOR_ANNOTATION`) so
    /// that another shard knows whether this one still takes a TDSet.
    pub shard_selector: Option<String>,
}

impl LeaseOptions {
    /// A holder that could not renew for this long stops (client-go: 10 s of 15 s).
    fn renew_deadline(&self) -> Duration {
        self.duration * 2 / 3
    }

    /// How often the holder renews and a standby tries (client-go: 2 s of 15 s).
    fn retry(&self) -> Duration {
        (self.duration / 7).max(Duration::from_millis(500))
    }
}

/// Runs the controller, with Lease-based leader election when `lease` is set: only the
/// holder reconciles; a standby waits, ready, and takes over when the lease expires.
pub async fn run(
    clients: Clients,
    opts: RunOptions,
    lease: Option<LeaseOptions>,
    clock: Arc<dyn Clock>,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let shutdown = shutdown.shared();
    let Some(lease) = lease else {
        metrics.leader.set(1);
        let never_lost = std::future::pending();
        return run_controller(clients, &opts, clock, metrics, health, shutdown, never_lost).await;
    };
    let mut elector = Elector::new(clients.requests.clone(), &lease, &opts.instance);
    health.set_ready(true);
    info!(lease = %format!("{}/{}", lease.namespace, lease.name), identity = %opts.instance, "waiting for the leader lease");
    loop {
        // Standby: try every `retry` until the lease is ours.
        loop {
            if elector.try_acquire_or_renew(lease.renew_deadline()).await {
                break;
            }
            tokio::select! {
                _ = tokio::time::sleep(lease.retry()) => {}
                _ = shutdown.clone() => return Ok(()),
            }
        }
        info!("acquired the leader lease; reconciling");
        metrics.leader.set(1);
        let (lost_tx, lost_rx) = tokio::sync::oneshot::channel::<()>();
        let renewer = tokio::spawn({
            let (mut elector, lease) = (elector.clone(), lease.clone());
            async move {
                elector.hold(&lease).await;
                let _ = lost_tx.send(());
            }
        });
        let lost = async move {
            let _ = lost_rx.await;
        };
        let result = run_controller(
            clients.clone(),
            &opts,
            clock.clone(),
            metrics.clone(),
            health.clone(),
            shutdown.clone(),
            lost,
        )
        .await;
        renewer.abort();
        metrics.leader.set(0);
        health.set_ready(true);
        result?;
        if shutdown.clone().now_or_never().is_some() {
            elector.release().await;
            return Ok(());
        }
        warn!("lost the leader lease; standing by");
        elector = Elector::new(clients.requests.clone(), &lease, &opts.instance);
    }
}

/// One replica's view of the Lease.
#[derive(Clone)]
struct Elector {
    api: Api<Lease>,
    name: String,
    /// Written with every acquisition and renewal.
    annotations: serde_json::Value,
    identity: String,
    duration: Duration,
    /// The record last seen (holder, renewTime, transitions) and when it was first seen.
    observed: Option<(String, Instant)>,
    /// Whether this Elector has held the lease: a new process under the same identity (the
    /// same pod, restarted) takes it at once but as a new leadership, so another shard waiting
    /// on it knows the leader it saw is gone (see `crate::shard`).
    held: bool,
}

impl Elector {
    fn new(client: Client, lease: &LeaseOptions, identity: &str) -> Elector {
        Elector {
            api: Api::namespaced(client, &lease.namespace),
            name: lease.name.clone(),
            annotations: match &lease.shard_selector {
                Some(s) => json!({ crate::shard::SELECTOR_ANNOTATION: s }),
                None => json!({}),
            },
            identity: identity.to_string(),
            duration: lease.duration,
            observed: None,
            held: false,
        }
    }

    /// Renews until a renewal has not succeeded for `renew_deadline`, or another holder is
    /// seen; then returns (the lease is lost).
    async fn hold(&mut self, lease: &LeaseOptions) {
        // Counted from when each successful renewal was sent: the earliest the API server can
        // have recorded it, so the earliest a standby can start counting.
        let mut renewed = Instant::now();
        loop {
            tokio::time::sleep(lease.retry()).await;
            let left = lease.renew_deadline().saturating_sub(renewed.elapsed());
            if left.is_zero() {
                warn!(deadline = ?lease.renew_deadline(), "could not renew the leader lease in time; stopping");
                return;
            }
            let sent = Instant::now();
            if self.try_acquire_or_renew(left).await {
                renewed = sent;
            } else if self
                .observed
                .as_ref()
                .is_some_and(|(record, _)| !record.starts_with(&format!("{}|", self.identity)))
            {
                warn!("another replica holds the leader lease; stopping");
                return;
            }
        }
    }

    /// One attempt, bounded by `limit`: whether this replica holds the lease afterwards.
    async fn try_acquire_or_renew(&mut self, limit: Duration) -> bool {
        match tokio::time::timeout(limit, self.attempt()).await {
            Ok(Ok(held)) => held,
            Ok(Err(e)) => {
                debug!(error = %e, "leader lease request failed");
                false
            }
            Err(_) => {
                debug!(?limit, "leader lease request timed out");
                false
            }
        }
    }

    async fn attempt(&mut self) -> Result<bool> {
        let context = || format!("leader Lease {}", self.name);
        let Some(current) = self
            .api
            .get_opt(&self.name)
            .await
            .map_err(Error::kube(context()))?
        else {
            let now = micro_time_now();
            let lease: Lease = serde_json::from_value(json!({
                "metadata": {"name": self.name, "annotations": self.annotations},
                "spec": {"holderIdentity": self.identity, "leaseDurationSeconds": self.duration.as_secs().max(1),
                         "acquireTime": now, "renewTime": now, "leaseTransitions": 0},
            }))
            .map_err(|source| Error::Serialize {
                what: "a Lease",
                source,
            })?;
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => {
                    self.held = true;
                    Ok(true)
                }
                Err(kube::Error::Api(s)) if s.is_already_exists() => Ok(false),
                Err(e) => Err(Error::kube(context())(e)),
            };
        };
        let spec = current.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let record = format!(
            "{holder}|{}|{}",
            serde_json::to_string(&spec.renew_time).unwrap_or_default(),
            spec.lease_transitions.unwrap_or(0)
        );
        let seen_at = match &self.observed {
            Some((r, at)) if *r == record => *at,
            _ => Instant::now(),
        };
        self.observed = Some((record, seen_at));
        let mine = holder == self.identity;
        if !holder.is_empty() && !mine && seen_at.elapsed() < self.duration {
            return Ok(false);
        }
        let now = micro_time_now();
        let renewing = mine && self.held;
        let transitions = spec.lease_transitions.unwrap_or(0) + i32::from(!renewing);
        let acquire = if renewing {
            json!(spec.acquire_time)
        } else {
            json!(now)
        };
        // The resourceVersion is a precondition: of two replicas taking an expired lease at
        // once, one gets 409 and stays a standby.
        let patch = json!({
            "metadata": {"resourceVersion": current.resource_version(), "annotations": self.annotations},
            "spec": {"holderIdentity": self.identity, "leaseDurationSeconds": self.duration.as_secs().max(1),
                     "acquireTime": acquire, "renewTime": now, "leaseTransitions": transitions},
        });
        let pp = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PatchParams::default()
        };
        match self.api.patch(&self.name, &pp, &Patch::Merge(&patch)).await {
            Ok(written) => {
                self.held = true;
                let spec = written.spec.unwrap_or_default();
                self.observed = Some((
                    format!(
                        "{}|{}|{}",
                        self.identity,
                        serde_json::to_string(&spec.renew_time).unwrap_or_default(),
                        spec.lease_transitions.unwrap_or(0)
                    ),
                    Instant::now(),
                ));
                Ok(true)
            }
            Err(kube::Error::Api(s)) if s.is_conflict() => Ok(false),
            Err(e) => Err(Error::kube(context())(e)),
        }
    }

    /// Gives the lease up on a clean shutdown, so a standby need not wait for it to expire. A
    /// renewal that lands between the read and the release makes it a conflict: read again.
    async fn release(&self) {
        for _ in 0..3 {
            let Ok(Ok(Some(current))) =
                tokio::time::timeout(Duration::from_secs(5), self.api.get_opt(&self.name)).await
            else {
                break;
            };
            if current
                .spec
                .as_ref()
                .and_then(|s| s.holder_identity.as_deref())
                != Some(&self.identity)
            {
                return;
            }
            let patch = json!({
                "metadata": {"resourceVersion": current.resource_version()},
                "spec": {"holderIdentity": null, "renewTime": null, "acquireTime": null},
            });
            let pp = PatchParams {
                field_manager: Some(FIELD_MANAGER.into()),
                ..PatchParams::default()
            };
            let merge = Patch::Merge(&patch);
            let sent = self.api.patch(&self.name, &pp, &merge);
            match tokio::time::timeout(Duration::from_secs(5), sent).await {
                Ok(Ok(_)) => {
                    info!("released the leader lease");
                    return;
                }
                Ok(Err(kube::Error::Api(s))) if s.is_conflict() => continue,
                Ok(Err(e)) => {
                    warn!(error = %e, "could not release the leader lease; it expires on its own");
                    return;
                }
                Err(_) => break,
            }
        }
        warn!("could not release the leader lease; it expires on its own");
    }
}

/// Now as a Kubernetes MicroTime. The Lease is read by people and other tools, so it carries
/// the real time, not the schedule's injected clock; expiry is timed locally, never from it.
fn micro_time_now() -> String {
    chrono::Utc::now()
        .format("%Y-%m-%dT%H:%M:%S%.6fZ")
        .to_string()
}

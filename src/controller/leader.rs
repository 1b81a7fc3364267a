//! Leader election: with a Lease, only its holder runs the controller; a standby waits,
//! ready, and takes over when the lease expires or is released.

use std::sync::Arc;

use futures::FutureExt;
use kube::Client;
use tracing::{info, warn};

use super::{RunOptions, run_controller};
use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::http::Health;
use crate::telemetry::Metrics;

/// Runs the controller, with Lease-based leader election when `lease` is set: only the
/// holder reconciles; a standby waits, ready, and takes over when the lease expires.
pub async fn run(
    client: Client,
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
        return run_controller(client, &opts, clock, metrics, health, shutdown).await;
    };
    let manager = kube_lease_manager::LeaseManagerBuilder::new(client.clone(), &lease.name)
        .with_namespace(&lease.namespace)
        .with_identity(&opts.instance)
        .with_duration(lease.duration_seconds)
        .with_grace(lease.grace_seconds)
        .build()
        .await
        .map_err(|e| {
            Error::Config(format!(
                "leader election: cannot use Lease {}/{}: {e}",
                lease.namespace, lease.name
            ))
        })?;
    let (mut leading, task) = manager.watch().await;
    health.set_ready(true);
    info!(lease = %format!("{}/{}", lease.namespace, lease.name), identity = %opts.instance, "waiting for the leader lease");
    loop {
        if !*leading.borrow_and_update() {
            tokio::select! {
                changed = leading.changed() => if changed.is_err() { break } else { continue },
                _ = shutdown.clone() => break,
            }
        }
        info!("acquired the leader lease; reconciling");
        metrics.leader.set(1);
        let mut watch = leading.clone();
        let lost = async move {
            while *watch.borrow_and_update() {
                if watch.changed().await.is_err() {
                    break;
                }
            }
        };
        let stop = {
            let shutdown = shutdown.clone();
            async move {
                tokio::select! { _ = lost => {}, _ = shutdown => {} }
            }
        };
        run_controller(
            client.clone(),
            &opts,
            clock.clone(),
            metrics.clone(),
            health.clone(),
            stop,
        )
        .await?;
        metrics.leader.set(0);
        health.set_ready(true);
        if shutdown.clone().now_or_never().is_some() {
            break;
        }
        warn!("lost the leader lease; standing by");
    }
    drop(leading);
    match task.await {
        Ok(Ok(manager)) => {
            if let Err(e) = manager.release().await {
                warn!(error = %e, "could not release the leader lease; it expires on its own");
            } else {
                info!("released the leader lease");
            }
        }
        Ok(Err(e)) => warn!(error = %e, "leader election ended with an error"),
        Err(e) => warn!(error = %e, "leader election task failed"),
    }
    Ok(())
}

#[derive(Clone, Debug)]
pub struct LeaseOptions {
    pub name: String,
    pub namespace: String,
    pub duration_seconds: u64,
    pub grace_seconds: u64,
}

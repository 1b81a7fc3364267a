//! The claim stage: a shard writes only the TDSets it has claimed (`status.shard`), and takes
//! another shard's claim over only once that shard has let go of it or is gone.

use std::sync::Arc;
use std::time::Duration;

use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use tracing::{debug, info, warn};

use crate::api::{TDSet, TDSetStatus};
use crate::controller::state::{Context, Sharding};
use crate::shard::{self, Claim};
use crate::workload::owned::FIELD_MANAGER;

/// While another shard's claim is not let go of, a waiting TDSet is looked at this often.
const WAIT: Duration = Duration::from_secs(2);
/// While its namespace's claims are being indexed, a TDSet is looked at again after this long
/// (the fill's end wakes it before).
const INDEX_WAIT: Duration = Duration::from_secs(5);
/// The longest the claim stage of one reconcile may take.
const CLAIM_DEADLINE: Duration = Duration::from_secs(20);

fn key_of(t: &impl Resource) -> String {
    format!("{}/{}", t.namespace().unwrap_or_default(), t.name_any())
}

/// Claims the TDSet for this shard before anything is written for it. `None`: this shard
/// holds it, go on; `Some(wait)`: write nothing, look again after `wait`.
pub(crate) async fn claim(tdset: &TDSet, ctx: &Context) -> Option<Duration> {
    // Bounded well inside the reconcile's deadline: a reconcile that fails by its deadline
    // reports the failure in status, which a shard must not write before it holds the claim.
    match tokio::time::timeout(CLAIM_DEADLINE, claim_unbounded(tdset, ctx)).await {
        Ok(wait) => wait,
        Err(_) => {
            warn!(tdset = %key_of(tdset), "claiming the TDSet took too long; retrying");
            Some(WAIT)
        }
    }
}

async fn claim_unbounded(tdset: &TDSet, ctx: &Context) -> Option<Duration> {
    let sharding = ctx.shard.as_ref()?;
    if !sharding.index_ready(&tdset.namespace().unwrap_or_default()) {
        // Other shards' TDSets of the namespace are being listed: until they are in the
        // indexes, an older claim of theirs is unknown. The fill's end wakes it.
        debug!(tdset = %key_of(tdset), "waiting for the namespace's claims to be indexed");
        return Some(INDEX_WAIT);
    }
    let current = ctx.statuses.current(tdset);
    let claimed = current.as_ref().and_then(|s| s.shard.as_deref());
    let result = match shard::claim(sharding.name(), claimed) {
        Claim::Mine => return None,
        Claim::Free => write_claim(tdset, ctx, sharding, current.clone()).await,
        Claim::Held(holder) => {
            let holder = holder.to_string();
            if sharding.may_take_over(tdset, &holder).await {
                write_claim(tdset, ctx, sharding, current.clone()).await
            } else {
                Some(WAIT)
            }
        }
    };
    ctx.metrics.shard_waiting.set(sharding.waiting() as i64);
    result
}

/// Writes `status.shard`, with the resourceVersion the claim was read at as a precondition:
/// of two shards that saw the same claim, one succeeds.
async fn write_claim(
    tdset: &TDSet,
    ctx: &Context,
    sharding: &Sharding,
    current: Option<TDSetStatus>,
) -> Option<Duration> {
    let (ns, name) = (tdset.namespace().unwrap_or_default(), tdset.name_any());
    let api: Api<TDSet> = Api::namespaced(ctx.client.clone(), &ns);
    let patch = serde_json::json!({
        "metadata": {"resourceVersion": tdset.meta().resource_version},
        "status": {"shard": sharding.name()},
    });
    ctx.metrics.write("tdsets/status", "patch");
    let pp = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PatchParams::default()
    };
    match api.patch_status(&name, &pp, &Patch::Merge(&patch)).await {
        Ok(written)
            if written.status.as_ref().and_then(|s| s.shard.as_deref())
                != Some(sharding.name()) =>
        {
            // The API server pruned the field: its CRD predates shards.
            warn!(tdset = %format!("{ns}/{name}"), "cannot claim the TDSet: the installed TDSet CRD has no status.shard; apply crds/tdset.yaml of this version");
            Some(WAIT * 15)
        }
        Ok(written) => {
            info!(tdset = %format!("{ns}/{name}"), shard = sharding.name(), "claimed the TDSet for this shard");
            sharding.forget_wait(tdset);
            // What the reconcile that follows reads as the status on record.
            let mut status = current.unwrap_or_default();
            status.shard = Some(sharding.name().to_string());
            if let Some(uid) = tdset.meta().uid.as_deref() {
                ctx.statuses.queued(tdset, Arc::new(status.clone()));
                ctx.statuses
                    .written(uid, &status, written.metadata.resource_version);
            }
            None
        }
        Err(kube::Error::Api(s)) if s.is_conflict() || s.is_not_found() => {
            // Changed since it was read (another shard may have claimed it): the watch brings
            // the change, and with it this TDSet again.
            debug!(tdset = %format!("{ns}/{name}"), "the TDSet changed before it could be claimed");
            Some(WAIT)
        }
        Err(e) => {
            warn!(tdset = %format!("{ns}/{name}"), error = %e, "could not claim the TDSet for this shard; retrying");
            Some(WAIT * 2)
        }
    }
}

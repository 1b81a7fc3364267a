//! The controller: the one place that talks to the API server. Each room holds one job:
//!
//! - `context.rs`: what every stage shares (the context, TDSet names, a stage's outcome);
//! - `driver.rs`: the reconcile driver (one call per stage), the error policy;
//! - `apply.rs`: guarded writes of owned objects; the TDSet's next status, queued;
//! - `scale.rs`, `finalizer.rs`: referenced targets and HPAs; letting go of them (`onDelete`,
//!   retargets);
//! - `claims.rs`: which TDSet holds a referenced object (one writer per workload);
//! - `target_index.rs`: which TDSets claim which target, and the originals their statuses record;
//! - `group/`: the group form's workloads, listed, placed and written (`scaleTargetSelector`);
//! - `group_index.rs`: what each group selects, for triggers and for one holder per workload;
//! - `discovery.rs`: which kind a `scaleTargetRef` names, remembered;
//! - `backoff.rs`: how long a failed reconcile waits before it is retried;
//! - `bookkeeping.rs`: the lane that sends statuses and Events after the workload writes;
//! - `events.rs`: which Events a change produces;
//! - `watches.rs`: the watches and their compact caches;
//! - `wakeups.rs`: when each TDSet is reconciled next, handed to the controller a few at a time;
//! - `shards.rs`: claiming a TDSet for this shard, letting go of the ones it no longer matches;
//! - `run.rs`: the wiring (watches, caches, context, lane, kube-runtime's controller);
//! - `leader.rs`: Lease-based leader election around the wiring.
//!
//! Rooms use only rooms below them: `context.rs` at the bottom, the stages above it, then the
//! driver, the wiring and leader election; this file only names them.
//!
//! Each reconcile evaluates the schedule at `ctx.clock.now()`, makes the owned Deployment (and
//! Service) match, writes status, and requeues at the next transition. It reads the owned
//! objects from caches that may be stale, so every write is guarded: creates fail on an
//! existing object instead of overwriting it, and applies carry the observed uid as a
//! precondition, so an object someone else created meanwhile is never written to.

mod apply;
mod backoff;
mod bookkeeping;
mod calendars;
mod claims;
mod context;
mod discovery;
mod driver;
mod events;
mod finalizer;
mod group;
mod group_index;
mod leader;
mod run;
mod scale;
mod shards;
mod target_index;
mod wakeups;
mod watches;

pub use crate::clients::Clients;
pub use context::Context;
pub use driver::{RECONCILE_DEADLINE, error_policy, reconcile};
pub use leader::{LeaseOptions, run};
pub use run::RunOptions;
pub use shards::ShardOptions;
pub use watches::InitialList;

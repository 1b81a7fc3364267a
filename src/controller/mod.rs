//! The controller: the one place that talks to the API server. Its rooms are in layers, and a
//! room uses only rooms of its own layer or below (`tests/it/layers.rs` holds it so):
//!
//! - `run/`: the wiring (watches and their caches, the tasks beside the controller, the
//!   calendars' usage, the traffic `spec.idle` reads, Lease-based leader election);
//! - `driver.rs`: one reconcile as a list of stage calls, and the error policy;
//! - `stages/`: claim (the shard's claim), resolve (calendars, schedule, form, the change
//!   due), release (deletion, retargets, changes of form, the finalizer), intercept (wake on
//!   request's EndpointSlices, in place before a count goes to 0), apply (the form's turn),
//!   report (status, history, lag, the next wait);
//! - `forms/`: the forms that are more than one object held: the Deployment (and Service) a
//!   TDSet owns, and the group (`scaleTargetSelector`);
//! - `kinds/`: what the operator does to one object it writes and does not own, one room per
//!   kind (`scale`: a kind with `/scale`; `hpa`: an HPA's floor and ceiling;
//!   `scaled_object`: a KEDA ScaledObject, its check and its let-go), each saying what it
//!   does at each step of one protocol written once (`hold`: the trait `Held` and `hold()`;
//!   `list`: the kinds' list, which room holds and lets go of a referenced object), on the
//!   base they share: one
//!   writer per object (`claims`), its record in status (`record`), which Events a change
//!   makes (`events`), the `Turn` every form and kind is handed, and the contests a kind
//!   keeps (`Part`);
//! - `io/`: client calls only: guarded writes of owned objects, `/scale` and HPA reads and
//!   writes, writes to the TDSet itself (durable and queued statuses, the finalizer), one
//!   query to Prometheus;
//! - `state/`: what is kept between reconciles: the context, what a form says it did
//!   (`Outcome`), the indexes, the wakeups, the shard, discovery, the backoffs, the traffic
//!   last read;
//! - `lane/`: statuses and Events, sent after the workload writes.
//!
//! Each reconcile evaluates the schedule at `ctx.clock.now()`, makes the workload match, queues
//! the status, and is looked at again at the next transition. It reads from caches that may be
//! stale, so every write is guarded: creates fail on an existing object instead of overwriting
//! it, and applies carry the observed uid as a precondition, so an object someone else created
//! meanwhile is never written to.

mod driver;
mod forms;
mod io;
mod kinds;
mod lane;
mod run;
mod stages;
mod state;
#[cfg(test)]
mod tests;

pub use crate::clients::Clients;
pub use driver::{RECONCILE_DEADLINE, error_policy, reconcile};
pub use run::RunOptions;
pub use run::intents::{WakeOptions, serve as serve_wake_endpoint};
pub use run::leader::{LeaseOptions, run};
pub use run::watches::InitialList;
pub use state::{Context, ShardOptions};
pub use state::{TrafficOptions, WakeProxyRef};

//! What the operator keeps between reconciles and shares among them: the context (clients,
//! caches, memos), what a form says it did (`Outcome`), the indexes of who claims and selects
//! what, the wakeups, the shard, the kinds discovery found, and the backoffs. Nothing here
//! decides what a TDSet's workload runs.

mod backoff;
mod calendar_index;
mod context;
mod discovery;
mod group_index;
mod ics_sources;
mod outcome;
mod ports;
mod shard_scope;
mod sharding;
mod target_index;
mod traffic;
mod wakeups;

pub(crate) use backoff::{after as backoff_after, api_backoff, jitter};
pub use calendar_index::CalendarIndex;
pub use context::{Context, WakeProxyRef};
pub(crate) use discovery::{Discovery, Resolved};
pub(crate) use group_index::{Claim, GroupEntry, GroupIndex, claim_of};
pub use ics_sources::{IcsDates, IcsSources, Source as IcsSource, SourceKey, key_of};
pub(crate) use outcome::{Answer, Outcome, Scaled, Write};
pub use ports::PortsHandedOut;
pub use sharding::{ShardOptions, Sharding};
pub(crate) use sharding::{fill_loop, let_go_loop};
pub(crate) use target_index::{TargetIndex, claimed};
pub use traffic::{Answer as TrafficAnswer, Traffic, TrafficOptions};
pub(crate) use wakeups::Wakeups;

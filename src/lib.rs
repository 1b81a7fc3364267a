//! tdset-operator: scales a workload by time of day.
//!
//! Pure core: [`api`] (the resource), [`schedule`] (the level and the count at an instant,
//! the next change: windows, holidays, overrides, ramps), [`workload`] (what to write, per
//! mode: owned Deployment/Service, `/scale` target, HPA floor), [`shard`] (which TDSets a shard
//! takes, and when), [`status`] (next status and
//! conditions). Caches: [`cache`] (what is kept of watched objects, and the operator's own
//! unseen writes). Edges: [`clients`] (the connections to the API server), [`controller`] (the operator, the only place that talks to the API
//! server for it), [`plugin`] (`kubectl tdset`), [`telemetry`], [`http`], and the [`cli`]
//! with [`preview`]. [`wake`]: the wake proxy, a wing of its own beside the controller.

pub mod api;
pub mod cache;
pub mod cli;
pub mod clients;
pub mod clock;
pub mod controller;
pub mod error;
pub mod http;
pub mod memo;
pub mod plugin;
pub mod preview;
pub mod schedule;
pub mod shard;
pub mod status;
pub mod telemetry;
pub mod wake;
pub mod workload;

pub use error::{Error, Result};

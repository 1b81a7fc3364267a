//! tdset-operator: scales a Deployment by time of day.
//!
//! Pure core: [`api`] (the resource), [`schedule`] (replicas at an instant, next change),
//! [`resources`] (desired Deployment/Service), [`status`] (next status and conditions).
//! Caches: [`cache`] (what is kept of watched objects, and the operator's own unseen writes).
//! Edges: [`controller`] (the only module that talks to the API server), [`telemetry`],
//! [`http`], and the [`cli`] with [`preview`].

pub mod api;
pub mod cache;
pub mod cli;
pub mod clock;
pub mod controller;
pub mod error;
pub mod http;
pub mod preview;
pub mod schedule;
pub mod status;
pub mod telemetry;
pub mod workload;

pub use error::{Error, Result};

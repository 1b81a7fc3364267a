//! Every integration test, in one binary: one crate to compile and one executable to link,
//! not one per file. `scripts/run-tests.sh` still runs each module as a suite of its own
//! (the filter `NAME::`), side by side; `cargo test --test it NAME::` runs one.

mod support;

mod admission;
mod backpressure;
mod boundary_order;
mod calendar;
mod calendars;
mod control_plane;
mod control_plane_errors;
mod crd_drift;
mod deploy;
mod docs;
mod examples;
mod faults;
mod gitops;
mod group;
mod group_holders;
mod group_kinds;
mod group_memory;
mod group_order;
mod group_release;
mod hardening;
mod helm;
mod history;
mod hpa_ceilings;
mod http_server;
mod initial_list;
mod keda;
mod layers;
mod plugin;
mod pods;
mod preview_cli;
mod prometheus;
mod real_node;
mod reconcile;
mod schedule_props;
mod shards;
mod trust;
mod wake;
mod wake_proxy;
mod wake_slices;
mod warm_up;
mod workloads;

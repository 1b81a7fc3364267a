//! The local control plane for integration tests.
//!
//! One control plane per test run: `scripts/test.sh` starts it and passes its kubeconfig in
//! `TDSET_TEST_KUBECONFIG`; a test binary run on its own (plain `cargo test`) starts one itself,
//! watched by a process that stops it when the test binary exits, however it exits.
//! Every test gets its own namespace.
//!
//! - `cluster`: the control plane, clients, kubectl and helm, ServiceAccounts, the audit log;
//! - `keda`: KEDA's CRDs and operator;
//! - `namespace`: one test's namespace, the CRDs;
//! - `objects`: the one TDSet builder, the objects tests create;
//! - `wait`: the one "wait until" helper;
//! - `operator`: the one operator launcher (in-process, or the built binary);
//! - `logs`: each test's own log (the operator's), kept by the run when the test fails;
//! - `network`: socket timers, a black-holing proxy;
//! - `recorder`: the order in which a namespace's Deployments changed;
//! - `node` (by name: `support::node::*`): the real node's image, commands and sleeping
//!   Services;
//! - `ingress` (by name): Traefik in front of them on the real node.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::wait::{await_condition, conditions};
use kube::{Client, Config};

mod cluster;
pub mod ingress;
mod keda;
mod logs;
mod namespace;
mod network;
pub mod node;
mod objects;
mod operator;
mod recorder;
mod wait;

// Each test binary uses a part of the support.
#[allow(unused_imports)]
pub use {
    cluster::*, keda::*, logs::*, namespace::*, network::*, objects::*, operator::*, recorder::*,
    wait::*,
};

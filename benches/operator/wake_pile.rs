//! The wake proxy's memory with EndpointSlices piled on one sleeping Service (issue 63): the
//! proxy (the release binary, a process of its own) routes one sleeping Service; 100 slices
//! of about 1 MB each, under a manager it does not trust, are written for that Service, as a
//! tenant who may write slices in its namespace could. Its resident memory before and after.
//! The operator's slice is written by the bench as the operator writes it (this control
//! plane runs no operator and no garbage collector).

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use futures::{StreamExt, stream};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use serde_json::json;

use crate::measure::Measured;
use crate::support::*;
use crate::{Bench, CONCURRENCY};

const PILE: usize = 100;

fn pile_slice(ns: &str, i: usize) -> serde_json::Value {
    let endpoints: Vec<serde_json::Value> = (0..1000)
        .map(|e| {
            let addresses: Vec<String> = (0..60)
                .map(|a| format!("10.{}.{}.{}", e / 250, e % 250, a + 1))
                .collect();
            json!({"addresses": addresses, "conditions": {"ready": true},
                   "targetRef": {"kind": "Pod", "namespace": ns, "name": format!("p{e}")}})
        })
        .collect();
    json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
           "metadata": {"name": format!("web-pile-{i:03}"),
                        "labels": {"kubernetes.io/service-name": "web",
                                   "endpointslice.kubernetes.io/managed-by": "made-up.example"}},
           "addressType": "IPv4", "endpoints": endpoints,
           "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]})
}

impl Bench {
    pub(crate) async fn wake_slice_pile(&mut self) {
        let client = &self.client;
        let ns = TestNamespace::new(client, "wake-pile").await;
        let n = ns.name.as_str();
        let _: Service = create_object(
            client,
            n,
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
                   "spec": {"ports": [{"name": "http", "port": 80, "targetPort": 8080}]}}),
        )
        .await;
        let port = free_port();
        let _: EndpointSlice = create_object(
            client,
            n,
            json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                   "metadata": {"name": "web-tdset-wake-ipv4",
                                "labels": {"kubernetes.io/service-name": "web",
                                           "endpointslice.kubernetes.io/managed-by": "tdset.schedule.rs",
                                           "schedule.rs/tdset": "web"},
                                "ownerReferences": [{"apiVersion": "schedule.rs/v1", "kind": "TDSet",
                                                     "name": "web", "uid": "3c1d0a52-0000-4000-8000-000000000001",
                                                     "controller": true}]},
                   "addressType": "IPv4",
                   "endpoints": [{"addresses": ["10.0.0.2"], "conditions": {"ready": true}}],
                   "ports": [{"name": "http", "port": port, "protocol": "TCP"}]}),
        )
        .await;
        let ports = format!("{port}-{port}");
        let log = self.logs.join("wake-pile-proxy.log");
        let extra = [
            "--ip",
            "127.0.0.1",
            "--ports",
            &ports,
            "--operator-url",
            "http://127.0.0.1:9",
            "--namespace",
            n,
        ];
        let proxy = OperatorProcess::launch(Launch {
            command: "wake-proxy",
            extra: &extra,
            log: log.clone(),
            ..Launch::new(&self.kubeconfig, "wake-pile-proxy.log")
        });
        // The Service's own slice, as the EndpointSlice controller writes it: kept once the
        // proxy follows the Service.
        let _: EndpointSlice = create_object(
            client,
            n,
            json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                   "metadata": {"name": "web-own",
                                "labels": {"kubernetes.io/service-name": "web",
                                           "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io"}},
                   "addressType": "IPv4",
                   "endpoints": [{"addresses": ["10.0.0.1"], "conditions": {"ready": true},
                                  "targetRef": {"kind": "Pod", "namespace": n, "name": "web-0"}}],
                   "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]}),
        )
        .await;
        let deadline = Instant::now() + Duration::from_secs(60);
        while proxy.metric("tdset_wake_proxy_own_slices ") < 1.0 {
            assert!(
                Instant::now() < deadline,
                "the proxy never kept the Service's own slice"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
        let before = proxy.proc_status("VmRSS:") as f64 / 1024.0;
        let started = Instant::now();
        let mut bytes = 0usize;
        let sizes: Vec<usize> = stream::iter(0..PILE)
            .map(|i| async move {
                let s: EndpointSlice = create_object(client, n, pile_slice(n, i)).await;
                serde_json::to_vec(&s).map(|v| v.len()).unwrap_or(0)
            })
            .buffer_unordered(CONCURRENCY.min(8))
            .collect()
            .await;
        bytes += sizes.iter().sum::<usize>();
        let written = started.elapsed();
        tokio::time::sleep(Duration::from_secs(10)).await;
        let after = proxy.proc_status("VmRSS:") as f64 / 1024.0;
        let peak = proxy.proc_status("VmHWM:") as f64 / 1024.0;
        let kept = proxy.metric("tdset_wake_proxy_own_slices ");
        proxy.stop();
        ns.cleanup().await;
        let _ = writeln!(
            self.report,
            "| wake on request: the proxy's memory with EndpointSlices piled on one sleeping Service | {PILE} slices of a made-up manager, {:.0} MB of JSON, written in {:.1} s | RSS {before:.1} MiB before, {after:.1} MiB 10 s after, peak {peak:.1} MiB; {kept:.0} slice kept (the Service's own) | the proxy asks the API server for the trusted managers' slices alone and keeps where each answers; before (review of 6f1b630): 98 such slices took it from 17 to 1136 MiB |",
            bytes as f64 / 1e6,
            written.as_secs_f64()
        );
    }
}

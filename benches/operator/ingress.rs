//! Wake on request behind a real ingress controller (issue 49): Traefik on the real node
//! (`support::ingress`), measured. The real node's test (`tests/it/real_node.rs`) proves the
//! same wake-ups through it in the test command; this tier times them and adds a steady load.
//! What it proves it asserts, and a failed assertion fails the run:
//! - asleep, Traefik's servers for the Service are the proxy pods at the operator's ports;
//!   awake, the pod alone (nothing of ours in the path);
//! - a request through Traefik wakes the Service and gets the application's own answer, and
//!   the wake-up names the request's host as the client sent it;
//! - the same for a Service whose one port has no name (Traefik pairs a slice's port with the
//!   Service's by name, here "");
//! - a steady 20 requests a second through Traefik, across the wake-up they cause and the
//!   hand-over to the pods, all get the application's answer.

use k8s_openapi::api::discovery::v1::EndpointSlice;

use super::wake::{from_epoch, ms, node_with_the_chart, one_request};
use super::*;
use support::ingress::*;
use support::node::*;

const APPS: &str = "ingress-bench";

impl Bench {
    pub(crate) async fn ingress(&mut self) {
        if let Some(why) = real_node_unavailable() {
            let _ = writeln!(
                self.report,
                "| wake on request behind an ingress controller | - | not run | {why} |"
            );
            return;
        }
        let (cp, dir, client) = node_with_the_chart("ingress", &[], APPS).await;
        let traefik = Traefik::start(&client, &dir, &cp.kubeconfig).await;
        self.wake_ups_through_traefik(&client, &dir, &traefik.version)
            .await;
        self.load_through_traefik(&client, &dir, &traefik.version)
            .await;
        drop(traefik);
        cp.stop();
    }

    /// Services asleep behind the proxy, each behind an Ingress, woken one at a time by a
    /// request through Traefik: 5 whose port is named, 1 whose port has none.
    async fn wake_ups_through_traefik(
        &mut self,
        client: &Client,
        dir: &std::path::Path,
        version: &str,
    ) {
        let wake = json!({"wakeFor": "30m", "hold": "60s"});
        let mut sleepers = Vec::new();
        for i in 0..6 {
            let name = format!("ing-{i}");
            // The last Service's one port has no name.
            let port = if i == 5 {
                json!({"port": 80, "targetPort": "http"})
            } else {
                json!({"name": "http", "port": 80, "targetPort": "http"})
            };
            let s = Sleeper::serving(
                client,
                APPS,
                probed_web(&name, 1),
                wake.clone(),
                Sleeper::asleep_now(),
                port,
            )
            .await;
            let host = ingress_to(client, APPS, &name).await;
            sleepers.push((s, host));
        }
        let mut to_byte = Vec::new();
        for (s, host) in &sleepers {
            s.asleep_with_the_proxy_in_its_path(dir).await;
            // Traefik sends the Service's Ingress to the proxy pods, at the operator's ports.
            let proxies = traefik_on_the_proxy(dir, s).await;
            let answer = one_request(dir, WEB_IP, WEB_PORT, host).await;
            assert_eq!(
                answer["body"], "ok\n",
                "{}: the application's own answer",
                s.name
            );
            to_byte.push(ms(
                from_epoch(answer["sent"].as_f64().unwrap()),
                from_epoch(answer["first"].as_f64().unwrap()),
            ));
            woken_through_traefik(dir, s, host, &proxies).await;
        }
        to_byte.sort_by(f64::total_cmp);
        let _ = writeln!(
            self.report,
            "| wake on request behind Traefik {version}: request -> first byte at the client, pods Ready 1 s after they start | {} wake-ups (one Service's port unnamed) | p50 {:.0} ms, p95 {:.0} ms, max {:.0} ms | asleep, Traefik's servers for the Ingress were the proxy pods at the operator's ports; awake, the pod alone; each answer the application's, each wake-up naming the Ingress host |",
            to_byte.len(),
            quantile(&to_byte, 0.5),
            quantile(&to_byte, 0.95),
            to_byte.last().copied().unwrap_or(f64::NAN)
        );
    }

    /// 20 requests a second through Traefik for 60 s to a Service asleep behind the proxy: the
    /// first wakes it, the next are held, then Traefik is told the pods (the hand-over).
    async fn load_through_traefik(
        &mut self,
        client: &Client,
        dir: &std::path::Path,
        version: &str,
    ) {
        let s = Sleeper::new(
            client,
            APPS,
            probed_web("ing-load", 1),
            json!({"wakeFor": "30m", "hold": "60s"}),
        )
        .await;
        let host = ingress_to(client, APPS, &s.name).await;
        s.asleep_with_the_proxy_in_its_path(dir).await;
        traefik_on_the_proxy(dir, &s).await;
        // While the load runs: when the operator's slice goes, and when Traefik stops sending
        // to the proxy (its servers the pods alone), seconds after the load's start.
        let start = Instant::now();
        let watch = {
            let (client, dir, name) = (client.clone(), dir.to_path_buf(), s.name.clone());
            tokio::spawn(async move {
                let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), APPS);
                let (mut gone, mut switched) = (None, None);
                while gone.is_none() || switched.is_none() {
                    let mine = slices
                        .list(&ListParams::default().labels(&format!(
                            "kubernetes.io/service-name={name},endpointslice.kubernetes.io/managed-by=tdset.schedule.rs"
                        )))
                        .await
                        .map(|l| l.items.is_empty());
                    if gone.is_none() && mine.unwrap_or(false) {
                        gone = Some(start.elapsed().as_secs_f64());
                    }
                    let (d, n) = (dir.clone(), name.clone());
                    let servers =
                        tokio::task::spawn_blocking(move || Traefik::servers(&d, APPS, &n))
                            .await
                            .ok()
                            .flatten();
                    let on_pods = servers
                        .is_some_and(|v| !v.is_empty() && v.iter().all(|a| a.ends_with(":8080")));
                    if switched.is_none() && on_pods {
                        switched = Some(start.elapsed().as_secs_f64());
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                (gone.unwrap_or(f64::NAN), switched.unwrap_or(f64::NAN))
            })
        };
        let url = format!("http://{WEB}");
        let Load {
            total,
            failed,
            text,
        } = steady_load(dir, &url, 60, 20, Some(&host)).await;
        let ended = start.elapsed().as_secs_f64();
        let (gone, switched) = tokio::time::timeout(NODE_GUARD, watch)
            .await
            .expect("the slice gone and Traefik on the pods")
            .unwrap();
        assert!(
            gone < ended - 10.0 && switched < ended - 10.0,
            "the hand-over within the load: slice gone at {gone:.1} s, Traefik on the pods at {switched:.1} s, load over at {ended:.1} s"
        );
        assert!(total >= 900, "{total} requests in 60 s: {text}");
        assert_eq!(
            failed, 0,
            "requests without the application's answer: {text}"
        );
        // Woken once, by a request, and the proxy out of the path afterwards.
        assert_eq!(s.request_wake_ups().await, 1);
        let pods = traefik_on_the_pods_alone(dir, &s).await;
        let _ = writeln!(
            self.report,
            "| wake on request behind Traefik {version}: 20 requests/s for 60 s to a sleeping Service | {total} requests | **{failed} failed**; 1 wake-up | across the wake-up and the hand-over: the operator's slice gone {gone:.1} s into the load, Traefik sending to the pod alone ({pods:?}) from {switched:.1} s |"
        );
    }
}

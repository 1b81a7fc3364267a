//! How the watches receive their initial lists: as a stream where the API server supports it
//! (Kubernetes' WatchList, on by default since 1.32), in pages where it does not, and the
//! operator works either way, including for TDSets that existed before it started.
//!
//! Waits are bounded only so a broken build cannot hang CI; no test asserts a speed.

use crate::support::*;
use kube::Client;
use serde_json::json;
use tdset_operator::clock::SystemClock;

/// TDSets created before the operator starts (so it learns of them from its initial list) and
/// one after (from the watch that follows): each gets its Deployment at the scheduled count.
async fn converges_from_its_initial_lists(client: &Client, ns: &str) -> Operator {
    let spec = json!({
        "container": {"image": "nginx:1.27", "port": 8080},
        "schedulingConfig": [{"startTime": 9, "endTime": 17, "replica": 3}],
        "defaultReplica": 1
    });
    for name in ["before-a", "before-b"] {
        create_tdset(client, ns, &tdset(name, spec.clone())).await;
    }
    let noon = SystemClock::starting_at(utc("2026-05-01T12:00:00Z"));
    let op = Operator::start(client, ns, noon, None, "initial-list");
    create_tdset(client, ns, &tdset("after", spec)).await;
    for name in ["before-a", "before-b", "after"] {
        deployment_at(client, ns, name, 3).await;
    }
    op
}

#[tokio::test]
async fn initial_lists_are_streamed_where_the_api_server_supports_it() {
    let (client, ns) = setup("list-stream").await;
    let op = converges_from_its_initial_lists(&client, &ns.name).await;
    assert_eq!(
        op.counter("tdset_watch_streaming_lists"),
        1.0,
        "a 1.36 API server serves streaming lists, so `auto` uses them"
    );
    op.stop().await;
    ns.cleanup().await;
}

#[tokio::test]
async fn without_watch_list_the_operator_lists_in_pages_and_works() {
    // An API server with WatchList off, as clusters before 1.32 serve by default: it refuses
    // `sendInitialEvents`, which kube-runtime's watcher would retry forever.
    let dir = std::env::temp_dir().join(format!("tdset-list-cp-{}", unique_suffix()));
    let cp = start_control_plane_with(&dir, &["--feature-gates=WatchList=false"]);
    let client = client_for(&cp.kubeconfig).await;
    install_crd(&client).await;
    let ns = TestNamespace::new(&client, "list-pages").await;
    let op = converges_from_its_initial_lists(&client, &ns.name).await;
    assert_eq!(op.counter("tdset_watch_streaming_lists"), 0.0);
    op.stop().await;
    ns.cleanup().await;
}

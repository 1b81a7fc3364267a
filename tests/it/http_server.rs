//! The metrics/health listener under a flood of idle connections: liveness shares it, so
//! thousands of connections that never send a request must not keep `/healthz` from
//! answering, must not grow memory without bound, and must be closed by the server.

use std::sync::Arc;
use std::time::Duration;

use tdset_operator::http::{Health, Limits, serve_with};
use tdset_operator::telemetry::Metrics;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The process's resident memory, from /proc.
fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

async fn get(addr: std::net::SocketAddr, path: &str) -> String {
    let mut s = TcpStream::connect(addr).await.expect("connecting");
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .expect("sending a request");
    let mut out = String::new();
    s.read_to_string(&mut out)
        .await
        .expect("reading the answer");
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_cannot_starve_healthz_or_memory_and_are_closed() {
    let metrics = Arc::new(Metrics::new().expect("metrics"));
    let health = Arc::new(Health::default());
    let limits = Limits {
        header_read: Duration::from_secs(1),
        max_age: Duration::from_secs(3),
        max_connections: 64,
    };
    let (addr, server) = serve_with("127.0.0.1:0".parse().unwrap(), metrics, health, limits)
        .await
        .expect("serving");
    assert!(get(addr, "/healthz").await.starts_with("HTTP/1.1 200"));
    let before = rss_bytes();

    // 3000 connections that never send a byte.
    let mut idle = Vec::new();
    for _ in 0..3000 {
        idle.push(TcpStream::connect(addr).await.expect("an idle connection"));
    }
    let answer = tokio::time::timeout(Duration::from_secs(30), get(addr, "/healthz"))
        .await
        .expect("/healthz did not answer during the flood (hang guard)");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let grown = rss_bytes().saturating_sub(before);
    assert!(
        grown < 64 << 20,
        "3000 idle connections grew the process by {grown} bytes"
    );

    // The server closes every one of them: each reads end-of-stream.
    let mut buf = [0u8; 64];
    for (i, s) in idle.iter_mut().enumerate() {
        let read = tokio::time::timeout(Duration::from_secs(30), s.read(&mut buf))
            .await
            .unwrap_or_else(|_| panic!("idle connection {i} was never closed (hang guard)"));
        // A reset counts as closed too; what matters is that the server let go.
        assert!(
            matches!(read, Ok(0) | Err(_)),
            "connection {i} got {read:?}"
        );
    }
    assert!(get(addr, "/healthz").await.starts_with("HTTP/1.1 200"));
    server.abort();
}

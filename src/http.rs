//! `/metrics`, `/healthz` and `/readyz` on hyper.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Bytes, Frame};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tracing::warn;

use crate::error::{Error, Result};
use crate::telemetry::Metrics;

/// What the probes report. Ready once the caches have synced, or, when standing by for the
/// leader lease, once the lease could be read: a standby replica is healthy, just idle.
#[derive(Default)]
pub struct Health {
    pub ready: AtomicBool,
}

impl Health {
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::SeqCst);
    }
}

/// How the listener protects itself. Liveness shares it with /metrics, so a flood of idle or
/// slow connections must never keep `/healthz` from answering.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// A connection must send a request's headers within this (hyper closes it otherwise).
    pub header_read: Duration,
    /// A connection is closed (after the request in flight, if any) once it is this old:
    /// scrapers reconnect, idle ones do not linger.
    pub max_age: Duration,
    /// Connections at once; past it the oldest is closed to make room for the newest.
    pub max_connections: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            header_read: Duration::from_secs(5),
            max_age: Duration::from_secs(60),
            max_connections: 256,
        }
    }
}

/// Open connections, oldest first, each with the signal that closes it.
type Open = VecDeque<(u64, oneshot::Sender<()>)>;

/// How long a closing connection may take to finish the response in flight.
const GRACE: Duration = Duration::from_secs(10);
/// The pause after a failed accept (e.g. out of file descriptors), instead of spinning.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Binds now (so a taken port fails at start-up) and serves until the task is dropped.
pub async fn serve(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
) -> Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    serve_with(addr, metrics, health, Limits::default()).await
}

pub async fn serve_with(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    limits: Limits,
) -> Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let handler: Handler = Arc::new(move |req| {
        let (metrics, health) = (metrics.clone(), health.clone());
        Box::pin(async move {
            match respond(req, metrics, health).await {
                Ok(r) => r,
                Err(never) => match never {},
            }
        })
    });
    listen(addr, "metrics/health", limits, handler).await
}

/// The body every handler answers with.
pub type Body = BoxBody<Bytes, Infallible>;

/// What answers each request on a listener.
pub type Handler = Arc<
    dyn Fn(Request<hyper::body::Incoming>) -> futures::future::BoxFuture<'static, Response<Body>>
        + Send
        + Sync,
>;

/// Binds `addr` now (so a taken port fails at start-up) and serves HTTP/1.1 with `handler`
/// until the task is dropped, within `limits`. `what` names the listener in errors and logs.
pub async fn listen(
    addr: SocketAddr,
    what: &'static str,
    limits: Limits,
    handler: Handler,
) -> Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| Error::Config(format!("cannot listen on {addr} for {what}: {e}")))?;
    let local = listener
        .local_addr()
        .map_err(|e| Error::Config(format!("listener address: {e}")))?;
    let task = tokio::spawn(async move {
        let open: Arc<Mutex<Open>> = Default::default();
        let mut next_id = 0u64;
        let mut failing = false;
        loop {
            let stream = match listener.accept().await {
                Ok((stream, _)) => {
                    failing = false;
                    stream
                }
                Err(e) => {
                    if !failing {
                        warn!(error = %e, listener = what, "cannot accept; retrying");
                        failing = true;
                    }
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            };
            let (close_tx, close_rx) = oneshot::channel();
            let id = next_id;
            next_id += 1;
            if let Ok(mut open) = open.lock() {
                while open.len() >= limits.max_connections.max(1) {
                    if let Some((_, oldest)) = open.pop_front() {
                        let _ = oldest.send(());
                    }
                }
                open.push_back((id, close_tx));
            }
            let (handler, open) = (handler.clone(), open.clone());
            tokio::spawn(async move {
                let svc = service_fn(move |req| {
                    let answer = handler(req);
                    async move { Ok::<_, Infallible>(answer.await) }
                });
                let conn = http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(limits.header_read)
                    .serve_connection(TokioIo::new(stream), svc);
                tokio::pin!(conn);
                tokio::select! {
                    _ = conn.as_mut() => {}
                    _ = tokio::time::sleep(limits.max_age) => {
                        conn.as_mut().graceful_shutdown();
                        let _ = tokio::time::timeout(GRACE, conn).await;
                    }
                    _ = close_rx => {
                        conn.as_mut().graceful_shutdown();
                        let _ = tokio::time::timeout(GRACE, conn).await;
                    }
                }
                if let Ok(mut open) = open.lock() {
                    open.retain(|(i, _)| *i != id);
                }
            });
        }
    });
    Ok((local, task))
}

/// A plain-text or JSON answer.
pub fn answer(code: StatusCode, body: String, ctype: &'static str) -> Response<Body> {
    let mut r = Response::new(Full::new(Bytes::from(body)).boxed());
    *r.status_mut() = code;
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(ctype),
    );
    r
}

async fn respond(
    req: Request<hyper::body::Incoming>,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
) -> Result<Response<BoxBody<Bytes, Infallible>>, Infallible> {
    let respond_with = |code: StatusCode, body: BoxBody<Bytes, Infallible>, ctype: &'static str| {
        let mut r = Response::new(body);
        *r.status_mut() = code;
        r.headers_mut().insert(
            hyper::header::CONTENT_TYPE,
            hyper::header::HeaderValue::from_static(ctype),
        );
        Ok(r)
    };
    let text = |code: StatusCode, body: String, ctype: &'static str| {
        respond_with(code, Full::new(Bytes::from(body)).boxed(), ctype)
    };
    const PLAIN: &str = "text/plain; charset=utf-8";
    match (req.method(), req.uri().path()) {
        // Streamed: a scrape of thousands of TDSets holds one chunk of text at a time.
        (&Method::GET, "/metrics") => {
            let chunks = futures::stream::iter(metrics.chunks())
                .map(|chunk| Ok::<_, Infallible>(Frame::data(Bytes::from(chunk))));
            respond_with(
                StatusCode::OK,
                BodyExt::boxed(StreamBody::new(chunks)),
                "text/plain; version=0.0.4; charset=utf-8",
            )
        }
        (&Method::GET, "/healthz") => text(StatusCode::OK, "ok\n".into(), PLAIN),
        (&Method::GET, "/readyz") if health.ready.load(Ordering::SeqCst) => {
            text(StatusCode::OK, "ready\n".into(), PLAIN)
        }
        (&Method::GET, "/readyz") => text(
            StatusCode::SERVICE_UNAVAILABLE,
            "caches not synced yet\n".into(),
            PLAIN,
        ),
        _ => text(
            StatusCode::NOT_FOUND,
            "not found; try /metrics, /healthz, /readyz\n".into(),
            PLAIN,
        ),
    }
}

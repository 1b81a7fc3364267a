//! `/metrics`, `/healthz` and `/readyz` on hyper.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::StreamExt;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Bytes, Frame};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

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

/// Binds now (so a taken port fails at start-up) and serves until the task is dropped.
pub async fn serve(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
) -> Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| Error::Config(format!("cannot listen on {addr} for metrics/health: {e}")))?;
    let local = listener
        .local_addr()
        .map_err(|e| Error::Config(format!("listener address: {e}")))?;
    let task = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let (metrics, health) = (metrics.clone(), health.clone());
            tokio::spawn(async move {
                let svc = service_fn(move |req| respond(req, metrics.clone(), health.clone()));
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    Ok((local, task))
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

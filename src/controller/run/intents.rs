//! The wake endpoint: the wake proxy reports a request to an intercepted Service, and the
//! TDSet behind it gets a request wake-up in `status.requestWake` (durable before the answer,
//! so a change of leader, or a crash, finishes it from status). Any replica serves it, leader
//! or not: it reads the TDSet live and writes only its own fields; the reconcile that follows
//! the write (a watch event) does the waking.
//!
//! Only the wake proxy may call it: its token, issued for `WAKE_AUDIENCE`, is checked with a
//! TokenReview and must belong to the proxy's ServiceAccount. A pod's own token, another
//! ServiceAccount's, or none is refused before anything is read.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http_body_util::BodyExt;
use hyper::{Method, Request, StatusCode};
use kube::{Client, Resource};
use tracing::{info, warn};

use crate::api::{WakeAnswer, WakeReport, WakeRequest, clip};
use crate::clock::Clock;
use crate::controller::io::wake as io;
use crate::error::Result;
use crate::http::{Body, Handler, Limits, answer, listen};
use crate::schedule::wake;
use crate::telemetry::Metrics;

/// The longest report the endpoint reads.
const MAX_BODY: usize = 8 * 1024;
/// How long a token found valid is trusted without another review, and how many are kept
/// (two proxy replicas, each rotating its token hourly).
const TRUSTED_FOR: Duration = Duration::from_secs(60);
const MAX_TRUSTED: usize = 16;
/// The most TDSets whose requests not yet written are counted (see `Endpoint::pending`).
const MAX_PENDING: usize = 4096;
/// TokenReviews at once, and how long a report waits for one: a flood of forged tokens costs
/// the API server at most this many requests at a time, never the operator's whole budget.
const REVIEWS_AT_ONCE: usize = 4;
const REVIEW_WAIT: Duration = Duration::from_secs(2);

const JSON: &str = "application/json";

/// Who may report requests, and where the endpoint listens.
#[derive(Clone, Debug)]
pub struct WakeOptions {
    pub addr: SocketAddr,
    /// The proxy's user as a TokenReview names it:
    /// `system:serviceaccount:<namespace>:<name>`.
    pub proxy_user: String,
}

struct Endpoint {
    client: Client,
    clock: Arc<dyn Clock>,
    metrics: Arc<Metrics>,
    proxy_user: String,
    /// Tokens found valid, and when.
    trusted: Mutex<HashMap<String, Instant>>,
    /// Requests reported but not written (the wake-up reached far enough), per TDSet (by
    /// uid: one created again starts at 0): added to `requests` at its next write.
    pending: Mutex<HashMap<String, i64>>,
    reviews: tokio::sync::Semaphore,
}

/// Serves the wake endpoint until the task is dropped.
pub async fn serve(
    client: Client,
    clock: Arc<dyn Clock>,
    metrics: Arc<Metrics>,
    opts: WakeOptions,
) -> Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let endpoint = Arc::new(Endpoint {
        client,
        clock,
        metrics,
        proxy_user: opts.proxy_user,
        trusted: Mutex::default(),
        pending: Mutex::default(),
        reviews: tokio::sync::Semaphore::new(REVIEWS_AT_ONCE),
    });
    let handler: Handler = Arc::new(move |req| {
        let endpoint = endpoint.clone();
        Box::pin(async move { endpoint.respond(req).await })
    });
    listen(opts.addr, "wake reports", Limits::default(), handler).await
}

impl Endpoint {
    async fn respond(&self, req: Request<hyper::body::Incoming>) -> hyper::Response<Body> {
        let plain =
            |code, text: &str| answer(code, format!("{text}\n"), "text/plain; charset=utf-8");
        // The proxy's probe: whether it reaches the endpoint at all (it is not ready
        // otherwise). Says nothing about any TDSet, so it needs no token.
        if (req.method(), req.uri().path()) == (&Method::GET, "/healthz") {
            return plain(StatusCode::OK, "ok");
        }
        if (req.method(), req.uri().path()) != (&Method::POST, "/v1/wake") {
            return plain(
                StatusCode::NOT_FOUND,
                "not found; the wake proxy posts to /v1/wake",
            );
        }
        let token = req
            .headers()
            .get(hyper::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::to_string);
        let Some(token) = token else {
            self.count("unauthenticated");
            return plain(StatusCode::UNAUTHORIZED, "a bearer token is required");
        };
        match self.authorized(&token).await {
            Ok(true) => {}
            Ok(false) => {
                self.count("forbidden");
                return plain(
                    StatusCode::FORBIDDEN,
                    "only the wake proxy's ServiceAccount, with a token for wake.tdset.schedule.rs, may report requests",
                );
            }
            Err(e) => {
                warn!(error = %e, "could not review a wake report's token");
                self.count("error");
                return plain(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "could not review the token",
                );
            }
        }
        let body = match http_body_util::Limited::new(req.into_body(), MAX_BODY)
            .collect()
            .await
        {
            Ok(b) => b.to_bytes(),
            Err(_) => {
                self.count("invalid");
                return plain(StatusCode::PAYLOAD_TOO_LARGE, "a report is at most 8 KiB");
            }
        };
        let report: WakeReport = match serde_json::from_slice(&body) {
            Ok(r) => r,
            Err(e) => {
                self.count("invalid");
                return plain(StatusCode::BAD_REQUEST, &format!("not a wake report: {e}"));
            }
        };
        match self.wake(report).await {
            Ok(Ok(a)) => answer(
                StatusCode::ACCEPTED,
                serde_json::to_string(&a).unwrap_or_default(),
                JSON,
            ),
            Ok(Err(why)) => {
                self.count("refused");
                plain(StatusCode::NOT_FOUND, &why)
            }
            Err(e) => {
                warn!(error = %e, "could not record a request wake-up");
                self.count("error");
                plain(StatusCode::SERVICE_UNAVAILABLE, &e.to_string())
            }
        }
    }

    fn count(&self, outcome: &str) {
        self.metrics
            .wake_reports
            .with_label_values(&[outcome])
            .inc();
    }

    /// Whether `token` is the proxy's (a review at most every `TRUSTED_FOR` per token).
    async fn authorized(&self, token: &str) -> Result<bool> {
        if let Ok(trusted) = self.trusted.lock()
            && trusted
                .get(token)
                .is_some_and(|at| at.elapsed() < TRUSTED_FOR)
        {
            return Ok(true);
        }
        // Only what could be a token for the wake audience is reviewed at all.
        if !for_wake_audience(token) {
            return Ok(false);
        }
        let Ok(Ok(_permit)) = tokio::time::timeout(REVIEW_WAIT, self.reviews.acquire()).await
        else {
            return Err(crate::error::Error::Config(
                "too many token reviews at once".into(),
            ));
        };
        let user = io::review(&self.client, token).await?;
        let ok = user.as_deref() == Some(self.proxy_user.as_str());
        if ok && let Ok(mut trusted) = self.trusted.lock() {
            trusted.retain(|_, at| at.elapsed() < TRUSTED_FOR);
            if trusted.len() < MAX_TRUSTED {
                trusted.insert(token.to_string(), Instant::now());
            }
        }
        Ok(ok)
    }

    /// Records the wake-up the report asks for. `Ok(Err)`: refused, with why (no such TDSet,
    /// or it does not wake on requests to that Service).
    async fn wake(&self, report: WakeReport) -> Result<std::result::Result<WakeAnswer, String>> {
        let (ns, name) = (report.namespace.as_str(), report.tdset.as_str());
        if !dns_label(ns) || !dns_subdomain(name) {
            return Ok(Err(format!(
                "{ns:?}/{name:?} is not a TDSet's namespace and name"
            )));
        }
        let Some(tdset) = io::read(&self.client, ns, name).await? else {
            return Ok(Err(format!("no TDSet {ns}/{name}")));
        };
        let named = tdset
            .spec
            .wake_on_request
            .as_ref()
            .is_some_and(|w| w.services.iter().any(|s| s.name == report.service));
        let Some(uid) = tdset.meta().uid.clone().filter(|_| named) else {
            return Ok(Err(format!(
                "TDSet {ns}/{name} does not wake on requests to Service {}",
                report.service
            )));
        };
        let key = uid.clone();
        let reported = report
            .requests
            .max(1)
            .saturating_add(self.take_pending(&key));
        let request = bounded(report.request);
        let recorded = tdset.status.as_ref().and_then(|s| s.request_wake.as_ref());
        let now = self.clock.now();
        let Some(wake) = wake::extend(&tdset.spec, recorded, now, &request, reported) else {
            self.add_pending(key, reported);
            self.count("extended-already");
            return Ok(Ok(WakeAnswer {
                until: recorded.and_then(|r| r.until.clone()),
                written: false,
            }));
        };
        if let Err(e) = io::record(&self.client, ns, name, &uid, &wake).await {
            self.add_pending(key, reported);
            return Err(e);
        }
        info!(tdset = %format!("{ns}/{name}"), request = %request.describe(), until = ?wake.until, "woken by a request");
        self.count("written");
        Ok(Ok(WakeAnswer {
            until: wake.until,
            written: true,
        }))
    }

    fn take_pending(&self, key: &str) -> i64 {
        self.pending
            .lock()
            .ok()
            .and_then(|mut p| p.remove(key))
            .unwrap_or(0)
    }

    fn add_pending(&self, key: String, n: i64) {
        if let Ok(mut p) = self.pending.lock()
            && (p.len() < MAX_PENDING || p.contains_key(&key))
        {
            let v = p.entry(key).or_insert(0);
            *v = v.saturating_add(n);
        }
    }
}

/// The request as the status may hold it, whatever a client sent.
fn bounded(r: WakeRequest) -> WakeRequest {
    let cut = |s: Option<String>, max| s.map(|s| clip(&s, max));
    WakeRequest {
        service: clip(&r.service, 80),
        method: cut(r.method, 16),
        host: cut(r.host, 256),
        path: cut(r.path, 256),
        user_agent: cut(r.user_agent, 256),
    }
}

/// Whether `token` is a JWT whose claims name the wake audience (read, not verified: the
/// TokenReview verifies). Anything else is refused without asking the API server.
fn for_wake_audience(token: &str) -> bool {
    use base64::Engine;
    let mut parts = token.split('.');
    let (Some(_), Some(claims), Some(_), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return false;
    };
    let Ok(claims) = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(claims) else {
        return false;
    };
    let Ok(claims) = serde_json::from_slice::<serde_json::Value>(&claims) else {
        return false;
    };
    match &claims["aud"] {
        serde_json::Value::String(a) => a == io::WAKE_AUDIENCE,
        serde_json::Value::Array(a) => a.iter().any(|a| a == io::WAKE_AUDIENCE),
        _ => false,
    }
}

fn dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

fn dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(dns_label)
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine;

    fn jwt(claims: serde_json::Value) -> String {
        let b = |v: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v);
        format!(
            "{}.{}.{}",
            b(b"{}"),
            b(claims.to_string().as_bytes()),
            b(b"sig")
        )
    }

    #[test]
    fn only_a_token_for_the_wake_audience_is_sent_for_review() {
        assert!(for_wake_audience(&jwt(
            serde_json::json!({"aud": ["wake.tdset.schedule.rs"]})
        )));
        assert!(for_wake_audience(&jwt(
            serde_json::json!({"aud": "wake.tdset.schedule.rs"})
        )));
        assert!(!for_wake_audience(&jwt(
            serde_json::json!({"aud": ["https://kubernetes.default.svc"]})
        )));
        assert!(!for_wake_audience("not-a-token"));
        assert!(!for_wake_audience("a.b.c.d"));
    }

    #[test]
    fn names_are_checked_before_they_reach_a_path() {
        assert!(dns_label("team-a") && dns_subdomain("web.v2"));
        assert!(!dns_label("../x") && !dns_subdomain("a?b") && !dns_label(""));
    }
}

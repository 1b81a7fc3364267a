//! One instant query to Prometheus (`POST /api/v1/query`), its answer read within a bound.

use std::time::Duration;

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use crate::workload::traffic::MAX_ANSWER_BYTES;

/// How long one query may take, its answer read whole.
const QUERY_TIMEOUT: Duration = Duration::from_secs(10);

pub type Http = HttpClient<HttpConnector, Full<Bytes>>;

pub fn http() -> Http {
    let mut connector = HttpConnector::new();
    connector.set_connect_timeout(Some(Duration::from_secs(3)));
    HttpClient::builder(TokioExecutor::new()).build(connector)
}

/// Why a query gave no answer to read: Prometheus could not be reached (or took too long),
/// or it answered with an error status.
#[derive(Debug)]
pub enum QueryError {
    Unreachable(String),
    Refused(String),
}

/// Asks Prometheus at `base` the instant query `promql`; the answer's bytes, at most
/// `MAX_ANSWER_BYTES` (a larger answer is refused, never held whole).
pub async fn query(http: &Http, base: &str, promql: &str) -> Result<Vec<u8>, QueryError> {
    let body = form_urlencoded::Serializer::new(String::new())
        .append_pair("query", promql)
        .finish();
    let req = hyper::Request::post(format!("{}/api/v1/query", base.trim_end_matches('/')))
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| QueryError::Unreachable(format!("not a URL: {e}")))?;
    let read = async {
        let res = http
            .request(req)
            .await
            .map_err(|e| QueryError::Unreachable(e.to_string()))?;
        let status = res.status();
        let bytes = Limited::new(res.into_body(), MAX_ANSWER_BYTES)
            .collect()
            .await
            .map_err(|e| QueryError::Refused(format!("reading the answer: {e}")))?
            .to_bytes();
        // Prometheus says a refused query (400, 422) in the JSON body: read it for its error.
        if status.is_server_error() {
            return Err(QueryError::Refused(format!("Prometheus answered {status}")));
        }
        Ok(bytes.to_vec())
    };
    match tokio::time::timeout(QUERY_TIMEOUT, read).await {
        Ok(answer) => answer,
        Err(_) => Err(QueryError::Unreachable(format!(
            "no answer within {}s",
            QUERY_TIMEOUT.as_secs()
        ))),
    }
}

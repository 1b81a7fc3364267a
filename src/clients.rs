//! The operator's connections to the API server. No request may hang and no dead connection
//! may linger: every request is sent and answered within its timeouts, every connection is
//! probed by TCP keepalive, and a watch that has gone quiet for longer than the server's own
//! watch timeout is dropped and re-established.
//!
//! kube's client stack sets timeouts but no keepalive, and offers no hook for the socket, so
//! the stack is assembled here from kube's own layers (base URI, auth, headers, server-aware
//! retry) over a connector with keepalive on. Through an HTTP or SOCKS proxy kube's stack is
//! used as is (its proxy connectors are not public): timeouts apply there, keepalive does not.

use std::time::Duration;

use hyper_timeout::TimeoutConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use kube::client::retry::RetryPolicy;
use kube::client::{Body, ConfigExt};
use kube::{Client, Config};
use tower::{BoxError, ServiceBuilder};

use crate::error::{Error, Result};

/// A request is sent within `WRITE_TIMEOUT` and answered within `READ_TIMEOUT` of being sent,
/// or it fails and its reconcile is retried.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
pub const READ_TIMEOUT: Duration = Duration::from_secs(30);
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(30);
/// Watches are quiet for minutes by design, but the server ends each one after the watcher's
/// `timeoutSeconds` (290 s): a watch silent for longer than this is on a dead connection.
pub const WATCH_READ_TIMEOUT: Duration = Duration::from_secs(300);
/// An idle connection is probed after `KEEPALIVE_IDLE`, then every `KEEPALIVE_INTERVAL`; after
/// `KEEPALIVE_PROBES` unanswered probes the kernel closes it (about a minute in all), so a
/// watch or pooled connection whose peer vanished fails instead of waiting for ever.
pub const KEEPALIVE_IDLE: Duration = Duration::from_secs(30);
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);
pub const KEEPALIVE_PROBES: u32 = 3;

/// One client for requests and one for watches: a watch may be silent for minutes, a request
/// may not.
#[derive(Clone)]
pub struct Clients {
    pub requests: Client,
    pub watches: Client,
}

impl Clients {
    /// One client for both (tests, and the in-process operator).
    pub fn same(client: Client) -> Clients {
        Clients {
            requests: client.clone(),
            watches: client,
        }
    }

    pub fn from_config(mut config: Config) -> Result<Clients> {
        config.connect_timeout = Some(CONNECT_TIMEOUT);
        config.write_timeout = Some(WRITE_TIMEOUT);
        config.read_timeout = Some(WATCH_READ_TIMEOUT);
        let watches = client(config.clone())?;
        config.read_timeout = Some(READ_TIMEOUT);
        // Counted from when the request was sent, not from when its pooled connection went idle.
        config.reset_reader_on_write = true;
        Ok(Clients {
            requests: client(config)?,
            watches,
        })
    }
}

fn client(config: Config) -> Result<Client> {
    let failed = |e: &dyn std::fmt::Display| Error::Config(format!("building the API client: {e}"));
    if config.proxy_url.is_some() {
        return Client::try_from(config).map_err(|e| failed(&e));
    }
    let mut tcp = HttpConnector::new();
    tcp.enforce_http(false);
    tcp.set_nodelay(true);
    tcp.set_keepalive(Some(KEEPALIVE_IDLE));
    tcp.set_keepalive_interval(Some(KEEPALIVE_INTERVAL));
    tcp.set_keepalive_retries(Some(KEEPALIVE_PROBES));
    let tls = config
        .rustls_https_connector_with_connector(tcp)
        .map_err(|e| failed(&e))?;
    let mut timed = TimeoutConnector::new(tls);
    timed.set_connect_timeout(config.connect_timeout);
    timed.set_read_timeout(config.read_timeout);
    timed.set_write_timeout(config.write_timeout);
    timed.set_reset_reader_on_write(config.reset_reader_on_write);
    let http: hyper_util::client::legacy::Client<_, Body> =
        hyper_util::client::legacy::Builder::new(TokioExecutor::new()).build(timed);
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(
            config
                .default_retry
                .then(|| tower::retry::RetryLayer::new(RetryPolicy::server_retry())),
        )
        .option_layer(config.auth_layer().map_err(|e| failed(&e))?)
        .layer(config.extra_headers_layer().map_err(|e| failed(&e))?)
        .map_err(BoxError::from)
        .service(http);
    Ok(Client::new(service, config.default_namespace))
}

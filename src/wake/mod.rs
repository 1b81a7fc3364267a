//! The wake proxy (`tdset-operator wake-proxy`): a wing of its own, beside the controller, that
//! imports only the pure core and the API types. While a TDSet's workloads are asleep, the
//! operator's EndpointSlices send its Services' connections here; the proxy reads a request's
//! head, reports it to the operator's wake endpoint, holds the connection until the Service's
//! own endpoints are ready, and forwards it there.
//!
//! - `head`: what is read of a connection before deciding (an HTTP/1.x head, h2c, plain TCP);
//! - `reply`: what the proxy answers itself (503 with Retry-After, a self-reloading page).

pub mod head;
pub mod reply;

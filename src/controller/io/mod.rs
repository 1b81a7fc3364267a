//! Client calls, and nothing else: no `Outcome`, no Events. What a write means, and whether it
//! is due, is the forms' to say.
//!
//! - `intercept`: wake on request's data plane: the Services named, the wake proxy's pods, the
//!   operator's EndpointSlices;
//! - `keda`: a KEDA ScaledObject read live, and its pause, floor and ceiling written;
//! - `prometheus`: one instant query (`spec.idle`'s signals), its answer bounded;
//! - `owned`: guarded create, `/scale`, apply and delete of the objects a TDSet owns;
//! - `target`: a referenced target's `/scale` and an HPA's `minReplicas`, read and written;
//! - `tdset`: the TDSet's own status (durable, or queued on the lane) and finalizer;
//! - `wake`: a request wake-up: the proxy's token reviewed, `status.requestWake` written.

pub(crate) mod intercept;
pub(crate) mod keda;
pub(crate) mod owned;
pub(crate) mod prometheus;
pub(crate) mod target;
pub(crate) mod tdset;
pub(crate) mod wake;

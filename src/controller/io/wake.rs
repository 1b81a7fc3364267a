//! A request wake-up on the wire: who is calling (a TokenReview of the wake proxy's token),
//! the TDSet read live, and `status.requestWake` written under the wake endpoint's own field
//! manager, so the reconcile's status writes (which carry only `phase`) never undo it.

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::api::{RequestWakeStatus, TDSet};
use crate::error::{Error, Result};

/// The field manager of what the wake endpoint writes (`status.requestWake` but its phase).
pub const WAKE_FIELD_MANAGER: &str = "tdset-operator-wake";

/// The audience of the wake proxy's token: a token the API server issued for itself (every
/// pod's default one) is refused.
pub const WAKE_AUDIENCE: &str = "wake.tdset.schedule.rs";

/// The user a token authenticates as, for `WAKE_AUDIENCE`; `None`: not authenticated (an
/// expired, forged or wrong-audience token).
pub(crate) async fn review(client: &Client, token: &str) -> Result<Option<String>> {
    let api: Api<TokenReview> = Api::all(client.clone());
    let review = TokenReview {
        spec: TokenReviewSpec {
            token: Some(token.to_string()),
            audiences: Some(vec![WAKE_AUDIENCE.to_string()]),
        },
        ..Default::default()
    };
    let answer = api
        .create(&PostParams::default(), &review)
        .await
        .map_err(Error::kube("reviewing the wake proxy's token"))?;
    let status = answer.status.unwrap_or_default();
    let audience_ok = status
        .audiences
        .as_ref()
        .is_some_and(|a| a.iter().any(|a| a == WAKE_AUDIENCE));
    Ok((status.authenticated == Some(true) && audience_ok)
        .then(|| status.user.and_then(|u| u.username))
        .flatten())
}

/// The TDSet as stored now (`None`: it does not exist).
pub(crate) async fn read(client: &Client, ns: &str, name: &str) -> Result<Option<TDSet>> {
    Api::<TDSet>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .map_err(Error::kube(format!("reading TDSet {ns}/{name}")))
}

/// Writes `wake` as `status.requestWake` (but its phase) of the TDSet with this uid; a TDSet
/// deleted and created again under its name is refused (409), never woken by mistake.
pub(crate) async fn record(
    client: &Client,
    ns: &str,
    name: &str,
    uid: &str,
    wake: &RequestWakeStatus,
) -> Result<()> {
    let wake = RequestWakeStatus {
        phase: None,
        ..wake.clone()
    };
    let body = json!({
        "apiVersion": "schedule.rs/v1",
        "kind": "TDSet",
        "metadata": {"name": name, "uid": uid},
        "status": {"requestWake": wake},
    });
    Api::<TDSet>::namespaced(client.clone(), ns)
        .patch_status(
            name,
            &PatchParams::apply(WAKE_FIELD_MANAGER).force(),
            &Patch::Apply(&body),
        )
        .await
        .map(|_| ())
        .map_err(Error::kube(format!(
            "recording a request wake-up of TDSet {ns}/{name}"
        )))
}

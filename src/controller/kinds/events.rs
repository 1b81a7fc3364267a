//! Which Events a change to a workload makes (the lane sends them).

use k8s_openapi::api::apps::v1::Deployment;
use kube::ResourceExt;
use tracing::info;

use crate::api::TDSet;
use crate::controller::io::owned::Change;
use crate::controller::lane::{EventNote, EventType, Events, note};
use crate::controller::state::Context;
use crate::schedule::Evaluation;

pub(crate) fn record_deployment_change(
    tdset: &TDSet,
    ctx: &Context,
    eval: &Evaluation,
    before: Option<&Deployment>,
    change: &Change,
    template_changed: bool,
    events: &mut Events,
) {
    let name = format!(
        "{}/{}",
        tdset.namespace().unwrap_or_default(),
        tdset.name_any()
    );
    match change {
        Change::Unchanged => {}
        Change::Created => {
            info!(replicas = eval.replicas, window = ?eval.window_label, "created Deployment");
            let text = format!(
                "created Deployment {name} with {} replicas ({})",
                eval.replicas,
                eval.why()
            );
            events.push(note(tdset, EventType::Normal, "Created", text));
        }
        Change::Updated => {
            let from = before
                .and_then(|d| d.spec.as_ref())
                .and_then(|s| s.replicas);
            let scaled = from.filter(|&f| f != eval.replicas);
            if let Some(from) = scaled {
                let change = format!("scaled Deployment {name}");
                events.push(record_scale(ctx, tdset, &change, from, eval.replicas, eval));
            }
            if template_changed || scaled.is_none() {
                let what = template_changes(before, tdset)
                    .or_else(|| template_changed.then(|| "pod template changed".into()))
                    .unwrap_or_else(|| "restored labels, selector or owner reference".into());
                info!(changes = %what, "updated Deployment to match the TDSet");
                events.push(note(
                    tdset,
                    EventType::Normal,
                    "Updated",
                    format!("updated Deployment {name}: {what}"),
                ));
            }
        }
    }
}

/// A replica change the operator made (`change` says what: "scaled Deployment ns/web",
/// "set HorizontalPodAutoscaler web minReplicas"): counted, logged; the Event saying why.
pub(crate) fn record_scale(
    ctx: &Context,
    tdset: &TDSet,
    change: &str,
    from: i32,
    to: i32,
    eval: &Evaluation,
) -> EventNote {
    let (direction, reason) = if to > from {
        ("up", "ScaledUp")
    } else {
        ("down", "ScaledDown")
    };
    ctx.metrics
        .scale_operations
        .with_label_values(&[direction])
        .inc();
    info!(from, to, window = ?eval.window_label, change, "scaled");
    let text = format!("{change} from {from} to {to} replicas: {}", eval.why());
    note(tdset, EventType::Normal, reason, text)
}

/// "image a -> b, port 80 -> 8080": what an update changed in a `container` Deployment.
fn template_changes(before: Option<&Deployment>, tdset: &TDSet) -> Option<String> {
    let spec = tdset.spec.container.as_ref()?;
    let container = before
        .and_then(|d| d.spec.as_ref())
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|p| p.containers.first());
    let old_image = container.and_then(|c| c.image.clone()).unwrap_or_default();
    let old_port = container
        .and_then(|c| c.ports.as_ref())
        .and_then(|p| p.first())
        .map(|p| p.container_port);
    let mut parts = Vec::new();
    if old_image != spec.image {
        parts.push(format!("image {old_image} -> {}", spec.image));
    }
    if old_port != Some(spec.port) {
        parts.push(format!(
            "port {} -> {}",
            old_port.map_or("-".into(), |p| p.to_string()),
            spec.port
        ));
    }
    (!parts.is_empty()).then(|| parts.join(", "))
}

//! The schema's rules, checked again for manifests that never passed an API server (files
//! given to `preview`) and as a second line of defence in the controller.

use super::SpecError;
use crate::api::{MAX_REPLICAS, MAX_WINDOWS, TDSetSpec};
use crate::workload::Source;

/// The schema's rules, for specs that never passed an API server (files given to `preview`),
/// and as a second line of defence in the controller. Types and the HH:MM format are enforced
/// by deserialisation already.
pub fn validate(spec: &TDSetSpec) -> Vec<SpecError> {
    let mut errors = Vec::new();
    if let Err(e) = Source::of(spec) {
        errors.push(e);
    }
    let mut err = |field: String, message: String| errors.push(SpecError { field, message });
    if let Some(c) = &spec.container {
        if c.image.trim().is_empty() || c.image.chars().any(char::is_whitespace) {
            err(
                "spec.container.image".into(),
                "must be a non-empty image reference without spaces".into(),
            );
        }
        if !(1..=65535).contains(&c.port) {
            err(
                "spec.container.port".into(),
                format!("{} is out of range 1..65535", c.port),
            );
        }
    }
    if let Some(t) = &spec.template {
        let containers = t
            .spec
            .as_ref()
            .map(|p| p.containers.as_slice())
            .unwrap_or_default();
        if containers.is_empty() {
            err(
                "spec.template.spec.containers".into(),
                "the pod template needs at least one container".into(),
            );
        }
        for (i, c) in containers.iter().enumerate() {
            if c.image.as_deref().is_none_or(|i| i.trim().is_empty()) {
                err(
                    format!("spec.template.spec.containers[{i}].image"),
                    "is required".into(),
                );
            }
        }
    }
    if spec.service.is_some() && spec.scale_target_ref.is_some() {
        err(
            "spec.service".into(),
            "needs an owned Deployment (spec.container or spec.template)".into(),
        );
    }
    if spec.on_delete.is_some() && spec.scale_target_ref.is_none() {
        err(
            "spec.onDelete".into(),
            "applies to spec.scaleTargetRef only".into(),
        );
    }
    if let Some(svc) = &spec.service
        && !(1..=65535).contains(&svc.port)
    {
        err(
            "spec.service.port".into(),
            format!("{} is out of range 1..65535", svc.port),
        );
    }
    if !(0..=MAX_REPLICAS).contains(&spec.default_replica) {
        err(
            "spec.defaultReplica".into(),
            format!("{} is out of range 0..{MAX_REPLICAS}", spec.default_replica),
        );
    }
    if let Some(i) = spec.interval_mint
        && !(1..=1440).contains(&i)
    {
        err(
            "spec.intervalMint".into(),
            format!("{i} is out of range 1..1440 (minutes)"),
        );
    }
    if spec.scheduling_config.len() > MAX_WINDOWS {
        err(
            "spec.schedulingConfig".into(),
            format!(
                "{} windows; at most {MAX_WINDOWS} are allowed",
                spec.scheduling_config.len()
            ),
        );
    }
    for (i, w) in spec.scheduling_config.iter().enumerate() {
        if w.start_time.minute_of_day() == w.end_time.minute_of_day() {
            err(
                format!("spec.schedulingConfig[{i}].endTime"),
                "endTime must differ from startTime (a window needs a length; use startTime > endTime to wrap midnight)"
                    .into(),
            );
        }
        if !(0..=MAX_REPLICAS).contains(&w.replica) {
            err(
                format!("spec.schedulingConfig[{i}].replica"),
                format!("{} is out of range 0..{MAX_REPLICAS}", w.replica),
            );
        }
        if let Some(days) = &w.days {
            if days.is_empty() {
                err(
                    format!("spec.schedulingConfig[{i}].days"),
                    "must name at least one day, or be omitted".into(),
                );
            }
            for (k, d) in days.iter().enumerate() {
                if days[..k].contains(d) {
                    err(
                        format!("spec.schedulingConfig[{i}].days[{k}]"),
                        format!("duplicate day {d}"),
                    );
                }
            }
        }
    }
    errors
}

//! The schema's rules, checked again for manifests that never passed an API server (files
//! given to `preview`) and as a second line of defence in the controller.

use super::SpecError;
use crate::api::Source;
use crate::api::{MAX_REPLICAS, MAX_WINDOWS, TDSetSpec};

/// The schema's rules, for specs that never passed an API server (files given to `preview`),
/// and as a second line of defence in the controller. Types and the HH:MM format are enforced
/// by deserialisation already.
pub fn validate(spec: &TDSetSpec) -> Vec<SpecError> {
    let mut errors = Vec::new();
    if let Err(e) = Source::of(spec) {
        errors.push(e);
    }
    super::wake::check(spec, &mut errors);
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
    let group = spec.scale_target_selector.is_some();
    if spec.service.is_some() && (spec.scale_target_ref.is_some() || group) {
        err(
            "spec.service".into(),
            "needs an owned Deployment (spec.container or spec.template)".into(),
        );
    }
    if let Some(sel) = &spec.scale_target_selector {
        for (i, k) in sel.kinds.iter().enumerate() {
            if let crate::api::GroupKind::Scalable { kind, group } = k {
                let well_formed = kind.starts_with(|c: char| c.is_ascii_uppercase())
                    && kind.chars().all(|c| c.is_ascii_alphanumeric())
                    && !group.is_empty()
                    && group.split('.').all(|p| {
                        !p.is_empty()
                            && p.chars()
                                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                    });
                if !well_formed || (kind == "HorizontalPodAutoscaler" && group == "autoscaling") {
                    err(
                        format!("spec.scaleTargetSelector.kinds[{i}]"),
                        format!(
                            "{k:?} must be Deployment, StatefulSet, CronJob, or Kind.group of a kind with a /scale subresource, e.g. Rollout.argoproj.io"
                        ),
                    );
                }
            }
        }
        for (i, k) in sel.kinds.iter().enumerate() {
            if sel.kinds[..i].iter().any(|o| o.same_kind(k)) {
                err(
                    format!("spec.scaleTargetSelector.kinds[{i}]"),
                    format!("{k} is listed twice"),
                );
            }
        }
        if let Err(e) = crate::api::Selector::compile(&sel.selector) {
            err("spec.scaleTargetSelector.selector".into(), e);
        }
        if sel.order.len() > crate::api::MAX_TIERS {
            err(
                "spec.scaleTargetSelector.order".into(),
                format!(
                    "lists {} tiers; at most {} (the workloads in none form one more)",
                    sel.order.len(),
                    crate::api::MAX_TIERS
                ),
            );
        }
        for (i, tier) in sel.order.iter().enumerate() {
            if let Err(e) = crate::api::Selector::compile(&tier.0) {
                err(format!("spec.scaleTargetSelector.order[{i}]"), e);
            }
        }
        if let Some(t) = &sel.tier_timeout
            && super::parse_short_duration(t).is_none()
        {
            err(
                "spec.scaleTargetSelector.tierTimeout".into(),
                format!("{t:?} must be a duration from 1s to 1h, e.g. \"90s\" or \"5m\""),
            );
        }
    }
    match spec.default_replica {
        None if !group => err(
            "spec.defaultReplica".into(),
            "is required; only the group form (spec.scaleTargetSelector) may omit it".into(),
        ),
        _ => {}
    }
    for (i, o) in spec.overrides.iter().enumerate() {
        if o.replica.is_none() && !group {
            err(
                format!("spec.overrides[{i}].replica"),
                "is required; only the group form (spec.scaleTargetSelector) may omit it".into(),
            );
        }
    }
    let own = spec.default_replica.is_none() || spec.overrides.iter().any(|o| o.replica.is_none());
    if spec.ramp.is_some() && own {
        err(
            "spec.ramp".into(),
            "a ramp needs a number at every level: set spec.defaultReplica and every override's replica (a ramp cannot lead to or from the level own)".into(),
        );
    }
    if let Some(w) = &spec.warm_up {
        let duration = |field: &str, value: &Option<String>| match value.as_deref() {
            None => Ok(None),
            Some(v) => match super::parse_short_duration(v) {
                Some(d) => Ok(Some(d)),
                None => Err(SpecError {
                    field: format!("spec.warmUp.{field}"),
                    message: format!(
                        "{v:?} must be a duration from 1s to 1h, e.g. \"90s\" or \"2m\""
                    ),
                }),
            },
        };
        let lead = duration("lead", &w.lead);
        let max = duration("max", &w.max);
        match (&lead, &max) {
            (Ok(Some(l)), Ok(m)) if *l > m.unwrap_or(crate::api::DEFAULT_WARM_UP_MAX) => err(
                "spec.warmUp.lead".into(),
                "is longer than spec.warmUp.max (default 10m), which caps every lead".into(),
            ),
            (Ok(None), _) if w.mode() == crate::api::WarmUpMode::Fixed => err(
                "spec.warmUp.lead".into(),
                "mode Fixed writes every scale-up this far ahead: set it".into(),
            ),
            _ => {}
        }
        for e in [lead.err(), max.err()].into_iter().flatten() {
            err(e.field, e.message);
        }
    }
    if spec.on_delete.is_some() && spec.scale_target_ref.is_none() {
        err(
            "spec.onDelete".into(),
            "applies to spec.scaleTargetRef only".into(),
        );
    }
    // Ceilings (maxReplica): at least the floor beside them, and only for an HPA, without a ramp.
    let ceilings: Vec<(String, Option<i32>, i32)> = spec
        .scheduling_config
        .iter()
        .enumerate()
        .filter_map(|(i, w)| {
            w.max_replica.map(|m| {
                (
                    format!("spec.schedulingConfig[{i}].maxReplica"),
                    Some(w.replica),
                    m,
                )
            })
        })
        .chain(spec.overrides.iter().enumerate().filter_map(|(i, o)| {
            o.max_replica
                .map(|m| (format!("spec.overrides[{i}].maxReplica"), o.replica, m))
        }))
        .chain(spec.default_max_replica.map(|m| {
            (
                "spec.defaultMaxReplica".to_string(),
                spec.default_replica,
                m,
            )
        }))
        .collect();
    let hpa = spec
        .scale_target_ref
        .as_ref()
        .is_some_and(|r| r.is_hpa() || r.is_scaled_object());
    for (field, floor, ceiling) in &ceilings {
        if !(1..=MAX_REPLICAS).contains(ceiling) {
            err(
                field.clone(),
                format!("{ceiling} is out of range 1..{MAX_REPLICAS}"),
            );
        }
        if let Some(floor) = floor
            && ceiling < floor
        {
            err(
                field.clone(),
                format!(
                    "{ceiling} is below the floor beside it ({floor}): the HPA's ceiling must be at least its floor"
                ),
            );
        }
        if !hpa || spec.ramp.is_some() {
            err(
                field.clone(),
                "sets an autoscaler's maximum: it needs spec.scaleTargetRef to a HorizontalPodAutoscaler or a KEDA ScaledObject, and no spec.ramp".into(),
            );
        }
    }
    if let Some(svc) = &spec.service
        && !(1..=65535).contains(&svc.port)
    {
        err(
            "spec.service.port".into(),
            format!("{} is out of range 1..65535", svc.port),
        );
    }
    if let Some(d) = spec.default_replica
        && !(0..=MAX_REPLICAS).contains(&d)
    {
        err(
            "spec.defaultReplica".into(),
            format!("{d} is out of range 0..{MAX_REPLICAS}"),
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

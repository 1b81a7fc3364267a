//! Which form a TDSet's workload takes: exactly one of the spec's four sources.

use k8s_openapi::api::core::v1::PodTemplateSpec;

use super::{ContainerSpec, ScaleTargetRef, ScaleTargetSelector, TDSetSpec};
use crate::error::SpecError;

/// The one workload source of a TDSet.
#[derive(Clone, Copy, Debug)]
pub enum Source<'a> {
    /// The seed's form: an owned Deployment with one container.
    Container(&'a ContainerSpec),
    /// An owned Deployment with a full pod template.
    Template(&'a PodTemplateSpec),
    /// An existing object with a `/scale` subresource.
    Scale(&'a ScaleTargetRef),
    /// An existing HorizontalPodAutoscaler: the schedule is its floor.
    HpaFloor(&'a ScaleTargetRef),
    /// A KEDA ScaledObject: asleep through KEDA's pause, the schedule as its floor by day.
    ScaledObject(&'a ScaleTargetRef),
    /// The workloads a label selector picks in the TDSet's namespace.
    Group(&'a ScaleTargetSelector),
}

impl<'a> Source<'a> {
    /// The source named by the spec; an error unless exactly one is set (the schema's rule,
    /// checked again for manifests that never passed an API server).
    pub fn of(spec: &'a TDSetSpec) -> Result<Source<'a>, SpecError> {
        match (
            &spec.container,
            &spec.template,
            &spec.scale_target_ref,
            &spec.scale_target_selector,
        ) {
            (Some(c), None, None, None) => Ok(Source::Container(c)),
            (None, Some(t), None, None) => Ok(Source::Template(t.as_ref())),
            (None, None, Some(r), None) => Ok(Source::referencing(r)),
            (None, None, None, Some(s)) => Ok(Source::Group(s)),
            _ => Err(SpecError {
                field: "spec".into(),
                message: "exactly one of spec.container, spec.template, spec.scaleTargetRef or spec.scaleTargetSelector must be set".into(),
            }),
        }
    }

    /// The form of a `scaleTargetRef` to `r`, by the kind it names.
    pub fn referencing(r: &'a ScaleTargetRef) -> Source<'a> {
        if r.is_hpa() {
            Source::HpaFloor(r)
        } else if r.is_scaled_object() {
            Source::ScaledObject(r)
        } else {
            Source::Scale(r)
        }
    }

    /// Whether the operator owns the Deployment (and may own a Service).
    pub fn is_owned(self) -> bool {
        matches!(self, Source::Container(_) | Source::Template(_))
    }

    /// The form's short name, as `kubectl tdset` lists it.
    pub fn form_name(self) -> &'static str {
        match self {
            Source::Container(_) => "container",
            Source::Template(_) => "template",
            Source::Scale(_) => "scaleTargetRef",
            Source::HpaFloor(_) => "hpa",
            Source::ScaledObject(_) => "keda",
            Source::Group(_) => "group",
        }
    }

    /// The referenced object, for the modes that reference one.
    pub fn target(self) -> Option<&'a ScaleTargetRef> {
        match self {
            Source::Scale(r) | Source::HpaFloor(r) | Source::ScaledObject(r) => Some(r),
            Source::Container(_) | Source::Template(_) | Source::Group(_) => None,
        }
    }
}

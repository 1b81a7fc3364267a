//! A HorizontalPodAutoscaler as the schedule's floor: the operator sets `spec.minReplicas`
//! to the scheduled count and leaves `maxReplicas` and the metrics alone, so the HPA keeps
//! scaling above the floor on load.
//!
//! Two edges need more than `minReplicas`:
//! - a count above `maxReplicas` cannot be a floor: it is clamped to `maxReplicas` and reported;
//! - 0 cannot be an HPA minimum, but the HPA controller stops acting on a target at 0 replicas,
//!   so a scheduled 0 scales the HPA's target to 0 through `/scale` (the HPA's own
//!   `minReplicas` is left as it is), and the next count > 0 sets `minReplicas` and scales the
//!   target back up to it, since the HPA would not wake it by itself.

use serde_json::{Value, json};

use crate::api::ScaleTargetRef;

/// What the operator reads of an HPA (also what its cache keeps).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HpaView {
    pub name: String,
    /// `spec.minReplicas`; the API server defaults it to 1.
    pub min_replicas: Option<i32>,
    pub max_replicas: i32,
    /// `spec.scaleTargetRef`, in the HPA's namespace.
    pub target: ScaleTargetRef,
    /// `status.currentReplicas`.
    pub current_replicas: Option<i32>,
    /// Its own floor when a group holds it (the group's record on it says so), else
    /// `minReplicas`.
    pub own_min: i32,
}

impl HpaView {
    pub fn min(&self) -> i32 {
        self.min_replicas.unwrap_or(1)
    }
}

/// The writes that make an HPA (and, at 0, its target) follow the scheduled count.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FloorPlan {
    /// The floor in force: the scheduled count, clamped to `maxReplicas`; 0 while asleep.
    pub floor: i32,
    /// `spec.minReplicas` to write, when it differs.
    pub min_replicas: Option<i32>,
    /// Replicas to write to the HPA's target through `/scale` (to 0, or back up from 0).
    pub scale_target: Option<i32>,
    /// Set when the scheduled count was above `maxReplicas`: the count that was asked for.
    pub clamped_from: Option<i32>,
}

/// `target_replicas` is the HPA target's `spec.replicas` from its `/scale` (None when unread).
pub fn plan(scheduled: i32, hpa: &HpaView, target_replicas: Option<i32>) -> FloorPlan {
    if scheduled <= 0 {
        return FloorPlan {
            floor: 0,
            min_replicas: None,
            scale_target: target_replicas.filter(|&r| r != 0).map(|_| 0),
            clamped_from: None,
        };
    }
    let floor = scheduled.min(hpa.max_replicas.max(1));
    FloorPlan {
        floor,
        min_replicas: (hpa.min_replicas != Some(floor)).then_some(floor),
        scale_target: (target_replicas == Some(0)).then_some(floor),
        clamped_from: (scheduled > floor).then_some(scheduled),
    }
}

/// The server-side apply body for the HPA: `spec.minReplicas` alone, guarded by the uid so an
/// HPA that was deleted and recreated meanwhile is never written (and one that is gone is
/// never created).
pub fn min_replicas_body(name: &str, uid: Option<&str>, min_replicas: i32) -> Value {
    json!({
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": name, "uid": uid},
        "spec": {"minReplicas": min_replicas},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hpa(min: Option<i32>, max: i32) -> HpaView {
        HpaView {
            name: "web".into(),
            min_replicas: min,
            max_replicas: max,
            target: ScaleTargetRef {
                api_version: "apps/v1".into(),
                kind: "Deployment".into(),
                name: "web".into(),
            },
            current_replicas: Some(3),
            own_min: min.unwrap_or(1),
        }
    }

    #[test]
    fn the_floor_follows_the_schedule_and_nothing_is_written_when_it_is_there() {
        assert_eq!(
            plan(4, &hpa(Some(2), 10), Some(3)),
            FloorPlan {
                floor: 4,
                min_replicas: Some(4),
                scale_target: None,
                clamped_from: None
            }
        );
        assert_eq!(
            plan(4, &hpa(Some(4), 10), Some(7)),
            FloorPlan {
                floor: 4,
                ..FloorPlan::default()
            }
        );
        // Unset minReplicas means 1 on the server; writing 1 makes the floor explicitly ours.
        assert_eq!(plan(1, &hpa(None, 10), Some(1)).min_replicas, Some(1));
    }

    #[test]
    fn above_max_is_clamped_and_reported() {
        let p = plan(12, &hpa(Some(2), 8), Some(3));
        assert_eq!(
            p,
            FloorPlan {
                floor: 8,
                min_replicas: Some(8),
                scale_target: None,
                clamped_from: Some(12)
            }
        );
    }

    #[test]
    fn zero_puts_the_target_to_sleep_and_the_next_window_wakes_it() {
        // 0: the target goes to 0 through /scale; minReplicas stays.
        assert_eq!(
            plan(0, &hpa(Some(3), 10), Some(3)),
            FloorPlan {
                floor: 0,
                min_replicas: None,
                scale_target: Some(0),
                clamped_from: None
            }
        );
        // Already asleep: nothing to do.
        assert_eq!(plan(0, &hpa(Some(3), 10), Some(0)), FloorPlan::default());
        // Waking: the floor, and the target up to it (the HPA would not act on a target at 0).
        assert_eq!(
            plan(5, &hpa(Some(3), 10), Some(0)),
            FloorPlan {
                floor: 5,
                min_replicas: Some(5),
                scale_target: Some(5),
                clamped_from: None
            }
        );
    }
}

//! A HorizontalPodAutoscaler as the schedule's floor: the operator sets `spec.minReplicas`
//! to the scheduled count and leaves the metrics alone, so the HPA keeps scaling above the
//! floor on load. Where the schedule also sets a ceiling (`maxReplica`), `maxReplicas` follows
//! it; where it sets none, `maxReplicas` is the HPA's own (given back if a ceiling was set
//! before).
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
    /// Whether `maxReplicas` was last set by this operator (its field manager owns it, in
    /// `managedFields`; false where they were not read): the ceiling on the HPA is then a
    /// TDSet's, not one its owner set since.
    pub max_by_operator: bool,
    /// The KEDA ScaledObject that owns it, if one does (`scaled_object_of`).
    pub scaled_object: Option<String>,
}

/// The KEDA ScaledObject among an HPA's owners (`keda.sh`, kind ScaledObject), by name. KEDA
/// makes that HPA and keeps its `minReplicas` at the ScaledObject's `minReplicaCount`: a
/// floor written by anyone else is put back at once, so the HPA form refuses such an HPA.
pub fn scaled_object_of(
    owners: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference],
) -> Option<String> {
    owners
        .iter()
        .find(|o| {
            // KEDA makes itself the HPA's controller; any other owner reference (which anyone
            // who may edit the HPA can add) is no ScaledObject managing it.
            o.controller == Some(true)
                && o.kind == "ScaledObject"
                && o.api_version.split('/').next() == Some("keda.sh")
        })
        .map(|o| o.name.clone())
}

/// Whether `ours` owns `spec.maxReplicas` in `managed` (an HPA's `managedFields`).
pub fn max_managed_by(
    managed: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry],
    ours: &str,
) -> bool {
    managed.iter().any(|m| {
        m.manager.as_deref() == Some(ours)
            && m.fields_v1
                .as_ref()
                .is_some_and(|f| f.0.pointer("/f:spec/f:maxReplicas").is_some())
    })
}

impl HpaView {
    pub fn min(&self) -> i32 {
        self.min_replicas.unwrap_or(1)
    }
}

/// The writes that make an HPA (and, at 0, its target) follow the scheduled count.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FloorPlan {
    /// The floor in force: the scheduled count, clamped to the ceiling; 0 while asleep.
    pub floor: i32,
    /// `spec.minReplicas` to write, when it differs.
    pub min_replicas: Option<i32>,
    /// `spec.maxReplicas` to write, when it differs: the schedule's ceiling (never below the
    /// floor it sets), or the HPA's own given back.
    pub max_replicas: Option<i32>,
    /// Replicas to write to the HPA's target through `/scale` (to 0, or back up from 0).
    pub scale_target: Option<i32>,
    /// Set when the scheduled count was above `maxReplicas`: the count that was asked for.
    pub clamped_from: Option<i32>,
}

/// `ceiling`: the schedule's (`maxReplica`), if any; `own_max`: the HPA's own `maxReplicas`,
/// as recorded when the TDSet first set a ceiling (none recorded: what the HPA has is its own).
/// `target_replicas` is the HPA target's `spec.replicas` from its `/scale` (None when unread).
pub fn plan(
    scheduled: i32,
    ceiling: Option<i32>,
    own_max: Option<i32>,
    hpa: &HpaView,
    target_replicas: Option<i32>,
) -> FloorPlan {
    let max = match ceiling {
        Some(c) => c.max(scheduled).max(1),
        None => own_max.unwrap_or(hpa.max_replicas).max(1),
    };
    let max_replicas = (max != hpa.max_replicas).then_some(max);
    if scheduled <= 0 {
        return FloorPlan {
            floor: 0,
            // The HPA does not act on a target at 0, so its floor is free meanwhile: lowered
            // under a lower ceiling (the API server refuses a floor above the ceiling).
            min_replicas: (max < hpa.min()).then_some(max),
            max_replicas,
            scale_target: target_replicas.filter(|&r| r != 0).map(|_| 0),
            clamped_from: None,
        };
    }
    let floor = scheduled.min(max);
    let min_replicas = (hpa.min_replicas != Some(floor)).then_some(floor);
    FloorPlan {
        floor,
        min_replicas,
        max_replicas,
        scale_target: (target_replicas == Some(0)).then_some(floor),
        clamped_from: (scheduled > floor).then_some(scheduled),
    }
}

/// The ceiling in force: the schedule's now (`now`), or, while a rise is written ahead of its
/// transition (`warmUp`; `ahead` is that transition's ceiling), the higher of the two, so
/// the floor written ahead is not held under tonight's ceiling. An absent ceiling is the
/// HPA's own (`own`); `None`: the HPA's own applies.
pub fn ceiling_in_force(now: Option<i32>, ahead: Option<Option<i32>>, own: i32) -> Option<i32> {
    match ahead {
        Some(next) if now.is_some() || next.is_some() => {
            Some(now.unwrap_or(own).max(next.unwrap_or(own)))
        }
        _ => now,
    }
}

impl FloorPlan {
    /// Whether `maxReplicas` is written before `minReplicas`: the API server refuses a floor
    /// above the ceiling at every step, so a ceiling below the floor in force goes after the
    /// new floor, any other first.
    pub fn max_first(&self, hpa: &HpaView) -> bool {
        self.max_replicas.is_none_or(|max| max >= hpa.min())
    }

    /// The plan with its ceiling held back (another writer keeps setting `maxReplicas`): the
    /// floor stays under the ceiling the HPA has, and is not lowered for one while asleep.
    pub fn without_ceiling(&self, hpa: &HpaView) -> FloorPlan {
        let floor = self.floor.min(hpa.max_replicas.max(1));
        FloorPlan {
            floor,
            min_replicas: (self.floor > 0 && hpa.min_replicas != Some(floor)).then_some(floor),
            max_replicas: None,
            scale_target: self.scale_target.map(|n| if n == 0 { 0 } else { floor }),
            clamped_from: self
                .clamped_from
                .or((self.floor > floor).then_some(self.floor)),
        }
    }
}

/// What letting go of an HPA writes: its own `maxReplicas` (`own_max`, as recorded) given
/// back, never below the floor that stays; with `restore` (`onDelete: Restore`, the recorded
/// own floor) that floor put back, never above the ceiling that stays. `max_first` orders
/// the two writes as for a schedule's change.
pub fn released(hpa: &HpaView, own_max: Option<i32>, restore: Option<i32>) -> FloorPlan {
    let own_max = own_max.unwrap_or(hpa.max_replicas).max(1);
    let floor = restore.map_or(hpa.min(), |own| own.clamp(1, own_max));
    let max = own_max.max(floor);
    FloorPlan {
        floor,
        min_replicas: (floor != hpa.min()).then_some(floor),
        max_replicas: (max != hpa.max_replicas).then_some(max),
        scale_target: None,
        clamped_from: None,
    }
}

/// The merge patch of the HPA's `spec.maxReplicas`, guarded by the uid as `min_replicas_body`
/// is. A patch, not an apply: an apply of this field manager that later left the field out
/// would take it off the HPA (it is required), and `minReplicas`'s apply never names it.
pub fn max_replicas_patch(uid: Option<&str>, max_replicas: i32) -> Value {
    json!({
        "metadata": {"uid": uid},
        "spec": {"maxReplicas": max_replicas},
    })
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
            max_by_operator: false,
            scaled_object: None,
        }
    }

    #[test]
    fn an_hpa_a_keda_scaled_object_owns_is_told_by_its_owner() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
        let owner = |api_version: &str, kind: &str, name: &str| OwnerReference {
            api_version: api_version.into(),
            kind: kind.into(),
            name: name.into(),
            uid: format!("uid-{name}"),
            controller: Some(true),
            block_owner_deletion: Some(true),
        };
        assert_eq!(scaled_object_of(&[]), None);
        assert_eq!(
            scaled_object_of(&[owner("keda.sh/v1alpha1", "ScaledObject", "web")]),
            Some("web".into())
        );
        // Whatever its version, and beside other owners.
        assert_eq!(
            scaled_object_of(&[
                owner("v1", "ConfigMap", "settings"),
                owner("keda.sh/v1", "ScaledObject", "api")
            ]),
            Some("api".into())
        );
        // An owner reference that does not control it (anyone who may edit the HPA could add
        // one) is not it.
        let mut not_controller = owner("keda.sh/v1alpha1", "ScaledObject", "web");
        not_controller.controller = None;
        assert_eq!(scaled_object_of(&[not_controller]), None);
        // Another group's ScaledObject, or another kind of KEDA's, is not it.
        assert_eq!(
            scaled_object_of(&[owner("example.com/v1", "ScaledObject", "web")]),
            None
        );
        assert_eq!(
            scaled_object_of(&[owner("keda.sh/v1alpha1", "ScaledJob", "web")]),
            None
        );
    }

    #[test]
    fn the_floor_follows_the_schedule_and_nothing_is_written_when_it_is_there() {
        assert_eq!(
            plan(4, None, None, &hpa(Some(2), 10), Some(3)),
            FloorPlan {
                floor: 4,
                min_replicas: Some(4),
                max_replicas: None,
                scale_target: None,
                clamped_from: None
            }
        );
        assert_eq!(
            plan(4, None, None, &hpa(Some(4), 10), Some(7)),
            FloorPlan {
                floor: 4,
                ..FloorPlan::default()
            }
        );
        // Unset minReplicas means 1 on the server; writing 1 makes the floor explicitly ours.
        assert_eq!(
            plan(1, None, None, &hpa(None, 10), Some(1)).min_replicas,
            Some(1)
        );
    }

    #[test]
    fn above_max_is_clamped_and_reported() {
        let p = plan(12, None, None, &hpa(Some(2), 8), Some(3));
        assert_eq!(
            p,
            FloorPlan {
                floor: 8,
                min_replicas: Some(8),
                max_replicas: None,
                scale_target: None,
                clamped_from: Some(12)
            }
        );
    }

    #[test]
    fn zero_puts_the_target_to_sleep_and_the_next_window_wakes_it() {
        // 0: the target goes to 0 through /scale; minReplicas stays.
        assert_eq!(
            plan(0, None, None, &hpa(Some(3), 10), Some(3)),
            FloorPlan {
                floor: 0,
                min_replicas: None,
                max_replicas: None,
                scale_target: Some(0),
                clamped_from: None
            }
        );
        // Already asleep: nothing to do.
        assert_eq!(
            plan(0, None, None, &hpa(Some(3), 10), Some(0)),
            FloorPlan::default()
        );
        // Waking: the floor, and the target up to it (the HPA would not act on a target at 0).
        assert_eq!(
            plan(5, None, None, &hpa(Some(3), 10), Some(0)),
            FloorPlan {
                floor: 5,
                min_replicas: Some(5),
                max_replicas: None,
                scale_target: Some(5),
                clamped_from: None
            }
        );
    }

    #[test]
    fn asleep_under_a_ceiling_below_the_floor_left_in_place_the_floor_is_lowered_first() {
        // The day's floor 10 stays on the HPA while its target sleeps; the night's ceiling is
        // 5: the API server refuses maxReplicas 5 over minReplicas 10 (a review found it).
        let h = hpa(Some(10), 20);
        let p = plan(0, Some(5), Some(20), &h, Some(10));
        assert_eq!(
            p,
            FloorPlan {
                floor: 0,
                min_replicas: Some(5),
                max_replicas: Some(5),
                scale_target: Some(0),
                clamped_from: None
            }
        );
        assert!(!p.max_first(&h), "the floor goes down before the ceiling");
        // A ceiling at or above the floor left in place leaves it alone.
        assert_eq!(plan(0, Some(12), Some(20), &h, Some(0)).min_replicas, None);
    }

    #[test]
    fn a_rise_written_ahead_is_held_under_the_higher_of_the_two_ceilings() {
        // Tonight no ceiling (the HPA's own 10), tomorrow 50: the floor 20 written ahead is
        // not clamped to 10.
        assert_eq!(ceiling_in_force(None, Some(Some(50)), 10), Some(50));
        assert_eq!(ceiling_in_force(Some(5), Some(Some(50)), 10), Some(50));
        // Tonight 30, tomorrow none (own 10): 30 holds until the transition.
        assert_eq!(ceiling_in_force(Some(30), Some(None), 10), Some(30));
        assert_eq!(ceiling_in_force(None, Some(None), 10), None);
        // Not ahead of anything: the schedule's now.
        assert_eq!(ceiling_in_force(Some(5), None, 10), Some(5));
        assert_eq!(ceiling_in_force(None, None, 10), None);
        let p = plan(
            20,
            ceiling_in_force(None, Some(Some(50)), 10),
            None,
            &hpa(Some(2), 10),
            Some(2),
        );
        assert_eq!(
            (p.floor, p.max_replicas, p.clamped_from),
            (20, Some(50), None)
        );
    }

    #[test]
    fn a_ceiling_held_back_keeps_the_floor_under_the_ceiling_the_hpa_has() {
        // Another writer keeps maxReplicas at 8; the schedule's is 50 with floor 20.
        let h = hpa(Some(2), 8);
        let p = plan(20, Some(50), None, &h, Some(2)).without_ceiling(&h);
        assert_eq!(
            p,
            FloorPlan {
                floor: 8,
                min_replicas: Some(8),
                max_replicas: None,
                scale_target: None,
                clamped_from: Some(20)
            }
        );
        // Asleep: nothing lowered for a ceiling that is not written.
        let h = hpa(Some(10), 20);
        let p = plan(0, Some(5), None, &h, Some(3)).without_ceiling(&h);
        assert_eq!(
            (p.min_replicas, p.max_replicas, p.scale_target),
            (None, None, Some(0))
        );
    }

    #[test]
    fn letting_go_gives_the_own_ceiling_back_against_the_floor_that_stays() {
        // By day 8 under the schedule's 20; the HPA's own is 2..5.
        let day = hpa(Some(8), 20);
        // Restore: 2..5, the floor down first (5 under 8 would be refused). A review found
        // 2..8 given back when the ceiling went first, clamped to the day's floor.
        let p = released(&day, Some(5), Some(2));
        assert_eq!((p.min_replicas, p.max_replicas), (Some(2), Some(5)));
        assert!(!p.max_first(&day));
        // Keep: the floor 8 stays, so the own ceiling comes back raised to it.
        let p = released(&day, Some(5), None);
        assert_eq!((p.min_replicas, p.max_replicas), (None, Some(8)));
        // By night 2 under 3; the own is 5..10: the ceiling up first, then the floor.
        let night = hpa(Some(2), 3);
        let p = released(&night, Some(10), Some(5));
        assert_eq!((p.min_replicas, p.max_replicas), (Some(5), Some(10)));
        assert!(p.max_first(&night));
        // No ceiling recorded: the floor is restored under the maximum the HPA has.
        let p = released(&hpa(Some(2), 4), None, Some(6));
        assert_eq!((p.min_replicas, p.max_replicas), (Some(4), None));
        // Nothing to do.
        assert_eq!(
            released(&hpa(Some(2), 5), Some(5), Some(2)),
            FloorPlan {
                floor: 2,
                ..FloorPlan::default()
            }
        );
    }

    #[test]
    fn a_ceiling_sets_max_replicas_never_below_the_floor_and_the_own_comes_back_after() {
        // By day: floor 10, ceiling 50 (the HPA's own: 2 / 20).
        let day = plan(10, Some(50), None, &hpa(Some(2), 20), Some(3));
        assert_eq!(
            (day.floor, day.min_replicas, day.max_replicas),
            (10, Some(10), Some(50))
        );
        assert!(
            day.max_first(&hpa(Some(2), 20)),
            "the ceiling rises before the floor"
        );
        // At night: floor 2, ceiling 5, from 10 / 50: the floor goes down first.
        let night = plan(2, Some(5), Some(20), &hpa(Some(10), 50), Some(10));
        assert_eq!(
            (night.floor, night.min_replicas, night.max_replicas),
            (2, Some(2), Some(5))
        );
        assert!(
            !night.max_first(&hpa(Some(10), 50)),
            "the floor falls before the ceiling"
        );
        // A ceiling below the floor cannot be (admission refuses it; a lead may ask for it):
        // the ceiling is raised to the floor.
        assert_eq!(
            plan(8, Some(5), None, &hpa(Some(2), 20), Some(3)).max_replicas,
            Some(8)
        );
        // No ceiling any more: the HPA's own maxReplicas, as recorded, comes back.
        let after = plan(2, None, Some(20), &hpa(Some(2), 5), Some(2));
        assert_eq!((after.min_replicas, after.max_replicas), (None, Some(20)));
        // Nothing recorded, no ceiling: maxReplicas is left alone.
        assert_eq!(
            plan(2, None, None, &hpa(Some(2), 5), Some(2)).max_replicas,
            None
        );
        // There already: nothing to write.
        assert_eq!(
            plan(10, Some(50), Some(20), &hpa(Some(10), 50), Some(10)),
            FloorPlan {
                floor: 10,
                ..FloorPlan::default()
            }
        );
    }
}

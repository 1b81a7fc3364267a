//! What a TDSet drives, and what to write to it, as pure functions of the spec, what was
//! observed and the scheduled count. One module per mode; none of them touches the client.
//!
//! - [`owned`]: a Deployment (and Service) the TDSet owns, from `container` or `template`;
//! - [`target`]: an existing object's replica count, set through its `/scale` subresource;
//! - [`hpa`]: an existing HorizontalPodAutoscaler's `minReplicas`, the scheduled floor;
//! - [`group`]: many workloads selected by labels, each with its own count recorded on it;
//! - [`savings`]: what a schedule removes now, in replicas and their pods' requests;
//! - [`contest`]: when another writer keeps resetting the count, how often to put it back;
//! - [`gitops`]: which GitOps tool that writer is, and the rule that makes it stop;
//! - [`intercept`]: wake on request's data plane: the ports intercepted, the operator's slices.

pub mod contest;
pub mod gitops;
pub mod group;
pub mod hpa;
pub mod intercept;
pub mod keda;
pub mod owned;
mod quantity;
pub mod savings;
pub mod target;
pub mod traffic;

pub use crate::api::Source;

/// The namespaces where a form a platform team may limit is allowed:
///
/// - the forms that run pods (`container`, `template`, `--pod-forms-in`) run any pod spec (any
///   ServiceAccount of the namespace) under the operator's identity, which admission policies
///   keyed on the requesting user do not see;
/// - the group form (`scaleTargetSelector`, `--group-form-in`) writes, under the operator's
///   identity, every Deployment, StatefulSet and CronJob of the namespace a selector picks
///   (their count, and its record on them), which needs `patch` on those kinds themselves.
///
/// The other forms only scale one named object through `/scale`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum AllowedIn {
    /// Everywhere (the default).
    #[default]
    Anywhere,
    /// Only in these namespaces (none: nowhere).
    In(std::collections::BTreeSet<String>),
}

impl std::str::FromStr for AllowedIn {
    type Err = String;

    /// `*` (anywhere), `none` (nowhere) or a comma-separated list of namespaces.
    fn from_str(s: &str) -> Result<AllowedIn, String> {
        match s.trim() {
            "*" => Ok(AllowedIn::Anywhere),
            "" | "none" => Ok(AllowedIn::In(Default::default())),
            // As the chart reads a list: `*` anywhere in it allows every namespace.
            list if list.split(',').any(|n| n.trim() == "*") => Ok(AllowedIn::Anywhere),
            list => Ok(AllowedIn::In(
                list.split(',')
                    .map(str::trim)
                    .filter(|n| !n.is_empty())
                    .map(String::from)
                    .collect(),
            )),
        }
    }
}

impl AllowedIn {
    /// Why a group may not run in `ns`, if it may not.
    pub fn refuse_group(&self, ns: &str) -> Option<String> {
        let where_ = self.where_(ns)?;
        Some(format!(
            "this operator runs TDSets with spec.scaleTargetSelector (which write every workload \
             a selector picks) {where_} (--group-form-in); nothing is written. Use \
             spec.scaleTargetRef to schedule one workload"
        ))
    }

    /// Where it is allowed, in words, if not in `ns`.
    fn where_(&self, ns: &str) -> Option<String> {
        let AllowedIn::In(allowed) = self else {
            return None;
        };
        if allowed.contains(ns) {
            return None;
        }
        Some(if allowed.is_empty() {
            "in no namespace".to_string()
        } else {
            format!(
                "only in namespaces {}",
                allowed.iter().cloned().collect::<Vec<_>>().join(", ")
            )
        })
    }

    /// Why `source` may not run in `ns`, if it may not.
    pub fn refuse(&self, source: Source<'_>, ns: &str) -> Option<String> {
        if !source.is_owned() {
            return None;
        }
        let where_ = self.where_(ns)?;
        let form = match source {
            Source::Template(_) => "spec.template",
            _ => "spec.container",
        };
        Some(format!(
            "this operator runs TDSets with {form} (which run pods under its identity) {where_} \
             (--pod-forms-in); nothing is created or changed. Use spec.scaleTargetRef to schedule \
             a workload deployed by other means"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ScaleTargetRef;
    use crate::workload::owned::tests::tdset;

    #[test]
    fn a_star_anywhere_in_the_list_allows_every_namespace_as_the_chart_reads_it() {
        assert_eq!("a, *".parse::<AllowedIn>().unwrap(), AllowedIn::Anywhere);
        let none: AllowedIn = "none".parse().unwrap();
        assert!(none.refuse_group("a").is_some());
        assert_eq!("*".parse::<AllowedIn>().unwrap().refuse_group("a"), None);
    }

    #[test]
    fn pod_forms_are_refused_outside_the_listed_namespaces() {
        let mut t = tdset("web");
        let container = Source::of(&t.spec).unwrap();
        assert_eq!(
            "*".parse::<AllowedIn>().unwrap().refuse(container, "a"),
            None
        );
        let some: AllowedIn = "team-a, team-b".parse().unwrap();
        assert_eq!(some.refuse(container, "team-b"), None);
        let refused = some.refuse(container, "team-c").unwrap();
        assert!(
            refused.contains("spec.container") && refused.contains("team-a, team-b"),
            "{refused}"
        );
        let none: AllowedIn = "none".parse().unwrap();
        assert!(
            none.refuse(container, "team-a")
                .unwrap()
                .contains("in no namespace")
        );
        t.spec.container = None;
        t.spec.scale_target_ref = Some(ScaleTargetRef {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            name: "web".into(),
        });
        assert_eq!(none.refuse(Source::of(&t.spec).unwrap(), "team-a"), None);
    }

    #[test]
    fn exactly_one_source() {
        let mut t = tdset("web");
        assert!(matches!(Source::of(&t.spec), Ok(Source::Container(_))));
        t.spec.scale_target_ref = Some(ScaleTargetRef {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            name: "web".into(),
        });
        let err = Source::of(&t.spec).unwrap_err();
        assert!(err.message.contains("spec.scaleTargetRef"), "{err}");
        t.spec.container = None;
        assert!(matches!(Source::of(&t.spec), Ok(Source::Scale(_))));
        t.spec.scale_target_ref = Some(ScaleTargetRef {
            api_version: "autoscaling/v2".into(),
            kind: "HorizontalPodAutoscaler".into(),
            name: "web".into(),
        });
        assert!(matches!(Source::of(&t.spec), Ok(Source::HpaFloor(_))));
        t.spec.scale_target_ref = None;
        assert!(Source::of(&t.spec).is_err(), "none set");
    }
}

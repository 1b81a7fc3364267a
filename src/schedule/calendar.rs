//! The days that are not like the others: holidays (dates in the TDSet's zone) and
//! overrides (absolute instants), compiled from the spec.

use chrono::{DateTime, NaiveDate, Utc};

use super::SpecError;
use crate::api::{Holiday, TDSetSpec};

/// The holidays of a `TDCalendar` a TDSet names.
#[derive(Clone, Copy, Debug)]
pub struct SharedHolidays<'a> {
    pub calendar: &'a str,
    pub holidays: &'a [Holiday],
}

/// Holidays as sorted, inclusive date ranges.
#[derive(Clone, Debug, Default)]
pub(super) struct Holidays(Vec<(NaiveDate, NaiveDate)>);

/// How many days a list of holidays covers (overlaps counted once).
pub fn holiday_days(holidays: &[Holiday]) -> i64 {
    let shared = [SharedHolidays {
        calendar: "",
        holidays,
    }];
    let compiled = Holidays::compile(&TDSetSpec::default(), &shared, &mut vec![]);
    compiled
        .0
        .iter()
        .map(|(from, to)| (*to - *from).num_days() + 1)
        .sum()
}

/// What the operator cannot read in a calendar's dates ("spec.holidays[3]: \"2027-02-29\"
/// is not a date ..."), each entry; empty when it reads them all.
pub fn unreadable(holidays: &[Holiday]) -> Vec<String> {
    let shared = [SharedHolidays {
        calendar: "",
        holidays,
    }];
    let mut errors = vec![];
    Holidays::compile(&TDSetSpec::default(), &shared, &mut errors);
    errors
        .into_iter()
        .map(|e| {
            let field = e.field.trim_start_matches("TDCalendar : ");
            format!("{field}: {}", e.message)
        })
        .collect()
}

impl Holidays {
    pub(super) fn compile(
        spec: &TDSetSpec,
        shared: &[SharedHolidays<'_>],
        errors: &mut Vec<SpecError>,
    ) -> Holidays {
        let mut ranges = Vec::new();
        let own = spec
            .holidays
            .iter()
            .enumerate()
            .map(|(i, h)| (format!("spec.holidays[{i}]"), h));
        // A calendar's dates passed the same schema; a bad one is still named, not skipped.
        let theirs = shared.iter().flat_map(|c| {
            c.holidays
                .iter()
                .enumerate()
                .map(move |(i, h)| (format!("TDCalendar {}: spec.holidays[{i}]", c.calendar), h))
        });
        for (field, h) in own.chain(theirs) {
            let date = |s: &str| NaiveDate::parse_from_str(s, "%Y-%m-%d").ok();
            let (from, to) = match h.0.split_once('/') {
                Some((a, b)) => (date(a), date(b)),
                None => (date(&h.0), date(&h.0)),
            };
            match (from, to) {
                (Some(a), Some(b)) if a <= b => ranges.push((a, b)),
                (Some(_), Some(_)) => errors.push(SpecError {
                    field,
                    message: format!("{:?}: a date range must not end before it starts", h.0),
                }),
                _ => errors.push(SpecError {
                    field,
                    message: format!(
                        "{:?} is not a date YYYY-MM-DD or a range YYYY-MM-DD/YYYY-MM-DD of real dates",
                        h.0
                    ),
                }),
            }
        }
        if spec.holidays.len() > MAX_HOLIDAYS {
            errors.push(SpecError {
                field: "spec.holidays".into(),
                message: format!(
                    "{} entries; at most {MAX_HOLIDAYS} are allowed",
                    spec.holidays.len()
                ),
            });
        }
        ranges.sort_unstable();
        // Merged into disjoint ranges, so a lookup is one binary search.
        let mut merged: Vec<(NaiveDate, NaiveDate)> = Vec::with_capacity(ranges.len());
        for (from, to) in ranges {
            match merged.last_mut() {
                Some(last) if from <= last.1 => last.1 = last.1.max(to),
                _ => merged.push((from, to)),
            }
        }
        Holidays(merged)
    }

    pub(super) fn contains(&self, date: NaiveDate) -> bool {
        // The ranges are disjoint: only the last one starting on or before `date` can hold it.
        let i = self.0.partition_point(|(from, _)| *from <= date);
        i > 0 && self.0[i - 1].1 >= date
    }

    /// The last holiday date, if any.
    pub(super) fn last(&self) -> Option<NaiveDate> {
        self.0.last().map(|(_, to)| *to)
    }
}

pub const MAX_HOLIDAYS: usize = 366;
pub const MAX_OVERRIDES: usize = 32;

#[derive(Clone, Debug)]
pub(super) struct CompiledOverride {
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
    pub replicas: i32,
    /// `maxReplica`: an HPA's ceiling while it is active.
    pub ceiling: Option<i32>,
    pub label: String,
}

pub(super) fn compile_overrides(
    spec: &TDSetSpec,
    errors: &mut Vec<SpecError>,
) -> Vec<CompiledOverride> {
    let mut out = Vec::new();
    if spec.overrides.len() > MAX_OVERRIDES {
        errors.push(SpecError {
            field: "spec.overrides".into(),
            message: format!(
                "{} entries; at most {MAX_OVERRIDES} are allowed",
                spec.overrides.len()
            ),
        });
    }
    for (i, o) in spec.overrides.iter().enumerate() {
        let instant = |s: &str, which: &str| {
            DateTime::parse_from_rfc3339(s)
                .map(|t| t.with_timezone(&Utc))
                .map_err(|_| SpecError {
                    field: format!("spec.overrides[{i}].{which}"),
                    message: format!(
                        "{s:?} is not an RFC 3339 instant such as 2026-11-27T08:00:00+01:00"
                    ),
                })
        };
        match (instant(&o.start, "start"), instant(&o.end, "end")) {
            (Ok(start), Ok(end)) if end > start => out.push(CompiledOverride {
                start,
                end,
                replicas: o.replica.unwrap_or(super::OWN),
                ceiling: o.max_replica,
                label: o.label(),
            }),
            (Ok(_), Ok(_)) => errors.push(SpecError {
                field: format!("spec.overrides[{i}].end"),
                message: "end must be after start".into(),
            }),
            (a, b) => errors.extend(a.err().into_iter().chain(b.err())),
        }
        if let Some(replica) = o.replica
            && !(0..=crate::api::MAX_REPLICAS).contains(&replica)
        {
            errors.push(SpecError {
                field: format!("spec.overrides[{i}].replica"),
                message: format!("{replica} is out of range 0..{}", crate::api::MAX_REPLICAS),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holidays(list: &[&str]) -> (Holidays, Vec<SpecError>) {
        let spec = TDSetSpec {
            holidays: list.iter().map(|h| Holiday(h.to_string())).collect(),
            ..TDSetSpec::default()
        };
        let mut errors = vec![];
        (Holidays::compile(&spec, &[], &mut errors), errors)
    }

    #[test]
    fn a_calendar_s_unreadable_dates_are_named_by_their_place_in_it() {
        let list = |l: &[&str]| l.iter().map(|h| Holiday(h.to_string())).collect::<Vec<_>>();
        assert!(unreadable(&list(&["2028-02-29", "2026-12-24/2026-12-26"])).is_empty());
        let bad = unreadable(&list(&[
            "2026-12-24",
            "2027-02-29",
            "2026-12-30/2026-04-31",
        ]));
        assert_eq!(bad.len(), 2, "{bad:?}");
        assert!(
            bad[0].starts_with("spec.holidays[1]: \"2027-02-29\""),
            "{bad:?}"
        );
        assert!(bad[1].starts_with("spec.holidays[2]: "), "{bad:?}");
    }

    fn d(s: &str) -> NaiveDate {
        NaiveDate::parse_from_str(s, "%Y-%m-%d").unwrap()
    }

    #[test]
    fn dates_and_inclusive_ranges() {
        let (h, errors) = holidays(&[
            "2026-12-24/2026-12-26",
            "2026-01-01",
            "2026-12-20/2026-12-31",
        ]);
        assert!(errors.is_empty());
        for day in [
            "2026-12-24",
            "2026-12-26",
            "2026-12-31",
            "2026-01-01",
            "2026-12-22",
        ] {
            assert!(h.contains(d(day)), "{day}");
        }
        for day in ["2026-12-19", "2027-01-01", "2026-01-02"] {
            assert!(!h.contains(d(day)), "{day}");
        }
    }

    #[test]
    fn a_calendars_dates_join_the_specs_and_a_bad_one_names_the_calendar() {
        let spec = TDSetSpec {
            holidays: vec![Holiday("2026-12-24".into())],
            ..TDSetSpec::default()
        };
        let company = [
            Holiday("2026-12-25/2026-12-26".into()),
            Holiday("2026-13-01".into()),
        ];
        let shared = [SharedHolidays {
            calendar: "company",
            holidays: &company,
        }];
        let mut errors = vec![];
        let h = Holidays::compile(&spec, &shared, &mut errors);
        for day in ["2026-12-24", "2026-12-25", "2026-12-26"] {
            assert!(h.contains(d(day)), "{day}");
        }
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].field, "TDCalendar company: spec.holidays[1]");
        assert_eq!(holiday_days(&company), 2, "the bad entry counts no day");
        let overlapping = [
            Holiday("2026-12-24/2026-12-26".into()),
            Holiday("2026-12-26/2026-12-31".into()),
            Holiday("2027-01-01".into()),
        ];
        assert_eq!(holiday_days(&overlapping), 9);
    }

    #[test]
    fn bad_dates_name_the_entry() {
        let (_, errors) = holidays(&["2026-02-30", "2026-12-26/2026-12-24"]);
        assert_eq!(errors.len(), 2);
        assert_eq!(errors[0].field, "spec.holidays[0]");
        assert!(errors[1].message.contains("end before it starts"));
    }
}

//! Holidays read from an iCalendar document (RFC 5545), as teams keep them (a country's
//! published `.ics`, a Google or Outlook export): all-day events, date ranges, and yearly
//! rules. Pure: a document and the years wanted in; date ranges, or every reason the document
//! cannot be used, out.
//!
//! The content lines are read here, in one pass over the text without recursion (unfolding,
//! parameters with quoted values, BEGIN/END kept on a bounded stack): the `icalendar` crate's
//! parser was tried first, and a review found it recursing once per nesting level (a stack
//! overflow, an abort no handler catches) and quadratic on LF line ends (the ends a ConfigMap
//! written from YAML has). What is refused, each with a
//! message naming the event: an event with a time of day (a holiday is a whole day in the
//! TDSet's own zone), a rule other than `FREQ=YEARLY` or with parts a holiday list has no use
//! for, and anything past the bounds below. A document with any such event gives no dates at
//! all: half a holiday list is worse than none, and the calendar says why.

use std::collections::{HashMap, HashSet};
use std::ops::RangeInclusive;

use chrono::{Datelike, Duration, NaiveDate, Weekday};

/// The largest document read (a ConfigMap holds at most 1 MiB).
pub const MAX_ICS_BYTES: usize = 1024 * 1024;
/// The most events a document may hold.
pub const MAX_ICS_EVENTS: usize = 5000;
/// The most date ranges the years wanted may hold (a country has a few dozen a year).
pub const MAX_ICS_RANGES: usize = 2000;
/// The longest event, in days.
pub const MAX_EVENT_DAYS: i64 = 366;
/// How deep components may nest (VCALENDAR > VEVENT > VALARM, with room to spare).
const MAX_DEPTH: usize = 8;
/// How many years before the years wanted a rule's count is followed from its start.
const MAX_RULE_YEARS: i32 = 1000;
/// The most problems reported (the first ones are enough to fix the document).
const MAX_PROBLEMS: usize = 5;
/// The most days the rules may look at, over the whole document: what bounds the work of a
/// hostile one (5000 rules of every day of the month, counted from 1000 years back).
const MAX_RULE_WORK: usize = 5_000_000;

/// The years a document's dates are read for, around `year` (now's): last year's, for a range
/// that reaches into this one, and two ahead, for the schedule's look ahead.
pub fn years_around(year: i32) -> RangeInclusive<i32> {
    (year - 1)..=(year + 2)
}

/// `holiday_ranges` for the years around `year`, as holidays (`YYYY-MM-DD`, or an inclusive
/// range `YYYY-MM-DD/YYYY-MM-DD`).
pub fn holidays_around(text: &str, year: i32) -> Result<Vec<crate::api::Holiday>, Vec<String>> {
    Ok(holiday_ranges(text, years_around(year))?
        .into_iter()
        .map(|(a, b)| match a == b {
            true => crate::api::Holiday(a.to_string()),
            false => crate::api::Holiday(format!("{a}/{b}")),
        })
        .collect())
}

/// The holidays of the document a calendar names (`r`), from its ConfigMap's `data`, for the
/// years around `year`; or why there are none, naming the ConfigMap and the key. What the
/// operator and `kubectl tdset preview NAME` both read.
pub fn document_holidays(
    data: &std::collections::BTreeMap<String, String>,
    r: &crate::api::IcsSource,
    year: i32,
) -> Result<Vec<crate::api::Holiday>, String> {
    let c = &r.config_map_ref;
    let Some(text) = data.get(&c.key) else {
        return Err(format!(
            "ConfigMap {}/{} has no key {:?} (a document that is not UTF-8 lands in binaryData, \
             which is not read)",
            c.namespace, c.name, c.key
        ));
    };
    holidays_around(text, year).map_err(|why| {
        format!(
            "the iCalendar document in ConfigMap {}/{}, key {:?}: {}",
            c.namespace,
            c.name,
            c.key,
            why.join("; ")
        )
    })
}

/// The all-day dates an iCalendar document gives in `years`, as sorted inclusive ranges; or
/// what makes it unusable (at most `MAX_PROBLEMS` reasons, each naming its event).
pub fn holiday_ranges(
    text: &str,
    years: RangeInclusive<i32>,
) -> Result<Vec<(NaiveDate, NaiveDate)>, Vec<String>> {
    if text.len() > MAX_ICS_BYTES {
        return Err(vec![format!(
            "the document is {} bytes; at most {MAX_ICS_BYTES} are read",
            text.len()
        )]);
    }
    let events = read_events(text).map_err(|why| vec![why])?;
    if events.len() > MAX_ICS_EVENTS {
        return Err(vec![format!(
            "{} events; at most {MAX_ICS_EVENTS} are read",
            events.len()
        )]);
    }
    let (first, last) = (*years.start(), *years.end());
    let (Some(from), Some(to)) = (
        NaiveDate::from_ymd_opt(first, 1, 1),
        NaiveDate::from_ymd_opt(last, 12, 31),
    ) else {
        return Ok(vec![]);
    };
    let mut problems = Vec::new();
    let mut read = Vec::new();
    // Occurrences moved or cancelled by a RECURRENCE-ID event leave their rule.
    let mut moved: HashMap<String, HashSet<NaiveDate>> = HashMap::new();
    for (i, e) in events.iter().enumerate() {
        let uid = e.value("UID").map(str::trim);
        if let (Some(uid), Some(Ok(at))) = (uid, e.prop("RECURRENCE-ID").map(date)) {
            moved.entry(uid.to_string()).or_default().insert(at);
        }
        match Event::read(e) {
            Ok(Some(event)) => read.push(event),
            Ok(None) => {}
            Err(why) => problems.push(clip(&format!("event {} ({}): {why}", i + 1, summary(e)))),
        }
    }
    let mut ranges = Vec::new();
    let mut work = 0usize;
    for event in &read {
        let skip = match (event.recurrence_id, event.uid.as_deref()) {
            (None, Some(uid)) => moved.get(uid),
            _ => None,
        };
        match event.starts(from, to, &mut work) {
            Ok(starts) => {
                for start in starts {
                    if skip.is_some_and(|s| s.contains(&start)) || event.exdates.contains(&start) {
                        continue;
                    }
                    let end = start + Duration::days(event.days - 1);
                    if end >= from && start <= to {
                        ranges.push((start, end));
                    }
                }
            }
            Err(why) => problems.push(clip(&format!("event {}: {why}", event.summary))),
        }
        if work > MAX_RULE_WORK {
            return Err(vec![format!(
                "the rules take too long to expand (more than {MAX_RULE_WORK} days looked at); \
                 list fewer, or start their counts later"
            )]);
        }
        if ranges.len() > MAX_ICS_RANGES {
            return Err(vec![format!(
                "more than {MAX_ICS_RANGES} holidays in {first}..{last}; at most {MAX_ICS_RANGES} are read"
            )]);
        }
    }
    if !problems.is_empty() {
        problems.truncate(MAX_PROBLEMS);
        return Err(problems);
    }
    ranges.sort_unstable();
    ranges.dedup();
    Ok(ranges)
}

/// The properties of an event that are read.
const READ: [&str; 10] = [
    "DTSTART",
    "DTEND",
    "DURATION",
    "RRULE",
    "RDATE",
    "EXDATE",
    "UID",
    "RECURRENCE-ID",
    "STATUS",
    "SUMMARY",
];

/// One component's content lines: `NAME;PARAM=V;...:VALUE`, the name upper-cased.
#[derive(Debug, Default)]
struct Comp {
    props: Vec<Prop>,
}

#[derive(Debug)]
struct Prop {
    name: String,
    value: String,
}

impl Comp {
    fn prop(&self, name: &str) -> Option<&Prop> {
        self.props.iter().find(|p| p.name == name)
    }

    fn props<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Prop> {
        self.props.iter().filter(move |p| p.name == name)
    }

    fn value(&self, name: &str) -> Option<&str> {
        self.prop(name).map(|p| p.value.as_str())
    }
}

/// The `VEVENT`s of the document's `VCALENDAR`, their own properties (not their alarms'), in
/// one pass: lines unfolded (CRLF or LF, a space or tab continues a line), a byte-order mark
/// skipped, blank lines passed over, BEGIN/END checked against each other on a stack at most
/// `MAX_DEPTH` deep. Parameters are not kept: none changes what a date means here (`VALUE=DATE`
/// is read off the value's form, and `TZID` does not apply to a date).
fn read_events(text: &str) -> Result<Vec<Comp>, String> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut stack: Vec<String> = Vec::new();
    let mut events = Vec::new();
    let mut event: Option<Comp> = None;
    let mut calendars = 0;
    for (line_no, line) in unfolded(text) {
        if line.trim().is_empty() {
            continue;
        }
        let (name, value) = content_line(&line)
            .ok_or_else(|| format!("line {line_no} cannot be read as an iCalendar content line"))?;
        match name.as_str() {
            "BEGIN" => {
                let component = value.trim().to_ascii_uppercase();
                if stack.len() >= MAX_DEPTH {
                    return Err(format!(
                        "line {line_no}: components nest more than {MAX_DEPTH} deep"
                    ));
                }
                match (stack.len(), component.as_str()) {
                    (0, "VCALENDAR") => calendars += 1,
                    (0, _) => {
                        return Err(format!(
                            "line {line_no}: BEGIN:{} outside BEGIN:VCALENDAR",
                            clip_value(&component)
                        ));
                    }
                    (1, "VEVENT") => {
                        if events.len() >= MAX_ICS_EVENTS {
                            return Err(format!(
                                "more than {MAX_ICS_EVENTS} events; at most {MAX_ICS_EVENTS} are read"
                            ));
                        }
                        event = Some(Comp::default());
                    }
                    _ => {}
                }
                stack.push(component);
            }
            "END" => {
                let component = value.trim().to_ascii_uppercase();
                match stack.pop() {
                    Some(open) if open == component => {}
                    Some(open) => {
                        return Err(format!(
                            "line {line_no}: END:{} does not close BEGIN:{}",
                            clip_value(&component),
                            clip_value(&open)
                        ));
                    }
                    None => return Err(format!("line {line_no}: END without BEGIN")),
                }
                if stack.len() == 1
                    && component == "VEVENT"
                    && let Some(e) = event.take()
                {
                    events.push(e);
                }
            }
            _ if stack.len() == 2 => {
                if let Some(e) = event.as_mut() {
                    // Only what `Event::read` looks at: a megabyte of other lines costs nothing.
                    if READ.contains(&name.as_str()) {
                        e.props.push(Prop { name, value });
                    }
                }
            }
            _ if stack.is_empty() => {
                return Err(format!(
                    "line {line_no}: a property outside BEGIN:VCALENDAR"
                ));
            }
            _ => {}
        }
    }
    if let Some(open) = stack.last() {
        return Err(format!("BEGIN:{} is not closed", clip_value(open)));
    }
    if calendars == 0 {
        return Err("no BEGIN:VCALENDAR ... END:VCALENDAR".into());
    }
    Ok(events)
}

/// The logical lines of `text` (continuations joined), each with the number of its first line.
fn unfolded(text: &str) -> impl Iterator<Item = (usize, String)> + '_ {
    let mut lines = text.split('\n').enumerate().peekable();
    std::iter::from_fn(move || {
        let (i, first) = lines.next()?;
        let mut line = first.strip_suffix('\r').unwrap_or(first).to_string();
        while let Some((_, next)) = lines.peek() {
            let Some(rest) = next.strip_prefix([' ', '\t']) else {
                break;
            };
            line.push_str(rest.strip_suffix('\r').unwrap_or(rest));
            lines.next();
        }
        Some((i + 1, line))
    })
}

/// `NAME[;PARAM=VALUE...]:VALUE` into the upper-cased name and the value; a colon inside a
/// quoted parameter value does not end the parameters.
fn content_line(line: &str) -> Option<(String, String)> {
    let name_end = line.find([';', ':'])?;
    let name = &line[..name_end];
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
        return None;
    }
    let mut quoted = false;
    let mut value_at = None;
    for (i, c) in line[name_end..].char_indices() {
        match c {
            '"' => quoted = !quoted,
            ':' if !quoted => {
                value_at = Some(name_end + i + 1);
                break;
            }
            _ => {}
        }
    }
    Some((name.to_ascii_uppercase(), line[value_at?..].to_string()))
}

/// A value as it may appear in a message: short, and only printable ASCII.
fn clip_value(v: &str) -> String {
    let shown: String = v
        .chars()
        .take(40)
        .map(|c| {
            if c.is_ascii_graphic() || c == ' ' {
                c
            } else {
                '?'
            }
        })
        .collect();
    match v.chars().count() > 40 {
        true => format!("{shown}..."),
        false => shown,
    }
}

/// A problem as it is reported: at most 300 characters (a calendar's status and every TDSet
/// naming it carry it).
fn clip(problem: &str) -> String {
    match problem.chars().count() > 300 {
        true => format!("{}...", problem.chars().take(300).collect::<String>()),
        false => problem.to_string(),
    }
}

fn summary(c: &Comp) -> String {
    c.value("SUMMARY").map_or_else(
        || "no SUMMARY".to_string(),
        |v| {
            format!(
                "{:?}",
                clip_value(&v.replace("\\,", ",").replace("\\;", ";"))
            )
        },
    )
}

/// One all-day event, read.
#[derive(Debug)]
struct Event {
    summary: String,
    uid: Option<String>,
    /// `RECURRENCE-ID`: the occurrence of the event `uid` this one replaces.
    recurrence_id: Option<NaiveDate>,
    start: NaiveDate,
    /// How many days it covers (`DTEND` is exclusive).
    days: i64,
    rule: Option<Yearly>,
    rdates: Vec<NaiveDate>,
    exdates: HashSet<NaiveDate>,
}

impl Event {
    /// The event, `None` when it is cancelled, or why it cannot be a holiday.
    fn read(c: &Comp) -> Result<Option<Event>, String> {
        if c.value("STATUS")
            .is_some_and(|s| s.trim().eq_ignore_ascii_case("CANCELLED"))
        {
            return Ok(None);
        }
        let start = match c.prop("DTSTART") {
            Some(p) => date(p)?,
            None => return Err("no DTSTART".into()),
        };
        let days = match (c.prop("DTEND"), c.prop("DURATION")) {
            (Some(p), _) => {
                let end = date(p)?;
                // Some generators write a one-day event with DTEND on its own day.
                if end == start {
                    1
                } else if end < start {
                    return Err(format!(
                        "DTEND {end} is before DTSTART {start} (DTEND is the day after the last)"
                    ));
                } else {
                    (end - start).num_days()
                }
            }
            (None, Some(p)) => days_of(p.value.as_str())?,
            (None, None) => 1,
        };
        if days > MAX_EVENT_DAYS {
            return Err(format!(
                "{days} days long; at most {MAX_EVENT_DAYS} are read"
            ));
        }
        let mut rdates = Vec::new();
        for p in c.props("RDATE") {
            rdates.extend(dates(p)?);
        }
        let mut exdates = HashSet::new();
        for p in c.props("EXDATE") {
            exdates.extend(dates(p)?);
        }
        let rule = match c.prop("RRULE") {
            Some(p) => Some(Yearly::parse(p.value.as_str(), start)?),
            None => None,
        };
        Ok(Some(Event {
            summary: summary(c),
            uid: c.value("UID").map(|u| u.trim().to_string()),
            recurrence_id: c.prop("RECURRENCE-ID").map(date).transpose()?,
            start,
            days,
            rule,
            rdates,
            exdates,
        }))
    }

    /// The days its occurrences start on, from those that can reach `[from, to]`.
    fn starts(
        &self,
        from: NaiveDate,
        to: NaiveDate,
        work: &mut usize,
    ) -> Result<Vec<NaiveDate>, String> {
        let reach = from - Duration::days(self.days - 1);
        let mut out: Vec<NaiveDate> = match &self.rule {
            None => vec![self.start],
            Some(rule) => rule.starts(self.start, reach, to, work)?,
        };
        out.extend(self.rdates.iter().copied());
        out.retain(|d| *d >= reach && *d <= to);
        Ok(out)
    }
}

/// A date value: `VALUE=DATE` (`YYYYMMDD`), whatever `TZID` says (an all-day event is that
/// day wherever it is read). A date with a time of day is refused.
fn date(p: &Prop) -> Result<NaiveDate, String> {
    let v = p.value.trim();
    let name = &p.name;
    if v.contains('T') {
        return Err(format!(
            "{name} {} has a time of day; only all-day events ({name};VALUE=DATE:YYYYMMDD) \
             are holidays",
            clip_value(v)
        ));
    }
    NaiveDate::parse_from_str(v, "%Y%m%d")
        .map_err(|_| format!("{name} {:?} is not a date YYYYMMDD", clip_value(v)))
}

/// The dates of an `RDATE`/`EXDATE` (a comma-separated list).
fn dates(p: &Prop) -> Result<Vec<NaiveDate>, String> {
    let name = &p.name;
    p.value
        .split(',')
        .map(|v| {
            let v = v.trim();
            if v.contains('T') {
                return Err(format!(
                    "{name} {} has a time of day; only dates ({name};VALUE=DATE:YYYYMMDD) are read",
                    clip_value(v)
                ));
            }
            NaiveDate::parse_from_str(v, "%Y%m%d")
                .map_err(|_| format!("{name} {:?} is not a date YYYYMMDD", clip_value(v)))
        })
        .collect()
}

/// A `DURATION` in whole days (`P1D`, `P2W`); a time part is refused.
fn days_of(v: &str) -> Result<i64, String> {
    let bad = || {
        format!(
            "DURATION {:?} is not a whole number of days (P1D, P2W)",
            clip_value(v)
        )
    };
    let body = v.trim().strip_prefix('P').ok_or_else(bad)?;
    let at = body.len().checked_sub(1).ok_or_else(bad)?;
    let (n, unit) = (
        body.get(..at).ok_or_else(bad)?,
        body.get(at..).ok_or_else(bad)?,
    );
    let n: i64 = n.parse().map_err(|_| bad())?;
    let days = match unit {
        "D" => n,
        "W" => n.saturating_mul(7),
        _ => return Err(bad()),
    };
    (1..=MAX_EVENT_DAYS)
        .contains(&days)
        .then_some(days)
        .ok_or_else(bad)
}

/// `RRULE:FREQ=YEARLY`, with the parts a holiday list uses.
#[derive(Debug)]
struct Yearly {
    interval: i32,
    count: Option<u32>,
    until: Option<NaiveDate>,
    months: Vec<u32>,
    month_days: Vec<i32>,
    /// (ordinal, weekday): ordinal 0 is every such weekday of the period.
    days: Vec<(i32, Weekday)>,
}

impl Yearly {
    fn parse(rule: &str, start: NaiveDate) -> Result<Yearly, String> {
        let mut y = Yearly {
            interval: 1,
            count: None,
            until: None,
            months: vec![],
            month_days: vec![],
            days: vec![],
        };
        let mut freq = None;
        for part in rule.split(';').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| format!("RRULE part {:?} is not KEY=VALUE", clip_value(part)))?;
            let (k, v) = (k.trim(), v.trim());
            let bad = || format!("RRULE {}={} cannot be read", clip_value(k), clip_value(v));
            match k.to_ascii_uppercase().as_str() {
                "FREQ" => freq = Some(v.to_ascii_uppercase()),
                "INTERVAL" => y.interval = v.parse().ok().filter(|n| *n >= 1).ok_or_else(bad)?,
                "COUNT" => y.count = Some(v.parse().ok().filter(|n| *n >= 1).ok_or_else(bad)?),
                "UNTIL" => y.until = Some(until(v).ok_or_else(bad)?),
                "BYMONTH" => y.months = list(v, |m: u32| (1..=12).contains(&m)).ok_or_else(bad)?,
                "BYMONTHDAY" => {
                    y.month_days =
                        list(v, |d: i32| d != 0 && (-31..=31).contains(&d)).ok_or_else(bad)?
                }
                "BYDAY" => {
                    y.days = v
                        .split(',')
                        .map(weekday_rule)
                        .collect::<Option<_>>()
                        .ok_or_else(bad)?
                }
                "WKST" => {}
                other => {
                    return Err(format!(
                        "RRULE {} is not read: yearly rules with BYMONTH, BYMONTHDAY, BYDAY, \
                         INTERVAL, COUNT and UNTIL are",
                        clip_value(other)
                    ));
                }
            }
        }
        match freq.as_deref() {
            Some("YEARLY") => {}
            Some(f) => {
                return Err(format!(
                    "RRULE FREQ={} is not read: only yearly rules (FREQ=YEARLY) are; list the \
                     dates instead",
                    clip_value(f)
                ));
            }
            None => return Err("RRULE without FREQ".into()),
        }
        if y.count.is_some() && y.until.is_some() {
            return Err("RRULE has both COUNT and UNTIL".into());
        }
        // Each list once, in order: at most 12 months, 62 month days, 7 x 107 weekday rules.
        y.months.sort_unstable();
        y.months.dedup();
        y.month_days.sort_unstable();
        y.month_days.dedup();
        y.days
            .sort_unstable_by_key(|(n, wd)| (*n, wd.num_days_from_monday()));
        y.days.dedup();
        // What RFC 5545 takes from DTSTART where the rule does not say it.
        match (
            y.months.is_empty(),
            y.month_days.is_empty(),
            y.days.is_empty(),
        ) {
            // The day of DTSTART each year (a 29 February only in leap years).
            (true, true, true) => {
                (y.months, y.month_days) = (vec![start.month()], vec![start.day() as i32])
            }
            // BYMONTH alone: DTSTART's day of those months (Australia Day: BYMONTH=1 from the 26th).
            (false, true, true) => y.month_days = vec![start.day() as i32],
            // BYMONTHDAY without BYMONTH: every month (with BYDAY, it limits BYDAY there).
            (true, false, _) => y.months = (1..=12).collect(),
            _ => {}
        }
        Ok(y)
    }

    /// The occurrences' days from `from` to `to`: DTSTART first, as RFC 5545 counts it.
    fn starts(
        &self,
        start: NaiveDate,
        from: NaiveDate,
        to: NaiveDate,
        work: &mut usize,
    ) -> Result<Vec<NaiveDate>, String> {
        if self.count.is_some() && from.year() - start.year() > MAX_RULE_YEARS {
            return Err(format!(
                "a counted rule that starts more than {MAX_RULE_YEARS} years before {}",
                from.year()
            ));
        }
        // Without a count, the years before `from` need not be walked.
        let first = match self.count {
            Some(_) => start.year(),
            None => start.year().max(from.year() - 1),
        };
        let mut out = vec![];
        let mut n = 1u32;
        if start >= from && start <= to {
            out.push(start);
        }
        for year in first..=to.year() {
            if (year - start.year()).rem_euclid(self.interval) != 0 {
                continue;
            }
            if *work > MAX_RULE_WORK {
                return Ok(out);
            }
            // The days looked at, each against every rule part.
            let parts = 1 + self.days.len() + self.month_days.len();
            *work += parts
                * if self.months.is_empty() {
                    366
                } else {
                    31 * self.months.len()
                };
            for d in self.in_year(year) {
                if d <= start {
                    continue;
                }
                if self.until.is_some_and(|u| d > u) || self.count.is_some_and(|c| n >= c) {
                    return Ok(out);
                }
                n += 1;
                if d >= from && d <= to {
                    out.push(d);
                }
            }
        }
        Ok(out)
    }

    /// The rule's days in `year`, sorted.
    fn in_year(&self, year: i32) -> Vec<NaiveDate> {
        let mut out = Vec::new();
        if self.months.is_empty() {
            // BYDAY over the whole year (an ordinal counts within the year).
            let days = year_days(year);
            out.extend(self.by_day(&days));
        } else {
            for &m in &self.months {
                let days = month_days(year, m);
                let chosen: Vec<NaiveDate> =
                    match (self.days.is_empty(), self.month_days.is_empty()) {
                        (true, true) => vec![],
                        (true, false) => self.by_month_day(&days),
                        (false, true) => self.by_day(&days),
                        // BYMONTHDAY limits BYDAY: "the Tuesday from the 2nd to the 8th".
                        (false, false) => {
                            let md: HashSet<NaiveDate> =
                                self.by_month_day(&days).into_iter().collect();
                            self.by_day(&days)
                                .into_iter()
                                .filter(|d| md.contains(d))
                                .collect()
                        }
                    };
                out.extend(chosen);
            }
        }
        out.sort_unstable();
        out.dedup();
        out
    }

    fn by_month_day(&self, days: &[NaiveDate]) -> Vec<NaiveDate> {
        let len = days.len() as i32;
        self.month_days
            .iter()
            .filter_map(|&d| {
                let i = if d > 0 { d - 1 } else { len + d };
                usize::try_from(i).ok().and_then(|i| days.get(i).copied())
            })
            .collect()
    }

    fn by_day(&self, days: &[NaiveDate]) -> Vec<NaiveDate> {
        // The period's days by weekday, once: each rule part is then one lookup.
        let mut by_weekday: [Vec<NaiveDate>; 7] = Default::default();
        for d in days {
            by_weekday[d.weekday().num_days_from_monday() as usize].push(*d);
        }
        let mut out = Vec::new();
        for &(n, wd) in &self.days {
            let matching = &by_weekday[wd.num_days_from_monday() as usize];
            match n {
                0 => out.extend(matching.iter().copied()),
                n if n > 0 => out.extend(matching.get(n as usize - 1)),
                n => out.extend(
                    usize::try_from(matching.len() as i32 + n)
                        .ok()
                        .and_then(|i| matching.get(i)),
                ),
            }
        }
        out
    }
}

/// The last day of a rule's `UNTIL`: a date; or a date-time, which Outlook writes for all-day
/// rules as the UTC instant of the last occurrence's local midnight (20301224T230000Z for the
/// 25th in Berlin). Every zone is within 14 hours of UTC, so the day of that instant plus 14
/// hours is the last day it can mean.
fn until(v: &str) -> Option<NaiveDate> {
    let day = NaiveDate::parse_from_str(v.get(..8)?, "%Y%m%d").ok()?;
    match v.get(8..) {
        None | Some("") => Some(day),
        Some(time) => {
            let t =
                chrono::NaiveTime::parse_from_str(time.trim_end_matches('Z'), "T%H%M%S").ok()?;
            Some((day.and_time(t) + Duration::hours(14)).date())
        }
    }
}

/// A comma-separated list of numbers, each `ok`.
fn list<T: std::str::FromStr + Copy>(v: &str, ok: impl Fn(T) -> bool) -> Option<Vec<T>> {
    v.split(',')
        .map(|x| x.trim().parse::<T>().ok().filter(|n| ok(*n)))
        .collect()
}

/// `4TH`, `-1MO`, `SU`.
fn weekday_rule(v: &str) -> Option<(i32, Weekday)> {
    let v = v.trim().to_ascii_uppercase();
    let at = v.len().checked_sub(2)?;
    let (n, wd) = (v.get(..at)?, v.get(at..)?);
    let wd = match wd {
        "MO" => Weekday::Mon,
        "TU" => Weekday::Tue,
        "WE" => Weekday::Wed,
        "TH" => Weekday::Thu,
        "FR" => Weekday::Fri,
        "SA" => Weekday::Sat,
        "SU" => Weekday::Sun,
        _ => return None,
    };
    let n = match n {
        "" => 0,
        n => n
            .trim_start_matches('+')
            .parse::<i32>()
            .ok()
            .filter(|n| *n != 0 && (-53..=53).contains(n))?,
    };
    Some((n, wd))
}

fn month_days(year: i32, month: u32) -> Vec<NaiveDate> {
    (1..=31)
        .map_while(|d| NaiveDate::from_ymd_opt(year, month, d))
        .collect()
}

fn year_days(year: i32) -> Vec<NaiveDate> {
    (1..=12).flat_map(|m| month_days(year, m)).collect()
}

#[cfg(test)]
mod tests;

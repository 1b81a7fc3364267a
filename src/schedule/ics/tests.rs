//! The shapes of real published holiday files: Google's exports (folded lines, `VALUE=DATE`,
//! one event per year), Outlook's (a `VTIMEZONE`, `TZID` on all-day events, yearly rules with
//! `UNTIL` as a date-time), a country's list with movable feasts as rules, and what is refused.

use proptest::prelude::*;

use super::*;

fn days(ranges: &[(NaiveDate, NaiveDate)]) -> Vec<String> {
    ranges
        .iter()
        .map(|(a, b)| match a == b {
            true => a.to_string(),
            false => format!("{a}/{b}"),
        })
        .collect()
}

/// CRLF line ends, as RFC 5545 writes them.
fn crlf(lines: &str) -> String {
    lines.lines().map(|l| format!("{l}\r\n")).collect()
}

/// A Google Calendar export: folded long lines (a space starts a continuation), escaped
/// commas, `X-` properties, one event per year and holiday.
const GOOGLE: &str = "BEGIN:VCALENDAR
PRODID:-//Google Inc//Google Calendar 70.9054//EN
VERSION:2.0
CALSCALE:GREGORIAN
METHOD:PUBLISH
X-WR-CALNAME:Holidays in Germany
X-WR-TIMEZONE:UTC
X-WR-CALDESC:Holidays and Observances in Germany
BEGIN:VEVENT
DTSTART;VALUE=DATE:20261225
DTEND;VALUE=DATE:20261226
DTSTAMP:20261101T120000Z
UID:20261225_abc@google.com
CLASS:PUBLIC
CREATED:20250101T000000Z
DESCRIPTION:Public holiday\\, all states. To hide observances\\, go to Google C
 alendar Settings > Holidays in Germany
LAST-MODIFIED:20250101T000000Z
SEQUENCE:0
STATUS:CONFIRMED
SUMMARY:Christmas Day
TRANSP:TRANSPARENT
END:VEVENT
BEGIN:VEVENT
DTSTART;VALUE=DATE:20261226
DTEND;VALUE=DATE:20261227
UID:20261226_abc@google.com
SUMMARY:Second Day of Christmas
END:VEVENT
BEGIN:VEVENT
DTSTART;VALUE=DATE:20270101
DTEND;VALUE=DATE:20270102
UID:20270101_abc@google.com
SUMMARY:New Year's Day
END:VEVENT
BEGIN:VEVENT
DTSTART;VALUE=DATE:20270326
DTEND;VALUE=DATE:20270327
UID:20270326_abc@google.com
SUMMARY:Good Friday
END:VEVENT
BEGIN:VEVENT
DTSTART;VALUE=DATE:20300101
DTEND;VALUE=DATE:20300102
UID:20300101_abc@google.com
SUMMARY:New Year's Day
END:VEVENT
END:VCALENDAR
";

#[test]
fn a_google_export_gives_its_days_in_the_years_wanted() {
    let got = holiday_ranges(&crlf(GOOGLE), 2026..=2027).unwrap();
    assert_eq!(
        days(&got),
        ["2026-12-25", "2026-12-26", "2027-01-01", "2027-03-26"]
    );
    // LF line ends, as a ConfigMap often keeps them, read the same.
    assert_eq!(holiday_ranges(GOOGLE, 2026..=2027).unwrap(), got);
}

/// An Outlook export: a `VTIMEZONE` block, `TZID` on all-day events, yearly rules, `UNTIL` as a
/// date-time.
const OUTLOOK: &str = "BEGIN:VCALENDAR
PRODID:-//Microsoft Corporation//Outlook 16.0 MIMEDIR//EN
VERSION:2.0
BEGIN:VTIMEZONE
TZID:W. Europe Standard Time
BEGIN:STANDARD
DTSTART:16011028T030000
RRULE:FREQ=YEARLY;BYDAY=-1SU;BYMONTH=10
TZOFFSETFROM:+0200
TZOFFSETTO:+0100
END:STANDARD
BEGIN:DAYLIGHT
DTSTART:16010325T020000
RRULE:FREQ=YEARLY;BYDAY=-1SU;BYMONTH=3
TZOFFSETFROM:+0100
TZOFFSETTO:+0200
END:DAYLIGHT
END:VTIMEZONE
BEGIN:VEVENT
CLASS:PUBLIC
DTSTART;TZID=\"W. Europe Standard Time\";VALUE=DATE:20201225
DTEND;TZID=\"W. Europe Standard Time\";VALUE=DATE:20201227
RRULE:FREQ=YEARLY;UNTIL=20301224T230000Z;BYMONTHDAY=25;BYMONTH=12
SUMMARY;LANGUAGE=de-de:Weihnachten
UID:040000008200E00074C5B7101A82E008
X-MICROSOFT-CDO-ALLDAYEVENT:TRUE
BEGIN:VALARM
TRIGGER:-PT15M
ACTION:DISPLAY
DESCRIPTION:Reminder
END:VALARM
END:VEVENT
END:VCALENDAR
";

#[test]
fn an_outlook_export_with_a_zone_and_a_yearly_rule_is_read_as_days() {
    let got = holiday_ranges(&crlf(OUTLOOK), 2026..=2027).unwrap();
    assert_eq!(
        days(&got),
        ["2026-12-25/2026-12-26", "2027-12-25/2027-12-26"]
    );
    // UNTIL ends it: nothing after 2030.
    assert_eq!(
        days(&holiday_ranges(OUTLOOK, 2030..=2031).unwrap()),
        ["2030-12-25/2030-12-26"]
    );
}

/// Movable holidays as rules: Thanksgiving (the 4th Thursday of November), Memorial Day (the
/// last Monday of May), Election Day (the Tuesday from the 2nd to the 8th of November, every 2
/// years from 2026), a leap day, and a counted rule.
const RULES: &str = "BEGIN:VCALENDAR
VERSION:2.0
BEGIN:VEVENT
SUMMARY:Thanksgiving
DTSTART;VALUE=DATE:20201126
RRULE:FREQ=YEARLY;BYMONTH=11;BYDAY=4TH
END:VEVENT
BEGIN:VEVENT
SUMMARY:Memorial Day
DTSTART;VALUE=DATE:20200525
RRULE:FREQ=YEARLY;BYMONTH=5;BYDAY=-1MO
END:VEVENT
BEGIN:VEVENT
SUMMARY:Election Day
DTSTART;VALUE=DATE:20261103
RRULE:FREQ=YEARLY;INTERVAL=2;BYMONTH=11;BYDAY=TU;BYMONTHDAY=2,3,4,5,6,7,8
END:VEVENT
BEGIN:VEVENT
SUMMARY:Leap day
DTSTART;VALUE=DATE:20240229
RRULE:FREQ=YEARLY
END:VEVENT
BEGIN:VEVENT
SUMMARY:Three company days
DTSTART;VALUE=DATE:20250314
DURATION:P1D
RRULE:FREQ=YEARLY;COUNT=3
END:VEVENT
END:VCALENDAR
";

#[test]
fn yearly_rules_give_the_nth_weekday_the_last_one_a_bounded_one_and_a_leap_day() {
    let got = holiday_ranges(RULES, 2026..=2028).unwrap();
    assert_eq!(
        days(&got),
        [
            "2026-03-14", // the third and last of COUNT=3 (2025, 2026, 2027)
            "2026-05-25",
            "2026-11-03",
            "2026-11-26",
            "2027-03-14",
            "2027-05-31",
            "2027-11-25",
            "2028-02-29",
            "2028-05-29",
            "2028-11-07",
            "2028-11-23",
        ]
    );
}

#[test]
fn ranges_durations_exceptions_moved_and_cancelled_occurrences() {
    let doc = "BEGIN:VCALENDAR
BEGIN:VEVENT
UID:winter
SUMMARY:Winter break
DTSTART;VALUE=DATE:20261224
DTEND;VALUE=DATE:20270102
END:VEVENT
BEGIN:VEVENT
UID:summer
SUMMARY:Summer shutdown
DTSTART;VALUE=DATE:20260803
DURATION:P2W
END:VEVENT
BEGIN:VEVENT
UID:founders
SUMMARY:Founders' day
DTSTART;VALUE=DATE:20250601
RRULE:FREQ=YEARLY
EXDATE;VALUE=DATE:20270601,20280601
RDATE;VALUE=DATE:20261005
END:VEVENT
BEGIN:VEVENT
UID:founders
RECURRENCE-ID;VALUE=DATE:20260601
SUMMARY:Founders' day (moved)
DTSTART;VALUE=DATE:20260605
END:VEVENT
BEGIN:VEVENT
UID:retreat
STATUS:CANCELLED
SUMMARY:Retreat
DTSTART;VALUE=DATE:20260901
END:VEVENT
END:VCALENDAR
";
    assert_eq!(
        days(&holiday_ranges(doc, 2026..=2028).unwrap()),
        [
            "2026-06-05",
            "2026-08-03/2026-08-16",
            "2026-10-05",
            "2026-12-24/2027-01-01",
        ]
    );
    // A range from the year before reaches into the years wanted.
    assert_eq!(
        days(&holiday_ranges(doc, 2027..=2027).unwrap()),
        ["2026-12-24/2027-01-01"]
    );
}

#[test]
fn an_event_with_a_time_of_day_is_refused_naming_it() {
    let doc = "BEGIN:VCALENDAR
BEGIN:VEVENT
SUMMARY:Christmas
DTSTART;VALUE=DATE:20261225
END:VEVENT
BEGIN:VEVENT
SUMMARY:Team offsite
DTSTART;TZID=Europe/Berlin:20261002T090000
DTEND;TZID=Europe/Berlin:20261002T170000
END:VEVENT
END:VCALENDAR
";
    let why = holiday_ranges(doc, 2026..=2026).unwrap_err();
    assert_eq!(why.len(), 1, "{why:?}");
    assert!(why[0].contains("event 2 (\"Team offsite\")"), "{why:?}");
    assert!(why[0].contains("has a time of day"), "{why:?}");
}

#[test]
fn what_cannot_be_read_is_said_with_where_it_is() {
    let refused = |doc: &str| holiday_ranges(doc, 2026..=2026).unwrap_err().join("; ");
    let monthly = "BEGIN:VCALENDAR\nBEGIN:VEVENT\nSUMMARY:Payday\nDTSTART;VALUE=DATE:20260101\nRRULE:FREQ=MONTHLY\nEND:VEVENT\nEND:VCALENDAR\n";
    assert!(
        refused(monthly).contains("FREQ=MONTHLY is not read"),
        "{}",
        refused(monthly)
    );
    let weekno = "BEGIN:VCALENDAR\nBEGIN:VEVENT\nDTSTART;VALUE=DATE:20260101\nRRULE:FREQ=YEARLY;BYWEEKNO=20\nEND:VEVENT\nEND:VCALENDAR\n";
    assert!(refused(weekno).contains("RRULE BYWEEKNO is not read"));
    let garbled = "BEGIN:VCALENDAR\nVERSION:2.0\nthis line has no colon\nEND:VCALENDAR\n";
    assert!(
        refused(garbled).starts_with("line 3"),
        "{}",
        refused(garbled)
    );
    let unclosed = "BEGIN:VCALENDAR\nBEGIN:VEVENT\nDTSTART;VALUE=DATE:20260101\nEND:VEVENT\n";
    assert!(refused(unclosed).contains("BEGIN:VCALENDAR is not closed"));
    assert!(refused("").contains("no BEGIN:VCALENDAR"));
    // The line's number only, never its text (it may be anything a ConfigMap holds).
    assert!(!refused(garbled).contains("colon"), "{}", refused(garbled));
    let crossed = "BEGIN:VCALENDAR\nBEGIN:VEVENT\nEND:VTODO\nEND:VCALENDAR\n";
    assert!(refused(crossed).contains("line 3: END:VTODO does not close BEGIN:VEVENT"));
    let no_start = "BEGIN:VCALENDAR\nBEGIN:VEVENT\nSUMMARY:x\nEND:VEVENT\nEND:VCALENDAR\n";
    assert!(refused(no_start).contains("no DTSTART"));
    let backwards = "BEGIN:VCALENDAR\nBEGIN:VEVENT\nDTSTART;VALUE=DATE:20260105\nDTEND;VALUE=DATE:20260104\nEND:VEVENT\nEND:VCALENDAR\n";
    assert!(refused(backwards).contains("is before DTSTART"));
    let not_a_date =
        "BEGIN:VCALENDAR\nBEGIN:VEVENT\nDTSTART;VALUE=DATE:20270229\nEND:VEVENT\nEND:VCALENDAR\n";
    assert!(refused(not_a_date).contains("is not a date"));
}

#[test]
fn the_bounds_hold_for_a_hostile_document() {
    let refused = |doc: &str| holiday_ranges(doc, 2026..=2026).unwrap_err().join("; ");
    let big = format!(
        "BEGIN:VCALENDAR\nX-PAD:{}\nEND:VCALENDAR\n",
        "x".repeat(MAX_ICS_BYTES)
    );
    assert!(refused(&big).contains("bytes; at most"));
    let deep = format!(
        "BEGIN:VCALENDAR\n{}{}END:VCALENDAR\n",
        "BEGIN:X\n".repeat(20_000),
        "END:X\n".repeat(20_000)
    );
    assert!(
        refused(&deep).contains("nest more than"),
        "{}",
        refused(&deep)
    );
    let event = "BEGIN:VEVENT\nDTSTART;VALUE=DATE:20260101\nEND:VEVENT\n";
    let many = format!(
        "BEGIN:VCALENDAR\n{}END:VCALENDAR\n",
        event.repeat(MAX_ICS_EVENTS + 1)
    );
    assert!(refused(&many).contains("events; at most"));
    // Counted rules that never match (a 30 February), walked from 1000 years back: the work
    // is bounded, and the answer says so.
    let never = "BEGIN:VEVENT\nDTSTART;VALUE=DATE:10260101\nRRULE:FREQ=YEARLY;COUNT=1000;BYMONTH=2;BYMONTHDAY=30,31\nEND:VEVENT\n";
    let doc = format!("BEGIN:VCALENDAR\n{}END:VCALENDAR\n", never.repeat(200));
    assert!(
        refused(&doc).contains("take too long to expand"),
        "{}",
        refused(&doc)
    );
    assert!(
        holiday_ranges(
            &format!("BEGIN:VCALENDAR\n{}END:VCALENDAR\n", never.repeat(30)),
            2026..=2026
        )
        .is_ok()
    );
    // Every day of 2026 in one rule is more than a holiday list holds.
    let daily = "BEGIN:VCALENDAR\nBEGIN:VEVENT\nDTSTART;VALUE=DATE:20260101\nRRULE:FREQ=YEARLY;BYDAY=MO,TU,WE,TH,FR,SA,SU\nEND:VEVENT\nEND:VCALENDAR\n";
    assert_eq!(holiday_ranges(daily, 2026..=2026).unwrap().len(), 365);
    assert!(holiday_ranges(daily, 2026..=2032).unwrap_err()[0].contains("holidays in"));
}

#[test]
fn what_a_second_review_found_is_read_right() {
    let read = |doc: &str, years| days(&holiday_ranges(doc, years).unwrap());
    // A rule with BYMONTH alone takes its day from DTSTART (Australia Day, as Mozilla's and
    // Apple's holiday files write it); the first version gave nothing after DTSTART.
    let australia = "BEGIN:VCALENDAR\nBEGIN:VEVENT\nDTSTART;VALUE=DATE:20020126\nRRULE:FREQ=YEARLY;INTERVAL=1;BYMONTH=1\nSUMMARY:Australia Day\nEND:VEVENT\nEND:VCALENDAR\n";
    assert_eq!(read(australia, 2026..=2026), ["2026-01-26"]);
    // A cancelled override cancels its occurrence.
    let cancelled = "BEGIN:VCALENDAR
BEGIN:VEVENT
UID:f
DTSTART;VALUE=DATE:20250601
RRULE:FREQ=YEARLY
END:VEVENT
BEGIN:VEVENT
UID:f
RECURRENCE-ID;VALUE=DATE:20260601
STATUS:CANCELLED
DTSTART;VALUE=DATE:20260601
END:VEVENT
END:VCALENDAR
";
    assert_eq!(read(cancelled, 2026..=2027), ["2027-06-01"]);
    // BYMONTHDAY limits BYDAY in every month when BYMONTH is absent: Friday the 13th.
    let friday13 = "BEGIN:VCALENDAR\nBEGIN:VEVENT\nDTSTART;VALUE=DATE:20260213\nRRULE:FREQ=YEARLY;BYDAY=FR;BYMONTHDAY=13\nEND:VEVENT\nEND:VCALENDAR\n";
    assert_eq!(
        read(friday13, 2026..=2026),
        ["2026-02-13", "2026-03-13", "2026-11-13"]
    );
    // What a third review found: blanks around rule parts and UIDs, DTEND on the day itself
    // (some generators write one-day events so), and an ordinal that overflowed `abs`.
    let blanks = "BEGIN:VCALENDAR
BEGIN:VEVENT
UID:f
DTSTART;VALUE=DATE:20250601
RRULE:FREQ=YEARLY ; COUNT=5 
END:VEVENT
BEGIN:VEVENT
UID:f 
RECURRENCE-ID;VALUE=DATE:20260601
STATUS:CANCELLED
DTSTART;VALUE=DATE:20260601
END:VEVENT
BEGIN:VEVENT
DTSTART;VALUE=DATE:20261005
DTEND;VALUE=DATE:20261005
END:VEVENT
END:VCALENDAR
";
    assert_eq!(read(blanks, 2026..=2027), ["2026-10-05", "2027-06-01"]);
    let overflow = "BEGIN:VCALENDAR\nBEGIN:VEVENT\nDTSTART;VALUE=DATE:20260101\nRRULE:FREQ=YEARLY;BYDAY=-2147483648MO\nEND:VEVENT\nEND:VCALENDAR\n";
    assert!(holiday_ranges(overflow, 2026..=2026).unwrap_err()[0].contains("cannot be read"));
    // Line ends mixed, a byte-order mark, trailing blanks, lower-case names, blank lines.
    let mixed = "\u{feff}BEGIN:VCALENDAR\r\nX-A:1\nbegin:vevent  \n\ndtstart;value=date:20261225\r\nEND:VEVENT\r\nend:vcalendar\r\n";
    assert_eq!(read(mixed, 2026..=2026), ["2026-12-25"]);
}

#[test]
fn a_hostile_document_is_refused_cheaply_and_briefly() {
    let refused = |doc: &str| holiday_ranges(doc, 2026..=2026).unwrap_err().join("; ");
    // END and BEGIN on one line: the first version's depth guard counted only lines that begin
    // with BEGIN, and the parser it used recursed once per level, 40 000 deep: the stack
    // overflowed and the process aborted.
    let nested = format!(
        "BEGIN:VCALENDAR\n{}",
        "BEGIN:X\nEND:XBEGIN:X\n".repeat(40_000)
    );
    let why = refused(&nested);
    assert!(why.contains("does not close"), "{why}");
    // A megabyte of short LF lines is read in one pass (the first version's parser scanned to
    // the end of the text for each line: minutes).
    let lines = format!("BEGIN:VCALENDAR\n{}END:VCALENDAR\n", "X:\n".repeat(340_000));
    assert_eq!(holiday_ranges(&lines, 2026..=2026).unwrap(), vec![]);
    // A rule with a list of 150 000 weekdays is the distinct ones it holds.
    let long = format!(
        "BEGIN:VCALENDAR\nBEGIN:VEVENT\nDTSTART;VALUE=DATE:20260101\nRRULE:FREQ=YEARLY;BYMONTH=1;BYDAY={};BYMONTHDAY={}\nEND:VEVENT\nEND:VCALENDAR\n",
        vec!["MO"; 150_000].join(","),
        vec!["31"; 100_000].join(",")
    );
    // (DTSTART itself, as RFC 5545 counts it; no Monday of 2026 is 31 January.)
    assert_eq!(
        days(&holiday_ranges(&long, 2026..=2026).unwrap()),
        ["2026-01-01"]
    );
    // A value of almost a megabyte is never repeated: each problem is at most 300 characters.
    let big = format!(
        "BEGIN:VCALENDAR\nBEGIN:VEVENT\nDTSTART:{}\nEND:VEVENT\nEND:VCALENDAR\n",
        "\u{1}".repeat(900_000)
    );
    let why = holiday_ranges(&big, 2026..=2026).unwrap_err();
    assert!(
        why.iter().all(|p| p.chars().count() <= 303),
        "{}",
        why[0].len()
    );
}

proptest! {
    /// Nothing a ConfigMap can hold makes the reader panic: arbitrary text, and real documents
    /// cut or spliced at arbitrary places.
    #[test]
    fn no_input_panics(text in ".{0,400}", cut in 0usize..2000, splice in ".{0,40}") {
        let _ = holiday_ranges(&text, 2026..=2027);
        for doc in [GOOGLE, OUTLOOK, RULES] {
            let at = doc.char_indices().map(|(i, _)| i).nth(cut % doc.chars().count()).unwrap_or(0);
            let _ = holiday_ranges(&doc[..at], 2026..=2027);
            let _ = holiday_ranges(&format!("{}{splice}{}", &doc[..at], &doc[at..]), 2026..=2027);
        }
    }
}

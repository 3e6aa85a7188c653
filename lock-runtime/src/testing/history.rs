//! Recorded histories of critical sections, and the checker that finds two holders at once.
//!
//! Workers (tasks in several processes) record every critical section they ran: which
//! process and task, which key, the fencing token, and when they entered and left it on the
//! machine's `CLOCK_MONOTONIC`, which all processes share and no fault scenario moves. The
//! recorded interval lies inside the real hold (entered after the grant, left before the
//! release), so an overlap of two recorded sections on one key is a real violation, never a
//! false alarm.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Write};
use std::path::Path;

/// One critical section, as its worker saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Section {
    /// The worker process (its OS process id).
    pub process: u32,
    /// The task within the process.
    pub task: u32,
    /// The lock key.
    pub key: String,
    /// The fencing token the section ran under.
    pub token: u64,
    /// When the body started, ns on `CLOCK_MONOTONIC`.
    pub entered_ns: u64,
    /// When the body ended (or was stopped), ns on `CLOCK_MONOTONIC`.
    pub exited_ns: u64,
}

impl fmt::Display for Section {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "process {} task {} key {} token {} held {:.3}..{:.3} ms",
            self.process,
            self.task,
            self.key,
            self.token,
            self.entered_ns as f64 / 1e6,
            self.exited_ns as f64 / 1e6
        )
    }
}

/// Nanoseconds on `CLOCK_MONOTONIC`: comparable across the processes of one machine.
pub fn monotonic_ns() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec we own; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    (now.tv_sec as u64) * 1_000_000_000 + now.tv_nsec as u64
}

/// Appends sections to a history file, one line each, flushed at once: a process killed
/// with `SIGKILL` loses no section it finished recording.
#[derive(Debug)]
pub struct HistoryWriter {
    file: File,
}

impl HistoryWriter {
    /// Opens (or creates) `path` for appending.
    pub fn append(path: &Path) -> io::Result<HistoryWriter> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(HistoryWriter { file })
    }

    /// Records one section.
    pub fn record(&mut self, section: &Section) -> io::Result<()> {
        // One write per line: appends of a few dozen bytes are not interleaved.
        let line = format!(
            "{} {} {} {} {} {}\n",
            section.process,
            section.task,
            section.token,
            section.entered_ns,
            section.exited_ns,
            section.key
        );
        self.file.write_all(line.as_bytes())
    }
}

/// Reads the sections of history files; a truncated last line (a process killed while
/// writing) is skipped.
pub fn read_histories<P: AsRef<Path>>(paths: &[P]) -> io::Result<Vec<Section>> {
    let mut sections = Vec::new();
    for path in paths {
        for line in BufReader::new(File::open(path)?).lines() {
            if let Some(section) = parse_line(&line?) {
                sections.push(section);
            }
        }
    }
    Ok(sections)
}

fn parse_line(line: &str) -> Option<Section> {
    let mut fields = line.splitn(6, ' ');
    let mut number = || fields.next()?.parse::<u64>().ok();
    let (process, task, token, entered_ns, exited_ns) =
        (number()?, number()?, number()?, number()?, number()?);
    Some(Section {
        process: u32::try_from(process).ok()?,
        task: u32::try_from(task).ok()?,
        token,
        entered_ns,
        exited_ns,
        key: fields.next()?.to_owned(),
    })
}

/// What the checker found wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Violation {
    /// Two sections on one key overlapped in time: mutual exclusion failed.
    Overlap(Section, Section),
    /// A section entered later ran under a token not greater than an earlier one's.
    TokenOrder(Section, Section),
    /// More sections of one key were inside at once than its permits allow: these.
    TooMany(Vec<Section>),
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::Overlap(a, b) => write!(f, "overlap:\n  {a}\n  {b}"),
            Violation::TokenOrder(a, b) => write!(f, "token not increasing:\n  {a}\n  {b}"),
            Violation::TooMany(inside) => {
                write!(f, "{} inside at once:", inside.len())?;
                inside
                    .iter()
                    .try_for_each(|section| write!(f, "\n  {section}"))
            }
        }
    }
}

/// The checker's findings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckReport {
    /// Sections checked.
    pub sections: usize,
    /// Distinct keys.
    pub keys: usize,
    /// Everything found wrong, in key and entry order.
    pub violations: Vec<Violation>,
}

/// Checks, per key, that no two sections overlap in time and that tokens strictly increase
/// in entry order.
pub fn check(sections: &[Section]) -> CheckReport {
    let mut violations = Vec::new();
    for sections in by_key(sections).values() {
        // The section that, of those entered so far, is left last: any later entry before
        // its exit overlaps it.
        let mut longest: Option<&Section> = None;
        let mut previous: Option<&Section> = None;
        for &section in sections.iter() {
            if let Some(open) = longest
                && section.entered_ns < open.exited_ns
            {
                violations.push(Violation::Overlap(open.clone(), section.clone()));
            }
            if let Some(previous) = previous
                && section.token <= previous.token
            {
                violations.push(Violation::TokenOrder(previous.clone(), section.clone()));
            }
            if longest.is_none_or(|open| section.exited_ns > open.exited_ns) {
                longest = Some(section);
            }
            previous = Some(section);
        }
    }
    CheckReport {
        violations,
        ..shape(sections)
    }
}

/// Checks the sections of read/write locks, per key: a writer's section overlaps no other
/// section (a reader's or a writer's), and of two sections one of which is a writer's, the
/// one that ended before the other entered ran under the smaller token (a writer's token
/// exceeds every earlier reader's and writer's). Readers may overlap each other.
pub fn check_read_write(readers: &[Section], writers: &[Section]) -> CheckReport {
    let mut violations = Vec::new();
    let all = || {
        readers
            .iter()
            .map(|r| (r, false))
            .chain(writers.iter().map(|w| (w, true)))
    };
    for (writer, _) in all().filter(|(_, writes)| *writes) {
        for (other, writes) in all().filter(|(other, _)| other.key == writer.key) {
            if std::ptr::eq(other, writer) {
                continue;
            }
            let overlaps =
                other.entered_ns < writer.exited_ns && writer.entered_ns < other.exited_ns;
            // A pair of writers is reported once, from the earlier one.
            let first =
                !writes || (writer.entered_ns, writer.token) < (other.entered_ns, other.token);
            if overlaps && first {
                violations.push(Violation::Overlap(writer.clone(), other.clone()));
            }
            let (before, after) = if other.exited_ns <= writer.entered_ns {
                (other, writer)
            } else if writer.exited_ns <= other.entered_ns {
                (writer, other)
            } else {
                continue;
            };
            if before.token >= after.token && (first || !writes) {
                violations.push(Violation::TokenOrder(before.clone(), after.clone()));
            }
        }
    }
    let every: Vec<Section> = readers.iter().chain(writers).cloned().collect();
    CheckReport {
        violations,
        ..shape(&every)
    }
}

/// Checks the sections of semaphores, per key: at no instant were more than `permits` of
/// them inside.
pub fn check_at_most(sections: &[Section], permits: usize) -> CheckReport {
    let mut violations = Vec::new();
    for sections in by_key(sections).values() {
        let mut inside: Vec<&Section> = Vec::new();
        for &section in sections {
            inside.retain(|open| open.exited_ns > section.entered_ns);
            inside.push(section);
            if inside.len() > permits {
                violations.push(Violation::TooMany(
                    inside.iter().map(|&s| s.clone()).collect(),
                ));
            }
        }
    }
    CheckReport {
        violations,
        ..shape(sections)
    }
}

/// The most sections of one key that were inside at once: what shows that readers (or
/// permits) did share their key, not merely could have.
pub fn most_inside(sections: &[Section]) -> usize {
    let mut most = 0;
    for sections in by_key(sections).values() {
        let mut inside: Vec<&Section> = Vec::new();
        for &section in sections {
            inside.retain(|open| open.exited_ns > section.entered_ns);
            inside.push(section);
            most = most.max(inside.len());
        }
    }
    most
}

/// The sections per key, in entry order.
fn by_key(sections: &[Section]) -> std::collections::BTreeMap<&str, Vec<&Section>> {
    let mut by_key: std::collections::BTreeMap<&str, Vec<&Section>> = Default::default();
    for section in sections {
        by_key.entry(&section.key).or_default().push(section);
    }
    for sections in by_key.values_mut() {
        sections.sort_by_key(|s| (s.entered_ns, s.exited_ns));
    }
    by_key
}

/// A report of `sections` with no violation yet.
fn shape(sections: &[Section]) -> CheckReport {
    CheckReport {
        sections: sections.len(),
        keys: by_key(sections).len(),
        violations: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn section(key: &str, token: u64, entered_ns: u64, exited_ns: u64) -> Section {
        Section {
            process: 1,
            task: 0,
            key: key.into(),
            token,
            entered_ns,
            exited_ns,
        }
    }

    #[test]
    fn a_clean_history_passes() {
        let history = [
            section("a", 1, 0, 10),
            section("a", 2, 10, 20),
            section("b", 1, 5, 25),
            section("a", 5, 30, 31),
        ];
        let report = check(&history);
        assert_eq!((report.sections, report.keys), (4, 2));
        assert!(report.violations.is_empty(), "{:?}", report.violations);
    }

    #[test]
    fn overlaps_are_found_even_behind_a_short_section() {
        // The long section overlaps the third even though the second ended in between.
        let history = [
            section("a", 1, 0, 100),
            section("a", 2, 10, 20),
            section("a", 3, 50, 60),
        ];
        let report = check(&history);
        assert_eq!(report.violations.len(), 2, "{:?}", report.violations);
        assert!(
            report
                .violations
                .iter()
                .all(|v| matches!(v, Violation::Overlap(a, _) if a.token == 1))
        );
    }

    #[test]
    fn tokens_must_increase_in_entry_order() {
        let history = [section("a", 7, 0, 10), section("a", 7, 20, 30)];
        assert!(matches!(
            check(&history).violations[..],
            [Violation::TokenOrder(..)]
        ));
    }

    #[test]
    fn histories_round_trip_through_files_and_survive_a_torn_line() {
        let path = std::env::temp_dir().join(format!("fencelock-history-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let mut writer = HistoryWriter::append(&path).unwrap();
        let recorded = section("stock:{42}", 1_796_000_000_000_000, 5, 9);
        writer.record(&recorded).unwrap();
        drop(writer);
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(b"1 2 3")
            .unwrap();
        assert_eq!(read_histories(&[&path]).unwrap(), vec![recorded]);
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn readers_may_overlap_but_never_a_writer() {
        let readers = [section("a", 1, 0, 10), section("a", 2, 5, 20)];
        let writers = [section("a", 3, 20, 30), section("b", 1, 0, 30)];
        let report = check_read_write(&readers, &writers);
        assert!(report.violations.is_empty(), "{:?}", report.violations);
        assert_eq!((report.sections, report.keys), (4, 2));
        assert_eq!(most_inside(&readers), 2);
        let late = [section("a", 4, 25, 26)];
        let report = check_read_write(&late, &writers);
        assert!(matches!(report.violations[..], [Violation::Overlap(..)]));
        let stale = [section("a", 2, 31, 40)];
        let report = check_read_write(&stale, &writers);
        assert!(matches!(report.violations[..], [Violation::TokenOrder(..)]));
    }

    #[test]
    fn a_semaphore_lets_in_at_most_its_permits() {
        let history = [
            section("s", 1, 0, 10),
            section("s", 2, 1, 10),
            section("s", 3, 10, 20),
        ];
        assert!(check_at_most(&history, 2).violations.is_empty());
        let crowded = [
            section("s", 4, 5, 6),
            history[0].clone(),
            history[1].clone(),
        ];
        let report = check_at_most(&crowded, 2);
        assert!(
            matches!(&report.violations[..], [Violation::TooMany(inside)] if inside.len() == 3)
        );
    }

    #[test]
    fn the_monotonic_clock_moves_forward() {
        let first = monotonic_ns();
        assert!(monotonic_ns() >= first);
    }
}

//! What an entry of a line says: its kind of lock, its state, and how long it lasts without a
//! word from its owner.

use std::time::Duration;

use crate::LockKind;

/// The kind of lock an entry is for: a line serves one family at a time (the mutex, readers
/// and writers, or a semaphore's permits).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EntryKind {
    Mutex,
    Read,
    Write,
    /// A permit of a semaphore of this many permits.
    Permit(u32),
}

impl EntryKind {
    /// The entry kind of a lease of `kind`, if lines offer it.
    pub(crate) fn of(kind: LockKind) -> Option<EntryKind> {
        match kind {
            LockKind::Mutex => Some(EntryKind::Mutex),
            LockKind::Read => Some(EntryKind::Read),
            LockKind::Write => Some(EntryKind::Write),
            LockKind::Semaphore { permits } => Some(EntryKind::Permit(permits)),
            LockKind::Segmented { .. } => None,
        }
    }

    /// The lock kind an entry of this kind is a grant of.
    pub(crate) fn lock_kind(self) -> LockKind {
        match self {
            EntryKind::Mutex => LockKind::Mutex,
            EntryKind::Read => LockKind::Read,
            EntryKind::Write => LockKind::Write,
            EntryKind::Permit(permits) => LockKind::Semaphore { permits },
        }
    }

    /// Whether an entry of this kind may have to wait for an `other` entry ahead of it: every
    /// pair but two readers (permits count those ahead, see [`Admission`]).
    pub(crate) fn waits_for(self, other: EntryKind) -> bool {
        !(self == EntryKind::Read && other == EntryKind::Read)
    }

    /// Whether entries of this kind count those ahead (permits) rather than wait for them.
    pub(crate) fn counts(self) -> bool {
        matches!(self, EntryKind::Permit(_))
    }

    /// Whether the two kinds may share a line (the mutex, readers and writers, or permits).
    pub(crate) fn mixes_with(self, other: EntryKind) -> bool {
        self.family() == other.family()
    }

    fn family(self) -> u8 {
        match self {
            EntryKind::Mutex => 0,
            EntryKind::Read | EntryKind::Write => 1,
            EntryKind::Permit(_) => 2,
        }
    }

    pub(crate) fn name(self) -> &'static str {
        self.lock_kind().name()
    }

    fn tag(self) -> String {
        match self {
            EntryKind::Mutex => "m".to_owned(),
            EntryKind::Read => "r".to_owned(),
            EntryKind::Write => "x".to_owned(),
            EntryKind::Permit(permits) => format!("s{permits}"),
        }
    }

    fn parse(tag: &str) -> Option<EntryKind> {
        match tag {
            "m" => Some(EntryKind::Mutex),
            "r" => Some(EntryKind::Read),
            "x" => Some(EntryKind::Write),
            _ => {
                let permits = tag.strip_prefix('s')?;
                // Digits only, as `tag` writes them: no sign, no leading zero.
                let plain =
                    permits.bytes().all(|b| b.is_ascii_digit()) && !permits.starts_with('0');
                let permits = permits.parse().ok().filter(|_| plain)?;
                LockKind::Semaphore { permits }.validate().ok()?;
                Some(EntryKind::Permit(permits))
            }
        }
    }
}

/// Who holds a key, walking its line oldest first: the entries each one waits for (see
/// [`EntryKind::waits_for`]), and for permits, how many are ahead against the smallest count
/// among them (a permit enters while fewer are ahead than its own count and every count
/// ahead, as a semaphore's holders admit on every store).
#[derive(Debug, Default)]
pub(crate) struct Admission {
    any_ahead: bool,
    non_reader_ahead: bool,
    permits_ahead: u32,
    smallest_count: Option<u32>,
}

impl Admission {
    /// Whether the next entry of the line, of `kind`, would hold the key if every entry
    /// walked so far stayed (counting it as walked).
    pub(crate) fn next(&mut self, kind: EntryKind) -> bool {
        let holds = match kind {
            EntryKind::Read => !self.non_reader_ahead,
            EntryKind::Mutex | EntryKind::Write => !self.any_ahead,
            EntryKind::Permit(count) => {
                let smallest = self.smallest_count.map_or(count, |s| s.min(count));
                self.smallest_count = Some(smallest);
                self.permits_ahead < smallest
            }
        };
        self.any_ahead = true;
        self.non_reader_ahead |= kind != EntryKind::Read;
        if kind.counts() {
            self.permits_ahead += 1;
        }
        holds
    }
}

/// An entry's state, as its owner last wrote it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    /// Waiting in line: the place lapses after `place` without another attempt; a hand-off
    /// grants `ttl`.
    Waiting { place: Duration, ttl: Duration },
    /// Holding the key; the lease ends after this long without a renewal.
    Held(Duration),
    /// Released with `min_hold_ms`: the key stays taken this long.
    Kept(Duration),
    /// Something fencelock did not write: it blocks the line and never lapses.
    Foreign,
}

impl State {
    /// The data of an entry of `kind` in this state.
    pub(crate) fn encode(self, kind: EntryKind) -> String {
        let letter = kind.tag();
        let (tag, duration) = match self {
            State::Waiting { place, ttl } => {
                return format!("{letter} w {} {}", place.as_millis(), ttl.as_millis());
            }
            State::Held(ttl) => ('h', ttl),
            State::Kept(min_hold) => ('k', min_hold),
            State::Foreign => return String::new(),
        };
        format!("{letter} {tag} {}", duration.as_millis())
    }

    /// An entry's kind and state from its data; [`State::Foreign`] for anything else.
    pub(crate) fn decode(data: &[u8]) -> (EntryKind, State) {
        let parsed = std::str::from_utf8(data).ok().and_then(|text| {
            let mut fields = text.split(' ');
            let kind = EntryKind::parse(fields.next()?)?;
            let (tag, millis) = (fields.next()?, fields.next()?);
            let duration = Duration::from_millis(millis.parse().ok()?);
            let more = fields.next().map(str::parse::<u64>);
            if fields.next().is_some() {
                return None;
            }
            let state = match (tag, more) {
                ("w", Some(Ok(ttl))) => State::Waiting {
                    place: duration,
                    ttl: Duration::from_millis(ttl),
                },
                ("h", None) => State::Held(duration),
                ("k", None) => State::Kept(duration),
                _ => return None,
            };
            Some((kind, state))
        });
        parsed.unwrap_or((EntryKind::Mutex, State::Foreign))
    }

    /// How long the entry lasts unchanged (a lease, a place, a keep); `None`: for ever.
    pub(crate) fn lasts(self) -> Option<Duration> {
        match self {
            State::Waiting { place: d, .. } | State::Held(d) | State::Kept(d) => Some(d),
            State::Foreign => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_read_back_as_written_and_anything_else_is_foreign() {
        for state in [
            State::Waiting {
                place: Duration::from_millis(300),
                ttl: Duration::from_secs(5),
            },
            State::Held(Duration::from_secs(30)),
            State::Kept(Duration::from_millis(1)),
        ] {
            for kind in [
                EntryKind::Mutex,
                EntryKind::Read,
                EntryKind::Write,
                EntryKind::Permit(1),
                EntryKind::Permit(1_024),
            ] {
                assert_eq!(State::decode(state.encode(kind).as_bytes()), (kind, state));
            }
        }
        let foreign: [&[u8]; 14] = [
            b"",
            b"m h",
            b"m h x",
            b"m x 10",
            b"\xff 1",
            b"m w 1",
            b"m h 1 2",
            b"h 1",
            b"q h 1",
            b"s h 1",
            b"s0 h 1",
            b"s01 h 1",
            b"s1025 h 1",
            b"s+3 h 1",
        ];
        for data in foreign {
            assert_eq!(State::decode(data).1, State::Foreign, "{data:?}");
        }
    }

    #[test]
    fn permits_enter_below_the_smallest_count_ahead() {
        let holds = |line: &[EntryKind]| {
            let mut admission = Admission::default();
            line.iter()
                .map(|kind| admission.next(*kind))
                .collect::<Vec<_>>()
        };
        let (two, five) = (EntryKind::Permit(2), EntryKind::Permit(5));
        assert_eq!(holds(&[five, five, five]), [true, true, true]);
        assert_eq!(holds(&[two, five, five]), [true, true, false]);
        assert_eq!(holds(&[five, five, two]), [true, true, false]);
        assert_eq!(holds(&[five, two, five, five]), [true, true, false, false]);
        assert_eq!(
            holds(&[
                EntryKind::Read,
                EntryKind::Read,
                EntryKind::Write,
                EntryKind::Read
            ]),
            [true, true, false, false]
        );
        assert_eq!(holds(&[EntryKind::Mutex, EntryKind::Mutex]), [true, false]);
    }
}

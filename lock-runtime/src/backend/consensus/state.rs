//! What an entry of a line says: its kind of lock, its state, and how long it lasts without a
//! word from its owner.

use std::time::Duration;

use crate::LockKind;

/// The kind of lock an entry is for: a line serves one family at a time (the mutex, or
/// readers and writers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EntryKind {
    Mutex,
    Read,
    Write,
}

impl EntryKind {
    /// The entry kind of a lease of `kind`, if lines offer it.
    pub(crate) fn of(kind: LockKind) -> Option<EntryKind> {
        match kind {
            LockKind::Mutex => Some(EntryKind::Mutex),
            LockKind::Read => Some(EntryKind::Read),
            LockKind::Write => Some(EntryKind::Write),
            LockKind::Semaphore { .. } | LockKind::Segmented { .. } => None,
        }
    }

    /// Whether an entry of this kind must wait for an `other` entry ahead of it: every pair
    /// but two readers.
    pub(crate) fn waits_for(self, other: EntryKind) -> bool {
        !(self == EntryKind::Read && other == EntryKind::Read)
    }

    /// Whether the two kinds may share a line (the mutex, or readers and writers).
    pub(crate) fn mixes_with(self, other: EntryKind) -> bool {
        (self == EntryKind::Mutex) == (other == EntryKind::Mutex)
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            EntryKind::Mutex => "mutex",
            EntryKind::Read => "read",
            EntryKind::Write => "write",
        }
    }

    fn letter(self) -> char {
        match self {
            EntryKind::Mutex => 'm',
            EntryKind::Read => 'r',
            EntryKind::Write => 'x',
        }
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
        let letter = kind.letter();
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
            let kind = match fields.next()? {
                "m" => EntryKind::Mutex,
                "r" => EntryKind::Read,
                "x" => EntryKind::Write,
                _ => return None,
            };
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
            for kind in [EntryKind::Mutex, EntryKind::Read, EntryKind::Write] {
                assert_eq!(State::decode(state.encode(kind).as_bytes()), (kind, state));
            }
        }
        let foreign: [&[u8]; 9] = [
            b"", b"m h", b"m h x", b"m x 10", b"\xff 1", b"m w 1", b"m h 1 2", b"h 1", b"q h 1",
        ];
        for data in foreign {
            assert_eq!(State::decode(data).1, State::Foreign, "{data:?}");
        }
    }
}

//! What an entry of a line says: its kind of lock, its state, and how long it lasts without a
//! word from its owner.

use std::time::Duration;

use crate::LockKind;

/// The kind of lock an entry is for: a line serves one family at a time (the mutex, readers
/// and writers, a semaphore's permits, or a segmented lock's shards).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EntryKind {
    Mutex,
    Read,
    Write,
    /// A permit of a semaphore of this many permits.
    Permit(u32),
    /// A segmented lock of `count` shards, and the shard it claimed once granted: a claim is
    /// written when the entry takes the key, and kept until the entry goes.
    Shard {
        count: u32,
        shard: Option<u32>,
    },
}

impl EntryKind {
    /// The entry kind of a lease of `kind`, if lines offer it.
    pub(crate) fn of(kind: LockKind) -> Option<EntryKind> {
        match kind {
            LockKind::Mutex => Some(EntryKind::Mutex),
            LockKind::Read => Some(EntryKind::Read),
            LockKind::Write => Some(EntryKind::Write),
            LockKind::Semaphore { permits } => Some(EntryKind::Permit(permits)),
            LockKind::Segmented { shards } => Some(EntryKind::Shard {
                count: shards,
                shard: None,
            }),
        }
    }

    /// The lock kind an entry of this kind is a grant of.
    pub(crate) fn lock_kind(self) -> LockKind {
        match self {
            EntryKind::Mutex => LockKind::Mutex,
            EntryKind::Read => LockKind::Read,
            EntryKind::Write => LockKind::Write,
            EntryKind::Permit(permits) => LockKind::Semaphore { permits },
            EntryKind::Shard { count, .. } => LockKind::Segmented { shards: count },
        }
    }

    /// The shard an entry of this kind claimed (other kinds claim none).
    pub(crate) fn shard(self) -> Option<u32> {
        match self {
            EntryKind::Shard { shard, .. } => shard,
            _ => None,
        }
    }

    /// Whether an entry of this kind may have to wait for an `other` entry ahead of it: every
    /// pair but two readers (permits and shards count those ahead, see [`Admission`]).
    pub(crate) fn waits_for(self, other: EntryKind) -> bool {
        !(self == EntryKind::Read && other == EntryKind::Read)
    }

    /// Whether entries of this kind count those ahead (permits, shards) rather than wait for
    /// them: such a waiter watches the oldest entry, and learns of other departures from
    /// the release's announcement.
    pub(crate) fn counts(self) -> bool {
        matches!(self, EntryKind::Permit(_) | EntryKind::Shard { .. })
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
            EntryKind::Shard { .. } => 3,
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
            EntryKind::Shard { count, shard: None } => format!("g{count}"),
            EntryKind::Shard {
                count,
                shard: Some(shard),
            } => format!("g{count}.{shard}"),
        }
    }

    fn parse(tag: &str) -> Option<EntryKind> {
        match tag {
            "m" => Some(EntryKind::Mutex),
            "r" => Some(EntryKind::Read),
            "x" => Some(EntryKind::Write),
            _ => {
                if let Some(permits) = tag.strip_prefix('s') {
                    let permits = count(permits)?;
                    LockKind::Semaphore { permits }.validate().ok()?;
                    return Some(EntryKind::Permit(permits));
                }
                let shards = tag.strip_prefix('g')?;
                let (shards, shard) = match shards.split_once('.') {
                    Some((shards, "0")) => (shards, Some(0)),
                    Some((shards, shard)) => (shards, Some(count(shard)?)),
                    None => (shards, None),
                };
                let count = count(shards)?;
                LockKind::Segmented { shards: count }.validate().ok()?;
                if shard.is_some_and(|shard| shard >= count) {
                    return None;
                }
                Some(EntryKind::Shard { count, shard })
            }
        }
    }
}

/// A positive number as `EntryKind::tag` writes it: digits only, no sign, no leading zero.
fn count(digits: &str) -> Option<u32> {
    let plain = digits.bytes().all(|b| b.is_ascii_digit()) && !digits.starts_with('0');
    digits.parse().ok().filter(|_| plain)
}

/// Who holds a key, walking its line oldest first: the entries each one waits for (see
/// [`EntryKind::waits_for`]), and for permits, how many are ahead against the smallest count
/// among them (a permit enters while fewer are ahead than its own count and every count
/// ahead, as a semaphore's holders admit on every store). Shards go in line order: an entry
/// holds the shard it claimed, and one that has not claimed yet holds the key once every entry
/// ahead has claimed and a shard below its count is neither claimed ahead nor exhausted.
#[derive(Debug, Default)]
pub(crate) struct Admission {
    any_ahead: bool,
    non_reader_ahead: bool,
    permits_ahead: u32,
    smallest_count: Option<u32>,
    /// The shards claimed ahead.
    claimed: Vec<u32>,
    /// Whether a shard entry ahead has not claimed one yet: those behind wait for its claim.
    claim_ahead: bool,
    /// The key's shards marked exhausted: never claimed.
    exhausted: Vec<u32>,
}

impl Admission {
    /// An admission that never claims the `exhausted` shards.
    pub(crate) fn skipping(exhausted: &[u32]) -> Admission {
        Admission {
            exhausted: exhausted.to_vec(),
            ..Admission::default()
        }
    }

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
            EntryKind::Shard { count, shard } => {
                shard.is_some() || (!self.claim_ahead && self.free_shard(count, 0).is_some())
            }
        };
        self.any_ahead = true;
        self.non_reader_ahead |= kind != EntryKind::Read;
        match kind {
            EntryKind::Permit(_) => self.permits_ahead += 1,
            EntryKind::Shard {
                shard: Some(shard), ..
            } => self.claimed.push(shard),
            EntryKind::Shard { shard: None, .. } => self.claim_ahead = true,
            _ => {}
        }
        holds
    }

    /// The shard an entry of `count` shards would claim next, looking from `start` on: the
    /// first below its count that is neither claimed by the entries walked nor exhausted.
    pub(crate) fn free_shard(&self, count: u32, start: u32) -> Option<u32> {
        (0..count)
            .map(|offset| (start % count + offset) % count)
            .find(|shard| self.is_free(*shard))
    }

    /// How many shards below `count` are neither claimed by the entries walked nor exhausted.
    pub(crate) fn free_shards(&self, count: u32) -> usize {
        (0..count).filter(|shard| self.is_free(*shard)).count()
    }

    fn is_free(&self, shard: u32) -> bool {
        !self.claimed.contains(&shard) && !self.exhausted.contains(&shard)
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
                EntryKind::Shard {
                    count: 8,
                    shard: None,
                },
                EntryKind::Shard {
                    count: 8,
                    shard: Some(0),
                },
                EntryKind::Shard {
                    count: 1_024,
                    shard: Some(1_023),
                },
            ] {
                assert_eq!(State::decode(state.encode(kind).as_bytes()), (kind, state));
            }
        }
        let foreign: [&[u8]; 20] = [
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
            b"g h 1",
            b"g0 h 1",
            b"g4.4 h 1",
            b"g4.01 h 1",
            b"g4. h 1",
            b"g4.1.2 h 1",
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

    #[test]
    fn shards_are_claimed_in_line_order() {
        let shard = |count, shard| EntryKind::Shard { count, shard };
        let holds = |line: &[EntryKind], exhausted: &[u32]| {
            let mut admission = Admission::skipping(exhausted);
            line.iter()
                .map(|kind| admission.next(*kind))
                .collect::<Vec<_>>()
        };
        // An entry that has not claimed yet holds the key beside those that have, while a
        // shard is free; those behind it wait for its claim.
        let line = [shard(2, Some(1)), shard(2, None), shard(2, None)];
        assert_eq!(holds(&line, &[]), [true, true, false]);
        assert_eq!(
            holds(&line, &[0]),
            [true, false, false],
            "shard 0 is exhausted"
        );
        let full = [shard(2, Some(1)), shard(2, Some(0)), shard(2, None)];
        assert_eq!(holds(&full, &[]), [true, true, false]);
        // A request for fewer shards takes one below its count beside holders of more.
        assert_eq!(
            holds(&[shard(4, Some(0)), shard(1, None)], &[]),
            [true, false]
        );
        assert_eq!(
            holds(&[shard(4, Some(2)), shard(1, None)], &[]),
            [true, true]
        );
        let mut admission = Admission::skipping(&[1]);
        admission.next(shard(4, Some(2)));
        assert_eq!(admission.free_shard(4, 2), Some(3));
        assert_eq!(admission.free_shard(4, 1), Some(3));
        assert_eq!(admission.free_shard(4, 4), Some(0));
    }
}

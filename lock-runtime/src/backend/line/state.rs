//! What an entry of a line says, and how long it lasts without a word from its owner.

use std::time::Duration;

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
    /// The entry's data in the store.
    pub(crate) fn encode(self) -> String {
        let (tag, duration) = match self {
            State::Waiting { place, ttl } => {
                return format!("w {} {}", place.as_millis(), ttl.as_millis());
            }
            State::Held(ttl) => ('h', ttl),
            State::Kept(keep) => ('k', keep),
            State::Foreign => return String::new(),
        };
        format!("{tag} {}", duration.as_millis())
    }

    /// An entry's state from its data; [`State::Foreign`] for anything else.
    pub(crate) fn decode(data: &[u8]) -> State {
        let parsed = std::str::from_utf8(data).ok().and_then(|text| {
            let mut fields = text.split(' ');
            let (tag, millis) = (fields.next()?, fields.next()?);
            let duration = Duration::from_millis(millis.parse().ok()?);
            let more = fields.next().map(str::parse::<u64>);
            if fields.next().is_some() {
                return None;
            }
            match (tag, more) {
                ("w", Some(Ok(ttl))) => Some(State::Waiting {
                    place: duration,
                    ttl: Duration::from_millis(ttl),
                }),
                (_, Some(_)) => None,
                ("h", None) => Some(State::Held(duration)),
                ("k", None) => Some(State::Kept(duration)),
                _ => None,
            }
        });
        parsed.unwrap_or(State::Foreign)
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
            assert_eq!(State::decode(state.encode().as_bytes()), state);
        }
        for foreign in [&b""[..], b"h", b"h x", b"x 10", b"\xff 1", b"w 1", b"h 1 2"] {
            assert_eq!(State::decode(foreign), State::Foreign);
        }
    }
}

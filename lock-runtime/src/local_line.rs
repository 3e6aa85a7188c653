//! The line a client's own waiting requests for one mutex form inside the process: one of
//! them at a time (the front) asks the store, takes its place in the store's line and waits
//! there; the others wait here until the front's acquisition ends, granted or not, and the
//! next becomes the front. 64 tasks of one process on one key then cost the store one waiter
//! (one place in its line, one series of attempts that renew it), not 64.
//!
//! The front's turn ends with its acquisition, not with its guard: the next request then asks
//! at once, finds the key held by that guard, and waits for its release in the store's line,
//! which hands the key over. A guard whose lease was lost, or that an operator released,
//! holds nothing back here.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use crate::LockError;
use crate::sync::lock_ignoring_poison;

/// The lines of one client, one per key that a request of it waits in or is the front of.
#[derive(Debug, Default)]
pub(crate) struct LocalLines {
    lines: Mutex<HashMap<String, Line>>,
}

#[derive(Debug)]
struct Line {
    /// One permit: the front's turn.
    turns: Arc<Semaphore>,
    /// The requests in the line, the front included; counted under the map's lock, where
    /// alone a place is taken or left, so that the last to leave removes the line.
    places: usize,
}

/// A request's place in its key's line, and once it is its turn, the turn itself: the next
/// request of the line becomes the front when this is dropped (with the acquisition).
#[derive(Debug)]
pub(crate) struct LocalTurn {
    lines: Arc<LocalLines>,
    key: String,
    turn: Option<OwnedSemaphorePermit>,
    /// Whether the request waited for its turn behind another.
    waited: bool,
}

impl LocalLines {
    /// Waits for the turn of `key` until `until`: the place, with the turn if it came in time.
    pub(crate) async fn wait_turn(self: &Arc<Self>, key: &str, until: Instant) -> LocalTurn {
        let turns = {
            let mut lines = lock_ignoring_poison(&self.lines);
            let line = lines.entry(key.to_owned()).or_insert_with(|| Line {
                turns: Arc::new(Semaphore::new(1)),
                places: 0,
            });
            line.places += 1;
            line.turns.clone()
        };
        let mut place = LocalTurn {
            lines: self.clone(),
            key: key.to_owned(),
            turn: turns.clone().try_acquire_owned().ok(),
            waited: false,
        };
        if place.turn.is_none() {
            place.waited = true;
            // Dropped with the request (cut, or ended by a shutdown): the place leaves the line.
            let turn = tokio::time::timeout_at(until, turns.acquire_owned()).await;
            place.turn = turn.ok().and_then(Result::ok);
        }
        place
    }
}

impl LocalTurn {
    /// Whether the turn came before the request's wait ran out.
    pub(crate) fn came(&self) -> bool {
        self.turn.is_some()
    }

    /// Whether the request waited for its turn behind another of its key.
    pub(crate) fn waited(&self) -> bool {
        self.waited
    }

    /// The error of a request whose wait in the line ran out: the key was held (by this
    /// client's requests ahead of it, or by whoever they waited for) for its whole wait. Not
    /// a failure the front may have met at the store: this request asked nothing, and a
    /// `Backend` error says that one of the request's own calls failed.
    pub(crate) fn waited_out(&self) -> LockError {
        LockError::not_acquired(&self.key, 0)
    }
}

impl Drop for LocalTurn {
    fn drop(&mut self) {
        // The next request of the line goes on first; the last to leave removes the line.
        self.turn.take();
        let mut lines = lock_ignoring_poison(&self.lines.lines);
        if let Some(line) = lines.get_mut(&self.key) {
            line.places -= 1;
            if line.places == 0 {
                lines.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_line_lets_one_at_a_time_in_order_and_goes_when_empty() {
        let lines = Arc::new(LocalLines::default());
        let later = Instant::now() + Duration::from_secs(10);
        let first = lines.wait_turn("k", later).await;
        assert!(first.came());
        let waiting = {
            let lines = lines.clone();
            tokio::spawn(async move { lines.wait_turn("k", later).await.came() })
        };
        tokio::task::yield_now().await;
        let out_of_turn = lines
            .wait_turn("k", Instant::now() + Duration::from_millis(5))
            .await;
        assert!(!out_of_turn.came(), "the turn is the first's");
        drop(out_of_turn);
        assert!(!waiting.is_finished());
        drop(first);
        assert!(waiting.await.unwrap(), "the next in line goes on");
        assert!(
            lock_ignoring_poison(&lines.lines).is_empty(),
            "an empty line goes"
        );
        // Another key has its own line.
        assert!(lines.wait_turn("other", later).await.came());
    }
}

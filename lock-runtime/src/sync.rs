//! Locking a std mutex that a panic may have poisoned, and work outstanding by key.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

/// Locks `mutex`, also after a panic poisoned it. Only for state that every update leaves
/// whole (a single insert, remove or field write): a panic elsewhere cannot have left it
/// half-done, and refusing it would turn one panic into a panic of every later caller.
pub(crate) fn lock_ignoring_poison<T: ?Sized>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Work outstanding, counted by lock key (a client's releases in flight, its acquisitions
/// running), which others wait to see settle. Each piece has a number, in the order started.
#[derive(Debug, Default)]
pub(crate) struct Outstanding {
    state: Mutex<Pieces>,
    settled: Notify,
}

#[derive(Debug, Default)]
struct Pieces {
    keys: HashMap<String, BTreeSet<u64>>,
    next: u64,
}

impl Outstanding {
    /// Counts one piece of work on `key` until the ticket returned is dropped.
    pub(crate) fn start(self: &Arc<Self>, key: &str) -> Ticket {
        let mut pieces = lock_ignoring_poison(&self.state);
        let number = pieces.next;
        pieces.next += 1;
        pieces
            .keys
            .entry(key.to_owned())
            .or_default()
            .insert(number);
        Ticket {
            outstanding: self.clone(),
            key: key.to_owned(),
            number,
        }
    }

    /// Completes once the work on `key` started before this call has settled (at once if
    /// there is none); work started later is not waited for.
    pub(crate) async fn settled_before(&self, key: &str) {
        let started_before = lock_ignoring_poison(&self.state).next;
        self.until(|pieces| {
            pieces
                .keys
                .get(key)
                .and_then(BTreeSet::first)
                .is_none_or(|&oldest| oldest >= started_before)
        })
        .await;
    }

    /// Completes once nothing is outstanding on any key.
    pub(crate) async fn all_settled(&self) {
        self.until(|pieces| pieces.keys.is_empty()).await;
    }

    /// How many pieces of work are outstanding, on all keys.
    #[cfg(feature = "testing")]
    pub(crate) fn count(&self) -> usize {
        lock_ignoring_poison(&self.state)
            .keys
            .values()
            .map(BTreeSet::len)
            .sum()
    }

    async fn until(&self, done: impl Fn(&Pieces) -> bool) {
        loop {
            let settled = self.settled.notified();
            let mut settled = std::pin::pin!(settled);
            // Enabled before the look at the counts, so that a settle in between is not missed.
            settled.as_mut().enable();
            if done(&lock_ignoring_poison(&self.state)) {
                return;
            }
            settled.await;
        }
    }
}

/// One piece of outstanding work, counted until dropped.
#[derive(Debug)]
pub(crate) struct Ticket {
    outstanding: Arc<Outstanding>,
    key: String,
    number: u64,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut pieces = lock_ignoring_poison(&self.outstanding.state);
        if let Some(numbers) = pieces.keys.get_mut(&self.key) {
            numbers.remove(&self.number);
            if numbers.is_empty() {
                pieces.keys.remove(&self.key);
            }
        }
        drop(pieces);
        self.outstanding.settled.notify_waiters();
    }
}

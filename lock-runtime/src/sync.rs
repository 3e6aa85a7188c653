//! Locking a std mutex that a panic may have poisoned, and work outstanding by key.

use std::collections::HashMap;
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
/// running), which others wait to see settle.
#[derive(Debug, Default)]
pub(crate) struct Outstanding {
    keys: Mutex<HashMap<String, usize>>,
    settled: Notify,
}

impl Outstanding {
    /// Counts one piece of work on `key` until the ticket returned is dropped.
    pub(crate) fn start(self: &Arc<Self>, key: &str) -> Ticket {
        *lock_ignoring_poison(&self.keys)
            .entry(key.to_owned())
            .or_default() += 1;
        Ticket {
            outstanding: self.clone(),
            key: key.to_owned(),
        }
    }

    /// Completes once nothing is outstanding on `key` (at once if nothing is).
    pub(crate) async fn settled(&self, key: &str) {
        self.until(|keys| !keys.contains_key(key)).await;
    }

    /// Completes once nothing is outstanding on any key.
    pub(crate) async fn all_settled(&self) {
        self.until(HashMap::is_empty).await;
    }

    /// How many pieces of work are outstanding, on all keys.
    pub(crate) fn count(&self) -> usize {
        lock_ignoring_poison(&self.keys).values().sum()
    }

    async fn until(&self, done: impl Fn(&HashMap<String, usize>) -> bool) {
        loop {
            let settled = self.settled.notified();
            let mut settled = std::pin::pin!(settled);
            // Enabled before the look at the counts, so that a settle in between is not missed.
            settled.as_mut().enable();
            if done(&lock_ignoring_poison(&self.keys)) {
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
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut keys = lock_ignoring_poison(&self.outstanding.keys);
        if let Some(count) = keys.get_mut(&self.key) {
            *count -= 1;
            if *count == 0 {
                keys.remove(&self.key);
            }
        }
        drop(keys);
        self.outstanding.settled.notify_waiters();
    }
}

//! Admission control: a bound on the keys a client sends attempts for to its store at once.
//! Past it, an acquisition of another key is refused at once ([`LockError::Overloaded`])
//! instead of queueing behind the others: under a load the store cannot answer in time, a
//! queue only makes every request late, and the waits it causes make requests meet on the
//! same keys and contend, which costs the store more per grant, until nothing is answered in
//! time.
//!
//! A key counts while one of its attempts is out (sent and not answered). An acquisition is
//! refused only as it starts, before any wait, and only for a key nobody else of this client
//! is acquiring: more requests of a key already asked for or waited on (the tasks of a flash
//! sale on one item) wait for its holder, not for the store, and an acquisition once admitted
//! keeps its place among the store's work, even past the bound.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::LockError;
use crate::sync::lock_ignoring_poison;

/// The default bound: attempts out for at most this many keys per client. A store that
/// answers 25,000 attempts a second (one Redis server on 2 cores shared with its client)
/// clears that many in about 5 ms, about the longest an admitted attempt then waits in line.
/// It also caps the new keys a client asks for per second at 128 per round trip.
pub const DEFAULT_MAX_IN_FLIGHT: usize = 128;

/// The keys a client acquires and has attempts out for, and the bound on them. Shared by its
/// clones.
#[derive(Debug)]
pub(crate) struct Admission {
    limit: AtomicUsize,
    keys: Arc<Keys>,
}

#[derive(Debug, Default)]
struct Keys {
    counts: Mutex<Counts>,
    /// The attempts out, for every key.
    attempts: AtomicUsize,
}

#[derive(Debug, Default)]
struct Counts {
    per_key: HashMap<String, KeyCount>,
    /// The keys with an attempt out: what the bound bounds.
    out: usize,
}

/// Of one key: the acquisitions under way, and their attempts out.
#[derive(Debug, Default)]
struct KeyCount {
    acquiring: usize,
    attempts: usize,
}

impl Default for Admission {
    fn default() -> Self {
        Admission {
            limit: AtomicUsize::new(DEFAULT_MAX_IN_FLIGHT),
            keys: Arc::default(),
        }
    }
}

impl Admission {
    /// Sets the bound; refuses zero, which would refuse every request.
    pub(crate) fn set_limit(&self, limit: usize) -> Result<(), LockError> {
        if limit == 0 {
            return Err(LockError::invalid_config(
                "max_in_flight must be at least 1 (it bounds the keys a client has attempts \
                 out for at its store at once); use usize::MAX for no bound",
            ));
        }
        self.limit.store(limit, Ordering::Relaxed);
        Ok(())
    }

    /// The bound now.
    pub(crate) fn limit(&self) -> usize {
        self.limit.load(Ordering::Relaxed)
    }

    /// The attempts out now, for every key.
    pub(crate) fn attempts(&self) -> usize {
        self.keys.attempts.load(Ordering::Acquire)
    }

    /// Counts an acquisition of `key` under way until the result is dropped: a key that
    /// another acquisition of this client is under way for is never refused.
    pub(crate) fn acquiring(&self, key: &str) -> Acquiring {
        let mut counts = lock_ignoring_poison(&self.keys.counts);
        counts.per_key.entry(key.to_owned()).or_default().acquiring += 1;
        Acquiring(Place {
            keys: self.keys.clone(),
            key: key.to_owned(),
        })
    }

    /// The error that refuses `acquiring` before its first attempt, if any: the bound is
    /// reached and no other acquisition of this client is under way for its key. A check, not
    /// a reservation: requests racing at the bound may pass it by a few.
    pub(crate) fn refusal(&self, acquiring: &Acquiring) -> Option<LockError> {
        let limit = self.limit();
        let counts = lock_ignoring_poison(&self.keys.counts);
        let key = &acquiring.0.key;
        let alone = counts
            .per_key
            .get(key)
            .is_none_or(|count| count.acquiring <= 1 && count.attempts == 0);
        (counts.out >= limit && alone).then(|| LockError::overloaded(key, limit))
    }

    /// Counts an attempt of `acquiring` out at the store until the result is dropped.
    pub(crate) fn admit(&self, acquiring: &Acquiring) -> AtStore {
        let mut counts = lock_ignoring_poison(&self.keys.counts);
        let key = &acquiring.0.key;
        let count = counts.per_key.entry(key.clone()).or_default();
        count.attempts += 1;
        if count.attempts == 1 {
            counts.out += 1;
        }
        self.keys.attempts.fetch_add(1, Ordering::AcqRel);
        AtStore(Place {
            keys: self.keys.clone(),
            key: key.clone(),
        })
    }
}

/// A key's entry, dropped with the last acquisition and attempt that count it.
#[derive(Debug)]
struct Place {
    keys: Arc<Keys>,
    key: String,
}

impl Place {
    fn leave(&self, change: impl FnOnce(&mut KeyCount, &mut usize)) {
        let mut counts = lock_ignoring_poison(&self.keys.counts);
        let Counts { per_key, out } = &mut *counts;
        if let Some(count) = per_key.get_mut(&self.key) {
            change(count, out);
            if count.acquiring == 0 && count.attempts == 0 {
                per_key.remove(&self.key);
            }
        }
    }
}

/// An acquisition under way: counted until dropped.
#[derive(Debug)]
pub(crate) struct Acquiring(Place);

impl Drop for Acquiring {
    fn drop(&mut self) {
        self.0.leave(|count, _| count.acquiring -= 1);
    }
}

/// One attempt out at the store: counted until dropped.
#[derive(Debug)]
pub(crate) struct AtStore(Place);

impl Drop for AtStore {
    fn drop(&mut self) {
        self.0.leave(|count, out| {
            count.attempts -= 1;
            if count.attempts == 0 {
                *out -= 1;
            }
        });
        self.0.keys.attempts.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bound_counts_keys_out_and_spares_keys_already_acquired() {
        let admission = Admission::default();
        admission.set_limit(2).unwrap();
        let (a, b, c) = (
            admission.acquiring("a"),
            admission.acquiring("b"),
            admission.acquiring("c"),
        );
        let first = admission.admit(&a);
        let _second = admission.admit(&b);
        let refused = admission.refusal(&c).expect("the bound is reached");
        assert!(refused.is_overloaded(), "{refused:?}");
        assert!(refused.to_string().contains("2 keys"), "{refused}");
        // Another acquisition of a key under way is spared.
        let another_a = admission.acquiring("a");
        assert!(admission.refusal(&another_a).is_none());
        let same_key = admission.admit(&another_a);
        assert_eq!(admission.attempts(), 3);
        drop((first, same_key));
        // `a` has no attempt out, but acquisitions under way: still spared.
        let third_a = admission.acquiring("a");
        assert!(admission.refusal(&third_a).is_none());
        drop((a, another_a, third_a));
        let later = admission.admit(&c);
        let d = admission.acquiring("d");
        assert!(admission.refusal(&d).is_some(), "b and c out, 2 allowed");
        drop(later);
        assert!(admission.refusal(&d).is_none());
    }

    #[test]
    fn every_entry_goes_with_what_counted_it() {
        let admission = Admission::default();
        let acquiring = admission.acquiring("k");
        let out = admission.admit(&acquiring);
        drop(acquiring);
        assert_eq!(lock_ignoring_poison(&admission.keys.counts).out, 1);
        drop(out);
        let counts = lock_ignoring_poison(&admission.keys.counts);
        assert!(counts.per_key.is_empty() && counts.out == 0, "{counts:?}");
    }

    #[test]
    fn a_bound_of_zero_is_refused() {
        let refused = Admission::default().set_limit(0).unwrap_err();
        assert!(refused.to_string().contains("at least 1"), "{refused}");
    }
}

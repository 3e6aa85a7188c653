//! Locking a std mutex that a panic may have poisoned.

use std::sync::{Mutex, MutexGuard};

/// Locks `mutex`, also after a panic poisoned it. Only for state that every update leaves
/// whole (a single insert, remove or field write): a panic elsewhere cannot have left it
/// half-done, and refusing it would turn one panic into a panic of every later caller.
pub(crate) fn lock_ignoring_poison<T: ?Sized>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

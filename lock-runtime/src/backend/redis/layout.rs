//! The key layout of the Redis backend: where each part of a lock lives. Every caller of
//! the scripts names keys through this module.
//!
//! For a client prefix `P` and a lock key `K`: the lock is the string `P{K}` holding
//! `<owner token>:<fencing token>` with the lease as its TTL (`<owner token>:released` while
//! `min_hold_ms` keeps it after its release); the fencing counter is `P{K}:fence`, which
//! expires a minute after the server time its token stands for (`grant.lua`); waiters queue
//! in `P{K}:queue` (a list of `<owner token> <lease ms>`) and `P{K}:queue:deadlines` (a sorted
//! set of the same entries, scored by when each place lapses), which expire with their last
//! waiter's place; `P{K}:released-by` names the owner of the last release for 30 s, so that a
//! release sent again after its reply was lost knows it released. A release hands the key to
//! the oldest waiter whose place lasts and publishes that on the channel `P{K}:released`
//! (`release.lua`). The braces put every key in one Redis Cluster hash slot, and `K` stays
//! readable for operators; a key starting with a brace gets one more `{` in front (`P{{}x}`),
//! since Redis would hash the whole key for an empty tag.

use crate::LockError;

/// The Redis key of the lock `key`: `<prefix>{<key>}`, the key in a hash tag so that every key
/// of the lock (`...:fence`, `...:queue`, `...:released-by`) lands in one Redis Cluster slot. Redis
/// hashes the text up to the first `}`, and hashes the whole key when that text is empty: a
/// key starting with `}` gets a `{` in front (`<prefix>{{}x}`), and so, to keep distinct keys
/// apart, does a key starting with `{`.
pub(crate) fn lock_key(prefix: &str, key: &str) -> String {
    let brace = if starts_with_brace(key) { "{" } else { "" };
    format!("{prefix}{{{brace}{key}}}")
}

fn starts_with_brace(text: &str) -> bool {
    text.starts_with(['{', '}'])
}

/// The lock key, its fencing counter, its queue and the queue's deadlines: the keys of the
/// acquire, inspect and forced-release scripts, in that order.
pub(crate) fn lock_keys(lock_key: String) -> [String; 4] {
    let fence_key = fence_key(&lock_key);
    let [queue_key, deadlines_key] = queue_keys(&lock_key);
    [lock_key, fence_key, queue_key, deadlines_key]
}

/// The keys of the waiters' queue next to `lock_key`.
pub(crate) fn queue_keys(lock_key: &str) -> [String; 2] {
    [
        format!("{lock_key}:queue"),
        format!("{lock_key}:queue:deadlines"),
    ]
}

/// The channel on which the releases of `lock_key` are announced.
pub(crate) fn release_channel(lock_key: &str) -> String {
    format!("{lock_key}:released")
}

/// The fencing counter.
pub(crate) fn fence_key(lock_key: &str) -> String {
    format!("{lock_key}:fence")
}

/// The owner of the last release, remembered for a release sent again.
pub(crate) fn released_by_key(lock_key: &str) -> String {
    format!("{lock_key}:released-by")
}

/// A prefix with a brace would move or empty the hash tag of every key.
pub(crate) fn check_prefix(prefix: &str) -> Result<(), LockError> {
    if prefix.contains(['{', '}']) {
        return Err(LockError::invalid_config(format!(
            "the key prefix {prefix:?} contains a brace: the lock key goes into a hash tag \
             (`<prefix>{{<key>}}`), and a brace in the prefix would split a lock's keys over \
             Redis Cluster slots; use a prefix without braces"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_starting_with_a_brace_get_one_more() {
        assert_eq!(lock_key("lock:", "stock:42"), "lock:{stock:42}");
        assert_eq!(lock_key("lock:", "}x"), "lock:{{}x}");
        assert_eq!(lock_key("lock:", "{x"), "lock:{{{x}");
    }
}

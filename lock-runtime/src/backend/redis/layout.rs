//! The key layout of the Redis backend: where each part of a lock lives. The scripts'
//! callers and the operator's listing and inspection all name keys through this module.
//!
//! For a client prefix `P` and a lock key `K`, the lock is the string `P{K}:v2` (the layout's
//! version, [`VERSION`], ends the name: clients of another layout never read it), holding a
//! mutex's state, fencing token, run, release time and owner with the lease as its TTL
//! (`lua/mutex.lua` describes them): an uncontended acquire and release touch this key alone,
//! and a release leaves it as a tombstone that carries the last fencing token to the next
//! grant and remembers the release for as long as a resend can take to arrive. Waiters
//! queue in `P{K}:v2:queue` (a list of `<owner token> <lease ms>`) and
//! `P{K}:v2:queue:deadlines` (a sorted set of the same entries, scored by when each place
//! lapses), which expire with their last waiter's place; a waiter marks the lock, so that its
//! release hands the key to the oldest waiter whose place lasts and publishes that on the
//! channel `P{K}:v2:released`. A shared kind (read/write lock, semaphore, segmented lock)
//! keeps its grants in `P{K}:v2` as a hash and their leases in the sorted set `P{K}:v2:leases`
//! (`shared.lua` describes both), its fencing counter in `P{K}:v2:fence` (which expires a
//! minute after the server time its token stands for) and each owner's release in
//! `P{K}:v2:released:<owner token>`; a segmented lock's shards marked exhausted are the set
//! `P{K}:v2:exhausted`, which stays until a refill empties it. The braces put every key in
//! one Redis Cluster hash slot, and `K` stays readable for operators; a key starting with a
//! brace gets one more `{` in front (`P{{}x}:v2`), since Redis would hash the whole key for an
//! empty tag.

use crate::LockError;
use crate::glob::{self, Glob, Start};

/// The version of this layout, which every lock key ends with (`:v2`) and the scripts'
/// library is named by: a layout that changes how a key is read gets another.
pub(crate) const VERSION: u32 = 2;

/// What every lock key ends with: its layout's version.
const VERSION_SUFFIX: &str = ":v2";

/// The Redis key of the lock `key`: `<prefix>{<key>}:v2`, the key in a hash tag so that every
/// key of the lock (`...:queue`, `...:leases`) lands in one Redis Cluster slot. Redis hashes the
/// text up to the first `}`, and hashes the whole key when that text is empty: a key starting
/// with `}` gets a `{` in front (`<prefix>{{}x}:v2`), and so, to keep distinct keys apart, does
/// a key starting with `{`.
pub(crate) fn lock_key(prefix: &str, key: &str) -> String {
    let brace = if starts_with_brace(key) { "{" } else { "" };
    format!("{prefix}{{{brace}{key}}}{VERSION_SUFFIX}")
}

fn starts_with_brace(text: &str) -> bool {
    text.starts_with(['{', '}'])
}

/// The lock key whose Redis key is `redis_key` (the inverse of [`lock_key`]), or `None` when
/// no lock key has that Redis key (another program's key under the prefix).
pub(crate) fn key_of(prefix: &str, redis_key: &str) -> Option<String> {
    let tagged = redis_key.strip_prefix(prefix)?.strip_prefix('{')?;
    let text = tagged.strip_suffix(VERSION_SUFFIX)?.strip_suffix('}')?;
    let key = match text.strip_prefix('{') {
        Some(rest) => rest,
        None => text,
    };
    (!key.is_empty() && lock_key(prefix, key) == redis_key).then(|| key.to_owned())
}

/// A `SCAN MATCH` pattern for the Redis keys of the lock keys that `pattern` matches. It may
/// match more (a pattern starting with one byte of several cannot say whether a brace was put
/// in front): filter what it finds with [`key_of`] and `pattern`. Only lock keys can match
/// it, never the keys kept next to them, which end in a suffix after the version.
pub(crate) fn scan_pattern(prefix: &str, pattern: &Glob) -> Vec<u8> {
    let (open, rendered) = match pattern.start() {
        Start::Byte(b'{' | b'}') => ("{{", pattern.render()),
        Start::Byte(_) | Start::Any => ("{", pattern.render()),
        Start::OneOf => ("{", pattern.render_with_any_first()),
    };
    let prefix = glob::escape(prefix);
    let close = format!("}}{VERSION_SUFFIX}");
    [
        prefix.as_bytes(),
        open.as_bytes(),
        &rendered,
        close.as_bytes(),
    ]
    .concat()
}

/// The lock key, its queue and the queue's deadlines: the keys of a mutex's acquire and
/// release scripts, in that order.
pub(crate) fn mutex_keys(lock_key: String) -> [String; 3] {
    let [queue_key, deadlines_key] = queue_keys(&lock_key);
    [lock_key, queue_key, deadlines_key]
}

/// The lock key, a shared kind's fencing counter, its queue and the queue's deadlines: the
/// keys of a shared kind's acquire, the inspection and the forced release, in that order.
pub(crate) fn lock_keys(lock_key: String) -> [String; 4] {
    let fence_key = fence_key(&lock_key);
    let [queue_key, deadlines_key] = queue_keys(&lock_key);
    [lock_key, fence_key, queue_key, deadlines_key]
}

/// [`lock_keys`], a shared kind's leases and a segmented lock's exhausted shards: the keys of
/// the operator's scripts, which read a lock of any kind.
pub(crate) fn operator_keys(lock_key: String) -> [String; 6] {
    let leases_key = leases_key(&lock_key);
    let exhausted_key = exhausted_key(&lock_key);
    let [lock_key, fence_key, queue_key, deadlines_key] = lock_keys(lock_key);
    [
        lock_key,
        fence_key,
        queue_key,
        deadlines_key,
        leases_key,
        exhausted_key,
    ]
}

/// The keys of the waiters' queue next to `lock_key`.
pub(crate) fn queue_keys(lock_key: &str) -> [String; 2] {
    [
        format!("{lock_key}:queue"),
        format!("{lock_key}:queue:deadlines"),
    ]
}

/// The leases of a shared kind's grants (read/write locks, semaphores, segmented locks), whose
/// lock key is a hash (see `lua/shared.lua`).
pub(crate) fn leases_key(lock_key: &str) -> String {
    format!("{lock_key}:leases")
}

/// The channel on which the releases of `lock_key` are announced.
pub(crate) fn release_channel(lock_key: &str) -> String {
    format!("{lock_key}:released")
}

/// The shards of a segmented lock marked exhausted (a set of shard numbers), kept until a
/// refill takes them out.
pub(crate) fn exhausted_key(lock_key: &str) -> String {
    format!("{lock_key}:exhausted")
}

/// Where single-flight calls leave their values (`action = Share`).
pub(crate) fn result_key(lock_key: &str) -> String {
    format!("{lock_key}:result")
}

/// A shared kind's fencing counter (a mutex carries its token in its value).
pub(crate) fn fence_key(lock_key: &str) -> String {
    format!("{lock_key}:fence")
}

/// Where `owner`'s release of a shared kind's grant is remembered, for a release sent again
/// (a mutex's tombstone remembers its own).
pub(crate) fn release_memory_key(lock_key: &str, owner: &str) -> String {
    format!("{lock_key}:released:{owner}")
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

    const KEYS: [&str; 8] = ["stock:42", "{a", "}x", "{", "}", "a}b", "{{", r"a\:b"];

    #[test]
    fn key_of_inverts_lock_key() {
        for key in KEYS {
            let redis_key = lock_key("lock:", key);
            assert_eq!(
                key_of("lock:", &redis_key).as_deref(),
                Some(key),
                "{redis_key}"
            );
        }
        assert_eq!(lock_key("lock:", "}x"), "lock:{{}x}:v2");
        for foreign in [
            "lock:{}:v2",
            "lock:{{a}:v2",
            "lock:{a:v2",
            "other:{a}:v2",
            "lock:{a}:v2:fence",
            "lock:{{}:v2",
            "lock:{a}",
            "lock:{a}:v1",
        ] {
            assert_eq!(key_of("lock:", foreign), None, "{foreign}");
        }
    }

    /// The scan pattern finds every lock key the pattern matches, however it starts (a
    /// pattern starting with a byte finds exactly those), and none of the keys kept next to
    /// a lock.
    #[test]
    fn scan_patterns_find_every_matching_lock_key_and_no_kept_key() {
        for (pattern, prefix) in [
            ("*", "lock:"),
            ("?", "l*ck:"),
            ("[{}]*", "lock:"),
            ("}*", "[x]:"),
            ("{*", "lock:"),
            ("stock:*", "lock:"),
            ("*b", "lock:"),
        ] {
            let glob = Glob::parse(pattern).unwrap();
            let scan = String::from_utf8(scan_pattern(prefix, &glob)).unwrap();
            let scan = Glob::parse(&scan).unwrap();
            for key in KEYS {
                let redis_key = lock_key(prefix, key);
                if glob.matches(key) {
                    assert!(scan.matches(&redis_key), "{pattern}: {redis_key} missed");
                } else if matches!(glob.start(), Start::Byte(_)) {
                    assert!(!scan.matches(&redis_key), "{pattern}: {redis_key} found");
                }
                let kept = fence_key(&redis_key);
                assert!(!scan.matches(&kept), "{pattern}: {kept} found");
            }
        }
    }
}

//! Randomness: owner tokens from the OS source, cheap jitter from a seeded generator.

use std::cell::Cell;

/// A fresh owner token: a random UUID v4 (OS random source), 32 hex digits.
pub(crate) fn owner_token() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

thread_local! {
    static JITTER_STATE: Cell<u64> = Cell::new(uuid::Uuid::new_v4().as_u64_pair().0 | 1);
}

/// A uniform number in `[0, 1)` for jitter (xorshift64*; not for secrets).
pub(crate) fn unit() -> f64 {
    JITTER_STATE.with(|state| {
        let mut x = state.get();
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        state.set(x);
        (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
    })
}

/// Seeds this thread's jitter generator: a simulation on a current-thread runtime then
/// draws the same pauses on every run.
#[cfg(feature = "testing")]
pub(crate) fn seed_jitter(seed: u64) {
    JITTER_STATE.with(|state| state.set(seed | 1));
}

/// A uniform number in `0..bound` (0 for a bound of 0), from the jitter generator: where a
/// segmented lock starts looking for a free shard.
pub(crate) fn below(bound: u32) -> u32 {
    (unit() * f64::from(bound)) as u32
}

//! What a lock request asks for: lease length and retry policy.

use std::time::Duration;

use crate::LockError;

/// The longest lease accepted, in milliseconds (24 hours). A lease is the window in which a
/// crashed holder goes unnoticed; longer ones are almost always a unit mistake.
pub const MAX_TTL_MS: u64 = 86_400_000;
/// Lease length when none is given (Redisson's and lock4j's default).
pub const DEFAULT_TTL_MS: u64 = 30_000;
/// Attempts after the first failed one, when none is given.
pub const DEFAULT_RETRY: u32 = 5;
/// Longest pause between attempts when none is given.
pub const DEFAULT_SLEEP_MS: u64 = 200;

/// Lease length and retry policy of one lock request.
///
/// `GiveUp` makes one attempt. `Continue` (the default) makes up to `1 + retry` attempts,
/// pausing between two of them for a random time between `sleep_ms / 2` and `sleep_ms`
/// (never longer than the holder's remaining lease), so the total wait is at most
/// `retry × sleep_ms`. Only contention and backend failures are retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockOptions {
    ttl_ms: u64,
    retry: u32,
    sleep_ms: u64,
    give_up: bool,
}

impl Default for LockOptions {
    fn default() -> Self {
        Self::new()
    }
}

impl LockOptions {
    /// The defaults: 30 s lease, `Continue` with 5 retries at most 200 ms apart.
    pub const fn new() -> Self {
        LockOptions {
            ttl_ms: DEFAULT_TTL_MS,
            retry: DEFAULT_RETRY,
            sleep_ms: DEFAULT_SLEEP_MS,
            give_up: false,
        }
    }

    /// Lease length in milliseconds, `1..=MAX_TTL_MS`.
    pub const fn ttl_ms(mut self, ttl_ms: u64) -> Self {
        self.ttl_ms = ttl_ms;
        self
    }

    /// Attempts after the first failed one; switches to `Continue`.
    pub const fn retry(mut self, retry: u32) -> Self {
        self.retry = retry;
        self.give_up = false;
        self
    }

    /// Longest pause between two attempts, in milliseconds (at least 1).
    pub const fn sleep_ms(mut self, sleep_ms: u64) -> Self {
        self.sleep_ms = sleep_ms;
        self
    }

    /// One attempt, then `NotAcquired` (ShedLock's skip, the seed's `GIVEUP`).
    pub const fn give_up(mut self) -> Self {
        self.give_up = true;
        self
    }

    /// The lease length.
    pub const fn ttl(&self) -> Duration {
        Duration::from_millis(self.ttl_ms)
    }

    /// How many times the backend is asked at most.
    pub const fn attempts(&self) -> u32 {
        if self.give_up {
            1
        } else {
            self.retry.saturating_add(1)
        }
    }

    /// The pause before the next attempt: uniform in `[sleep_ms / 2, sleep_ms]` so that
    /// waiters spread out, cut short when the holder's lease ends sooner.
    pub(crate) fn pause(&self, holder_remaining: Option<Duration>) -> Duration {
        let max = Duration::from_millis(self.sleep_ms);
        let pause = max.mul_f64(0.5 + 0.5 * crate::random::unit());
        match holder_remaining {
            Some(remaining) => pause.min(remaining + Duration::from_millis(1)),
            None => pause,
        }
    }

    pub(crate) fn validate(&self) -> Result<(), LockError> {
        if self.ttl_ms == 0 || self.ttl_ms > MAX_TTL_MS {
            return Err(LockError::config(format!(
                "ttl_ms = {} is out of range: a lease must be 1..={MAX_TTL_MS} ms",
                self.ttl_ms
            )));
        }
        if self.sleep_ms == 0 || self.sleep_ms > MAX_TTL_MS {
            return Err(LockError::config(format!(
                "sleep_ms = {} is out of range: the pause between attempts must be \
                 1..={MAX_TTL_MS} ms",
                self.sleep_ms
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attempts_follow_the_action() {
        assert_eq!(LockOptions::new().attempts(), 6);
        assert_eq!(LockOptions::new().retry(0).attempts(), 1);
        assert_eq!(LockOptions::new().retry(3).give_up().attempts(), 1);
        assert_eq!(LockOptions::new().give_up().retry(2).attempts(), 3);
    }

    #[test]
    fn pauses_stay_within_bounds() {
        let options = LockOptions::new().sleep_ms(100);
        for _ in 0..1000 {
            let pause = options.pause(None);
            assert!(pause >= Duration::from_millis(50) && pause <= Duration::from_millis(100));
        }
        assert_eq!(
            options.pause(Some(Duration::from_millis(3))),
            Duration::from_millis(4)
        );
    }

    #[test]
    fn out_of_range_values_are_rejected() {
        assert!(LockOptions::new().ttl_ms(0).validate().is_err());
        assert!(
            LockOptions::new()
                .ttl_ms(MAX_TTL_MS + 1)
                .validate()
                .is_err()
        );
        assert!(LockOptions::new().sleep_ms(0).validate().is_err());
        assert!(LockOptions::new().ttl_ms(MAX_TTL_MS).validate().is_ok());
    }
}

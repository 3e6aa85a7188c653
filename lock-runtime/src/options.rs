//! What a lock request asks for: lease, retry policy, renewal and hold bounds.

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

/// What a `#[redis_lock]` body does when its lease is lost while it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum OnLost {
    /// Drop the body at its next `.await` and return `Err(LockError::Lost { .. })`; also
    /// return it when the body ended but its release found the key gone or taken.
    #[default]
    Abort,
    /// Let the body finish and return its output (a warning is logged). The body learns of
    /// the loss from `fencelock::is_lost()` or `fencelock::lost()`; its fencing token is stale
    /// from then on.
    Continue,
}

/// Lease, waiting policy and hold bounds of one lock request.
///
/// `GiveUp` makes one attempt. `Continue` (the default) waits after a failed attempt for a
/// release notification, at most `sleep_ms` (jittered in `[sleep_ms / 2, sleep_ms]`) or until
/// the holder's lease ends, and tries again: at most `retry` attempts may follow a pause that
/// no notification ended (so without notifications, `1 + retry` attempts), and the whole
/// wait lasts at most `wait_ms` (default `retry × sleep_ms`). Only contention and backend
/// failures are retried.
///
/// While the lock is held the lease is renewed every `ttl_ms / 3` (unless `renew(false)`),
/// for at most `max_hold_ms`; `min_hold_ms` keeps the key taken after an early release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockOptions {
    ttl_ms: u64,
    retry: Option<u32>,
    sleep_ms: u64,
    wait_ms: Option<u64>,
    give_up: bool,
    fair: bool,
    renew: bool,
    on_lost: OnLost,
    min_hold_ms: u64,
    max_hold_ms: Option<u64>,
}

impl Default for LockOptions {
    fn default() -> Self {
        Self::new()
    }
}

impl LockOptions {
    /// The defaults: 30 s lease renewed while held, `Continue` with 5 retries at most
    /// 200 ms apart, abort on loss, no hold bounds.
    pub const fn new() -> Self {
        LockOptions {
            ttl_ms: DEFAULT_TTL_MS,
            retry: None,
            sleep_ms: DEFAULT_SLEEP_MS,
            wait_ms: None,
            give_up: false,
            fair: false,
            renew: true,
            on_lost: OnLost::Abort,
            min_hold_ms: 0,
            max_hold_ms: None,
        }
    }

    /// Lease length in milliseconds, `1..=MAX_TTL_MS`. It is also the time in which a
    /// crashed holder's lock frees itself.
    pub const fn ttl_ms(mut self, ttl_ms: u64) -> Self {
        self.ttl_ms = ttl_ms;
        self
    }

    /// Attempts after the first failed one that follow a wait no release notification ended
    /// (default 5); switches to `Continue`. Attempts woken by a notification are free.
    pub const fn retry(mut self, retry: u32) -> Self {
        self.retry = Some(retry);
        self.give_up = false;
        self
    }

    /// Longest pause between two attempts, in milliseconds (at least 1).
    pub const fn sleep_ms(mut self, sleep_ms: u64) -> Self {
        self.sleep_ms = sleep_ms;
        self
    }

    /// The longest time to wait for the lock in all (default `retry × sleep_ms`); switches to
    /// `Continue`. Given alone, it is the only bound: `retry` then defaults to unlimited. It
    /// bounds the whole call, also while the backend is slow: an attempt or a subscription
    /// still out then is abandoned (and what it may still do cleaned up in the background).
    pub const fn wait_ms(mut self, wait_ms: u64) -> Self {
        self.wait_ms = Some(wait_ms);
        self.give_up = false;
        self
    }

    /// Serve waiters in arrival order, across processes (a queue in the backend). Costs a
    /// queue update per attempt, and a waiter that died holds the queue up for at most
    /// `3 × sleep_ms`.
    pub const fn fair(mut self, fair: bool) -> Self {
        self.fair = fair;
        self
    }

    /// One attempt, then `NotAcquired` (ShedLock's skip, the seed's `GIVEUP`).
    pub const fn give_up(mut self) -> Self {
        self.give_up = true;
        self
    }

    /// Renew the lease every `ttl_ms / 3` while the lock is held (default `true`). Without
    /// renewal the lease simply ends after `ttl_ms`, and the holder counts it as lost then.
    pub const fn renew(mut self, renew: bool) -> Self {
        self.renew = renew;
        self
    }

    /// What a `#[redis_lock]` body does when the lease is lost (default [`OnLost::Abort`]).
    pub const fn on_lost(mut self, on_lost: OnLost) -> Self {
        self.on_lost = on_lost;
        self
    }

    /// Keep the key taken for at least this long after acquiring, even if released sooner
    /// (ShedLock's `lockAtLeastFor`): a release before then only shortens the lease.
    pub const fn min_hold_ms(mut self, min_hold_ms: u64) -> Self {
        self.min_hold_ms = min_hold_ms;
        self
    }

    /// Stop renewing after this long; the lock then counts as lost (the body is stopped as
    /// on any loss), so a hung holder cannot keep a lock forever. At least `ttl_ms`.
    pub const fn max_hold_ms(mut self, max_hold_ms: u64) -> Self {
        self.max_hold_ms = Some(max_hold_ms);
        self
    }

    /// The lease length.
    pub const fn ttl(&self) -> Duration {
        Duration::from_millis(self.ttl_ms)
    }

    /// Whether the lease is renewed while held.
    pub const fn renews(&self) -> bool {
        self.renew
    }

    /// What a body does on loss.
    pub const fn lost_policy(&self) -> OnLost {
        self.on_lost
    }

    /// The least time the key stays taken after acquiring.
    pub const fn min_hold(&self) -> Duration {
        Duration::from_millis(self.min_hold_ms)
    }

    /// The longest the lease is renewed, if bounded.
    pub const fn max_hold(&self) -> Option<Duration> {
        match self.max_hold_ms {
            Some(ms) => Some(Duration::from_millis(ms)),
            None => None,
        }
    }

    /// Whether waiters are served in arrival order.
    pub const fn is_fair(&self) -> bool {
        self.fair
    }

    /// Whether the request makes a single attempt.
    pub const fn gives_up(&self) -> bool {
        self.give_up
    }

    /// How many attempts may follow a wait that no release notification ended.
    pub const fn unnotified_retries(&self) -> u32 {
        match (self.retry, self.wait_ms) {
            (Some(retry), _) => retry,
            (None, Some(_)) => u32::MAX,
            (None, None) => DEFAULT_RETRY,
        }
    }

    /// `wait_ms` when given: then the call ends by it, cutting an attempt or a subscription
    /// that is still out (the default bound, `retry × sleep_ms`, only ends the waiting
    /// between attempts, which may be none at all with `retry = 0`).
    pub const fn wait_bound(&self) -> Option<Duration> {
        match (self.wait_ms, self.give_up) {
            (Some(wait_ms), false) => Some(Duration::from_millis(wait_ms)),
            _ => None,
        }
    }

    /// The longest time to wait in all: `wait_ms`, else `retry × sleep_ms`.
    pub const fn wait(&self) -> Duration {
        match self.wait_ms {
            Some(wait_ms) => Duration::from_millis(wait_ms),
            None => {
                let retry = match self.retry {
                    Some(retry) => retry,
                    None => DEFAULT_RETRY,
                };
                Duration::from_millis(self.sleep_ms.saturating_mul(retry as u64))
            }
        }
    }

    /// How long a fair waiter's place in the queue lasts without an attempt renewing it.
    pub(crate) fn queue_timeout(&self) -> Duration {
        Duration::from_millis(self.sleep_ms.saturating_mul(3))
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
        let in_range = |name: &str, value: u64| {
            if (1..=MAX_TTL_MS).contains(&value) {
                Ok(())
            } else {
                Err(LockError::config(format!(
                    "{name} = {value} is out of range: it must be 1..={MAX_TTL_MS} ms"
                )))
            }
        };
        in_range("ttl_ms", self.ttl_ms)?;
        in_range("sleep_ms", self.sleep_ms)?;
        if let Some(wait_ms) = self.wait_ms {
            in_range("wait_ms", wait_ms)?;
        }
        if self.min_hold_ms > 0 {
            in_range("min_hold_ms", self.min_hold_ms)?;
        }
        if !self.renew && self.min_hold_ms > self.ttl_ms {
            return Err(LockError::config(format!(
                "min_hold_ms = {} exceeds ttl_ms = {} without renewal: the lease ends first; \
                 raise ttl_ms or turn renewal on",
                self.min_hold_ms, self.ttl_ms
            )));
        }
        if let Some(max_hold_ms) = self.max_hold_ms {
            if !self.renew {
                return Err(LockError::config(
                    "max_hold_ms bounds renewal, and renewal is off; remove max_hold_ms or \
                     turn renewal on",
                ));
            }
            if max_hold_ms < self.ttl_ms {
                return Err(LockError::config(format!(
                    "max_hold_ms = {max_hold_ms} is below ttl_ms = {}: the first lease already \
                     lasts longer; raise max_hold_ms or lower ttl_ms",
                    self.ttl_ms
                )));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waiting_bounds_follow_retry_sleep_and_wait() {
        let options = LockOptions::new();
        assert_eq!(options.wait(), Duration::from_millis(1_000));
        assert_eq!(options.unnotified_retries(), 5);
        assert_eq!(
            options.retry(3).sleep_ms(10).wait(),
            Duration::from_millis(30)
        );
        assert_eq!(options.wait_ms(30_000).wait(), Duration::from_secs(30));
        assert_eq!(options.wait_ms(30_000).unnotified_retries(), u32::MAX);
        assert_eq!(options.wait_ms(30_000).retry(2).unnotified_retries(), 2);
        assert!(options.retry(3).give_up().gives_up());
        assert!(!options.give_up().retry(2).gives_up());
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
        let ok = LockOptions::new();
        assert!(ok.ttl_ms(0).validate().is_err());
        assert!(ok.ttl_ms(MAX_TTL_MS + 1).validate().is_err());
        assert!(ok.sleep_ms(0).validate().is_err());
        assert!(ok.ttl_ms(MAX_TTL_MS).validate().is_ok());
        assert!(ok.ttl_ms(1_000).max_hold_ms(999).validate().is_err());
        assert!(ok.ttl_ms(1_000).max_hold_ms(1_000).validate().is_ok());
        assert!(ok.renew(false).max_hold_ms(60_000).validate().is_err());
        assert!(
            ok.renew(false)
                .ttl_ms(1_000)
                .min_hold_ms(1_001)
                .validate()
                .is_err()
        );
        assert!(ok.ttl_ms(1_000).min_hold_ms(5_000).validate().is_ok());
    }
}

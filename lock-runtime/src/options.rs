//! What a lock request asks for: lease, retry policy, renewal and hold bounds.

use std::time::Duration;

use crate::LockError;

pub use fencelock_options::{DEFAULT_RETRY, DEFAULT_SLEEP_MS, DEFAULT_TTL_MS, MAX_TTL_MS};
use fencelock_options::{Settings, Value};

/// What a request does when another owner holds the lock (the attribute's `action`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Action {
    /// One attempt, then [`LockError::NotAcquired`] (ShedLock's skip).
    GiveUp,
    /// Keep trying, as `retry`, `sleep_ms` and `wait_ms` say.
    #[default]
    Continue,
}

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

/// Lease, waiting policy and hold bounds of one lock request: the arguments of
/// `#[redis_lock]` (see [its table](https://docs.rs/fencelock/latest/fencelock/attr.redis_lock.html)) as a value, e.g. a
/// `const` that several locks share. [`LockRequest`](crate::LockRequest) has the same
/// setters.
///
/// Values are checked when a request is acquired, by the same rules that the attribute
/// applies to literals at compile time; a broken rule is [`LockError::InvalidConfig`].
///
/// ```
/// use fencelock::LockOptions;
///
/// const REPORT_LOCK: LockOptions = LockOptions::new().ttl_ms(60_000).give_up();
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockOptions {
    ttl_ms: Option<u64>,
    retry: Option<u32>,
    sleep_ms: Option<u64>,
    wait_ms: Option<u64>,
    min_hold_ms: Option<u64>,
    max_hold_ms: Option<u64>,
    pub(crate) give_up: bool,
    pub(crate) fair: bool,
    pub(crate) renew: bool,
    pub(crate) on_lost: OnLost,
    pub(crate) min_replicas: u32,
    /// The `lock` of spans and metrics; empty when not named (then the key's namespace).
    pub(crate) name: &'static str,
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
            ttl_ms: None,
            retry: None,
            sleep_ms: None,
            wait_ms: None,
            min_hold_ms: None,
            max_hold_ms: None,
            give_up: false,
            fair: false,
            renew: true,
            on_lost: OnLost::Abort,
            min_replicas: 0,
            name: "",
        }
    }
}

/// Defines each setter once: as a `const fn` on [`LockOptions`] with the body given here,
/// and, through `request_setters!`, as the same method on each request type.
macro_rules! setters {
    ($(
        $(#[$doc:meta])*
        fn $name:ident(mut $this:ident $(, $arg:ident: $ty:ty)?) $body:block
    )*) => {
        impl LockOptions {
            $(
                $(#[$doc])*
                pub const fn $name(mut $this $(, $arg: $ty)?) -> Self {
                    $body
                    $this
                }
            )*
        }

        request_setters!(crate::LockRequest; $($(#[$doc])* fn $name($($arg: $ty)?))*);
        request_setters!(crate::MultiLockRequest; $($(#[$doc])* fn $name($($arg: $ty)?))*);
    };
}

/// `options` and every setter of [`LockOptions`] on a request type with an `options` field:
/// [`LockRequest`](crate::LockRequest) and [`MultiLockRequest`](crate::MultiLockRequest).
macro_rules! request_setters {
    ($request:path; $($(#[$doc:meta])* fn $name:ident($($arg:ident: $ty:ty)?))*) => {
        impl $request {
            /// Replaces all options at once, e.g. with a `const` [`LockOptions`] that several
            /// locks share (a request for several keys applies them to each). The other
            /// setters are those of [`LockOptions`].
            pub fn options(mut self, options: LockOptions) -> Self {
                self.options = options;
                self
            }

            $(
                $(#[$doc])*
                pub fn $name(mut self $(, $arg: $ty)?) -> Self {
                    self.options = self.options.$name($($arg)?);
                    self
                }
            )*
        }
    };
}

setters! {
    /// Lease length in milliseconds, 1 to [`MAX_TTL_MS`] (default 30 000). It is also the
    /// time in which a crashed holder's lock frees itself.
    fn ttl_ms(mut self, ttl_ms: u64) {
        self.ttl_ms = Some(ttl_ms);
    }

    /// Attempts after the first failed one that follow a pause no release notification
    /// ended (default 5; unlimited when only `wait_ms` is given); switches to `Continue`.
    /// Attempts woken by a notification are free.
    fn retry(mut self, retry: u32) {
        self.retry = Some(retry);
        self.give_up = false;
    }

    /// Longest pause between two attempts when no release notification comes, 1 to
    /// [`MAX_TTL_MS`] ms (default 200). Pauses are jittered in `[sleep_ms / 2, sleep_ms]`
    /// and end early when the holder's lease does.
    fn sleep_ms(mut self, sleep_ms: u64) {
        self.sleep_ms = Some(sleep_ms);
    }

    /// The longest time to wait for the lock in all, 1 to [`MAX_TTL_MS`] ms, at least
    /// `sleep_ms` if that is given (default `retry × sleep_ms`); switches to `Continue`.
    /// Given alone, it is the only bound: `retry` then defaults to unlimited. It bounds the
    /// whole call, also while the backend is slow: an attempt or a subscription still out
    /// then is abandoned (and what it may still do is cleaned up in the background).
    fn wait_ms(mut self, wait_ms: u64) {
        self.wait_ms = Some(wait_ms);
        self.give_up = false;
    }

    /// Serve waiters strictly in arrival order, across processes (default `false`). In
    /// either mode a release hands the key to the oldest waiter in line; fair mode also
    /// keeps a key that became free without a release (a lease that ran out) for the oldest
    /// waiter, where the default mode lets anyone take it. A waiter that died holds the line
    /// up for at most `3 × sleep_ms`.
    fn fair(mut self, fair: bool) {
        self.fair = fair;
    }

    /// One attempt, then [`LockError::NotAcquired`] if someone else holds the lock
    /// (ShedLock's skip); the same as `action(Action::GiveUp)`.
    fn give_up(mut self) {
        self.give_up = true;
    }

    /// [`Action::GiveUp`] (one attempt) or [`Action::Continue`] (the default: keep trying as
    /// configured), e.g. to undo the `give_up()` of a shared base.
    fn action(mut self, action: Action) {
        self.give_up = matches!(action, Action::GiveUp);
    }

    /// Renew the lease every `ttl_ms / 3` while the lock is held (default `true`). Without
    /// renewal the lease simply ends after `ttl_ms`, and the holder counts it as lost then.
    fn renew(mut self, renew: bool) {
        self.renew = renew;
    }

    /// What a `#[redis_lock]` body does when the lease is lost (default [`OnLost::Abort`]).
    /// A guard from `acquire` is not stopped by anything: it reports the loss through
    /// [`LockGuard::lost`](crate::LockGuard::lost) and its release, whatever this says.
    fn on_lost(mut self, on_lost: OnLost) {
        self.on_lost = on_lost;
    }

    /// Keep the key taken for at least this long after acquiring, even if released sooner
    /// (ShedLock's `lockAtLeastFor`): a release before then only shortens the lease. 1 to
    /// [`MAX_TTL_MS`] ms, at most `ttl_ms` without renewal.
    fn min_hold_ms(mut self, min_hold_ms: u64) {
        self.min_hold_ms = Some(min_hold_ms);
    }

    /// Count a grant only once this many replicas of the Redis master have it (default 0):
    /// after the grant the client sends `WAIT`, on a connection of its own, for at most half
    /// the response timeout, and takes the grant back if fewer replicas acknowledged it (a
    /// `LockError::Backend` naming the count, retried as the request's options say). This
    /// narrows the window in which a failover to a replica that never saw the grant lets a
    /// second client take the key; it cannot close it (replication stays asynchronous: the
    /// acknowledging replica may not be the one promoted, and renewals are not waited for).
    /// A key handed over by a release is confirmed by an attempt of its own. The memory
    /// backend has no replicas and refuses a non-zero count.
    fn min_replicas(mut self, min_replicas: u32) {
        self.min_replicas = min_replicas;
    }

    /// Names the lock in spans and metrics (their `lock` field and label): one name for
    /// every key of a kind of lock, such as the key template `stock:{sku}`, which is what
    /// `#[redis_lock]` sets. Keys themselves are never metric labels: there are too many. A
    /// request not named is labelled with its key's namespace (the text before the first
    /// `:`, `stock` for `stock:42`), for the first
    /// [`UNNAMED_LABELS`](crate::telemetry::UNNAMED_LABELS) namespaces of the process, then
    /// [`OTHER_LABEL`](crate::telemetry::OTHER_LABEL).
    fn name(mut self, name: &'static str) {
        self.name = name;
    }

    /// Stop renewing after this long; the lock then counts as lost (the body is stopped as
    /// on any loss), so a hung holder cannot keep a lock forever. At least `ttl_ms`; only
    /// with renewal.
    fn max_hold_ms(mut self, max_hold_ms: u64) {
        self.max_hold_ms = Some(max_hold_ms);
    }
}

// What the runtime reads. A getter drops the setter's `_ms` because it returns a `Duration`.
impl LockOptions {
    /// The lease length.
    pub(crate) const fn ttl(&self) -> Duration {
        Duration::from_millis(or(self.ttl_ms, DEFAULT_TTL_MS))
    }

    /// The least time the key stays taken after acquiring.
    pub(crate) const fn min_hold(&self) -> Duration {
        Duration::from_millis(or(self.min_hold_ms, 0))
    }

    /// The longest the lease is renewed, if bounded.
    pub(crate) const fn max_hold(&self) -> Option<Duration> {
        match self.max_hold_ms {
            Some(ms) => Some(Duration::from_millis(ms)),
            None => None,
        }
    }

    /// How many attempts may follow a wait that no release notification ended.
    pub(crate) const fn unnotified_retries(&self) -> u32 {
        match (self.retry, self.wait_ms) {
            (Some(retry), _) => retry,
            (None, Some(_)) => u32::MAX,
            (None, None) => DEFAULT_RETRY,
        }
    }

    /// `wait_ms` when given: then the call ends by it, cutting an attempt or a subscription
    /// that is still out (the default bound, `retry × sleep_ms`, only ends the waiting
    /// between attempts, which may be none at all with `retry = 0`).
    pub(crate) const fn wait_bound(&self) -> Option<Duration> {
        match (self.wait_ms, self.give_up) {
            (Some(wait_ms), false) => Some(Duration::from_millis(wait_ms)),
            _ => None,
        }
    }

    /// The longest time to wait in all: `wait_ms`, else `retry × sleep_ms`.
    pub(crate) const fn wait(&self) -> Duration {
        match self.wait_ms {
            Some(wait_ms) => Duration::from_millis(wait_ms),
            None => Duration::from_millis(
                self.pause_ms()
                    .saturating_mul(or(self.retry, DEFAULT_RETRY) as u64),
            ),
        }
    }

    /// These options for the next request of a call that started at `started` (the next key
    /// of `lock_all`, the next shard of a body that found its shard exhausted): its wait is
    /// what is left of the whole call's `wait_ms`, at least a millisecond, so that it is
    /// still asked for once. Without `wait_ms`, the whole call's wait is `retry × sleep_ms`,
    /// so the retries do not start again for each request.
    pub(crate) fn left_since(self, started: tokio::time::Instant) -> Self {
        if self.give_up {
            return self;
        }
        let left = self.wait().saturating_sub(started.elapsed()).as_millis();
        self.within(u64::try_from(left).unwrap_or(u64::MAX).max(1))
    }

    /// These options for a call's request that follows its wait out of line, which started
    /// at `started`: with `wait_ms`, [`left_since`](Self::left_since); without, the retries
    /// that fit in what is left of `retry × sleep_ms`, so that, as for any call without
    /// `wait_ms`, the wait bounds the waiting between attempts, never an attempt still out.
    pub(crate) fn retries_left_since(self, started: tokio::time::Instant) -> Self {
        if self.wait_ms.is_some() || self.give_up {
            return self.left_since(started);
        }
        let left = self.wait().saturating_sub(started.elapsed()).as_millis();
        let left = u64::try_from(left).unwrap_or(u64::MAX);
        let retries = left.div_ceil(self.pause_ms().max(1));
        self.retry(u32::try_from(retries).unwrap_or(u32::MAX))
    }

    /// The options of one key of a `lock_all` whose whole wait has `left_ms` left: the wait
    /// cut to it, and a pause given cut to the wait, so that the two never contradict.
    pub(crate) const fn within(mut self, left_ms: u64) -> Self {
        // A wait of `retry` × `sleep_ms` may be longer than any `wait_ms` may be.
        let left_ms = if left_ms < MAX_TTL_MS {
            left_ms
        } else {
            MAX_TTL_MS
        };
        self.wait_ms = Some(left_ms);
        if let Some(sleep_ms) = self.sleep_ms
            && sleep_ms > left_ms
        {
            self.sleep_ms = Some(left_ms);
        }
        self
    }

    const fn pause_ms(&self) -> u64 {
        or(self.sleep_ms, DEFAULT_SLEEP_MS)
    }

    /// How long a waiter's place in line lasts without an attempt renewing it.
    pub(crate) const fn queue_timeout(&self) -> Duration {
        Duration::from_millis(self.pause_ms().saturating_mul(3))
    }

    /// The pause before the next attempt: uniform in `[sleep_ms / 2, sleep_ms]` so that
    /// waiters spread out, cut short when the holder's lease ends sooner.
    pub(crate) fn pause(&self, holder_remaining: Option<Duration>) -> Duration {
        let max = Duration::from_millis(self.pause_ms());
        let pause = max.mul_f64(0.5 + 0.5 * crate::random::unit());
        match holder_remaining {
            Some(remaining) => pause.min(remaining + Duration::from_millis(1)),
            None => pause,
        }
    }

    /// Applies the rules of `fencelock-options`, as the attribute does at compile time.
    pub(crate) fn validate(&self) -> Result<(), LockError> {
        let settings = Settings {
            ttl_ms: self.ttl_ms.into(),
            sleep_ms: self.sleep_ms.into(),
            wait_ms: self.wait_ms.into(),
            renew: Value::Given(self.renew),
            give_up: Value::Given(self.give_up),
            min_hold_ms: self.min_hold_ms.into(),
            max_hold_ms: self.max_hold_ms.into(),
        };
        match settings.problems().into_iter().next() {
            Some(problem) => Err(LockError::invalid_config(problem.message)),
            None => Ok(()),
        }
    }
}

/// `value`, else `default` (`Option::unwrap_or` is not `const`).
const fn or<T: Copy>(value: Option<T>, default: T) -> T {
    match value {
        Some(value) => value,
        None => default,
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
        assert!(options.retry(3).give_up().give_up);
        assert!(!options.give_up().retry(2).give_up);
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
    fn requests_break_the_rules_the_attribute_checks() {
        let ok = LockOptions::new();
        assert!(ok.validate().is_ok());
        assert!(ok.ttl_ms(MAX_TTL_MS).validate().is_ok());
        for broken in [
            ok.ttl_ms(0),
            ok.ttl_ms(MAX_TTL_MS + 1),
            ok.sleep_ms(0),
            ok.min_hold_ms(0),
            ok.ttl_ms(1_000).max_hold_ms(999),
            ok.renew(false).max_hold_ms(60_000),
            ok.sleep_ms(500).wait_ms(100),
        ] {
            assert!(
                matches!(broken.validate(), Err(LockError::InvalidConfig { .. })),
                "{broken:?}"
            );
        }
        // One attempt never waits: its `wait_ms` (say, from a shared base) is not compared.
        assert!(ok.wait_ms(100).sleep_ms(500).give_up().validate().is_ok());
        let error = ok.ttl_ms(1_000).max_hold_ms(999).validate().unwrap_err();
        assert!(
            error
                .to_string()
                .contains("`max_hold_ms` (999) is below `ttl_ms` (1_000)"),
            "{error}"
        );
    }
}

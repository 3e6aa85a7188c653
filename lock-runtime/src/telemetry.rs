//! What fencelock tells an application about its locks: a `fencelock.lock` span around every
//! lock call, events under it, and, with the `metrics` feature, metrics through the
//! [`metrics`](https://docs.rs/metrics) facade (the application installs the exporter it
//! wants, e.g. `metrics-exporter-prometheus`).
//!
//! # Spans
//! Every `#[redis_lock]` call and every [`LockRequest::acquire`](crate::LockRequest::acquire)
//! opens an INFO span named `fencelock.lock` (target `fencelock`), a child of the span current
//! at the call. A `#[redis_lock]` call runs its wait, its body and its release inside it; a
//! request's span covers its acquisition and lives as long as its guard
//! ([`LockGuard::span`](crate::LockGuard::span) hands it to work done under the lock).
//!
//! | field | value |
//! | --- | --- |
//! | `lock` | the key template of a `#[redis_lock]` function (`stock:{sku}`), or the name given with `LockOptions::name`; empty otherwise |
//! | `key` | the lock key (`stock:42`) |
//! | `mode` | the kind of lock: `exclusive` (a mutex), `read`, `write`, `semaphore`, `segmented` |
//! | `attempts` | acquire attempts sent (0 for a reentrant call) |
//! | `waited_ms` | from the call to the grant, or to giving up |
//! | `fencing_token` | the grant's fencing token |
//! | `outcome` | `granted`, `reentered`, `not_acquired`, `backend_error`, `key_in_use`, `exhausted` (every shard of a segmented lock is marked exhausted), `invalid`, `no_client`, `overloaded` (refused by the client's bound on keys at the store), `cancelled` (the caller dropped the call while it waited) |
//! | `held_ms` | from the grant to the release (or the guard's drop) |
//! | `release` | `released`, `lost` (the key was gone or another owner's), `failed` (a release left to the background gave up after retrying until the lease would have ended anyway) |
//! | `lost` | why the lease was lost while held: `not_owner`, `unconfirmed`, `expired`, `max_hold` |
//!
//! The owner token (whoever has it can release the lock) and the server's credentials are
//! never recorded. Events under the span: `the grant is in time` (TRACE, with how long its
//! validity lasts, as the guard is handed out), `the grant's reply came after its lease could
//! have ended` (WARN, the grant given back), `lock not acquired; waiting` (DEBUG, each pause),
//! `lock renewal failed` (WARN, the first failed renewal of a lease in a row), `lock lost`
//! (WARN, with its cause), and release failures (WARN). Renewal runs on the library's own
//! thread: install the subscriber globally (`set_global_default`, or `init()`), not with a
//! thread-local `with_default`, to see those events.
//!
//! # Metrics
//! With the `metrics` feature, recorded through the `metrics` facade (nothing is recorded
//! until the application installs a recorder). [`describe_metrics`] registers their units and
//! help texts with the recorder. Keys are never labels: there can be millions of them. The
//! `lock` label is the key template (or `LockOptions::name`), a set as small as the code.
//!
//! | name | kind | labels | what |
//! | --- | --- | --- | --- |
//! | `fencelock_acquisitions_total` | counter | `lock`, `outcome` | lock calls by how their acquisition ended (the span's `outcome` but `reentered`) |
//! | `fencelock_wait_seconds` | histogram | `lock`, `outcome` | from the call to the grant, or to giving up |
//! | `fencelock_attempt_duration_seconds` | histogram | `lock` | one acquire attempt's round trip to the backend |
//! | `fencelock_hold_seconds` | histogram | `lock` | from the grant to the release |
//! | `fencelock_locks_held` | gauge | `lock` | guards of this process holding a grant (a lost lease counts until its guard is released) |
//! | `fencelock_losses_total` | counter | `lock`, `cause` | leases lost while held, by cause (`not_owner`, `unconfirmed`, `expired`, `max_hold`) |
//! | `fencelock_renewal_rounds_total` | counter | | renewal rounds sent (one backend call renews every lease due) |
//! | `fencelock_renewal_failures_total` | counter | | renewal rounds that failed (retried until each lease's deadline) |

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Span;
use tracing::field::Empty;

use crate::sync::lock_ignoring_poison;
use crate::{LockError, LockKind, LockOptions, LossCause, MAX_KEY_LEN};

/// `fencelock_acquisitions_total`: lock calls by outcome.
pub const ACQUISITIONS: &str = "fencelock_acquisitions_total";
/// `fencelock_wait_seconds`: from the call to the grant, or to giving up.
pub const WAIT: &str = "fencelock_wait_seconds";
/// `fencelock_attempt_duration_seconds`: one acquire attempt's round trip.
pub const ATTEMPT_DURATION: &str = "fencelock_attempt_duration_seconds";
/// `fencelock_hold_seconds`: from the grant to the release.
pub const HOLD: &str = "fencelock_hold_seconds";
/// `fencelock_locks_held`: guards of this process holding a grant.
pub const LOCKS_HELD: &str = "fencelock_locks_held";
/// `fencelock_losses_total`: leases lost while held, by cause.
pub const LOSSES: &str = "fencelock_losses_total";
/// `fencelock_renewal_rounds_total`: renewal rounds sent.
pub const RENEWAL_ROUNDS: &str = "fencelock_renewal_rounds_total";
/// `fencelock_renewal_failures_total`: renewal rounds that failed.
pub const RENEWAL_FAILURES: &str = "fencelock_renewal_failures_total";

/// Registers the unit and help text of every fencelock metric with the installed recorder
/// (exporters print them, e.g. Prometheus's `# HELP` lines). Call it once after installing
/// the recorder; metrics are recorded without it too.
#[cfg(feature = "metrics")]
pub fn describe_metrics() {
    use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    describe_counter!(
        ACQUISITIONS,
        Unit::Count,
        "Lock calls by how their acquisition ended."
    );
    describe_histogram!(
        WAIT,
        Unit::Seconds,
        "Time from a lock call to its grant, or to giving up."
    );
    describe_histogram!(
        ATTEMPT_DURATION,
        Unit::Seconds,
        "Round trip of one acquire attempt to the lock backend."
    );
    describe_histogram!(HOLD, Unit::Seconds, "Time from a grant to its release.");
    describe_gauge!(
        LOCKS_HELD,
        Unit::Count,
        "Lock guards of this process holding a grant."
    );
    describe_counter!(LOSSES, Unit::Count, "Leases lost while held, by cause.");
    describe_counter!(RENEWAL_ROUNDS, Unit::Count, "Renewal rounds sent.");
    describe_counter!(
        RENEWAL_FAILURES,
        Unit::Count,
        "Renewal rounds that failed (retried until the leases' deadlines)."
    );
}

/// The span of one lock call, with what its metrics are labelled by. Cheap to clone: the
/// renewal loop and a background release keep clones to put their events under it.
/// `text` cut to at most `len` bytes, at a character boundary.
fn cut(text: &str, len: usize) -> &str {
    let at = (0..=len.min(text.len()))
        .rev()
        .find(|&at| text.is_char_boundary(at))
        .unwrap_or(0);
    &text[..at]
}

/// Namespaces that name unnamed locks, at most: a label's values must stay few.
pub const UNNAMED_LABELS: usize = 64;
/// Bytes of a key's namespace kept in a label.
const UNNAMED_LABEL_LEN: usize = 32;
/// The label of the unnamed locks beyond [`UNNAMED_LABELS`] namespaces.
pub const OTHER_LABEL: &str = "other";

/// The namespaces this process has seen as labels so far.
static NAMESPACES: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());

/// The `lock` of a request not named: its key's namespace (the text before the first `:`,
/// cut at 32 bytes), for the first [`UNNAMED_LABELS`] namespaces the process meets, then
/// [`OTHER_LABEL`]. Keys are never labels (there can be millions); namespaces are as few as
/// the code's kinds of locks, and the bound holds if they are not.
fn unnamed_label(key: &str) -> &'static str {
    let namespace = cut(key.split(':').next().unwrap_or_default(), UNNAMED_LABEL_LEN);
    let mut seen = lock_ignoring_poison(&NAMESPACES);
    if let Some(label) = seen.iter().find(|label| **label == namespace) {
        return label;
    }
    if seen.len() == UNNAMED_LABELS {
        return OTHER_LABEL;
    }
    // Leaked once per namespace, at most `UNNAMED_LABELS` times per process.
    let label: &'static str = Box::leak(namespace.to_owned().into_boxed_str());
    seen.push(label);
    label
}

#[derive(Debug, Clone)]
pub(crate) struct LockSpan {
    span: Span,
    #[cfg_attr(
        not(feature = "metrics"),
        expect(dead_code, reason = "the label of the metrics")
    )]
    name: &'static str,
    started: Instant,
}

impl LockSpan {
    /// Opens the span of a call for a `kind` lock of `key` with `options`, now. A key longer
    /// than any key may be (it is refused next) is recorded cut at that length.
    pub(crate) fn new(key: &str, kind: LockKind, options: &LockOptions) -> Self {
        let name = match options.name {
            "" => unnamed_label(key),
            name => name,
        };
        let key = cut(key, MAX_KEY_LEN);
        let span = tracing::info_span!(
            target: "fencelock",
            "fencelock.lock",
            lock = name,
            key,
            mode = kind.name(),
            attempts = Empty,
            waited_ms = Empty,
            fencing_token = Empty,
            outcome = Empty,
            held_ms = Empty,
            release = Empty,
            lost = Empty,
        );
        LockSpan {
            span,
            name,
            started: Instant::now(),
        }
    }

    pub(crate) fn span(&self) -> &Span {
        &self.span
    }

    /// An acquire attempt answered after `took`.
    pub(crate) fn attempted(&self, took: Duration) {
        #[cfg(feature = "metrics")]
        metrics::histogram!(ATTEMPT_DURATION, "lock" => self.name).record(took.as_secs_f64());
        #[cfg(not(feature = "metrics"))]
        let _ = took;
    }

    /// The acquisition ended after `attempts` attempts: granted with a fencing token, or not.
    pub(crate) fn acquired(&self, outcome: Result<u64, &LockError>, attempts: u32) {
        let label = match outcome {
            Ok(token) => {
                self.span.record("fencing_token", token);
                "granted"
            }
            Err(error) => outcome_label(error),
        };
        self.ended(label, attempts);
    }

    /// The acquisition ended as `label` after `attempts` attempts.
    fn ended(&self, label: &'static str, attempts: u32) {
        let waited = self.started.elapsed();
        self.span.record("outcome", label);
        self.span.record("attempts", attempts);
        self.span.record("waited_ms", millis(waited));
        #[cfg(feature = "metrics")]
        {
            metrics::counter!(ACQUISITIONS, "lock" => self.name, "outcome" => label).increment(1);
            metrics::histogram!(WAIT, "lock" => self.name, "outcome" => label)
                .record(waited.as_secs_f64());
        }
    }

    /// A nested call entered the lock its caller holds, with its token.
    pub(crate) fn reentered(&self, token: u64) {
        self.span.record("fencing_token", token);
        self.span.record("outcome", "reentered");
        self.span.record("attempts", 0);
        self.span.record("waited_ms", 0);
    }

    /// How a release ended: `released`, `lost` or `failed`.
    pub(crate) fn released(&self, how: &'static str) {
        self.span.record("release", how);
    }

    /// The lease of `key` was lost while held. The warning comes last: whoever hears it
    /// finds the loss counted and on the span.
    pub(crate) fn lost(&self, key: &str, cause: LossCause) {
        let label = cause_label(cause);
        #[cfg(feature = "metrics")]
        metrics::counter!(LOSSES, "lock" => self.name, "cause" => label).increment(1);
        self.span.record("lost", label);
        tracing::warn!(target: "fencelock", parent: &self.span, key, %cause, "lock lost");
    }

    /// A renewal of the lease of `key` failed, the first time in a row.
    pub(crate) fn renewal_failed(&self, key: &str, error: &LockError) {
        let error = crate::error::WithSources(error);
        tracing::warn!(target: "fencelock", parent: &self.span, key, %error, "lock renewal failed; retrying until the lease's deadline");
    }
}

/// An acquisition's attempts, and its end in its span and metrics, recorded once: an
/// acquisition dropped before it ended (its caller gave up on it) ends as `cancelled`.
#[derive(Debug)]
pub(crate) struct AcquireRecord {
    span: LockSpan,
    attempts: u32,
    ended: bool,
}

impl AcquireRecord {
    pub(crate) fn new(span: LockSpan) -> Self {
        AcquireRecord {
            span,
            attempts: 0,
            ended: false,
        }
    }

    pub(crate) fn span(&self) -> &LockSpan {
        &self.span
    }

    /// Attempts sent so far.
    pub(crate) fn attempts(&self) -> u32 {
        self.attempts
    }

    /// An attempt is sent.
    pub(crate) fn attempt_sent(&mut self) {
        self.attempts += 1;
    }

    /// The acquisition ended: granted with a fencing token, or not.
    pub(crate) fn ended(&mut self, outcome: Result<u64, &LockError>) {
        self.ended = true;
        self.span.acquired(outcome, self.attempts);
    }
}

impl Drop for AcquireRecord {
    fn drop(&mut self) {
        if !self.ended {
            self.span.ended("cancelled", self.attempts);
        }
    }
}

/// A renewal round ended; `failed` if it did not get through.
pub(crate) fn renewal_round(failed: bool) {
    #[cfg(feature = "metrics")]
    {
        metrics::counter!(RENEWAL_ROUNDS).increment(1);
        if failed {
            metrics::counter!(RENEWAL_FAILURES).increment(1);
        }
    }
    #[cfg(not(feature = "metrics"))]
    let _ = failed;
}

/// A grant held by a guard: counted in `fencelock_locks_held` until the hold ends, when its
/// length is recorded (once: at the release, or when the guard is dropped).
#[derive(Debug)]
pub(crate) struct Holding {
    span: LockSpan,
    since: Instant,
    ended: bool,
}

impl Holding {
    /// A grant known since `since`.
    pub(crate) fn new(span: LockSpan, since: Instant) -> Self {
        #[cfg(feature = "metrics")]
        metrics::gauge!(LOCKS_HELD, "lock" => span.name).increment(1.0);
        Holding {
            span,
            since,
            ended: false,
        }
    }

    pub(crate) fn span(&self) -> &LockSpan {
        &self.span
    }

    /// The hold ends now (the release is sent, or handed to the background).
    pub(crate) fn end(&mut self) {
        if std::mem::replace(&mut self.ended, true) {
            return;
        }
        let held = self.since.elapsed();
        self.span.span.record("held_ms", millis(held));
        #[cfg(feature = "metrics")]
        {
            metrics::histogram!(HOLD, "lock" => self.span.name).record(held.as_secs_f64());
            metrics::gauge!(LOCKS_HELD, "lock" => self.span.name).decrement(1.0);
        }
    }
}

impl Drop for Holding {
    fn drop(&mut self) {
        self.end();
    }
}

/// The `outcome` an acquisition that failed with `error` records.
fn outcome_label(error: &LockError) -> &'static str {
    match error {
        LockError::NotAcquired { .. } => "not_acquired",
        LockError::Backend { .. } => "backend_error",
        LockError::KeyInUse { .. } => "key_in_use",
        LockError::InvalidKey { .. } | LockError::InvalidConfig { .. } => "invalid",
        LockError::NoClient => "no_client",
        LockError::Lost { .. } => "lost",
        LockError::ShutDown { .. } => "shut_down",
        LockError::Exhausted { .. } => "exhausted",
        LockError::Overloaded { .. } => "overloaded",
    }
}

/// The `cause` label of a loss.
fn cause_label(cause: LossCause) -> &'static str {
    match cause {
        LossCause::NotOwner => "not_owner",
        LossCause::Unconfirmed => "unconfirmed",
        LossCause::Expired => "expired",
        LossCause::MaxHold => "max_hold",
        LossCause::ShutDown => "shut_down",
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

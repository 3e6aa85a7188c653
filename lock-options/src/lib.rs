//! The limits, defaults and validity rules of [fencelock](https://docs.rs/fencelock)'s lock
//! options, in one place.
//!
//! The `#[redis_lock]` attribute applies these rules at compile time to the values written
//! as literals, and the runtime applies them to every request, so the two cannot disagree.
//! Applications depend on `fencelock`, which re-exports what users need from here.

#![deny(missing_docs)]

use std::fmt;

/// The longest lease, pause between attempts, total wait or minimum hold accepted, in
/// milliseconds (24 hours). A lease is the window in which a crashed holder goes
/// unnoticed; longer ones are almost always a unit mistake.
pub const MAX_TTL_MS: u64 = 86_400_000;
/// Lease length when none is given (Redisson's and lock4j's default).
pub const DEFAULT_TTL_MS: u64 = 30_000;
/// Attempts after the first failed one, when none is given.
pub const DEFAULT_RETRY: u32 = 5;
/// Longest pause between attempts when none is given.
pub const DEFAULT_SLEEP_MS: u64 = 200;

/// The longest lock key accepted, in bytes (before any client prefix).
pub const MAX_KEY_LEN: usize = 1024;

/// What is wrong with the fixed text of a key template (the text around its placeholders,
/// `text_len` bytes in all), if anything: longer than a key may be, or a control character
/// in it (NUL, newlines), which would make the key unreadable in logs and operator tools.
pub fn key_text_problem(text_len: usize, mut text: impl Iterator<Item = char>) -> Option<String> {
    if text_len > MAX_KEY_LEN {
        return Some(format!(
            "a lock key is at most {MAX_KEY_LEN} bytes and this template's text alone has \
             {text_len}; lock on a shorter identifier (an id or a hash of the value)"
        ));
    }
    let control = text.find(|c| c.is_control())?;
    Some(format!(
        "lock keys must not contain control characters, found {control:?}; write the key \
         without it"
    ))
}

/// The most permits a semaphore (`permits`) may have. Every acquisition reads the holders
/// of its key; beyond this, a pool or a rate limiter serves better than a lock.
pub const MAX_PERMITS: u32 = 1_024;
/// The most shards a segmented lock (`shards`) may have, for the same reason.
pub const MAX_SHARDS: u32 = 1_024;

/// A count that sizes a lock kind, by the name the attribute gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Count {
    /// `permits`: how many holders a semaphore lets in at once.
    Permits,
    /// `shards`: how many shards a segmented lock has.
    Shards,
}

impl Count {
    /// The name as written in the attribute.
    pub const fn name(self) -> &'static str {
        match self {
            Count::Permits => "permits",
            Count::Shards => "shards",
        }
    }

    /// The greatest accepted value.
    pub const fn max(self) -> u32 {
        match self {
            Count::Permits => MAX_PERMITS,
            Count::Shards => MAX_SHARDS,
        }
    }
}

/// Checks a count on its own: at least 1 and at most [`Count::max`]. The error names the
/// count, the limit and the fix.
pub fn check_count(count: Count, value: u64) -> Result<u32, String> {
    let (name, max) = (count.name(), count.max());
    if value == 0 {
        let why = match count {
            Count::Permits => "a semaphore without permits lets nobody in",
            Count::Shards => "a segmented lock without shards has nothing to lock",
        };
        return Err(format!("`{name}` must be at least 1: {why}"));
    }
    match u32::try_from(value) {
        Ok(value) if value <= max => Ok(value),
        _ => Err(format!(
            "`{name}` must be at most {}, the most accepted; use a smaller value",
            digit_grouped(u64::from(max))
        )),
    }
}

/// A duration setting, by the name the attribute and the builders give it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Setting {
    /// `ttl_ms`: the lease length.
    TtlMs,
    /// `sleep_ms`: the longest pause between attempts.
    SleepMs,
    /// `wait_ms`: the longest wait in all.
    WaitMs,
    /// `min_hold_ms`: the least time the key stays taken.
    MinHoldMs,
    /// `max_hold_ms`: the longest time the lease is renewed.
    MaxHoldMs,
}

impl Setting {
    /// The name as written in the attribute and the builders.
    pub const fn name(self) -> &'static str {
        match self {
            Setting::TtlMs => "ttl_ms",
            Setting::SleepMs => "sleep_ms",
            Setting::WaitMs => "wait_ms",
            Setting::MinHoldMs => "min_hold_ms",
            Setting::MaxHoldMs => "max_hold_ms",
        }
    }

    /// Why 0 makes no sense for this setting.
    const fn why_not_zero(self) -> &'static str {
        match self {
            Setting::TtlMs => "a lease of 0 ms expires before it is granted",
            Setting::SleepMs => "a pause of 0 ms between attempts makes the retries a busy loop",
            Setting::WaitMs => {
                "a wait of 0 ms is a single attempt; remove `wait_ms` and use `action = GiveUp` (`.give_up()`)"
            }
            Setting::MinHoldMs => "a minimum hold of 0 ms is no minimum; remove `min_hold_ms`",
            Setting::MaxHoldMs => "a lock held for at most 0 ms is lost as soon as it is acquired",
        }
    }

    /// Whether the setting is capped at [`MAX_TTL_MS`]. `max_hold_ms` is not: it bounds the
    /// renewals, each of which is one capped lease.
    const fn capped(self) -> bool {
        !matches!(self, Setting::MaxHoldMs)
    }
}

/// What is known about one setting where the rules are applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Value<T> {
    /// Not given: the default applies.
    #[default]
    Default,
    /// Given, with this value.
    Given(T),
    /// Given by an expression whose value is known only at run time (the attribute's
    /// view of `ttl_ms = CONST` or of anything `options = EXPR` may set).
    Unknown,
}

impl<T> From<Option<T>> for Value<T> {
    fn from(value: Option<T>) -> Self {
        value.map_or(Value::Default, Value::Given)
    }
}

impl<T: Copy> Value<T> {
    /// The value in force, if known: the given one, else `default`.
    fn or(self, default: T) -> Option<T> {
        match self {
            Value::Default => Some(default),
            Value::Given(value) => Some(value),
            Value::Unknown => None,
        }
    }

    fn given(self) -> Option<T> {
        match self {
            Value::Given(value) => Some(value),
            _ => None,
        }
    }
}

/// The settings that rules compare with each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Settings {
    /// `ttl_ms`.
    pub ttl_ms: Value<u64>,
    /// `sleep_ms`.
    pub sleep_ms: Value<u64>,
    /// `wait_ms`.
    pub wait_ms: Value<u64>,
    /// `renew`.
    pub renew: Value<bool>,
    /// `action = GiveUp` (`Given(true)`): a single attempt, which never waits, so `wait_ms`
    /// is not compared with `sleep_ms`.
    pub give_up: Value<bool>,
    /// `min_hold_ms`.
    pub min_hold_ms: Value<u64>,
    /// `max_hold_ms`.
    pub max_hold_ms: Value<u64>,
}

/// A broken rule: the setting to change and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The setting that breaks the rule; the attribute points at it.
    pub setting: Setting,
    /// Whether the value alone is wrong (the attribute points at the value) rather than
    /// its combination with another setting (the attribute points at the name).
    pub out_of_range: bool,
    /// What is wrong and how to fix it.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// Checks one duration on its own: at least 1 ms and, except `max_hold_ms`, at most
/// [`MAX_TTL_MS`].
pub fn check_value(setting: Setting, value: u64) -> Result<u64, Problem> {
    let name = setting.name();
    let message = if value == 0 {
        format!(
            "`{name}` must be greater than 0: {}",
            setting.why_not_zero()
        )
    } else if setting.capped() && value > MAX_TTL_MS {
        format!(
            "`{name}` must be at most {} (24 h), the longest accepted; use a smaller value",
            digit_grouped(MAX_TTL_MS)
        )
    } else {
        return Ok(value);
    };
    Err(Problem {
        setting,
        out_of_range: true,
        message,
    })
}

impl Settings {
    /// Every broken rule: each given value on its own, then the combinations whose values
    /// are all known (unknown ones are left to the run-time check).
    pub fn problems(&self) -> Vec<Problem> {
        let mut problems: Vec<Problem> = [
            (Setting::TtlMs, self.ttl_ms),
            (Setting::SleepMs, self.sleep_ms),
            (Setting::WaitMs, self.wait_ms),
            (Setting::MinHoldMs, self.min_hold_ms),
            (Setting::MaxHoldMs, self.max_hold_ms),
        ]
        .into_iter()
        .filter_map(|(setting, value)| check_value(setting, value.given()?).err())
        .collect();
        // A value out of range has its own problem; comparing it too would add a second,
        // misleading one.
        let valid = |setting: Setting, value: Value<u64>| {
            if problems.iter().any(|problem| problem.setting == setting) {
                Value::Unknown
            } else {
                value
            }
        };
        let checked = Settings {
            ttl_ms: valid(Setting::TtlMs, self.ttl_ms),
            sleep_ms: valid(Setting::SleepMs, self.sleep_ms),
            wait_ms: valid(Setting::WaitMs, self.wait_ms),
            min_hold_ms: valid(Setting::MinHoldMs, self.min_hold_ms),
            max_hold_ms: valid(Setting::MaxHoldMs, self.max_hold_ms),
            renew: self.renew,
            give_up: self.give_up,
        };
        problems.extend(checked.conflicts());
        problems
    }

    /// The rules between settings.
    fn conflicts(&self) -> Vec<Problem> {
        let mut problems = Vec::new();
        let conflict = |setting, message| Problem {
            setting,
            out_of_range: false,
            message,
        };
        // Only when both are given: then the two numbers contradict each other (a short
        // `wait_ms` with the default pause only shortens the pause). Not for a request that
        // gives up, or may: it never waits.
        if let (Some(false), Some(wait_ms), Some(sleep_ms)) = (
            self.give_up.or(false),
            self.wait_ms.given(),
            self.sleep_ms.given(),
        ) && wait_ms < sleep_ms
        {
            problems.push(conflict(
                Setting::WaitMs,
                format!(
                    "`wait_ms` ({}) is shorter than `sleep_ms` ({}): the first pause already outlasts the whole wait; raise `wait_ms` or lower `sleep_ms`",
                    digit_grouped(wait_ms),
                    digit_grouped(sleep_ms)
                ),
            ));
        }
        let ttl = self
            .ttl_ms
            .or(DEFAULT_TTL_MS)
            .map(|ttl_ms| match self.ttl_ms {
                Value::Default => (ttl_ms, format!("{}, the default", digit_grouped(ttl_ms))),
                _ => (ttl_ms, digit_grouped(ttl_ms)),
            });
        let renews = self.renew.or(true);
        if let (Some(false), Some(min_hold_ms), Some((ttl_ms, ttl))) =
            (renews, self.min_hold_ms.given(), &ttl)
            && min_hold_ms > *ttl_ms
        {
            problems.push(conflict(
                Setting::MinHoldMs,
                format!(
                    "`min_hold_ms` ({}) is longer than `ttl_ms` ({ttl}) with `renew = false`: the lease ends before the minimum hold; raise `ttl_ms` or turn renewal on",
                    digit_grouped(min_hold_ms)
                ),
            ));
        }
        if let Some(max_hold_ms) = self.max_hold_ms.given() {
            if renews == Some(false) {
                problems.push(conflict(
                    Setting::MaxHoldMs,
                    "`max_hold_ms` bounds renewal, and `renew = false` turns renewal off; remove one of them".to_owned(),
                ));
            } else if let Some((ttl_ms, ttl)) = &ttl
                && max_hold_ms < *ttl_ms
            {
                problems.push(conflict(
                    Setting::MaxHoldMs,
                    format!(
                        "`max_hold_ms` ({}) is below `ttl_ms` ({ttl}): the first lease already lasts longer; raise `max_hold_ms` or lower `ttl_ms`",
                        digit_grouped(max_hold_ms)
                    ),
                ));
            }
        }
        problems
    }
}

/// `value` with `_` between groups of three digits, as in Rust literals.
pub fn digit_grouped(value: u64) -> String {
    let digits = value.to_string();
    let mut grouped = String::with_capacity(digits.len() + digits.len() / 3);
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index).is_multiple_of(3) {
            grouped.push('_');
        }
        grouped.push(digit);
    }
    grouped
}

#[cfg(test)]
mod tests {
    use super::*;

    fn messages(settings: Settings) -> Vec<String> {
        settings
            .problems()
            .into_iter()
            .map(|problem| problem.message)
            .collect()
    }

    #[test]
    fn values_are_checked_on_their_own() {
        assert!(check_value(Setting::TtlMs, 0).is_err());
        assert!(check_value(Setting::TtlMs, MAX_TTL_MS).is_ok());
        assert!(check_value(Setting::TtlMs, MAX_TTL_MS + 1).is_err());
        assert!(check_value(Setting::MaxHoldMs, u64::MAX).is_ok());
        assert!(check_value(Setting::MaxHoldMs, 0).is_err());
        let problem = check_value(Setting::SleepMs, 100_000_000).unwrap_err();
        assert_eq!(
            problem.message,
            "`sleep_ms` must be at most 86_400_000 (24 h), the longest accepted; use a smaller value"
        );
        assert!(problem.out_of_range);
    }

    #[test]
    fn hold_bounds_are_compared_with_the_lease_in_force() {
        let max_hold = |max_hold_ms| Settings {
            max_hold_ms: Value::Given(max_hold_ms),
            ..Settings::default()
        };
        assert_eq!(
            messages(max_hold(1_000)),
            [
                "`max_hold_ms` (1_000) is below `ttl_ms` (30_000, the default): the first lease already lasts longer; raise `max_hold_ms` or lower `ttl_ms`"
            ]
        );
        assert!(messages(max_hold(30_000)).is_empty());
        let unknown_lease = Settings {
            ttl_ms: Value::Unknown,
            ..max_hold(1_000)
        };
        assert!(messages(unknown_lease).is_empty());
        let without_renewal = Settings {
            renew: Value::Given(false),
            ..max_hold(60_000)
        };
        assert_eq!(messages(without_renewal).len(), 1);
        let min_hold = Settings {
            renew: Value::Given(false),
            ttl_ms: Value::Given(1_000),
            min_hold_ms: Value::Given(1_001),
            ..Settings::default()
        };
        assert_eq!(messages(min_hold).len(), 1);
        let renewed = Settings {
            renew: Value::Default,
            ..min_hold
        };
        assert!(messages(renewed).is_empty());
    }

    #[test]
    fn a_value_out_of_range_is_not_compared_as_well() {
        let settings = Settings {
            ttl_ms: Value::Given(0),
            max_hold_ms: Value::Given(10),
            ..Settings::default()
        };
        let problems = settings.problems();
        assert_eq!(problems.len(), 1);
        assert_eq!(problems[0].setting, Setting::TtlMs);
    }

    #[test]
    fn wait_is_compared_with_a_given_pause_only() {
        let wait = Settings {
            wait_ms: Value::Given(100),
            ..Settings::default()
        };
        assert!(messages(wait).is_empty());
        let both = Settings {
            sleep_ms: Value::Given(200),
            ..wait
        };
        assert_eq!(messages(both).len(), 1);
        for give_up in [Value::Given(true), Value::Unknown] {
            assert!(messages(Settings { give_up, ..both }).is_empty());
        }
    }

    #[test]
    fn counts_are_between_one_and_their_limit() {
        assert_eq!(check_count(Count::Permits, 1), Ok(1));
        assert_eq!(check_count(Count::Shards, 1_024), Ok(1_024));
        let zero = check_count(Count::Permits, 0).unwrap_err();
        assert!(zero.contains("`permits` must be at least 1"), "{zero}");
        let over = check_count(Count::Shards, 1_025).unwrap_err();
        assert!(over.contains("`shards` must be at most 1_024"), "{over}");
        let huge = check_count(Count::Permits, u64::MAX).unwrap_err();
        assert!(huge.contains("at most 1_024"), "{huge}");
    }

    #[test]
    fn digits_are_grouped_by_three() {
        assert_eq!(digit_grouped(0), "0");
        assert_eq!(digit_grouped(999), "999");
        assert_eq!(digit_grouped(1_000), "1_000");
        assert_eq!(digit_grouped(86_400_000), "86_400_000");
    }
}

//! The `#[redis_lock]` attribute of [fencelock](https://docs.rs/fencelock).
//!
//! Use it through the `fencelock` crate, which re-exports it next to the
//! runtime that the generated code calls.
//!
//! The crate reads the attribute in three stages, each in its own module:
//! `args` reads the arguments one by one, `validate` checks them against the
//! function and against each other, and `expand` generates the locked
//! function. `template` parses the key template, `item` the function.

mod args;
mod errors;
mod expand;
mod item;
mod suggest;
mod template;
mod validate;

#[cfg(test)]
mod error_tests;
#[cfg(test)]
mod snapshot_tests;

use proc_macro::TokenStream;

/// Runs an `async fn` while holding a distributed lock.
///
/// ```ignore
/// use fencelock::{redis_lock, LockError};
///
/// #[redis_lock(key = "stock:{sku}", ttl_ms = 10_000, retry = 5, sleep_ms = 200, action = Continue)]
/// async fn deduct(sku: &str, qty: u32) -> Result<u32, AppError> {
///     // Runs only while this process holds the lock `stock:<sku>`.
/// #   Ok(qty)
/// }
/// ```
///
/// The function keeps its signature. Its body runs only once the lock is
/// acquired, and the lock is released when the body finishes: on success, on
/// `Err`, on panic, and when the caller drops the future. When the lock
/// cannot be acquired, the function returns `Err(LockError::NotAcquired { .. }.into())`
/// without running the body.
///
/// # Requirements
///
/// - The function is an `async fn`: a free function, an inherent or
///   trait-impl method, or a generic function.
/// - It returns `Result<T, E>` with `E: From<fencelock::LockError>` (type
///   aliases of `Result` work).
///
/// # Arguments
///
/// | argument | meaning | default |
/// | --- | --- | --- |
/// | `key = "..."` | required; the lock key template (below) | — |
/// | `ttl_ms = N` | lease length in milliseconds, 1 to 86 400 000 (24 h) | 30 000 |
/// | `retry = N` | attempts after the first failed one that follow a pause no release notification ended (only with `Continue`) | 5; unbounded when `wait_ms` is given |
/// | `sleep_ms = N` | longest pause between attempts when no release notification arrives (a release wakes waiters at once), 1 to 86 400 000 ms | 200 |
/// | `action = GiveUp` or `Continue` | `GiveUp`: one attempt, then fail; `Continue`: keep trying as configured | `Continue` |
/// | `renew = true` or `false` | renew the lease every `ttl_ms / 3` while the body runs; without renewal the lease ends after `ttl_ms` and counts as lost | `true` |
/// | `on_lost = Abort` or `Continue` | when the lease is lost while the body runs: `Abort` drops the body at its next `.await` and returns `Err(LockError::Lost { .. }.into())`; `Continue` lets it finish | `Abort` |
/// | `min_hold_ms = N` | ShedLock's `lockAtLeastFor`: the key stays taken at least this long after acquiring, even if the body ends sooner; 1 to 86 400 000 ms, at most `ttl_ms` with `renew = false` | none |
/// | `max_hold_ms = N` | stop renewing after this long; the body is then stopped as on loss (see `on_lost`). At least `ttl_ms`; not with `renew = false` | none |
/// | `wait_ms = N` | the longest time to wait for the lock in all, 1 to 86 400 000 ms; with `retry` too, whichever ends first. At least `sleep_ms`; not with `GiveUp` | `retry × sleep_ms` |
/// | `fair = true` or `false` | serve waiters in arrival order, across processes (a queue in Redis); a waiter that died holds the queue up for at most `3 × sleep_ms`. Not `true` with `GiveUp` | `false` |
/// | `client = EXPR` | the client to lock with, e.g. `self.locks`, evaluated inside the function before the body | the scoped client, else the global one |
/// | `crate = "path"` or `crate = path` | where the `fencelock` crate is, if renamed | `::fencelock` |
///
/// # Key templates
///
/// Literal text is used as written. `{name}` is replaced by the argument
/// `name`, `{name.field}` or `{name.0}` by a field of it, and `{self}` or
/// `{self.field}` by the receiver or a field of it. Values are formatted with
/// `Display` and then escaped (`\`, `:`, `{` and `}` get a backslash). `{{`
/// and `}}` are literal braces.
///
/// Two placeholders must be separated by literal text containing `:` with no
/// `\` before it, as in `"order:{tenant}:{id}"`. Since `:` and `\` are escaped
/// in values, distinct arguments then never form the same key.
#[proc_macro_attribute]
pub fn redis_lock(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand::redis_lock(attr.into(), item.into()).into()
}

//! The `#[redis_lock]` attribute of [fencelock](https://docs.rs/fencelock) (also named
//! `#[lock]`: the client, not the attribute, chooses the store).
//!
//! Use it through the `fencelock` crate, which re-exports it next to the
//! runtime that the generated code calls.
//!
//! The crate reads the attribute in three stages, each in its own module:
//! `args` reads the arguments one by one, `validate` checks them against the
//! function and against each other, and `expand` generates the locked
//! function. `template` parses the key template, `item` the function.

#![deny(missing_docs)]

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
/// ```
/// use fencelock::{LockClient, LockError, redis_lock, with_client};
///
/// #[derive(Debug)]
/// enum AppError {
///     Lock(LockError),
///     OutOfStock,
/// }
///
/// impl From<LockError> for AppError {
///     fn from(e: LockError) -> Self {
///         AppError::Lock(e)
///     }
/// }
///
/// #[redis_lock(key = "stock:{sku}", ttl_ms = 10_000, retry = 5, sleep_ms = 200, action = Continue)]
/// async fn deduct(sku: &str, qty: u32) -> Result<u32, AppError> {
///     // Runs only while this process holds the lock `stock:<sku>`.
///     let token = fencelock::current_token(); // the grant's fencing token
///     assert!(token.is_some());
///     100u32.checked_sub(qty).ok_or(AppError::OutOfStock)
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// // In-process locks here; `LockClient::connect("redis://...")` in production.
/// let client = LockClient::memory();
/// let left = with_client(client, deduct("42", 1)).await.unwrap();
/// assert_eq!(left, 99);
/// # }
/// ```
///
/// The function keeps its signature. Its body runs only once the lock is
/// acquired, and the lock is released when the body finishes: on success, on
/// `Err`, on panic, and when the caller drops the future. When the lock
/// cannot be acquired, the function returns `Err(LockError::NotAcquired { .. }.into())`
/// without running the body; every other failure of the lock (no client,
/// backend unreachable, lease lost under `on_lost = Abort`) comes back the
/// same way, through `E: From<LockError>`.
///
/// The client is the one given with `client = ...`, else the one of the
/// innermost `fencelock::with_client` scope, else the global one
/// (`LockClient::install_global`); with none, the call returns
/// `Err(LockError::NoClient.into())`. A `with_client` scope does not follow
/// work into `tokio::spawn`ed tasks.
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
/// | `key = "..."` | required (or `keys`); the lock key template (below) | — |
/// | `keys = ["...", "..."]` | instead of `key`: two or more templates, each key a mutex, held together, all or none; taken in sorted order, so calls naming the same keys in any order never deadlock; `fencelock::current_tokens()` gives each key's token. Not with `mode`, `permits` or `shards` | — |
/// | `ttl_ms = N` | lease length in milliseconds, 1 to 86 400 000 (24 h); also the time in which a crashed holder's lock frees itself | 30 000 |
/// | `retry = N` | attempts after the first failed one that follow a pause no release notification ended (only with `Continue`) | 5; unbounded when `wait_ms` is given |
/// | `sleep_ms = N` | longest pause between attempts when no release notification arrives (a release wakes waiters at once), 1 to 86 400 000 ms; each pause is random in `[N/2, N]` | 200 |
/// | `wait_ms = N` | the longest time to wait for the lock in all, 1 to 86 400 000 ms, also while Redis is slow; with `retry` too, whichever ends first; given alone, the only bound. At least `sleep_ms`; not with `GiveUp` | `retry × sleep_ms` |
/// | `action = GiveUp`, `Continue` or `Share` | `GiveUp`: one attempt, then fail; `Continue`: keep trying as configured; `Share`: single-flight, waits as `Continue` does, and the calls of the same function and key that overlap one call's computation get its value instead of computing it again, in this process and in others (through the store: memory, Redis (not Redlock), PostgreSQL, MySQL, ZooKeeper or etcd). The value must be `Clone + serde::Serialize + serde::de::DeserializeOwned + Send + Sync`; not with `keys`, `mode`, `permits` or `shards` | `Continue` |
/// | `fair = true` or `false` | serve waiters in arrival order, across processes (a queue in Redis); a waiter that died holds the queue up for at most `3 × sleep_ms`. Not `true` with `GiveUp` | `false` |
/// | `min_replicas = N` | count a grant only once N replicas of the Redis master have it (`WAIT`; below N it is taken back and the attempt fails as `Backend`): narrows, does not close, the window in which a failover loses the lock | 0 |
/// | `mode = Read` or `Write` | a read-write lock: `Read` shares the key with other readers, never with a writer; `Write` holds it alone, and readers that arrive while it waits queue behind it. Not with `permits` or `shards` | a mutex |
/// | `permits = N` | a semaphore: up to N holders at once, each with its own lease; 1 to 1 024 (`fencelock::MAX_PERMITS`). Not with `mode` or `shards` | — |
/// | `shards = N` | a segmented lock: N exclusive shards under the key, and a call holds one free shard, which `fencelock::current_shard()` names in the body; 1 to 1 024 (`fencelock::MAX_SHARDS`). A body that names `fencelock::shard_exhausted()` (its shard's stock is used up) runs again on another shard, so it borrows its arguments rather than moving them. Not with `mode` or `permits` | — |
/// | `renew = true` or `false` | renew the lease every `ttl_ms / 3` while the body runs; without renewal the lease ends after `ttl_ms` and counts as lost | `true` |
/// | `on_lost = Abort` or `Continue` | when the lease is lost while the body runs: `Abort` drops the body at its next `.await` and returns `Err(LockError::Lost { .. }.into())`, also when only the release finds the lease lost; `Continue` lets the body finish and returns its output, and the body can check `fencelock::is_lost()` or await `fencelock::lost()` | `Abort` |
/// | `min_hold_ms = N` | ShedLock's `lockAtLeastFor`: the key stays taken at least this long after acquiring, even if the body ends sooner; 1 to 86 400 000 ms, at most `ttl_ms` with `renew = false` | none |
/// | `max_hold_ms = N` | stop renewing after this long; the body is then stopped as on loss (see `on_lost`). At least `ttl_ms`; not with `renew = false` | none |
/// | `options = EXPR` | a `fencelock::LockOptions` value (e.g. a `const`) to start from; the other arguments override it | `LockOptions::new()` |
/// | `client = EXPR` | the client to lock with: a `LockClient`, `&LockClient`, `Arc<LockClient>`…, e.g. `self.locks`; evaluated once, inside the function before the body | the `with_client` scope's client, else the global one |
/// | `crate = "path"` or `crate = path` | where the `fencelock` crate is, if renamed | `::fencelock` |
///
/// Numeric arguments take a literal (checked at compile time) or any
/// expression of the right type such as a `const` (checked at run time by the
/// same rules; an invalid value returns `Err(LockError::InvalidConfig { .. }.into())`
/// without running the body).
///
/// The setters of `fencelock::LockOptions` and `fencelock::LockRequest` (the
/// builder of `client.lock(key)`) have the same names as these arguments
/// (`action = GiveUp` is `.action(Action::GiveUp)`, or `.give_up()`).
///
/// # Compile-time checks
///
/// Misconfiguration is a compile error pointing at the offending token: an
/// unknown or duplicate argument, a missing `key`, a placeholder naming no
/// argument, two placeholders without a `:` between them, an unclosed brace,
/// a literal out of range (`ttl_ms = 0`, a lease over 24 h, `permits = 0`),
/// `retry`, `wait_ms` or `fair = true` with `GiveUp`, `wait_ms` below
/// `sleep_ms`, `min_hold_ms` beyond an unrenewed `ttl_ms`, `max_hold_ms` below
/// `ttl_ms` or without renewal, two of `mode`, `permits` and `shards`, an
/// unknown `mode`, a function that is not `async`, a return type that is not a
/// `Result`, an error type without `From<LockError>`, a key value without
/// `Display`, and a `client` that is no lock client.
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
/// in values, distinct arguments then never form the same key. So
/// `key = "stock:{sku}"` with `sku = 42` and `client.lock("stock:42")` are the
/// same lock.
///
/// # Lock kinds
///
/// Without `mode`, `permits` or `shards`, one call at a time holds the key.
/// The other kinds let several calls in at once; each call still has its own
/// lease, renewal and fencing token. One key is used by one kind at a time (a
/// key's read and write locks are one kind): a call of another kind fails with
/// `LockError::KeyInUse`.
///
/// ```
/// use fencelock::{LockClient, LockError, current_shard, redis_lock, with_client};
///
/// // Readers of an item run together; a writer runs alone.
/// #[redis_lock(key = "item:{id}", mode = Read)]
/// async fn show(id: u32) -> Result<String, LockError> {
///     Ok(format!("item {id}"))
/// }
///
/// #[redis_lock(key = "item:{id}", mode = Write)]
/// async fn rename(id: u32, name: &str) -> Result<(), LockError> {
///     Ok(())
/// }
///
/// // At most `EXPORTS` exports at once, across every process.
/// const EXPORTS: u32 = 3;
///
/// #[redis_lock(key = "exports", permits = EXPORTS)]
/// async fn export(report: &str) -> Result<usize, LockError> {
///     Ok(report.len())
/// }
///
/// // A hot item's stock split into 16 shards, each with its own lock: 16 calls
/// // at once, each taking from its own shard.
/// #[redis_lock(key = "stock:{sku}", shards = 16)]
/// async fn take(sku: &str) -> Result<u32, LockError> {
///     Ok(current_shard().expect("a segmented lock's body holds a shard"))
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), LockError> {
/// with_client(LockClient::memory(), async {
///     let (first, second) = tokio::join!(show(7), show(7));
///     assert_eq!(first?, second?);
///     rename(7, "tea").await?;
///     assert_eq!(export("daily").await?, 5);
///     assert!(take("tea").await? < 16);
///     Ok(())
/// })
/// .await
/// # }
/// ```
///
/// # With `#[tracing::instrument]`
///
/// The attribute written first wraps the other. With `#[redis_lock]` above
/// `#[tracing::instrument]`, the span covers the whole call: the wait for
/// the lock, the body, the release, and a call that ends without running the
/// body (`NotAcquired`). With `#[tracing::instrument]` above `#[redis_lock]`,
/// the span covers only the body, and a call that never gets the lock
/// creates no span.
#[proc_macro_attribute]
pub fn redis_lock(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand::redis_lock(attr.into(), item.into()).into()
}

/// [`redis_lock`] under a name that names no store: the attribute is the same, with the same
/// arguments and checks, and the client decides where the lock lives (Redis, PostgreSQL,
/// MySQL, the memory backend).
///
/// ```
/// use fencelock::{LockClient, LockError, lock, with_client};
///
/// #[lock(key = "report:{day}", ttl_ms = 60_000, action = GiveUp)]
/// async fn build_report(day: u32) -> Result<u32, LockError> {
///     Ok(day)
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// // `LockClient::postgres("postgres://...")` or `LockClient::connect("redis://...")` alike.
/// let built = with_client(LockClient::memory(), build_report(3)).await;
/// assert_eq!(built.unwrap(), 3);
/// # }
/// ```
#[proc_macro_attribute]
pub fn lock(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand::redis_lock(attr.into(), item.into()).into()
}

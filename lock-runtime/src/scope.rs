//! The locks held around the running `#[redis_lock]` body: its fencing token, and reentry.
//!
//! A task-local scoped to each holder's body, not a thread or task id: only code nested in
//! the body's future sees it. Two branches of one `join!` are polled outside each other's
//! scope, and a task spawned from the body starts with no scope, so both wait like anyone
//! else.

use std::future::Future;

tokio::task_local! {
    static HELD: Vec<Held>;
}

/// One lock held around the current body.
#[derive(Debug, Clone)]
pub(crate) struct Held {
    pub(crate) client_id: u64,
    pub(crate) key: String,
    pub(crate) token: u64,
}

/// Inside the body of a `#[redis_lock]` function, the fencing token of the innermost lock
/// held; `None` elsewhere (including in tasks spawned from the body).
pub fn current_token() -> Option<u64> {
    HELD.try_with(|held| held.last().map(|h| h.token))
        .ok()
        .flatten()
}

/// The token of `key` if the current body runs under it, taken through the same client.
pub(crate) fn held_token(client_id: u64, key: &str) -> Option<u64> {
    HELD.try_with(|held| {
        held.iter()
            .find(|h| h.client_id == client_id && h.key == key)
            .map(|h| h.token)
    })
    .ok()
    .flatten()
}

/// Runs `body` with `lock` as the innermost held lock.
pub(crate) async fn holding<F: Future>(lock: Held, body: F) -> F::Output {
    let mut held = HELD.try_with(Vec::clone).unwrap_or_default();
    held.push(lock);
    HELD.scope(held, body).await
}

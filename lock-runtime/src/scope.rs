//! What the body of a `#[redis_lock]` function can ask about the locks it runs under.

use std::future::Future;

tokio::task_local! {
    /// Fencing tokens of the locks held around the current body, innermost last.
    static HELD_TOKENS: Vec<u64>;
}

/// Inside the body of a `#[redis_lock]` function, the fencing token of the innermost lock
/// held; `None` elsewhere (including in tasks spawned from the body).
pub fn current_token() -> Option<u64> {
    HELD_TOKENS
        .try_with(|tokens| tokens.last().copied())
        .ok()
        .flatten()
}

/// Runs `body` with `token` as the innermost held lock.
pub(crate) async fn holding<F: Future>(token: u64, body: F) -> F::Output {
    let mut tokens = HELD_TOKENS.try_with(Vec::clone).unwrap_or_default();
    tokens.push(token);
    HELD_TOKENS.scope(tokens, body).await
}

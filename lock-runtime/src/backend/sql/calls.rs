//! Where the backend's calls run, and how an abandoned one is settled.
//!
//! Every call runs as a task on the library's background runtime, where the connection pool
//! lives (so that it outlives the runtime of whoever made the client). The caller waits for
//! it at most the response timeout; a caller that stops waiting (its timeout, its deadline,
//! or its future dropped) leaves the task running until the database has answered, and the
//! next call on the same key waits until it has: whatever an abandoned call does, it does
//! before anything sent after it on that key (the backend contract's settled calls: an
//! owner-checked release after a cut acquire cannot be overtaken by it, and a release sent
//! again sees the first one's effect). Calls on other keys, and renewals, never wait.
//!
//! A task ends at most twice the response timeout after it started: its statements give up a lock
//! wait after a second and are not tried again past the response timeout, and a database that
//! does not answer at all is given up on then (only then can a call still apply later, when a
//! stalled server resumes).

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

use crate::LockError;
use crate::background::Background;
use crate::sync::lock_ignoring_poison;

#[derive(Debug)]
pub(crate) struct Calls {
    /// Per key, how many abandoned calls are still running (keys without any are absent).
    abandoned: Arc<Mutex<HashMap<String, watch::Sender<usize>>>>,
    response_timeout: Duration,
}

/// Whether a call has finished, and whether its caller stopped waiting for it.
#[derive(Default)]
struct CallState {
    finished: bool,
    abandoned: bool,
}

/// Marks a call on `key` abandoned if its caller stops waiting before it finished.
struct Waiting<'a> {
    state: Arc<Mutex<CallState>>,
    key: Option<&'a str>,
    abandoned: &'a Mutex<HashMap<String, watch::Sender<usize>>>,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let mut state = lock_ignoring_poison(&self.state);
        if let (false, Some(key)) = (state.finished, self.key) {
            state.abandoned = true;
            let mut abandoned = lock_ignoring_poison(self.abandoned);
            let count = abandoned
                .entry(key.to_owned())
                .or_insert_with(|| watch::Sender::new(0));
            count.send_modify(|count| *count += 1);
        }
    }
}

impl Calls {
    pub(crate) fn new(response_timeout: Duration) -> Self {
        Calls {
            abandoned: Arc::default(),
            response_timeout,
        }
    }

    /// Runs `call` on the background runtime once every abandoned call on `key` has finished; waits for
    /// it at most the response timeout (past it, an error on behalf of `key`). `call` gets
    /// the instant after which it must not try again.
    pub(crate) async fn run<T, F, Fut>(&self, key: Option<&str>, call: F) -> Result<T, LockError>
    where
        T: Send + 'static,
        F: FnOnce(tokio::time::Instant) -> Fut,
        Fut: Future<Output = Result<T, LockError>> + Send + 'static,
    {
        if let Some(key) = key {
            self.settle(key).await;
        }
        let started = tokio::time::Instant::now();
        let call = call(started + self.response_timeout);
        let state = Arc::new(Mutex::new(CallState::default()));
        let (task_state, abandoned) = (state.clone(), self.abandoned.clone());
        let task_key = key.map(str::to_owned);
        // The response timeout for its tries, and as long again for the statement in flight
        // when it ran out.
        let limit = self.response_timeout * 2;
        let task = Background::Driver.spawn(async move {
            let outcome = tokio::time::timeout(limit, call).await;
            let mut state = lock_ignoring_poison(&task_state);
            state.finished = true;
            if let (true, Some(key)) = (state.abandoned, task_key) {
                let mut abandoned = lock_ignoring_poison(&abandoned);
                if let Some(count) = abandoned.get(&key) {
                    count.send_modify(|count| *count -= 1);
                    if *count.borrow() == 0 {
                        abandoned.remove(&key);
                    }
                }
            }
            outcome
        })?;
        let waiting = Waiting {
            state,
            key,
            abandoned: &self.abandoned,
        };
        let joined = tokio::time::timeout_at(started + self.response_timeout, task).await;
        let timed_out = || {
            let ms = self.response_timeout.as_millis();
            let message =
                format!("the database did not answer within the response timeout ({ms} ms)");
            LockError::backend(key, message, None)
        };
        let outcome = match joined {
            Ok(Ok(Ok(outcome))) => outcome,
            Ok(Ok(Err(_))) | Err(_) => Err(timed_out()),
            Ok(Err(failed)) => Err(LockError::backend(
                key,
                format!("a database call ended without an answer: {failed}"),
                None,
            )),
        };
        drop(waiting);
        outcome
    }

    /// Waits until no abandoned call on `key` is running.
    async fn settle(&self, key: &str) {
        let count = lock_ignoring_poison(&self.abandoned)
            .get(key)
            .map(watch::Sender::subscribe);
        if let Some(mut count) = count {
            // The sender stays in the map until the count is 0 again.
            let _ = count.wait_for(|count| *count == 0).await;
        }
    }
}

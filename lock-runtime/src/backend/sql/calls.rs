//! Where the backend's calls run, and how an abandoned one is settled.
//!
//! Every call runs as a task on the library's driver runtime, where the connection pool
//! lives (so that it outlives the runtime of whoever made the client), bounded by the
//! response timeout. A caller that stops waiting (its deadline passed, or its future was
//! dropped) leaves the task running: the next call waits until it has finished, so that
//! whatever it does happens before anything sent after it (the backend contract's settled
//! calls: an owner-checked release after a cut acquire cannot be overtaken by it).

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

use crate::LockError;
use crate::driver::Background;
use crate::sync::lock_ignoring_poison;

#[derive(Debug)]
pub(crate) struct Calls {
    /// How many abandoned calls are still running.
    abandoned: watch::Sender<usize>,
    response_timeout: Duration,
}

/// Whether a call has finished, and whether its caller stopped waiting for it.
#[derive(Default)]
struct CallState {
    finished: bool,
    abandoned: bool,
}

/// Marks a call abandoned if its caller stops waiting before it finished.
struct Waiting<'a> {
    state: Arc<Mutex<CallState>>,
    abandoned: &'a watch::Sender<usize>,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let mut state = lock_ignoring_poison(&self.state);
        if !state.finished {
            state.abandoned = true;
            self.abandoned.send_modify(|count| *count += 1);
        }
    }
}

impl Calls {
    pub(crate) fn new(response_timeout: Duration) -> Self {
        Calls {
            abandoned: watch::Sender::new(0),
            response_timeout,
        }
    }

    /// Runs `call` on the driver once every abandoned call has finished, for at most the
    /// response timeout (past it, an error on behalf of `key`).
    pub(crate) async fn run<T: Send + 'static>(
        &self,
        key: Option<&str>,
        call: impl Future<Output = Result<T, LockError>> + Send + 'static,
    ) -> Result<T, LockError> {
        self.settle().await;
        let state = Arc::new(Mutex::new(CallState::default()));
        let (task_state, abandoned) = (state.clone(), self.abandoned.clone());
        let timeout = self.response_timeout;
        let task = Background::Driver.spawn(async move {
            let outcome = tokio::time::timeout(timeout, call).await;
            let mut state = lock_ignoring_poison(&task_state);
            state.finished = true;
            if state.abandoned {
                abandoned.send_modify(|count| *count -= 1);
            }
            outcome
        })?;
        let waiting = Waiting {
            state,
            abandoned: &self.abandoned,
        };
        let joined = task.await;
        drop(waiting);
        match joined {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(_)) => Err(LockError::backend(
                key,
                format!(
                    "the database did not answer within the response timeout ({} ms)",
                    timeout.as_millis()
                ),
                None,
            )),
            Err(failed) => Err(LockError::backend(
                key,
                format!("a database call ended without an answer: {failed}"),
                None,
            )),
        }
    }

    /// Waits until no abandoned call is running.
    async fn settle(&self) {
        let mut abandoned = self.abandoned.subscribe();
        // The sender lives in `self`: the wait cannot end without an answer.
        let _ = abandoned.wait_for(|count| *count == 0).await;
    }
}

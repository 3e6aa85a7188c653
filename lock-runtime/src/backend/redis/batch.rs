//! Natural batching (group commit): while a call of a script is in flight to a server (or a
//! cluster slot), the calls of the same script that the client's other requests make there
//! wait, and go out together as one call of the script's batch function once it is answered
//! (see `lua/batch.lua`). A lone call goes out at once, without a timer or any added delay;
//! under load, one call carries the many that came meanwhile, which saves the server the
//! cost of a call, a reply and an event-loop turn for each.
//!
//! A batch is sent by a task of its own, so that a request cancelled while its call is in
//! flight never leaves the calls that waited for it unsent or unanswered. A waiting call
//! whose request gave up before its batch went out is left out of it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::cluster_async::ClusterConnection;
use redis::{RedisError, RedisResult, Value};
use tokio::sync::oneshot;

use super::connection::{Connection, Route};
use super::scripts::{Call, Caller, LockScript};
use crate::background::{self, Background};
use crate::sync::lock_ignoring_poison;

/// The calls of one script to one server or slot, with as many keys and arguments each: the
/// calls that may share a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct LineKey {
    /// The script, by its address in the library (a static).
    script: usize,
    slot: u16,
    keys: usize,
    args: usize,
}

/// A line of calls: whether one of them is in flight, and the calls waiting for it to end.
#[derive(Default)]
struct Line {
    waiting: Vec<Waiting>,
}

/// A call waiting for the one in flight, and where its reply goes.
struct Waiting {
    call: Call,
    reply: oneshot::Sender<RedisResult<Value>>,
}

/// The lines of one backend. A line exists while a call of it is in flight.
#[derive(Default)]
pub(crate) struct Batches {
    lines: Arc<Mutex<HashMap<LineKey, Line>>>,
}

/// How a call joined its line.
pub(crate) enum Joined {
    /// The call goes out at once, on its own: its script, or its server, has no batches.
    Unbatched(Call),
    /// Nothing was in flight: the call goes out at once, by its request; the other calls
    /// that come meanwhile wait until `Sending` is dropped.
    Alone(Call, Sending),
    /// A call is in flight: this one waits for it, then goes out in a batch. The reply comes
    /// here.
    Waits(oneshot::Receiver<RedisResult<Value>>),
}

/// Held while a lone call is in flight; dropped (answered, failed, or its request
/// cancelled), it sends the calls that waited meanwhile as a batch.
pub(crate) struct Sending {
    lines: Arc<Mutex<HashMap<LineKey, Line>>>,
    line: LineKey,
    script: &'static LockScript,
    sender: Sender,
}

impl Drop for Sending {
    fn drop(&mut self) {
        let waiting = take_waiting(&self.lines, self.line);
        if waiting.is_empty() {
            return;
        }
        let flusher = Flusher {
            lines: Arc::clone(&self.lines),
            line: self.line,
            finished: false,
        };
        let flush = flusher.flush(self.script, self.sender.clone(), waiting);
        // On the runtime of the request (whose connection it goes through), else the
        // library's own. A runtime that is shutting down drops the task, and with it the
        // batch: its calls fail as unanswered, and the line ends (see `Flusher`).
        match background::caller_runtime() {
            Some(runtime) => drop(runtime.spawn(flush)),
            None => {
                if let Err(error) = Background::Driver.spawn(flush) {
                    tracing::error!(target: "fencelock", %error, "cannot send a batch of calls");
                }
            }
        }
    }
}

impl Batches {
    /// Puts `call` of `script` to `slot` (0 off a cluster) in its line.
    pub(crate) fn join(
        &self,
        script: &'static LockScript,
        slot: u16,
        call: Call,
        sender: impl FnOnce() -> Sender,
    ) -> Joined {
        let line = LineKey {
            script: std::ptr::from_ref(script) as usize,
            slot,
            keys: call.keys.len(),
            args: call.args.len(),
        };
        let mut lines = lock_ignoring_poison(&self.lines);
        match lines.get_mut(&line) {
            Some(waiting) => {
                let (reply, replied) = oneshot::channel();
                waiting.waiting.push(Waiting { call, reply });
                Joined::Waits(replied)
            }
            None => {
                lines.insert(line, Line::default());
                drop(lines);
                let sending = Sending {
                    lines: Arc::clone(&self.lines),
                    line,
                    script,
                    sender: sender(),
                };
                Joined::Alone(call, sending)
            }
        }
    }
}

/// Takes the calls waiting in `line`; with none, the line ends (nothing is in flight).
fn take_waiting(lines: &Mutex<HashMap<LineKey, Line>>, line: LineKey) -> Vec<Waiting> {
    let mut lines = lock_ignoring_poison(lines);
    let waiting = lines
        .get_mut(&line)
        .map(|line| std::mem::take(&mut line.waiting))
        .unwrap_or_default();
    if waiting.is_empty() {
        lines.remove(&line);
    }
    waiting
}

/// Sends a line's batches, from a task of its own. Dropped before the line ran dry (its
/// runtime shut down), it ends the line: the calls waiting there then fail as unanswered,
/// and the next call goes out alone, rather than waiting for a batch nobody sends.
struct Flusher {
    lines: Arc<Mutex<HashMap<LineKey, Line>>>,
    line: LineKey,
    finished: bool,
}

impl Flusher {
    /// Sends `waiting` as a batch, then whatever waited for that batch, until nothing waits.
    async fn flush(
        mut self,
        script: &'static LockScript,
        sender: Sender,
        mut waiting: Vec<Waiting>,
    ) {
        while !waiting.is_empty() {
            // A request that gave up before its call went out takes no part.
            waiting.retain(|call| !call.reply.is_closed());
            let (calls, replies): (Vec<Call>, Vec<_>) = waiting
                .drain(..)
                .map(|waiting| (waiting.call, waiting.reply))
                .unzip();
            if !calls.is_empty() {
                match sender.send(script, &calls).await {
                    Ok(answers) => {
                        for (reply, answer) in replies.into_iter().zip(answers) {
                            let _ = reply.send(answer);
                        }
                    }
                    Err(error) => {
                        for reply in replies {
                            let _ = reply.send(Err(error.clone()));
                        }
                    }
                }
            }
            waiting = take_waiting(&self.lines, self.line);
        }
        self.finished = true;
    }
}

impl Drop for Flusher {
    fn drop(&mut self) {
        if !self.finished {
            lock_ignoring_poison(&self.lines).remove(&self.line);
        }
    }
}

/// What a batch needs of its backend to go out from a task of its own.
#[derive(Clone)]
pub(crate) enum Sender {
    /// One server: the connection of the runtime the batch is sent from.
    Server {
        connection: Arc<Connection>,
        caller: Arc<Caller>,
    },
    /// A Redis Cluster: its command connection, and how long a reply may take.
    Cluster {
        commands: ClusterConnection,
        caller: Arc<Caller>,
        response_timeout: Duration,
    },
}

impl Sender {
    /// Sends `calls` of `script` as one batch: one reply per call, or what kept the batch
    /// from being answered.
    async fn send(
        &self,
        script: &LockScript,
        calls: &[Call],
    ) -> RedisResult<Vec<RedisResult<Value>>> {
        match self {
            Sender::Server { connection, caller } => {
                let live = connection.get(Route::here()).await?;
                let replies = caller
                    .call_batch(script, calls, &mut live.connection())
                    .await;
                match &replies {
                    Err(error) => {
                        connection.note_error(&live, error);
                    }
                    Ok(replies) => {
                        for error in replies.iter().filter_map(|reply| reply.as_ref().err()) {
                            connection.note_error(&live, error);
                        }
                    }
                }
                replies
            }
            Sender::Cluster {
                commands,
                caller,
                response_timeout,
            } => {
                let mut commands = commands.clone();
                let sent = caller.call_batch(script, calls, &mut commands);
                tokio::time::timeout(*response_timeout, sent)
                    .await
                    .unwrap_or_else(|_| {
                        Err(RedisError::from(std::io::Error::new(
                            std::io::ErrorKind::TimedOut,
                            format!(
                                "Redis Cluster did not answer a batch of calls within the \
                                 response timeout ({} ms)",
                                response_timeout.as_millis()
                            ),
                        )))
                    })
            }
        }
    }
}

//! The future of a `#[redis_lock]` call: acquire, run the body under the lock, release.
//!
//! Written out as a state machine rather than as `async fn`s passing the body down to each
//! other: each of those would hold the body's future by value beside the next one's, so a
//! locked call nested in another's body multiplied the outer future's size at every level
//! (and overflowed a task's stack a few levels down). Here the body lives in one field,
//! pinned where it stands; what does not depend on it (the acquisition, the release) is
//! boxed, which also keeps the compiler's `Send` check shallow however deep calls nest.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;

use crate::__private::{AwaitRelease, LockResult, ReleaseInBackground};
use crate::backend::BoxFuture;
use crate::body_scope::{self, Chain, Held};
use crate::error::WithSources;
use crate::telemetry::LockSpan;
use crate::{LockClient, LockError, LockGuard, LockKind, LockOptions, MultiGuard, OnLost};

pin_project! {
    /// A `#[redis_lock]` call's future (see `LockedCall::new`).
    pub struct LockedCall<F: Future, E: EndLock<F::Output>> {
        // Before `state`: the body is dropped before the guard releases the lock.
        #[pin]
        body: Option<F>,
        state: State<E::Kept>,
        // The call's span: the wait, the body and the release run in it.
        span: tracing::Span,
    }

    impl<F: Future, E: EndLock<F::Output>> PinnedDrop for LockedCall<F, E> {
        fn drop(this: Pin<&mut Self>) {
            let mut this = this.project();
            let _entered = this.span.enter();
            // A body dropped before its end (the call cancelled) still sees its locks.
            if let State::Running { chain, waiting, .. } = this.state {
                chain.scope(|| this.body.set(None));
                stop_waiting(chain, waiting);
            }
        }
    }
}

/// How a locked call ends its lock once the body returned.
pub trait EndLock<R> {
    /// What the call keeps while the release runs.
    type Kept;

    /// `Ok` to await the guard's release before returning, keeping this; `Err` to return
    /// the output at once, the guard's drop releasing in the background.
    fn keep(output: R) -> Result<Self::Kept, R>;

    /// The call's output once the release of `key` ended with `released`: `Err` for a loss
    /// that fails the call.
    fn after_release(
        kept: Self::Kept,
        released: Result<(), LockError>,
        key: &str,
        on_lost: OnLost,
    ) -> Result<R, LockError>;
}

impl<R> EndLock<R> for AwaitRelease {
    type Kept = R;

    fn keep(output: R) -> Result<R, R> {
        Ok(output)
    }

    fn after_release(
        output: R,
        released: Result<(), LockError>,
        key: &str,
        on_lost: OnLost,
    ) -> Result<R, LockError> {
        match released {
            Ok(()) => Ok(output),
            Err(lost) if lost.is_lost() && on_lost == OnLost::Abort => Err(lost),
            Err(error) => {
                tracing::warn!(target: "fencelock", %key, error = %WithSources(&error), "lock release after the body failed; returning the body's output");
                Ok(output)
            }
        }
    }
}

impl<R> EndLock<R> for ReleaseInBackground {
    /// Nothing is kept: the output is never held across the release.
    type Kept = Infallible;

    fn keep(output: R) -> Result<Infallible, R> {
        Err(output)
    }

    fn after_release(
        kept: Infallible,
        _: Result<(), LockError>,
        _: &str,
        _: OnLost,
    ) -> Result<R, LockError> {
        match kept {}
    }
}

enum State<K> {
    /// The call fails with this before the body runs.
    Failed(LockError),
    /// Taking the keys not held yet; `reentered`: those the body already runs under.
    Acquiring {
        acquire: BoxFuture<'static, Result<Vec<LockGuard>, LockError>>,
        reentered: Vec<Held>,
        on_lost: OnLost,
        exhausted: Arc<AtomicBool>,
    },
    /// The body runs with `chain` as its locks; `guards` holds those taken by this call (not
    /// a reentered lock, which only its outermost holder releases). `waiting`: the call's
    /// registration with each lock's loss signal, given back when the body ends.
    Running {
        chain: Arc<Chain>,
        guards: Vec<LockGuard>,
        on_lost: OnLost,
        waiting: Vec<Option<u64>>,
    },
    Releasing {
        release: BoxFuture<'static, Result<(), LockError>>,
        kept: K,
        key: String,
        on_lost: OnLost,
    },
    Done,
}

impl<F, E> LockedCall<F, E>
where
    F: Future<Output: LockResult>,
    E: EndLock<F::Output>,
{
    /// The call of `body` under the lock `keys` names: one key of any kind, or several
    /// mutexes, taken all or none in sorted order (as `LockClient::lock_all`).
    ///
    /// - Failing to acquire returns the error without running `body`.
    /// - If the body already runs under a key through the same client (a nested call), that
    ///   key is re-entered: no round trip, the holder's token and loss signal, and only the
    ///   outermost holder releases. A read re-enters a write of the key; other mixes are
    ///   refused (see `LockKind::reenters`).
    /// - With `OnLost::Abort`, a lost lease drops `body` at its next `.await` and returns
    ///   `LockError::Lost`.
    /// - If `body` panics or this future is dropped, the guard's `Drop` releases the lock.
    pub(crate) fn new(
        client: Result<LockClient, LockError>,
        keys: impl Into<CallKeys>,
        kind: LockKind,
        options: LockOptions,
        body: F,
    ) -> Self {
        let CallKeys { keys, exhausted } = keys.into();
        let keys = keys.map(|mut keys| {
            keys.sort_unstable();
            keys.dedup();
            keys
        });
        // Several keys: a span of the call, around the `fencelock.lock` span of each key's
        // acquisition (which count in the metrics, as `lock_all`'s do).
        let (span, lock_span) = match &keys {
            Ok(keys) if keys.len() > 1 => {
                let keys = keys.join(", ");
                let span = tracing::info_span!(target: "fencelock", "fencelock.lock_all", keys);
                (span, None)
            }
            _ => {
                let key = keys.as_deref().ok().and_then(<[String]>::first);
                let span = LockSpan::new(key.map_or("", String::as_str), kind, &options);
                (span.span().clone(), Some(span))
            }
        };
        LockedCall {
            body: Some(body),
            span,
            state: first_state(client, (keys, exhausted), kind, options, lock_span),
        }
    }
}

/// The keys of a locked call, as rendered from the attribute's `key` or `keys`, and what its
/// body's [`shard_exhausted`](crate::shard_exhausted) sets (see `ShardRuns`).
#[derive(Debug)]
pub struct CallKeys {
    keys: Result<Vec<String>, LockError>,
    exhausted: Arc<AtomicBool>,
}

impl CallKeys {
    /// `key`, whose body's marking of its shard exhausted sets `exhausted`.
    pub(crate) fn marking(key: Result<String, LockError>, exhausted: Arc<AtomicBool>) -> Self {
        CallKeys {
            keys: key.map(|key| vec![key]),
            exhausted,
        }
    }
}

impl From<Result<String, LockError>> for CallKeys {
    fn from(key: Result<String, LockError>) -> Self {
        CallKeys::marking(key, Arc::default())
    }
}

impl From<Result<Vec<String>, LockError>> for CallKeys {
    fn from(keys: Result<Vec<String>, LockError>) -> Self {
        CallKeys {
            keys,
            exhausted: Arc::default(),
        }
    }
}

/// Gives back the call's registrations with its locks' loss signals.
fn stop_waiting(chain: &Chain, waiting: &mut [Option<u64>]) {
    for (held, waiting) in chain.held.iter().zip(waiting) {
        held.signal.stop_waiting(waiting);
    }
}

/// Where a call starts: refused, re-entered, or acquiring the keys not held yet. `span`: the
/// `fencelock.lock` span of a one-key call.
fn first_state<K>(
    client: Result<LockClient, LockError>,
    (keys, exhausted): (Result<Vec<String>, LockError>, Arc<AtomicBool>),
    kind: LockKind,
    options: LockOptions,
    span: Option<LockSpan>,
) -> State<K> {
    let started = client
        .and_then(|client| Ok((client, keys?)))
        .and_then(|(client, keys)| start(client, keys, kind, options, span.as_ref(), exhausted));
    started.unwrap_or_else(|error| {
        if let Some(span) = &span {
            span.acquired(Err(&error), 0);
        }
        State::Failed(error)
    })
}

/// `keys`: sorted, each once.
fn start<K>(
    client: LockClient,
    keys: Vec<String>,
    kind: LockKind,
    options: LockOptions,
    span: Option<&LockSpan>,
    exhausted: Arc<AtomicBool>,
) -> Result<State<K>, LockError> {
    if keys.len() > 1 && kind != LockKind::Mutex {
        return Err(LockError::invalid_config(format!(
            "a lock of several keys takes each as a mutex, not as a {} lock; lock one key, or \
             leave out `mode`, `permits` and `shards`",
            kind.name()
        )));
    }
    let mut reentered = Vec::new();
    let mut to_take = Vec::new();
    for key in keys {
        match body_scope::reentry(client.id(), &key, kind, &options)? {
            Some(held) => reentered.push(held),
            None => to_take.push(key),
        }
    }
    let on_lost = options.on_lost;
    let acquire: BoxFuture<'static, Result<Vec<LockGuard>, LockError>> = match &to_take[..] {
        [] => {
            if let Some(span) = span {
                span.reentered(reentered[0].token);
            }
            return Ok(State::Running {
                waiting: vec![None; reentered.len()],
                chain: Chain::inside_current(reentered),
                guards: Vec::new(),
                on_lost,
            });
        }
        [key] => {
            let request = client.request(key.clone(), kind).options(options);
            match span.cloned() {
                Some(span) => Box::pin(async move { Ok(vec![request.acquire_in(span).await?]) }),
                None => Box::pin(async move { Ok(vec![request.acquire().await?]) }),
            }
        }
        _ => {
            let request = client.lock_all(to_take).options(options);
            Box::pin(async move { Ok(request.acquire().await?.into_guards()) })
        }
    };
    Ok(State::Acquiring {
        acquire,
        reentered,
        on_lost,
        exhausted,
    })
}

impl<F, E> Future for LockedCall<F, E>
where
    F: Future<Output: LockResult>,
    E: EndLock<F::Output>,
{
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let mut this = self.project();
        let _entered = this.span.enter();
        loop {
            // The body is polled with its state in place, so that a panic in it leaves the
            // call `Running`: the drop then ends the body in its locks, and only then
            // releases the guard.
            if let State::Running {
                chain,
                on_lost,
                waiting,
                ..
            } = this.state
            {
                if *on_lost == OnLost::Abort
                    && let Some(lost) = poll_lost(chain, waiting, cx)
                {
                    chain.scope(|| this.body.set(None));
                    stop_waiting(chain, waiting);
                    // The guard is dropped with the state: released in the background.
                    *this.state = State::Done;
                    return Poll::Ready(F::Output::from_lock_error(lost));
                }
                let Some(body) = this.body.as_mut().as_pin_mut() else {
                    panic!("a `#[redis_lock]` call polled after it completed")
                };
                let Poll::Ready(output) = chain.scope(|| body.poll(cx)) else {
                    return Poll::Pending;
                };
                this.body.set(None);
                stop_waiting(chain, waiting);
                let State::Running {
                    guards, on_lost, ..
                } = std::mem::replace(this.state, State::Done)
                else {
                    return Poll::Ready(output);
                };
                if guards.is_empty() {
                    // Reentered locks: their outermost holders release.
                    return Poll::Ready(output);
                }
                *this.state = match E::keep(output) {
                    Err(output) => return Poll::Ready(output),
                    Ok(kept) => State::Releasing {
                        key: guards
                            .iter()
                            .map(LockGuard::key)
                            .collect::<Vec<_>>()
                            .join(", "),
                        release: Box::pin(MultiGuard::from_guards(guards).release()),
                        kept,
                        on_lost,
                    },
                };
                continue;
            }
            // The other states are taken out, and put back if they have to wait.
            *this.state = match std::mem::replace(this.state, State::Done) {
                State::Failed(error) => return Poll::Ready(F::Output::from_lock_error(error)),
                State::Acquiring {
                    mut acquire,
                    mut reentered,
                    on_lost,
                    exhausted,
                } => match acquire.as_mut().poll(cx) {
                    Poll::Pending => {
                        *this.state = State::Acquiring {
                            acquire,
                            reentered,
                            on_lost,
                            exhausted,
                        };
                        return Poll::Pending;
                    }
                    Poll::Ready(Ok(guards)) => {
                        reentered.extend(guards.iter().map(|guard| Held::of(guard, &exhausted)));
                        reentered.sort_unstable_by(|a, b| a.lease.key.cmp(&b.lease.key));
                        State::Running {
                            waiting: vec![None; reentered.len()],
                            chain: Chain::inside_current(reentered),
                            guards,
                            on_lost,
                        }
                    }
                    Poll::Ready(Err(error)) => State::Failed(error),
                },
                // Polled above.
                running @ State::Running { .. } => running,
                State::Releasing {
                    mut release,
                    kept,
                    key,
                    on_lost,
                } => match release.as_mut().poll(cx) {
                    Poll::Pending => {
                        *this.state = State::Releasing {
                            release,
                            kept,
                            key,
                            on_lost,
                        };
                        return Poll::Pending;
                    }
                    Poll::Ready(released) => {
                        let output = E::after_release(kept, released, &key, on_lost);
                        return Poll::Ready(output.unwrap_or_else(F::Output::from_lock_error));
                    }
                },
                State::Done => panic!("a `#[redis_lock]` call polled after it completed"),
            };
        }
    }
}

/// The first loss among the call's locks, registering the task with each signal meanwhile.
fn poll_lost(
    chain: &Chain,
    waiting: &mut [Option<u64>],
    cx: &mut Context<'_>,
) -> Option<LockError> {
    chain.held.iter().zip(waiting).find_map(|(held, waiting)| {
        match held.signal.poll_lost(waiting, cx) {
            Poll::Ready(cause) => Some(LockError::lost(held.lease.key.clone(), cause)),
            Poll::Pending => None,
        }
    })
}

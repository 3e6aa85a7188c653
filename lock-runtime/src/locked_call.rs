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
use std::task::{Context, Poll};

use pin_project_lite::pin_project;

use crate::__private::{AwaitRelease, LockResult, ReleaseInBackground};
use crate::backend::BoxFuture;
use crate::body_scope::{self, Chain, Held};
use crate::error::WithSources;
use crate::telemetry::LockSpan;
use crate::{LockClient, LockError, LockGuard, LockKind, LockOptions, OnLost};

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
                chain.held.signal.stop_waiting(waiting);
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

#[expect(
    clippy::large_enum_variant,
    reason = "one per call, in place in the call's future; boxing the guard would cost an allocation per call"
)]
enum State<K> {
    /// The call fails with this before the body runs.
    Failed(LockError),
    Acquiring {
        acquire: BoxFuture<'static, Result<LockGuard, LockError>>,
        on_lost: OnLost,
    },
    /// The body runs with `chain` as its locks; `guard` is `None` for a reentered lock, which
    /// only its outermost holder releases. `waiting`: the call's registration with the loss
    /// signal, given back when the body ends.
    Running {
        chain: Arc<Chain>,
        guard: Option<LockGuard>,
        on_lost: OnLost,
        waiting: Option<u64>,
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
    /// The call of `body` under the lock `key`.
    ///
    /// - Failing to acquire returns the error without running `body`.
    /// - If the body already runs under `key` through the same client (a nested call), it is
    ///   re-entered: no round trip, the holder's token and loss signal, and only the
    ///   outermost holder releases. A read re-enters a write of the key; other mixes are
    ///   refused (see `LockKind::reenters`).
    /// - With `OnLost::Abort`, a lost lease drops `body` at its next `.await` and returns
    ///   `LockError::Lost`.
    /// - If `body` panics or this future is dropped, the guard's `Drop` releases the lock.
    pub(crate) fn new(
        client: Result<LockClient, LockError>,
        key: Result<String, LockError>,
        kind: LockKind,
        options: LockOptions,
        body: F,
    ) -> Self {
        let span = LockSpan::new(key.as_deref().unwrap_or_default(), kind, &options);
        LockedCall {
            body: Some(body),
            span: span.span().clone(),
            state: first_state(client, key, kind, options, span),
        }
    }
}

/// Where a call starts: refused, re-entered, or acquiring.
fn first_state<K>(
    client: Result<LockClient, LockError>,
    key: Result<String, LockError>,
    kind: LockKind,
    options: LockOptions,
    span: LockSpan,
) -> State<K> {
    let (client, key) = match client.and_then(|client| Ok((client, key?))) {
        Ok(found) => found,
        Err(error) => {
            span.acquired(Err(&error), 0);
            return State::Failed(error);
        }
    };
    let Some(held) = body_scope::held(client.id(), &key) else {
        let request = client.request(key, kind).options(options);
        return State::Acquiring {
            acquire: Box::pin(request.acquire_in(span)),
            on_lost: options.on_lost,
        };
    };
    // Reentering sends nothing, so nothing else checks the options (which expressions may
    // have made invalid); `acquire` does on the other path.
    let valid = kind
        .validate()
        .and_then(|()| kind.reenters(held.kind, held.shard, &key))
        .and_then(|()| options.validate());
    if let Err(error) = valid {
        span.acquired(Err(&error), 0);
        return State::Failed(error);
    }
    span.reentered(held.token);
    State::Running {
        chain: Chain::inside_current(held),
        guard: None,
        on_lost: options.on_lost,
        waiting: None,
    }
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
                let signal = &chain.held.signal;
                if *on_lost == OnLost::Abort
                    && let Poll::Ready(cause) = signal.poll_lost(waiting, cx)
                {
                    chain.scope(|| this.body.set(None));
                    let lost = LockError::lost(chain.held.key.clone(), cause);
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
                signal.stop_waiting(waiting);
                let State::Running {
                    guard: Some(guard),
                    on_lost,
                    ..
                } = std::mem::replace(this.state, State::Done)
                else {
                    // A reentered lock: its outermost holder releases.
                    return Poll::Ready(output);
                };
                *this.state = match E::keep(output) {
                    Err(output) => return Poll::Ready(output),
                    Ok(kept) => State::Releasing {
                        key: guard.key().to_owned(),
                        release: Box::pin(guard.release()),
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
                    on_lost,
                } => match acquire.as_mut().poll(cx) {
                    Poll::Pending => {
                        *this.state = State::Acquiring { acquire, on_lost };
                        return Poll::Pending;
                    }
                    Poll::Ready(Ok(guard)) => State::Running {
                        chain: Chain::inside_current(Held::of(&guard)),
                        guard: Some(guard),
                        on_lost,
                        waiting: None,
                    },
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

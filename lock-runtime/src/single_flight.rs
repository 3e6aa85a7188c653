//! `action = Share`: single-flight. While one call computes under a key's mutex, the other
//! calls of the same function and key get its value instead of computing it again.
//!
//! In this process, the calls of one function and key (through one client) form a flight:
//! the first leads, the others wait for its outcome, each within its own wait. The leader
//! takes the key's mutex as any call does, and so waits in line behind the callers of other
//! processes. Under the lock it first reads the value the store keeps for the key: a value of
//! the same function left after the flight started (under a later fencing token than the one
//! found then) was computed by a call that overlapped with this flight, and is taken instead
//! of running the body. Otherwise the body runs, and its value is left in the store (under
//! the same grant, before the release) for the callers waiting in other processes. Their
//! leaders read it as soon as the store says it may be there ([`ResultStore::watch_result`])
//! and leave the line: waiting for their turn only to read it would answer one process per
//! hand-off. The
//! flight ends with the value before the lock is released, so a call that starts after a
//! computation ended computes anew (this is not a cache). A body that fails, a lock lost
//! (also with `on_lost = Continue`), a call cancelled leave nothing: one follower of the
//! flight leads in its place, and the next leader in line in another process computes.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::__private::{LockResult, ReleaseInBackground};
use crate::backend::{Published, ResultChange, ResultStore, SharedResult};
use crate::locked_call::LockedCall;
use crate::sync::lock_ignoring_poison;
use crate::{
    LockClient, LockError, LockKind, LockOptions, LossCause, OnLost, current_token, is_lost,
};

/// What `action = Share` needs of a function's return type: `Result<T, E>` whose value can
/// be handed to the other callers, in this process (`Clone`) and in others (serde).
#[diagnostic::on_unimplemented(
    message = "`action = Share` hands the function's value to the other callers: `{Self}` must be `Result<T, E>` with `T: Clone + serde::Serialize + serde::de::DeserializeOwned + Send + Sync + 'static` and `E: From<fencelock::LockError>`",
    label = "the value of this type is shared",
    note = "derive `Clone`, `serde::Serialize` and `serde::Deserialize` for the value, or return a type that has them"
)]
pub trait SharedOutput: LockResult + Sized {
    /// The value shared.
    type Value: Clone + Serialize + DeserializeOwned + Send + Sync + 'static;

    /// The value, if the call succeeded.
    fn value(&self) -> Option<&Self::Value>;

    /// The output that hands `value` over.
    fn from_value(value: Self::Value) -> Self;
}

impl<T, E> SharedOutput for Result<T, E>
where
    T: Clone + Serialize + DeserializeOwned + Send + Sync + 'static,
    E: From<LockError>,
{
    type Value = T;

    fn value(&self) -> Option<&T> {
        self.as_ref().ok()
    }

    fn from_value(value: T) -> Self {
        Ok(value)
    }
}

/// A flight's state, as its followers see it.
#[derive(Clone)]
enum Outcome {
    Computing,
    Done(Arc<dyn Any + Send + Sync>),
    /// The leader failed, lost its lock or was cancelled: the first follower to see it leads.
    Vacant,
}

/// A flight: its outcome, and the token of the store's value when it started (`Some(None)`:
/// none), which every leader of the flight compares with.
struct Flight {
    outcome: watch::Sender<Outcome>,
    seen: Mutex<Option<Option<u64>>>,
}

impl Flight {
    /// Turns the outcome `from` (computing or vacant) into `to`; whether it was `from`.
    fn turn(&self, from: Outcome, to: Outcome) -> bool {
        self.outcome.send_if_modified(|outcome| {
            let turned = std::mem::discriminant(outcome) == std::mem::discriminant(&from);
            if turned {
                *outcome = to;
            }
            turned
        })
    }
}

/// Client, key, function, and the value's type (two functions of one name never share).
type FlightKey = (u64, String, &'static str, TypeId);

/// The flights under way. A follower subscribes under this lock, and a failed leader leaves
/// its flight here for its followers, unless it has none.
static FLIGHTS: LazyLock<Mutex<HashMap<FlightKey, Arc<Flight>>>> = LazyLock::new(Mutex::default);

/// The leader's end of a flight: ends it with the value given, or leaves it vacant when
/// dropped without one.
struct Leading {
    key: FlightKey,
    flight: Arc<Flight>,
}

impl Leading {
    fn done(self, value: Arc<dyn Any + Send + Sync>) {
        lock_ignoring_poison(&FLIGHTS).remove(&self.key);
        self.flight.outcome.send_replace(Outcome::Done(value));
    }

    /// The token of the store's value when the flight started, read now by its first leader.
    async fn seen(&self, results: &dyn ResultStore, key: &str) -> Result<Option<u64>, LockError> {
        if let Some(seen) = *lock_ignoring_poison(&self.flight.seen) {
            return Ok(seen);
        }
        let seen = results.read_result(key).await?.map(|result| result.token);
        *lock_ignoring_poison(&self.flight.seen) = Some(seen);
        Ok(seen)
    }
}

impl Drop for Leading {
    fn drop(&mut self) {
        let mut flights = lock_ignoring_poison(&FLIGHTS);
        let vacated = self.flight.turn(Outcome::Computing, Outcome::Vacant);
        if vacated && self.flight.outcome.receiver_count() == 0 {
            flights.remove(&self.key);
        }
    }
}

/// A follower's end of a flight: when it leaves without leading (cancelled, out of time), a
/// vacant flight nobody else follows goes.
struct Following {
    key: FlightKey,
    flight: Arc<Flight>,
    outcome: Option<watch::Receiver<Outcome>>,
}

impl Drop for Following {
    fn drop(&mut self) {
        let mut flights = lock_ignoring_poison(&FLIGHTS);
        drop(self.outcome.take());
        let vacant = matches!(*self.flight.outcome.borrow(), Outcome::Vacant);
        let ours = flights
            .get(&self.key)
            .is_some_and(|flight| Arc::ptr_eq(flight, &self.flight));
        if vacant && ours && self.flight.outcome.receiver_count() == 0 {
            flights.remove(&self.key);
        }
    }
}

/// Leads the flight of `key`, starting it, or follows it.
fn join(key: &FlightKey) -> Result<Leading, Following> {
    let mut flights = lock_ignoring_poison(&FLIGHTS);
    if let Some(flight) = flights.get(key) {
        return Err(Following {
            key: key.clone(),
            flight: flight.clone(),
            outcome: Some(flight.outcome.subscribe()),
        });
    }
    let flight = Arc::new(Flight {
        outcome: watch::Sender::new(Outcome::Computing),
        seen: Mutex::new(None),
    });
    flights.insert(key.clone(), flight.clone());
    Ok(Leading {
        key: key.clone(),
        flight,
    })
}

/// Waits for the flight's value; `Err` when this follower takes the lead of a vacant flight.
async fn follow<T: Clone + 'static>(mut following: Following) -> Result<Option<T>, Leading> {
    loop {
        let Some(outcome) = following.outcome.as_mut() else {
            return Ok(None);
        };
        // The value is read out before the claim below: the watch's read lock is held
        // until then.
        let ended = match outcome.wait_for(|o| !matches!(o, Outcome::Computing)).await {
            Ok(seen) => match &*seen {
                Outcome::Done(value) => Some(value.downcast_ref::<T>().cloned()),
                _ => None,
            },
            // The flight's sender is gone: ended.
            Err(_) => Some(None),
        };
        if let Some(value) = ended {
            return Ok(value);
        }
        let claimed = following.flight.turn(Outcome::Vacant, Outcome::Computing);
        if claimed {
            following.outcome = None;
            return Err(Leading {
                key: following.key.clone(),
                flight: following.flight.clone(),
            });
        }
    }
}

/// The call of a `#[redis_lock(action = Share)]` function named `function`: single-flight
/// (see this module's docs).
pub async fn run_shared<R, F>(
    client: Result<LockClient, LockError>,
    key: Result<String, LockError>,
    options: LockOptions,
    function: &'static str,
    body: F,
) -> R
where
    R: SharedOutput,
    F: Future<Output = R>,
{
    let (client, key) = match client.and_then(|client| Ok((client, key?))) {
        Ok(found) => found,
        Err(error) => return R::from_lock_error(error),
    };
    if let Err(error) = options.validate() {
        return R::from_lock_error(error);
    }
    if client.backend().results().is_none() {
        return R::from_lock_error(not_offered());
    }
    // A call nested in a body that holds the key re-enters it: no flight, whose leader could
    // be waiting for this very holder.
    if crate::body_scope::held(client.id(), &key).is_some() {
        return lead(client, key, options, function, None, body).await;
    }
    let started = Instant::now();
    let deadline = started + options.wait();
    let flight = (client.id(), key.clone(), function, TypeId::of::<R::Value>());
    let (leading, options) = loop {
        let following = match join(&flight) {
            Ok(leading) => break (leading, options),
            Err(following) => following,
        };
        match tokio::time::timeout_at(deadline, follow(following)).await {
            Ok(Ok(Some(value))) => return R::from_value(value),
            // A flight that ended without a value this call can take: another one.
            Ok(Ok(None)) => {}
            // A follower that leads waits for the lock what is left of its wait.
            Ok(Err(leading)) => break (leading, options.left_since(started)),
            Err(_) => return R::from_lock_error(LockError::not_acquired(key, 0)),
        }
    };
    lead(client, key, options, function, Some(leading), body).await
}

/// The leader's call: under the key's mutex, the value of `function` another process left
/// since the flight started, else the body's, left for the others. The flight ends before the
/// release, with the value, unless the lock was lost. With `wait_ms`, the store's reads count
/// in the wait for the lock.
///
/// A flight's leader asks for the lock once without a place in line, its watch of the value
/// made beside the flight's first read. When another process holds the key, it waits out of
/// line for the value that holder leaves, and joins the line (still watching the value) only
/// at a change that brought none: a failed flight's release, or a holder that computes
/// nothing. Waiting in line only to read the value would answer one process per hand-off,
/// and the line of every process's leader costs the store at each of their attempts.
async fn lead<R, F>(
    client: LockClient,
    key: String,
    options: LockOptions,
    function: &'static str,
    leading: Option<Leading>,
    body: F,
) -> R
where
    R: SharedOutput,
    F: Future<Output = R>,
{
    let Some(results) = client.backend().results() else {
        return R::from_lock_error(not_offered());
    };
    // With release notifications off, the store is not watched either: reads at each pause.
    let notifies = client.notifies();
    let watches = leading.is_some() && !options.give_up;
    let first_reads = async {
        match &leading {
            // A flight's leader after the client's shutdown, or during it, does not wait for
            // the store: its lock request is refused at once, the body not run.
            Some(leading) => tokio::select! {
                biased;
                _ = client.shutdown_state().stopping() => Ok((None, None)),
                reads = async {
                    // A watch that cannot be made (a Redis user without channels, say)
                    // is none: the leader waits in line then, as a plain call polls.
                    let watch = async {
                        match watches && notifies {
                            true => results.watch_result(&key).await.ok().flatten(),
                            false => None,
                        }
                    };
                    let (seen, change) = tokio::join!(leading.seen(results, &key), watch);
                    Ok((seen?, change))
                } => reads,
            },
            // A call nested under the key's holder re-enters the lock, as a plain one does.
            None => results
                .read_result(&key)
                .await
                .map(|kept| (kept.map(|kept| kept.token), None)),
        }
    };
    let reads_started = Instant::now();
    let (reads, options) = match options.wait_bound() {
        Some(wait) => {
            let reads = tokio::time::timeout_at(reads_started + wait, first_reads).await;
            (reads, options.left_since(reads_started))
        }
        None => (Ok(first_reads.await), options),
    };
    let (seen, change) = match reads {
        Ok(Ok(reads)) => reads,
        Ok(Err(error)) => return R::from_lock_error(error),
        Err(_) => return R::from_lock_error(LockError::not_acquired(key, 0)),
    };
    let leader = Leader {
        results,
        key: &key,
        function,
        seen,
        keep: options.ttl(),
        on_lost: options.on_lost,
        body: Mutex::new(Some(body)),
        leading: Mutex::new(leading),
        holds: AtomicBool::new(false),
        notifies,
    };
    if !watches {
        return leader.attempt(&client, options).await.output();
    }
    let options = match change {
        Some(change) => {
            let started = Instant::now();
            let deadline = started + options.wait();
            match leader.out_of_line(&client, options, change, deadline).await {
                OutOfLine::Answered(output) => return output,
                // In line for what is left of the wait.
                OutOfLine::ToLine => options.retries_left_since(started),
            }
        }
        None => options,
    };
    let in_line = leader.attempt(&client, options);
    let value = tokio::select! {
        biased;
        output = in_line => return output.output(),
        Some(value) = leader.left_meanwhile(&options) => value,
    };
    leader.found(value)
}

/// How a leader's wait out of line ended.
enum OutOfLine<R> {
    /// With the call's output: the value, the body's, or why the lock was not had.
    Answered(R),
    /// To the line, still watching the value.
    ToLine,
}

/// What a leader out of line learned at a look.
enum Look<F: Future<Output: SharedOutput>> {
    Found(ValueOf<F>),
    Paused,
    Changed,
}

/// An attempt's outcome: the body's output (or the value read in its place), or why the lock
/// was not had.
enum Attempt<R> {
    Ran(R),
    Refused(LockError),
}

impl<R: LockResult> LockResult for Attempt<R> {
    fn from_lock_error(error: LockError) -> Self {
        Attempt::Refused(error)
    }

    fn is_failure(&self) -> bool {
        match self {
            Attempt::Ran(output) => output.is_failure(),
            Attempt::Refused(_) => true,
        }
    }
}

impl<R: LockResult> Attempt<R> {
    fn output(self) -> R {
        match self {
            Attempt::Ran(output) => output,
            Attempt::Refused(error) => R::from_lock_error(error),
        }
    }
}

/// What a leader's attempts share: the body (run by the attempt that gets the lock), the
/// flight, and the token of the value when the flight started.
struct Leader<'a, F> {
    results: &'a dyn ResultStore,
    key: &'a str,
    function: &'static str,
    seen: Option<u64>,
    keep: Duration,
    on_lost: OnLost,
    body: Mutex<Option<F>>,
    leading: Mutex<Option<Leading>>,
    /// Set once an attempt holds the lock: it reads the value itself.
    holds: AtomicBool,
    /// Whether the client hears of releases: if not, the store is not watched either.
    notifies: bool,
}

/// The value a leader's body computes.
type ValueOf<F> = <<F as Future>::Output as SharedOutput>::Value;

/// How many times a leader waiting for another process's flight reads the store's value at
/// most, out of line or in line: each read follows a change the store announced, or a pause
/// between lock attempts.
const LOOKS: usize = 1_000;

impl<F> Leader<'_, F>
where
    F: Future<Output: SharedOutput>,
{
    /// The call of the body under the key's mutex, with `options`.
    async fn attempt(&self, client: &LockClient, options: LockOptions) -> Attempt<F::Output> {
        // Released in the background once the value is out: the call's future holds no
        // output across the release, and stays `Send` whatever the error type.
        let call: LockedCall<_, ReleaseInBackground> = LockedCall::new(
            Ok(client.clone()),
            Ok(self.key.to_owned()),
            LockKind::Mutex,
            options,
            self.under_lock(),
        );
        Box::pin(call).await
    }

    /// Under the lock: the value another process left since the flight started, else the
    /// body's, left for the others.
    async fn under_lock(&self) -> Attempt<F::Output> {
        self.holds.store(true, Ordering::Release);
        let left = match self.newer().await {
            Ok(left) => left,
            Err(error) => return Attempt::Refused(error),
        };
        // The output is not held across an await below: with an error type that is not
        // `Send` (a boxed error), the call's future stays `Send`.
        let (value, computed) = match left {
            Some(value) => (value, false),
            None => {
                // One attempt holds the lock: the first that does returns.
                let Some(body) = lock_ignoring_poison(&self.body).take() else {
                    return Attempt::Refused(LockError::not_acquired(self.key, 0));
                };
                let output = body.await;
                // A value computed without the lock is nobody else's to take.
                match (output.value(), current_token(), is_lost()) {
                    (Some(value), Some(_), false) => (value.clone(), true),
                    _ => return Attempt::Ran(output),
                }
            }
        };
        if let (true, Some(token)) = (computed, current_token()) {
            let (results, key, function) = (self.results, self.key, self.function);
            let published = publish(results, key, function, token, &value, self.keep).await;
            // The store saw another grant hold the key, which renewal had not told yet: the
            // value was computed, at least in part, without the lock. Nobody else's.
            if published == Some(Published::NotHeld) {
                return Attempt::Ran(match self.on_lost {
                    OnLost::Abort => {
                        <F::Output>::from_lock_error(LockError::lost(key, LossCause::NotOwner))
                    }
                    OnLost::Continue => <F::Output>::from_value(value),
                });
            }
        }
        Attempt::Ran(self.found(value))
    }

    /// The flight ends with `value`, the call's output.
    fn found(&self, value: ValueOf<F>) -> F::Output {
        if let Some(leading) = lock_ignoring_poison(&self.leading).take() {
            leading.done(Arc::new(value.clone()));
        }
        <F::Output>::from_value(value)
    }

    /// The value of the function later than the one seen when the flight started, if the
    /// store keeps one.
    async fn newer(&self) -> Result<Option<ValueOf<F>>, LockError> {
        let left = self.results.read_result(self.key).await?;
        let left = left.filter(|left| Some(left.token) > self.seen);
        Ok(left.and_then(|left| decode(self.function, &left.value)))
    }

    /// Out of line while another process holds the key: the lock asked for once (with
    /// `change` made before), then the value that holder leaves, read again when the store
    /// announces a change, or after as long as a waiter's place lasts (`3 × sleep_ms`: a
    /// release may go unseen, so then watched anew, and the lock asked for once more), until
    /// `deadline`. To the line at a change that
    /// brought no value (a failed flight's release, or a holder's that computes nothing),
    /// when the store fails (the line's request retries, and reports what lasts), or when
    /// the client shuts down (the line's request is refused).
    async fn out_of_line(
        &self,
        client: &LockClient,
        options: LockOptions,
        mut change: ResultChange,
        deadline: Instant,
    ) -> OutOfLine<F::Output> {
        for _ in 0..LOOKS {
            // The output does not outlive this match: the call's future stays `Send`
            // whatever the error type.
            let refused = match self.ask_once(client, options, deadline).await {
                Attempt::Ran(output) => return OutOfLine::Answered(output),
                Attempt::Refused(refused) => refused,
            };
            // A store that failed the ask is asked again in line, within the wait, as any
            // request retries; what no retry changes (a shutdown, foreign data) is the answer.
            if refused.is_backend() {
                return OutOfLine::ToLine;
            }
            if !refused.is_not_acquired() {
                return OutOfLine::Answered(<F::Output>::from_lock_error(refused));
            }
            let look = self.next_look(client, &mut change, options);
            let waited = tokio::time::timeout_at(deadline, look);
            match waited.await {
                Ok(Look::Found(value)) => return OutOfLine::Answered(self.found(value)),
                Ok(Look::Paused) => {}
                Ok(Look::Changed) => return OutOfLine::ToLine,
                Err(_) => return OutOfLine::Answered(<F::Output>::from_lock_error(refused)),
            }
            let watched = tokio::time::timeout_at(deadline, self.results.watch_result(self.key));
            change = match watched.await {
                Ok(Ok(Some(change))) => change,
                Ok(_) => return OutOfLine::ToLine,
                Err(_) => return OutOfLine::Answered(<F::Output>::from_lock_error(refused)),
            };
        }
        OutOfLine::ToLine
    }

    /// The lock asked for once, without a place in line. With `wait_ms`, given up at
    /// `deadline` while still asked for (never once the body runs), as any call's request.
    async fn ask_once(
        &self,
        client: &LockClient,
        options: LockOptions,
        deadline: Instant,
    ) -> Attempt<F::Output> {
        let attempt = self.attempt(client, options.give_up());
        if options.wait_bound().is_none() {
            return attempt.await;
        }
        let cut = async {
            tokio::time::sleep_until(deadline).await;
            if self.holds.load(Ordering::Acquire) {
                std::future::pending::<()>().await;
            }
        };
        tokio::select! {
            biased;
            attempt = attempt => attempt,
            () = cut => Attempt::Refused(LockError::not_acquired(self.key, 1)),
        }
    }

    /// Out of line: the value, read now or at the next change `change` tells of; `Paused`
    /// when a waiter's place would have lapsed first; `Changed` when the change brought
    /// none, the store failed, or the client shuts down.
    async fn next_look(
        &self,
        client: &LockClient,
        change: &mut ResultChange,
        options: LockOptions,
    ) -> Look<F> {
        match self.newer().await {
            Ok(Some(value)) => return Look::Found(value),
            Ok(None) => {}
            Err(_) => return Look::Changed,
        }
        tokio::select! {
            // To the line, whose request a shutdown refuses (as a waiting one it stops).
            _ = client.shutdown_state().stopping() => Look::Changed,
            () = change => match self.newer().await {
                Ok(Some(value)) => Look::Found(value),
                _ => Look::Changed,
            },
            // Only a release that went unseen needs this: as long as a waiter's place lasts.
            () = tokio::time::sleep(options.queue_timeout()) => Look::Paused,
        }
    }

    /// The value another process leaves while this leader waits in line: read again at each
    /// change the store announces, or after each pause where the store cannot watch (or the
    /// watch failed). `None` once an attempt holds the lock (it reads the value itself), and
    /// when a read fails (the lock request reports that).
    async fn left_meanwhile(&self, options: &LockOptions) -> Option<ValueOf<F>> {
        // `None`: not watched yet; `Some(None)`: the store cannot watch (or is not to be).
        let mut change: Option<Option<ResultChange>> = (!self.notifies).then_some(None);
        for _ in 0..LOOKS {
            let left = self.newer().await.ok()?;
            if self.holds.load(Ordering::Acquire) {
                return None;
            }
            if left.is_some() {
                return left;
            }
            change = match change {
                // Watched before the next read: a value left after the read above is seen.
                // A watch that cannot be made is none: read again at each pause.
                None => Some(self.results.watch_result(self.key).await.ok().flatten()),
                // Read at once after a change: it is most often the value itself.
                Some(Some(next)) => {
                    next.await;
                    None
                }
                Some(None) => {
                    tokio::time::sleep(options.pause(None)).await;
                    Some(None)
                }
            };
        }
        None
    }
}

/// A value as the store keeps it: `<function> <json>`.
fn encode<T: Serialize>(function: &str, value: &T) -> Result<Vec<u8>, serde_json::Error> {
    let json = serde_json::to_vec(value)?;
    Ok([function.as_bytes(), b" ", &json].concat())
}

/// The value `function` left, if this is one; another function's, or a value that does not
/// decode as `T`, is computed here instead.
fn decode<T: DeserializeOwned>(function: &str, kept: &[u8]) -> Option<T> {
    let json = kept.strip_prefix(function.as_bytes())?.strip_prefix(b" ")?;
    serde_json::from_slice(json).ok()
}

/// Leaves `value` for the callers of other processes, and says what the store did; `None`
/// when it could not be asked (a failure only makes the others compute it).
async fn publish<T: Serialize>(
    results: &dyn ResultStore,
    key: &str,
    function: &str,
    token: u64,
    value: &T,
    keep: std::time::Duration,
) -> Option<Published> {
    let value = match encode(function, value) {
        Ok(value) => value,
        Err(error) => {
            tracing::warn!(target: "fencelock", %key, %error, "a shared value cannot be serialized; the callers of other processes compute it");
            return None;
        }
    };
    let result = SharedResult { token, value };
    match results.publish_result(key, &result, keep).await {
        Ok(published) => Some(published),
        Err(error) => {
            tracing::warn!(target: "fencelock", %key, error = %crate::WithSources(&error), "a shared value was not left in the store; the callers of other processes compute it");
            None
        }
    }
}

fn not_offered() -> LockError {
    LockError::invalid_config(
        "`action = Share` needs a store that keeps the holder's value for the other \
         processes' callers: the memory backend, Redis (one server, Sentinel, Cluster), \
         PostgreSQL, MySQL, ZooKeeper or etcd; this one (Redlock: no value a majority of \
         masters would agree on) does not",
    )
}

#[cfg(all(test, feature = "testing"))]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    use crate::backend::memory::MemoryBackend;
    use crate::testing::Intercepted;
    use crate::testing::intercept::{Call, Unanswered};
    use crate::{LockClient, LockError, LockOptions};

    /// Review finding: a shared call after its client's shutdown read the store before its
    /// lock request was refused, with no bound without `wait_ms`. Here the store never
    /// answers a read: the call ends at once with `ShutDown`, its body not run.
    #[tokio::test(start_paused = true)]
    async fn a_shared_call_after_a_shutdown_ends_before_reading_the_store() {
        let unanswered = Unanswered(|call| matches!(call, Call::ReadResult { .. }));
        let locks = LockClient::from_backend(Intercepted::new(MemoryBackend::new(), unanswered));
        locks.shutdown().await;
        let body_ran = AtomicBool::new(false);
        let body = async {
            body_ran.store(true, Ordering::Relaxed);
            Ok::<u32, LockError>(1)
        };
        let call = super::run_shared(Ok(locks), Ok("k".into()), LockOptions::new(), "f", body);
        let ended = tokio::time::timeout(Duration::from_secs(60), call).await;
        let ended: Result<u32, LockError> = ended.expect("the call ends");
        assert!(
            matches!(ended, Err(LockError::ShutDown { .. })),
            "{ended:?}"
        );
        assert!(!body_ran.load(Ordering::Relaxed), "the body ran");
    }
}

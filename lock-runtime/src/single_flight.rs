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
//! the same grant, before the release) for the callers waiting in other processes. The
//! flight ends with the value before the lock is released, so a call that starts after a
//! computation ended computes anew (this is not a cache). A body that fails, a lock lost
//! (also with `on_lost = Continue`), a call cancelled leave nothing: one follower of the
//! flight leads in its place, and the next leader in line in another process computes.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, LazyLock, Mutex};

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::__private::{LockResult, ReleaseInBackground};
use crate::backend::{Published, ResultStore, SharedResult};
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
async fn lead<R, F>(
    client: LockClient,
    key: String,
    options: LockOptions,
    function: &'static str,
    mut leading: Option<Leading>,
    body: F,
) -> R
where
    R: SharedOutput,
    F: Future<Output = R>,
{
    let Some(results) = client.backend().results() else {
        return R::from_lock_error(not_offered());
    };
    let seen = async {
        match &leading {
            // A flight's leader after the client's shutdown, or during it, does not wait for
            // the store: its lock request is refused at once, the body not run.
            Some(leading) => tokio::select! {
                biased;
                _ = client.shutdown_state().stopping() => Ok(None),
                seen = leading.seen(results, &key) => seen,
            },
            // A call nested under the key's holder re-enters the lock, as a plain one does.
            None => results.read_result(&key).await.map(|s| s.map(|r| r.token)),
        }
    };
    let reads_started = Instant::now();
    let (seen, options) = match options.wait_bound() {
        Some(wait) => {
            let seen = tokio::time::timeout_at(reads_started + wait, seen).await;
            (seen, options.left_since(reads_started))
        }
        None => (Ok(seen.await), options),
    };
    let seen = match seen {
        Ok(Ok(seen)) => seen,
        Ok(Err(error)) => return R::from_lock_error(error),
        Err(_) => return R::from_lock_error(LockError::not_acquired(key, 0)),
    };
    let (keep, on_lost) = (options.ttl(), options.on_lost);
    let shared_body = async {
        let left = match results.read_result(&key).await {
            Ok(left) => left.filter(|left| Some(left.token) > seen),
            Err(error) => return R::from_lock_error(error),
        };
        // The output is not held across an await below: with an error type that is not
        // `Send` (a boxed error), the call's future stays `Send`.
        let found = left.and_then(|left| decode::<R::Value>(function, &left.value));
        let (value, computed) = match found {
            Some(value) => (value, false),
            None => {
                let output = body.await;
                // A value computed without the lock is nobody else's to take.
                match (output.value(), current_token(), is_lost()) {
                    (Some(value), Some(_), false) => (value.clone(), true),
                    _ => return output,
                }
            }
        };
        if let (true, Some(token)) = (computed, current_token()) {
            let published = publish(results, &key, function, token, &value, keep).await;
            // The store saw another grant hold the key, which renewal had not told yet: the
            // value was computed, at least in part, without the lock. Nobody else's.
            if published == Some(Published::NotHeld) {
                return match on_lost {
                    OnLost::Abort => {
                        R::from_lock_error(LockError::lost(&*key, LossCause::NotOwner))
                    }
                    OnLost::Continue => R::from_value(value),
                };
            }
        }
        if let Some(leading) = leading.take() {
            leading.done(Arc::new(value.clone()));
        }
        R::from_value(value)
    };
    // Released in the background once the value is out: the call's future holds no output
    // across the release, and stays `Send` whatever the error type.
    let call: LockedCall<_, ReleaseInBackground> = LockedCall::new(
        Ok(client.clone()),
        Ok(key.clone()),
        LockKind::Mutex,
        options,
        shared_body,
    );
    Box::pin(call).await
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

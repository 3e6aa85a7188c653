//! `action = Share`: single-flight. While one call computes under a key's mutex, the other
//! calls of the key get its value instead of computing it again.
//!
//! In this process, the calls of one key (through one client, for one value type) form a
//! flight: the first leads, the others wait for its value. The leader takes the key's
//! mutex as any call does, and so waits in line behind the callers of other processes. Under
//! the lock it first reads the value the store keeps for the key: a value left after the
//! leader started (a later fencing token than the one it found then) was computed by a call
//! that overlapped with this one, and is taken instead of running the body. Otherwise the
//! body runs, and its value is left in the store (under the same grant, before the release)
//! for the callers waiting in other processes. A body that fails, a lock lost, a call
//! cancelled leave nothing: the next caller in line computes, and the followers of a failed
//! leader try again, one of them as the next leader. A value is shared only with calls that
//! overlapped its computation; a call that starts after it ends computes anew (this is not a
//! cache).

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, LazyLock, Mutex};

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::watch;

use crate::__private::{AwaitRelease, LockResult};
use crate::backend::SharedResult;
use crate::locked_call::LockedCall;
use crate::sync::lock_ignoring_poison;
use crate::{LockClient, LockError, LockKind, LockOptions, current_token};

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

type FlightKey = (u64, String, TypeId);
type Flight = Arc<watch::Sender<Outcome>>;

/// The flights under way. A follower subscribes under this lock, and a failed leader leaves
/// its flight here for its followers, unless it has none.
static FLIGHTS: LazyLock<Mutex<HashMap<FlightKey, Flight>>> = LazyLock::new(Mutex::default);

/// The leader's end of a flight: ends it with the value given, or leaves it vacant when
/// dropped without one.
struct Leading {
    key: FlightKey,
    flight: Flight,
}

impl Leading {
    fn done(self, value: Arc<dyn Any + Send + Sync>) {
        lock_ignoring_poison(&FLIGHTS).remove(&self.key);
        self.flight.send_replace(Outcome::Done(value));
    }
}

impl Drop for Leading {
    fn drop(&mut self) {
        let mut flights = lock_ignoring_poison(&FLIGHTS);
        let vacated = self.flight.send_if_modified(|outcome| match outcome {
            Outcome::Computing => {
                *outcome = Outcome::Vacant;
                true
            }
            _ => false,
        });
        if vacated && self.flight.receiver_count() == 0 {
            flights.remove(&self.key);
        }
    }
}

/// Leads the flight of `key`, starting it, or follows it.
fn join(key: &FlightKey) -> Result<Leading, (Flight, watch::Receiver<Outcome>)> {
    let mut flights = lock_ignoring_poison(&FLIGHTS);
    if let Some(flight) = flights.get(key) {
        return Err((flight.clone(), flight.subscribe()));
    }
    let flight = Arc::new(watch::Sender::new(Outcome::Computing));
    flights.insert(key.clone(), flight.clone());
    Ok(Leading {
        key: key.clone(),
        flight,
    })
}

/// Waits for the flight's value; `Err` when this follower takes the lead of a vacant flight.
async fn follow<T: Clone + 'static>(
    key: &FlightKey,
    flight: Flight,
    mut following: watch::Receiver<Outcome>,
) -> Result<Option<T>, Leading> {
    loop {
        // The value is read out before the claim below: the watch's read lock is held
        // until then.
        let ended = match following
            .wait_for(|o| !matches!(o, Outcome::Computing))
            .await
        {
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
        let claimed = flight.send_if_modified(|outcome| match outcome {
            Outcome::Vacant => {
                *outcome = Outcome::Computing;
                true
            }
            _ => false,
        });
        if claimed {
            drop(following);
            return Err(Leading {
                key: key.clone(),
                flight,
            });
        }
    }
}

/// The call of a `#[redis_lock(action = Share)]` function: single-flight (see this module's
/// docs).
pub async fn run_shared<R, F>(
    client: Result<LockClient, LockError>,
    key: Result<String, LockError>,
    options: LockOptions,
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
    if client.backend().results().is_none() {
        return R::from_lock_error(not_offered());
    }
    let flight = (client.id(), key.clone(), TypeId::of::<R::Value>());
    let leading = loop {
        let (joined, following) = match join(&flight) {
            Ok(leading) => break leading,
            Err(following) => following,
        };
        match follow(&flight, joined, following).await {
            Ok(Some(value)) => return R::from_value(value),
            // A flight that ended without a value this call can take: another one.
            Ok(None) => {}
            Err(leading) => break leading,
        }
    };
    let computed = lead(client, key, options, body).await;
    if let Some(value) = computed.value() {
        leading.done(Arc::new(value.clone()));
    }
    computed
}

/// The leader's call: under the key's mutex, the value another process left since this call
/// started, else the body's, left for the others.
async fn lead<R, F>(client: LockClient, key: String, options: LockOptions, body: F) -> R
where
    R: SharedOutput,
    F: Future<Output = R>,
{
    let Some(results) = client.backend().results() else {
        return R::from_lock_error(not_offered());
    };
    let seen = match results.read_result(&key).await {
        Ok(seen) => seen.map(|result| result.token),
        Err(error) => return R::from_lock_error(error),
    };
    let keep = options.ttl();
    let shared_body = async {
        match results.read_result(&key).await {
            Ok(Some(left)) if Some(left.token) > seen => {
                match serde_json::from_slice(&left.value) {
                    Ok(value) => return R::from_value(value),
                    // Another type's value under the same key: computed here instead.
                    Err(error) => {
                        tracing::debug!(target: "fencelock", %key, %error, "a shared value of another type; computing it here");
                    }
                }
            }
            Ok(_) => {}
            Err(error) => return R::from_lock_error(error),
        }
        let output = body.await;
        if let (Some(value), Some(token)) = (output.value(), current_token()) {
            publish(results, &key, token, value, keep).await;
        }
        output
    };
    let call: LockedCall<_, AwaitRelease> = LockedCall::new(
        Ok(client.clone()),
        Ok(key.clone()),
        LockKind::Mutex,
        options,
        shared_body,
    );
    Box::pin(call).await
}

/// Leaves `value` for the callers of other processes; a failure only makes them compute it.
async fn publish<T: Serialize>(
    results: &dyn crate::backend::ResultStore,
    key: &str,
    token: u64,
    value: &T,
    keep: std::time::Duration,
) {
    let value = match serde_json::to_vec(value) {
        Ok(value) => value,
        Err(error) => {
            tracing::warn!(target: "fencelock", %key, %error, "a shared value cannot be serialized; the callers of other processes compute it");
            return;
        }
    };
    let result = SharedResult { token, value };
    if let Err(error) = results.publish_result(key, &result, keep).await {
        tracing::warn!(target: "fencelock", %key, error = %crate::WithSources(&error), "a shared value was not left in the store; the callers of other processes compute it");
    }
}

fn not_offered() -> LockError {
    LockError::invalid_config(
        "`action = Share` needs a store that keeps the holder's value for the other \
         processes' callers: the memory backend, Redis (one server, Sentinel, Cluster), \
         ZooKeeper or etcd; this one (Redlock, PostgreSQL or MySQL) does not",
    )
}

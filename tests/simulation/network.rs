//! The simulated store and network: one `MemoryBackend` (the server), and per client a
//! fault-injecting `LockBackend` in front of it that models a connection.
//!
//! A call is a request put on the client's connection: it reaches the server after a delay
//! (requests of one connection run in the order they were sent), runs there, and its reply
//! travels back after another delay, or never. The client waits for the reply at most
//! `RESPONSE_TIMEOUT`; then the call fails with a backend error and the client gives the
//! connection up, whatever the request did or will still do. What the seed's faults draw:
//! - delays, slow requests or replies, replies that are lost after the request ran;
//! - requests that reach the server late, after the client gave up on them;
//! - refused connections (the request never leaves);
//! - renewal rounds that stall for up to seconds;
//! - clients that freeze (a GC pause, `SIGSTOP`) between an acquire's reply reaching them
//!   and their reading of it, for up to `FROZEN_AT_MOST`: a grant then comes back later
//!   than its lease;
//! - subscriptions that fail (the waiter polls);
//! - keys the store deletes under their holder (an operator, a restart without data).
//!
//! Settling: as the Redis backend has the server close a given-up connection
//! (`CLIENT KILL`) before its next command, a client here closes its given-up connections
//! at its next call, so their late requests never run. Seeds without settling model a user
//! that may not run `CLIENT KILL`: a given-up connection then still delivers what arrives
//! within `LATE_AT_MOST` after the client gave it up (the window the client's delayed
//! cleanup covers; the README says what a later delivery can do).

use fencelock::backend::Capabilities;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use fencelock::LockError;
use fencelock::backend::memory::{LiveGrant, MemoryBackend};
use fencelock::backend::{
    Acquire, BoxFuture, Extended, HeldLease, Lease, LockBackend, Release, ReleaseWatch, Turn,
};
use futures::FutureExt;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::history::{Grant, History, OpId};
use crate::rng::Rng;

/// How long a client waits for a reply.
pub const RESPONSE_TIMEOUT: Duration = Duration::from_millis(300);
/// The latest a late request arrives after its client gave up on it.
const LATE_AT_MOST: Duration = Duration::from_millis(900);
/// The longest a client stays frozen on an acquire's reply: longer than any lease of the
/// workload.
const FROZEN_AT_MOST: Duration = Duration::from_secs(2);

/// How often each fault strikes in one run (drawn from the seed).
#[derive(Debug, Clone, Copy)]
pub struct Faults {
    pub settles: bool,
    pub slow: f64,
    pub lost_reply: f64,
    pub late: f64,
    pub refused: f64,
    pub stalled_renewal: f64,
    pub failed_subscription: f64,
    /// Mean time between keys deleted under their holder; `None`: never.
    pub deletions: Option<Duration>,
    /// Acquire replies after which the client freezes.
    pub frozen: f64,
}

impl Faults {
    /// A fault mix: a quarter of the runs have none at all, the others a random share of
    /// each kind.
    pub fn draw(rng: &mut Rng) -> Faults {
        if rng.chance(0.25) {
            return Faults {
                settles: true,
                slow: 0.0,
                lost_reply: 0.0,
                late: 0.0,
                refused: 0.0,
                stalled_renewal: 0.0,
                failed_subscription: 0.0,
                deletions: None,
                frozen: 0.0,
            };
        }
        /// Half the runs have none of a fault; the others a share of up to `most`.
        fn share(rng: &mut Rng, most: f64) -> f64 {
            if rng.chance(0.5) {
                0.0
            } else {
                most * rng.below(1_001) as f64 / 1_000.0
            }
        }
        Faults {
            slow: share(rng, 0.10),
            lost_reply: share(rng, 0.05),
            late: share(rng, 0.05),
            refused: share(rng, 0.03),
            stalled_renewal: share(rng, 0.20),
            failed_subscription: share(rng, 0.30),
            settles: rng.chance(0.7),
            deletions: rng
                .chance(0.5)
                .then(|| Duration::from_millis(rng.range(500, 5_000))),
            // Drawn last: the other faults of a seed stay what they were before it came.
            frozen: share(rng, 0.05),
        }
    }
}

/// The server and what everything shares: the store, the seed's randomness, the record.
#[derive(Debug)]
pub struct World {
    pub memory: MemoryBackend,
    pub faults: Faults,
    rng: Mutex<Rng>,
    history: Mutex<History>,
}

impl World {
    pub fn new(seed: u64, faults: Faults) -> World {
        World {
            memory: MemoryBackend::new(),
            faults,
            rng: Mutex::new(Rng::new(seed ^ 0x5EED)),
            history: Mutex::new(History::new(Instant::now())),
        }
    }

    pub fn rng(&self) -> MutexGuard<'_, Rng> {
        self.rng.lock().unwrap()
    }

    pub fn history(&self) -> MutexGuard<'_, History> {
        self.history.lock().unwrap()
    }

    /// Deletes `key` under its holder, if it has one (a store-side fault).
    pub fn delete(&self, key: &str) {
        if self.memory.delete_key(key) {
            self.history().deleted(key);
        }
    }
}

thread_local! {
    /// The operation being polled on this thread (the simulation runs on one thread).
    static CURRENT_OP: std::cell::Cell<OpId> = const { std::cell::Cell::new(0) };
}

/// Runs `poll` as operation `op`: calls it makes are recorded as that operation's.
pub fn as_op<T>(op: OpId, poll: impl FnOnce() -> T) -> T {
    let outer = CURRENT_OP.with(|current| current.replace(op));
    let result = poll();
    CURRENT_OP.with(|current| current.set(outer));
    result
}

fn current_op() -> OpId {
    CURRENT_OP.with(std::cell::Cell::get)
}

/// What a call asks of the store (faults differ by kind).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Call {
    Acquire,
    Renewal,
    Release,
}

/// What one call meets on its way.
#[derive(Debug)]
struct Draw {
    refused: bool,
    to_server: Duration,
    /// `None`: the reply is lost.
    to_client: Option<Duration>,
    /// How long the client stays frozen once the reply reached it.
    frozen: Option<Duration>,
    faults: Vec<&'static str>,
}

/// A request on a connection: runs at `arrives_at` unless its connection was closed by then.
struct Request {
    arrives_at: Instant,
    run: Box<dyn FnOnce() -> Reply + Send>,
    reply: oneshot::Sender<Reply>,
    to_client: Option<Duration>,
}

enum Reply {
    Acquire(Result<Acquire, LockError>),
    Extend(Result<Vec<Extended>, LockError>),
    Release(Result<Release, LockError>),
}

/// One connection: where requests go, and when it closes (set once it is given up).
struct Connection {
    requests: mpsc::UnboundedSender<Request>,
    closes_at: Arc<Mutex<Option<Instant>>>,
    /// When the last request sent on it arrives: requests keep their order.
    last_arrival: Instant,
}

impl Connection {
    fn open() -> Connection {
        let (requests, queue) = mpsc::unbounded_channel();
        let closes_at = Arc::new(Mutex::new(None));
        tokio::spawn(serve(queue, closes_at.clone()));
        Connection {
            requests,
            closes_at,
            last_arrival: Instant::now(),
        }
    }
}

/// The server's side of a connection: runs its requests in order, each when it arrives,
/// until the connection closes.
async fn serve(
    mut queue: mpsc::UnboundedReceiver<Request>,
    closes_at: Arc<Mutex<Option<Instant>>>,
) {
    while let Some(request) = queue.recv().await {
        tokio::time::sleep_until(request.arrives_at).await;
        let closed = closes_at
            .lock()
            .unwrap()
            .is_some_and(|closes_at| closes_at <= request.arrives_at);
        if closed {
            continue;
        }
        let reply = (request.run)();
        if let Some(delay) = request.to_client {
            let sender = request.reply;
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                let _ = sender.send(reply);
            });
        }
    }
}

/// A client's view of the store through a faulty network.
pub struct SimBackend {
    client: u32,
    world: Arc<World>,
    connection: Mutex<Connection>,
    /// Connections given up since the last call: closed at the next one (when settling).
    given_up: Mutex<Vec<Arc<Mutex<Option<Instant>>>>>,
}

impl std::fmt::Debug for SimBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimBackend")
            .field("client", &self.client)
            .finish_non_exhaustive()
    }
}

impl SimBackend {
    /// Must be called on the simulation's runtime (it starts the connection's server side).
    pub fn new(client: u32, world: Arc<World>) -> SimBackend {
        SimBackend {
            client,
            world,
            connection: Mutex::new(Connection::open()),
            given_up: Mutex::new(Vec::new()),
        }
    }

    fn draw(&self, call: Call) -> Draw {
        let faults = self.world.faults;
        let mut rng = self.world.rng();
        let small =
            |rng: &mut Rng| rng.between(Duration::from_micros(50), Duration::from_millis(2));
        let mut draw = Draw {
            refused: false,
            to_server: small(&mut rng),
            to_client: Some(small(&mut rng)),
            frozen: None,
            faults: Vec::new(),
        };
        if rng.chance(faults.refused) {
            draw.refused = true;
            draw.faults.push("refused");
            return draw;
        }
        if rng.chance(faults.slow) {
            let slow = rng.between(Duration::from_millis(20), Duration::from_millis(500));
            if rng.chance(0.5) {
                draw.to_server += slow;
            } else {
                draw.to_client = draw.to_client.map(|d| d + slow);
            }
            draw.faults.push("slow");
        }
        if call == Call::Renewal && rng.chance(faults.stalled_renewal) {
            draw.to_server += rng.between(Duration::from_millis(300), Duration::from_secs(3));
            draw.faults.push("stalled renewal");
        }
        if rng.chance(faults.lost_reply) {
            draw.to_client = None;
            draw.faults.push("reply lost");
        }
        if rng.chance(faults.late) {
            draw.to_server = RESPONSE_TIMEOUT + rng.between(Duration::from_millis(1), LATE_AT_MOST);
            draw.faults.push("late request");
        }
        if call == Call::Acquire && draw.to_client.is_some() && rng.chance(faults.frozen) {
            draw.frozen = Some(rng.between(Duration::from_millis(1), FROZEN_AT_MOST));
            draw.faults.push("client frozen on the reply");
        }
        draw
    }

    /// Closes the connections given up since the last call (when settling): their requests
    /// that have not run by now never will.
    fn settle(&self) {
        let given_up = std::mem::take(&mut *self.given_up.lock().unwrap());
        for closes_at in given_up {
            *closes_at.lock().unwrap() = Some(Instant::now());
        }
    }

    fn give_up_connection(&self) {
        let mut connection = self.connection.lock().unwrap();
        let old = std::mem::replace(&mut *connection, Connection::open());
        if self.world.faults.settles {
            self.given_up.lock().unwrap().push(old.closes_at);
        } else {
            *old.closes_at.lock().unwrap() = Some(Instant::now() + LATE_AT_MOST);
        }
    }

    /// Sends `run` as one request and waits for its reply.
    async fn call(
        &self,
        what: String,
        call: Call,
        run: Box<dyn FnOnce() -> Reply + Send>,
    ) -> Result<Reply, LockError> {
        self.settle();
        let op = current_op();
        self.world.history().sent(op);
        let draw = self.draw(call);
        if !draw.faults.is_empty() {
            self.world
                .history()
                .faulted(op, format_args!("{what}: {}", draw.faults.join(", ")));
        }
        let mut unanswered = Unanswered {
            world: &self.world,
            op,
            what: &what,
            answered: false,
        };
        if draw.refused {
            return Err(LockError::backend(
                None,
                "connection refused (simulated)",
                None,
            ));
        }
        let (reply, answer) = oneshot::channel();
        {
            let mut connection = self.connection.lock().unwrap();
            let arrives_at = (Instant::now() + draw.to_server).max(connection.last_arrival);
            connection.last_arrival = arrives_at;
            let request = Request {
                arrives_at,
                run,
                reply,
                to_client: draw.to_client,
            };
            let _ = connection.requests.send(request);
        }
        match tokio::time::timeout(RESPONSE_TIMEOUT, answer).await {
            Ok(Ok(reply)) => {
                unanswered.answered = true;
                if let Some(frozen) = draw.frozen {
                    self.world.history().late_reply(op);
                    tokio::time::sleep(frozen).await;
                }
                Ok(reply)
            }
            _ => {
                self.give_up_connection();
                Err(LockError::backend(None, "no reply (simulated)", None))
            }
        }
    }
}

/// How long after a client gave up on an acquire its delayed cleanup covers a late delivery
/// (the client's fallback release follows a second after it gave up).
const CLEANUP_COVERS: Duration = Duration::from_secs(1);

/// When the client gave up on an acquire: when its call failed without a reply, or was
/// dropped (cancelled) while out.
#[derive(Default)]
struct GivenUp {
    at: Arc<Mutex<Option<Instant>>>,
    returned: bool,
}

impl GivenUp {
    fn returned(mut self, unanswered: bool) {
        self.returned = true;
        if unanswered {
            *self.at.lock().unwrap() = Some(Instant::now());
        }
    }
}

impl Drop for GivenUp {
    fn drop(&mut self) {
        if !self.returned {
            *self.at.lock().unwrap() = Some(Instant::now());
        }
    }
}

/// Records a call that ends without its reply: failed, or dropped while out.
struct Unanswered<'a> {
    world: &'a World,
    op: OpId,
    what: &'a str,
    answered: bool,
}

impl Drop for Unanswered<'_> {
    fn drop(&mut self) {
        if !self.answered {
            self.world.history().unanswered(self.op, self.what);
        }
    }
}

impl LockBackend for SimBackend {
    fn acquire<'a>(
        &'a self,
        lease: &'a Lease,
        turn: Turn,
    ) -> BoxFuture<'a, Result<Acquire, LockError>> {
        let (world, client, lease) = (self.world.clone(), self.client, lease.clone());
        let what = format!(
            "acquire {} by {}",
            lease.key,
            self.world.history().owner(&lease.owner)
        );
        Box::pin(async move {
            let given_up = GivenUp::default();
            let given_up_at = given_up.at.clone();
            let run = Box::new(move || {
                let outcome = world.memory.acquire(&lease, turn).now_or_never();
                let outcome = outcome.unwrap_or_else(|| Err(never_pending()));
                match outcome {
                    Ok(Acquire::Granted { token, slot }) => {
                        // The README's one gap: without settling, a request delivered more
                        // than the delayed cleanup's second after the client gave up on it
                        // may keep the key for one lease.
                        let past_cleanup = !world.faults.settles
                            && given_up_at
                                .lock()
                                .unwrap()
                                .is_some_and(|at| at.elapsed() > CLEANUP_COVERS);
                        let mut history = world.history();
                        let grant = Grant {
                            key: lease.key.clone(),
                            owner: lease.owner.clone(),
                            token,
                            kind: lease.kind,
                            slot,
                            handed_off: false,
                        };
                        history.granted(client, grant);
                        if past_cleanup {
                            history.delivered_past_cleanup(&lease.key, token);
                        }
                    }
                    // Found held: the store kept (or renewed) the waiter's place, if it asked
                    // for one.
                    Ok(Acquire::Held { .. }) => {
                        if let Some(place) = turn.place() {
                            let lapses_at = Instant::now() + place;
                            world.history().placed(&lease.key, &lease.owner, lapses_at);
                        }
                    }
                    _ => {}
                }
                Reply::Acquire(outcome)
            });
            let reply = self.call(what, Call::Acquire, run).await;
            given_up.returned(reply.is_err());
            match reply? {
                Reply::Acquire(outcome) => outcome,
                _ => Err(mismatched()),
            }
        })
    }

    fn capabilities(&self) -> Capabilities {
        self.world.memory.capabilities()
    }

    /// No call to the store: a key another waiter of this client subscribed.
    fn watch_if_subscribed(&self, key: &str) -> Option<ReleaseWatch> {
        self.world.memory.watch_if_subscribed(key)
    }

    fn subscribe<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<ReleaseWatch, LockError>> {
        Box::pin(async move {
            let fails = self
                .world
                .rng()
                .chance(self.world.faults.failed_subscription);
            if fails {
                let op = current_op();
                {
                    let mut history = self.world.history();
                    history.faulted(op, format_args!("subscribe {key}: fails"));
                    history.unanswered(op, "subscribe");
                }
                tokio::time::sleep(RESPONSE_TIMEOUT).await;
                return Err(LockError::backend(
                    None,
                    "subscription failed (simulated)",
                    None,
                ));
            }
            self.world.memory.subscribe(key).await
        })
    }

    fn extend<'a>(
        &'a self,
        leases: &'a [HeldLease],
    ) -> BoxFuture<'a, Result<Vec<Extended>, LockError>> {
        let (world, leases) = (self.world.clone(), leases.to_vec());
        let what = format!("renew {} lease(s)", leases.len());
        Box::pin(async move {
            let run = Box::new(move || {
                let outcome = world.memory.extend(&leases).now_or_never();
                Reply::Extend(outcome.unwrap_or_else(|| Err(never_pending())))
            });
            match self.call(what, Call::Renewal, run).await? {
                Reply::Extend(outcome) => outcome,
                _ => Err(mismatched()),
            }
        })
    }

    fn release<'a>(
        &'a self,
        lease: &'a Lease,
        min_hold: Duration,
    ) -> BoxFuture<'a, Result<Release, LockError>> {
        let (world, client, lease) = (self.world.clone(), self.client, lease.clone());
        let what = format!(
            "release {} by {}",
            lease.key,
            self.world.history().owner(&lease.owner)
        );
        Box::pin(async move {
            let op = current_op();
            self.world.history().release_sent(op, &lease.owner);
            let run = Box::new(move || {
                let before = world.memory.grants(&lease.key);
                let outcome = world.memory.release(&lease, min_hold).now_or_never();
                let outcome = outcome.unwrap_or_else(|| Err(never_pending()));
                if let Ok(released) = outcome {
                    let mut history = world.history();
                    history.released(&lease.key, &lease.owner, released);
                    // The release may have handed the key to waiters: new grants.
                    let after = world.memory.grants(&lease.key);
                    let new = |g: &LiveGrant| !before.iter().any(|b| b.token == g.token);
                    let handed = after.into_iter().filter(new);
                    for handed in handed {
                        let grant = Grant {
                            key: lease.key.clone(),
                            owner: handed.owner,
                            token: handed.token,
                            kind: handed.kind,
                            slot: handed.slot,
                            handed_off: true,
                        };
                        history.granted(client, grant);
                    }
                }
                Reply::Release(outcome)
            });
            let outcome = match self.call(what, Call::Release, run).await? {
                Reply::Release(outcome) => outcome,
                _ => Err(mismatched()),
            };
            if let Ok(released) = outcome {
                self.world.history().release_answered(op, released);
            }
            outcome
        })
    }
}

fn never_pending() -> LockError {
    LockError::backend(None, "the memory backend did not answer at once", None)
}

fn mismatched() -> LockError {
    LockError::backend(None, "a reply of another kind (simulation bug)", None)
}

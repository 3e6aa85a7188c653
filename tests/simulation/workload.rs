//! The simulated applications: tasks of several clients running random operations on a few
//! keys, through `#[redis_lock]` and through the builder, some dropped midway. Mutexes, and
//! each shared kind on keys of its own: read/write locks, a semaphore of `PERMITS`, a
//! segmented lock of `SHARDS`.

use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use fencelock::{LockClient, LockError, LockKind, redis_lock};
use tokio::time::{Instant, Sleep};

use crate::history::{OpId, Outcome, Spec};
use crate::network::{World, as_op};
use crate::rng::Rng;

/// The permits of every semaphore.
const PERMITS: u32 = 2;
/// The shards of every segmented lock.
const SHARDS: u32 = 3;

/// How many times more the operations on the family of keys a run stresses weigh: enough
/// of them meet to contend (three for a semaphore's two permits).
const HOT: u64 = 4;

/// A family of keys: the kinds of lock its keys serve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    Mutex,
    ReadWrite,
    Semaphore,
    Segmented,
}

impl Family {
    /// One family, drawn uniformly.
    pub fn draw(rng: &mut Rng) -> Family {
        let families = [
            Family::Mutex,
            Family::ReadWrite,
            Family::Semaphore,
            Family::Segmented,
        ];
        families[rng.below(families.len() as u64) as usize]
    }

    fn of(kind: LockKind) -> Family {
        match kind {
            LockKind::Read | LockKind::Write => Family::ReadWrite,
            LockKind::Semaphore { .. } => Family::Semaphore,
            LockKind::Segmented { .. } => Family::Segmented,
            _ => Family::Mutex,
        }
    }
}

/// The keys of one run: a few mutexes, and one key of each shared kind; and the family the
/// run stresses.
#[derive(Debug, Clone)]
pub struct Keys {
    pub mutexes: Vec<String>,
    pub read_write: String,
    pub semaphore: String,
    pub segmented: String,
    pub hot: Family,
}

impl Keys {
    /// `mutexes` mutex keys, and one of each shared kind.
    pub fn new(mutexes: u64, hot: Family) -> Keys {
        Keys {
            mutexes: (0..mutexes).map(|k| format!("k{k}")).collect(),
            read_write: "rw".into(),
            semaphore: "sem".into(),
            segmented: "seg".into(),
            hot,
        }
    }

    /// `weight`, times `HOT` for the family the run stresses.
    fn weigh(&self, family: Family, weight: u64) -> u64 {
        if family == self.hot {
            weight * HOT
        } else {
            weight
        }
    }

    /// Every key, for a store-side fault to pick from.
    pub fn all(&self) -> Vec<String> {
        let shared = [&self.read_write, &self.semaphore, &self.segmented];
        self.mutexes.iter().chain(shared).cloned().collect()
    }

    /// The key of `kind` (for a mutex, the one drawn).
    fn of(&self, kind: LockKind, mutex: &str) -> String {
        match Family::of(kind) {
            Family::ReadWrite => self.read_write.clone(),
            Family::Semaphore => self.semaphore.clone(),
            Family::Segmented => self.segmented.clone(),
            Family::Mutex => mutex.to_owned(),
        }
    }
}

/// What a body does under the lock: record its critical section, work for a while, and
/// note when it is told the lock was lost (a body that keeps going works on regardless).
#[derive(Debug)]
pub struct Body {
    world: Arc<World>,
    op: OpId,
    key: String,
    kind: LockKind,
    ttl: Duration,
    work: Duration,
    keeps_going: bool,
}

impl Body {
    async fn run(self) -> Result<(), LockError> {
        let token = fencelock::current_token().expect("a body runs under a lock");
        let section = Section::enter(&self, token, fencelock::current_shard());
        section
            .work(self.work, self.keeps_going, fencelock::lost())
            .await;
        Ok(())
    }
}

/// A critical section on record; its exit is recorded when it ends or is dropped.
struct Section {
    world: Arc<World>,
    index: usize,
}

impl Section {
    fn enter(body: &Body, token: u64, shard: Option<u32>) -> Section {
        let index = body
            .world
            .history()
            .entered(body.op, &body.key, body.kind, body.ttl, token, shard);
        Section {
            world: body.world.clone(),
            index,
        }
    }

    async fn work<L: Future>(&self, work: Duration, keeps_going: bool, lost: L) {
        let work = tokio::time::sleep(work);
        tokio::pin!(work, lost);
        tokio::select! {
            biased;
            _ = &mut lost => {
                self.world.history().told_lost(self.index);
                if keeps_going {
                    work.await;
                }
            }
            () = &mut work => {}
        }
    }
}

impl Drop for Section {
    fn drop(&mut self) {
        self.world.history().exited(self.index);
    }
}

#[redis_lock(key = "{key}", ttl_ms = 1_000, client = locks)]
async fn plain(locks: &LockClient, key: &str, body: Body) -> Result<(), LockError> {
    body.run().await
}

#[redis_lock(key = "{key}", ttl_ms = 600, action = GiveUp, client = locks)]
async fn give_up(locks: &LockClient, key: &str, body: Body) -> Result<(), LockError> {
    body.run().await
}

#[redis_lock(key = "{key}", ttl_ms = 900, wait_ms = 400, sleep_ms = 50, client = locks)]
async fn bounded_wait(locks: &LockClient, key: &str, body: Body) -> Result<(), LockError> {
    body.run().await
}

#[redis_lock(key = "{key}", ttl_ms = 1_200, fair = true, wait_ms = 2_000, sleep_ms = 100, client = locks)]
async fn fair(locks: &LockClient, key: &str, body: Body) -> Result<(), LockError> {
    body.run().await
}

#[redis_lock(key = "{key}", ttl_ms = 800, min_hold_ms = 300, client = locks)]
async fn min_hold(locks: &LockClient, key: &str, body: Body) -> Result<(), LockError> {
    body.run().await
}

#[redis_lock(key = "{key}", ttl_ms = 500, max_hold_ms = 1_500, client = locks)]
async fn max_hold(locks: &LockClient, key: &str, body: Body) -> Result<(), LockError> {
    body.run().await
}

#[redis_lock(key = "{key}", ttl_ms = 700, on_lost = Continue, client = locks)]
async fn keeps_going(locks: &LockClient, key: &str, body: Body) -> Result<(), LockError> {
    body.run().await
}

#[redis_lock(key = "{key}", ttl_ms = 1_500, renew = false, client = locks)]
async fn fixed_lease(locks: &LockClient, key: &str, body: Body) -> Result<(), LockError> {
    body.run().await
}

/// An output that is not `Send`: the lock is released in the background.
#[redis_lock(key = "{key}", ttl_ms = 1_000, client = locks)]
async fn non_send_output(locks: &LockClient, key: &str, body: Body) -> Result<Rc<()>, LockError> {
    body.run().await?;
    Ok(Rc::new(()))
}

#[redis_lock(key = "{key}", ttl_ms = 1_000, client = locks)]
async fn outer(
    locks: &LockClient,
    key: &str,
    body: Body,
    inner: Body,
) -> Result<(Option<u64>, Option<u64>), LockError> {
    let outer_token = fencelock::current_token();
    let inner_token = reentered(locks, key, inner).await?;
    body.run().await?;
    Ok((outer_token, inner_token))
}

#[redis_lock(key = "{key}", ttl_ms = 2_000, client = locks)]
async fn reentered(locks: &LockClient, key: &str, body: Body) -> Result<Option<u64>, LockError> {
    let token = fencelock::current_token();
    body.run().await?;
    Ok(token)
}

/// Also the read inside `writer_reading`, which re-enters its write.
#[redis_lock(key = "{key}", mode = Read, ttl_ms = 800, client = locks)]
async fn reader(locks: &LockClient, key: &str, body: Body) -> Result<Option<u64>, LockError> {
    let token = fencelock::current_token();
    body.run().await?;
    Ok(token)
}

#[redis_lock(key = "{key}", mode = Write, ttl_ms = 1_000, wait_ms = 1_500, sleep_ms = 100, client = locks)]
async fn writer(locks: &LockClient, key: &str, body: Body) -> Result<(), LockError> {
    body.run().await
}

#[redis_lock(key = "{key}", mode = Write, ttl_ms = 1_000, client = locks)]
async fn writer_reading(
    locks: &LockClient,
    key: &str,
    body: Body,
    inner: Body,
) -> Result<(Option<u64>, Option<u64>), LockError> {
    let outer_token = fencelock::current_token();
    let inner_token = reader(locks, key, inner).await?;
    body.run().await?;
    Ok((outer_token, inner_token))
}

#[redis_lock(key = "{key}", permits = PERMITS, ttl_ms = 700, wait_ms = 1_000, sleep_ms = 50, client = locks)]
async fn permit(locks: &LockClient, key: &str, body: Body) -> Result<(), LockError> {
    body.run().await
}

#[redis_lock(key = "{key}", shards = SHARDS, ttl_ms = 900, fair = true, wait_ms = 2_000, sleep_ms = 100, client = locks)]
async fn shard(locks: &LockClient, key: &str, body: Body) -> Result<(), LockError> {
    body.run().await
}

/// The kinds of operation, with their weights and the family of their keys (a guard taken
/// by hand draws its kind, and so its family, itself).
const KINDS: [(&str, u64, Option<Family>); 16] = [
    ("plain", 3, Some(Family::Mutex)),
    ("give_up", 2, Some(Family::Mutex)),
    ("bounded_wait", 2, Some(Family::Mutex)),
    ("fair", 2, Some(Family::Mutex)),
    ("min_hold", 1, Some(Family::Mutex)),
    ("max_hold", 1, Some(Family::Mutex)),
    ("keeps_going", 2, Some(Family::Mutex)),
    ("fixed_lease", 1, Some(Family::Mutex)),
    ("non_send_output", 1, Some(Family::Mutex)),
    ("reentrant", 1, Some(Family::Mutex)),
    ("read", 2, Some(Family::ReadWrite)),
    ("write", 2, Some(Family::ReadWrite)),
    ("write_reading", 1, Some(Family::ReadWrite)),
    ("permit", 2, Some(Family::Semaphore)),
    ("shard", 2, Some(Family::Segmented)),
    ("by_hand", 5, None),
];

/// One simulated application task: `ops` operations on random keys, one after another.
pub struct Task {
    pub world: Arc<World>,
    pub client: LockClient,
    pub client_id: u32,
    pub keys: Keys,
    pub ops: u32,
    pub first_op: OpId,
    pub rng: Rng,
}

impl Task {
    pub async fn run(mut self) {
        for n in 0..self.ops {
            let pause = self.rng.range(0, 50);
            tokio::time::sleep(Duration::from_millis(pause)).await;
            self.run_op(self.first_op + OpId::from(n)).await;
        }
    }

    fn body(
        &mut self,
        op: OpId,
        key: &str,
        kind: LockKind,
        ttl: Duration,
        keeps_going: bool,
    ) -> Body {
        // Mostly within the lease; sometimes several leases long.
        let work = if self.rng.chance(0.15) {
            self.rng.between(ttl, ttl * 4)
        } else {
            self.rng.between(Duration::ZERO, ttl / 2)
        };
        Body {
            world: self.world.clone(),
            op,
            key: key.to_owned(),
            kind,
            ttl,
            work,
            keeps_going,
        }
    }

    async fn run_op(&mut self, op: OpId) {
        let weights: Vec<u64> = KINDS
            .iter()
            .map(|(_, weight, family)| family.map_or(*weight, |f| self.keys.weigh(f, *weight)))
            .collect();
        let kind = KINDS[self.rng.weighted(&weights)].0;
        let mutexes = &self.keys.mutexes;
        let key = mutexes[self.rng.below(mutexes.len() as u64) as usize].clone();
        let ms = Duration::from_millis;
        let spec = |_ttl: u64| Spec {
            renew: true,
            release_decides: true,
            ..Spec::default()
        };
        let locks = self.client.clone();
        let (spec, future): (Spec, Pin<Box<dyn Future<Output = Outcome> + Send>>) = match kind {
            "plain" => {
                let body = self.body(op, &key, LockKind::Mutex, ms(1_000), false);
                (
                    spec(1_000),
                    outcome(async move { plain(&locks, &key, body).await }),
                )
            }
            "give_up" => {
                let body = self.body(op, &key, LockKind::Mutex, ms(600), false);
                let spec = Spec {
                    gives_up: true,
                    ..spec(600)
                };
                (
                    spec,
                    outcome(async move { give_up(&locks, &key, body).await }),
                )
            }
            "bounded_wait" => {
                let body = self.body(op, &key, LockKind::Mutex, ms(900), false);
                let spec = Spec {
                    wait: Some(ms(400)),
                    ..spec(900)
                };
                let call = async move { bounded_wait(&locks, &key, body).await };
                (spec, outcome(call))
            }
            "fair" => {
                let body = self.body(op, &key, LockKind::Mutex, ms(1_200), false);
                let spec = Spec {
                    wait: Some(ms(2_000)),
                    ..spec(1_200)
                };
                (spec, outcome(async move { fair(&locks, &key, body).await }))
            }
            "min_hold" => {
                let body = self.body(op, &key, LockKind::Mutex, ms(800), false);
                (
                    spec(800),
                    outcome(async move { min_hold(&locks, &key, body).await }),
                )
            }
            "max_hold" => {
                let body = self.body(op, &key, LockKind::Mutex, ms(500), false);
                let spec = Spec {
                    max_hold: Some(ms(1_500)),
                    ..spec(500)
                };
                (
                    spec,
                    outcome(async move { max_hold(&locks, &key, body).await }),
                )
            }
            "keeps_going" => {
                let body = self.body(op, &key, LockKind::Mutex, ms(700), true);
                let spec = Spec {
                    continue_on_loss: true,
                    release_decides: false,
                    ..spec(700)
                };
                let call = async move { keeps_going(&locks, &key, body).await };
                (spec, outcome(call))
            }
            "fixed_lease" => {
                let body = self.body(op, &key, LockKind::Mutex, ms(1_500), false);
                let spec = Spec {
                    renew: false,
                    ..spec(1_500)
                };
                let call = async move { fixed_lease(&locks, &key, body).await };
                (spec, outcome(call))
            }
            "non_send_output" => {
                let body = self.body(op, &key, LockKind::Mutex, ms(1_000), false);
                let spec = Spec {
                    release_decides: false,
                    ..spec(1_000)
                };
                let call = async move { non_send_output(&locks, &key, body).await.map(drop) };
                (spec, outcome(call))
            }
            "reentrant" => {
                let body = self.body(op, &key, LockKind::Mutex, ms(1_000), false);
                let inner = self.body(op, &key, LockKind::Mutex, ms(1_000), false);
                let world = self.world.clone();
                let call = async move {
                    let tokens = outer(&locks, &key, body, inner).await;
                    reentered_with(&world, op, tokens)
                };
                (spec(1_000), outcome(call))
            }
            "read" => {
                let key = self.keys.read_write.clone();
                let body = self.body(op, &key, LockKind::Read, ms(800), false);
                let call = async move { reader(&locks, &key, body).await.map(drop) };
                (spec(800), outcome(call))
            }
            "write" => {
                let key = self.keys.read_write.clone();
                let body = self.body(op, &key, LockKind::Write, ms(1_000), false);
                let spec = Spec {
                    wait: Some(ms(1_500)),
                    ..spec(1_000)
                };
                (
                    spec,
                    outcome(async move { writer(&locks, &key, body).await }),
                )
            }
            "write_reading" => {
                let key = self.keys.read_write.clone();
                // The read runs under the write's grant, and its lease.
                let body = self.body(op, &key, LockKind::Write, ms(1_000), false);
                let inner = self.body(op, &key, LockKind::Read, ms(1_000), false);
                let world = self.world.clone();
                let call = async move {
                    let tokens = writer_reading(&locks, &key, body, inner).await;
                    reentered_with(&world, op, tokens)
                };
                (spec(1_000), outcome(call))
            }
            "permit" => {
                let key = self.keys.semaphore.clone();
                let kind = LockKind::Semaphore { permits: PERMITS };
                let body = self.body(op, &key, kind, ms(700), false);
                let spec = Spec {
                    wait: Some(ms(1_000)),
                    ..spec(700)
                };
                (
                    spec,
                    outcome(async move { permit(&locks, &key, body).await }),
                )
            }
            "shard" => {
                let key = self.keys.segmented.clone();
                let kind = LockKind::Segmented { shards: SHARDS };
                let body = self.body(op, &key, kind, ms(900), false);
                let spec = Spec {
                    wait: Some(ms(2_000)),
                    ..spec(900)
                };
                (
                    spec,
                    outcome(async move { shard(&locks, &key, body).await }),
                )
            }
            _ => self.by_hand(op, &key),
        };
        let cancel = match self.rng.below(10) {
            0 => Cancel::AfterSends(self.rng.range(1, 3) as u32),
            1 => Cancel::At(Instant::now() + self.rng.between(ms(0), ms(2_000))),
            _ => Cancel::Never,
        };
        self.world
            .history()
            .op_started(op, self.client_id, kind, spec);
        let ended = Cancellable::new(self.world.clone(), op, future, cancel).await;
        let outcome = ended.unwrap_or(Outcome::Cancelled);
        self.world.history().op_ended(op, outcome);
    }

    /// A guard of a random kind taken with random options, held for a while, then released
    /// or dropped.
    fn by_hand(
        &mut self,
        op: OpId,
        mutex: &str,
    ) -> (Spec, Pin<Box<dyn Future<Output = Outcome> + Send>>) {
        let kinds = [
            (LockKind::Mutex, 4),
            (LockKind::Read, 1),
            (LockKind::Write, 1),
            (LockKind::Semaphore { permits: PERMITS }, 1),
            (LockKind::Segmented { shards: SHARDS }, 1),
        ];
        let weights: Vec<u64> = kinds
            .iter()
            .map(|(kind, weight)| self.keys.weigh(Family::of(*kind), *weight))
            .collect();
        let kind = kinds[self.rng.weighted(&weights)].0;
        let key = self.keys.of(kind, mutex);
        let ttl = self.rng.range(300, 2_000);
        let ms = Duration::from_millis;
        let mut request = self.client.request(key.clone(), kind).ttl_ms(ttl);
        let mut spec = Spec {
            renew: true,
            by_hand: true,
            ..Spec::default()
        };
        match self.rng.below(3) {
            0 => {
                request = request.give_up();
                spec.gives_up = true;
            }
            1 => {
                request = request
                    .retry(self.rng.range(0, 8) as u32)
                    .sleep_ms(self.rng.range(5, 200))
            }
            _ => {
                let wait = self.rng.range(1, 1_500);
                request = request
                    .wait_ms(wait)
                    .sleep_ms(self.rng.range(1, wait.min(200)));
                spec.wait = Some(ms(wait));
            }
        }
        if !spec.gives_up && self.rng.chance(0.3) {
            request = request.fair(true);
        }
        if self.rng.chance(0.2) {
            request = request.renew(false);
            spec.renew = false;
        } else if self.rng.chance(0.2) {
            let max_hold = self.rng.range(ttl, ttl * 3);
            request = request.max_hold_ms(max_hold);
            spec.max_hold = Some(ms(max_hold));
        }
        if self.rng.chance(0.2) {
            request = request.min_hold_ms(self.rng.range(1, ttl));
        }
        let keeps_going = self.rng.chance(0.3);
        let releases = self.rng.chance(0.7);
        let body = self.body(op, &key, kind, ms(ttl), keeps_going);
        let world = self.world.clone();
        let future = async move {
            let guard = request.acquire().await;
            world.history().op_acquired(op);
            let guard = match guard {
                Ok(guard) => guard,
                Err(error) => return Outcome::Failed(error),
            };
            let section = Section::enter(&body, guard.token(), guard.shard());
            section
                .work(body.work, body.keeps_going, guard.lost())
                .await;
            drop(section);
            if !releases {
                return Outcome::Done;
            }
            match guard.release().await {
                Ok(()) => Outcome::Done,
                Err(error) => Outcome::Failed(error),
            }
        };
        (spec, Box::pin(future))
    }
}

/// Records the tokens of a reentrant call (outer, inner), and ends it.
fn reentered_with(
    world: &World,
    op: OpId,
    tokens: Result<(Option<u64>, Option<u64>), LockError>,
) -> Result<(), LockError> {
    if let Ok((Some(outer), inner)) = tokens {
        world.history().op_reentered(op, outer, inner);
    }
    tokens.map(drop)
}

fn outcome<F>(call: F) -> Pin<Box<dyn Future<Output = Outcome> + Send>>
where
    F: Future<Output = Result<(), LockError>> + Send + 'static,
{
    Box::pin(async move {
        match call.await {
            Ok(()) => Outcome::Done,
            Err(error) => Outcome::Failed(error),
        }
    })
}

/// When an operation's future is dropped before it ends.
enum Cancel {
    Never,
    /// At this virtual instant (whatever it is waiting for then).
    At(Instant),
    /// Right after its `n`-th call went out, before any answer.
    AfterSends(u32),
}

/// Polls an operation as its own (so that its calls are recorded as its), and drops it as
/// `cancel` says; `None` if it was dropped.
struct Cancellable {
    world: Arc<World>,
    op: OpId,
    future: Option<Pin<Box<dyn Future<Output = Outcome> + Send>>>,
    cancel: Cancel,
    timer: Option<Pin<Box<Sleep>>>,
}

impl Cancellable {
    fn new(
        world: Arc<World>,
        op: OpId,
        future: Pin<Box<dyn Future<Output = Outcome> + Send>>,
        cancel: Cancel,
    ) -> Cancellable {
        let timer = match cancel {
            Cancel::At(at) => Some(Box::pin(tokio::time::sleep_until(at))),
            _ => None,
        };
        Cancellable {
            world,
            op,
            future: Some(future),
            cancel,
            timer,
        }
    }
}

impl Future for Cancellable {
    type Output = Option<Outcome>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Outcome>> {
        let op = self.op;
        let Some(future) = self.future.as_mut() else {
            return Poll::Ready(None);
        };
        if let Poll::Ready(outcome) = as_op(op, || future.as_mut().poll(cx)) {
            self.future = None;
            return Poll::Ready(Some(outcome));
        }
        let cancelled = match self.cancel {
            Cancel::Never => false,
            Cancel::AfterSends(n) => self.world.history().sends(op) >= n,
            Cancel::At(_) => self
                .timer
                .as_mut()
                .is_some_and(|timer| timer.as_mut().poll(cx).is_ready()),
        };
        if cancelled {
            // Dropped as the operation's own, so that what its drop sends is recorded as its.
            let future = self.future.take();
            as_op(op, || drop(future));
            return Poll::Ready(None);
        }
        Poll::Pending
    }
}

//! The simulated applications: tasks of several clients running random operations on a few
//! keys, through `#[redis_lock]` and through the builder, some dropped midway.

use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use fencelock::{LockClient, LockError, redis_lock};
use tokio::time::{Instant, Sleep};

use crate::history::{OpId, Outcome, Spec};
use crate::network::{World, as_op};
use crate::rng::Rng;

/// What a body does under the lock: record its critical section, work for a while, and
/// note when it is told the lock was lost (a body that keeps going works on regardless).
#[derive(Debug)]
pub struct Body {
    world: Arc<World>,
    op: OpId,
    key: String,
    ttl: Duration,
    work: Duration,
    keeps_going: bool,
}

impl Body {
    async fn run(self) -> Result<(), LockError> {
        let token = fencelock::current_token().expect("a body runs under a lock");
        let section = Section::enter(&self, token);
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
    fn enter(body: &Body, token: u64) -> Section {
        let index = body
            .world
            .history()
            .entered(body.op, &body.key, token, body.ttl);
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

/// The kinds of operation, with their weights.
const KINDS: [(&str, u64); 11] = [
    ("plain", 3),
    ("give_up", 2),
    ("bounded_wait", 2),
    ("fair", 2),
    ("min_hold", 1),
    ("max_hold", 1),
    ("keeps_going", 2),
    ("fixed_lease", 1),
    ("non_send_output", 1),
    ("reentrant", 1),
    ("by_hand", 4),
];

/// One simulated application task: `ops` operations on random keys, one after another.
pub struct Task {
    pub world: Arc<World>,
    pub client: LockClient,
    pub client_id: u32,
    pub keys: Vec<String>,
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

    fn body(&mut self, op: OpId, key: &str, ttl: Duration, keeps_going: bool) -> Body {
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
            ttl,
            work,
            keeps_going,
        }
    }

    async fn run_op(&mut self, op: OpId) {
        let weights: Vec<u64> = KINDS.iter().map(|(_, w)| *w).collect();
        let kind = KINDS[self.rng.weighted(&weights)].0;
        let key = self.keys[self.rng.below(self.keys.len() as u64) as usize].clone();
        let ms = Duration::from_millis;
        let spec = |_ttl: u64| Spec {
            renew: true,
            release_decides: true,
            ..Spec::default()
        };
        let locks = self.client.clone();
        let (spec, future): (Spec, Pin<Box<dyn Future<Output = Outcome> + Send>>) = match kind {
            "plain" => {
                let body = self.body(op, &key, ms(1_000), false);
                (
                    spec(1_000),
                    outcome(async move { plain(&locks, &key, body).await }),
                )
            }
            "give_up" => {
                let body = self.body(op, &key, ms(600), false);
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
                let body = self.body(op, &key, ms(900), false);
                let spec = Spec {
                    wait: Some(ms(400)),
                    ..spec(900)
                };
                let call = async move { bounded_wait(&locks, &key, body).await };
                (spec, outcome(call))
            }
            "fair" => {
                let body = self.body(op, &key, ms(1_200), false);
                let spec = Spec {
                    wait: Some(ms(2_000)),
                    ..spec(1_200)
                };
                (spec, outcome(async move { fair(&locks, &key, body).await }))
            }
            "min_hold" => {
                let body = self.body(op, &key, ms(800), false);
                (
                    spec(800),
                    outcome(async move { min_hold(&locks, &key, body).await }),
                )
            }
            "max_hold" => {
                let body = self.body(op, &key, ms(500), false);
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
                let body = self.body(op, &key, ms(700), true);
                let spec = Spec {
                    continue_on_loss: true,
                    release_decides: false,
                    ..spec(700)
                };
                let call = async move { keeps_going(&locks, &key, body).await };
                (spec, outcome(call))
            }
            "fixed_lease" => {
                let body = self.body(op, &key, ms(1_500), false);
                let spec = Spec {
                    renew: false,
                    ..spec(1_500)
                };
                let call = async move { fixed_lease(&locks, &key, body).await };
                (spec, outcome(call))
            }
            "non_send_output" => {
                let body = self.body(op, &key, ms(1_000), false);
                let spec = Spec {
                    release_decides: false,
                    ..spec(1_000)
                };
                let call = async move { non_send_output(&locks, &key, body).await.map(drop) };
                (spec, outcome(call))
            }
            "reentrant" => {
                let body = self.body(op, &key, ms(1_000), false);
                let inner = self.body(op, &key, ms(1_000), false);
                let world = self.world.clone();
                let call = async move {
                    let tokens = outer(&locks, &key, body, inner).await;
                    if let Ok((Some(outer), inner)) = tokens {
                        world.history().op_reentered(op, outer, inner);
                    }
                    tokens.map(drop)
                };
                (spec(1_000), outcome(call))
            }
            _ => self.by_hand(op, key),
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

    /// A guard taken with random options, held for a while, then released or dropped.
    fn by_hand(
        &mut self,
        op: OpId,
        key: String,
    ) -> (Spec, Pin<Box<dyn Future<Output = Outcome> + Send>>) {
        let ttl = self.rng.range(300, 2_000);
        let ms = Duration::from_millis;
        let mut request = self.client.lock(key.clone()).ttl_ms(ttl);
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
        let body = self.body(op, &key, ms(ttl), keeps_going);
        let world = self.world.clone();
        let future = async move {
            let guard = request.acquire().await;
            world.history().op_acquired(op);
            let guard = match guard {
                Ok(guard) => guard,
                Err(error) => return Outcome::Failed(error),
            };
            let section = Section::enter(&body, guard.token());
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

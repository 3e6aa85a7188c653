//! Nested locked calls: a handler → service → repository chain with a lock at each level,
//! each on its own key. The attribute adds a small constant to a function's future at each
//! level, however deep the nesting (it used to multiply it by about 7 per level): eight
//! levels run in a task spawned on tokio's 2 MiB worker stack, in a debug build too.

use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Weak};
use std::task::{Context, Poll, Wake, Waker};

use fencelock::admin::Holding;
use fencelock::{LockClient, LockError, current_token, redis_lock, with_client};

/// A chain of functions, level `n` calling level `n - 1`, each locking `level:<id>` (its own
/// key: `id` grows by one per level) unless the chain is `unlocked`.
macro_rules! chain {
    (locked: $($level:ident => $inner:expr),* $(,)?) => {$(
        #[redis_lock(key = "level:{id}", ttl_ms = 5_000)]
        async fn $level(id: u32) -> Result<Vec<u64>, LockError> {
            let token = current_token().expect("runs under the lock");
            let mut tokens = $inner(id + 1).await?;
            tokens.push(token);
            Ok(tokens)
        }
    )*};
    (unlocked: $($level:ident => $inner:expr),* $(,)?) => {$(
        async fn $level(id: u32) -> Result<Vec<u64>, LockError> {
            let mut tokens = $inner(id + 1).await?;
            tokens.push(0);
            Ok(tokens)
        }
    )*};
}

async fn bottom(_: u32) -> Result<Vec<u64>, LockError> {
    Ok(Vec::new())
}

chain! { locked:
    level1 => bottom, level2 => level1, level3 => level2, level4 => level3,
    level5 => level4, level6 => level5, level7 => level6, level8 => level7,
}

chain! { unlocked:
    plain1 => bottom, plain2 => plain1, plain3 => plain2, plain4 => plain3,
    plain5 => plain4, plain6 => plain5, plain7 => plain6, plain8 => plain7,
}

/// What the attribute may add to a function's future: the call's state (guard, span, the
/// boxed acquisition or release), never a multiple of what the function held before.
const ATTRIBUTE_COST: usize = 512;

#[test]
fn each_level_of_nesting_adds_a_small_constant_to_the_future() {
    let locked = [
        size_of_val(&level1(0)),
        size_of_val(&level2(0)),
        size_of_val(&level3(0)),
        size_of_val(&level4(0)),
        size_of_val(&level5(0)),
        size_of_val(&level6(0)),
        size_of_val(&level7(0)),
        size_of_val(&level8(0)),
    ];
    let plain = [
        size_of_val(&plain1(0)),
        size_of_val(&plain2(0)),
        size_of_val(&plain3(0)),
        size_of_val(&plain4(0)),
        size_of_val(&plain5(0)),
        size_of_val(&plain6(0)),
        size_of_val(&plain7(0)),
        size_of_val(&plain8(0)),
    ];
    println!("future size by nesting level 1-8, locked: {locked:?} B, plain: {plain:?} B");
    for level in 0..8 {
        let added = locked[level] - plain[level];
        assert!(
            added <= ATTRIBUTE_COST * (level + 1),
            "level {}: {} B locked, {} B plain",
            level + 1,
            locked[level],
            plain[level]
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn eight_nested_locked_calls_run_in_a_spawned_task() {
    let client = LockClient::memory();
    let chain = tokio::spawn(with_client(client.clone(), level8(1)));
    let tokens = chain.await.expect("the task ran to its end").unwrap();
    assert_eq!(tokens.len(), 8, "each level held its own lock: {tokens:?}");
    let admin = client.admin();
    for id in 1..=8 {
        let key = format!("level:{id}");
        let state = admin.inspect(&key).await.unwrap();
        assert_eq!(state.holding, Holding::Free, "{key} released");
    }
}

/// A waker of its own, as `FuturesUnordered` (`buffer_unordered`, `for_each_concurrent`)
/// gives each of its futures, and a handle that tells whether anything still keeps it.
fn own_waker() -> (Waker, Weak<impl Wake>) {
    struct Probe;
    impl Wake for Probe {
        fn wake(self: Arc<Self>) {}
    }
    let probe = Arc::new(Probe);
    (Waker::from(probe.clone()), Arc::downgrade(&probe))
}

/// How many of `wakers` something still keeps.
fn kept<W>(wakers: &[Weak<W>]) -> usize {
    wakers.iter().filter(|w| w.upgrade().is_some()).count()
}

#[fencelock::redis_lock(key = "long-job")]
async fn long_job(rounds: usize) -> Result<usize, LockError> {
    let mut wakers = Vec::new();
    for _ in 0..rounds {
        let (waker, watched) = own_waker();
        wakers.push(watched);
        let mut step = std::pin::pin!(long_job_step());
        match step.as_mut().poll(&mut Context::from_waker(&waker)) {
            Poll::Ready(done) => done?,
            Poll::Pending => unreachable!("a reentrant call on the memory backend is ready"),
        }
    }
    Ok(kept(&wakers))
}

#[fencelock::redis_lock(key = "long-job")]
async fn long_job_step() -> Result<(), LockError> {
    Ok(())
}

/// The loss signal keeps a waker for every task context that ever polled a locked call under
/// it (`LossSignal::poll_lost` pushes, only the loss empties the list): a long-held lock
/// whose body makes many reentrant calls from sub-futures (or awaits `fencelock::lost()` in
/// them) accumulates wakers (and what they keep alive) for as long as it is held. The
/// `Notify` it replaced deregistered a waiter when its future was dropped. Expected: no waker
/// of a finished step is kept.
#[tokio::test]
async fn finished_nested_calls_leave_their_wakers_in_the_loss_signal() {
    let kept = fencelock::with_client(LockClient::memory(), long_job(10_000))
        .await
        .unwrap();
    assert_eq!(
        kept, 0,
        "{kept} wakers of finished calls are still referenced"
    );
}

#[fencelock::redis_lock(key = "panicking-job")]
async fn panicking_job(rounds: usize) -> Result<usize, LockError> {
    let mut wakers = Vec::new();
    for _ in 0..rounds {
        let (waker, watched) = own_waker();
        wakers.push(watched);
        let mut step = Box::pin(panicking_step());
        let polled = std::panic::catch_unwind(AssertUnwindSafe(|| {
            step.as_mut().poll(&mut Context::from_waker(&waker))
        }));
        assert!(polled.is_err(), "the step panics");
        drop(step);
    }
    Ok(kept(&wakers))
}

#[fencelock::redis_lock(key = "panicking-job")]
async fn panicking_step() -> Result<(), LockError> {
    panic!("a step of the job fails");
}

/// A reentered call whose body panics (caught, the job going on) gives its registration with
/// the loss signal back when it is dropped, as a call that ends or is cancelled does: the
/// call stays running through the panic, and its drop ends it.
#[tokio::test]
async fn panicking_nested_calls_leave_no_waker_in_the_loss_signal() {
    let kept = fencelock::with_client(LockClient::memory(), panicking_job(10))
        .await
        .unwrap();
    assert_eq!(
        kept, 0,
        "{kept} wakers of panicked calls are still referenced"
    );
}

//! Nested locked calls: a handler → service → repository chain with a lock at each level,
//! each on its own key. The attribute adds a small constant to a function's future at each
//! level, however deep the nesting (it used to multiply it by about 7 per level): eight
//! levels run in a task spawned on tokio's 2 MiB worker stack, in a debug build too.

use std::sync::Arc;

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

#[fencelock::redis_lock(key = "long-job")]
async fn long_job(rounds: usize) -> Result<usize, LockError> {
    use std::task::{Context, Poll, Wake, Waker};
    struct Probe;
    impl Wake for Probe {
        fn wake(self: Arc<Self>) {}
    }
    let mut probes = Vec::new();
    for _ in 0..rounds {
        // A sub-future of the body polled with a waker of its own, as `FuturesUnordered`
        // (`buffer_unordered`, `for_each_concurrent`) polls each of its futures.
        let probe = Arc::new(Probe);
        probes.push(Arc::downgrade(&probe));
        let waker = Waker::from(probe);
        let mut step = std::pin::pin!(long_job_step());
        match step.as_mut().poll(&mut Context::from_waker(&waker)) {
            Poll::Ready(done) => done?,
            Poll::Pending => unreachable!("a reentrant call on the memory backend is ready"),
        }
    }
    Ok(probes.iter().filter(|p| p.upgrade().is_some()).count())
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

//! `#[redis_lock]` functions, run: the flash-sale counter, failure paths, and every function
//! shape the attribute accepts.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use fencelock::{LockClient, LockError, current_token, redis_lock, with_client};
use redis::AsyncCommands;

use crate::support::{self, AppError, client, increment, redis_server};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_tasks_increment_the_counter_exactly_two_hundred_times() {
    let server = redis_server();
    let locks = client(&server).await;
    let redis = support::inspector(&server).await;
    let tasks: Vec<_> = (0..200)
        .map(|_| tokio::spawn(with_client(locks.clone(), increment(redis.clone(), "seed"))))
        .collect();
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    let value: i64 = redis.clone().get("seed").await.unwrap();
    assert_eq!(value, 200);
}

#[redis_lock(key = "job:{id}", action = GiveUp)]
async fn give_up_job(id: u32, ran: &AtomicBool) -> Result<(), LockError> {
    ran.store(true, Ordering::SeqCst);
    Ok(())
}

// The pauses, not the attempts, spend the wait (`retry × sleep_ms`): at 10 ms, three attempts
// on a loaded machine outlasted it, and the fourth was never sent.
#[redis_lock(key = "job:{id}", retry = 3, sleep_ms = 200)]
async fn patient_job(id: u32, ran: &AtomicBool) -> Result<(), LockError> {
    ran.store(true, Ordering::SeqCst);
    Ok(())
}

#[tokio::test]
async fn give_up_and_continue_report_not_acquired_without_running_the_body() {
    let server = redis_server();
    let locks = client(&server).await;
    let holder = locks.lock("job:7").acquire().await.unwrap();
    let ran = AtomicBool::new(false);

    let started = Instant::now();
    match with_client(locks.clone(), give_up_job(7, &ran)).await {
        Err(LockError::NotAcquired { attempts: 1, .. }) => {}
        other => panic!("GiveUp: expected NotAcquired after one attempt, got {other:?}"),
    }
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "GiveUp does not wait"
    );
    match with_client(locks.clone(), patient_job(7, &ran)).await {
        Err(LockError::NotAcquired { attempts: 4, .. }) => {}
        other => panic!("retry = 3: expected NotAcquired after four attempts, got {other:?}"),
    }
    assert!(
        !ran.load(Ordering::SeqCst),
        "the body must not run without the lock"
    );

    holder.release().await.unwrap();
    with_client(locks.clone(), give_up_job(7, &ran))
        .await
        .unwrap();
    assert!(ran.load(Ordering::SeqCst));
}

#[tokio::test]
async fn an_outage_is_a_backend_error_not_contention() {
    let mut server = redis_server();
    let locks = client(&server).await;
    server.kill().unwrap();
    let ran = AtomicBool::new(false);
    match with_client(locks, give_up_job(1, &ran)).await {
        Err(LockError::Backend { .. }) => {}
        other => panic!("expected Backend, got {other:?}"),
    }
}

#[redis_lock(key = "panics", ttl_ms = 60_000)]
async fn panicking_body() -> Result<(), LockError> {
    panic!("the body fails");
}

#[redis_lock(key = "hangs", ttl_ms = 60_000)]
async fn hanging_body(entered: Arc<tokio::sync::Notify>) -> Result<(), LockError> {
    entered.notify_one();
    std::future::pending::<()>().await;
    Ok(())
}

/// The lock is free again long before its 60 s lease: something released it.
async fn assert_released_early(locks: &LockClient, key: &str, what: &str) {
    let started = Instant::now();
    let guard = locks.lock(key).retry(1_000).sleep_ms(10).acquire().await;
    assert!(
        guard.is_ok(),
        "{what}: the lock was not released: {guard:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{what}: released only by expiry"
    );
}

#[tokio::test]
async fn a_panic_in_the_body_releases_the_lock() {
    let server = redis_server();
    let locks = client(&server).await;
    let task = tokio::spawn(with_client(locks.clone(), panicking_body()));
    assert!(task.await.unwrap_err().is_panic());
    assert_released_early(&locks, "panics", "panic").await;
}

#[tokio::test]
async fn dropping_the_future_mid_body_releases_the_lock() {
    let server = redis_server();
    let locks = client(&server).await;
    let entered = Arc::new(tokio::sync::Notify::new());
    let task = tokio::spawn(with_client(locks.clone(), hanging_body(entered.clone())));
    entered.notified().await;
    assert!(
        locks.lock("hangs").give_up().acquire().await.is_err(),
        "held while the body runs"
    );
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
    assert_released_early(&locks, "hangs", "cancellation").await;
}

#[redis_lock(key = "fenced:{id}")]
async fn observe_token(id: u64) -> Result<Option<u64>, LockError> {
    Ok(current_token())
}

#[redis_lock(key = "outer")]
async fn nested_tokens(locks: &LockClient) -> Result<(u64, u64, u64), LockError> {
    let outer = current_token().unwrap_or(0);
    let inner = with_client(locks.clone(), observe_token(1))
        .await?
        .unwrap_or(0);
    Ok((outer, inner, current_token().unwrap_or(0)))
}

#[tokio::test]
async fn the_body_sees_the_fencing_token_of_the_innermost_lock() {
    let locks = LockClient::memory();
    assert_eq!(current_token(), None);
    let first = with_client(locks.clone(), observe_token(1))
        .await
        .unwrap()
        .unwrap();
    let second = with_client(locks.clone(), observe_token(1))
        .await
        .unwrap()
        .unwrap();
    assert!(second > first, "each entry gets a newer token");
    let (outer, inner, after) = with_client(locks.clone(), nested_tokens(&locks))
        .await
        .unwrap();
    assert!(inner > outer && after == outer, "{outer} {inner} {after}");
}

#[redis_lock(key = "anywhere")]
async fn needs_a_client() -> Result<(), LockError> {
    Ok(())
}

#[tokio::test]
async fn without_a_client_in_scope_the_call_fails_with_no_client() {
    match needs_a_client().await {
        Err(LockError::NoClient) => {}
        other => panic!("expected NoClient, got {other:?}"),
    }
}

// Function shapes.

struct Inventory {
    locks: LockClient,
    id: u32,
    calls: u32,
}

impl Inventory {
    #[redis_lock(key = "inventory:{self.id}:{sku}", client = self.locks)]
    async fn reserve(&self, sku: &str) -> Result<u64, LockError> {
        Ok(current_token().unwrap_or(0))
    }

    #[redis_lock(key = "inventory:{self.id}", client = &self.locks)]
    async fn count(&mut self) -> Result<u32, LockError> {
        self.calls += 1;
        Ok(self.calls)
    }
}

trait Warehouse {
    async fn ship(&self, order: Order) -> Result<String, LockError>;
}

struct Order {
    id: u64,
    lines: Vec<u32>,
}

impl Warehouse for Inventory {
    /// Doc comments and attributes stay on the function.
    #[redis_lock(key = "order:{order.id}", client = self.locks, action = GiveUp)]
    #[allow(clippy::unused_async)]
    async fn ship(&self, order: Order) -> Result<String, LockError> {
        Ok(format!("{} lines", order.lines.len()))
    }
}

#[redis_lock(key = "generic:{item}", client = locks)]
async fn generic<T: std::fmt::Display + Send + Sync>(
    locks: Arc<LockClient>,
    item: T,
    extra: impl Into<String>,
) -> Result<String, LockError> {
    Ok(format!("{item} {}", extra.into()))
}

type AppResult<T> = Result<T, AppError>;

#[redis_lock(key = "alias:{n}")]
async fn aliased(n: u8) -> AppResult<u8> {
    Ok(n)
}

#[redis_lock(key = "early:{n}", client = LockClient::memory())]
async fn early_return(n: u8) -> Result<u8, LockError> {
    if n > 1 {
        return Ok(n * 2);
    }
    let value: u8 = "7".parse().map_err(|_| LockError::NoClient)?;
    Ok(value)
}

#[tokio::test]
async fn every_function_shape_locks_and_returns_its_value() {
    let locks = LockClient::memory();
    let mut inventory = Inventory {
        locks: locks.clone(),
        id: 3,
        calls: 0,
    };
    assert!(inventory.reserve("a:b").await.unwrap() > 0);
    assert_eq!(inventory.count().await.unwrap(), 1);
    let order = Order {
        id: 9,
        lines: vec![1, 2],
    };
    assert_eq!(inventory.ship(order).await.unwrap(), "2 lines");
    let shared = Arc::new(locks.clone());
    assert_eq!(generic(shared, 5, "x").await.unwrap(), "5 x");
    assert_eq!(with_client(locks.clone(), aliased(4)).await.unwrap(), 4);
    assert_eq!(early_return(3).await.unwrap(), 6);
    assert_eq!(early_return(1).await.unwrap(), 7);
}

#[tokio::test]
async fn the_key_is_the_template_with_escaped_values() {
    let locks = LockClient::memory();
    let inventory = Inventory {
        locks: locks.clone(),
        id: 3,
        calls: 0,
    };
    let held = locks.lock(r"inventory:3:a\:b").acquire().await.unwrap();
    let blocked = tokio::time::timeout(Duration::from_millis(300), inventory.reserve("a:b")).await;
    assert!(
        blocked.is_err(),
        "`inventory:{{self.id}}:{{sku}}` with sku = \"a:b\" must be the lock `inventory:3:a\\:b`"
    );
    held.release().await.unwrap();
    assert!(inventory.reserve("a:b").await.is_ok());
}

fn assert_send<T: Send>(_: &T) {}

/// Compiles only if the annotated futures are `Send` (a static assertion, never called).
#[allow(dead_code)]
fn annotated_futures_are_send(inventory: &Inventory, redis: redis::aio::MultiplexedConnection) {
    assert_send(&inventory.reserve("x"));
    assert_send(&give_up_job(1, &AtomicBool::new(false)));
    assert_send(&generic(Arc::new(LockClient::memory()), 1, "x"));
    assert_send(&increment(redis, "x"));
    assert_send(&panicking_body());
}

/// The error type of many applications: `Box<dyn Error>` is not `Send`.
#[redis_lock(key = "boxed:{id}", client = locks)]
async fn boxed_error(locks: &LockClient, id: u32) -> Result<u32, Box<dyn std::error::Error>> {
    tokio::task::yield_now().await;
    if id == 0 {
        return Err("no such id".into());
    }
    Ok(id)
}

/// Review defect 10: the annotated function's future is `Send` whenever the plain function's would
/// be, also when its output is not `Send`. Before, `run_locked` held the output across the
/// release, so this did not compile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_function_returning_a_non_send_error_can_still_be_spawned() {
    let locks = LockClient::memory();
    let spawned = tokio::spawn({
        let locks = locks.clone();
        async move {
            let ok = boxed_error(&locks, 7).await.map_err(|e| e.to_string());
            let err = boxed_error(&locks, 0).await.map_err(|e| e.to_string());
            (ok, err)
        }
    });
    let (ok, err) = spawned.await.unwrap();
    assert_eq!(ok, Ok(7));
    assert_eq!(err, Err("no such id".to_owned()));
    // The lock was released after each call, if in the background: it can be taken again.
    let guard = locks
        .lock("boxed:7")
        .wait_ms(5_000)
        .acquire()
        .await
        .unwrap();
    guard.release().await.unwrap();
}

#[allow(dead_code)]
fn a_non_send_output_keeps_the_future_send(locks: &LockClient) {
    assert_send(&boxed_error(locks, 1));
}

/// A generic output may or may not be `Send`: it is released in the background.
#[redis_lock(key = "echo", client = locks)]
async fn echo<T>(locks: &LockClient, value: T) -> Result<T, LockError> {
    tokio::task::yield_now().await;
    Ok(value)
}

#[tokio::test]
async fn generic_and_non_send_outputs_are_returned_and_released() {
    let locks = LockClient::memory();
    let shared = std::rc::Rc::new(5);
    assert_eq!(*echo(&locks, shared.clone()).await.unwrap(), 5);
    assert_eq!(echo(&locks, "text").await.unwrap(), "text");
    let guard = locks.lock("echo").wait_ms(5_000).acquire().await;
    assert!(guard.is_ok(), "released after each call: {guard:?}");
}

/// Shared by several locks, and checked at run time by the rules the attribute applies to
/// literals.
const REPORT_LOCK: fencelock::LockOptions = fencelock::LockOptions::new().ttl_ms(5_000).give_up();
const TOO_LONG_MS: u64 = fencelock::MAX_TTL_MS + 1;

#[redis_lock(key = "report:{id}", options = REPORT_LOCK)]
async fn report(id: u32) -> Result<u32, LockError> {
    Ok(id)
}

#[redis_lock(key = "report:{id}", options = REPORT_LOCK, ttl_ms = TOO_LONG_MS)]
async fn report_with_a_bad_lease(id: u32, ran: &AtomicBool) -> Result<(), LockError> {
    ran.store(true, Ordering::SeqCst);
    Ok(())
}

#[tokio::test]
async fn options_and_constants_configure_the_lock_and_break_the_same_rules() {
    let locks = LockClient::memory();
    let held = locks.lock("report:1").acquire().await.unwrap();
    // `REPORT_LOCK` gives up: the held lock fails the call at once.
    let busy = with_client(locks.clone(), report(1)).await;
    assert!(
        matches!(busy, Err(LockError::NotAcquired { attempts: 1, .. })),
        "{busy:?}"
    );
    held.release().await.unwrap();
    assert_eq!(with_client(locks.clone(), report(1)).await.unwrap(), 1);

    let ran = AtomicBool::new(false);
    let invalid = with_client(locks.clone(), report_with_a_bad_lease(2, &ran)).await;
    match invalid {
        Err(LockError::InvalidConfig { reason, .. }) => assert!(
            reason.contains("`ttl_ms` must be at most 86_400_000 (24 h)"),
            "{reason}"
        ),
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
    assert!(
        !ran.load(Ordering::SeqCst),
        "the body ran with an invalid lease"
    );
}

const GIVE_UP: fencelock::LockOptions = fencelock::LockOptions::new().give_up();

#[redis_lock(key = "waits:{id}", options = GIVE_UP, action = Continue, wait_ms = 60_000)]
async fn waits_despite_its_base(id: u32) -> Result<u32, LockError> {
    Ok(id)
}

#[tokio::test(start_paused = true)]
async fn action_continue_overrides_a_base_that_gives_up() {
    let locks = LockClient::memory_on(tokio::runtime::Handle::current());
    let held = locks.lock("waits:1").acquire().await.unwrap();
    let started = tokio::time::Instant::now();
    let release = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        held.release().await.unwrap();
    });
    let waited = with_client(locks, waits_despite_its_base(1)).await;
    assert_eq!(waited.unwrap(), 1, "gave up instead of waiting");
    assert!(started.elapsed() >= Duration::from_secs(1));
    release.await.unwrap();
}

const NO_LEASE_MS: u64 = 0;

#[redis_lock(key = "reentered")]
async fn holds_then_reenters(ran: &AtomicBool) -> Result<(), LockError> {
    reenters_with_a_bad_lease(ran).await
}

#[redis_lock(key = "reentered", ttl_ms = NO_LEASE_MS)]
async fn reenters_with_a_bad_lease(ran: &AtomicBool) -> Result<(), LockError> {
    ran.store(true, Ordering::SeqCst);
    Ok(())
}

#[tokio::test]
async fn an_invalid_option_is_refused_also_when_reentering() {
    let ran = AtomicBool::new(false);
    let nested = with_client(LockClient::memory(), holds_then_reenters(&ran)).await;
    assert!(
        matches!(nested, Err(LockError::InvalidConfig { .. })),
        "{nested:?}"
    );
    assert!(!ran.load(Ordering::SeqCst), "the body ran with ttl_ms = 0");
}

const WAITS_100_MS: fencelock::LockOptions = fencelock::LockOptions::new().wait_ms(100);

#[redis_lock(key = "once:{id}", options = WAITS_100_MS, action = GiveUp, sleep_ms = 500)]
async fn tries_once(id: u32) -> Result<u32, LockError> {
    Ok(id)
}

#[tokio::test]
async fn a_single_attempt_ignores_the_wait_of_its_base() {
    // The attribute compiles it, so every call must run it: one attempt never waits, and
    // its base's `wait_ms` is not compared with `sleep_ms`, at compile or at run time.
    let done = with_client(LockClient::memory(), tries_once(3)).await;
    assert_eq!(done.unwrap(), 3);
}

#[redis_lock(key = "asserted")]
async fn asserts_in_body_and_in_a_spawned_task() -> Result<bool, LockError> {
    fencelock::assert_locked();
    let spawned = tokio::spawn(async { fencelock::assert_locked() }).await;
    Ok(spawned.is_err_and(|error| error.is_panic()))
}

/// `assert_locked` passes in the body, and panics in a task spawned from it (which runs
/// outside the body, unlocked) and outside any body.
#[tokio::test]
async fn assert_locked_passes_only_in_the_body() {
    let spawned_panicked = with_client(
        LockClient::memory(),
        asserts_in_body_and_in_a_spawned_task(),
    );
    assert!(
        spawned_panicked.await.unwrap(),
        "a spawned task holds no lock"
    );
    let outside = std::panic::catch_unwind(fencelock::assert_locked);
    let message = outside.unwrap_err();
    let message = message.downcast_ref::<&str>().unwrap();
    assert!(
        message.contains("outside the body of a #[redis_lock]"),
        "{message}"
    );
}

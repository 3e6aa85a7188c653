//! Lease safety against a real `redis-server`: renewal, loss, reentrancy. Bounds are
//! generous (10x the expected value), so that a loaded 2-core machine passes.

use std::sync::Arc;
use std::time::{Duration, Instant};

use fencelock::testing::TcpProxy;
use fencelock::{LockClient, LockError, LossCause, current_token, redis_lock, with_client};
use redis::AsyncCommands;

use crate::support::{self, client, expect_lost, inspector, lock_once, redis_server, script_calls};

const CONTENDER_URL: &str = "FENCELOCK_CONTENDER_URL";
const CONTENDER_MS: u64 = 2_500;

/// A second process: tries to take `long-job` every 10 ms for 2.5 s and prints how often
/// it got it. Run only by `a_body_running_five_ttls_keeps_the_lock_against_another_process`.
#[tokio::test]
#[ignore = "a child process of a_body_running_five_ttls_keeps_the_lock_against_another_process"]
async fn contender() {
    let url = std::env::var(CONTENDER_URL).expect("started by the parent test");
    let client = LockClient::connect(&url).await.unwrap();
    let (mut attempts, mut acquired) = (0, 0);
    let started = Instant::now();
    while started.elapsed() < Duration::from_millis(CONTENDER_MS) {
        attempts += 1;
        if let Ok(guard) = client.lock("long-job").give_up().acquire().await {
            acquired += 1;
            guard.release().await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    println!("contender: {acquired} of {attempts}");
}

/// Holds `long-job` with a 500 ms lease while a second process tries to take it for 2.5 s.
#[redis_lock(key = "long-job", ttl_ms = 500)]
async fn long_job(url: String) -> Result<String, LockError> {
    let contender = support::spawn_test_process("lease_redis::contender", CONTENDER_URL, &url);
    let report = tokio::task::spawn_blocking(move || support::test_process_output(contender))
        .await
        .unwrap();
    Ok(report)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_running_five_ttls_keeps_the_lock_against_another_process() {
    let server = redis_server();
    let locks = client(&server).await;
    let started = Instant::now();
    let report = with_client(locks.clone(), long_job(server.url()))
        .await
        .unwrap();
    assert!(
        started.elapsed() >= Duration::from_millis(CONTENDER_MS),
        "the body ran 5 TTLs"
    );
    let line = report
        .lines()
        .find(|l| l.starts_with("contender:"))
        .unwrap_or_default();
    assert!(
        line.starts_with("contender: 0 of "),
        "no second entry: {report}"
    );
    let attempts: u32 = line.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(attempts > 10, "the other process kept trying: {line}");
    assert_eq!(locks.renewal_stats().losses, 0);
}

#[redis_lock(key = "watched", ttl_ms = 3_000)]
async fn watched_job(entered: Arc<tokio::sync::Notify>) -> Result<(), LockError> {
    entered.notify_one();
    std::future::pending::<()>().await;
    Ok(())
}

/// Runs `watched_job`, applies `cut` once the body runs, and returns how the job ended and
/// how long after the cut.
async fn cut_while_running<F, Fut>(locks: LockClient, cut: F) -> (Result<(), LockError>, Duration)
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = ()>,
{
    let entered = Arc::new(tokio::sync::Notify::new());
    let job = tokio::spawn(with_client(locks, watched_job(entered.clone())));
    entered.notified().await;
    cut().await;
    let cut_at = Instant::now();
    let result = tokio::time::timeout(Duration::from_secs(30), job)
        .await
        .expect("the body is stopped well within 10x the TTL")
        .unwrap();
    (result, cut_at.elapsed())
}

#[tokio::test]
async fn deleting_the_key_by_hand_stops_the_body_with_lost() {
    let server = redis_server();
    let locks = client(&server).await;
    let mut redis = inspector(&server).await;
    let (result, after) = cut_while_running(locks, || async move {
        let deleted: u32 = redis.del("lock:{watched}").await.unwrap();
        assert_eq!(deleted, 1);
    })
    .await;
    expect_lost(result, LossCause::NotOwner);
    eprintln!("deleted key found and body stopped after {after:?} (renewal interval 1 s)");
}

#[tokio::test]
async fn a_client_cut_off_from_redis_stops_the_body_before_the_key_can_expire() {
    let server = redis_server();
    let proxy = TcpProxy::start(format!("127.0.0.1:{}", server.port()).parse().unwrap()).unwrap();
    let locks = LockClient::builder(&proxy.url())
        .response_timeout(Duration::from_millis(300))
        .connect()
        .await
        .unwrap();
    let mut redis = inspector(&server).await;
    let (result, after) = cut_while_running(locks, || async { proxy.freeze() }).await;
    expect_lost(result, LossCause::Unconfirmed);
    let remaining: i64 = redis.pttl("lock:{watched}").await.unwrap();
    eprintln!("cut off: body stopped after {after:?}; the key still had {remaining} ms in Redis");
}

#[tokio::test]
async fn renewal_survives_script_flush_and_killed_connections() {
    let server = redis_server();
    let locks = client(&server).await;
    let mut redis = inspector(&server).await;
    // Leases of 1.2 s, each round 0.8 s: slack for a reconnection on a loaded machine.
    let guard = locks.lock("steady").ttl_ms(1_200).acquire().await.unwrap();
    for round in 0..3 {
        let _: () = redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query_async(&mut redis)
            .await
            .unwrap();
        let _: () = redis::cmd("CLIENT")
            .arg(&["KILL", "TYPE", "normal", "SKIPME", "yes"])
            .query_async(&mut redis)
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(800)).await;
        assert!(
            !guard.is_lost(),
            "round {round}: {:?}",
            locks.renewal_stats()
        );
    }
    assert!(
        locks.renewal_stats().leases_extended >= 3,
        "{:?}",
        locks.renewal_stats()
    );
    guard
        .release()
        .await
        .expect("still ours after 2.4 s of a 1.2 s lease");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewal_keeps_ten_thousand_locks_alive() {
    const LOCKS: usize = 10_000;
    // Longer than taking 10,000 locks lasts in a debug build on a loaded machine: a lease
    // whose grant is answered after its TTL is lost before renewal can start.
    const TTL_MS: u64 = 4_000;
    let server = redis_server();
    let locks = client(&server).await;
    let mut redis = inspector(&server).await;
    let acquiring: Vec<_> = (0..LOCKS)
        .map(|i| tokio::spawn(locks.lock(format!("many:{i}")).ttl_ms(TTL_MS).acquire()))
        .collect();
    let mut guards = Vec::with_capacity(LOCKS);
    for task in acquiring {
        guards.push(task.await.unwrap().unwrap());
    }
    let before = locks.renewal_stats();
    tokio::time::sleep(Duration::from_millis(TTL_MS * 5 / 2)).await;
    let stats = locks.renewal_stats();
    let mut pipe = redis::pipe();
    for i in 0..LOCKS {
        pipe.exists(format!("lock:{{many:{i}}}"));
    }
    let alive: Vec<bool> = pipe.query_async(&mut redis).await.unwrap();
    assert_eq!(
        alive.iter().filter(|a| **a).count(),
        LOCKS,
        "every lock outlived 2.5 TTLs"
    );
    assert_eq!(stats.losses, 0, "{stats:?}");
    // 2.5 TTLs are 7.5 intervals: one round each once the leases are in step, plus a few
    // while they fall into step: bounded, and independent of the number of locks.
    let rounds = stats.rounds - before.rounds;
    assert!(
        (5..=20).contains(&rounds),
        "renewal rounds for 10,000 locks in 7.5 intervals: {rounds}"
    );
    eprintln!("10,000 locks, 7.5 intervals: {rounds} renewal rounds, {stats:?}");
}

// Reentrancy.

#[redis_lock(key = "account:{id}", action = GiveUp, client = locks)]
async fn transfer(locks: &LockClient, id: u32) -> Result<(u64, u64), LockError> {
    let outer = current_token().unwrap_or(0);
    let inner = audit(locks, id).await?;
    Ok((outer, inner))
}

/// Not locked itself: reaches the nested lock through another call.
async fn audit(locks: &LockClient, id: u32) -> Result<u64, LockError> {
    balance(locks, id).await
}

#[redis_lock(key = "account:{id}", action = GiveUp, client = locks)]
async fn balance(locks: &LockClient, id: u32) -> Result<u64, LockError> {
    Ok(current_token().unwrap_or(0))
}

#[tokio::test]
async fn a_nested_call_re_enters_without_a_round_trip_and_the_outer_holder_releases() {
    let server = redis_server();
    let locks = client(&server).await;
    let mut redis = inspector(&server).await;
    lock_once(&locks, "warm-up").await;
    let before = script_calls(&mut redis).await;
    let (outer, inner) = transfer(&locks, 7)
        .await
        .expect("the nested call does not wait");
    assert_eq!(
        outer, inner,
        "the nested call reuses the holder's fencing token"
    );
    assert_eq!(
        script_calls(&mut redis).await - before,
        2,
        "one acquire and one release for both calls"
    );
    let exists: bool = redis.exists("lock:{account:7}").await.unwrap();
    assert!(!exists, "released once the outer holder ended");
}

#[redis_lock(key = "shared", action = GiveUp, client = locks)]
async fn hold_until(
    locks: &LockClient,
    entered: Arc<tokio::sync::Notify>,
    go: Arc<tokio::sync::Notify>,
) -> Result<(), LockError> {
    entered.notify_one();
    go.notified().await;
    Ok(())
}

#[redis_lock(key = "shared", action = GiveUp, client = locks)]
async fn quick(locks: &LockClient) -> Result<(), LockError> {
    Ok(())
}

#[redis_lock(key = "shared", action = GiveUp, client = locks)]
async fn spawns_a_task(locks: &LockClient) -> Result<Result<(), LockError>, LockError> {
    let locks = locks.clone();
    Ok(tokio::spawn(async move { quick(&locks).await })
        .await
        .unwrap())
}

#[tokio::test]
async fn join_branches_and_spawned_tasks_are_not_nested() {
    let server = redis_server();
    let locks = client(&server).await;
    let (entered, go) = (
        Arc::new(tokio::sync::Notify::new()),
        Arc::new(tokio::sync::Notify::new()),
    );
    let second = async {
        // Runs while the first branch holds `shared`, in the same task.
        entered.notified().await;
        let result = quick(&locks).await;
        go.notify_one();
        result
    };
    let (first, second) = tokio::join!(hold_until(&locks, entered.clone(), go.clone()), second);
    first.unwrap();
    assert!(
        matches!(second, Err(LockError::NotAcquired { .. })),
        "a join! branch is not nested in the other: {second:?}"
    );
    let spawned = spawns_a_task(&locks).await.unwrap();
    assert!(
        matches!(spawned, Err(LockError::NotAcquired { .. })),
        "a task spawned from the body is not nested in it: {spawned:?}"
    );
}

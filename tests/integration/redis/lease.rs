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
    let contender = support::spawn_test_process("redis::lease::contender", CONTENDER_URL, &url);
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
        let deleted: u32 = redis.del("lock:{watched}:v2").await.unwrap();
        assert_eq!(deleted, 1);
    })
    .await;
    expect_lost(result, LossCause::NotOwner);
    eprintln!("deleted key found and body stopped after {after:?} (renewal interval 1 s)");
}

/// Holds `cut-off` with a 10 s lease (a drift allowance of 102 ms) until dropped, noting when
/// its body was dropped.
#[redis_lock(key = "cut-off", ttl_ms = 10_000)]
async fn cut_off_job(
    entered: Arc<tokio::sync::Notify>,
    stopped: Arc<std::sync::Mutex<Option<Instant>>>,
) -> Result<(), LockError> {
    struct NoteStop(Arc<std::sync::Mutex<Option<Instant>>>);
    impl Drop for NoteStop {
        fn drop(&mut self) {
            *self.0.lock().unwrap() = Some(Instant::now());
        }
    }
    let _note = NoteStop(stopped);
    entered.notify_one();
    std::future::pending::<()>().await;
    Ok(())
}

/// A holder cut off from Redis stops its body before the key can expire there: before another
/// client, polling from the moment of the cut, is granted the key.
#[tokio::test]
async fn a_client_cut_off_from_redis_stops_the_body_before_the_key_can_expire() {
    let server = redis_server();
    let proxy = TcpProxy::start(format!("127.0.0.1:{}", server.port()).parse().unwrap()).unwrap();
    let locks = LockClient::builder(&proxy.url())
        .response_timeout(Duration::from_millis(300))
        .connect()
        .await
        .unwrap();
    let contender = client(&server).await;
    let (entered, stopped) = (Arc::default(), Arc::default());
    let job = tokio::spawn(with_client(
        locks,
        cut_off_job(Arc::clone(&entered), Arc::clone(&stopped)),
    ));
    entered.notified().await;
    proxy.freeze();
    let taken = contender
        .lock("cut-off")
        .ttl_ms(10_000)
        .retry(10_000)
        .sleep_ms(5)
        .wait_ms(60_000)
        .acquire()
        .await
        .expect("the key expires in Redis");
    let taken_at = Instant::now();
    let result = tokio::time::timeout(Duration::from_secs(30), job)
        .await
        .expect("the body is stopped")
        .unwrap();
    expect_lost(result, LossCause::Unconfirmed);
    let stopped_at = stopped.lock().unwrap().expect("the body was dropped");
    assert!(
        stopped_at < taken_at,
        "the body stopped {:?} after another client took the key",
        stopped_at - taken_at
    );
    eprintln!(
        "cut off: the body stopped {:?} before another client took the key",
        taken_at - stopped_at
    );
    taken.release().await.unwrap();
}

/// Each round flushes the scripts and kills every connection, then waits for a renewal to get
/// through after it (the event awaited, not a fixed time): the lease outlives every round.
#[tokio::test]
async fn renewal_survives_script_flush_and_killed_connections() {
    let server = redis_server();
    let locks = client(&server).await;
    let mut redis = inspector(&server).await;
    // A 3 s lease renewed every second: after a kill, two seconds for the reconnection, the
    // script's reload and the resend, however loaded the machine.
    let guard = locks.lock("steady").ttl_ms(3_000).acquire().await.unwrap();
    for round in 0..3 {
        let extended = locks.renewal_stats().leases_extended;
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
        let renewed = support::eventually(Duration::from_secs(30), || async {
            locks.renewal_stats().leases_extended > extended || guard.is_lost()
        })
        .await;
        assert!(
            renewed && !guard.is_lost(),
            "round {round}: {:?}",
            locks.renewal_stats()
        );
    }
    guard
        .release()
        .await
        .expect("still ours after three rounds of flushes and kills");
}

/// Renewal keeps 10,000 leases alive for 2.5 TTLs in a bounded number of rounds. The lease is
/// derived from how long this machine takes to lock 1,000 keys (as loaded as it is now): three
/// times what locking all 10,000 should take (at least 4 s), so that neither the acquisitions
/// nor a round of 10,000 renewals (a renewal interval is a third of the lease) come near a
/// lease's end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewal_keeps_ten_thousand_locks_alive() {
    const LOCKS: usize = 10_000;
    const CALIBRATION: usize = 1_000;
    let server = redis_server();
    let locks = client(&server).await;
    // Ten thousand keys asked for at once: far past the default bound on keys at the store.
    locks.set_max_in_flight(usize::MAX).unwrap();
    let mut redis = inspector(&server).await;
    let take_all = |count: usize, ttl_ms: u64| {
        let acquiring: Vec<_> = (0..count)
            .map(|i| tokio::spawn(locks.lock(format!("many:{i}")).ttl_ms(ttl_ms).acquire()))
            .collect();
        async move {
            let mut guards = Vec::with_capacity(count);
            for task in acquiring {
                guards.push(task.await.unwrap().unwrap());
            }
            guards
        }
    };
    let started = Instant::now();
    for guard in take_all(CALIBRATION, 60_000).await {
        guard.release().await.unwrap();
    }
    let per_thousand = started.elapsed();
    let ttl = (per_thousand * (LOCKS / CALIBRATION) as u32 * 3).max(Duration::from_secs(4));
    let ttl_ms = u64::try_from(ttl.as_millis()).unwrap();
    let guards = take_all(LOCKS, ttl_ms).await;
    let before = locks.renewal_stats();
    tokio::time::sleep(ttl * 5 / 2).await;
    let stats = locks.renewal_stats();
    let mut pipe = redis::pipe();
    for i in 0..LOCKS {
        pipe.get(format!("lock:{{many:{i}}}:v2"));
    }
    let values: Vec<Option<String>> = pipe.query_async(&mut redis).await.unwrap();
    let alive = values.iter().flatten().filter(|v| v.starts_with("h:"));
    assert_eq!(
        alive.count(),
        LOCKS,
        "every lock outlived 2.5 TTLs of {ttl_ms} ms"
    );
    assert_eq!(stats.losses, 0, "{stats:?}");
    // 2.5 TTLs are 7.5 intervals: one round each once the leases are in step, plus a few
    // while they fall into step: bounded, and independent of the number of locks.
    let rounds = stats.rounds - before.rounds;
    assert!(
        (5..=20).contains(&rounds),
        "renewal rounds for 10,000 locks in 7.5 intervals: {rounds}"
    );
    eprintln!(
        "10,000 locks, lease {ttl_ms} ms (1,000 locked in {per_thousand:?}), 7.5 intervals: \
         {rounds} renewal rounds, {stats:?}"
    );
    drop(guards);
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
    let held = crate::support::granted_in(&mut redis, "lock:{account:7}:v2").await;
    assert!(!held, "released once the outer holder ended");
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

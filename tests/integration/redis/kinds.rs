//! Read/write locks, semaphores and segmented locks against a real redis-server, checked on
//! recorded histories: who was inside, when, under which fencing token.

use std::io::{BufRead, BufReader};
use std::time::Duration;

use fencelock::backend::memory::MemoryBackend;
use fencelock::backend::redis::{RedisBackend, RedisSettings};
use fencelock::backend::{Acquire, Lease, LockBackend, Release, Turn};
use fencelock::testing::history::{
    Section, check, check_at_most, check_read_write, monotonic_ns, most_inside,
};
use fencelock::{LockClient, LockKind};

use crate::support::{
    self, Sections, client, eventually, guard_key, inspector, record, redis_server, run_tasks,
    shard_key,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn readers_overlap_and_writers_overlap_nobody() {
    let server = redis_server();
    let locks = client(&server).await;
    let body = Duration::from_millis(3);
    let (readers, writers) = tokio::join!(
        run_tasks(&locks, "catalog", LockKind::Read, 8, 15, body, guard_key),
        run_tasks(&locks, "catalog", LockKind::Write, 3, 10, body, guard_key),
    );
    let report = check_read_write(&readers, &writers);
    assert_eq!(report.sections, 8 * 15 + 3 * 10);
    assert!(report.violations.is_empty(), "{:#?}", report.violations);
    let overlapping = most_inside(&readers);
    assert!(
        overlapping >= 2,
        "readers shared the key: at most {overlapping} inside at once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_writer_enters_before_the_readers_that_arrived_after_it() {
    let server = redis_server();
    let locks = client(&server).await;
    let redis = inspector(&server).await;
    let first = locks.read_lock("prices").acquire().await.unwrap();
    let sections = std::sync::Arc::new(Sections::default());
    // The readers stay inside until all four are: they can only if they share the key.
    let together = std::sync::Arc::new(tokio::sync::Barrier::new(4));
    let enter = |task: u32, kind: LockKind| {
        let (locks, sections, together) = (locks.clone(), sections.clone(), together.clone());
        tokio::spawn(async move {
            let request = locks.request("prices", kind).wait_ms(30_000);
            let guard = request.acquire().await.unwrap();
            let entered_ns = monotonic_ns();
            if kind == LockKind::Read {
                let all_in = tokio::time::timeout(Duration::from_secs(10), together.wait()).await;
                all_in.expect("the four readers are inside together");
            }
            let body = Duration::from_millis(5);
            record(
                &sections,
                (task, guard_key(&guard)),
                &guard,
                entered_ns,
                body,
            )
            .await;
            guard.release().await.unwrap();
        })
    };
    // The writer, then four readers, each in line before the next arrives.
    let mut waiting = vec![enter(0, LockKind::Write)];
    for task in 1..=4 {
        queue_reaches(&redis, "prices", task).await;
        waiting.push(enter(task as u32, LockKind::Read));
    }
    queue_reaches(&redis, "prices", 5).await;
    let first_token = first.token();
    first.release().await.unwrap();
    for task in waiting {
        task.await.unwrap();
    }
    let sections = std::mem::take(&mut *sections.lock().unwrap());
    let (writers, readers): (Vec<Section>, Vec<Section>) =
        sections.into_iter().partition(|section| section.task == 0);
    let report = check_read_write(&readers, &writers);
    assert!(report.violations.is_empty(), "{:#?}", report.violations);
    let writer = &writers[0];
    assert!(writer.token > first_token);
    for reader in &readers {
        assert!(
            reader.entered_ns >= writer.exited_ns && reader.token > writer.token,
            "a reader that arrived after the waiting writer entered before it:\n  {writer}\n  {reader}"
        );
    }
    assert_eq!(most_inside(&readers), 4);
}

/// Waits until `key`'s line holds `length` waiters.
async fn queue_reaches(redis: &redis::aio::MultiplexedConnection, key: &str, length: usize) {
    let queue = format!("lock:{{{key}}}:v2:queue");
    let reached = eventually(Duration::from_secs(10), || {
        let (mut redis, queue) = (redis.clone(), queue.clone());
        async move {
            let waiting: usize = redis::AsyncCommands::llen(&mut redis, &queue)
                .await
                .unwrap();
            waiting >= length
        }
    })
    .await;
    assert!(reached, "{length} waiter(s) in {queue}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_semaphore_never_lets_in_more_than_its_permits() {
    let server = redis_server();
    let locks = client(&server).await;
    let permits = LockKind::Semaphore { permits: 3 };
    let body = Duration::from_millis(3);
    let sections = run_tasks(&locks, "exports", permits, 10, 12, body, guard_key).await;
    let report = check_at_most(&sections, 3);
    assert_eq!(report.sections, 120);
    assert!(report.violations.is_empty(), "{:#?}", report.violations);
    assert_eq!(most_inside(&sections), 3, "the permits were used");
}

const HOLDER_URL: &str = "FENCELOCK_PERMIT_HOLDER_URL";
const PERMIT_TTL_MS: u64 = 1_000;

/// The child process of the killed-holder test: takes a permit (renewed while it lives),
/// says so on stdout, and waits to be killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a child process of a_killed_holders_permit_comes_back_after_its_ttl"]
async fn permit_holder() {
    let url = std::env::var(HOLDER_URL).expect("started by the parent test");
    let locks = LockClient::connect(&url).await.unwrap();
    let guard = locks
        .semaphore("reports", 2)
        .ttl_ms(PERMIT_TTL_MS)
        .acquire()
        .await
        .unwrap();
    println!("HELD {} {}", guard.token(), monotonic_ns());
    tokio::time::sleep(Duration::from_secs(60)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_holders_permit_comes_back_after_its_ttl() {
    let server = redis_server();
    let locks = client(&server).await;
    let mut holder =
        support::spawn_test_process("redis::kinds::permit_holder", HOLDER_URL, &server.url());
    let mut lines = BufReader::new(holder.stdout.take().unwrap()).lines();
    let held = lines
        .by_ref()
        .map_while(Result::ok)
        .find(|line| line.starts_with("HELD "))
        .expect("the child holds a permit");
    let [token, entered_ns] =
        [1, 2].map(|at| held.split(' ').nth(at).unwrap().parse::<u64>().unwrap());
    let second = locks.semaphore("reports", 2).acquire().await.unwrap();
    let refused = locks.semaphore("reports", 2).give_up().acquire().await;
    assert!(
        refused.unwrap_err().is_not_acquired(),
        "both permits are held"
    );
    // Renewal keeps the child's permit past its ttl while the child lives.
    tokio::time::sleep(Duration::from_millis(PERMIT_TTL_MS * 2)).await;
    let refused = locks.semaphore("reports", 2).give_up().acquire().await;
    assert!(
        refused.unwrap_err().is_not_acquired(),
        "the live child's permit is renewed"
    );
    holder.kill().unwrap();
    let killed_ns = monotonic_ns();
    holder.wait().unwrap();
    let back = locks
        .semaphore("reports", 2)
        .wait_ms(PERMIT_TTL_MS * 10)
        .acquire()
        .await;
    let back = back.expect("the killed holder's permit comes back once its lease ends");
    let sections = Sections::default();
    let child = Section {
        process: holder.id(),
        task: 0,
        key: "reports".into(),
        token,
        entered_ns,
        exited_ns: killed_ns,
    };
    sections.lock().unwrap().push(child);
    let (now, body) = (monotonic_ns(), Duration::from_millis(5));
    tokio::join!(
        record(&sections, (1, guard_key(&second)), &second, now, body),
        record(&sections, (2, guard_key(&back)), &back, now, body),
    );
    let sections = sections.into_inner().unwrap();
    let report = check_at_most(&sections, 2);
    assert!(report.violations.is_empty(), "{:#?}", report.violations);
    assert!(back.token() > token.max(second.token()), "tokens increase");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn shards_are_exclusive_and_used_together() {
    let server = redis_server();
    let locks = client(&server).await;
    let shards = LockKind::Segmented { shards: 4 };
    let body = Duration::from_millis(3);
    let sections = run_tasks(&locks, "stock:tea", shards, 8, 12, body, shard_key).await;
    let report = check(&sections);
    assert_eq!(report.sections, 96);
    assert!(report.violations.is_empty(), "{:#?}", report.violations);
    let whole: Vec<Section> = sections
        .iter()
        .map(|section| Section {
            key: "stock:tea".into(),
            ..section.clone()
        })
        .collect();
    assert!(
        check_at_most(&whole, 4).violations.is_empty(),
        "at most one holder per shard"
    );
    assert!(most_inside(&whole) >= 2, "shards were held together");
    assert_eq!(report.keys, 4, "every shard was used");
}

/// A shared grant whose reply is lost is recognised by the resend (same owner), so the
/// request holds it once; after its release nothing of the key is left in Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_reply_leaves_neither_a_second_grant_nor_an_orphan() {
    let server = redis_server();
    let addr = format!("127.0.0.1:{}", server.port()).parse().unwrap();
    let proxy = fencelock::testing::TcpProxy::start(addr).unwrap();
    let locks = LockClient::builder(&proxy.url())
        .response_timeout(Duration::from_millis(300))
        .connect()
        .await
        .unwrap();
    let mut redis = inspector(&server).await;
    // Connected, and the scripts loaded: the reply held next is an attempt's.
    for kind in [LockKind::Read, LockKind::Semaphore { permits: 2 }] {
        let warm = locks.request("warm", kind).acquire().await.unwrap();
        warm.release().await.unwrap();
    }
    for kind in [
        LockKind::Read,
        LockKind::Semaphore { permits: 2 },
        LockKind::Segmented { shards: 2 },
    ] {
        proxy.hold_next(fencelock::testing::Direction::ToClient);
        let guard = locks
            .request("lost", kind)
            .give_up()
            .acquire()
            .await
            .unwrap();
        let grants: usize = redis::AsyncCommands::zcard(&mut redis, "lock:{lost}:v2:leases")
            .await
            .unwrap();
        assert_eq!(grants, 1, "{}: one grant for the request", kind.name());
        guard.release().await.unwrap();
        let left: usize = redis::AsyncCommands::exists(
            &mut redis,
            &["lock:{lost}:v2", "lock:{lost}:v2:leases"][..],
        )
        .await
        .unwrap();
        assert_eq!(left, 0, "{}: nothing left after the release", kind.name());
    }
}

/// Review finding: a writer's release hands the key to every reader at the head of the line,
/// one announcement each; a reader that looked after all of them heard only the last, took
/// it for a hand-off to another waiter and slept out its pause, holding its grant unused.
/// On the paused clock: each reader enters at once.
#[tokio::test(start_paused = true)]
async fn every_reader_a_writers_release_hands_the_key_to_enters_at_once() {
    let locks = LockClient::memory_on(tokio::runtime::Handle::current());
    let writer = locks.write_lock("catalog").acquire().await.unwrap();
    let readers: Vec<_> = (0..3)
        .map(|_| {
            let request = locks.read_lock("catalog").sleep_ms(10_000).wait_ms(60_000);
            tokio::spawn(async move {
                let guard = request.acquire().await.unwrap();
                (tokio::time::Instant::now(), guard)
            })
        })
        .collect();
    // On the paused clock the readers run until each sleeps in line.
    tokio::time::sleep(Duration::from_millis(10)).await;
    let released_at = tokio::time::Instant::now();
    writer.release().await.unwrap();
    for reader in readers {
        let (entered_at, guard) = reader.await.unwrap();
        assert_eq!(entered_at, released_at, "a reader handed the key slept on");
        guard.release().await.unwrap();
    }
}

/// Review finding: a key that served readers and a writer, then a mutex, still has the
/// writer's place in line. The mutex's release handed the key to that place (memory: a
/// mutex grant to the writer; Redis: the script failed on its shape and handed it to
/// nobody). The place of another kind is skipped: the next mutex waiter gets the key.
async fn a_place_of_another_kind_is_skipped_by_a_hand_off(backend: &dyn LockBackend) {
    let lease = |owner: &str, kind, ttl_ms| Lease {
        key: "mixed".into(),
        owner: owner.into(),
        ttl: Duration::from_millis(ttl_ms),
        replicas: 0,
        kind,
    };
    let place = Turn::InLine(Duration::from_secs(60));
    let reader = lease("reader", LockKind::Read, 200);
    let writer = lease("writer", LockKind::Write, 60_000);
    let (mutex, next) = (
        lease("mutex", LockKind::Mutex, 60_000),
        lease("next", LockKind::Mutex, 60_000),
    );
    assert!(matches!(
        backend.acquire(&reader, Turn::Once).await,
        Ok(Acquire::Granted { .. })
    ));
    assert!(matches!(
        backend.acquire(&writer, place).await,
        Ok(Acquire::Held { .. })
    ));
    // The reader's lease ends; a mutex takes the free key, and another waits behind the
    // writer's place.
    let mut taken = None;
    for _ in 0..100 {
        match backend.acquire(&mutex, Turn::Once).await {
            Ok(Acquire::Granted { .. }) => {
                taken = Some(());
                break;
            }
            _ => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
    taken.expect("the mutex takes the key once the reader's lease ended");
    assert!(matches!(
        backend.acquire(&next, place).await,
        Ok(Acquire::Held { .. })
    ));
    assert_eq!(
        backend.release(&mutex, Duration::ZERO).await.unwrap(),
        Release::Released
    );
    assert_eq!(
        backend.release(&next, Duration::ZERO).await.unwrap(),
        Release::Released,
        "the release handed the key to the next mutex waiter"
    );
    let _ = backend.release(&writer, Duration::ZERO).await;
}

#[tokio::test]
async fn on_memory_a_place_of_another_kind_is_skipped_by_a_hand_off() {
    a_place_of_another_kind_is_skipped_by_a_hand_off(&MemoryBackend::new()).await;
}

#[tokio::test]
async fn on_redis_a_place_of_another_kind_is_skipped_by_a_hand_off() {
    let server = redis_server();
    let backend = RedisBackend::connect(&server.url(), RedisSettings::default())
        .await
        .unwrap();
    a_place_of_another_kind_is_skipped_by_a_hand_off(&backend).await;
}

#[fencelock::redis_lock(key = "exports", permits = 5)]
async fn export_all() -> Result<(), fencelock::LockError> {
    export_one().await
}

#[fencelock::redis_lock(key = "exports", permits = 3)]
async fn export_one() -> Result<(), fencelock::LockError> {
    Ok(())
}

#[fencelock::redis_lock(key = "stock:{sku}", shards = 100)]
async fn restock(sku: &str) -> Result<u32, fencelock::LockError> {
    take_from_shard(sku).await
}

#[fencelock::redis_lock(key = "stock:{sku}", shards = 4)]
async fn take_from_shard(sku: &str) -> Result<u32, fencelock::LockError> {
    Ok(fencelock::current_shard().expect("under the segmented lock"))
}

/// Review finding: a nested call re-entered any semaphore or segmented lock of its key, so a
/// `permits = 3` body could run inside a permit of 5 (up to 5 inside), and a `shards = 4`
/// body saw shard 63. Both are refused now, unless the held grant fits the inner count.
#[tokio::test]
async fn a_nested_count_reenters_only_the_grant_that_fits_it() {
    let locks = LockClient::memory();
    let nested = fencelock::with_client(locks.clone(), export_all()).await;
    match nested {
        Err(fencelock::LockError::InvalidConfig { reason, .. }) => {
            assert!(reason.contains("up to 5 may be inside"), "{reason}")
        }
        other => panic!("a permit of 3 inside one of 5: {other:?}"),
    }
    for _ in 0..20 {
        match fencelock::with_client(locks.clone(), restock("tea")).await {
            Ok(shard) => assert!(shard < 4, "the inner body's shard is one of its own"),
            Err(fencelock::LockError::InvalidConfig { reason, .. }) => {
                assert!(reason.contains("which is not below 4"), "{reason}")
            }
            Err(other) => panic!("{other:?}"),
        }
    }
}

/// A release that hands a shard to a waiter names it: the waiter holds that shard without
/// another attempt (the release is the only script call).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handed_over_shard_is_named_by_its_announcement() {
    let server = redis_server();
    let locks = client(&server).await;
    let mut redis = inspector(&server).await;
    // The scripts loaded: a first call finds no library, and is sent again after loading it.
    let warm = locks.segmented("warm", 2).acquire().await.unwrap();
    warm.release().await.unwrap();
    let [first, second] = [(); 2].map(|()| locks.segmented("stock:tea", 2).acquire());
    let (first, second) = (first.await.unwrap(), second.await.unwrap());
    let started = support::script_calls(&mut redis).await;
    let waiter = tokio::spawn({
        let request = locks.segmented("stock:tea", 2).wait_ms(30_000);
        async move { request.acquire().await.unwrap() }
    });
    // Its attempt, and the one right after it subscribed; then it waits.
    let waiting = eventually(Duration::from_secs(10), || {
        let mut redis = redis.clone();
        async move { support::script_calls(&mut redis).await == started + 2 }
    })
    .await;
    assert!(waiting, "the waiter made its two attempts");
    let before = support::script_calls(&mut redis).await;
    let shard = first.shard();
    first.release().await.unwrap();
    let handed = waiter.await.unwrap();
    assert_eq!(handed.shard(), shard, "the waiter holds the shard released");
    let calls = support::script_calls(&mut redis).await - before;
    assert_eq!(
        calls, 1,
        "the release alone: the announcement named the shard"
    );
    for guard in [handed, second] {
        guard.release().await.unwrap();
    }
}

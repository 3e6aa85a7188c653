//! Grants whose reply comes after their lease could have ended (a client paused between the
//! store's grant and its reading of the reply, or a slow network): no guard, and nothing of
//! the released grant must leak into the request's later grants. Found by an adversarial
//! review (2026-12-02): the late grant was released under the request's owner token, and the
//! store's memory of that release then passed a later grant's lost lease for released.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use fencelock::backend::BoxFuture;
use fencelock::backend::memory::MemoryBackend;
use fencelock::testing::{Call, Intercepted, Interceptor, Verdict};
use fencelock::{LockClient, LockError};

use crate::support::{inspector, lock_once, redis_server};

/// The first acquire request of the client reaches the store `delay` late (a slow network on
/// the way there, or a process paused right after sending): the store's grant is fresh when
/// it is made, but the reply comes after the lease the client counts from its send.
#[derive(Debug)]
struct FirstAcquireLate {
    delay: Duration,
    acquires: AtomicU32,
}

impl Interceptor for FirstAcquireLate {
    fn before<'a>(&'a self, call: Call<'a>) -> BoxFuture<'a, Verdict> {
        Box::pin(async move {
            if let Call::Acquire { .. } = call
                && self.acquires.fetch_add(1, Ordering::SeqCst) == 0
            {
                tokio::time::sleep(self.delay).await;
            }
            Verdict::Pass
        })
    }
}

fn late_first_acquire() -> (LockClient, Arc<MemoryBackend>) {
    let backend = Intercepted::new(
        MemoryBackend::new(),
        FirstAcquireLate {
            delay: Duration::from_millis(1_500),
            acquires: AtomicU32::new(0),
        },
    );
    let store = backend.backend.clone();
    (
        LockClient::from_backend_on(backend, tokio::runtime::Handle::current()),
        store,
    )
}

/// Promise ("Release reports what is known"): `release()` is `Lost` when the key was gone.
/// A grant that came too late is released by `in_time` with the request's owner token, and
/// that release is remembered for the owner; the request's next attempt (same owner) gets a
/// guard. When that guard's lease is lost (the key deleted by hand), its release must say
/// so; it finds the remembered release of the late grant and reports `Ok`.
#[tokio::test(start_paused = true)]
async fn a_late_grant_withdrawn_hides_the_loss_of_the_next_grant_memory() {
    let (locks, store) = late_first_acquire();
    let guard = locks
        .lock("k")
        .ttl_ms(1_000)
        .wait_ms(10_000)
        .sleep_ms(100)
        .acquire()
        .await
        .expect("the second attempt is on time");
    assert!(store.delete_key("k"), "held by the guard");
    let released = guard.release().await;
    assert!(
        matches!(released, Err(LockError::Lost { .. })),
        "the key was deleted under the guard, yet its release says {released:?}"
    );
}

/// The same with an operator's forced release, which README says the holder learns of "at its
/// next renewal or release" as `Lost`; and through the attribute, whose call must then fail
/// with `Lost` (on_lost = Abort).
#[tokio::test(start_paused = true)]
async fn a_late_grant_withdrawn_hides_a_forced_release_from_the_attribute() {
    #[fencelock::redis_lock(key = "job", ttl_ms = 1_000, wait_ms = 10_000, sleep_ms = 100)]
    async fn job(admin: fencelock::LockAdmin) -> Result<u64, LockError> {
        let forced = admin.force_release("job").await?;
        assert!(forced.released, "the operator released the body's lock");
        Ok(fencelock::current_token().unwrap())
    }
    let (locks, _) = late_first_acquire();
    let ran = fencelock::with_client(locks.clone(), job(locks.admin())).await;
    assert!(
        matches!(ran, Err(LockError::Lost { .. })),
        "the lock was force-released under the body, yet the call returned {ran:?}"
    );
}

/// The same on one Redis server: the acquire request is held on the way (proxy) and reaches
/// Redis 1.5 s late, within the response timeout; its reply is late for a 1 s lease, so the
/// grant (fresh on the server) is released and remembered in `lock:{k}:v2:released:<owner>`.
/// The next attempt's guard then has its key deleted by hand (`DEL`), and its release reports
/// `Ok`.
#[tokio::test]
async fn a_late_grant_withdrawn_hides_the_loss_of_the_next_grant_redis() {
    use fencelock::testing::{Direction, TcpProxy};
    use redis::AsyncCommands;
    let server = redis_server();
    let proxy = TcpProxy::start(format!("127.0.0.1:{}", server.port()).parse().unwrap()).unwrap();
    let locks = LockClient::connect(&proxy.url()).await.unwrap();
    lock_once(&locks, "warm").await;
    proxy.hold_next(Direction::ToServer);
    let acquiring = tokio::spawn({
        let locks = locks.clone();
        async move {
            locks
                .lock("k")
                .ttl_ms(1_000)
                .wait_ms(10_000)
                .sleep_ms(100)
                .acquire()
                .await
        }
    });
    proxy.held().await;
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    proxy.deliver_held().await;
    let guard = acquiring
        .await
        .unwrap()
        .expect("the next attempt is on time");
    let mut redis = inspector(&server).await;
    let memory: Vec<String> = redis.keys("lock:{k}:v2:released:*").await.unwrap();
    let deleted: u32 = redis.del("lock:{k}:v2").await.unwrap();
    assert_eq!(deleted, 1, "the guard's key was there");
    let released = guard.release().await;
    assert!(
        matches!(released, Err(LockError::Lost { .. })),
        "the key was deleted under the guard (release memory before: {memory:?}), yet its \
         release says {released:?}"
    );
}

/// The release-memory defect of `a_late_grant_withdrawn_hides_the_loss_of_the_next_grant_*` on
/// both SQL stores (`<table>_releases` consulted by every release, not only a resend): the
/// first attempt waits 1.5 s for the fence row (another session holds it), so its grant of a
/// 1 s lease is late and released by the client, and remembered; the next attempt's guard then
/// has its row deleted by hand, and its release says `Ok`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_grant_withdrawn_hides_the_loss_of_the_next_grant_sql() {
    use fencelock::testing::{SqlDatabase, SqlKind};
    let mut failures = Vec::new();
    for kind in [SqlKind::Postgres, SqlKind::MySql] {
        let Some(database) = SqlDatabase::reach(kind).await else {
            continue;
        };
        let locks = database.client().await;
        locks
            .lock("late")
            .acquire()
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
        let holder = database
            .hold_fence_row("late", Duration::from_millis(1_500))
            .await
            .unwrap();
        let guard = locks
            .lock("late")
            .ttl_ms(1_000)
            .wait_ms(10_000)
            .sleep_ms(100)
            .acquire()
            .await
            .expect("the second attempt is on time");
        holder.await.unwrap();
        let delete = format!("DELETE FROM {} WHERE name = 'late'", database.table());
        assert_eq!(database.execute(&delete).await.unwrap(), 1, "{kind:?}");
        let released = guard.release().await;
        if !matches!(released, Err(LockError::Lost { .. })) {
            failures.push(format!("{kind:?}: {released:?}"));
        }
        database.drop_tables().await;
    }
    assert!(
        failures.is_empty(),
        "the row was deleted under the guard, yet its release says {failures:?}"
    );
}

/// A single attempt whose grant came late, on a key nobody else held or waited for, fails as a
/// lost reply does (`Backend`), not as `NotAcquired`, which says the lock is taken.
#[tokio::test(start_paused = true)]
async fn a_late_grant_of_a_free_key_fails_as_a_lost_reply() {
    let (locks, _) = late_first_acquire();
    let once = locks.lock("free").ttl_ms(1_000).give_up().acquire().await;
    assert!(once.as_ref().is_err_and(LockError::is_backend), "{once:?}");
}

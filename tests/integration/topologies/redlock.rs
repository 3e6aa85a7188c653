//! Redlock over independent masters, each a private `redis-server` (the conformance suite
//! is in `tests/conformance.rs`): the faults a majority survives and the ones it does not, and the fencing that catches what
//! Redlock itself cannot.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use fencelock::backend::redis::{RedisBackend, RedisSettings};
use fencelock::backend::redlock::RedlockBackend;
use fencelock::backend::{Acquire, Lease, LockBackend, Release, Turn};
use fencelock::testing::history;
use fencelock::testing::{Direction, RedisServer, TcpProxy};
use fencelock::{LockClient, LockError, LockKind};

use crate::support::{inspector, record_section, redis_server, script_calls, with_sources};

fn masters(count: usize) -> Vec<RedisServer> {
    (0..count).map(|_| redis_server()).collect()
}

async fn redlock(masters: &[RedisServer]) -> LockClient {
    redlock_on(masters.iter().map(RedisServer::url).collect()).await
}

async fn redlock_on(urls: Vec<String>) -> LockClient {
    LockClient::redlock(urls)
        .await
        .unwrap_or_else(|e| panic!("cannot connect to the Redlock masters: {e}"))
}

/// A proxy in front of `master`, to cut it off while it keeps its data.
fn proxy(master: &RedisServer) -> TcpProxy {
    let addr = format!("127.0.0.1:{}", master.port()).parse().unwrap();
    TcpProxy::start(addr).unwrap()
}

async fn exists(master: &RedisServer, key: &str) -> bool {
    redis::cmd("EXISTS")
        .arg(key)
        .query_async::<bool>(&mut inspector(master).await)
        .await
        .unwrap()
}

/// Several clients (as if processes) take one key in turns while two of five masters are
/// down: every grant is exclusive on the recorded history, tokens increase, and every
/// acquisition gets through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_two_of_five_masters_down_locks_stay_exclusive_and_make_progress() {
    let mut masters = masters(5);
    let clients = [redlock(&masters).await, redlock(&masters).await];
    for down in &mut masters[3..] {
        down.kill().unwrap();
    }
    let sections = Arc::new(Mutex::new(Vec::new()));
    let mut workers = Vec::new();
    for (process, client) in clients.iter().enumerate() {
        for task in 0..3 {
            let (client, sections) = (client.clone(), sections.clone());
            workers.push(tokio::spawn(async move {
                for _ in 0..15 {
                    let guard = client
                        .lock("exclusive")
                        .ttl_ms(10_000)
                        .wait_ms(30_000)
                        .sleep_ms(20)
                        .acquire()
                        .await
                        .expect("a majority is up: the lock is granted");
                    let body = Duration::from_millis(1);
                    record_section(&sections, process as u32, task, &guard, body).await;
                    guard.release().await.expect("released on the majority");
                }
            }));
        }
    }
    for worker in workers {
        worker.await.unwrap();
    }
    let sections = sections.lock().unwrap();
    assert_eq!(sections.len(), 2 * 3 * 15, "every acquisition got through");
    let report = history::check(&sections);
    assert!(report.violations.is_empty(), "{:?}", report.violations);
}

/// `min_replicas` on masters without replicas: every master answers, and every grant is
/// taken back for want of replicas. The error says so, not that the masters did not answer.
#[tokio::test]
async fn min_replicas_on_masters_without_replicas_names_the_replicas() {
    let masters = masters(3);
    let client = redlock(&masters).await;
    let refused = client
        .lock("replicated")
        .min_replicas(1)
        .give_up()
        .acquire()
        .await;
    let Err(error @ LockError::Backend { .. }) = refused else {
        panic!("expected a backend failure, got {refused:?}");
    };
    let message = with_sources(&error);
    assert!(
        message.contains("3 of 3 masters failed") && message.contains("replicas"),
        "{message}"
    );
    assert!(!message.contains("answered"), "{message}");
}

/// With three of five masters down no majority can grant: the attempt fails as a backend
/// failure (the lock's state is unknown, which `NotAcquired` would misstate), and what the
/// two survivors granted is taken back.
#[tokio::test]
async fn with_three_of_five_masters_down_acquiring_fails_and_leaves_nothing() {
    let mut masters = masters(5);
    let client = redlock(&masters).await;
    for down in &mut masters[2..] {
        down.kill().unwrap();
    }
    match client.lock("outage").give_up().acquire().await {
        Err(error @ LockError::Backend { .. }) => {
            let message = error.to_string();
            assert!(
                message.contains("3 of 5 masters failed, and a majority (3) must succeed"),
                "{message}"
            );
        }
        other => panic!("expected a backend failure, got {other:?}"),
    }
    for survivor in &masters[..2] {
        assert!(
            !crate::support::granted_on(survivor, "lock:{outage}:v2").await,
            "the survivors' grants were taken back"
        );
    }
}

/// The greatest token a majority granted is written back to the others before it is
/// returned, so a later majority without the master that gave it still grants a greater one.
/// Master 0's counter is set far ahead (as a master whose clock runs fast would leave it).
#[tokio::test]
async fn a_later_majority_without_the_master_of_the_greatest_token_grants_a_greater_one() {
    let mut masters = masters(3);
    let client = redlock(&masters).await;
    let ahead: u64 = 9_000_000_000_000_000;
    // A tombstone: a release there left the lock's last token.
    let _: () = redis::cmd("SET")
        .arg("lock:{fenced}:v2")
        .arg(format!("r:{ahead}:{ahead}:0:"))
        .arg("PX")
        .arg(60_000)
        .query_async(&mut inspector(&masters[0]).await)
        .await
        .unwrap();
    let first = client.lock("fenced").give_up().acquire().await.unwrap();
    assert_eq!(
        first.token(),
        ahead + 1,
        "the greatest grant's token is taken"
    );
    first.release().await.unwrap();
    masters[0].kill().unwrap();
    let second = client.lock("fenced").give_up().acquire().await.unwrap();
    assert!(
        second.token() > ahead + 1,
        "token {} after {}: the write-back was skipped",
        second.token(),
        ahead + 1
    );
    second.release().await.unwrap();
}

/// A Redlock master's mutex tokens follow its clients' clocks, and a lease that expires leaves
/// no tombstone: each master keeps the grant's token in the lock's fencing counter for a
/// minute past the server time it stands for, so that a later client whose clock runs behind
/// still gets a greater token.
#[tokio::test]
async fn redlock_mutex_grants_keep_their_token_in_each_masters_counter() {
    let masters = masters(3);
    let client = redlock(&masters).await;
    let guard = client
        .lock("counted")
        .ttl_ms(1_000)
        .acquire()
        .await
        .unwrap();
    for master in &masters {
        let mut redis = inspector(master).await;
        let counter: Option<u64> = redis::cmd("GET")
            .arg("lock:{counted}:v2:fence")
            .query_async(&mut redis)
            .await
            .unwrap();
        assert_eq!(counter, Some(guard.token()), "each master counts the grant");
        let kept: i64 = redis::cmd("PTTL")
            .arg("lock:{counted}:v2:fence")
            .query_async(&mut redis)
            .await
            .unwrap();
        assert!(kept > 55_000, "for about a minute: {kept} ms");
    }
    guard.release().await.unwrap();
}

/// Redlock's known hole: a master restarted without its data while a lock is held forgets
/// the grant, and a second client wins a majority with it. Both hold the lock at once; the
/// fencing token tells them apart: the second's is greater (tokens follow the server clock
/// also after a restart, and the masters here share one clock), so a store that keeps the
/// greatest token it saw refuses the stale holder's write. With a master whose clock runs
/// ahead by more than the time between the two grants, the order would invert (the README
/// says what to do against that).
#[tokio::test]
async fn a_master_restarted_without_its_data_grants_twice_and_fencing_refuses_the_stale_writer() {
    let mut masters = masters(3);
    let (first_client, second_client) = (redlock(&masters).await, redlock(&masters).await);
    masters[2].kill().unwrap();
    let first = first_client.lock("hole").acquire().await.unwrap();
    masters[2].restart().unwrap();
    masters[1].restart().unwrap();
    let second = second_client
        .lock("hole")
        .give_up()
        .acquire()
        .await
        .expect("the restarted masters forgot the first grant: a second majority");
    assert!(
        !first.is_lost(),
        "the first holder still counts on its lease"
    );
    assert!(
        second.token() > first.token(),
        "the later grant's token is greater"
    );
    let store = FencedStore::default();
    assert!(store.write(second.token()), "the current holder writes");
    assert!(!store.write(first.token()), "the stale holder is refused");
    second.release().await.unwrap();
    drop(first);
}

/// Masters whose counters agree grant the client's one proposal, so an uncontended
/// acquisition needs no write-back: one script call per master to acquire, one to release.
#[tokio::test]
async fn an_uncontended_acquisition_costs_one_script_call_per_master() {
    let masters = masters(3);
    let client = redlock(&masters).await;
    crate::support::lock_once(&client, "steady").await;
    let mut probe = inspector(&masters[1]).await;
    let before = script_calls(&mut probe).await;
    for _ in 0..10 {
        crate::support::lock_once(&client, "steady").await;
    }
    assert_eq!(
        script_calls(&mut probe).await - before,
        20,
        "no write-back was needed"
    );
}

/// A grant on a minority of masters (one was free while the key was held on the others) is
/// taken back silently: announcing it as a release would wake the waiter into another
/// attempt at once, in a loop, until the holder released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_does_not_spin_while_one_master_is_free() {
    let mut masters = masters(3);
    let (holding, waiting) = (redlock(&masters).await, redlock(&masters).await);
    masters[2].kill().unwrap();
    let holder = holding.lock("spin").acquire().await.unwrap();
    masters[2].restart().unwrap();
    let mut probe = inspector(&masters[0]).await;
    let before = script_calls(&mut probe).await;
    let waited = waiting
        .lock("spin")
        .sleep_ms(200)
        .wait_ms(1_000)
        .acquire()
        .await;
    assert!(
        matches!(waited, Err(LockError::NotAcquired { .. })),
        "{waited:?}"
    );
    let attempts = script_calls(&mut probe).await - before;
    assert!(attempts < 40, "the waiter spun: {attempts} attempts in 1 s");
    holder.release().await.unwrap();
}

/// One master cut off (it keeps its data) costs each call at most the node timeout: a lease
/// whose grant the other two carry is renewed on, never lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_off_minority_master_does_not_lose_a_lease() {
    let masters = masters(3);
    let cut = proxy(&masters[2]);
    let client = redlock_on(vec![masters[0].url(), masters[1].url(), cut.url()]).await;
    let guard = client.lock("cut").ttl_ms(3_000).acquire().await.unwrap();
    cut.freeze();
    let lost = tokio::time::timeout(Duration::from_secs(4), guard.lost()).await;
    assert!(lost.is_err(), "two of three masters answer, yet: {lost:?}");
    let other = client.lock("cut:other").give_up().acquire().await;
    other.expect("a majority answers").release().await.unwrap();
    guard.release().await.expect("released on the majority");
}

/// Renewal that cannot tell (a master carrying the grant does not answer, and the others
/// did not renew it) tries again instead of calling the lease lost to another owner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewal_undecided_by_an_unanswering_master_is_not_a_loss_to_another_owner() {
    let mut masters = masters(3);
    let cut = proxy(&masters[1]);
    let client = redlock_on(vec![masters[0].url(), cut.url(), masters[2].url()]).await;
    masters[2].kill().unwrap();
    let guard = client
        .lock("undecided")
        .ttl_ms(3_000)
        .acquire()
        .await
        .unwrap();
    masters[2].restart().unwrap();
    cut.freeze();
    let lost = tokio::time::timeout(Duration::from_secs(5), guard.lost()).await;
    match lost {
        Ok(LockError::Lost { cause, .. }) => assert_ne!(
            cause,
            fencelock::LossCause::NotOwner,
            "a majority may still hold it: unconfirmed, not taken"
        ),
        other => panic!("a lease no majority confirms is lost: {other:?}"),
    }
}

/// Foreign data in the key on one master makes that master unable to grant, not the key
/// unusable: a majority still can.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_data_on_a_minority_master_does_not_fail_waiters() {
    let masters = masters(3);
    let _: () = redis::cmd("SET")
        .arg("lock:{foreign}:v2")
        .arg("not a lock")
        .query_async(&mut inspector(&masters[2]).await)
        .await
        .unwrap();
    let (holding, waiting) = (redlock(&masters).await, redlock(&masters).await);
    let holder = holding.lock("foreign").acquire().await.unwrap();
    let mut probe = inspector(&masters[0]).await;
    let before = script_calls(&mut probe).await;
    let waiter =
        tokio::spawn(async move { waiting.lock("foreign").wait_ms(5_000).acquire().await });
    let attempted = crate::support::eventually(Duration::from_secs(5), || {
        let mut probe = probe.clone();
        async move { script_calls(&mut probe).await > before }
    })
    .await;
    assert!(attempted, "the waiter attempts while the key is held");
    holder.release().await.unwrap();
    let waited = waiter.await.unwrap();
    waited
        .expect("granted by the majority")
        .release()
        .await
        .unwrap();
}

/// A permit or shard is held only where a majority granted that same one. Masters 0 and 1
/// each have one of two slots taken by a foreign owner (slot 0 and slot 1), master 2 both:
/// masters 0 and 1 grant the request, a majority by count, but different slots, so it holds
/// none and both grants are given back. With master 2 free again, whichever slot the attempt
/// starts at, master 2 and one other agree, and the third's grant of the other slot is given
/// back; master 2's counter is far ahead, so the grants agree on its token only after the
/// write-back.
#[tokio::test]
async fn a_permit_or_shard_is_held_where_a_majority_granted_that_one_or_not_at_all() {
    let masters = masters(3);
    let client = redlock(&masters).await;
    let kinds = [
        LockKind::Segmented { shards: 2 },
        LockKind::Semaphore { permits: 2 },
    ];
    for kind in kinds {
        let key = format!("agree:{}", kind.name());
        let redis_key = format!("lock:{{{key}}}:v2");
        hold_slots(&masters[0], &key, kind, &[0]).await;
        hold_slots(&masters[1], &key, kind, &[1]).await;
        let full = hold_slots(&masters[2], &key, kind, &[0, 1]).await;
        let refused = client.request(&key, kind).give_up().acquire().await;
        assert!(
            matches!(refused, Err(LockError::NotAcquired { .. })),
            "{}: two masters granted different slots, no majority: {refused:?}",
            kind.name()
        );
        assert_eq!(
            requester_grants(&masters, &redis_key).await,
            [None, None, None],
            "{}: the grants of no majority were given back",
            kind.name()
        );
        let (backend, held) = full;
        for lease in &held {
            backend.release(lease, Duration::ZERO).await.unwrap();
        }
        let ahead: u64 = 9_000_000_000_000_000;
        let _: () = redis::cmd("SET")
            .arg(format!("{redis_key}:fence"))
            .arg(ahead)
            .arg("PX")
            .arg(60_000)
            .query_async(&mut inspector(&masters[2]).await)
            .await
            .unwrap();
        let guard = client.request(&key, kind).give_up().acquire().await;
        let guard = guard.unwrap_or_else(|e| panic!("master 2 and one other agree: {e}"));
        assert_eq!(guard.token(), ahead + 1, "master 2's token is chosen");
        let grants = requester_grants(&masters, &redis_key).await;
        let (slot, _) = grants[2].expect("master 2 is free: it grants");
        if let LockKind::Segmented { .. } = kind {
            assert_eq!(guard.shard(), Some(slot), "the shard held is named");
        }
        // Master 0 holds slot 0 and grants slot 1; master 1 the other way round.
        let mut expected = [None; 3];
        expected[1 - slot as usize] = Some((slot, guard.token()));
        expected[2] = Some((slot, guard.token()));
        assert_eq!(
            grants,
            expected,
            "{}: the majority of slot {slot} carries the token; the other slot's grant was \
             given back",
            kind.name()
        );
        guard.release().await.unwrap();
    }
}

/// Redlock's masters never hand a shared key over (each keeps a line of its own, and could
/// hand it to another waiter): a reader's release leaves the key free on every master, where
/// the waiting writer keeps its place, until the writer attempts again.
#[tokio::test]
async fn a_shared_release_hands_nothing_over_on_redlock() {
    let masters = masters(3);
    let urls: Vec<String> = masters.iter().map(RedisServer::url).collect();
    let redlock = RedlockBackend::connect(urls, RedisSettings::default())
        .await
        .unwrap();
    let lease = |owner: &str, kind| Lease {
        key: "handless".to_owned(),
        owner: owner.to_owned(),
        ttl: Duration::from_secs(60),
        replicas: 0,
        kind,
    };
    let (reader, writer) = (
        lease("reader", LockKind::Read),
        lease("writer", LockKind::Write),
    );
    let place = Turn::InLine(Duration::from_secs(60));
    let read = redlock.acquire(&reader, Turn::Once).await.unwrap();
    assert!(matches!(read, Acquire::Granted { .. }), "{read:?}");
    let waiting = redlock.acquire(&writer, place).await.unwrap();
    assert!(matches!(waiting, Acquire::Held { .. }), "{waiting:?}");
    let released = redlock.release(&reader, Duration::ZERO).await.unwrap();
    assert_eq!(released, Release::Released);
    for master in &masters {
        assert!(
            !exists(master, "lock:{handless}:v2").await,
            "the release handed the key over on {}",
            master.url()
        );
        let line: u64 = redis::cmd("LLEN")
            .arg("lock:{handless}:v2:queue")
            .query_async(&mut inspector(master).await)
            .await
            .unwrap();
        assert_eq!(line, 1, "the writer keeps its place");
    }
    let written = redlock.acquire(&writer, place).await.unwrap();
    assert!(matches!(written, Acquire::Granted { .. }), "{written:?}");
    redlock.release(&writer, Duration::ZERO).await.unwrap();
}

/// Has foreign owners hold the slots `kept` of `kind` (a semaphore or a segmented lock) of
/// `key` on `master` alone (through a backend of its own, as a client of that server alone
/// would): it takes every slot, then releases the others. Returns the backend and the
/// leases held.
async fn hold_slots(
    master: &RedisServer,
    key: &str,
    kind: LockKind,
    kept: &[u32],
) -> (RedisBackend, Vec<Lease>) {
    let backend = RedisBackend::connect(&master.url(), RedisSettings::default())
        .await
        .unwrap();
    let count = kind.count().expect("a kind with slots");
    let mut held = Vec::new();
    for n in 0..count {
        let lease = Lease {
            key: key.to_owned(),
            owner: format!("foreign-{n}"),
            ttl: Duration::from_secs(60),
            replicas: 0,
            kind,
        };
        let granted = backend.acquire(&lease, Turn::Once).await.unwrap();
        assert!(matches!(granted, Acquire::Granted { .. }), "{granted:?}");
        held.push(lease);
    }
    let redis_key = format!("lock:{{{key}}}:v2");
    let slots = grants_on(master, &redis_key).await;
    let mut kept_leases = Vec::new();
    for lease in held {
        let (_, slot, _) = slots
            .iter()
            .find(|(owner, ..)| *owner == lease.owner)
            .expect("every slot is held");
        if kept.contains(slot) {
            kept_leases.push(lease);
        } else {
            backend.release(&lease, Duration::ZERO).await.unwrap();
        }
    }
    (backend, kept_leases)
}

/// The grants in the shared key's hash on `master` (its `o:<owner>` fields): owner, slot and
/// fencing token each.
async fn grants_on(master: &RedisServer, redis_key: &str) -> Vec<(String, u32, u64)> {
    let fields: Vec<(String, String)> = redis::cmd("HGETALL")
        .arg(redis_key)
        .query_async(&mut inspector(master).await)
        .await
        .unwrap();
    fields
        .into_iter()
        .filter_map(|(field, grant)| {
            let owner = field.strip_prefix("o:")?.to_owned();
            let parts: Vec<&str> = grant.split(' ').collect();
            Some((owner, parts[2].parse().unwrap(), parts[1].parse().unwrap()))
        })
        .collect()
}

/// The slot and token of the grant the Redlock client holds on each master (the one of no
/// foreign owner), if any.
async fn requester_grants(masters: &[RedisServer], redis_key: &str) -> Vec<Option<(u32, u64)>> {
    let mut found = Vec::new();
    for master in masters {
        let grants = grants_on(master, redis_key).await;
        let mut mine = grants
            .into_iter()
            .filter(|(owner, ..)| !owner.starts_with("foreign-"));
        found.push(mine.next().map(|(_, slot, token)| (slot, token)));
        assert!(
            mine.next().is_none(),
            "one grant of the requester per master"
        );
    }
    found
}

/// A resource that keeps the greatest fencing token it accepted and refuses lower ones.
#[derive(Default)]
struct FencedStore {
    greatest: Mutex<u64>,
}

impl FencedStore {
    fn write(&self, token: u64) -> bool {
        let mut greatest = self.greatest.lock().unwrap();
        let accepted = token > *greatest;
        if accepted {
            *greatest = token;
        }
        accepted
    }
}

#[tokio::test]
async fn redlock_refuses_a_master_given_twice_and_an_empty_list() {
    let master = redis_server();
    let twice = LockClient::redlock([master.url(), master.url()]).await;
    match twice {
        Err(LockError::InvalidConfig { reason, .. }) => {
            assert!(reason.contains("given twice"), "{reason}")
        }
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
    let none: [&str; 0] = [];
    assert!(matches!(
        LockClient::redlock(none).await,
        Err(LockError::InvalidConfig { .. })
    ));
}

/// Review finding: a master whose reply was lost keeps the requester's grant of another shard
/// under the same token (the masters' counters agreed on the client's proposal). Renewal must
/// extend the shard held only: counted for it, that stray grant kept a lease alive on a
/// minority, while a second client took the same shard on a majority.
///
/// Master C has shard 0 taken by another owner; H gets shard 0 from A and B, and shard 1 from
/// C, whose reply is lost. With A then cut off from H, H's shard 0 lives on B alone: H must
/// learn of its loss.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stray_grant_of_another_shard_does_not_keep_a_lease_alive() {
    let masters: Vec<RedisServer> = (0..3).map(|_| redis_server()).collect();
    let (a, b, c) = (&masters[0], &masters[1], &masters[2]);
    let (proxy_a, proxy_c) = (proxy(a), proxy(c));
    let h = LockClient::redlock([proxy_a.url(), b.url(), proxy_c.url()])
        .await
        .unwrap();
    let on_c = LockClient::connect(&c.url()).await.unwrap();
    let mut other = None;
    for _ in 0..100 {
        let guard = on_c.segmented("stock", 2).acquire().await.unwrap();
        if guard.shard() == Some(0) {
            other = Some(guard);
            break;
        }
        guard.release().await.unwrap();
    }
    let other = other.expect("shard 0 taken on C alone");
    let mut held = None;
    for _ in 0..100 {
        proxy_c.hold_next(Direction::ToClient);
        let request = h.segmented("stock", 2).ttl_ms(3_000).give_up();
        let guard = request.acquire().await.unwrap();
        // C grants the proposed token only while its own counter is below it: on a loaded
        // machine an earlier grant on C may have drawn a later one, and C's stray grant then
        // has a token of its own, which renewal rightly ignores. Tried again until it agrees.
        let on_c = grants_on(c, "lock:{stock}:v2").await;
        let stray = on_c
            .iter()
            .any(|&(_, slot, token)| slot == 1 && token == guard.token());
        if guard.shard() == Some(0) && stray {
            held = Some(guard);
            break;
        }
        guard.release().await.unwrap();
    }
    let held =
        held.expect("H holds shard 0 on A and B, and C its grant of shard 1 under H's token");
    other.release().await.unwrap();
    proxy_a.freeze();
    let lost = tokio::time::timeout(Duration::from_secs(15), held.lost()).await;
    assert!(
        lost.is_ok(),
        "shard 0 lives on B alone, yet H's lease stays held (C's grant of shard 1 counted)"
    );
}

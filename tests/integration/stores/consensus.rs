//! The ZooKeeper and etcd backends on private servers (Debian's `zookeeper` and
//! `etcd-server` packages, run as child processes; the conformance suite is in `tests/conformance.rs`): a client cut off
//! for less and for more than its session, a leader killed while a lock is held, ZooKeeper's
//! one watch per waiter, readers, writers and permits on recorded histories, and the errors
//! a misconfigured client gets.

use std::time::Duration;

use fencelock::admin::ReleaseEvent;
use fencelock::testing::{EtcdCluster, TcpProxy, ZooKeeperEnsemble};
use fencelock::{LockClient, LockError, LossCause};

use crate::support::{eventually, expect_lost};

/// A consensus store of one or three members.
enum Store {
    ZooKeeper(ZooKeeperEnsemble),
    Etcd(EtcdCluster),
}

const KINDS: [&str; 2] = ["zookeeper", "etcd"];

impl Store {
    fn start(kind: &str, members: usize) -> Store {
        match kind {
            "zookeeper" => Store::ZooKeeper(
                ZooKeeperEnsemble::start(members)
                    .expect("ZooKeeper starts (apt-get install zookeeper)"),
            ),
            _ => Store::Etcd(
                EtcdCluster::start(members).expect("etcd starts (apt-get install etcd-server)"),
            ),
        }
    }

    /// The first member's address, for a proxy in front of it.
    fn first_member(&self) -> std::net::SocketAddr {
        let port = match self {
            Store::ZooKeeper(ensemble) => ensemble.client_port(0),
            Store::Etcd(cluster) => {
                let endpoint = &cluster.endpoints()[0];
                let port = endpoint.rsplit(':').next().expect("host:port");
                port.parse().expect("a port")
            }
        };
        ([127, 0, 0, 1], port).into()
    }

    /// A client of every member, or of `via` alone, whose session lasts `session`.
    async fn client(&self, via: Option<&TcpProxy>, session: Duration) -> LockClient {
        self.client_answering(via, session, Duration::from_secs(5))
            .await
    }

    /// The same, whose etcd calls wait `response` at most for their answer.
    async fn client_answering(
        &self,
        via: Option<&TcpProxy>,
        session: Duration,
        response: Duration,
    ) -> LockClient {
        let connected = match self {
            Store::ZooKeeper(ensemble) => {
                let at = via.map_or_else(|| ensemble.connect_string(), |p| p.addr().to_string());
                let builder = LockClient::zookeeper_builder(&at);
                builder.session_timeout(session).connect().await
            }
            Store::Etcd(cluster) => {
                let at = via.map_or_else(
                    || cluster.endpoints(),
                    |p| vec![format!("http://{}", p.addr())],
                );
                let builder = LockClient::etcd_builder(&at).response_timeout(response);
                builder.lease_ttl(session).connect().await
            }
        };
        connected.expect("connects")
    }

    /// Kills the leader and waits until the others serve again.
    fn kill_leader(&mut self) {
        match self {
            Store::ZooKeeper(ensemble) => {
                let leader = ensemble.leader().expect("a leader");
                ensemble.kill(leader).expect("killed");
                ensemble.wait_serving().expect("a new leader");
            }
            Store::Etcd(cluster) => {
                let leader = cluster.leader().expect("a leader");
                cluster.kill(leader).expect("killed");
                cluster.wait_healthy().expect("a new leader");
            }
        }
    }
}

const SESSION: Duration = Duration::from_secs(2);

/// Waits (at most 10 s) until `client` has renewed a lease once more.
async fn renewed_again(client: &LockClient) {
    let before = client.renewal_stats().leases_extended;
    let renewed = async {
        while client.renewal_stats().leases_extended == before {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), renewed)
        .await
        .expect("renewal goes on");
}

/// A cut shorter than the session is a pause, not a loss (Curator's SUSPENDED); a cut past
/// it loses the lock (LOST): the holder stops counting its lease before the store can end
/// its session, and another client takes the key once it has.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_cut_keeps_the_lock_and_a_cut_past_the_session_loses_it() {
    for kind in KINDS {
        let store = Store::start(kind, 1);
        let proxy = TcpProxy::start(store.first_member()).expect("proxy");
        let cut_off = store.client(Some(&proxy), SESSION).await;
        let other = store.client(None, SESSION).await;
        let key = format!("{kind}:cut");
        let holder = held(&cut_off, &key).await;
        proxy.freeze();
        tokio::time::sleep(SESSION / 4).await;
        proxy.thaw();
        renewed_again(&cut_off).await;
        assert!(!holder.is_lost(), "{kind}: a short cut keeps the lock");
        let refused = other.lock(&key).give_up().acquire().await;
        assert!(
            matches!(refused, Err(LockError::NotAcquired { .. })),
            "{kind}: {refused:?}"
        );

        proxy.freeze();
        let taken = other.lock(&key).wait_ms(30_000).acquire();
        let taken = taken.await.expect("the key is free once the session ended");
        assert!(
            holder.is_lost(),
            "{kind}: the holder stopped before the key was taken"
        );
        let cause = tokio::time::timeout(Duration::from_secs(1), holder.lost()).await;
        match cause.expect("lost") {
            LockError::Lost { cause, .. } => assert_eq!(cause, LossCause::Unconfirmed, "{kind}"),
            other => panic!("{kind}: {other:?}"),
        }
        assert!(taken.token() > holder.token(), "{kind}: a newer token");
        proxy.thaw();
        expect_lost(holder.release().await, LossCause::Unconfirmed);
        taken.release().await.expect("released");
        // The cut-off client works again, on a new session.
        let again = cut_off.lock(&key).wait_ms(30_000).acquire().await;
        again
            .expect("a new session takes locks")
            .release()
            .await
            .expect("released");
    }
}

/// Consensus keeps exclusion through the loss of the leader: the holder's lock outlives the
/// election (its renewals resume) and nobody else gets it meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_killed_while_a_lock_is_held_keeps_exclusion() {
    for kind in KINDS {
        let mut store = Store::start(kind, 3);
        let session = Duration::from_secs(10);
        let (holding, other) = (
            store.client(None, session).await,
            store.client(None, session).await,
        );
        let key = format!("{kind}:leader");
        let holder = held(&holding, &key).await;
        store.kill_leader();
        renewed_again(&holding).await;
        assert!(!holder.is_lost(), "{kind}: the lock outlives the election");
        // The other client may still be finding the members that are left: asked until it
        // gets an answer.
        let mut refused = other.lock(&key).give_up().acquire().await;
        for _ in 0..100 {
            if !matches!(refused, Err(LockError::Backend { .. })) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            refused = other.lock(&key).give_up().acquire().await;
        }
        assert!(
            matches!(refused, Err(LockError::NotAcquired { .. })),
            "{kind}: {refused:?}"
        );
        let token = holder.token();
        let waiting = other.lock(&key).wait_ms(30_000).acquire();
        let (next, released) = tokio::join!(waiting, holder.release());
        released.expect("still the holder's");
        let next = next.expect("handed to the waiter");
        assert!(next.token() > token, "{kind}");
        next.release().await.expect("released");
    }
}

/// ZooKeeper's recipe without the herd: each waiter watches the entry right ahead of it, so
/// a release wakes one waiter, not all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_zookeeper_waiter_watches_only_the_entry_ahead() {
    let Store::ZooKeeper(ensemble) = Store::start("zookeeper", 1) else {
        unreachable!()
    };
    let store = Store::ZooKeeper(ensemble);
    let holder_client = store.client(None, SESSION).await;
    let holder = holder_client.lock("herd").acquire().await.expect("free");
    let mut waiters = Vec::new();
    let mut clients = Vec::new();
    for _ in 0..4 {
        let client = store.client(None, SESSION).await;
        waiters.push(tokio::spawn({
            let client = client.clone();
            // Released by its own task: the line's order need not be the order of spawning.
            async move {
                let guard = client.lock("herd").wait_ms(30_000).acquire().await?;
                guard.release().await
            }
        }));
        clients.push(client);
    }
    let Store::ZooKeeper(ensemble) = &store else {
        unreachable!()
    };
    let watched = async {
        loop {
            let watches = ensemble.watches(0).expect("wchp answers");
            let entries: Vec<usize> = watches
                .iter()
                .filter(|(path, _)| path.starts_with("/fencelock/herd/"))
                .map(|(_, sessions)| *sessions)
                .collect();
            if entries.len() == 4 {
                return entries;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let entries = tokio::time::timeout(Duration::from_secs(10), watched).await;
    let entries = entries.expect("the four waiters watch");
    assert_eq!(
        entries,
        [1, 1, 1, 1],
        "one watch per entry ahead of a waiter"
    );
    holder.release().await.expect("released");
    for waiter in waiters {
        let turn = waiter.await.expect("joined");
        turn.expect("each waiter gets its turn, and releases");
    }
}

/// Data fencelock did not write, in a lock's line (another program's, a node created by
/// hand): `KeyInUse` naming it, and the request leaves nothing behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_data_in_a_line_is_named_and_nothing_is_left_behind() {
    for kind in KINDS {
        let store = Store::start(kind, 1);
        let intruder = match &store {
            Store::ZooKeeper(ensemble) => {
                let path = "/fencelock/foreign/intruder";
                ensemble
                    .create_node(path, b"not a lock")
                    .await
                    .expect("created");
                path
            }
            Store::Etcd(cluster) => {
                let key = "fencelock/foreign/intruder";
                cluster.put(key, b"not a lock").await.expect("put");
                key
            }
        };
        let client = store.client(None, SESSION).await;
        match client.lock("foreign").give_up().acquire().await {
            Err(LockError::KeyInUse { reason, .. }) => {
                assert!(reason.contains(intruder), "{kind}: {reason}")
            }
            other => panic!("{kind}: expected KeyInUse, got {other:?}"),
        }
        let cleaned = async {
            loop {
                let state = client.admin().inspect("foreign").await.expect("inspects");
                if state.queue.is_empty() {
                    return state;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        let state = tokio::time::timeout(Duration::from_secs(10), cleaned).await;
        let state = state.expect("the request's entry is deleted");
        assert!(
            matches!(state.holding, fencelock::admin::Holding::Foreign { .. }),
            "{kind}: {state:?}"
        );
    }
}

/// Data fencelock did not write where a key's exhausted shards are kept: a segmented lock of
/// that key gets `KeyInUse` saying so, and leaves no entry in line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_data_in_the_exhausted_shards_is_named() {
    use fencelock::LockKind;
    for kind in KINDS {
        let store = Store::start(kind, 1);
        match &store {
            Store::ZooKeeper(ensemble) => ensemble
                .create_node("/fencelock/stock%exhausted", b"not marks")
                .await
                .expect("created"),
            Store::Etcd(cluster) => cluster
                .put("fencelock/stock%exhausted", b"not marks")
                .await
                .expect("put"),
        }
        let client = store.client(None, SESSION).await;
        let shards = LockKind::Segmented { shards: 4 };
        match client.request("stock", shards).give_up().acquire().await {
            Err(LockError::KeyInUse { reason, .. }) => {
                assert!(reason.contains("exhausted shards"), "{kind}: {reason}")
            }
            other => panic!("{kind}: expected KeyInUse, got {other:?}"),
        }
        let state = client.admin().inspect("stock").await.expect("inspects");
        assert_eq!(state.holding, fencelock::admin::Holding::Free, "{kind}");
        assert!(state.queue.is_empty(), "{kind}: {state:?}");
    }
}

/// A forced release of the only holder announces a hand-off only to a waiter: data that
/// another program put behind the holder in the line is no waiter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forced_release_hands_the_key_to_no_foreign_entry() {
    for kind in KINDS {
        let store = Store::start(kind, 1);
        let client = store.client(None, SESSION).await;
        let guard = client.lock("handed").acquire().await.expect("held");
        match &store {
            Store::ZooKeeper(ensemble) => ensemble
                .create_node("/fencelock/handed/intruder", b"not a lock")
                .await
                .expect("created"),
            Store::Etcd(cluster) => cluster
                .put("fencelock/handed/intruder", b"not a lock")
                .await
                .expect("put"),
        }
        let grant = grant_of(&client, "handed").await;
        let admin = client.admin();
        let forced = admin
            .force_release_of("handed", grant)
            .await
            .expect("answers");
        assert!(forced.released, "{kind}: {forced:?}");
        assert!(
            matches!(forced.announced, Some(ReleaseEvent::Released { .. })),
            "{kind}: {forced:?}"
        );
        drop(guard);
    }
}

/// The grant that holds `key` now, as an inspection shows it.
async fn grant_of(client: &LockClient, key: &str) -> fencelock::admin::Grant {
    let state = client.admin().inspect(key).await.expect("inspects");
    let grant = state.holding.grant();
    grant.unwrap_or_else(|| panic!("one grant holds {key}: {state:?}"))
}

fn backend_message(result: Result<LockClient, LockError>) -> String {
    match result {
        Err(error @ (LockError::Backend { .. } | LockError::InvalidConfig { .. })) => {
            error.to_string()
        }
        other => panic!("expected an error naming the cause, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_misconfigured_client_gets_an_error_that_names_the_cause() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("port");
    let port = closed.local_addr().expect("addr").port();
    drop(closed);
    let zookeeper = LockClient::zookeeper_builder(&format!("127.0.0.1:{port}"))
        .connect_timeout(Duration::from_secs(1))
        .connect()
        .await;
    let message = backend_message(zookeeper);
    assert!(
        message.contains("cannot connect to ZooKeeper") && message.contains("connect string"),
        "{message}"
    );
    // Endpoints as any iterable, as Redlock's URLs.
    let etcd = LockClient::etcd_builder(vec![format!("http://127.0.0.1:{port}")])
        .connect_timeout(Duration::from_secs(1))
        .connect()
        .await;
    let message = backend_message(etcd);
    assert!(
        message.contains("cannot connect to etcd") && message.contains("endpoints"),
        "{message}"
    );
    let root = LockClient::zookeeper_builder("127.0.0.1:2181")
        .root("locks/")
        .connect()
        .await;
    assert!(backend_message(root).contains("absolute path"));
    let prefix = LockClient::etcd_builder(["http://127.0.0.1:2379"])
        .prefix("locks/")
        .connect()
        .await;
    assert!(backend_message(prefix).contains("prefix"));
}

/// Connecting rides over an ensemble that is still starting (its port closed, then open but
/// not serving yet), within the connect timeout, as Curator's retry policy does. Before, it
/// failed at once (`NoHosts`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connecting_to_zookeeper_rides_over_an_ensemble_still_starting() {
    let Store::ZooKeeper(mut ensemble) = Store::start("zookeeper", 1) else {
        unreachable!("a ZooKeeper store");
    };
    ensemble.kill(0).unwrap();
    let connecting = tokio::spawn(
        LockClient::zookeeper_builder(&ensemble.connect_string())
            .connect_timeout(Duration::from_secs(60))
            .connect(),
    );
    let ensemble = tokio::task::spawn_blocking(move || {
        ensemble.restart(0).expect("the member serves again");
        ensemble
    })
    .await
    .unwrap();
    let client = connecting
        .await
        .unwrap()
        .expect("connected once the ensemble served");
    held(&client, "after-start").await.release().await.unwrap();
    drop(ensemble);
}

/// Takes the free `key` for 30 s, renewed.
async fn held(client: &LockClient, key: &str) -> fencelock::LockGuard {
    client
        .lock(key)
        .ttl_ms(30_000)
        .acquire()
        .await
        .expect("free")
}

/// Waits (at most 10 s) until `key`'s line shows `waiters` waiters whose entries say they
/// wait (a place of at most `place` left: a fresh entry says held, for its lease, until its
/// attempt finds the key taken).
async fn in_line(client: &LockClient, key: &str, waiters: usize, place: Duration) {
    let admin = client.admin();
    let shown = eventually(Duration::from_secs(10), || async {
        let state = admin.inspect(key).await;
        state.is_ok_and(|s| {
            let placed = s
                .queue
                .iter()
                .filter(|w| w.place_left.is_some_and(|l| l <= place));
            placed.count() == waiters
        })
    })
    .await;
    assert!(shown, "{waiters} waiter(s) in {key}'s line");
}

/// A waiter whose client is cut off while its request is cancelled (its cleanup gives up,
/// its own client's delete fails) leaves an entry nobody else would delete; once it stands at
/// the head for its place, the next client deletes it. Found by the review (2026-12-02): the
/// key stayed blocked for as long as the waiter's client lived.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_cancelled_during_a_cut_blocks_the_key_no_longer_than_its_place() {
    const LONG_SESSION: Duration = Duration::from_secs(10);
    for kind in KINDS {
        let store = Store::start(kind, 1);
        let proxy = TcpProxy::start(store.first_member()).expect("proxy");
        let answering = Duration::from_secs(1);
        let waiter_client = store
            .client_answering(Some(&proxy), LONG_SESSION, answering)
            .await;
        let (holder_client, other) = (
            store.client(None, LONG_SESSION).await,
            store.client(None, LONG_SESSION).await,
        );
        let key = format!("{kind}:stranded");
        let holder = held(&holder_client, &key).await;
        // A place of 3 s (3 × sleep_ms).
        let request = waiter_client
            .lock(&key)
            .ttl_ms(1_000)
            .sleep_ms(1_000)
            .wait_ms(60_000);
        let waiting = tokio::spawn(async move { request.acquire().await });
        in_line(&holder_client, &key, 1, Duration::from_secs(3)).await;
        proxy.freeze();
        waiting.abort();
        let _ = waiting.await;
        // The cut is the fault: it outlasts the cleanup's retries (a lease, 1 s) and the
        // place (3 s) with its client's failing delete (ZooKeeper notices a cut after 2/3 of
        // the session), within the session (10 s).
        let cut = if kind == "zookeeper" { 7 } else { 5 };
        tokio::time::sleep(Duration::from_secs(cut)).await;
        // What was sent into the cut is lost with it, not delivered late.
        proxy.sever();
        proxy.thaw();
        let back = eventually(Duration::from_secs(10), || async {
            waiter_client.admin().inspect(&key).await.is_ok()
        })
        .await;
        assert!(back, "{kind}: the waiter's client reaches the store again");
        holder.release().await.expect("released");
        let taken = other.lock(&key).wait_ms(12_000).acquire().await;
        let taken =
            taken.unwrap_or_else(|e| panic!("{kind}: blocked by the waiter that left: {e:?}"));
        taken.release().await.expect("released");
    }
}

/// A hand-off to a waiter that stopped attempting (a hung task) lasts no longer than its
/// place, not its whole lease. Found by the review (2026-12-02).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_off_to_a_waiter_that_stopped_attempting_lasts_no_longer_than_its_place() {
    for kind in KINDS {
        let store = Store::start(kind, 1);
        let session = Duration::from_secs(10);
        let (holder_client, waiter_client, other) = (
            store.client(None, session).await,
            store.client(None, session).await,
            store.client(None, session).await,
        );
        let key = format!("{kind}:hung-waiter");
        let holder = held(&holder_client, &key).await;
        // A place of 6 s (3 × sleep_ms) after each attempt; a lease of 30 s.
        let request = waiter_client
            .lock(&key)
            .ttl_ms(30_000)
            .sleep_ms(2_000)
            .wait_ms(120_000);
        let mut request = Box::pin(request.acquire());
        tokio::select! {
            done = &mut request => panic!("{kind}: the waiter did not wait: {done:?}"),
            () = in_line(&holder_client, &key, 1, Duration::from_secs(6)) => {}
        }
        // From here the request is not polled: its place ends within 6 s.
        holder.release().await.expect("released");
        let taken = other.lock(&key).wait_ms(15_000).acquire().await;
        let taken = taken.unwrap_or_else(|e| panic!("{kind}: held for the hung waiter: {e:?}"));
        taken.release().await.expect("released");
        drop(request);
    }
}

/// An etcd waiter behind an entry whose revision was compacted away watches it from now on
/// instead of reading the line again and again. Found by the review (2026-12-02): the
/// watch was cancelled at once, taken for a change, and made again in a loop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_etcd_waiter_behind_a_compacted_entry_keeps_watching() {
    let Store::Etcd(cluster) = Store::start("etcd", 1) else {
        unreachable!()
    };
    let store = Store::Etcd(cluster);
    let session = Duration::from_secs(10);
    let (holder_client, first_client, second_client) = (
        store.client(None, session).await,
        store.client(None, session).await,
        store.client(None, session).await,
    );
    let key = "etcd:compacted";
    let holder = held(&holder_client, key).await;
    let waiter = |client: &LockClient| {
        let request = client.lock(key).sleep_ms(500).wait_ms(60_000);
        tokio::spawn(async move { request.acquire().await })
    };
    let first = waiter(&first_client);
    in_line(&holder_client, key, 1, Duration::from_millis(1_500)).await;
    let second = waiter(&second_client);
    in_line(&holder_client, key, 2, Duration::from_millis(1_500)).await;
    let Store::Etcd(cluster) = &store else {
        unreachable!()
    };
    // Reads over 3 s, before and after compacting past the first waiter's entry: the
    // waiters' attempts (every 250 to 500 ms) either way, and a loop on top if it polls.
    let reads_over_3_s = || async {
        let before = cluster.range_reads(0).expect("metrics");
        tokio::time::sleep(Duration::from_secs(3)).await;
        cluster.range_reads(0).expect("metrics") - before
    };
    let quiet = reads_over_3_s().await;
    cluster.compact().await.expect("compacted");
    // The second waiter watches again by the end of its place (1.5 s) at the latest.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = reads_over_3_s().await;
    holder.release().await.expect("released");
    for waiter in [first, second] {
        let guard = tokio::time::timeout(Duration::from_secs(10), waiter).await;
        let guard = guard
            .expect("handed over")
            .expect("joined")
            .expect("granted");
        guard.release().await.expect("released");
    }
    assert!(quiet > 0, "the waiters' attempts were counted as reads");
    assert!(
        after * 2 <= quiet * 3,
        "reads in 3 s: {quiet} before, {after} after compaction"
    );
}

/// Seed 000's shared lock: readers on one client and writers on another share one key,
/// recorded: no writer's section overlaps another section, tokens order every pair with a
/// writer in it, and readers did hold the key together.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_share_and_writers_exclude_on_recorded_histories() {
    use fencelock::LockKind;
    use fencelock::testing::history::{check_read_write, most_inside};

    use crate::support::{guard_key, run_tasks};

    for kind in KINDS {
        let store = Store::start(kind, 1);
        let (reading, writing) = (
            store.client(None, SESSION).await,
            store.client(None, SESSION).await,
        );
        let body = Duration::from_millis(3);
        let key = format!("{kind}:catalog");
        let (readers, writers) = tokio::join!(
            run_tasks(&reading, &key, LockKind::Read, 6, 8, body, guard_key),
            run_tasks(&writing, &key, LockKind::Write, 2, 6, body, guard_key),
        );
        let report = check_read_write(&readers, &writers);
        assert_eq!(report.sections, 6 * 8 + 2 * 6, "{kind}");
        assert!(
            report.violations.is_empty(),
            "{kind}: {:#?}",
            report.violations
        );
        let overlapping = most_inside(&readers);
        assert!(
            overlapping >= 2,
            "{kind}: readers shared the key: at most {overlapping}"
        );
    }
}

/// Permits from two clients (two sessions) on one semaphore of 3: never more than 3 inside,
/// on the recorded history, and they shared it; three are held at once over both clients. A waiter watches the oldest entry only, so a
/// permit freed further back by the other client is found at its next attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permits_of_two_clients_never_exceed_the_count_on_recorded_histories() {
    use fencelock::LockKind;
    use fencelock::testing::history::{check_at_most, most_inside};

    use crate::support::{guard_key, run_tasks};

    const PERMITS: u32 = 3;
    for kind in KINDS {
        let store = Store::start(kind, 1);
        let (first, second) = (
            store.client(None, SESSION).await,
            store.client(None, SESSION).await,
        );
        let semaphore = LockKind::Semaphore { permits: PERMITS };
        let body = Duration::from_millis(5);
        let key = format!("{kind}:exports");
        let (mut sections, theirs) = tokio::join!(
            run_tasks(&first, &key, semaphore, 4, 6, body, guard_key),
            run_tasks(&second, &key, semaphore, 4, 6, body, guard_key),
        );
        sections.extend(theirs);
        let report = check_at_most(&sections, PERMITS as usize);
        assert_eq!(report.sections, 2 * 4 * 6, "{kind}");
        assert!(
            report.violations.is_empty(),
            "{kind}: {:#?}",
            report.violations
        );
        // How many got in together depends on the store's pace; that all may is checked at
        // once: three permits held over both clients, a fourth refused.
        let overlapping = most_inside(&sections);
        assert!(
            overlapping >= 2,
            "{kind}: the permits were shared: at most {overlapping}"
        );
        let permit = |client: &LockClient| client.request(&key, semaphore).give_up().acquire();
        let held = [
            permit(&first).await,
            permit(&first).await,
            permit(&second).await,
        ];
        let held: Vec<_> = held
            .into_iter()
            .map(|p| p.unwrap_or_else(|e| panic!("{kind}: {e}")))
            .collect();
        let fourth = permit(&second).await;
        assert!(
            fourth.is_err(),
            "{kind}: a fourth permit of three: {fourth:?}"
        );
        for guard in held {
            guard.release().await.unwrap();
        }
    }
}

/// Shards from two clients (two sessions) on one segmented lock of 3, recorded: each shard
/// held by one section at a time, never more than 3 inside, and every shard used, several
/// at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shards_of_two_clients_are_exclusive_on_recorded_histories() {
    use fencelock::LockKind;
    use fencelock::testing::history::{Section, check, check_at_most, most_inside};

    use crate::support::{run_tasks, shard_key};

    const SHARDS: u32 = 3;
    for kind in KINDS {
        let store = Store::start(kind, 1);
        let (first, second) = (
            store.client(None, SESSION).await,
            store.client(None, SESSION).await,
        );
        let shards = LockKind::Segmented { shards: SHARDS };
        let body = Duration::from_millis(5);
        let key = format!("{kind}:stock");
        let (mut sections, theirs) = tokio::join!(
            run_tasks(&first, &key, shards, 4, 6, body, shard_key),
            run_tasks(&second, &key, shards, 4, 6, body, shard_key),
        );
        sections.extend(theirs);
        let report = check(&sections);
        assert_eq!(report.sections, 2 * 4 * 6, "{kind}");
        assert!(
            report.violations.is_empty(),
            "{kind}: {:#?}",
            report.violations
        );
        assert_eq!(report.keys, SHARDS as usize, "{kind}: every shard was used");
        let whole: Vec<Section> = sections
            .iter()
            .map(|section| Section {
                key: key.clone(),
                ..section.clone()
            })
            .collect();
        let report = check_at_most(&whole, SHARDS as usize);
        assert!(
            report.violations.is_empty(),
            "{kind}: {:#?}",
            report.violations
        );
        let overlapping = most_inside(&whole);
        assert!(
            overlapping >= 2,
            "{kind}: shards were held together: at most {overlapping}"
        );
    }
}

/// A writer behind two readers, the first released and the second abandoned (its lease of
/// 1 s not renewed, its client alive): the writer's client takes the key once that lease
/// is over, not only when the first reader's would have been. Found by the review of the
/// read/write locks (2026-12-02): the writer woke for the first reader's lapse only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_behind_an_abandoned_reader_gets_the_key_when_its_lease_ends() {
    use fencelock::LockKind;
    for kind in KINDS {
        let store = Store::start(kind, 1);
        let session = Duration::from_secs(15);
        let (a, b, c) = (
            store.client(None, session).await,
            store.client(None, session).await,
            store.client(None, session).await,
        );
        let key = format!("{kind}:abandoned-reader");
        let read =
            |client: &LockClient, ttl_ms| client.request(&key, LockKind::Read).ttl_ms(ttl_ms);
        let first = read(&a, 12_000).give_up().acquire().await.expect("free");
        let abandoned = read(&b, 1_000)
            .renew(false)
            .give_up()
            .acquire()
            .await
            .expect("shared");
        // A writer that attempts only every 10 s: its own client's watch must hand it the key.
        let writing = c
            .request(&key, LockKind::Write)
            .ttl_ms(5_000)
            .sleep_ms(10_000)
            .wait_ms(20_000);
        let writer = tokio::spawn(async move { writing.acquire().await });
        in_line(&a, &key, 1, Duration::from_secs(30)).await;
        first.release().await.expect("released");
        let granted = tokio::time::timeout(Duration::from_secs(5), writer).await;
        let granted =
            granted.unwrap_or_else(|_| panic!("{kind}: no grant 4 s after the lease ended"));
        granted
            .expect("joined")
            .expect("granted")
            .release()
            .await
            .expect("released");
        drop(abandoned);
    }
}

/// Two readers hold a key together: an operator sees no waiter. Found by the same review.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_holding_together_are_not_listed_as_waiters() {
    use fencelock::LockKind;
    for kind in KINDS {
        let store = Store::start(kind, 1);
        let client = store.client(None, SESSION).await;
        let key = format!("{kind}:two-readers");
        let read = || client.request(&key, LockKind::Read).give_up().acquire();
        let (first, second) = (read().await.expect("free"), read().await.expect("shared"));
        let state = client.admin().inspect(&key).await.expect("inspects");
        assert_eq!(
            (state.waiters, state.queue.len()),
            (0, 0),
            "{kind}: {state:?}"
        );
        first.release().await.expect("released");
        second.release().await.expect("released");
    }
}

/// A mutex request on a semaphore's key is refused (`KeyInUse`), and its entry stands in
/// line for a moment before it goes: the permits asked for meanwhile, behind it, are not
/// refused. Found by the review of consensus semaphores (2026-12-05): 10 to 25 % of them
/// were.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_request_of_another_kind_refuses_no_permit_behind_it() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use fencelock::LockKind;

    let semaphore = LockKind::Semaphore { permits: 3 };
    for kind in KINDS {
        let store = Store::start(kind, 1);
        let (misuser, user) = (
            store.client(None, SESSION).await,
            store.client(None, SESSION).await,
        );
        let key = format!("{kind}:exports");
        let holder = user
            .request(&key, semaphore)
            .give_up()
            .acquire()
            .await
            .unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let mutexes = tokio::spawn({
            let (key, stop) = (key.clone(), stop.clone());
            async move {
                let mut refused = 0;
                while !stop.load(Ordering::Relaxed) && refused < 10_000 {
                    let asked = misuser.lock(&key).give_up().acquire().await;
                    assert!(
                        matches!(asked, Err(LockError::KeyInUse { .. })),
                        "{asked:?}"
                    );
                    refused += 1;
                }
                refused
            }
        });
        for round in 0..100 {
            let permit = user.request(&key, semaphore).give_up().acquire().await;
            let permit = permit.unwrap_or_else(|e| panic!("{kind}, round {round}: {e}"));
            permit.release().await.unwrap();
        }
        stop.store(true, Ordering::Relaxed);
        assert!(
            mutexes.await.unwrap() > 0,
            "{kind}: mutex requests ran beside"
        );
        holder.release().await.unwrap();
    }
}

/// A mark whose read of the exhausted shards came before a refill and another client's
/// mark, and whose write comes after them, loses neither. Found by the review of segmented
/// locks on these stores (2026-12-06): on ZooKeeper the refill deleted the marks node, the
/// next mark made it again at version 0, and the slow mark's write over version 0 succeeded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_mark_undoes_no_refill_and_loses_no_mark() {
    for kind in ["etcd", "zookeeper"] {
        let store = Store::start(kind, 1);
        let session = Duration::from_secs(20);
        let direct = store.client(None, session).await;
        let proxy = TcpProxy::start(store.first_member()).expect("proxy");
        let slow = store
            .client_answering(Some(&proxy), session, Duration::from_secs(15))
            .await;
        let key = "stock";
        let shards = || direct.segmented(key, 3).ttl_ms(30_000).give_up();
        // Shard a marked exhausted.
        let first = shards().acquire().await.expect("a shard");
        let a = first.shard().expect("a shard");
        first.mark_exhausted().await.expect("marked");
        first.release().await.expect("released");
        // The slow client holds shard b.
        let held = slow
            .segmented(key, 3)
            .ttl_ms(30_000)
            .give_up()
            .acquire()
            .await
            .expect("b");
        let b = held.shard().expect("b");
        assert_ne!(a, b, "{kind}");
        // etcd's HTTP/2 keep-alive gives up on a slower link.
        let latency = Duration::from_millis(if kind == "etcd" { 400 } else { 2_000 });
        proxy.set_latency(latency);
        // Its read of the marks reaches the store after one latency, its write after three.
        let marking = tokio::spawn(async move {
            let marked = held.mark_exhausted().await;
            (held, marked)
        });
        tokio::time::sleep(latency * 5 / 4).await;
        // Meanwhile: shard a refilled, and the third shard c marked by another grant.
        direct.refill_shard(key, a).await.expect("refilled");
        let second = shards().acquire().await.expect("a or c");
        let (c_guard, other) = if second.shard() == Some(a) {
            (shards().acquire().await.expect("c"), Some(second))
        } else {
            (second, None)
        };
        let c = c_guard.shard().expect("c");
        assert!(c != a && c != b, "{kind}");
        c_guard.mark_exhausted().await.expect("c marked");
        c_guard.release().await.expect("released");
        if let Some(other) = other {
            other.release().await.expect("released");
        }
        let (held, marked) = marking.await.expect("joined");
        marked.expect("b marked");
        proxy.set_latency(Duration::ZERO);
        held.release().await.expect("released");
        // Marks now {b, c}: the one shard left is a.
        let last = shards().acquire().await;
        match last {
            Ok(guard) => {
                assert_eq!(
                    guard.shard(),
                    Some(a),
                    "{kind}: shard {c} was marked exhausted after the refill of {a}, and granted"
                );
                guard.release().await.expect("released");
            }
            Err(error) => panic!(
                "{kind}: shard {a} was refilled after its mark, yet: {error:?} (a={a}, b={b}, c={c})"
            ),
        }
    }
}

/// Requests that give up at once, for a segmented lock with a shard free for each of them,
/// all get one however they interleave over two clients: one behind another that has not
/// claimed its shard yet waits for that claim instead of giving up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_shot_requests_get_the_free_shards_together() {
    const SHARDS: usize = 4;
    for kind in KINDS {
        let store = Store::start(kind, 1);
        let clients = [
            store.client(None, SESSION).await,
            store.client(None, SESSION).await,
        ];
        let key = format!("{kind}:together");
        for round in 0..5 {
            let start = std::sync::Arc::new(tokio::sync::Barrier::new(SHARDS));
            let requests = (0..SHARDS).map(|n| {
                let (client, key, start) = (clients[n % 2].clone(), key.clone(), start.clone());
                tokio::spawn(async move {
                    start.wait().await;
                    client
                        .segmented(&key, SHARDS as u32)
                        .give_up()
                        .acquire()
                        .await
                })
            });
            let mut shards = Vec::new();
            let mut guards = Vec::new();
            for request in futures::future::join_all(requests).await {
                let guard = request
                    .expect("joined")
                    .unwrap_or_else(|e| panic!("{kind}, round {round}: a shard was free: {e}"));
                shards.push(guard.shard().expect("a shard"));
                guards.push(guard);
            }
            shards.sort_unstable();
            assert_eq!(shards, [0, 1, 2, 3], "{kind}, round {round}");
            for guard in guards {
                guard.release().await.expect("released");
            }
        }
    }
}

/// A segmented waiter whose client is cut off (frozen: no attempt, no delete, its session
/// alive) and whose every shard became exhausted while it waited holds the line up no longer
/// than its place, as a waiter at the head does. Found by the same review: it was never
/// counted at the head (no free shard for it), and blocked the requests behind it until its
/// session ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_shard_waiter_with_every_shard_exhausted_blocks_no_longer_than_its_place() {
    const LONG_SESSION: Duration = Duration::from_secs(20);
    for kind in KINDS {
        let store = Store::start(kind, 1);
        let proxy = TcpProxy::start(store.first_member()).expect("proxy");
        let waiter_client = store.client(Some(&proxy), LONG_SESSION).await;
        let (holder_client, other) = (
            store.client(None, LONG_SESSION).await,
            store.client(None, LONG_SESSION).await,
        );
        let key = format!("{kind}:shards");
        let two = || holder_client.segmented(&key, 2).ttl_ms(30_000).give_up();
        // One shard of two exhausted, the other held.
        let first = two().acquire().await.expect("a shard");
        first.mark_exhausted().await.expect("marked");
        first.release().await.expect("released");
        let holder = two().acquire().await.expect("the other shard");
        // A waiter for one of the two shards, with a place of 3 s (3 × sleep_ms).
        let request = waiter_client
            .segmented(&key, 2)
            .ttl_ms(1_000)
            .sleep_ms(1_000)
            .wait_ms(60_000);
        let waiting = tokio::spawn(async move { request.acquire().await });
        in_line(&holder_client, &key, 1, Duration::from_secs(3)).await;
        proxy.freeze();
        // The held shard is used up too; shards 2 and 3 of a lock of 4 are free.
        holder.mark_exhausted().await.expect("marked");
        holder.release().await.expect("released");
        let started = std::time::Instant::now();
        let taken = other
            .segmented(&key, 4)
            .ttl_ms(30_000)
            .wait_ms(10_000)
            .acquire()
            .await;
        let waited = started.elapsed();
        proxy.thaw();
        waiting.abort();
        let taken = taken.unwrap_or_else(|e| {
            panic!("{kind}: blocked {waited:?} by a frozen waiter that can never claim: {e:?}")
        });
        assert!(taken.shard() >= Some(2), "{kind}: {:?}", taken.shard());
        taken.release().await.expect("released");
    }
}

/// Review finding: on ZooKeeper and etcd, an instance's sweep failed as a whole at the first
/// key whose exhausted shards held foreign data. That key's grant is in `failed`, and the
/// instance's other locks are released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_sweep_goes_on_past_foreign_data() {
    use fencelock::LockKind;
    for kind in KINDS {
        let store = Store::start(kind, 1);
        let url = match &store {
            Store::ZooKeeper(ensemble) => ensemble.url(),
            Store::Etcd(cluster) => cluster.url(),
        };
        let builder = LockClient::open_builder(&url).instance_id("sweep-1");
        let instance = builder.connect().await.expect("connects");
        let mut guards = Vec::new();
        for key in ["sweepa", "sweepc"] {
            guards.push(instance.lock(key).acquire().await.expect("acquired"));
        }
        let shards = LockKind::Segmented { shards: 4 };
        let shard = instance.request("sweepb", shards).acquire().await;
        guards.push(shard.expect("a shard"));
        match &store {
            Store::ZooKeeper(ensemble) => ensemble
                .create_node("/fencelock/sweepb%exhausted", b"not marks")
                .await
                .expect("created"),
            Store::Etcd(cluster) => cluster
                .put("fencelock/sweepb%exhausted", b"not marks")
                .await
                .expect("put"),
        }
        let locks = store.client(None, SESSION).await;
        let swept = locks.admin().release_instance("sweep-1").await;
        let swept = swept.unwrap_or_else(|e| panic!("{kind}: {e}"));
        let released: Vec<&str> = swept.released.iter().map(|f| f.key.as_str()).collect();
        assert_eq!(released, ["sweepa", "sweepc"], "{kind}: {swept:?}");
        let failed: Vec<&str> = swept.failed.iter().map(|(key, _)| key.as_str()).collect();
        assert_eq!(failed, ["sweepb"], "{kind}: {swept:?}");
        drop(guards);
    }
}

//! The ZooKeeper and etcd backends on private servers (Debian's `zookeeper` and
//! `etcd-server` packages, run as child processes): the conformance suite, a client cut off
//! for less and for more than its session, a leader killed while a lock is held, ZooKeeper's
//! one watch per waiter, and the errors a misconfigured client gets.

use std::time::Duration;

use fencelock::testing::{EtcdCluster, TcpProxy, ZooKeeperEnsemble, conformance};
use fencelock::{LockClient, LockError, LossCause};

use crate::support::expect_lost;

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
                let builder = LockClient::etcd_builder(&at);
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_pass_the_conformance_suite() {
    for kind in KINDS {
        let store = Store::start(kind, 1);
        conformance::run(
            &store.client(None, Duration::from_secs(10)).await,
            "conformance",
        )
        .await;
    }
}

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
        let holder = cut_off
            .lock(&key)
            .ttl_ms(30_000)
            .acquire()
            .await
            .expect("free");
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
        let holder = holding
            .lock(&key)
            .ttl_ms(30_000)
            .acquire()
            .await
            .expect("free");
        store.kill_leader();
        renewed_again(&holding).await;
        assert!(!holder.is_lost(), "{kind}: the lock outlives the election");
        let refused = other.lock(&key).give_up().acquire().await;
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
            async move { client.lock("herd").wait_ms(30_000).acquire().await }
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
        let guard = waiter
            .await
            .expect("joined")
            .expect("each waiter gets its turn");
        guard.release().await.expect("released");
    }
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
    let etcd = LockClient::etcd_builder(&[format!("http://127.0.0.1:{port}")])
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
    let prefix = LockClient::etcd_builder(&["http://127.0.0.1:2379"])
        .prefix("locks/")
        .connect()
        .await;
    assert!(backend_message(prefix).contains("prefix"));
}

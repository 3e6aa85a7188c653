//! `LockClient::open`: each URL scheme reaches its store. A lock taken through the opened
//! client is seen held by a client the store's own constructor made, so the URL reached that
//! store and not another.

use fencelock::testing::{RedisCluster, RedisServer, SentinelGroup, SqlDatabase, SqlKind};
use fencelock::{LockClient, LockError};

/// Takes a key through `opened` and checks that `direct` (the same store, reached by its own
/// constructor) sees it held by that grant.
async fn reaches_the_same_store(opened: &LockClient, direct: &LockClient, url: &str) {
    let key = "open:probe";
    let guard = opened.lock(key).acquire().await.unwrap_or_else(|e| {
        panic!("{url}: the opened client takes a free key: {e}");
    });
    let state = direct.admin().inspect(key).await.unwrap();
    assert!(
        state.holding.is_held(),
        "{url}: the store's own client sees the key held: {state:?}"
    );
    guard.release().await.unwrap();
}

/// `redis+<topology>://` with the hosts of `urls` (`redis://127.0.0.1:<port>/`).
fn hosts_url(topology: &str, urls: &[String]) -> String {
    let hosts: Vec<&str> = urls
        .iter()
        .map(|url| {
            let host = url.trim_start_matches("redis://");
            host.trim_end_matches('/')
        })
        .collect();
    format!("redis+{topology}://{}", hosts.join(","))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_redis_scheme_reaches_its_topology() {
    let server = RedisServer::start().unwrap();
    let url = server.url();
    let direct = LockClient::connect(&url).await.unwrap();
    reaches_the_same_store(&LockClient::open(&url).await.unwrap(), &direct, &url).await;

    let masters: Vec<RedisServer> = (0..3).map(|_| RedisServer::start().unwrap()).collect();
    let urls: Vec<String> = masters.iter().map(RedisServer::url).collect();
    let url = hosts_url("redlock", &urls);
    let direct = LockClient::redlock(&urls).await.unwrap();
    reaches_the_same_store(&LockClient::open(&url).await.unwrap(), &direct, &url).await;

    let cluster = RedisCluster::start(3, 0).await.unwrap();
    let url = hosts_url("cluster", &cluster.urls());
    let direct = LockClient::cluster(cluster.urls()).await.unwrap();
    reaches_the_same_store(&LockClient::open(&url).await.unwrap(), &direct, &url).await;

    let sentinels = SentinelGroup::start("opened").await.unwrap();
    let url = format!(
        "{}/opened",
        hosts_url("sentinel", &sentinels.sentinel_urls())
    );
    let direct = LockClient::sentinel(sentinels.sentinel_urls(), "opened")
        .await
        .unwrap();
    reaches_the_same_store(&LockClient::open(&url).await.unwrap(), &direct, &url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn database_schemes_reach_their_database() {
    for kind in [SqlKind::Postgres, SqlKind::MySql] {
        let Some(database) = SqlDatabase::reach(kind).await else {
            continue;
        };
        let direct = database.client().await;
        let opened = LockClient::open_builder(database.url())
            .table(database.table())
            .connect()
            .await
            .unwrap();
        reaches_the_same_store(&opened, &direct, database.url()).await;
        if kind == SqlKind::MySql {
            let url = database.url().replacen("mysql://", "mariadb://", 1);
            let opened = LockClient::open_builder(&url)
                .table(database.table())
                .connect()
                .await
                .unwrap();
            reaches_the_same_store(&opened, &direct, &url).await;
        }
        database.drop_tables().await;
    }
}

#[cfg(all(feature = "zookeeper", feature = "etcd"))]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consensus_schemes_reach_their_ensemble() {
    use fencelock::testing::{EtcdCluster, ZooKeeperEnsemble};

    let ensemble = ZooKeeperEnsemble::start(1).unwrap();
    let direct = LockClient::zookeeper(&ensemble.connect_string())
        .await
        .unwrap();
    let url = ensemble.url();
    reaches_the_same_store(&LockClient::open(&url).await.unwrap(), &direct, &url).await;

    let cluster = EtcdCluster::start(1).unwrap();
    let direct = LockClient::etcd(cluster.endpoints()).await.unwrap();
    let url = cluster.url();
    reaches_the_same_store(&LockClient::open(&url).await.unwrap(), &direct, &url).await;
}

#[tokio::test]
async fn memory_urls_open_a_lock_space_each() {
    let first = LockClient::open("memory://").await.unwrap();
    let second = LockClient::open("memory://").await.unwrap();
    let _held = first.lock("open:probe").acquire().await.unwrap();
    let other_space = second.lock("open:probe").give_up().acquire().await;
    assert!(other_space.is_ok(), "a second memory:// is its own space");
}

#[tokio::test]
async fn a_place_the_store_does_not_have_is_refused_before_connecting() {
    let refused = [
        LockClient::open_builder("memory://").key_prefix("app:"),
        LockClient::open_builder("redis://127.0.0.1:1/").table("locks"),
        LockClient::open_builder("postgres://u@127.0.0.1:1/db").key_prefix("app:"),
    ];
    for builder in refused {
        match builder.clone().connect().await {
            Err(LockError::InvalidConfig { reason, .. }) => {
                assert!(reason.contains("leave it out"), "{builder:?}: {reason}");
            }
            other => panic!("{builder:?}: expected InvalidConfig, got {other:?}"),
        }
    }
}

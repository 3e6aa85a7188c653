//! The conformance suite as one test per rule per store, named `<store>::<rule>`:
//! `cargo test --test conformance fair` checks the fairness rule on every store, and
//! `cargo test --test conformance zookeeper::` every rule on ZooKeeper. A failure names the
//! store and the rule.
//!
//! Each store starts once, at its first selected test, and is shared by that store's tests,
//! each with a client of its own and keys of its own (the rule's name). A database that
//! cannot be reached passes its tests without checking, as in the other SQL tests.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use fencelock::LockClient;
use fencelock::testing::conformance::{RULES, Rule};
use fencelock::testing::{RedisCluster, RedisServer, SentinelGroup, SqlDatabase, SqlKind};
use libtest_mimic::{Arguments, Failed, Trial};
use tokio::sync::OnceCell;

/// The stores of the suite, by the name their tests start with.
const STORES: &[&str] = &[
    "memory",
    "redis",
    "redlock",
    "cluster",
    "sentinel",
    "postgres",
    "mysql",
    #[cfg(feature = "zookeeper")]
    "zookeeper",
    #[cfg(feature = "etcd")]
    "etcd",
];

/// The servers, each started at its first test.
#[derive(Default)]
struct Servers {
    redis: OnceCell<RedisServer>,
    redlock: OnceCell<Vec<RedisServer>>,
    cluster: OnceCell<RedisCluster>,
    sentinel: OnceCell<SentinelGroup>,
    postgres: OnceCell<Option<SqlDatabase>>,
    mysql: OnceCell<Option<SqlDatabase>>,
    #[cfg(feature = "zookeeper")]
    zookeeper: OnceCell<fencelock::testing::ZooKeeperEnsemble>,
    #[cfg(feature = "etcd")]
    etcd: OnceCell<fencelock::testing::EtcdCluster>,
}

/// `Ok(value)`, or the failure to start a server.
fn started<T, E: std::fmt::Display>(what: &str, started: Result<T, E>) -> T {
    started.unwrap_or_else(|e| panic!("cannot start {what}: {e}"))
}

impl Servers {
    /// A client of `store`; `None` for a database that cannot be reached.
    async fn client(&self, store: &str) -> Option<LockClient> {
        let connected = match store {
            "memory" => Ok(LockClient::memory()),
            "redis" => {
                let server = self
                    .redis
                    .get_or_init(|| async { started("redis-server", RedisServer::start()) })
                    .await;
                LockClient::connect(&server.url()).await
            }
            "redlock" => {
                let masters = self.redlock.get_or_init(|| async {
                    let start = || started("redis-server", RedisServer::start());
                    (0..5).map(|_| start()).collect()
                });
                LockClient::redlock(masters.await.iter().map(RedisServer::url)).await
            }
            "cluster" => {
                let cluster = self.cluster.get_or_init(|| async {
                    started("a Redis Cluster", RedisCluster::start(3, 1).await)
                });
                LockClient::cluster(cluster.await.urls()).await
            }
            "sentinel" => {
                let group = self.sentinel.get_or_init(|| async {
                    started("a Sentinel group", SentinelGroup::start("locks").await)
                });
                let group = group.await;
                LockClient::sentinel(group.sentinel_urls(), group.service()).await
            }
            "postgres" | "mysql" => {
                let (cell, kind) = match store {
                    "postgres" => (&self.postgres, SqlKind::Postgres),
                    _ => (&self.mysql, SqlKind::MySql),
                };
                let database = cell.get_or_init(|| SqlDatabase::reach(kind)).await;
                return Some(database.as_ref()?.client().await);
            }
            #[cfg(feature = "zookeeper")]
            "zookeeper" => {
                let ensemble = self.zookeeper.get_or_init(|| async {
                    started("ZooKeeper", fencelock::testing::ZooKeeperEnsemble::start(1))
                });
                LockClient::zookeeper(&ensemble.await.connect_string()).await
            }
            #[cfg(feature = "etcd")]
            "etcd" => {
                let cluster = self.etcd.get_or_init(|| async {
                    started("etcd", fencelock::testing::EtcdCluster::start(1))
                });
                LockClient::etcd(cluster.await.endpoints()).await
            }
            other => unreachable!("no store {other}"),
        };
        Some(connected.unwrap_or_else(|e| panic!("cannot connect to {store}: {e}")))
    }

    /// Drops the SQL tables the suite made.
    async fn drop_tables(&self) {
        for database in [self.postgres.get(), self.mysql.get()] {
            if let Some(Some(database)) = database {
                database.drop_tables().await;
            }
        }
    }
}

/// The namespaces a rule is checked under on `store`: on a cluster, keys that start with a
/// brace too, whose every key must still stay in one slot.
fn namespaces(store: &str) -> &'static [&'static str] {
    match store {
        "cluster" => &["conformance", "}", "{"],
        _ => &["conformance"],
    }
}

/// Runs `check` on the shared runtime, as one test.
fn on(runtime: &tokio::runtime::Handle, check: impl Future<Output = ()>) -> Result<(), Failed> {
    runtime.block_on(check);
    Ok(())
}

fn trial(
    servers: &Arc<Servers>,
    runtime: &tokio::runtime::Handle,
    store: &'static str,
    rule: Rule,
) -> Trial {
    let (servers, runtime) = (servers.clone(), runtime.clone());
    Trial::test(format!("{store}::{}", rule.name), move || {
        on(&runtime, async {
            let Some(client) = servers.client(store).await else {
                return;
            };
            for namespace in namespaces(store) {
                rule.check(&client, namespace).await;
            }
        })
    })
}

fn main() {
    let arguments = Arguments::from_args();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let servers = Arc::new(Servers::default());
    let trials = STORES
        .iter()
        .flat_map(|store| {
            RULES
                .iter()
                .map(|rule| trial(&servers, runtime.handle(), store, *rule))
        })
        .collect();
    let conclusion = libtest_mimic::run(&arguments, trials);
    runtime.block_on(servers.drop_tables());
    drop(servers);
    runtime.shutdown_timeout(Duration::from_secs(5));
    conclusion.exit();
}

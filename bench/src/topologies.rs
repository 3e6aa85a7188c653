//! The topologies side by side, each on private `redis-server`s started here: W1 (one
//! client, sequential acquire + release), W2 (`W2_WORKERS` workers with a client each on one
//! key, default mode) and W3 (`W3_WORKERS` workers on as many keys through one shared client)
//! on a single server, on Redlock over 3 and over 5 masters, on a master behind Sentinel (with
//! and without `min_replicas = 1`), rslock on one and on the same 5 masters, Redis Clusters
//! of 1, 2 and 3 masters, the machine's PostgreSQL and MySQL/MariaDB, and private ZooKeeper
//! and etcd clusters of three members; with the first master's PING as the floor (the other
//! Redis servers are of the same kind), each database's own `SELECT 1` round trip as its
//! floor, and a write's round trip on each consensus store (a quorum write: what a lock
//! needs) as its.

use fencelock::LockClient;
use fencelock::testing::{
    EtcdCluster, RedisCluster, RedisServer, SentinelGroup, SqlDatabase, SqlKind, ZooKeeperEnsemble,
};
use sqlx::Connection;

use crate::locker::{Locker, RslockRetry};
use crate::workloads::{
    self, BoxError, Contention, Latency, Mode, Throughput, W2_WORKERS, W3_WORKERS,
};

/// Masters started for the widest Redlock.
const MASTERS: usize = 5;

/// Clusters measured, by their masters (no replicas: W3's scaling with masters).
const CLUSTER_SIZES: [(&str, usize); 3] = [
    ("Cluster, 1 master", 1),
    ("Cluster, 2 masters", 2),
    ("Cluster, 3 masters", 3),
];

/// One topology's figures.
pub struct TopologyRun {
    pub name: &'static str,
    /// The store's own round trip, where it is not the first master's PING (a database's
    /// `SELECT 1`, a consensus store's write).
    pub own_floor: Option<Latency>,
    pub w1: Latency,
    pub w2: Contention,
    pub w3: Throughput,
}

/// How to make a locker of one topology: each call connects a client of its own.
enum Topology<'a> {
    Single(&'a str),
    Redlock(&'a [String]),
    Sentinel(&'a SentinelGroup, u32),
    Cluster(&'a RedisCluster),
    Rslock(&'a [String]),
    Sql(&'a SqlDatabase),
    ZooKeeper(&'a ZooKeeperEnsemble),
    Etcd(&'a EtcdCluster),
}

impl Topology<'_> {
    async fn locker(&self) -> Result<Locker, BoxError> {
        Ok(match self {
            Topology::Single(url) => Locker::fencelock(LockClient::connect(url).await?),
            Topology::Redlock(urls) => Locker::fencelock(LockClient::redlock(*urls).await?),
            Topology::Sentinel(group, min_replicas) => Locker::Fencelock {
                client: LockClient::sentinel(group.sentinel_urls(), group.service()).await?,
                fair: false,
                min_replicas: *min_replicas,
            },
            Topology::Cluster(cluster) => {
                Locker::fencelock(LockClient::cluster(cluster.urls()).await?)
            }
            Topology::Rslock(urls) => {
                Locker::rslock_over(urls.to_vec(), RslockRetry::DEFAULT).await
            }
            Topology::Sql(database) => Locker::fencelock(database.builder().connect().await?),
            Topology::ZooKeeper(ensemble) => {
                Locker::fencelock(LockClient::zookeeper(&ensemble.connect_string()).await?)
            }
            Topology::Etcd(cluster) => {
                Locker::fencelock(LockClient::etcd(&cluster.endpoints()).await?)
            }
        })
    }
}

/// Runs W1, W2 and W3 on every topology; returns the PING floor and the runs.
pub async fn compare(
    sequential: usize,
    w2_per_worker: usize,
    w3_per_worker: usize,
) -> Result<(Latency, Vec<TopologyRun>), BoxError> {
    let masters = (0..MASTERS)
        .map(|_| RedisServer::start())
        .collect::<Result<Vec<_>, _>>()?;
    let urls: Vec<String> = masters.iter().map(RedisServer::url).collect();
    // W2's counter, on a server of its own.
    let counter = RedisServer::start()?;
    let ping = workloads::ping(&workloads::connect(&urls[0]).await?, sequential).await;
    let sentinel = SentinelGroup::start("bench").await?;
    let sizes = (sequential, w2_per_worker, w3_per_worker);
    let mut runs = Vec::new();
    for (name, topology) in [
        ("single", Topology::Single(&urls[0])),
        ("Redlock(3)", Topology::Redlock(&urls[..3])),
        ("Redlock(5)", Topology::Redlock(&urls)),
        ("Sentinel", Topology::Sentinel(&sentinel, 0)),
        ("Sentinel, min_replicas 1", Topology::Sentinel(&sentinel, 1)),
        ("rslock(1)", Topology::Rslock(&urls[..1])),
        ("rslock(5)", Topology::Rslock(&urls)),
    ] {
        runs.push(run(name, &topology, &counter, sizes).await?);
    }
    drop(sentinel);
    drop(masters);
    for (name, size) in CLUSTER_SIZES {
        let cluster = RedisCluster::start(size, 0).await?;
        runs.push(run(name, &Topology::Cluster(&cluster), &counter, sizes).await?);
    }
    runs.extend(databases(&counter, sizes).await?);
    runs.extend(consensus(&counter, sizes).await?);
    Ok((ping, runs))
}

/// The backends an application chooses between, for the README's table: one Redis server,
/// Redlock over 3 masters, PostgreSQL, MySQL, ZooKeeper(3) and etcd(3).
pub async fn backends(
    sequential: usize,
    w2_per_worker: usize,
    w3_per_worker: usize,
) -> Result<(Latency, Vec<TopologyRun>), BoxError> {
    let masters = (0..3)
        .map(|_| RedisServer::start())
        .collect::<Result<Vec<_>, _>>()?;
    let urls: Vec<String> = masters.iter().map(RedisServer::url).collect();
    let counter = RedisServer::start()?;
    let ping = workloads::ping(&workloads::connect(&urls[0]).await?, sequential).await;
    let sizes = (sequential, w2_per_worker, w3_per_worker);
    let mut runs = vec![
        run(
            "Redis, one server",
            &Topology::Single(&urls[0]),
            &counter,
            sizes,
        )
        .await?,
        run("Redlock(3)", &Topology::Redlock(&urls), &counter, sizes).await?,
    ];
    runs.extend(databases(&counter, sizes).await?);
    runs.extend(consensus(&counter, sizes).await?);
    Ok((ping, runs))
}

/// The runs on private ZooKeeper and etcd clusters of three members, one after the other
/// (their processes share the machine's cores), with a write's round trip as their floors.
async fn consensus(
    counter: &RedisServer,
    sizes: (usize, usize, usize),
) -> Result<Vec<TopologyRun>, BoxError> {
    let ensemble = ZooKeeperEnsemble::start(3)?;
    let mut zookeeper = run(
        "ZooKeeper(3)",
        &Topology::ZooKeeper(&ensemble),
        counter,
        sizes,
    )
    .await?;
    zookeeper.own_floor = Some(zookeeper_write(&ensemble.connect_string(), sizes.0).await?);
    drop(ensemble);
    let cluster = EtcdCluster::start(3)?;
    let mut etcd = run("etcd(3)", &Topology::Etcd(&cluster), counter, sizes).await?;
    etcd.own_floor = Some(etcd_write(&cluster.endpoints(), sizes.0).await?);
    Ok(vec![zookeeper, etcd])
}

/// ZooKeeper's floor: `setData` of one node, sequential, on one session.
async fn zookeeper_write(connect_string: &str, iterations: usize) -> Result<Latency, BoxError> {
    let client = zookeeper_client::Client::connect(connect_string).await?;
    let node =
        zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all());
    match client.create("/fencelock-floor", b"", &node).await {
        Ok(_) | Err(zookeeper_client::Error::NodeExists) => {}
        Err(error) => return Err(error.into()),
    }
    Ok(workloads::measure(iterations, || async {
        let written = client.set_data("/fencelock-floor", b"x", None).await;
        written.map(drop).map_err(|e| e.to_string())
    })
    .await)
}

/// etcd's floor: a put of one key, sequential, on one client.
async fn etcd_write(endpoints: &[String], iterations: usize) -> Result<Latency, BoxError> {
    let client = etcd_client::Client::connect(endpoints, None).await?;
    Ok(workloads::measure(iterations, || async {
        let written = client.clone().put("fencelock-floor", "x", None).await;
        written.map(drop).map_err(|e| e.to_string())
    })
    .await)
}

/// The runs on the machine's databases (each on lock tables of its own), with their floors.
async fn databases(
    counter: &RedisServer,
    sizes: (usize, usize, usize),
) -> Result<Vec<TopologyRun>, BoxError> {
    let mut runs = Vec::new();
    for (name, kind) in [("PostgreSQL", SqlKind::Postgres), ("MySQL", SqlKind::MySql)] {
        let Some(database) = SqlDatabase::reach(kind).await else {
            continue;
        };
        let mut sql = run(name, &Topology::Sql(&database), counter, sizes).await?;
        sql.own_floor = Some(select_one(database.url(), sizes.0).await?);
        database.drop_tables().await;
        runs.push(sql);
    }
    Ok(runs)
}

async fn run(
    name: &'static str,
    topology: &Topology<'_>,
    counter: &RedisServer,
    (sequential, w2_per_worker, w3_per_worker): (usize, usize, usize),
) -> Result<TopologyRun, BoxError> {
    let shared = topology.locker().await?;
    let w1 = workloads::uncontended(&shared, sequential).await;
    let mut own = Vec::with_capacity(W2_WORKERS);
    for _ in 0..W2_WORKERS {
        own.push(topology.locker().await?);
    }
    let mode = match topology {
        Topology::Rslock(_) => Mode::Rslock,
        _ => Mode::Default,
    };
    let w2 = workloads::contention_with(&counter.url(), mode, own, w2_per_worker).await?;
    let w3 = workloads::many_keys(vec![shared; W3_WORKERS], w3_per_worker).await?;
    Ok(TopologyRun {
        name,
        own_floor: None,
        w1,
        w2,
        w3,
    })
}

/// A database's floor: `SELECT 1`, sequential, on one connection.
async fn select_one(url: &str, iterations: usize) -> Result<Latency, BoxError> {
    async fn time<C: Connection>(url: &str, iterations: usize) -> Result<Latency, BoxError>
    where
        for<'c> &'c mut C: sqlx::Executor<'c>,
    {
        let connection = tokio::sync::Mutex::new(C::connect(url).await?);
        Ok(workloads::measure(iterations, || async {
            let mut connection = connection.lock().await;
            sqlx::Executor::execute(&mut *connection, "SELECT 1")
                .await
                .map(drop)
                .map_err(|e| e.to_string())
        })
        .await)
    }
    if url.starts_with("postgres") {
        time::<sqlx::PgConnection>(url, iterations).await
    } else {
        time::<sqlx::MySqlConnection>(url, iterations).await
    }
}

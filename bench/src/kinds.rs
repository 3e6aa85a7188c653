//! The lock kinds side by side on one server: each kind's uncontended acquire + release
//! (W1) with what it costs the server (its CPU and the commands it ran, beside rslock's
//! mutex), what one acquisition costs on the wire (round trips counted through a proxy, and
//! the commands Redis executed), and 8 workers on one key of each kind, each holding it for
//! a moment (a mutex and a write lock serialise them; readers, permits and shards share).
//! Then several mutex keys at once: `lock_all` (one call on one server) beside the same keys
//! taken one by one (what `lock_all` did before). Last, each kind's W1 on each store of the
//! machine beside that store's mutex.

use std::sync::Arc;
use std::time::{Duration, Instant};

use fencelock::testing::{
    Direction, EtcdCluster, SqlDatabase, SqlKind, TcpProxy, ZooKeeperEnsemble,
};
use fencelock::{LockClient, LockError, LockKind};
use tokio::sync::Barrier;

use crate::locker::{Locker, RslockRetry};
use crate::probe::{CommandStats, ScriptCalls, ServerCost, measuring};
use crate::stats::Failures;
use crate::workloads::{self, BoxError, Latency};

/// The kinds compared, with the label of their row.
pub const KINDS: [(&str, LockKind); 5] = [
    ("mutex", LockKind::Mutex),
    ("read", LockKind::Read),
    ("write", LockKind::Write),
    ("semaphore (4 permits)", LockKind::Semaphore { permits: 4 }),
    ("segmented (16 shards)", LockKind::Segmented { shards: 16 }),
];

/// Workers on the contended key of each kind.
pub const WORKERS: usize = 8;
/// How long a contended worker holds its grant.
pub const HOLD: Duration = Duration::from_millis(1);

/// Acquisitions of a free key through the proxy, for the figures on the wire.
const WIRE_SAMPLES: u64 = 200;

/// What one acquisition of a free key costs on the wire.
pub struct Wire {
    /// Requests (or pipelines) the client sent and waited for: the chunks the proxy passed
    /// to the server.
    pub round_trips: f64,
    /// Commands Redis executed (a script's own commands included).
    pub commands: f64,
}

/// One kind's figures.
pub struct KindRun {
    pub label: &'static str,
    pub uncontended: Latency,
    /// What the server spent on the W1 pairs (warm-up included).
    pub uncontended_cost: ServerCost,
    pub wire: Wire,
    pub grants: u64,
    pub contended_wall: Duration,
    pub contended_scripts: ScriptCalls,
    pub failures: Failures,
}

/// rslock's W1 on the same server: the peer of every kind's server cost.
pub struct PeerRun {
    pub uncontended: Latency,
    pub uncontended_cost: ServerCost,
}

pub async fn compare(
    url: &str,
    server: std::net::SocketAddr,
    iterations: usize,
    per_worker: usize,
) -> Result<(Vec<KindRun>, PeerRun), BoxError> {
    let mut inspector = workloads::connect(url).await?;
    let client = LockClient::connect(url).await?;
    let proxy = TcpProxy::start(server)?;
    let proxied = LockClient::connect(&proxy.url()).await?;
    let mut runs = Vec::with_capacity(KINDS.len());
    for (label, kind) in KINDS {
        let key = format!("kinds:w1:{label}");
        let (uncontended, uncontended_cost) =
            measuring(&mut inspector, uncontended(&client, &key, kind, iterations)).await?;
        let wire = on_the_wire(&proxy, &proxied, &mut inspector, &key, kind).await?;
        let (contended, cost) =
            measuring(&mut inspector, contended(url, label, kind, per_worker)).await?;
        let contended_scripts = cost.scripts;
        let (grants, contended_wall, failures) = contended?;
        runs.push(KindRun {
            label,
            uncontended,
            uncontended_cost,
            wire,
            grants,
            contended_wall,
            contended_scripts,
            failures,
        });
    }
    let rslock = Locker::rslock(url, RslockRetry::DEFAULT).await;
    let (uncontended, uncontended_cost) =
        measuring(&mut inspector, workloads::uncontended(&rslock, iterations)).await?;
    let peer = PeerRun {
        uncontended,
        uncontended_cost,
    };
    Ok((runs, peer))
}

/// W1 of `kind` on `key`: a free key taken and released, `iterations` times in a row.
async fn uncontended(client: &LockClient, key: &str, kind: LockKind, iterations: usize) -> Latency {
    let pair = || async {
        let guard = client.request(key, kind).acquire().await;
        guard
            .map_err(|e| e.to_string())?
            .release()
            .await
            .map_err(|e| e.to_string())
    };
    workloads::measure(iterations, pair).await
}

/// One store's W1 of each kind.
pub struct StoreKinds {
    pub store: &'static str,
    /// Per kind of [`KINDS`], in order; `None` where the store does not offer it.
    pub w1: Vec<Option<Latency>>,
}

/// Each kind's W1 on each store: memory, the Redis server at `redis_url`, the machine's
/// databases (those reached), and a ZooKeeper and an etcd of one member each, started here
/// one after the other.
pub async fn across_stores(
    redis_url: &str,
    iterations: usize,
) -> Result<Vec<StoreKinds>, BoxError> {
    let mut runs = vec![
        of_store("memory", &LockClient::memory(), iterations).await,
        of_store("Redis", &LockClient::connect(redis_url).await?, iterations).await,
    ];
    for (store, kind) in [("PostgreSQL", SqlKind::Postgres), ("MySQL", SqlKind::MySql)] {
        let Some(database) = SqlDatabase::reach(kind).await else {
            continue;
        };
        let client = database.builder().connect().await?;
        runs.push(of_store(store, &client, iterations).await);
        database.drop_tables().await;
    }
    let ensemble = ZooKeeperEnsemble::start(1)?;
    let zookeeper = LockClient::zookeeper(&ensemble.connect_string()).await?;
    runs.push(of_store("ZooKeeper", &zookeeper, iterations).await);
    drop((zookeeper, ensemble));
    let cluster = EtcdCluster::start(1)?;
    let etcd = LockClient::etcd(&cluster.endpoints()).await?;
    runs.push(of_store("etcd", &etcd, iterations).await);
    Ok(runs)
}

async fn of_store(store: &'static str, client: &LockClient, iterations: usize) -> StoreKinds {
    let mut w1 = Vec::with_capacity(KINDS.len());
    for (label, kind) in KINDS {
        let key = format!("kinds:stores:{label}");
        // A kind the store does not offer is refused before anything is sent.
        let first = client.request(&key, kind).acquire().await;
        let offered = !matches!(first, Err(LockError::InvalidConfig { .. }));
        if let Ok(guard) = first {
            let _ = guard.release().await;
        }
        w1.push(match offered {
            true => Some(uncontended(client, &key, kind, iterations).await),
            false => None,
        });
    }
    StoreKinds { store, w1 }
}

/// [`Wire`] of acquiring `kind` on `key` (free) through `proxy`, over [`WIRE_SAMPLES`]
/// acquisitions after a first one (which loads the scripts); each is released before the
/// next, outside the count.
async fn on_the_wire(
    proxy: &TcpProxy,
    client: &LockClient,
    inspector: &mut redis::aio::MultiplexedConnection,
    key: &str,
    kind: LockKind,
) -> Result<Wire, BoxError> {
    client.request(key, kind).acquire().await?.release().await?;
    let (mut round_trips, mut commands) = (0, 0);
    for _ in 0..WIRE_SAMPLES {
        let (sent, before) = (
            proxy.forwarded(Direction::ToServer),
            CommandStats::read(inspector).await?,
        );
        let guard = client.request(key, kind).acquire().await?;
        round_trips += proxy.forwarded(Direction::ToServer) - sent;
        commands += CommandStats::read(inspector).await?.commands_since(&before);
        guard.release().await?;
    }
    let per = |count: u64| count as f64 / WIRE_SAMPLES as f64;
    Ok(Wire {
        round_trips: per(round_trips),
        commands: per(commands),
    })
}

/// `WORKERS` workers, each with a client of its own, taking the `kind` lock of one key
/// `per_worker` times and holding it for `HOLD`: the grants, the wall time, the failures.
async fn contended(
    url: &str,
    label: &str,
    kind: LockKind,
    per_worker: usize,
) -> Result<(u64, Duration, Failures), BoxError> {
    let key = format!("kinds:w2:{label}");
    let start = Arc::new(Barrier::new(WORKERS));
    let mut workers = Vec::with_capacity(WORKERS);
    for _ in 0..WORKERS {
        let (client, key, start) = (LockClient::connect(url).await?, key.clone(), start.clone());
        workers.push(async move {
            start.wait().await;
            let (mut grants, mut failures) = (0, Failures::default());
            for _ in 0..per_worker {
                let request = client.request(&key, kind).wait_ms(30_000);
                match request.acquire().await {
                    Ok(guard) => {
                        tokio::time::sleep(HOLD).await;
                        match guard.release().await {
                            Ok(()) => grants += 1,
                            Err(error) => failures.record(error.to_string()),
                        }
                    }
                    Err(error) => failures.record(error.to_string()),
                }
            }
            (grants, failures)
        });
    }
    let started = Instant::now();
    let tasks: Vec<_> = workers.into_iter().map(tokio::spawn).collect();
    let (mut grants, mut failures) = (0, Failures::default());
    for task in tasks {
        let (worker_grants, worker_failures) = task.await?;
        grants += worker_grants;
        failures.merge(worker_failures);
    }
    Ok((grants, started.elapsed(), failures))
}

/// Keys taken together by the several-keys rows.
pub const SEVERAL: [usize; 2] = [2, 4];

/// One several-keys row: `keys` free keys taken together, by `lock_all` or one by one.
pub struct SeveralRun {
    pub label: String,
    pub uncontended: Latency,
    /// Round trips per acquisition of every key, counted through the proxy.
    pub round_trips: f64,
}

/// W1 and the round trips of `lock_all` over 2 and 4 free keys, and of the same keys taken
/// one by one, each pair released after.
pub async fn several_keys(
    url: &str,
    server: std::net::SocketAddr,
    iterations: usize,
) -> Result<Vec<SeveralRun>, BoxError> {
    let client = LockClient::connect(url).await?;
    let proxy = TcpProxy::start(server)?;
    let proxied = LockClient::connect(&proxy.url()).await?;
    let mut runs = Vec::new();
    for count in SEVERAL {
        let keys: Vec<String> = (0..count).map(|n| format!("several:{count}:{n}")).collect();
        for together in [true, false] {
            let uncontended = workloads::measure(iterations, || async {
                let taken = take_all(&client, &keys, together).await;
                taken.map_err(|e| e.to_string())
            })
            .await;
            take_all(&proxied, &keys, together).await?;
            let mut round_trips = 0;
            for _ in 0..WIRE_SAMPLES {
                let before = proxy.forwarded(Direction::ToServer);
                let held = acquire_all(&proxied, &keys, together).await?;
                round_trips += proxy.forwarded(Direction::ToServer) - before;
                held.release().await?;
            }
            let how = if together { "lock_all" } else { "one by one" };
            runs.push(SeveralRun {
                label: format!("{count} keys, {how}"),
                uncontended,
                round_trips: round_trips as f64 / WIRE_SAMPLES as f64,
            });
        }
    }
    Ok(runs)
}

/// Keys held by [`acquire_all`].
enum Held {
    Together(fencelock::MultiGuard),
    OneByOne(Vec<fencelock::LockGuard>),
}

impl Held {
    async fn release(self) -> Result<(), fencelock::LockError> {
        match self {
            Held::Together(all) => all.release().await,
            Held::OneByOne(guards) => {
                for guard in guards {
                    guard.release().await?;
                }
                Ok(())
            }
        }
    }
}

/// Every key of `keys`, by `lock_all` or one `lock` after another.
async fn acquire_all(
    client: &LockClient,
    keys: &[String],
    together: bool,
) -> Result<Held, fencelock::LockError> {
    if together {
        let all = client.lock_all(keys.iter().cloned()).acquire().await?;
        return Ok(Held::Together(all));
    }
    let mut guards = Vec::with_capacity(keys.len());
    for key in keys {
        guards.push(client.lock(key.as_str()).acquire().await?);
    }
    Ok(Held::OneByOne(guards))
}

/// [`acquire_all`], then the release.
async fn take_all(
    client: &LockClient,
    keys: &[String],
    together: bool,
) -> Result<(), fencelock::LockError> {
    acquire_all(client, keys, together).await?.release().await
}

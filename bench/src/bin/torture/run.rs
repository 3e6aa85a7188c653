//! One scenario's run: a lock server under test, a resource server, worker processes; and
//! what the history and the resource say afterwards.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fencelock::testing::history::{Violation, check, read_histories};
use fencelock::testing::{
    EtcdCluster, RedisCluster, RedisServer, SentinelGroup, SqlDatabase, SqlKind, TcpProxy,
    ZooKeeperEnsemble,
};
use redis::AsyncCommands;

use crate::worker::{self, KEYS};

pub const PROCESSES: usize = 4;

/// What a scenario promises.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Promise {
    /// No two holders at once.
    Exclusion,
    /// Holders may overlap (the lock server lost its data, its clock jumped, a holder was
    /// frozen), but the resource's fencing check refuses every stale write.
    FencingOnly,
}

/// What a run found.
pub struct Report {
    pub scenario: &'static str,
    pub promise: Promise,
    pub sections: usize,
    pub violations: Vec<Violation>,
    pub accepted: i64,
    pub counted: i64,
    /// Errors surfaced to callers, summed over the workers: lost, not acquired, backend,
    /// other.
    pub errors: [u32; 4],
    /// Workers that failed (other than one the scenario killed), with their output.
    pub failed_workers: Vec<String>,
}

impl Report {
    /// Whether the run kept the scenario's promise.
    pub fn kept(&self) -> bool {
        self.failed_workers.is_empty()
            && self.accepted == self.counted
            && (self.promise == Promise::FencingOnly || self.violations.is_empty())
    }
}

/// The lock servers of a run.
pub enum Topology {
    /// One Redis server.
    Single(RedisServer),
    /// Independent masters (Redlock).
    Redlock(Vec<RedisServer>),
    /// A Redis Cluster.
    Cluster(RedisCluster),
    /// A master, its replica and three Sentinels; the workers' sections ask for this many
    /// replicas (`min_replicas`).
    Sentinel(Box<SentinelGroup>, u32),
    /// A lock table of its own on the machine's PostgreSQL or MySQL/MariaDB server.
    Sql(SqlDatabase),
    /// A ZooKeeper ensemble.
    ZooKeeper(ZooKeeperEnsemble),
    /// An etcd cluster.
    Etcd(EtcdCluster),
}

impl Topology {
    /// The server a fault on "the lock server" hits: the one server, the first master (of
    /// Redlock, or of the cluster as created), or the master the Sentinel group started
    /// with; `None` for a database.
    pub fn server(&mut self) -> Option<&mut RedisServer> {
        match self {
            Topology::Single(server) => Some(server),
            Topology::Redlock(masters) => Some(&mut masters[0]),
            Topology::Cluster(cluster) => Some(&mut cluster.nodes[0]),
            Topology::Sentinel(group, _) => Some(&mut group.master),
            Topology::Sql(_) | Topology::ZooKeeper(_) | Topology::Etcd(_) => None,
        }
    }

    /// The address of the server a proxy goes in front of.
    fn upstream(&mut self) -> std::io::Result<std::net::SocketAddr> {
        let address = match self {
            Topology::Sql(database) => database.addr(),
            redis => redis
                .server()
                .map(|server| ([127, 0, 0, 1], server.port()).into()),
        };
        address.ok_or_else(|| std::io::Error::other("no address to put a proxy in front of"))
    }

    /// What the workers are told: the topology, its URLs, `min_replicas` and (for a
    /// database) the lock table; `proxy` stands in front of the one server, if any.
    fn worker_env(&self, proxy: Option<std::net::SocketAddr>) -> [(&'static str, String); 4] {
        let urls = |servers: &[RedisServer]| {
            servers
                .iter()
                .map(RedisServer::url)
                .collect::<Vec<_>>()
                .join(",")
        };
        let (topology, urls, min_replicas) = match self {
            Topology::Single(server) => (
                "single".to_owned(),
                proxy.map_or_else(|| server.url(), |addr| format!("redis://{addr}/")),
                0,
            ),
            Topology::Sql(database) => (
                match database.kind() {
                    SqlKind::Postgres => "postgres".to_owned(),
                    SqlKind::MySql => "mysql".to_owned(),
                },
                proxy
                    .and_then(|addr| database.url_via(addr))
                    .unwrap_or_else(|| database.url().to_owned()),
                0,
            ),
            Topology::Redlock(masters) => ("redlock".to_owned(), urls(masters), 0),
            Topology::Cluster(cluster) => ("cluster".to_owned(), urls(&cluster.nodes), 0),
            Topology::Sentinel(group, min_replicas) => (
                format!("sentinel:{}", group.service()),
                group.sentinel_urls().join(","),
                *min_replicas,
            ),
            Topology::ZooKeeper(ensemble) => ("zookeeper".to_owned(), ensemble.connect_string(), 0),
            Topology::Etcd(cluster) => ("etcd".to_owned(), cluster.endpoints().join(","), 0),
        };
        let table = match self {
            Topology::Sql(database) => database.table().to_owned(),
            _ => String::new(),
        };
        [
            (worker::TOPOLOGY, topology),
            (worker::URL, urls),
            (worker::MIN_REPLICAS, min_replicas.to_string()),
            (worker::TABLE, table),
        ]
    }
}

pub struct Run {
    pub scenario: &'static str,
    pub topology: Topology,
    /// Between the workers and the lock server, when the scenario disturbs the network.
    pub proxy: Option<TcpProxy>,
    resource: RedisServer,
    pub dir: PathBuf,
    pub workers: Vec<Child>,
}

impl Run {
    /// Starts a resource server and the workers against `lock_server` (through a proxy if
    /// `through_proxy`); each section's body runs `body_ms`, the run `run_ms`. Workers mark
    /// their entries in the run's folder.
    pub fn start(
        scenario: &'static str,
        mut topology: Topology,
        body_ms: u64,
        run_ms: u64,
        through_proxy: bool,
    ) -> std::io::Result<Run> {
        let resource = RedisServer::start()?;
        let proxy = if through_proxy {
            Some(TcpProxy::start(topology.upstream()?)?)
        } else {
            None
        };
        let worker_env = topology.worker_env(proxy.as_ref().map(TcpProxy::addr));
        let dir = std::env::temp_dir().join(format!(
            "fencelock-torture-{}-{}",
            std::process::id(),
            scenario.replace(|c: char| !c.is_ascii_alphanumeric(), "-")
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        let exe = std::env::current_exe()?;
        let workers = (0..PROCESSES)
            .map(|i| {
                let mut command = Command::new(&exe);
                command
                    .arg("worker")
                    .envs(worker_env.iter().map(|(k, v)| (k, v)))
                    .env(worker::RESOURCE, resource.url())
                    .env(worker::HISTORY, dir.join(format!("worker-{i}.history")))
                    .env(worker::BODY_MS, body_ms.to_string())
                    .env(worker::RUN_MS, run_ms.to_string())
                    .env(worker::ENTRY_MARKS, &dir)
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped());
                command.spawn()
            })
            .collect::<std::io::Result<_>>()?;
        Ok(Run {
            scenario,
            topology,
            proxy,
            resource,
            dir,
            workers,
        })
    }

    /// Waits (bounded, 30 s) until some worker has entered a critical section; its index.
    pub fn first_to_enter(&self) -> Option<usize> {
        let started = std::time::Instant::now();
        while started.elapsed() < Duration::from_secs(30) {
            for (i, worker) in self.workers.iter().enumerate() {
                if self.dir.join(format!("entered-{}", worker.id())).exists() {
                    return Some(i);
                }
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        None
    }

    /// Waits for the workers, then checks the history and the resource.
    pub fn finish(
        self,
        promise: Promise,
        killed: Option<usize>,
    ) -> Result<Report, Box<dyn std::error::Error>> {
        let mut errors = [0u32; 4];
        let mut failed_workers = Vec::new();
        for (i, worker) in self.workers.into_iter().enumerate() {
            let output = worker.wait_with_output()?;
            if Some(i) == killed {
                continue;
            }
            let stdout = String::from_utf8_lossy(&output.stdout);
            if !output.status.success() {
                failed_workers.push(format!(
                    "worker {i}: {}\n{stdout}\n{}",
                    output.status,
                    String::from_utf8_lossy(&output.stderr)
                ));
            }
            let counts = stdout
                .lines()
                .filter_map(|line| line.strip_prefix("errors "))
                .flat_map(|counts| counts.split(' ').map(|n| n.parse::<u32>().unwrap_or(0)));
            for (total, count) in errors.iter_mut().zip(counts) {
                *total += count;
            }
        }
        let files: Vec<PathBuf> = std::fs::read_dir(&self.dir)?
            .filter_map(|entry| entry.ok().map(|e| e.path()))
            .filter(|path| path.extension().is_some_and(|e| e == "history"))
            .collect();
        let history = check(&read_histories(&files)?);
        let (accepted, counted) = tokio::runtime::Runtime::new()?.block_on(async {
            let mut resource = redis::Client::open(self.resource.url())?
                .get_multiplexed_async_connection()
                .await?;
            let (mut accepted, mut counted) = (0i64, 0i64);
            for key in 0..KEYS {
                accepted += resource
                    .get::<_, Option<i64>>(format!("accepted:{key}"))
                    .await?
                    .unwrap_or(0);
                counted += resource
                    .get::<_, Option<i64>>(format!("counter:{key}"))
                    .await?
                    .unwrap_or(0);
            }
            Ok::<_, redis::RedisError>((accepted, counted))
        })?;
        let _ = std::fs::remove_dir_all(&self.dir);
        if let Topology::Sql(database) = &self.topology {
            tokio::runtime::Runtime::new()?.block_on(database.drop_tables());
        }
        Ok(Report {
            scenario: self.scenario,
            promise,
            sections: history.sections,
            violations: history.violations,
            accepted,
            counted,
            errors,
            failed_workers,
        })
    }
}

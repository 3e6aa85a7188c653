//! One scenario's run: a lock server under test, a resource server, worker processes; and
//! what the history and the resource say afterwards.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fencelock::testing::history::{
    CheckReport, Section, Violation, check, check_at_most, check_read_write, read_histories,
};
use fencelock::testing::{
    EtcdCluster, RedisCluster, RedisServer, SentinelGroup, SqlDatabase, SqlKind, TcpProxy,
    ZooKeeperEnsemble,
};
use redis::AsyncCommands;

use crate::worker::{self, KEYS, Kind, PERMITS, SHARDS, resource_keys};

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

/// What a scenario expects of its run, besides its promise.
#[derive(Debug, Clone, Copy)]
pub struct Expect {
    pub promise: Promise,
    /// The worker the scenario killed, whose output is not checked.
    pub killed: Option<usize>,
    /// The sections the workers must reach at least: a run that did little proves little.
    pub floor: Floor,
    /// Faults that must have hit (a kill that killed, a cut that closed connections...): a
    /// run whose fault missed proves nothing of it.
    pub faults: u32,
}

/// The least a scenario's workers must do, set well below what it does on a loaded machine.
#[derive(Debug, Clone, Copy)]
pub enum Floor {
    /// Sections per second of run.
    PerSecond(f64),
    /// Sections in all, whatever the run's length: a scenario whose bodies outlast its
    /// fault runs a few sections only.
    AtLeast(usize),
}

impl Floor {
    fn sections(self, run_ms: u64) -> usize {
        match self {
            Floor::PerSecond(per_second) => (per_second * run_ms as f64 / 1_000.0).ceil() as usize,
            Floor::AtLeast(sections) => sections,
        }
    }
}

/// What a run found.
pub struct Report {
    pub scenario: &'static str,
    pub kind: Kind,
    pub expect: Expect,
    pub sections: usize,
    /// The least number of sections the run had to reach.
    pub floor: usize,
    /// Faults that hit.
    pub faults: u32,
    pub violations: Vec<Violation>,
    pub accepted: i64,
    pub counted: i64,
    /// Stale tokens that reached the resource and were refused (reads and writes).
    pub refused: usize,
    /// Accepted writes whose token did not exceed the one accepted before on the resource.
    pub writes_out_of_order: Vec<String>,
    /// Errors surfaced to callers, summed over the workers: lost, not acquired, backend,
    /// other.
    pub errors: [u32; 4],
    /// Workers that failed (other than one the scenario killed), with their output.
    pub failed_workers: Vec<String>,
    /// Workers (other than one the scenario killed) that the store never answered.
    pub unanswered_workers: Vec<usize>,
}

impl Report {
    /// Why the run broke the scenario's promise or proved too little; empty if it kept it.
    pub fn broken(&self) -> Vec<String> {
        let mut broken = Vec::new();
        let mut check = |failed: bool, why: String| {
            if failed {
                broken.push(why);
            }
        };
        check(
            !self.failed_workers.is_empty(),
            format!("{} worker(s) failed", self.failed_workers.len()),
        );
        check(
            !self.unanswered_workers.is_empty(),
            format!(
                "workers {:?} never reached the store",
                self.unanswered_workers
            ),
        );
        check(
            self.sections < self.floor,
            format!(
                "{} sections, fewer than the floor of {}",
                self.sections, self.floor
            ),
        );
        check(
            self.faults < self.expect.faults,
            format!("{} of {} faults hit", self.faults, self.expect.faults),
        );
        check(
            self.accepted != self.counted,
            format!("{} updates lost", self.accepted - self.counted),
        );
        check(
            !self.writes_out_of_order.is_empty(),
            format!(
                "accepted writes out of token order: {:?}",
                self.writes_out_of_order
            ),
        );
        let tolerated = |violation: &&Violation| {
            self.expect.promise == Promise::FencingOnly
                && matches!(violation, Violation::Overlap(..) | Violation::TooMany(_))
        };
        let broken_rules = self.violations.iter().filter(|v| !tolerated(v)).count();
        check(
            broken_rules > 0,
            format!("{broken_rules} violation(s) the promise does not allow"),
        );
        check(
            self.expect.promise == Promise::Exclusion && self.refused > 0,
            format!("{} stale tokens reached the resource", self.refused),
        );
        broken
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
    pub kind: Kind,
    pub topology: Topology,
    /// Faults that hit so far (see [`Run::fault`]).
    faults: u32,
    /// Between the workers and the lock server, when the scenario disturbs the network.
    pub proxy: Option<TcpProxy>,
    resource: RedisServer,
    pub dir: PathBuf,
    pub workers: Vec<Child>,
}

impl Run {
    /// Starts a resource server and the workers taking `kind` locks on `topology` (through a
    /// proxy if `through_proxy`); each section's body runs `body_ms`, the run `run_ms`.
    /// Workers mark their entries in the run's folder.
    pub fn start(
        scenario: &'static str,
        kind: Kind,
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
                    .env(worker::HISTORY, dir.join(format!("worker-{i}")))
                    .env(worker::KIND, kind.name())
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
            kind,
            topology,
            faults: 0,
            proxy,
            resource,
            dir,
            workers,
        })
    }

    /// Counts a fault the scenario injected if `hit` confirms that it hit.
    pub fn fault(&mut self, hit: bool) {
        self.faults += u32::from(hit);
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

    /// Waits for the workers, then checks the history and the resource against `expect`.
    pub fn finish(self, expect: Expect, run_ms: u64) -> Result<Report, Box<dyn std::error::Error>> {
        let mut errors = [0u32; 4];
        let mut failed_workers = Vec::new();
        let mut unanswered_workers = Vec::new();
        for (i, worker) in self.workers.into_iter().enumerate() {
            let output = worker.wait_with_output()?;
            if Some(i) == expect.killed {
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
            let numbers = |prefix: &str| -> Vec<u32> {
                stdout
                    .lines()
                    .filter_map(|line| line.strip_prefix(prefix))
                    .flat_map(|counts| counts.split(' ').map(|n| n.parse::<u32>().unwrap_or(0)))
                    .collect()
            };
            let counts = numbers("errors ");
            for (total, count) in errors.iter_mut().zip(&counts) {
                *total += count;
            }
            // Answers of the store: sections entered, and calls it refused or found lost.
            let answered = numbers("sections ").iter().sum::<u32>()
                + counts.first().unwrap_or(&0)
                + counts.get(1).unwrap_or(&0);
            if answered == 0 {
                unanswered_workers.push(i);
            }
        }
        let histories = |role: &str| -> std::io::Result<Vec<Section>> {
            let suffix = format!(".{role}.history");
            let files: Vec<PathBuf> = std::fs::read_dir(&self.dir)?
                .filter_map(|entry| entry.ok().map(|e| e.path()))
                .filter(|path| path.to_string_lossy().ends_with(&suffix))
                .collect();
            read_histories(&files)
        };
        let (exclusive, shared) = (histories("exclusive")?, histories("shared")?);
        let history = checked(self.kind, &exclusive, &shared);
        let resource = tokio::runtime::Runtime::new()?.block_on(read_resource(&self.resource))?;
        let _ = std::fs::remove_dir_all(&self.dir);
        if let Topology::Sql(database) = &self.topology {
            tokio::runtime::Runtime::new()?.block_on(database.drop_tables());
        }
        Ok(Report {
            scenario: self.scenario,
            kind: self.kind,
            expect,
            sections: history.sections,
            floor: expect.floor.sections(run_ms),
            faults: self.faults,
            violations: history.violations,
            accepted: resource.accepted,
            counted: resource.counted,
            refused: resource.refused,
            writes_out_of_order: resource.out_of_order,
            errors,
            failed_workers,
            unanswered_workers,
        })
    }
}

/// The recorded sections checked by the rules of `kind`: no two exclusive sections of a key
/// (or shard) overlap, tokens strictly increase in entry order; readers share only with
/// readers; no more than the permits are inside a semaphore at once.
fn checked(kind: Kind, exclusive: &[Section], shared: &[Section]) -> CheckReport {
    match kind {
        Kind::Mutex | Kind::Segmented => check(exclusive),
        Kind::ReadWrite => check_read_write(shared, exclusive),
        Kind::Semaphore => check_at_most(shared, PERMITS as usize),
    }
}

/// What the protected resource saw, over every key (and shard) a run may write.
struct Resource {
    /// Writes accepted, and the value their counters reached: equal unless updates were lost.
    accepted: i64,
    counted: i64,
    /// Stale tokens refused.
    refused: usize,
    /// The keys whose accepted writes' tokens did not strictly increase, with the pair.
    out_of_order: Vec<String>,
}

async fn read_resource(resource: &RedisServer) -> Result<Resource, redis::RedisError> {
    let mut connection = redis::Client::open(resource.url())?
        .get_multiplexed_async_connection()
        .await?;
    let mut seen = Resource {
        accepted: 0,
        counted: 0,
        refused: 0,
        out_of_order: Vec::new(),
    };
    let labels = (0..KEYS).flat_map(|key| {
        let shards = (0..SHARDS).map(move |shard| format!("seg:{key}/{shard}"));
        [format!("hist:{key}"), format!("rw:{key}")]
            .into_iter()
            .chain(shards)
    });
    for label in labels {
        let [counter, _, accepted, writes, refused] = resource_keys(&label);
        seen.accepted += connection
            .get::<_, Option<i64>>(&accepted)
            .await?
            .unwrap_or(0);
        seen.counted += connection
            .get::<_, Option<i64>>(&counter)
            .await?
            .unwrap_or(0);
        seen.refused += connection.llen::<_, usize>(&refused).await?;
        let tokens: Vec<u64> = connection.lrange(&writes, 0, -1).await?;
        if let Some(pair) = tokens.windows(2).find(|pair| pair[1] <= pair[0]) {
            seen.out_of_order
                .push(format!("{label}: {} then {}", pair[0], pair[1]));
        }
    }
    Ok(seen)
}

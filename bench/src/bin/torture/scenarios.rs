//! The fault scenarios. Each starts a run, applies its fault while the workers work, and
//! returns what the history and the resource say.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use fencelock::testing::{
    EtcdCluster, RedisCluster, RedisServer, SentinelGroup, SqlDatabase, SqlKind, ZooKeeperEnsemble,
    continue_process, stop_process,
};

use crate::run::{Promise, Report, Run, Topology};
use crate::worker::TTL_MS;

type Outcome = Result<Report, Box<dyn std::error::Error>>;

/// A scenario: its name on the command line and in the table, and how to run it for
/// `run_ms`.
pub struct Scenario {
    pub name: &'static str,
    pub run: fn(u64) -> Outcome,
}

pub const ALL: &[Scenario] = &[
    Scenario {
        name: "no-faults",
        run: no_faults,
    },
    Scenario {
        name: "holder-sigkill",
        run: holder_sigkill,
    },
    Scenario {
        name: "client-kill",
        run: client_kill,
    },
    Scenario {
        name: "latency-and-cuts",
        run: latency_and_cuts,
    },
    Scenario {
        name: "redis-sigstop",
        run: redis_sigstop,
    },
    Scenario {
        name: "client-pause",
        run: client_pause,
    },
    Scenario {
        name: "debug-sleep",
        run: debug_sleep,
    },
    Scenario {
        name: "holder-sigstop",
        run: holder_sigstop,
    },
    Scenario {
        name: "clock-jump",
        run: clock_jump,
    },
    Scenario {
        name: "redis-restart",
        run: redis_restart,
    },
    Scenario {
        name: "redlock-two-of-five-killed",
        run: redlock_two_of_five_killed,
    },
    Scenario {
        name: "redlock-restart",
        run: redlock_restart,
    },
    Scenario {
        name: "cluster-failover",
        run: cluster_failover,
    },
    Scenario {
        name: "cluster-master-sigkill",
        run: cluster_master_sigkill,
    },
    Scenario {
        name: "sentinel-failover",
        run: sentinel_failover,
    },
    Scenario {
        name: "sentinel-failover-min-replicas",
        run: sentinel_failover_min_replicas,
    },
    Scenario {
        name: "postgres-holder-sigkill",
        run: |ms| sql_holder_sigkill(SqlKind::Postgres, ms),
    },
    Scenario {
        name: "postgres-holder-sigstop",
        run: |ms| sql_holder_sigstop(SqlKind::Postgres, ms),
    },
    Scenario {
        name: "postgres-latency-and-cuts",
        run: |ms| sql_latency_and_cuts(SqlKind::Postgres, ms),
    },
    Scenario {
        name: "postgres-restart",
        run: |ms| sql_restart(SqlKind::Postgres, ms),
    },
    Scenario {
        name: "mysql-holder-sigkill",
        run: |ms| sql_holder_sigkill(SqlKind::MySql, ms),
    },
    Scenario {
        name: "mysql-holder-sigstop",
        run: |ms| sql_holder_sigstop(SqlKind::MySql, ms),
    },
    Scenario {
        name: "mysql-latency-and-cuts",
        run: |ms| sql_latency_and_cuts(SqlKind::MySql, ms),
    },
    Scenario {
        name: "mysql-restart",
        run: |ms| sql_restart(SqlKind::MySql, ms),
    },
    Scenario {
        name: "zookeeper-holder-sigkill",
        run: |ms| consensus_holder_sigkill(Consensus::ZooKeeper, ms),
    },
    Scenario {
        name: "zookeeper-holder-sigstop",
        run: |ms| consensus_holder_sigstop(Consensus::ZooKeeper, ms),
    },
    Scenario {
        name: "zookeeper-member-killed",
        run: |ms| consensus_member_killed(Consensus::ZooKeeper, false, ms),
    },
    Scenario {
        name: "zookeeper-leader-killed",
        run: |ms| consensus_member_killed(Consensus::ZooKeeper, true, ms),
    },
    Scenario {
        name: "etcd-holder-sigkill",
        run: |ms| consensus_holder_sigkill(Consensus::Etcd, ms),
    },
    Scenario {
        name: "etcd-holder-sigstop",
        run: |ms| consensus_holder_sigstop(Consensus::Etcd, ms),
    },
    Scenario {
        name: "etcd-member-killed",
        run: |ms| consensus_member_killed(Consensus::Etcd, false, ms),
    },
    Scenario {
        name: "etcd-leader-killed",
        run: |ms| consensus_member_killed(Consensus::Etcd, true, ms),
    },
];

/// One private Redis server.
fn single() -> std::io::Result<Topology> {
    Ok(Topology::Single(RedisServer::start()?))
}

/// `count` independent masters.
fn redlock(count: usize) -> std::io::Result<Topology> {
    let masters = (0..count)
        .map(|_| RedisServer::start())
        .collect::<Result<_, _>>()?;
    Ok(Topology::Redlock(masters))
}

/// A Redis Cluster of 3 masters with a replica each.
fn cluster() -> Result<Topology, Box<dyn std::error::Error>> {
    let cluster = tokio::runtime::Runtime::new()?.block_on(RedisCluster::start(3, 1))?;
    Ok(Topology::Cluster(cluster))
}

/// A Sentinel group; sections ask for `min_replicas`.
fn sentinel(min_replicas: u32) -> Result<Topology, Box<dyn std::error::Error>> {
    let group = tokio::runtime::Runtime::new()?.block_on(SentinelGroup::start("torture"))?;
    Ok(Topology::Sentinel(Box::new(group), min_replicas))
}

/// Bodies that outlast a 2 × TTL outage: a holder that did not stop at its loss deadline
/// would still run when the server, back, hands its expired key to the next waiter.
const OUTLASTING_BODY_MS: u64 = 2_500;

/// The Redis server a fault hits.
fn redis_server(topology: &mut Topology) -> Result<&mut RedisServer, Box<dyn std::error::Error>> {
    topology
        .server()
        .ok_or_else(|| "this fault needs a Redis server".into())
}

/// A lock table of its own on the machine's `kind` of database.
fn database(kind: SqlKind) -> Result<Topology, Box<dyn std::error::Error>> {
    let reached = tokio::runtime::Runtime::new()?.block_on(SqlDatabase::reach(kind));
    let database = reached.ok_or_else(|| format!("no {kind:?} server to run the scenario on"))?;
    Ok(Topology::Sql(database))
}

fn sleep_ms(ms: u64) {
    std::thread::sleep(Duration::from_millis(ms));
}

/// Runs `command` on a connection of its own to `server` (the reply may never come in time:
/// the command is what matters).
fn send(server: &RedisServer, command: redis::Cmd) -> Result<(), Box<dyn std::error::Error>> {
    tokio::runtime::Runtime::new()?.block_on(async {
        let mut admin = redis::Client::open(server.url())?
            .get_multiplexed_async_connection()
            .await?;
        let _: redis::RedisResult<()> = command.query_async(&mut admin).await;
        Ok(())
    })
}

fn no_faults(run_ms: u64) -> Outcome {
    let run = Run::start("no faults", single()?, 3, run_ms, false)?;
    run.finish(Promise::Exclusion, None)
}

fn holder_sigkill(run_ms: u64) -> Outcome {
    killed_holder("holder SIGKILL", single()?, run_ms)
}

/// A worker killed with SIGKILL a third into the run: its leases expire, and the others go
/// on without overlapping.
fn killed_holder(scenario: &'static str, topology: Topology, run_ms: u64) -> Outcome {
    let mut run = Run::start(scenario, topology, 3, run_ms, false)?;
    sleep_ms(run_ms / 3);
    run.workers[0].kill()?;
    run.finish(Promise::Exclusion, Some(0))
}

fn client_kill(run_ms: u64) -> Outcome {
    let mut run = Run::start("CLIENT KILL every 300 ms", single()?, 3, run_ms, false)?;
    let started = Instant::now();
    while started.elapsed() < Duration::from_millis(run_ms) {
        sleep_ms(300);
        let mut kill = redis::cmd("CLIENT");
        kill.arg(&["KILL", "TYPE", "normal", "SKIPME", "yes"]);
        send(redis_server(&mut run.topology)?, kill)?;
    }
    run.finish(Promise::Exclusion, None)
}

fn latency_and_cuts(run_ms: u64) -> Outcome {
    cut_connections(
        "20 ms latency, connections cut every 500 ms",
        single()?,
        run_ms,
    )
}

/// 20 ms of latency, and every connection cut every 500 ms, by a proxy in front of the
/// server.
fn cut_connections(scenario: &'static str, topology: Topology, run_ms: u64) -> Outcome {
    let run = Run::start(scenario, topology, 3, run_ms, true)?;
    if let Some(proxy) = &run.proxy {
        proxy.set_latency(Duration::from_millis(20));
        let started = Instant::now();
        while started.elapsed() < Duration::from_millis(run_ms) {
            sleep_ms(500);
            proxy.sever();
        }
    }
    run.finish(Promise::Exclusion, None)
}

/// A server outage of 2 × TTL a quarter into the run, applied by `fault`, with bodies that
/// outlast it.
fn server_outage(
    scenario: &'static str,
    server: RedisServer,
    run_ms: u64,
    fault: impl FnOnce(&RedisServer) -> Result<(), Box<dyn std::error::Error>>,
) -> Outcome {
    let mut run = Run::start(
        scenario,
        Topology::Single(server),
        OUTLASTING_BODY_MS,
        run_ms,
        false,
    )?;
    sleep_ms(run_ms / 4);
    fault(redis_server(&mut run.topology)?)?;
    run.finish(Promise::Exclusion, None)
}

fn redis_sigstop(run_ms: u64) -> Outcome {
    server_outage(
        "Redis SIGSTOP 2 x TTL",
        RedisServer::start()?,
        run_ms,
        |server| {
            server.pause()?;
            sleep_ms(TTL_MS * 2);
            Ok(server.resume()?)
        },
    )
}

fn client_pause(run_ms: u64) -> Outcome {
    server_outage(
        "CLIENT PAUSE 2 x TTL",
        RedisServer::start()?,
        run_ms,
        |server| {
            let mut pause = redis::cmd("CLIENT");
            pause.arg("PAUSE").arg(TTL_MS * 2);
            send(server, pause)
        },
    )
}

fn debug_sleep(run_ms: u64) -> Outcome {
    let server = RedisServer::start_with(&["--enable-debug-command", "local"])?;
    server_outage("DEBUG SLEEP 2 x TTL", server, run_ms, |server| {
        let mut sleep = redis::cmd("DEBUG");
        sleep.arg("SLEEP").arg((TTL_MS * 2) as f64 / 1000.0);
        // The reply comes only after the sleep, past the admin connection's response
        // timeout: wait out the sleep here.
        send(server, sleep)?;
        sleep_ms(TTL_MS * 2);
        Ok(())
    })
}

fn holder_sigstop(run_ms: u64) -> Outcome {
    frozen_holder("holder SIGSTOP 2 x TTL", single()?, run_ms)
}

fn frozen_holder(scenario: &'static str, topology: Topology, run_ms: u64) -> Outcome {
    // Its body outlasts the freeze, so that after thawing it still runs and must be stopped.
    let run = Run::start(scenario, topology, OUTLASTING_BODY_MS, run_ms, false)?;
    let Some(holder) = run.first_to_enter() else {
        return Err("no worker entered a critical section".into());
    };
    // Frozen inside its section: nothing can keep a frozen process from holding, so its
    // section overlaps the next holder's; the resource refuses its late write, and its body
    // stops at its first await after it thaws.
    let worker = run.workers[holder].id();
    stop_process(worker)?;
    sleep_ms(TTL_MS * 2);
    continue_process(worker)?;
    run.finish(Promise::FencingOnly, None)
}

fn clock_jump(run_ms: u64) -> Outcome {
    let dir = std::env::temp_dir().join(format!("fencelock-clockshift-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let shim = dir.join("clockshift.so");
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/bin/torture/clockshift.c");
    let built = Command::new("gcc")
        .args(["-O2", "-shared", "-fPIC", "-o"])
        .arg(&shim)
        .arg(&source)
        .status()?;
    if !built.success() {
        return Err("the clock shim does not compile".into());
    }
    let offset = dir.join("offset_ms");
    std::fs::write(&offset, "0")?;
    let (shim, offset_path) = (shim.to_string_lossy(), offset.to_string_lossy());
    let env = [("LD_PRELOAD", &*shim), ("CLOCKSHIFT_FILE", &*offset_path)];
    let server = RedisServer::start_with_env(&[], &env)?;
    let run = Run::start(
        "server clock +1 h",
        Topology::Single(server),
        200,
        run_ms,
        false,
    )?;
    sleep_ms(run_ms / 2);
    // Every lease expires at once on the server: a second holder enters while the first
    // still runs. Tokens follow the server clock, so the resource refuses the first holder's
    // writes; a body that runs on is stopped by its next renewal.
    std::fs::write(&offset, "3600000")?;
    let report = run.finish(Promise::FencingOnly, None);
    let _ = std::fs::remove_dir_all(&dir);
    report
}

fn redis_restart(run_ms: u64) -> Outcome {
    let mut run = Run::start("Redis restart (data lost)", single()?, 200, run_ms, false)?;
    sleep_ms(run_ms / 2);
    redis_server(&mut run.topology)?.restart()?;
    run.finish(Promise::FencingOnly, None)
}

/// Redlock over 5 masters, 2 of them killed a third into the run: a majority is left, so
/// exclusion holds and the work goes on.
fn redlock_two_of_five_killed(run_ms: u64) -> Outcome {
    let mut run = Run::start(
        "Redlock(5): 2 masters SIGKILL",
        redlock(5)?,
        3,
        run_ms,
        false,
    )?;
    sleep_ms(run_ms / 3);
    if let Topology::Redlock(masters) = &mut run.topology {
        for master in &mut masters[3..] {
            master.kill()?;
        }
    }
    run.finish(Promise::Exclusion, None)
}

/// Redlock over 3 masters, two of them restarted without their data one after the other
/// while locks are held: a second majority can form beside a held lock (Redlock's known
/// hole), and fencing refuses the stale holder.
fn redlock_restart(run_ms: u64) -> Outcome {
    let mut run = Run::start(
        "Redlock(3): masters restarted (data lost)",
        redlock(3)?,
        200,
        run_ms,
        false,
    )?;
    if let Topology::Redlock(masters) = &mut run.topology {
        sleep_ms(run_ms / 3);
        masters[1].restart()?;
        sleep_ms(run_ms / 6);
        masters[2].restart()?;
    }
    run.finish(Promise::FencingOnly, None)
}

/// The master behind Sentinel killed a third into the run; the replica is promoted and the
/// workers follow it. A grant the replica had not received yet is lost with the master.
fn sentinel_failover(run_ms: u64) -> Outcome {
    sentinel_master_killed("Sentinel: master SIGKILL, failover", 0, run_ms)
}

/// The same with `min_replicas = 1`: grants count only once the replica has them.
fn sentinel_failover_min_replicas(run_ms: u64) -> Outcome {
    sentinel_master_killed("Sentinel: master SIGKILL, min_replicas 1", 1, run_ms)
}

fn sentinel_master_killed(scenario: &'static str, min_replicas: u32, run_ms: u64) -> Outcome {
    let mut run = Run::start(scenario, sentinel(min_replicas)?, 3, run_ms, false)?;
    sleep_ms(run_ms / 3);
    if let Topology::Sentinel(group, _) = &mut run.topology {
        let old_port = group.master.port();
        group.master.kill()?;
        tokio::runtime::Runtime::new()?.block_on(group.wait_for_failover_from(old_port))?;
    }
    run.finish(Promise::FencingOnly, None)
}

/// A manual `CLUSTER FAILOVER` of the first master a third into the run: its replica takes
/// over in step with it, so no grant is lost and exclusion holds.
fn cluster_failover(run_ms: u64) -> Outcome {
    let run = Run::start("Cluster: CLUSTER FAILOVER", cluster()?, 3, run_ms, false)?;
    sleep_ms(run_ms / 3);
    if let Topology::Cluster(cluster) = &run.topology {
        tokio::runtime::Runtime::new()?.block_on(async {
            let replica = cluster
                .replica_of(0)
                .await
                .ok_or("the first master has no replica")?;
            let mut connection = cluster.nodes[replica].connection().await?;
            redis::cmd("CLUSTER")
                .arg("FAILOVER")
                .query_async::<()>(&mut connection)
                .await?;
            Ok::<_, Box<dyn std::error::Error>>(())
        })?;
    }
    run.finish(Promise::Exclusion, None)
}

/// The first master killed a third into the run: the cluster promotes its replica after the
/// node timeout, and a grant the replica had not received is lost with the master.
fn cluster_master_sigkill(run_ms: u64) -> Outcome {
    let mut run = Run::start("Cluster: master SIGKILL", cluster()?, 3, run_ms, false)?;
    sleep_ms(run_ms / 3);
    if let Topology::Cluster(cluster) = &mut run.topology {
        cluster.nodes[0].kill()?;
        tokio::runtime::Runtime::new()?.block_on(cluster.wait_until_ready())?;
    }
    run.finish(Promise::FencingOnly, None)
}

/// The scenario's name in the table, for `kind`'s database.
fn on(kind: SqlKind, postgres: &'static str, mysql: &'static str) -> &'static str {
    match kind {
        SqlKind::Postgres => postgres,
        SqlKind::MySql => mysql,
    }
}

fn sql_holder_sigkill(kind: SqlKind, run_ms: u64) -> Outcome {
    let name = on(kind, "PostgreSQL: holder SIGKILL", "MySQL: holder SIGKILL");
    killed_holder(name, database(kind)?, run_ms)
}

fn sql_holder_sigstop(kind: SqlKind, run_ms: u64) -> Outcome {
    let name = on(
        kind,
        "PostgreSQL: holder SIGSTOP 2 x TTL",
        "MySQL: holder SIGSTOP 2 x TTL",
    );
    frozen_holder(name, database(kind)?, run_ms)
}

fn sql_latency_and_cuts(kind: SqlKind, run_ms: u64) -> Outcome {
    let name = on(
        kind,
        "PostgreSQL: 20 ms latency, cuts every 500 ms",
        "MySQL: 20 ms latency, cuts every 500 ms",
    );
    cut_connections(name, database(kind)?, run_ms)
}

/// The database server restarted a third into the run (its data on disk survives): holders
/// whose renewal cannot reach it stop at their loss deadline, and the rows' expiry on the
/// database's clock keeps the next holder out until then.
fn sql_restart(kind: SqlKind, run_ms: u64) -> Outcome {
    let name = on(kind, "PostgreSQL: server restart", "MySQL: server restart");
    let run = Run::start(name, database(kind)?, 200, run_ms, false)?;
    sleep_ms(run_ms / 3);
    if let Topology::Sql(database) = &run.topology {
        tokio::runtime::Runtime::new()?.block_on(database.restart_server())?;
    }
    run.finish(Promise::Exclusion, None)
}

/// A consensus store the scenarios below run on: three members each.
#[derive(Clone, Copy)]
enum Consensus {
    ZooKeeper,
    Etcd,
}

impl Consensus {
    fn start(self) -> std::io::Result<Topology> {
        Ok(match self {
            Consensus::ZooKeeper => Topology::ZooKeeper(ZooKeeperEnsemble::start(3)?),
            Consensus::Etcd => Topology::Etcd(EtcdCluster::start(3)?),
        })
    }

    /// The scenario's name in the table.
    fn named(self, zookeeper: &'static str, etcd: &'static str) -> &'static str {
        match self {
            Consensus::ZooKeeper => zookeeper,
            Consensus::Etcd => etcd,
        }
    }
}

/// A holder killed with SIGKILL: its entries lapse (its lease), or go with its session.
fn consensus_holder_sigkill(store: Consensus, run_ms: u64) -> Outcome {
    let name = store.named("ZooKeeper(3): holder SIGKILL", "etcd(3): holder SIGKILL");
    killed_holder(name, store.start()?, run_ms)
}

/// A holder frozen past its lease and its session inside its section: fencing refuses it.
fn consensus_holder_sigstop(store: Consensus, run_ms: u64) -> Outcome {
    let name = store.named(
        "ZooKeeper(3): holder SIGSTOP 2 x TTL",
        "etcd(3): holder SIGSTOP 2 x TTL",
    );
    frozen_holder(name, store.start()?, run_ms)
}

/// A member (a follower, or the leader) killed a third into the run: a majority is left, so
/// the work goes on after an election, and exclusion holds throughout.
fn consensus_member_killed(store: Consensus, leader: bool, run_ms: u64) -> Outcome {
    let name = match leader {
        true => store.named("ZooKeeper(3): leader SIGKILL", "etcd(3): leader SIGKILL"),
        false => store.named(
            "ZooKeeper(3): follower SIGKILL",
            "etcd(3): follower SIGKILL",
        ),
    };
    let mut run = Run::start(name, store.start()?, 3, run_ms, false)?;
    sleep_ms(run_ms / 3);
    match &mut run.topology {
        Topology::ZooKeeper(ensemble) => {
            let leading = ensemble.leader().ok_or("no ZooKeeper leader")?;
            ensemble.kill(if leader { leading } else { (leading + 1) % 3 })?;
        }
        Topology::Etcd(cluster) => {
            let leading = cluster.leader().ok_or("no etcd leader")?;
            cluster.kill(if leader { leading } else { (leading + 1) % 3 })?;
        }
        _ => return Err("not a consensus store".into()),
    }
    run.finish(Promise::Exclusion, None)
}

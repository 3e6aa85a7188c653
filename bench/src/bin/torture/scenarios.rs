//! The fault scenarios. Each starts a run, applies its fault while the workers work, and
//! returns what the history and the resource say.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use fencelock::testing::{
    EtcdCluster, RedisCluster, RedisServer, SentinelGroup, SqlDatabase, SqlKind, ZooKeeperEnsemble,
    continue_process, stop_process,
};

use crate::run::{Expect, Floor, Promise, Report, Run, Topology};
use crate::worker::{Kind, TTL_MS};

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
    Scenario {
        name: "read-write-holder-sigkill",
        run: |ms| kind_holder_sigkill(Kind::ReadWrite, ms),
    },
    Scenario {
        name: "read-write-holder-sigstop",
        run: |ms| kind_holder_sigstop(Kind::ReadWrite, ms),
    },
    Scenario {
        name: "read-write-redis-restart",
        run: |ms| kind_redis_restart(Kind::ReadWrite, ms),
    },
    Scenario {
        name: "read-write-latency-and-cuts",
        run: |ms| kind_latency_and_cuts(Kind::ReadWrite, ms),
    },
    Scenario {
        name: "semaphore-holder-sigkill",
        run: |ms| kind_holder_sigkill(Kind::Semaphore, ms),
    },
    Scenario {
        name: "semaphore-holder-sigstop",
        run: |ms| kind_holder_sigstop(Kind::Semaphore, ms),
    },
    Scenario {
        name: "semaphore-redis-restart",
        run: |ms| kind_redis_restart(Kind::Semaphore, ms),
    },
    Scenario {
        name: "semaphore-latency-and-cuts",
        run: |ms| kind_latency_and_cuts(Kind::Semaphore, ms),
    },
    Scenario {
        name: "segmented-holder-sigkill",
        run: |ms| kind_holder_sigkill(Kind::Segmented, ms),
    },
    Scenario {
        name: "segmented-holder-sigstop",
        run: |ms| kind_holder_sigstop(Kind::Segmented, ms),
    },
    Scenario {
        name: "segmented-redis-restart",
        run: |ms| kind_redis_restart(Kind::Segmented, ms),
    },
    Scenario {
        name: "segmented-latency-and-cuts",
        run: |ms| kind_latency_and_cuts(Kind::Segmented, ms),
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

/// Runs `future` to its end on a runtime of its own (the scenarios run on plain threads).
fn block_on<T>(future: impl Future<Output = T>) -> std::io::Result<T> {
    Ok(tokio::runtime::Runtime::new()?.block_on(future))
}

/// Runs `command` on a connection of its own to `server`, waiting at most `wait` for the
/// reply (which may never come in time: the command is what matters); the reply, if any.
fn send(server: &RedisServer, command: redis::Cmd, wait: Duration) -> Option<redis::Value> {
    block_on(async {
        let mut admin = server.connection().await.ok()?;
        let reply = tokio::time::timeout(wait, command.query_async(&mut admin)).await;
        reply.ok()?.ok()
    })
    .ok()
    .flatten()
}

/// Whether `server` answers a `PING` from a new connection within 300 ms: what an outage is
/// checked by.
fn answers(server: &RedisServer) -> bool {
    send(server, redis::cmd("PING"), Duration::from_millis(300)).is_some()
}

/// The server's `run_id`: a restart changes it.
fn run_id(server: &RedisServer) -> Option<String> {
    block_on(server.info("server", "run_id")).ok().flatten()
}

/// Whether process `pid` is stopped (`T` in `/proc/<pid>/stat`) within a second: a signal is
/// delivered a moment after it is sent.
fn stops(pid: u32) -> bool {
    let stopped = || {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // The state follows the command name, which is in parentheses.
        stat.rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('T'))
    };
    let started = Instant::now();
    while !stopped() {
        if started.elapsed() > Duration::from_secs(1) {
            return false;
        }
        sleep_ms(5);
    }
    true
}

/// What a scenario whose `faults` hit must show: its promise, and at least `floor` sections.
fn expect(promise: Promise, floor: Floor, faults: u32) -> Expect {
    Expect {
        promise,
        killed: None,
        floor,
        faults,
    }
}

fn no_faults(run_ms: u64) -> Outcome {
    let run = Run::start("no faults", Kind::Mutex, single()?, 3, run_ms, false)?;
    run.finish(
        expect(Promise::Exclusion, Floor::PerSecond(50.0), 0),
        run_ms,
    )
}

fn holder_sigkill(run_ms: u64) -> Outcome {
    killed_holder(
        "holder SIGKILL",
        Kind::Mutex,
        single()?,
        Floor::PerSecond(50.0),
        run_ms,
    )
}

/// A worker killed with SIGKILL a third into the run: its leases expire, and the others go
/// on without overlapping. The fault hit if the worker died of the signal.
fn killed_holder(
    scenario: &'static str,
    kind: Kind,
    topology: Topology,
    floor: Floor,
    run_ms: u64,
) -> Outcome {
    use std::os::unix::process::ExitStatusExt;
    let mut run = Run::start(scenario, kind, topology, 3, run_ms, false)?;
    sleep_ms(run_ms / 3);
    run.workers[0].kill()?;
    let status = run.workers[0].wait()?;
    run.fault(status.signal() == Some(libc::SIGKILL));
    let expect = Expect {
        killed: Some(0),
        ..expect(Promise::Exclusion, floor, 1)
    };
    run.finish(expect, run_ms)
}

fn client_kill(run_ms: u64) -> Outcome {
    let mut run = Run::start(
        "CLIENT KILL every 300 ms",
        Kind::Mutex,
        single()?,
        3,
        run_ms,
        false,
    )?;
    let started = Instant::now();
    let mut kills = 0;
    while started.elapsed() < Duration::from_millis(run_ms) {
        sleep_ms(300);
        let mut kill = redis::cmd("CLIENT");
        kill.arg(&["KILL", "TYPE", "normal", "SKIPME", "yes"]);
        let server = redis_server(&mut run.topology)?;
        let killed = send(server, kill, Duration::from_secs(1));
        // Each kill that closed connections is a fault that hit.
        let hit = matches!(killed, Some(redis::Value::Int(n)) if n > 0);
        run.fault(hit);
        kills += 1;
    }
    let faults = kills / 2;
    run.finish(
        expect(Promise::Exclusion, Floor::PerSecond(50.0), faults),
        run_ms,
    )
}

fn latency_and_cuts(run_ms: u64) -> Outcome {
    cut_connections(
        "20 ms latency, connections cut every 500 ms",
        Kind::Mutex,
        single()?,
        Floor::PerSecond(5.0),
        LATENCY_MS,
        run_ms,
    )
}

/// The latency the proxy of the latency scenarios adds each way.
const LATENCY_MS: u64 = 20;

/// `latency_ms` of latency, and every connection cut every 500 ms, by a proxy in front of
/// the server. A cut hit if it closed connections.
fn cut_connections(
    scenario: &'static str,
    kind: Kind,
    topology: Topology,
    floor: Floor,
    latency_ms: u64,
    run_ms: u64,
) -> Outcome {
    let mut run = Run::start(scenario, kind, topology, 3, run_ms, true)?;
    let mut cuts = 0;
    if let Some(proxy) = run.proxy.take() {
        proxy.set_latency(Duration::from_millis(latency_ms));
        let started = Instant::now();
        while started.elapsed() < Duration::from_millis(run_ms) {
            sleep_ms(500);
            let severed = proxy.severed();
            proxy.sever();
            cuts += 1;
            // Counted as the connections close: give them a moment.
            sleep_ms(20);
            run.fault(proxy.severed() > severed);
        }
        run.proxy = Some(proxy);
    }
    run.finish(expect(Promise::Exclusion, floor, cuts / 2), run_ms)
}

/// A server outage of 2 × TTL a quarter into the run, applied by `fault` (which says whether
/// the server stopped answering), with bodies that outlast it.
fn server_outage(
    scenario: &'static str,
    server: RedisServer,
    run_ms: u64,
    fault: impl FnOnce(&RedisServer) -> Result<bool, Box<dyn std::error::Error>>,
) -> Outcome {
    let mut run = Run::start(
        scenario,
        Kind::Mutex,
        Topology::Single(server),
        OUTLASTING_BODY_MS,
        run_ms,
        false,
    )?;
    sleep_ms(run_ms / 4);
    let hit = fault(redis_server(&mut run.topology)?)?;
    run.fault(hit);
    run.finish(expect(Promise::Exclusion, Floor::AtLeast(3), 1), run_ms)
}

fn redis_sigstop(run_ms: u64) -> Outcome {
    server_outage(
        "Redis SIGSTOP 2 x TTL",
        RedisServer::start()?,
        run_ms,
        |server| {
            server.pause()?;
            let silent = !answers(server);
            sleep_ms(TTL_MS * 2);
            server.resume()?;
            Ok(silent)
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
            let paused = send(server, pause, Duration::from_secs(1)).is_some();
            let silent = !answers(server);
            sleep_ms(TTL_MS * 2);
            Ok(paused && silent)
        },
    )
}

fn debug_sleep(run_ms: u64) -> Outcome {
    let server = RedisServer::start_with(&["--enable-debug-command", "local"])?;
    server_outage("DEBUG SLEEP 2 x TTL", server, run_ms, |server| {
        let mut sleep = redis::cmd("DEBUG");
        sleep.arg("SLEEP").arg((TTL_MS * 2) as f64 / 1000.0);
        // The reply comes only after the sleep: the command is sent on a thread of its own,
        // and the server checked while it sleeps.
        let url = server.url();
        let sleeping = std::thread::spawn(move || {
            let client = redis::Client::open(url)?;
            let mut connection = client.get_connection()?;
            sleep.query::<()>(&mut connection)
        });
        sleep_ms(100);
        let silent = !answers(server);
        let slept = sleeping
            .join()
            .map_err(|_| "the DEBUG SLEEP thread panicked")?;
        Ok(silent && slept.is_ok())
    })
}

fn holder_sigstop(run_ms: u64) -> Outcome {
    frozen_holder("holder SIGSTOP 2 x TTL", Kind::Mutex, single()?, run_ms)
}

/// A worker frozen inside its section for 2 × TTL; the fault hit if it was stopped.
fn frozen_holder(scenario: &'static str, kind: Kind, topology: Topology, run_ms: u64) -> Outcome {
    // Its body outlasts the freeze, so that after thawing it still runs and must be stopped.
    let mut run = Run::start(scenario, kind, topology, OUTLASTING_BODY_MS, run_ms, false)?;
    let Some(holder) = run.first_to_enter() else {
        return Err("no worker entered a critical section".into());
    };
    // Frozen inside its section: nothing can keep a frozen process from holding, so its
    // section overlaps the next holder's; the resource refuses its late write, and its body
    // stops at its first await after it thaws.
    let worker = run.workers[holder].id();
    stop_process(worker)?;
    let stopped = stops(worker);
    sleep_ms(TTL_MS * 2);
    continue_process(worker)?;
    run.fault(stopped);
    run.finish(expect(Promise::FencingOnly, Floor::AtLeast(3), 1), run_ms)
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
    let mut run = Run::start(
        "server clock +1 h",
        Kind::Mutex,
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
    let jumped = match send(
        redis_server(&mut run.topology)?,
        redis::cmd("TIME"),
        Duration::from_secs(1),
    ) {
        Some(redis::Value::Array(time)) => match time.first() {
            Some(redis::Value::BulkString(seconds)) => std::str::from_utf8(seconds)
                .ok()
                .and_then(|s| s.parse::<u64>().ok())
                .is_some_and(|server_s| {
                    let local_s = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |d| d.as_secs());
                    server_s >= local_s + 3_500
                }),
            _ => false,
        },
        _ => false,
    };
    run.fault(jumped);
    let report = run.finish(
        expect(Promise::FencingOnly, Floor::PerSecond(5.0), 1),
        run_ms,
    );
    let _ = std::fs::remove_dir_all(&dir);
    report
}

fn redis_restart(run_ms: u64) -> Outcome {
    restarted_redis("Redis restart (data lost)", Kind::Mutex, run_ms)
}

/// The one server restarted without its data half-way: the fault hit if its `run_id` changed.
fn restarted_redis(scenario: &'static str, kind: Kind, run_ms: u64) -> Outcome {
    let mut run = Run::start(scenario, kind, single()?, 200, run_ms, false)?;
    sleep_ms(run_ms / 2);
    let server = redis_server(&mut run.topology)?;
    let before = run_id(server);
    server.restart()?;
    let restarted = before.is_some() && run_id(server) != before;
    run.fault(restarted);
    run.finish(
        expect(Promise::FencingOnly, Floor::PerSecond(5.0), 1),
        run_ms,
    )
}

/// Redlock over 5 masters, 2 of them killed a third into the run: a majority is left, so
/// exclusion holds and the work goes on.
fn redlock_two_of_five_killed(run_ms: u64) -> Outcome {
    let mut run = Run::start(
        "Redlock(5): 2 masters SIGKILL",
        Kind::Mutex,
        redlock(5)?,
        3,
        run_ms,
        false,
    )?;
    sleep_ms(run_ms / 3);
    if let Topology::Redlock(masters) = &mut run.topology {
        let mut dead = 0;
        for master in &mut masters[3..] {
            master.kill()?;
            dead += u32::from(!answers(master));
        }
        run.fault(dead == 2);
    }
    run.finish(
        expect(Promise::Exclusion, Floor::PerSecond(20.0), 1),
        run_ms,
    )
}

/// Redlock over 3 masters, two of them restarted without their data one after the other
/// while locks are held: a second majority can form beside a held lock (Redlock's known
/// hole), and fencing refuses the stale holder.
fn redlock_restart(run_ms: u64) -> Outcome {
    let mut run = Run::start(
        "Redlock(3): masters restarted (data lost)",
        Kind::Mutex,
        redlock(3)?,
        200,
        run_ms,
        false,
    )?;
    let mut restarted = Vec::new();
    if let Topology::Redlock(masters) = &mut run.topology {
        for (master, pause) in [(1, run_ms / 3), (2, run_ms / 6)] {
            sleep_ms(pause);
            let before = run_id(&masters[master]);
            masters[master].restart()?;
            restarted.push(before.is_some() && run_id(&masters[master]) != before);
        }
    }
    for hit in restarted {
        run.fault(hit);
    }
    run.finish(
        expect(Promise::FencingOnly, Floor::PerSecond(5.0), 2),
        run_ms,
    )
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

/// The fault hit once the Sentinels name another master.
fn sentinel_master_killed(scenario: &'static str, min_replicas: u32, run_ms: u64) -> Outcome {
    let mut run = Run::start(
        scenario,
        Kind::Mutex,
        sentinel(min_replicas)?,
        3,
        run_ms,
        false,
    )?;
    sleep_ms(run_ms / 3);
    if let Topology::Sentinel(group, _) = &mut run.topology {
        let old_port = group.master.port();
        group.master.kill()?;
        let new_port = block_on(group.wait_for_failover_from(old_port))??;
        run.fault(new_port != old_port);
    }
    // The failover takes a second or two of the run, more on a loaded machine, where a
    // section also takes longer: the floor shows that sections ran, not how fast (a run
    // beside builds and tests of the workspace made 12 in 3 s, under a floor of 24).
    run.finish(
        expect(Promise::FencingOnly, Floor::PerSecond(3.0), 1),
        run_ms,
    )
}

/// A manual `CLUSTER FAILOVER` of the first master a third into the run: its replica takes
/// over in step with it, so no grant is lost and exclusion holds. The fault hit once the
/// replica is a master.
fn cluster_failover(run_ms: u64) -> Outcome {
    let mut run = Run::start(
        "Cluster: CLUSTER FAILOVER",
        Kind::Mutex,
        cluster()?,
        3,
        run_ms,
        false,
    )?;
    sleep_ms(run_ms / 3);
    if let Topology::Cluster(cluster) = &run.topology {
        let promoted = block_on(async {
            let replica = cluster
                .replica_of(0)
                .await
                .ok_or("the first master has no replica")?;
            let mut connection = cluster.nodes[replica].connection().await?;
            redis::cmd("CLUSTER")
                .arg("FAILOVER")
                .query_async::<()>(&mut connection)
                .await?;
            for _ in 0..100 {
                if cluster.masters().await.contains(&replica) {
                    return Ok(true);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Ok::<_, Box<dyn std::error::Error>>(false)
        })??;
        run.fault(promoted);
    }
    run.finish(
        expect(Promise::Exclusion, Floor::PerSecond(50.0), 1),
        run_ms,
    )
}

/// The first master killed a third into the run: the cluster promotes its replica after the
/// node timeout, and a grant the replica had not received is lost with the master. The fault
/// hit once the cluster serves every slot again without it.
fn cluster_master_sigkill(run_ms: u64) -> Outcome {
    let mut run = Run::start(
        "Cluster: master SIGKILL",
        Kind::Mutex,
        cluster()?,
        3,
        run_ms,
        false,
    )?;
    sleep_ms(run_ms / 3);
    if let Topology::Cluster(cluster) = &mut run.topology {
        cluster.nodes[0].kill()?;
        block_on(cluster.wait_until_ready())??;
        let hit = !answers(&cluster.nodes[0]);
        run.fault(hit);
    }
    run.finish(
        expect(Promise::FencingOnly, Floor::PerSecond(50.0), 1),
        run_ms,
    )
}

/// The scenario's name in the table, for `kind`'s database.
/// What `kind`'s scenario takes: `postgres`'s or `mysql`'s.
fn on<T>(kind: SqlKind, postgres: T, mysql: T) -> T {
    match kind {
        SqlKind::Postgres => postgres,
        SqlKind::MySql => mysql,
    }
}

fn sql_holder_sigkill(kind: SqlKind, run_ms: u64) -> Outcome {
    let name = on(kind, "PostgreSQL: holder SIGKILL", "MySQL: holder SIGKILL");
    killed_holder(
        name,
        Kind::Mutex,
        database(kind)?,
        Floor::PerSecond(20.0),
        run_ms,
    )
}

fn sql_holder_sigstop(kind: SqlKind, run_ms: u64) -> Outcome {
    let name = on(
        kind,
        "PostgreSQL: holder SIGSTOP 2 x TTL",
        "MySQL: holder SIGSTOP 2 x TTL",
    );
    frozen_holder(name, Kind::Mutex, database(kind)?, run_ms)
}

fn sql_latency_and_cuts(kind: SqlKind, run_ms: u64) -> Outcome {
    let name = on(
        kind,
        "PostgreSQL: 20 ms latency, cuts every 500 ms",
        "MySQL: 5 ms latency, cuts every 500 ms",
    );
    // A MySQL acquire holds the key's fence row for 4 round trips: at 20 ms that is about 6
    // acquires a second per key, and the workers' 32 contending tasks time out queued on it
    // (a worker could end its run unanswered). At 5 ms the cuts still land inside those
    // transactions.
    let (floor, latency_ms) = on(
        kind,
        (Floor::PerSecond(5.0), LATENCY_MS),
        (Floor::PerSecond(1.0), 5),
    );
    cut_connections(
        name,
        Kind::Mutex,
        database(kind)?,
        floor,
        latency_ms,
        run_ms,
    )
}

/// The database server restarted a third into the run (its data on disk survives): holders
/// whose renewal cannot reach it stop at their loss deadline, and the rows' expiry on the
/// database's clock keeps the next holder out until then. The fault hit once the server
/// answers again after its restart (`restart_server` waits for both).
fn sql_restart(kind: SqlKind, run_ms: u64) -> Outcome {
    let name = on(kind, "PostgreSQL: server restart", "MySQL: server restart");
    let mut run = Run::start(name, Kind::Mutex, database(kind)?, 200, run_ms, false)?;
    sleep_ms(run_ms / 3);
    if let Topology::Sql(database) = &run.topology {
        let restarted = block_on(database.restart_server())?;
        run.fault(restarted.is_ok());
    }
    let floor = on(kind, Floor::PerSecond(5.0), Floor::PerSecond(2.0));
    run.finish(expect(Promise::Exclusion, floor, 1), run_ms)
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
    killed_holder(
        name,
        Kind::Mutex,
        store.start()?,
        Floor::PerSecond(5.0),
        run_ms,
    )
}

/// A holder frozen past its lease and its session inside its section: fencing refuses it.
fn consensus_holder_sigstop(store: Consensus, run_ms: u64) -> Outcome {
    let name = store.named(
        "ZooKeeper(3): holder SIGSTOP 2 x TTL",
        "etcd(3): holder SIGSTOP 2 x TTL",
    );
    frozen_holder(name, Kind::Mutex, store.start()?, run_ms)
}

/// A member (a follower, or the leader) killed a third into the run: a majority is left, so
/// the work goes on after an election, and exclusion holds throughout. The fault hit once
/// the member is gone and a leader (another one, when the leader was killed) serves.
fn consensus_member_killed(store: Consensus, leader: bool, run_ms: u64) -> Outcome {
    let name = match leader {
        true => store.named("ZooKeeper(3): leader SIGKILL", "etcd(3): leader SIGKILL"),
        false => store.named(
            "ZooKeeper(3): follower SIGKILL",
            "etcd(3): follower SIGKILL",
        ),
    };
    let mut run = Run::start(name, Kind::Mutex, store.start()?, 3, run_ms, false)?;
    sleep_ms(run_ms / 3);
    let (killed, leading) = match &mut run.topology {
        Topology::ZooKeeper(ensemble) => {
            let leading = ensemble.leader().ok_or("no ZooKeeper leader")?;
            let killed = if leader { leading } else { (leading + 1) % 3 };
            ensemble.kill(killed)?;
            (killed, elected(|| ensemble.leader(), killed))
        }
        Topology::Etcd(cluster) => {
            let leading = cluster.leader().ok_or("no etcd leader")?;
            let killed = if leader { leading } else { (leading + 1) % 3 };
            cluster.kill(killed)?;
            (killed, elected(|| cluster.leader(), killed))
        }
        _ => return Err("not a consensus store".into()),
    };
    run.fault(leading.is_some_and(|now| now != killed));
    run.finish(expect(Promise::Exclusion, Floor::PerSecond(5.0), 1), run_ms)
}

/// The member that leads once one other than `killed` does (polled for at most 30 s).
fn elected(leader: impl Fn() -> Option<usize>, killed: usize) -> Option<usize> {
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(30) {
        match leader() {
            Some(now) if now != killed => return Some(now),
            _ => sleep_ms(100),
        }
    }
    None
}

/// The lock kinds' scenarios, on one Redis server: a holder killed (exclusion holds: readers
/// beside no writer, no more permits than the semaphore has, no shard held twice).
fn kind_holder_sigkill(kind: Kind, run_ms: u64) -> Outcome {
    let name = kind_named(kind, "holder SIGKILL");
    killed_holder(name, kind, single()?, Floor::PerSecond(20.0), run_ms)
}

/// A holder frozen inside its section: fencing refuses its late writes.
fn kind_holder_sigstop(kind: Kind, run_ms: u64) -> Outcome {
    frozen_holder(
        kind_named(kind, "holder SIGSTOP 2 x TTL"),
        kind,
        single()?,
        run_ms,
    )
}

/// The server restarted without its data: fencing refuses the stale holders.
fn kind_redis_restart(kind: Kind, run_ms: u64) -> Outcome {
    restarted_redis(kind_named(kind, "Redis restart (data lost)"), kind, run_ms)
}

/// Latency and cut connections: exclusion holds.
fn kind_latency_and_cuts(kind: Kind, run_ms: u64) -> Outcome {
    let name = kind_named(kind, "20 ms latency, cuts every 500 ms");
    let floor = Floor::PerSecond(5.0);
    cut_connections(name, kind, single()?, floor, LATENCY_MS, run_ms)
}

/// `fault`'s name for `kind`'s scenario, in the table.
fn kind_named(kind: Kind, fault: &str) -> &'static str {
    Box::leak(format!("{}: {fault}", kind.name()).into_boxed_str())
}

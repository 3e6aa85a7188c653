//! fencelock against rslock and the raw Redis round trip, on one private `redis-server`
//! started here. Run it in release mode:
//!
//! ```text
//! cargo run --release -p fencelock-bench -- [--quick] [--topologies | --telemetry | --kinds | --backends | --w1 | --cost | --open-loop] [--max-in-flight N] [--json PATH] [--svg PATH]
//! ```
//!
//! W0: sequential PING (the floor). W1: uncontended acquire + release (through a guard, and
//! through a `#[redis_lock]` function; beside rslock, in five turns each, taken in turn). W2:
//! 8 workers, each with its own client, incrementing a counter under one key, in five modes
//! (fencelock default, fair, polling; rslock with its default and with a tight retry). Script
//! calls per grant from `INFO commandstats`. W3: 64 workers on 64 keys through one shared
//! client and with a client each, next to `redis-benchmark` SET on the same server. Open-loop
//! latency at 20/50/80/120% of the measured capacity. Client cost (connect time, memory, threads
//! and connections of idle clients; memory per held lock). Topologies: W1 and W3 on one
//! server, Redlock over 3 and 5 masters, Sentinel (also with min_replicas), rslock on 1 and
//! 5, Redis Clusters of 1 to 3 masters, with W2 too. Prints a table per workload and the
//! issue's targets; writes the same figures as JSON (default `target/fencelock-bench.json`).
//! `--quick` runs every workload about 4-10x shorter; `--topologies` runs only the topology
//! table; `--telemetry` only W1 with and without a tracing subscriber and a metrics recorder
//! listening; `--kinds` only the lock kinds (mutex, read, write, semaphore, segmented): W1,
//! round trips per acquisition, and 8 workers on one key of each kind, then several keys at
//! once, then each kind's W1 on every store beside its mutex; `--backends` only the
//! topology table's rows an application chooses between: one Redis server, Redlock(3),
//! PostgreSQL and MySQL (the machine's, `FENCELOCK_POSTGRES_URL` and `FENCELOCK_MYSQL_URL`);
//! `--w1` only W0 and W1 (the guard, the attribute's call, rslock); `--cost` only W0 to W3
//! and the Redis cost per pair (the server's CPU and commands per acquire + release, beside
//! rslock's); `--open-loop` only the open-loop table, at 20/50/80/120% of the capacity, with
//! fencelock's client at `--max-in-flight N` (default: the library's). `--svg PATH` also
//! draws the Redis cost table and W2's waits as a chart.

mod chart;
mod footprint;
mod kinds;
mod locker;
mod open_loop;
mod probe;
mod report;
mod stats;
mod telemetry;
mod topologies;
mod workloads;

use std::path::PathBuf;
use std::time::Duration;

use fencelock::LockClient;
use fencelock::testing::RedisServer;
use serde_json::{Value, json};

use locker::{Locker, RslockRetry};
use probe::ServerCost;
use report::{CostRow, Target};
use workloads::{BoxError, Mode};

/// W1 runs each library in this many turns, taken in turn.
const W1_ROUNDS: usize = 5;

/// How much each workload does.
struct Sizes {
    /// W0 and W1 iterations.
    sequential: usize,
    w2_per_worker: usize,
    w3_per_worker: usize,
    benchmark_requests: usize,
    /// Clients connected for the client cost.
    clients: usize,
    held_locks: usize,
    /// The closed-loop run that finds the open loop's capacity.
    capacity_run: Duration,
    /// Each open-loop run.
    open_loop_run: Duration,
}

const FULL: Sizes = Sizes {
    sequential: 3_000,
    w2_per_worker: 100,
    w3_per_worker: 200,
    benchmark_requests: 100_000,
    clients: 64,
    held_locks: 100_000,
    capacity_run: Duration::from_secs(1),
    open_loop_run: Duration::from_secs(2),
};

const QUICK: Sizes = Sizes {
    sequential: 300,
    w2_per_worker: 10,
    w3_per_worker: 20,
    benchmark_requests: 10_000,
    clients: 64,
    held_locks: 10_000,
    capacity_run: Duration::from_millis(300),
    open_loop_run: Duration::from_millis(500),
};

struct Args {
    quick: bool,
    /// Only the topology table.
    topologies: bool,
    /// Only the telemetry table.
    telemetry: bool,
    /// Only the lock kinds table.
    kinds: bool,
    /// Only the backends table (Redis, Redlock, PostgreSQL, MySQL, ZooKeeper, etcd).
    backends: bool,
    /// Only W0 and W1.
    w1: bool,
    /// Only W0 to W3 and the Redis cost per pair.
    cost: bool,
    /// Only the open-loop table.
    open_loop: bool,
    /// The open loop's bound on fencelock's attempts at the store, if not the default.
    max_in_flight: Option<usize>,
    json: PathBuf,
    /// Where to draw the peer comparison, if anywhere.
    svg: Option<PathBuf>,
}

fn parse_args() -> Result<Args, BoxError> {
    let mut args = Args {
        quick: false,
        topologies: false,
        telemetry: false,
        kinds: false,
        backends: false,
        w1: false,
        cost: false,
        open_loop: false,
        max_in_flight: None,
        json: PathBuf::from("target/fencelock-bench.json"),
        svg: None,
    };
    let mut given = std::env::args().skip(1);
    while let Some(arg) = given.next() {
        match arg.as_str() {
            "--quick" => args.quick = true,
            "--topologies" => args.topologies = true,
            "--telemetry" => args.telemetry = true,
            "--kinds" => args.kinds = true,
            "--backends" => args.backends = true,
            "--w1" => args.w1 = true,
            "--cost" => args.cost = true,
            "--open-loop" => args.open_loop = true,
            "--max-in-flight" => {
                let bound = given.next().ok_or("--max-in-flight needs a number")?;
                args.max_in_flight = Some(bound.parse()?);
            }
            "--json" => args.json = given.next().ok_or("--json needs a path")?.into(),
            "--svg" => args.svg = Some(given.next().ok_or("--svg needs a path")?.into()),
            other => {
                return Err(format!(
                    "unknown argument `{other}`; usage: fencelock-bench [--quick] [--topologies | --telemetry | --kinds | --backends | --w1 | --cost | --open-loop] [--max-in-flight N] [--json PATH] [--svg PATH]"
                )
                .into());
            }
        }
    }
    Ok(args)
}

/// `redis_version` from `INFO server`.
async fn redis_version(redis: &mut redis::aio::MultiplexedConnection) -> Result<String, BoxError> {
    let info: String = redis::cmd("INFO").arg("server").query_async(redis).await?;
    Ok(info
        .lines()
        .find_map(|line| line.strip_prefix("redis_version:"))
        .unwrap_or("unknown")
        .trim()
        .to_owned())
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let args = parse_args()?;
    let sizes = if args.quick { QUICK } else { FULL };
    let profile = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };

    let server = RedisServer::start()?;
    let url = server.url();
    // The inspector: W0's connection, and every INFO read between workloads.
    let mut redis = workloads::connect(&url).await?;
    let version = redis_version(&mut redis).await?;
    let nproc = std::thread::available_parallelism().map_or(0, usize::from);
    println!(
        "fencelock-bench: nproc {nproc}, redis-server {version} on 127.0.0.1:{}, {profile} build{}",
        server.port(),
        if args.quick {
            ", --quick (shorter)"
        } else {
            ""
        }
    );
    if cfg!(debug_assertions) {
        println!(
            "!!! WARNING: DEBUG BUILD. These figures say nothing about the library; run with \
             `cargo run --release -p fencelock-bench` !!!"
        );
    }

    let mut targets = Vec::new();
    if args.topologies {
        let (ping, runs) =
            topologies::compare(sizes.sequential, sizes.w2_per_worker, sizes.w3_per_worker).await?;
        report::topologies(&ping, &runs, &mut targets);
        return Ok(());
    }
    if args.backends {
        let (ping, runs) =
            topologies::backends(sizes.sequential, sizes.w2_per_worker, sizes.w3_per_worker)
                .await?;
        report::topologies(&ping, &runs, &mut targets);
        return Ok(());
    }
    if args.telemetry {
        report::telemetry(&telemetry::overhead(&url, sizes.sequential).await?);
        return Ok(());
    }
    if args.kinds {
        let ping = workloads::ping(&redis, sizes.sequential).await;
        let server_addr = ([127, 0, 0, 1], server.port()).into();
        let (runs, peer) =
            kinds::compare(&url, server_addr, sizes.sequential, sizes.w2_per_worker).await?;
        report::kinds(&ping, &runs, &peer, sizes.w2_per_worker);
        let several = kinds::several_keys(&url, server_addr, sizes.sequential).await?;
        report::several_keys(&ping, &several);
        let stores = kinds::across_stores(&url, sizes.sequential).await?;
        report::kinds_by_store(&stores);
        return Ok(());
    }
    if args.open_loop {
        let client = LockClient::connect(&url).await?;
        if let Some(bound) = args.max_in_flight {
            client.set_max_in_flight(bound)?;
        }
        let fence = Locker::fencelock(client);
        let rs = Locker::rslock(&url, RslockRetry::DEFAULT).await;
        let latency = open_loop_table(&fence, &rs, &sizes).await?;
        return write_json(&args.json, &json!({ "open_loop": latency }));
    }
    let ping = workloads::ping(&redis, sizes.sequential).await;
    let w0 = report::w0(&ping);
    let floor = ping.summary.mean;

    // One client of each library for W1, shared by all W3 workers and the open loop later.
    let attribute_client = LockClient::connect(&url).await?;
    let fence = Locker::fencelock(attribute_client.clone());
    let rs = Locker::rslock(&url, RslockRetry::DEFAULT).await;
    // In turns, so that a machine whose speed drifts weighs on every row alike.
    let per_round = sizes.sequential / W1_ROUNDS;
    let (mut fence_rounds, mut attribute_rounds, mut rs_rounds) =
        (Vec::new(), Vec::new(), Vec::new());
    let (mut fence_cost, mut rs_cost) = (ServerCost::default(), ServerCost::default());
    for _ in 0..W1_ROUNDS {
        let (round, cost) =
            probe::measuring(&mut redis, workloads::uncontended(&fence, per_round)).await?;
        fence_rounds.push(round);
        fence_cost = fence_cost + cost;
        attribute_rounds.push(workloads::uncontended_attribute(&attribute_client, per_round).await);
        let (round, cost) =
            probe::measuring(&mut redis, workloads::uncontended(&rs, per_round)).await?;
        rs_rounds.push(round);
        rs_cost = rs_cost + cost;
    }
    let w1_fence = workloads::Latency::merge(fence_rounds);
    let w1_attribute = workloads::Latency::merge(attribute_rounds);
    let w1_rs = workloads::Latency::merge(rs_rounds);
    let w1_fence_cost = w1_cost_row("fencelock", &w1_fence, fence_cost);
    let w1_rs_cost = w1_cost_row("rslock", &w1_rs, rs_cost);
    let w1_runs = report::W1 {
        guard: &w1_fence,
        attribute: &w1_attribute,
        rslock: &w1_rs,
    };
    let w1 = report::w1(&w1_runs, floor, &mut targets);
    let context = json!({
        "nproc": nproc,
        "redis_version": version,
        "profile": profile,
        "quick": args.quick,
    });
    let mut cost_rows = vec![w1_fence_cost, w1_rs_cost];
    if args.w1 {
        let server_cost = report::server_cost(&cost_rows, &mut targets);
        return write_json(
            &args.json,
            &json!({
                "context": context,
                "w0_ping": w0,
                "w1_uncontended": w1,
                "redis_cost": server_cost,
            }),
        );
    }

    let mut contention = Vec::with_capacity(Mode::ALL.len());
    for mode in Mode::ALL {
        contention.push(workloads::contention(&url, mode, sizes.w2_per_worker).await?);
    }
    let w2 = report::w2(&contention, sizes.w2_per_worker, floor, &mut targets);

    let w3_runs =
        workloads::many_keys_all(&url, &mut redis, &fence, &rs, sizes.w3_per_worker).await?;
    let benchmark = workloads::redis_benchmark(server.port(), sizes.benchmark_requests).await;
    let w3 = report::w3(
        &w3_runs,
        &benchmark,
        sizes.w3_per_worker,
        sizes.benchmark_requests,
        &mut targets,
    );
    cost_rows.extend(contention.iter().map(CostRow::of_w2));
    for (group, library, run, peer) in [
        ("W3 shared", "fencelock", &w3_runs.fencelock_shared, false),
        ("W3 shared", "rslock", &w3_runs.rslock_shared, true),
        ("W3 own", "fencelock", &w3_runs.fencelock_own, false),
        ("W3 own", "rslock", &w3_runs.rslock_own, true),
    ] {
        cost_rows.push(CostRow::of_w3(group, library, run, peer));
    }
    let server_cost = report::server_cost(&cost_rows, &mut targets);
    if let Some(path) = &args.svg {
        let caption = format!(
            "{nproc} cores, redis-server {version} on loopback, {profile} build{}; W1: one \
             client, sequential; W2: 8 clients on one key (rslock's tight retry is the peer); \
             W3: 64 workers on 64 keys",
            if args.quick { ", --quick" } else { "" }
        );
        std::fs::write(path, chart::svg(&cost_rows, &contention, &caption))?;
        println!("SVG: {}", path.display());
    }
    if args.cost {
        return write_json(
            &args.json,
            &json!({
                "context": context,
                "w0_ping": w0,
                "w1_uncontended": w1,
                "w2_contended": w2,
                "w3_many_keys": w3,
                "redis_cost": server_cost,
            }),
        );
    }

    // Before the held locks: the keys those leave behind keep the server busy expiring them.
    let latency = open_loop_table(&fence, &rs, &sizes).await?;

    let clients = footprint::client_cost(&url, &mut redis, sizes.clients).await?;
    let held = footprint::held_locks(&url, &mut redis, sizes.held_locks).await?;
    let cost = report::footprint(&clients, &held, &mut targets);

    let (topology_ping, topology_runs) =
        topologies::compare(sizes.sequential, sizes.w2_per_worker, sizes.w3_per_worker).await?;
    let topologies = report::topologies(&topology_ping, &topology_runs, &mut targets);

    let missed = targets.iter().filter(|t| !t.met()).count();
    println!("\n{missed} of {} targets missed", targets.len());
    let document = json!({
        "context": context,
        "w0_ping": w0,
        "w1_uncontended": w1,
        "w2_contended": w2,
        "redis_cost": server_cost,
        "w3_many_keys": w3,
        "client_cost": cost,
        "open_loop": latency,
        "topologies": topologies,
        "targets": targets.iter().map(Target::json).collect::<Vec<_>>(),
    });
    write_json(&args.json, &document)
}

/// Writes the run's figures to `path`.
fn write_json(path: &std::path::Path, document: &Value) -> Result<(), BoxError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, serde_json::to_string_pretty(document)?)?;
    println!("JSON: {}", path.display());
    Ok(())
}

/// The Redis cost row of one library's W1.
fn w1_cost_row(name: &str, latency: &workloads::Latency, server: ServerCost) -> CostRow {
    CostRow {
        group: "W1",
        library: name.to_owned(),
        pairs: latency.operations,
        ops_per_s: 1.0 / latency.summary.mean.as_secs_f64(),
        server,
        peer: name == "rslock",
    }
}

/// Both libraries' capacity, then open-loop runs at shares of fencelock's, the same offered
/// rates for both, so that the rows compare the libraries under one load.
async fn open_loop_table(fence: &Locker, rs: &Locker, sizes: &Sizes) -> Result<Value, BoxError> {
    let fence_capacity = open_loop::capacity(fence, sizes.capacity_run).await?;
    let rs_capacity = open_loop::capacity(rs, sizes.capacity_run).await?;
    let base = fence_capacity.ops_per_s();
    let mut runs = [Vec::new(), Vec::new()];
    for load in open_loop::LOADS {
        for (locker, runs) in [fence, rs].into_iter().zip(&mut runs) {
            runs.push(open_loop::open_loop(locker, load, load * base, sizes.open_loop_run).await?);
        }
    }
    let [fence_runs, rs_runs] = runs;
    let libraries = [
        report::Library {
            name: "fencelock",
            capacity: &fence_capacity,
            runs: &fence_runs,
        },
        report::Library {
            name: "rslock",
            capacity: &rs_capacity,
            runs: &rs_runs,
        },
    ];
    Ok(report::open_loop(
        &libraries,
        base,
        sizes.open_loop_run.as_secs_f64(),
    ))
}

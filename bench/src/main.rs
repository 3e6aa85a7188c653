//! fencelock against rslock and the raw Redis round trip, on one private `redis-server`
//! started here. Run it in release mode:
//!
//! ```text
//! cargo run --release -p fencelock-bench -- [--quick] [--json PATH]
//! ```
//!
//! W0: sequential PING (the floor). W1: uncontended acquire + release. W2: 8 workers, each
//! with its own client, incrementing a counter under one key, in four modes. W3: 64 workers
//! on 64 keys through one shared client, next to `redis-benchmark` SET on the same server.
//! Prints a table per workload and the issue's targets; writes the same figures as JSON
//! (default `target/fencelock-bench.json`). `--quick` runs every workload about 10x shorter.

mod locker;
mod report;
mod stats;
mod workloads;

use std::path::PathBuf;

use fencelock::LockClient;
use fencelock::testing::RedisServer;
use serde_json::json;

use locker::Locker;
use workloads::{BoxError, Mode, W3_WORKERS};

/// How much each workload does.
struct Sizes {
    /// W0 and W1 iterations.
    sequential: usize,
    w2_per_worker: usize,
    w3_per_worker: usize,
    benchmark_requests: usize,
}

const FULL: Sizes = Sizes {
    sequential: 3_000,
    w2_per_worker: 100,
    w3_per_worker: 50,
    benchmark_requests: 100_000,
};

const QUICK: Sizes = Sizes {
    sequential: 300,
    w2_per_worker: 10,
    w3_per_worker: 5,
    benchmark_requests: 10_000,
};

struct Args {
    quick: bool,
    json: PathBuf,
}

fn parse_args() -> Result<Args, BoxError> {
    let mut args = Args {
        quick: false,
        json: PathBuf::from("target/fencelock-bench.json"),
    };
    let mut given = std::env::args().skip(1);
    while let Some(arg) = given.next() {
        match arg.as_str() {
            "--quick" => args.quick = true,
            "--json" => args.json = given.next().ok_or("--json needs a path")?.into(),
            other => {
                return Err(format!(
                    "unknown argument `{other}`; usage: fencelock-bench [--quick] [--json PATH]"
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
    let mut redis = workloads::connect(&url).await?;
    let version = redis_version(&mut redis).await?;
    let nproc = std::thread::available_parallelism().map_or(0, usize::from);
    println!(
        "fencelock-bench: nproc {nproc}, redis-server {version} on 127.0.0.1:{}, {profile} build{}",
        server.port(),
        if args.quick {
            ", --quick (10x shorter)"
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
    let ping = workloads::ping(&redis, sizes.sequential).await;
    let w0 = report::w0(&ping);
    let floor = ping.summary.mean;

    // One client of each library for W1, shared by all W3 workers later.
    let fence = Locker::fencelock(LockClient::connect(&url).await?);
    let rs = Locker::rslock(&url).await;
    let w1_fence = workloads::uncontended(&fence, sizes.sequential).await;
    let w1_rs = workloads::uncontended(&rs, sizes.sequential).await;
    let w1 = report::w1(&w1_fence, &w1_rs, floor, &mut targets);

    let mut contention = Vec::with_capacity(Mode::ALL.len());
    for mode in Mode::ALL {
        contention.push(workloads::contention(&url, mode, sizes.w2_per_worker).await?);
    }
    let w2 = report::w2(&contention, sizes.w2_per_worker, floor, &mut targets);

    let w3_fence = workloads::many_keys(&fence, sizes.w3_per_worker).await?;
    let w3_rs = workloads::many_keys(&rs, sizes.w3_per_worker).await?;
    let benchmark = workloads::redis_benchmark(server.port(), sizes.benchmark_requests).await;
    let w3 = report::w3(
        &w3_fence,
        &w3_rs,
        &benchmark,
        W3_WORKERS,
        sizes.w3_per_worker,
        sizes.benchmark_requests,
        &mut targets,
    );

    let missed = targets.iter().filter(|t| !t.met()).count();
    println!("\n{missed} of {} targets missed", targets.len());
    let document = json!({
        "context": {
            "nproc": nproc,
            "redis_version": version,
            "profile": profile,
            "quick": args.quick,
        },
        "w0_ping": w0,
        "w1_uncontended": w1,
        "w2_contended": w2,
        "w3_many_keys": w3,
        "targets": targets.iter().map(report::Target::json).collect::<Vec<_>>(),
    });
    if let Some(dir) = args.json.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&args.json, serde_json::to_string_pretty(&document)?)?;
    println!("JSON: {}", args.json.display());
    Ok(())
}

//! ShedLock's scheduled job, three processes strong: every process runs the same job every
//! second; the lock makes each tick run once across them.
//!
//! ```text
//! cargo run --release --features testing --example scheduled_job
//! ```
//! The job is quick (10 ms) and the processes' schedulers drift a little (0 to 50 ms), as
//! real ones do. With `action = GiveUp` alone, a process that comes late in a tick finds the
//! job already finished and the lock free, and runs it again. `min_hold_ms = 900` keeps the
//! lock taken for the rest of the tick, so late processes skip it.

use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fencelock::testing::RedisServer;
use fencelock::{LockClient, LockError, redis_lock};
use redis::AsyncCommands;

#[path = "shared/stop_signal.rs"]
mod stop_signal;

const PROCESSES: usize = 3;
const TICKS: u64 = 5;

#[derive(Debug)]
#[allow(
    dead_code,
    reason = "the fields are read through Debug in failure messages"
)]
enum JobError {
    Lock(LockError),
    Redis(redis::RedisError),
}

impl From<LockError> for JobError {
    fn from(e: LockError) -> Self {
        JobError::Lock(e)
    }
}

impl From<redis::RedisError> for JobError {
    fn from(e: redis::RedisError) -> Self {
        JobError::Redis(e)
    }
}

/// The job: counts its runs per tick.
async fn report(
    redis: &mut redis::aio::MultiplexedConnection,
    mode: &str,
    tick: u64,
) -> Result<(), JobError> {
    let _: u64 = redis.incr(format!("runs:{mode}:{tick}"), 1).await?;
    tokio::time::sleep(Duration::from_millis(10)).await;
    Ok(())
}

#[redis_lock(key = "report:{mode}", ttl_ms = 5_000, action = GiveUp, min_hold_ms = 900, client = locks)]
async fn report_at_least_once_per_tick(
    locks: &LockClient,
    mut redis: redis::aio::MultiplexedConnection,
    mode: &str,
    tick: u64,
) -> Result<(), JobError> {
    report(&mut redis, mode, tick).await
}

#[redis_lock(key = "report:{mode}", ttl_ms = 5_000, action = GiveUp, client = locks)]
async fn report_give_up_only(
    locks: &LockClient,
    mut redis: redis::aio::MultiplexedConnection,
    mode: &str,
    tick: u64,
) -> Result<(), JobError> {
    report(&mut redis, mode, tick).await
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// One process's scheduler: `scheduled_job worker <url> <mode> <first tick, ms since epoch>`.
/// On `SIGTERM` or Ctrl-C it stops and releases its lock at once (a job cut short does not
/// keep the next process waiting for the lease).
async fn worker(
    url: &str,
    mode: &str,
    first_tick_ms: u64,
) -> Result<(), Box<dyn std::error::Error>> {
    let locks = LockClient::connect(url).await?;
    let redis = redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?;
    let outcome = tokio::select! {
        outcome = run_ticks(&locks, redis, mode, first_tick_ms) => outcome,
        () = stop_signal::stop_signal() => Ok(()),
    };
    locks.shutdown().await;
    outcome
}

/// The scheduler's ticks: the job, locked, once per second.
async fn run_ticks(
    locks: &LockClient,
    redis: redis::aio::MultiplexedConnection,
    mode: &str,
    first_tick_ms: u64,
) -> Result<(), Box<dyn std::error::Error>> {
    for tick in 0..TICKS {
        // The tick, plus this process's scheduler drift.
        let drift = scheduler_drift_ms() % 50;
        let at = first_tick_ms + tick * 1_000 + drift;
        tokio::time::sleep(Duration::from_millis(at.saturating_sub(now_ms()))).await;
        let outcome = if mode == "min_hold" {
            report_at_least_once_per_tick(locks, redis.clone(), mode, tick).await
        } else {
            report_give_up_only(locks, redis.clone(), mode, tick).await
        };
        match outcome {
            Ok(()) | Err(JobError::Lock(LockError::NotAcquired { .. })) => {}
            Err(e) => return Err(format!("{e:?}").into()),
        }
    }
    Ok(())
}

/// A few random bits for the scheduler drift (no rand dependency for one number).
fn scheduler_drift_ms() -> u64 {
    u64::from(std::process::id()).wrapping_mul(2_654_435_761) ^ now_ms().wrapping_mul(40_503)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("worker") {
        return worker(&args[2], &args[3], args[4].parse()?).await;
    }
    let server = RedisServer::start()?;
    let url = server.url();
    let mut redis = redis::Client::open(url.as_str())?
        .get_multiplexed_async_connection()
        .await?;
    let exe = std::env::current_exe()?;
    println!("{PROCESSES} processes, a job every second for {TICKS} ticks; runs per tick:");
    println!(
        "{:<28} {}",
        "mode",
        (0..TICKS)
            .map(|t| format!("t{t}"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    for mode in ["give_up", "min_hold"] {
        let first_tick_ms = (now_ms() / 1_000 + 2) * 1_000;
        let children: Vec<_> = (0..PROCESSES)
            .map(|_| {
                Command::new(&exe)
                    .args(["worker", &url, mode, &first_tick_ms.to_string()])
                    .spawn()
            })
            .collect::<Result<_, _>>()?;
        for child in children {
            let status = child.wait_with_output()?.status;
            if !status.success() {
                return Err(format!("a worker failed: {status}").into());
            }
        }
        let mut runs = Vec::new();
        for tick in 0..TICKS {
            runs.push(
                redis
                    .get::<_, Option<u64>>(format!("runs:{mode}:{tick}"))
                    .await?
                    .unwrap_or(0),
            );
        }
        let label = if mode == "min_hold" {
            "GiveUp + min_hold_ms = 900"
        } else {
            "GiveUp"
        };
        println!(
            "{:<28} {}   {}",
            label,
            runs.iter()
                .map(|r| format!("{r:>2}"))
                .collect::<Vec<_>>()
                .join(" "),
            if runs.iter().all(|r| *r == 1) {
                "each tick exactly once"
            } else {
                "some ticks ran more than once"
            }
        );
    }
    Ok(())
}

//! Open-loop latency: acquisitions arrive on a fixed schedule whatever the earlier ones do,
//! and each is timed from its scheduled start, so a slow reply delays nothing it does not
//! also show (no coordinated omission).

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::runtime::Handle;
use tokio::sync::{Barrier, Semaphore};
use tokio::task::JoinHandle;

use crate::locker::{AcquireError, Locker};
use crate::stats::{Failures, Summary};
use crate::workloads::{BoxError, Throughput, throughput};

/// Keys the requests are spread over, uniformly.
pub const KEYS: u64 = 1_000;
/// Closed-loop workers of the capacity run.
pub const CAPACITY_WORKERS: usize = 64;
/// Requests in flight at most; one beyond it waits for a slot, and its latency still counts
/// from its scheduled start.
pub const MAX_IN_FLIGHT: usize = 1_024;
/// The shares of the capacity offered: beyond it, what a client refuses shows.
pub const LOADS: [f64; 4] = [0.2, 0.5, 0.8, 1.2];

/// SplitMix64: a fixed, well-spread key sequence without a random-number dependency, the
/// same for both libraries.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

fn key(draw: u64) -> String {
    format!("ol:{}", mix(draw) % KEYS)
}

async fn pair(locker: &Locker, key: &str) -> Result<(), String> {
    locker.acquire(key, None).await?.release().await
}

/// The most acquire + release pairs per second: `CAPACITY_WORKERS` tasks sharing `locker`,
/// back to back on uniformly drawn keys, for `run`.
pub async fn capacity(locker: &Locker, run: Duration) -> Result<Throughput, BoxError> {
    let start = Arc::new(Barrier::new(CAPACITY_WORKERS));
    let started = Instant::now();
    let tasks: Vec<_> = (0..CAPACITY_WORKERS as u64)
        .map(|worker| {
            let (locker, start) = (locker.clone(), start.clone());
            tokio::spawn(async move {
                start.wait().await;
                let (mut pairs, mut failures) = (0u64, Failures::default());
                let mut draw = worker << 32;
                while started.elapsed() < run {
                    match pair(&locker, &key(draw)).await {
                        Ok(()) => pairs += 1,
                        Err(error) => failures.record(error),
                    }
                    draw += 1;
                }
                (pairs, failures)
            })
        })
        .collect();
    throughput(tasks, started).await
}

/// One open-loop run at one offered rate.
#[derive(Debug)]
pub struct OpenLoop {
    pub load: f64,
    pub rate: f64,
    pub scheduled: usize,
    pub wall: Duration,
    /// Scheduled start -> lock granted, per granted request.
    pub latency: Summary,
    /// The call -> refused, per request the client's admission control refused.
    pub refused: Summary,
    /// Scheduled start -> task spawned: the scheduler's own lateness, part of `latency`.
    pub lag: Summary,
    pub failures: Failures,
}

impl OpenLoop {
    pub fn achieved(&self) -> f64 {
        self.latency.count as f64 / self.wall.as_secs_f64()
    }
}

/// How one request ended.
enum Ended {
    /// Granted this long after its scheduled start, and released.
    Granted(Duration),
    /// Refused by admission control this long after the call (the scheduler's lag, shown on
    /// its own, left out).
    Refused(Duration),
    Failed(String),
}

/// What one request's task reports: its lag, and how it ended.
type Outcome = (Duration, Ended);

/// Requests at `rate` per second for `run`: request `i` is due at `start + i / rate` on a
/// uniformly drawn key, takes the lock and releases it.
pub async fn open_loop(
    locker: &Locker,
    load: f64,
    rate: f64,
    run: Duration,
) -> Result<OpenLoop, BoxError> {
    let (locker, handle) = (locker.clone(), Handle::current());
    let started = Instant::now();
    // A thread of its own: tokio's timer ticks in whole milliseconds, longer than the gap
    // between two requests; a thread's sleep is finer, and everything due is sent on waking.
    let tasks = tokio::task::spawn_blocking(move || schedule(&handle, &locker, rate, run)).await?;
    let (mut latencies, mut refusals, mut lags) = (Vec::new(), Vec::new(), Vec::new());
    let mut failures = Failures::default();
    let scheduled = tasks.len();
    for task in tasks {
        let (lag, ended) = task.await?;
        lags.push(lag);
        match ended {
            Ended::Granted(latency) => latencies.push(latency),
            Ended::Refused(after) => refusals.push(after),
            Ended::Failed(error) => failures.record(error),
        }
    }
    Ok(OpenLoop {
        load,
        rate,
        scheduled,
        wall: started.elapsed(),
        latency: Summary::of(latencies),
        refused: Summary::of(refusals),
        lag: Summary::of(lags),
        failures,
    })
}

/// Spawns each request at its scheduled time (or at once if that has passed), on `handle`.
fn schedule(
    handle: &Handle,
    locker: &Locker,
    rate: f64,
    run: Duration,
) -> Vec<JoinHandle<Outcome>> {
    let slots = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for i in 0u64.. {
        let offset = Duration::from_secs_f64(i as f64 / rate);
        if offset >= run {
            break;
        }
        let due = start + offset;
        if let Some(ahead) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(ahead);
        }
        let slot = handle
            .block_on(slots.clone().acquire_owned())
            .expect("the semaphore is never closed");
        let locker = locker.clone();
        tasks.push(handle.spawn(async move {
            let lag = due.elapsed();
            let called = Instant::now();
            let ended = match locker.acquire(&key(i), None).await {
                Ok(held) => {
                    let latency = due.elapsed();
                    match held.release().await {
                        Ok(()) => Ended::Granted(latency),
                        Err(error) => Ended::Failed(error),
                    }
                }
                Err(AcquireError::Refused(_)) => Ended::Refused(called.elapsed()),
                Err(AcquireError::Failed(error)) => Ended::Failed(error),
            };
            drop(slot);
            (lag, ended)
        }));
    }
    tasks
}

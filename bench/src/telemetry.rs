//! What fencelock's telemetry costs on W1: the same sequential acquire + release with
//! nothing listening, with a tracing subscriber (the `fmt` layer at INFO, written to a sink),
//! with a Prometheus recorder, and with both; on Redis, and on the memory backend, where no
//! round trip (and its noise) hides the cost. Each run has a thread and a current-thread
//! runtime of its own, where the subscriber and the recorder are installed for that thread
//! only (spans and metrics of W1 are all made on the calling thread); the variants take turns
//! over several rounds, so that a machine that speeds up or slows down affects them alike.

use std::time::Duration;

use fencelock::LockClient;

use crate::locker::Locker;
use crate::workloads::{self, BoxError, Latency};

/// What listens to the telemetry during a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Listener {
    Nothing,
    Tracing,
    Metrics,
    Both,
}

impl Listener {
    pub const ALL: [Listener; 4] = [
        Listener::Nothing,
        Listener::Tracing,
        Listener::Metrics,
        Listener::Both,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Listener::Nothing => "nothing installed",
            Listener::Tracing => "tracing fmt subscriber, INFO",
            Listener::Metrics => "Prometheus recorder",
            Listener::Both => "both",
        }
    }

    fn tracing(self) -> bool {
        matches!(self, Listener::Tracing | Listener::Both)
    }

    fn metrics(self) -> bool {
        matches!(self, Listener::Metrics | Listener::Both)
    }
}

/// Rounds of the four variants.
const ROUNDS: usize = 5;

/// W1 under each listener, on Redis and on the memory backend (where no round trip hides
/// what the telemetry costs): the mean of each round, per listener; and the PING floor of
/// the same rounds.
pub struct Overhead {
    pub ping_means: Vec<Duration>,
    pub means: Vec<(Listener, Means)>,
    pub iterations: usize,
}

/// The means of one listener's rounds.
#[derive(Default)]
pub struct Means {
    pub redis: Vec<Duration>,
    pub memory: Vec<Duration>,
}

pub async fn overhead(url: &str, iterations: usize) -> Result<Overhead, BoxError> {
    let on_redis = LockClient::connect(url).await?;
    let in_memory = LockClient::memory();
    let redis = workloads::connect(url).await?;
    let mut overhead = Overhead {
        ping_means: Vec::new(),
        means: Listener::ALL
            .iter()
            .map(|&l| (l, Means::default()))
            .collect(),
        iterations,
    };
    for _ in 0..ROUNDS {
        let ping = workloads::ping(&redis, iterations).await;
        overhead.ping_means.push(ping.summary.mean);
        for (listener, means) in &mut overhead.means {
            let w1 = run_with(*listener, Locker::fencelock(on_redis.clone()), iterations).await?;
            means.redis.push(w1.summary.mean);
            let w1 = run_with(*listener, Locker::fencelock(in_memory.clone()), iterations).await?;
            means.memory.push(w1.summary.mean);
        }
    }
    Ok(overhead)
}

/// W1 on a thread of its own with `listener` installed there.
async fn run_with(
    listener: Listener,
    locker: Locker,
    iterations: usize,
) -> Result<Latency, BoxError> {
    let run = move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let w1 = || runtime.block_on(workloads::uncontended(&locker, iterations));
        let with_metrics = || {
            if listener.metrics() {
                let recorder =
                    metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
                metrics::with_local_recorder(&recorder, w1)
            } else {
                w1()
            }
        };
        let latency = if listener.tracing() {
            let subscriber = tracing_subscriber::fmt()
                .with_writer(std::io::sink)
                .with_max_level(tracing::Level::INFO)
                .finish();
            tracing::subscriber::with_default(subscriber, with_metrics)
        } else {
            with_metrics()
        };
        Ok::<_, std::io::Error>(latency)
    };
    Ok(tokio::task::spawn_blocking(run).await??)
}

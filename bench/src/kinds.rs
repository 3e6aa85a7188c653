//! The lock kinds side by side on one server: each kind's uncontended acquire + release
//! (W1) and its round trips, and 8 workers on one key of each kind, each holding it for a
//! moment (a mutex and a write lock serialise them; readers, permits and shards share).

use std::sync::Arc;
use std::time::{Duration, Instant};

use fencelock::{LockClient, LockKind};
use tokio::sync::Barrier;

use crate::probe::{ScriptCalls, counting_scripts};
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

/// One kind's figures.
pub struct KindRun {
    pub label: &'static str,
    pub uncontended: Latency,
    pub uncontended_scripts: ScriptCalls,
    pub grants: u64,
    pub contended_wall: Duration,
    pub contended_scripts: ScriptCalls,
    pub failures: Failures,
}

pub async fn compare(
    url: &str,
    iterations: usize,
    per_worker: usize,
) -> Result<Vec<KindRun>, BoxError> {
    let mut inspector = workloads::connect(url).await?;
    let client = LockClient::connect(url).await?;
    let mut runs = Vec::with_capacity(KINDS.len());
    for (label, kind) in KINDS {
        let key = format!("kinds:w1:{label}");
        let pair = || async {
            let guard = client.request(&key, kind).acquire().await;
            guard
                .map_err(|e| e.to_string())?
                .release()
                .await
                .map_err(|e| e.to_string())
        };
        let (uncontended, uncontended_scripts) =
            counting_scripts(&mut inspector, workloads::measure(iterations, pair)).await?;
        let (contended, contended_scripts) =
            counting_scripts(&mut inspector, contended(url, label, kind, per_worker)).await?;
        let (grants, contended_wall, failures) = contended?;
        runs.push(KindRun {
            label,
            uncontended,
            uncontended_scripts,
            grants,
            contended_wall,
            contended_scripts,
            failures,
        });
    }
    Ok(runs)
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

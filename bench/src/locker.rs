//! The two lock libraries behind the same two calls, every call bounded in time.

use std::time::{Duration, Instant};

use fencelock::{LockClient, LockGuard};
use rslock::LockManager;

/// Lease of every lock taken here: no lease may end during a run (rslock does not renew).
const TTL: Duration = Duration::from_secs(30);
/// Time allowed beyond a call's own bound (the libraries' retry budgets, the 500 ms
/// response timeout of a redis-rs connection) before the benchmark gives up on it.
const SLACK: Duration = Duration::from_secs(5);

/// One of the two lock libraries, behind the same two calls.
#[derive(Clone)]
pub enum Locker {
    Fencelock {
        client: LockClient,
        fair: bool,
        min_replicas: u32,
    },
    Rslock(LockManager),
}

/// How often one rslock `lock` call tries, and the longest pause between two tries (each
/// pause is drawn from `0..delay` whole milliseconds).
#[derive(Clone, Copy, Debug)]
pub struct RslockRetry {
    pub count: u32,
    pub delay: Duration,
}

impl RslockRetry {
    /// rslock's own default.
    pub const DEFAULT: RslockRetry = RslockRetry {
        count: 3,
        delay: Duration::from_millis(200),
    };
    const TIGHT_DELAY: Duration = Duration::from_millis(3);

    /// Retries every 0..3 ms, as a user tuning rslock for latency would; enough of them that
    /// one `lock` call could span `wait` even at the longest pauses (`rslock_acquire` ends
    /// the wait at `wait` either way).
    pub fn tight(wait: Duration) -> RslockRetry {
        let count = wait.as_millis() / RslockRetry::TIGHT_DELAY.as_millis();
        RslockRetry {
            count: u32::try_from(count).unwrap_or(u32::MAX),
            delay: RslockRetry::TIGHT_DELAY,
        }
    }
}

pub enum Held {
    Fencelock(LockGuard),
    Rslock(rslock::Lock),
}

impl Locker {
    pub fn fencelock(client: LockClient) -> Locker {
        Locker::Fencelock {
            client,
            fair: false,
            min_replicas: 0,
        }
    }

    /// rslock connects on first use: open its connection now, before any clock starts.
    pub async fn rslock(url: &str, retry: RslockRetry) -> Locker {
        Locker::rslock_over(vec![url.to_owned()], retry).await
    }

    /// rslock over several masters (its Redlock), connected now.
    pub async fn rslock_over(urls: Vec<String>, retry: RslockRetry) -> Locker {
        let mut manager = LockManager::new(urls);
        manager.set_retry(retry.count, retry.delay);
        // The reply does not matter; a connection that fails now is retried by `lock`.
        let _ = manager.query_redis_for_key_value(b"warm-up").await;
        Locker::Rslock(manager)
    }

    /// Takes `key`, waiting up to `wait` if it is held; `None`: each library's default.
    pub async fn acquire(&self, key: &str, wait: Option<Duration>) -> Result<Held, AcquireError> {
        let bound = wait.unwrap_or_default() + SLACK;
        let attempt = async {
            match self {
                Locker::Fencelock {
                    client,
                    fair,
                    min_replicas,
                } => {
                    let mut request = client.lock(key).fair(*fair).min_replicas(*min_replicas);
                    if let Some(wait) = wait {
                        request = request.wait_ms(wait.as_millis() as u64);
                    }
                    let guard = request
                        .acquire()
                        .await
                        .map_err(|e| match e.is_overloaded() {
                            true => AcquireError::Refused(e.to_string()),
                            false => AcquireError::Failed(e.to_string()),
                        })?;
                    Ok(Held::Fencelock(guard))
                }
                Locker::Rslock(manager) => rslock_acquire(manager, key, wait)
                    .await
                    .map_err(AcquireError::Failed),
            }
        };
        tokio::time::timeout(bound, attempt)
            .await
            .map_err(|_| AcquireError::Failed(format!("acquire gave no answer within {bound:?}")))?
    }
}

/// Why an acquisition ended without a lock.
#[derive(Debug)]
pub enum AcquireError {
    /// Refused at once by the client's admission control, without asking the store.
    Refused(String),
    /// Anything else: held to the end of the wait, a store's error, no answer.
    Failed(String),
}

impl From<AcquireError> for String {
    fn from(error: AcquireError) -> String {
        match error {
            AcquireError::Refused(message) | AcquireError::Failed(message) => message,
        }
    }
}

/// rslock's `lock` makes 3 attempts, a random 0..200 ms apart; its `acquire` calls `lock`
/// again at once, forever. This is that loop, ended at `wait`.
async fn rslock_acquire(
    manager: &LockManager,
    key: &str,
    wait: Option<Duration>,
) -> Result<Held, String> {
    let deadline = Instant::now() + wait.unwrap_or_default();
    loop {
        match manager.lock(key, TTL).await {
            Ok(lock) => return Ok(Held::Rslock(lock)),
            Err(error) if Instant::now() >= deadline => return Err(error.to_string()),
            Err(_) => {}
        }
    }
}

impl Held {
    pub async fn release(self) -> Result<(), String> {
        let release = async {
            match self {
                Held::Fencelock(guard) => guard.release().await.map_err(|e| e.to_string()),
                // rslock's release is best effort and reports nothing.
                Held::Rslock(lock) => {
                    lock.release().await;
                    Ok(())
                }
            }
        };
        tokio::time::timeout(SLACK, release)
            .await
            .map_err(|_| format!("release gave no answer within {SLACK:?}"))?
    }
}

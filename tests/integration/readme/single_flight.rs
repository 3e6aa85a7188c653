//! The guide's single-flight: `action = Share`.

use fencelock::{LockClient, LockError, redis_lock, with_client};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Report {
    day: u32,
    orders: u64,
}

/// Computed once for all the callers that ask while it runs, in every process.
#[redis_lock(key = "report:{day}", action = Share, wait_ms = 30_000)]
async fn daily_report(day: u32) -> Result<Report, LockError> {
    Ok(Report { day, orders: 1_234 }) // the expensive query
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), LockError> {
    let locks = LockClient::memory();
    let asked = (0..10).map(|_| with_client(locks.clone(), daily_report(5)));
    for report in futures::future::join_all(asked).await {
        assert_eq!(report?.orders, 1_234);
    }
    Ok(())
}

// ---- not in the README: runs it.
#[test]
fn runs() {
    main().unwrap();
}

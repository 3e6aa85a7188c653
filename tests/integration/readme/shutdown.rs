//! The guide's shutdown example: a service that releases its locks when told to stop.

use fencelock::{LockClient, LockError};

async fn serve(locks: LockClient) -> Result<(), LockError> {
    let jobs = tokio::spawn(nightly_report(locks.clone()));
    stop_signal().await; // SIGTERM from the orchestrator, or Ctrl-C
    // The report's lock is released now, not after its lease: the next instance takes it
    // at once. The running report sees its lock lost, and stops at its next `.await`.
    let report = locks.shutdown().await;
    println!("released {} lock(s)", report.released);
    let _ = jobs.await;
    Ok(())
}

async fn nightly_report(locks: LockClient) -> Result<(), LockError> {
    let guard = locks.lock("nightly-report").acquire().await?; // 30 s lease
    tokio::select! {
        lost = guard.lost() => Err(lost), // LossCause::ShutDown
        () = write_report() => guard.release().await,
    }
}

// ---- not in the README: the signal, the work, and a run on the memory backend.
async fn stop_signal() {
    tokio::task::yield_now().await;
}

async fn write_report() {
    std::future::pending::<()>().await;
}

#[tokio::test]
async fn runs() {
    let locks = LockClient::memory();
    serve(locks.clone()).await.unwrap();
    let after = locks.lock("nightly-report").acquire().await;
    assert!(matches!(after, Err(LockError::ShutDown { .. })));
}

//! How the examples learn that they must stop: `SIGTERM` (what `kill` and orchestrators
//! send) or Ctrl-C. Shared by the scheduled job and the web service.

/// Completes on `SIGTERM` or Ctrl-C.
pub async fn stop_signal() {
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut terminate) => {
                terminate.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = terminate => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

//! The process-wide background runtime.
//!
//! Redis connections, background releases and cleanup of cancelled acquisitions run here, on
//! a thread of the library's own, so they neither depend on the runtime of whoever created a
//! client or dropped a guard (a `#[tokio::test]` runtime ends with its test), nor stall while
//! a lock body blocks a current-thread runtime.

use std::future::Future;
use std::sync::OnceLock;

use tokio::runtime::{Builder, Handle};
use tokio::task::JoinHandle;

use crate::LockError;

static DRIVER: OnceLock<Result<Handle, String>> = OnceLock::new();

fn start() -> Result<Handle, String> {
    let runtime = Builder::new_current_thread()
        .enable_all()
        .thread_name("fencelock-driver")
        .build()
        .map_err(|e| format!("cannot build the fencelock driver runtime: {e}"))?;
    let handle = runtime.handle().clone();
    std::thread::Builder::new()
        .name("fencelock-driver".into())
        .spawn(move || runtime.block_on(std::future::pending::<()>()))
        .map_err(|e| format!("cannot start the fencelock driver thread: {e}"))?;
    Ok(handle)
}

/// The driver's handle, starting the driver on first use.
pub(crate) fn handle() -> Result<&'static Handle, LockError> {
    DRIVER
        .get_or_init(start)
        .as_ref()
        .map_err(|message| LockError::backend(None, message.clone(), None))
}

/// Runs `future` on the driver.
pub(crate) fn spawn<F>(future: F) -> Result<JoinHandle<F::Output>, LockError>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    Ok(handle()?.spawn(future))
}

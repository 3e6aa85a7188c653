//! Where background work runs.
//!
//! By default on the process-wide background runtime: a thread of the library's own with a current-thread
//! runtime. Redis connections, renewals, background releases and cleanups of cancelled
//! acquisitions run there, so they neither depend on the runtime of whoever created a client
//! or dropped a guard (a `#[tokio::test]` runtime ends with its test), nor stall while a lock
//! body blocks a current-thread runtime. A memory client can instead run its background work
//! on the caller's runtime, so that tests drive renewal and expiry with tokio's paused clock.

use std::cell::Cell;
use std::future::Future;
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::Duration;

use tokio::runtime::{Builder, Handle};
use tokio::task::JoinHandle;

use crate::LockError;
use crate::sync::lock_ignoring_poison;

static DRIVER: OnceLock<Result<Handle, String>> = OnceLock::new();

thread_local! {
    static ON_DRIVER: Cell<bool> = const { Cell::new(false) };
}

/// The runtime of the calling task, unless there is none or it is the background runtime's.
pub(crate) fn caller_runtime() -> Option<Handle> {
    if ON_DRIVER.with(Cell::get) {
        return None;
    }
    Handle::try_current().ok()
}

fn start() -> Result<Handle, String> {
    let runtime = Builder::new_current_thread()
        .enable_all()
        .thread_name("fencelock-background")
        .build()
        .map_err(|e| format!("cannot build the fencelock background runtime: {e}"))?;
    let handle = runtime.handle().clone();
    std::thread::Builder::new()
        .name("fencelock-background".into())
        .spawn(move || {
            ON_DRIVER.with(|on| on.set(true));
            runtime.block_on(std::future::pending::<()>())
        })
        .map_err(|e| format!("cannot start the fencelock background thread: {e}"))?;
    Ok(handle)
}

/// The runtime a client's background work is spawned on.
#[derive(Debug, Clone)]
pub(crate) enum Background {
    /// The process-wide background runtime thread, started on first use.
    Driver,
    /// A runtime chosen by the application (paused-clock tests).
    Runtime(Handle),
}

impl Background {
    /// Runs `future` in the background.
    pub(crate) fn spawn<F>(&self, future: F) -> Result<JoinHandle<F::Output>, LockError>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        match self {
            Background::Driver => {
                let handle = DRIVER
                    .get_or_init(start)
                    .as_ref()
                    .map_err(|message| LockError::backend(None, message.clone(), None))?;
                Ok(handle.spawn(future))
            }
            Background::Runtime(handle) => Ok(handle.spawn(future)),
        }
    }
}

/// How long an exiting process waits at most for the releases it has sent and not yet heard
/// back from.
pub const EXIT_WAIT: Duration = Duration::from_secs(3);

/// Background work the process waits for when it exits (after `main` returns, or on
/// `std::process::exit`), up to [`EXIT_WAIT`]: a guard dropped just before the end, or by a
/// task that the ending runtime dropped, is still released rather than left to its lease.
/// The background thread keeps running until the C runtime's exit handlers have run, so the
/// wait lets it finish. On Unix only (`atexit`).
pub(crate) struct AwaitedAtExit(());

static AWAITED: Mutex<usize> = Mutex::new(0);
static SETTLED: Condvar = Condvar::new();

impl AwaitedAtExit {
    pub(crate) fn new() -> AwaitedAtExit {
        wait_at_exit();
        *lock_ignoring_poison(&AWAITED) += 1;
        AwaitedAtExit(())
    }
}

impl Drop for AwaitedAtExit {
    fn drop(&mut self) {
        *lock_ignoring_poison(&AWAITED) -= 1;
        SETTLED.notify_all();
    }
}

/// Waits for the work awaited at exit, up to [`EXIT_WAIT`]; not on the background thread,
/// which would wait for itself.
fn wait_for_awaited() {
    if ON_DRIVER.with(Cell::get) {
        return;
    }
    let awaited = lock_ignoring_poison(&AWAITED);
    let _ = SETTLED.wait_timeout_while(awaited, EXIT_WAIT, |count| *count > 0);
}

/// Registers [`wait_for_awaited`] as an exit handler, once.
#[cfg(unix)]
fn wait_at_exit() {
    extern "C" fn at_exit() {
        // A panic must not unwind into the C runtime.
        let _ = std::panic::catch_unwind(wait_for_awaited);
    }
    static REGISTERED: std::sync::Once = std::sync::Once::new();
    // SAFETY: `at_exit` is an `extern "C" fn()` that never unwinds, as `atexit` requires; it
    // touches only statics that outlive the handlers.
    REGISTERED.call_once(|| unsafe {
        libc::atexit(at_exit);
    });
}

#[cfg(not(unix))]
fn wait_at_exit() {}

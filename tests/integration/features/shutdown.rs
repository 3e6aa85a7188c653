//! A process that ends holding locks: on `SIGTERM` it shuts its client down and the locks
//! are free at once; a guard dropped as `main` returns (or by a task the ending runtime
//! drops) is still released before the process is gone; one killed (`SIGKILL`) leaves its
//! locks to the restarted instance, which releases them as it starts. Real child processes
//! of this test binary, on a real redis-server.

use std::io::{BufRead, BufReader};
use std::process::Child;
use std::time::{Duration, Instant};

use fencelock::admin::Holding;
use fencelock::{LockClient, LockError};

use crate::support::{self, client, redis_server};

const WORKER_URL: &str = "FENCELOCK_SHUTDOWN_WORKER_URL";

/// The child of `a_process_told_to_terminate_frees_its_locks_at_once`: holds one lock, waits
/// for another, says `ready`, and on `SIGTERM` shuts its client down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a child process of a_process_told_to_terminate_frees_its_locks_at_once"]
async fn sigterm_worker() {
    let url = std::env::var(WORKER_URL).expect("started by the parent test");
    let kind = tokio::signal::unix::SignalKind::terminate();
    let mut terminate = tokio::signal::unix::signal(kind).unwrap();
    let locks = LockClient::connect(&url).await.unwrap();
    let held = locks.lock("term:held").acquire().await.unwrap();
    // Its place in line lasts 30 s past its last attempt: only a withdrawal ends it sooner.
    let waiter = locks.lock("term:waited").wait_ms(600_000).sleep_ms(10_000);
    let waiting = tokio::spawn(waiter.acquire());
    let in_line = support::eventually(Duration::from_secs(10), || async {
        let state = locks.admin().inspect("term:waited").await.unwrap();
        state.waiters == 1
    });
    assert!(in_line.await, "the request waits in line");
    println!("ready");
    terminate.recv().await;
    let report = locks.shutdown().await;
    println!("shut down: {report:?}");
    assert_eq!((report.released, report.withdrawn), (1, 1), "{report:?}");
    let stopped = waiting.await.unwrap();
    assert!(
        matches!(stopped, Err(LockError::ShutDown { .. })),
        "{stopped:?}"
    );
    // The guard lives on until the parent has seen its lock free: the shutdown freed it.
    let checked = tokio::task::spawn_blocking(|| std::io::stdin().lines().next());
    assert!(
        checked.await.unwrap().is_some(),
        "the parent says when it has checked"
    );
    drop(held);
}

/// `SIGTERM` to a process that holds a lock and waits for another: the lock it held is free
/// at once (its lease had 30 s left), and its place in the other's line is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_told_to_terminate_frees_its_locks_at_once() {
    let server = redis_server();
    let locks = client(&server).await;
    let blocker = locks.lock("term:waited").acquire().await.unwrap();
    let mut child = support::spawn_test_process(
        "features::shutdown::sigterm_worker",
        WORKER_URL,
        &server.url(),
    );
    let output = ChildLines::read(&mut child);
    output.wait_for("ready", Duration::from_secs(30));

    let admin = locks.admin();
    let mut releases = admin.watch("term:held").await.unwrap();
    let pid = child.id().to_string();
    let sent = Instant::now();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status();
    assert!(killed.unwrap().success(), "SIGTERM sent");
    let released = tokio::time::timeout(Duration::from_secs(10), releases.next()).await;
    let released = released.expect("released within 10 s of SIGTERM (its lease: 30 s)");
    println!(
        "SIGTERM to the release's announcement: {:?}",
        sent.elapsed()
    );
    assert!(released.is_ok(), "{released:?}");
    let state = admin.inspect("term:held").await.unwrap();
    assert_eq!(state.holding, Holding::Free, "{state:?}");
    let state = locks.admin().inspect("term:waited").await.unwrap();
    assert_eq!(
        state.waiters, 0,
        "the terminated waiter left the line: {state:?}"
    );
    let mut stdin = child.stdin.take().expect("piped");
    std::io::Write::write_all(&mut stdin, b"checked\n").unwrap();
    output.finished(child);
    blocker.release().await.unwrap();
    let next = locks.lock("term:waited").give_up().acquire().await;
    assert!(
        next.is_ok(),
        "not handed to the terminated waiter: {next:?}"
    );
}

/// The child of `guards_dropped_as_the_process_ends_are_released`: a guard dropped on the
/// last line, and one held by a task that the ending runtime drops.
#[tokio::test]
#[ignore = "a child process of guards_dropped_as_the_process_ends_are_released"]
async fn exit_worker() {
    let url = std::env::var(WORKER_URL).expect("started by the parent test");
    let locks = LockClient::connect(&url).await.unwrap();
    let dropped = locks.lock("exit:dropped").acquire().await.unwrap();
    let (holds, held) = tokio::sync::oneshot::channel();
    let task_locks = locks.clone();
    tokio::spawn(async move {
        let _guard = task_locks.lock("exit:task").acquire().await.unwrap();
        holds.send(()).unwrap();
        std::future::pending::<()>().await;
    });
    held.await.unwrap();
    drop(dropped);
}

/// A process whose last guards are dropped as it ends (`main` returns, its runtime drops a
/// task holding one) leaves both locks free when it is gone, not held for their leases.
#[tokio::test]
async fn guards_dropped_as_the_process_ends_are_released() {
    let server = redis_server();
    let locks = client(&server).await;
    let child =
        support::spawn_test_process("features::shutdown::exit_worker", WORKER_URL, &server.url());
    support::test_process_output(child);
    for key in ["exit:dropped", "exit:task"] {
        let state = locks.admin().inspect(key).await.unwrap();
        assert_eq!(state.holding, Holding::Free, "{key} is released at exit");
    }
}

/// The instance id of the killed worker and of its restart.
const INSTANCE: &str = "worker-7";

/// The child of `a_restarted_instance_frees_what_its_killed_run_held`: holds a lock and a
/// semaphore's permit for 30 s, says `ready`, and waits to be killed.
#[tokio::test]
#[ignore = "a child process of a_restarted_instance_frees_what_its_killed_run_held"]
async fn killed_worker() {
    let url = std::env::var(WORKER_URL).expect("started by the parent test");
    let builder = LockClient::open_builder(&url).instance_id(INSTANCE);
    let locks = builder.connect().await.unwrap();
    let _held = locks
        .lock("kill:held")
        .ttl_ms(30_000)
        .acquire()
        .await
        .unwrap();
    let permit = locks.semaphore("kill:permits", 2).ttl_ms(30_000);
    let _permit = permit.acquire().await.unwrap();
    println!("ready");
    std::future::pending::<()>().await;
}

/// The restart of the killed worker: the same instance id, a new process.
#[tokio::test]
#[ignore = "a child process of a_restarted_instance_frees_what_its_killed_run_held"]
async fn restarted_worker() {
    let url = std::env::var(WORKER_URL).expect("started by the parent test");
    let builder = LockClient::open_builder(&url).instance_id(INSTANCE);
    let locks = builder.connect().await.unwrap();
    let left = locks.release_orphans().await.unwrap();
    println!("found {}, released {}", left.found, left.released.len());
    assert_eq!((left.found, left.released.len()), (2, 2), "{left:?}");
}

/// A process killed while holding a lock and a permit cannot release them; its restart,
/// with the same instance id, releases both as it starts, and the process waiting for the
/// lock gets it then rather than when the 30 s lease ends. Another process's permit stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_instance_frees_what_its_killed_run_held() {
    let server = redis_server();
    let locks = client(&server).await;
    let other_permit = locks.semaphore("kill:permits", 2).acquire().await.unwrap();
    let mut child = support::spawn_test_process(
        "features::shutdown::killed_worker",
        WORKER_URL,
        &server.url(),
    );
    let output = ChildLines::read(&mut child);
    output.wait_for("ready", Duration::from_secs(30));
    let killed = Instant::now();
    child.kill().unwrap();
    child.wait().unwrap();
    let waiter = locks.lock("kill:held").wait_ms(60_000).acquire();
    let waiter = tokio::spawn(async move { (waiter.await, Instant::now()) });
    let state = locks.admin().inspect("kill:held").await.unwrap();
    assert!(
        state.holding.is_held(),
        "the killed run's lock stays held: {state:?}"
    );

    let restarted_at = Instant::now();
    let restart = support::spawn_test_process(
        "features::shutdown::restarted_worker",
        WORKER_URL,
        &server.url(),
    );
    let restart = tokio::task::spawn_blocking(|| support::test_process_output(restart));
    let (next, got_at) = tokio::time::timeout(Duration::from_secs(20), waiter)
        .await
        .expect("the waiter gets the lock before its 30 s lease would end")
        .unwrap();
    println!(
        "{}: the waiter got the lock {:?} after the restart began, {:?} after the kill",
        restart
            .await
            .unwrap()
            .lines()
            .find(|l| l.starts_with("found"))
            .unwrap_or_default(),
        got_at - restarted_at,
        got_at - killed,
    );
    let next = next.expect("the lock the killed run held");
    let permit = locks.semaphore("kill:permits", 2).give_up().acquire().await;
    let permit = permit.expect("the killed run's permit is free again");
    fencelock::testing::assertions::assert_held_by(&locks, &other_permit).await;
    for guard in [next, permit, other_permit] {
        guard.release().await.unwrap();
    }
}

/// A child's output lines, read as they come.
struct ChildLines {
    lines: std::sync::mpsc::Receiver<String>,
    seen: std::cell::RefCell<Vec<String>>,
}

impl ChildLines {
    fn read(child: &mut Child) -> ChildLines {
        let stdout = child.stdout.take().expect("piped");
        let (send, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if send.send(line).is_err() {
                    return;
                }
            }
        });
        ChildLines {
            lines,
            seen: std::cell::RefCell::default(),
        }
    }

    /// Waits (at most `limit`) for a line that is `expected`.
    fn wait_for(&self, expected: &str, limit: Duration) {
        let until = Instant::now() + limit;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            let line = self.lines.recv_timeout(left).unwrap_or_else(|_| {
                panic!("no line `{expected}` within {limit:?}: {:?}", self.seen)
            });
            let found = line == expected;
            self.seen.borrow_mut().push(line);
            if found {
                return;
            }
        }
    }

    /// Waits for the child to end, and checks that its one test passed.
    fn finished(&self, mut child: Child) {
        let status = child.wait().unwrap();
        let rest: Vec<String> = self.lines.iter().collect();
        self.seen.borrow_mut().extend(rest);
        let seen = self.seen.borrow().join("\n");
        assert!(
            status.success() && seen.contains(" 1 passed;"),
            "the child failed: {seen}"
        );
    }
}

//! The attribute, guards and renewal on both of tokio's runtimes: a current-thread runtime
//! (where a body that blocks stops every other task of the runtime) and a multi-thread one.
//! Each scenario runs once on each, through `on_both_runtimes!`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use fencelock::testing::history::{self, Section, monotonic_ns};
use fencelock::{LockClient, LockError, current_token, redis_lock, with_client};
use redis::AsyncCommands;

use crate::support::{AppError, client, inspector, record_section, redis_server};

/// Defines, for each scenario `name` (an `async fn` below), a test `current_thread::name` and
/// a test `multi_thread::name`.
macro_rules! on_both_runtimes {
    ($($scenario:ident),* $(,)?) => {
        mod current_thread {
            $(
                #[tokio::test(flavor = "current_thread")]
                async fn $scenario() {
                    super::$scenario().await;
                }
            )*
        }
        mod multi_thread {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $scenario() {
                    super::$scenario().await;
                }
            )*
        }
    };
}

on_both_runtimes!(
    attribute_calls_exclude_each_other,
    guards_exclude_each_other_whether_released_or_dropped,
    renewal_keeps_the_lock_while_the_body_blocks_its_thread,
);

type Sections = Arc<Mutex<Vec<Section>>>;

const TASKS: u32 = 40;

/// The flash-sale section (GET, pause, SET + 1), recorded for the history checker.
#[redis_lock(
    key = "runtimes:counter",
    ttl_ms = 10_000,
    wait_ms = 30_000,
    sleep_ms = 20
)]
async fn count_once(
    mut redis: redis::aio::MultiplexedConnection,
    sections: Sections,
    task: u32,
) -> Result<(), AppError> {
    let entered_ns = monotonic_ns();
    let value: Option<u32> = redis.get("runtimes:count").await?;
    tokio::time::sleep(Duration::from_millis(1)).await;
    let _: () = redis.set("runtimes:count", value.unwrap_or(0) + 1).await?;
    sections.lock().unwrap().push(Section {
        process: 0,
        task,
        key: "runtimes:counter".into(),
        token: current_token().expect("runs under the lock"),
        entered_ns,
        exited_ns: monotonic_ns(),
    });
    Ok(())
}

/// No two sections overlap and tokens increase, over `expected` sections.
fn assert_exclusive(sections: &Sections, expected: u32) {
    let sections = sections.lock().unwrap();
    assert_eq!(sections.len(), expected as usize);
    let report = history::check(&sections);
    assert!(report.violations.is_empty(), "{:#?}", report.violations);
}

async fn attribute_calls_exclude_each_other() {
    let server = redis_server();
    let locks = client(&server).await;
    let redis = inspector(&server).await;
    let sections = Sections::default();
    let tasks: Vec<_> = (0..TASKS)
        .map(|task| {
            let call = count_once(redis.clone(), sections.clone(), task);
            tokio::spawn(with_client(locks.clone(), call))
        })
        .collect();
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    let count: u32 = redis.clone().get("runtimes:count").await.unwrap();
    assert_eq!(count, TASKS);
    assert_exclusive(&sections, TASKS);
}

async fn guards_exclude_each_other_whether_released_or_dropped() {
    let server = redis_server();
    let locks = client(&server).await;
    let sections = Sections::default();
    let tasks: Vec<_> = (0..TASKS)
        .map(|task| {
            let (locks, sections) = (locks.clone(), sections.clone());
            tokio::spawn(async move {
                let guard = locks
                    .lock("runtimes:guard")
                    .wait_ms(30_000)
                    .sleep_ms(20)
                    .acquire()
                    .await?;
                record_section(&sections, 0, task, &guard, Duration::from_millis(1)).await;
                // Half are released by hand, half by their drop (in the background).
                if task % 2 == 0 {
                    guard.release().await?;
                }
                Ok::<_, LockError>(())
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    assert_exclusive(&sections, TASKS);
    let last = locks.lock("runtimes:guard").wait_ms(5_000).acquire().await;
    last.unwrap().release().await.unwrap();
}

/// A lease of 300 ms; the body blocks its thread (on a current-thread runtime, the whole
/// runtime) for five of them, tells the contender when it starts, and records its section.
#[redis_lock(key = "runtimes:blocking", ttl_ms = 300)]
async fn blocking_body(entered: mpsc::Sender<()>, sections: Sections) -> Result<(), LockError> {
    let entered_ns = monotonic_ns();
    entered.send(()).unwrap();
    std::thread::sleep(Duration::from_millis(1_500));
    sections.lock().unwrap().push(Section {
        process: 0,
        task: 0,
        key: "runtimes:blocking".into(),
        token: current_token().expect("runs under the lock"),
        entered_ns,
        exited_ns: monotonic_ns(),
    });
    Ok(())
}

async fn renewal_keeps_the_lock_while_the_body_blocks_its_thread() {
    let server = redis_server();
    let locks = client(&server).await;
    let sections = Sections::default();
    let (entered, body_started) = mpsc::channel();
    let done = Arc::new(AtomicBool::new(false));
    // Another process's view, from a thread and a runtime of its own: it tries for the key
    // every 20 ms while the body blocks, and records the sections it gets.
    let contender = std::thread::spawn({
        let (url, done, sections) = (server.url(), done.clone(), sections.clone());
        move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                let other = LockClient::connect(&url).await.unwrap();
                body_started.recv_timeout(Duration::from_secs(10)).unwrap();
                let mut tries = 0;
                while !done.load(Ordering::SeqCst) && tries < 500 {
                    tries += 1;
                    if let Ok(guard) = other.lock("runtimes:blocking").give_up().acquire().await {
                        record_section(&sections, 1, 0, &guard, Duration::ZERO).await;
                        guard.release().await.unwrap();
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                tries
            })
        }
    });
    let outcome = with_client(locks.clone(), blocking_body(entered, sections.clone())).await;
    done.store(true, Ordering::SeqCst);
    let tries = contender.join().unwrap();
    assert!(outcome.is_ok(), "{outcome:?}");
    assert!(
        tries > 10,
        "the contender tried while the body blocked: {tries}"
    );
    let sections = sections.lock().unwrap();
    let report = history::check(&sections);
    assert!(report.violations.is_empty(), "{:#?}", report.violations);
    assert_eq!(locks.renewal_stats().losses, 0);
    assert!(locks.renewal_stats().rounds >= 3);
}

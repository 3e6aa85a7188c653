//! Deterministic simulation, in the spirit of FoundationDB's simulation testing and
//! TigerBeetle's VOPR: many clients and tasks on tokio's paused clock, against the memory
//! backend behind a network that a seed fills with faults (`network.rs`), running random
//! operations on mutexes, read/write locks, a semaphore and a segmented lock (each kind on
//! keys of its own) through `#[redis_lock]` and the builder, some dropped at random `.await`s
//! or right after a request went out (`workload.rs`). Every run is checked on its record
//! (`history.rs`): exclusion against the store's own grants, each kind by its rule (every
//! loss is reported before the store can grant what the lost grant excluded, and no body
//! enters a grant the store gave away), the critical sections (no two holders of a mutex or
//! of a shard at once, no reader or writer beside a writer, no more holders than a
//! semaphore's permits), fencing tokens, hand-offs only to waiters whose place lasts, no
//! orphan after a lost reply, nothing left in the store once everything is over, every
//! operation ended with the right error, and no panic in any task (the application's, the
//! library's background work, the simulated network's).
//!
//! - `cargo test --all-features --test simulation`: CI's 1,000 seeds (about 20 s), and the
//!   planted defects below.
//! - `FENCELOCK_SIM_SEEDS=N [FENCELOCK_SIM_FIRST=F]`: seeds `F..F+N` (the defects: CI's number
//!   of seeds from `F`; `scripts/test.sh --extended` runs thousands in a release build).
//! - `FENCELOCK_SIM_SEED=S cargo test --all-features --test simulation -- --nocapture
//!   seeds_break_no_promise`: replays seed `S` exactly and prints its whole trace.
//!
//! The simulator proves it can see. A batch of seeds that grants, enters bodies or injects
//! faults less than its floor (see `ACTIVITY`) fails: a simulator that silently stopped
//! doing anything checks nothing. And `planted_defects_are_caught` plants each known defect
//! of `fencelock::testing::defects` in turn (on its own thread only: the other tests run the
//! real code) and runs CI's number of seeds until one reports a violation, printing how many
//! seeds that took; a defect no seed catches fails the test. What each catch means:
//! - `ReleaseWithoutOwnerCheck`: a stale release (a waiter giving up its place, a cleanup, a
//!   release sent again) deletes the next owner's grant, and the store grants the key to a
//!   third while that owner still holds it: the exclusion check sees it.
//! - `RenewalExtendsAnyOwner`: an owner whose grant the store deleted under it has its
//!   renewals answered with the next owner's grant, and holds on for longer than its lease
//!   after the deletion: the exclusion check sees it.
//! - `HandOffToLapsedPlace`: a release hands the key to a waiter whose place in line had
//!   lapsed (it may have left): the hand-off check sees it against the places the store
//!   kept.
//! - `BodyOnExpiredGrant`: a client frozen between the store's grant and its reading of the
//!   reply (the frozen-client fault) enters the body on a grant that ended meanwhile and
//!   that the store gave to another: the critical sections overlap, and the exclusion check
//!   sees a body enter a grant given away.

mod history;
mod network;
mod rng;
mod workload;

use std::cell::RefCell;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Once};
use std::time::Duration;

use fencelock::LockClient;
use fencelock::testing::defects::{Defect, plant};
use tokio::runtime::Handle;
use tokio::time::Instant;

use crate::network::{Faults, SimBackend, World};
use crate::rng::Rng;
use crate::workload::{Family, Keys, Task};

/// Seeds run by `cargo test`.
const CI_SEEDS: u64 = 1_000;
/// Virtual time an operation set may take before it counts as hung.
const BUDGET: Duration = Duration::from_secs(600);
/// Virtual time after the last operation in which every lease, place in line,
/// late request and background cleanup has run out.
const WIND_DOWN: Duration = Duration::from_secs(30);

/// What one seed did.
struct Report {
    seed: u64,
    faults: Faults,
    /// Virtual time until the last operation ended (the wind-down not counted).
    simulated: Duration,
    ops: u64,
    grants: usize,
    sections: usize,
    faults_injected: u64,
    violations: Vec<String>,
    trace: Vec<String>,
}

thread_local! {
    /// The panics on this thread since its seed began.
    static PANICS: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
}

/// Records every panic on the thread it happens on: a seed runs every task (the library's
/// background work and the simulated network's too) on its own thread, and a panic in a
/// task nobody awaits would vanish with the task. Panics are still printed as before.
fn record_panics() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let _ = PANICS.try_with(|panics| {
                if let Ok(mut panics) = panics.try_borrow_mut() {
                    panics.push(info.to_string());
                }
            });
            previous(info);
        }));
    });
}

/// Runs seed `seed` on a fresh single-threaded runtime with the paused clock; every panic
/// on the way is a violation.
fn run(seed: u64) -> Report {
    record_panics();
    PANICS.with_borrow_mut(Vec::clear);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime");
    let report = std::panic::catch_unwind(AssertUnwindSafe(|| runtime.block_on(simulate(seed))));
    // The tasks still pending (background work) are dropped with it.
    drop(runtime);
    let panics = PANICS.with_borrow_mut(std::mem::take);
    let Ok(mut report) = report else {
        panic!(
            "seed {seed}: the simulation panicked:\n{}",
            panics.join("\n")
        );
    };
    let panicked = panics.into_iter().map(|panic| format!("a task {panic}"));
    report.violations.extend(panicked);
    report
}

async fn simulate(seed: u64) -> Report {
    fencelock::testing::seed_jitter(seed);
    let start = Instant::now();
    let mut rng = Rng::new(seed);
    let faults = Faults::draw(&mut rng);
    let world = Arc::new(World::new(seed, faults));
    let keys = Keys::new(rng.range(1, 3), Family::draw(&mut rng));
    let clients = rng.range(2, 4) as u32;
    let mut tasks = Vec::new();
    let mut ops = 0;
    for client_id in 0..clients {
        let client = LockClient::from_backend_on(
            SimBackend::new(client_id, world.clone()),
            Handle::current(),
        );
        for task in 0..rng.range(1, 4) {
            let task_ops = rng.range(5, 15) as u32;
            ops += u64::from(task_ops);
            let task = Task {
                world: world.clone(),
                client: client.clone(),
                client_id,
                keys: keys.clone(),
                ops: task_ops,
                first_op: (u64::from(client_id) * 100 + task + 1) * 1_000,
                rng: Rng::new(rng.next_u64()),
            };
            tasks.push(tokio::spawn(task.run()));
        }
    }
    let deleting = faults.deletions.map(|every| {
        let (world, keys, mut rng) = (world.clone(), keys.all(), Rng::new(rng.next_u64()));
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(rng.between(every / 2, every * 3 / 2)).await;
                world.delete(&keys[rng.below(keys.len() as u64) as usize]);
            }
        })
    });
    let all_done = async {
        let mut panicked = Vec::new();
        for (index, task) in tasks.into_iter().enumerate() {
            if let Err(error) = task.await {
                panicked.push(format!("application task {index} did not end: {error}"));
            }
        }
        panicked
    };
    let ended = tokio::time::timeout(BUDGET, all_done).await;
    let simulated = start.elapsed();
    if let Some(deleting) = deleting {
        deleting.abort();
    }
    tokio::time::sleep(WIND_DOWN).await;
    let history = world.history();
    let mut violations = history.violations(world.memory.keys_in_use());
    match ended {
        Ok(panicked) => violations.extend(panicked),
        Err(_) => violations.push(format!("the operations did not end within {BUDGET:?}")),
    }
    Report {
        seed,
        faults,
        simulated,
        ops,
        grants: history.grants(),
        sections: history.sections(),
        faults_injected: history.faults_injected,
        violations,
        trace: history.trace().to_vec(),
    }
}

fn env_u64(name: &str) -> Option<u64> {
    let value = std::env::var(name).ok()?;
    Some(
        value
            .parse()
            .unwrap_or_else(|_| panic!("{name}={value} is not a number")),
    )
}

fn describe_failure(report: &Report) -> String {
    let mut text = format!(
        "seed {} broke {} promise(s) ({:?}):\n",
        report.seed,
        report.violations.len(),
        report.faults
    );
    for violation in report.violations.iter().take(10) {
        text.push_str(&format!("  - {violation}\n"));
    }
    let first_op = report.violations[0]
        .split_whitespace()
        .skip_while(|word| *word != "op")
        .nth(1)
        .map(|op| format!("op {}", op.trim_matches(|c: char| !c.is_ascii_digit())));
    if let Some(op) = first_op {
        text.push_str(&format!("trace of {op}:\n"));
        for line in report
            .trace
            .iter()
            .filter(|line| line.contains(&format!("{op}:")))
        {
            text.push_str(&format!("  {line}\n"));
        }
    }
    text.push_str(&format!(
        "replay: FENCELOCK_SIM_SEED={} cargo test --all-features --test simulation -- --nocapture\n",
        report.seed
    ));
    text
}

/// The seeds of a batch: `FENCELOCK_SIM_SEEDS` from `FENCELOCK_SIM_FIRST`, else CI's.
fn batch() -> std::ops::Range<u64> {
    let first = env_u64("FENCELOCK_SIM_FIRST").unwrap_or(0);
    first..first + env_u64("FENCELOCK_SIM_SEEDS").unwrap_or(CI_SEEDS)
}

/// Something a batch of seeds must do enough of: a simulator that silently stopped
/// granting, entering bodies or injecting faults checks nothing, and must fail.
struct Activity {
    what: &'static str,
    /// Per seed: the mean and the standard deviation measured over seeds 0..3,000.
    mean: f64,
    sd: f64,
    /// What a batch of a single seed must do.
    least: u64,
}

impl Activity {
    /// The floor of a batch of `seeds`: half the total its seeds average, less four standard
    /// deviations of a batch's total (`sd √seeds`), and at least `least`: far below what a
    /// working simulator does, whichever seeds a batch has (each batch of 1,000 of seeds
    /// 0..3,000 stayed within 6% of the mean).
    fn floor(&self, seeds: u64) -> u64 {
        let seeds = seeds as f64;
        let floor = seeds * self.mean / 2.0 - 4.0 * self.sd * seeds.sqrt();
        (floor.max(0.0).ceil() as u64).max(self.least)
    }
}

/// The floors of every batch, from seeds 0..3,000 of this workload and these faults: per
/// seed, 50.2 grants, 50.1 critical sections and 25.7 faults injected on average; every seed
/// granted and entered at least 11 times, and a quarter of them injected no fault. A batch
/// of CI's 1,000 seeds must reach 22,849 grants, 22,875 sections and 9,258 faults (they
/// did about 50,000, 50,000 and 25,000). A simulator that does nothing fails every batch,
/// on faults every batch of 79 seeds or more. A change to the workload or the faults that
/// moves the means measures them again.
const ACTIVITY: [Activity; 3] = [
    Activity {
        what: "grants",
        mean: 50.2,
        sd: 17.8,
        least: 1,
    },
    Activity {
        what: "critical sections",
        mean: 50.1,
        sd: 17.2,
        least: 1,
    },
    Activity {
        what: "faults injected",
        mean: 25.7,
        sd: 28.4,
        least: 0,
    },
];

#[test]
fn seeds_break_no_promise() {
    if let Some(seed) = env_u64("FENCELOCK_SIM_SEED") {
        let report = run(seed);
        for line in &report.trace {
            println!("{line}");
        }
        assert!(
            report.violations.is_empty(),
            "{}",
            describe_failure(&report)
        );
        println!("seed {seed}: no violation ({:?})", report.faults);
        return;
    }
    let seeds = batch();
    let started = std::time::Instant::now();
    let mut failures = Vec::new();
    let (mut simulated, mut ops, mut grants, mut sections, mut faults) =
        (Duration::ZERO, 0, 0, 0, 0);
    for seed in seeds.clone() {
        let report = run(seed);
        simulated += report.simulated;
        ops += report.ops;
        grants += report.grants as u64;
        sections += report.sections as u64;
        faults += report.faults_injected;
        if !report.violations.is_empty() {
            eprintln!("{}", describe_failure(&report));
            failures.push(report.seed);
        }
    }
    let count = seeds.end - seeds.start;
    println!(
        "simulation: {count} seeds from {}, {:.2} simulated hours in {:.1} s: {ops} \
         operations, {grants} grants, {sections} critical sections, {faults} faults \
         injected; {} seed(s) with violations {failures:?}",
        seeds.start,
        simulated.as_secs_f64() / 3_600.0,
        started.elapsed().as_secs_f64(),
        failures.len()
    );
    let idle: Vec<String> = ACTIVITY
        .iter()
        .zip([grants, sections, faults])
        .filter(|(activity, done)| *done < activity.floor(count))
        .map(|(activity, done)| {
            format!(
                "{done} {} (the floor: {})",
                activity.what,
                activity.floor(count)
            )
        })
        .collect();
    assert!(failures.is_empty(), "seeds with violations: {failures:?}");
    assert!(
        idle.is_empty(),
        "the simulator did too little to prove anything: {}",
        idle.join(", ")
    );
}

/// Every known defect, planted in the library in turn, breaks a promise in some seed of CI's
/// budget (from `FENCELOCK_SIM_FIRST`, whatever `FENCELOCK_SIM_SEEDS` says): the checks see
/// what they are there to see.
#[test]
fn planted_defects_are_caught() {
    let first = batch().start;
    let seeds = first..first + CI_SEEDS;
    for defect in Defect::ALL {
        let planted = plant(defect);
        let caught = seeds
            .clone()
            .map(run)
            .find(|report| !report.violations.is_empty());
        drop(planted);
        let Some(report) = caught else {
            panic!("{defect:?} broke no promise in seeds {seeds:?}");
        };
        println!(
            "{defect:?}: caught by seed {} ({} seed(s) run): {}",
            report.seed,
            report.seed - seeds.start + 1,
            report.violations[0]
        );
    }
}

#[test]
fn a_seed_replays_exactly() {
    // One seed with settling, one without; both with lost replies, deleted keys and frozen
    // clients.
    for seed in [7, 1783] {
        let first = run(seed);
        let second = run(seed);
        let diverged = first
            .trace
            .iter()
            .zip(&second.trace)
            .position(|(a, b)| a != b);
        assert!(
            first.trace == second.trace,
            "seed {seed} took another path on its second run, from line {diverged:?}: {:?} vs {:?}",
            diverged.map(|at| &first.trace[at.saturating_sub(3)..=at]),
            diverged.map(|at| &second.trace[at.saturating_sub(3)..=at]),
        );
        assert!(first.trace.len() > 100, "the run did something");
    }
}

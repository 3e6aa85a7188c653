//! Mutual exclusion under faults, measured: the torture run.
//!
//! ```text
//! cargo run --release -p fencelock-bench --bin torture -- [--seconds N] [SCENARIO...]
//! ```
//!
//! Each scenario runs 4 worker processes × 8 tasks (this binary, `torture worker`) against
//! private lock servers, taking locks of one kind (a mutex by default; read/write locks,
//! semaphores and segmented locks in the `read-write-*`, `semaphore-*` and `segmented-*`
//! scenarios) on 2 keys. In each section that excludes the others (a mutex's, a writer's, a
//! shard's) a task reads a counter on a protected resource (a second Redis) and writes it
//! back plus one; the resource refuses reads and writes whose fencing token is older than the
//! newest it has seen, and records the token of every write it accepts and every one it
//! refuses. Every section is recorded (CLOCK_MONOTONIC entry and exit, token). Afterwards a
//! scenario fails when:
//! - the history breaks the kind's rules where the scenario promises exclusion (two holders
//!   at once; a reader beside a writer; more holders than permits), or tokens go backwards
//!   in entry order anywhere (also where only fencing is promised);
//! - the resource accepted writes out of token order, lost updates, or (where exclusion is
//!   promised) saw any stale token at all;
//! - a worker never reached the store, the workers ran fewer sections than the scenario's
//!   floor, or the scenario's faults did not hit (a kill that killed, a cut that closed
//!   connections, a freeze that stopped the process).
//!
//! Default: every scenario, 20 s each; `bench/tests/torture.rs` runs each for 3 s in CI.

mod run;
mod scenarios;
mod worker;

use fencelock::testing::history::Violation;
use run::{Promise, Report};

/// One line of the table, then what went wrong, if anything.
fn print_report(report: &Report) {
    let [lost, not_acquired, backend, other] = report.errors;
    let count = |rule: fn(&Violation) -> bool| report.violations.iter().filter(|v| rule(v)).count();
    let overlaps = count(|v| matches!(v, Violation::Overlap(..) | Violation::TooMany(_)));
    let out_of_order = count(|v| matches!(v, Violation::TokenOrder(..)));
    let broken = report.broken();
    println!(
        "{:<44} {:<10} {:>12} {:>14} {:>6} {:>8} {:>11} {:>7} {:>8}  lost {lost}, not acquired {not_acquired}, backend {backend}, other {other}{}",
        report.scenario,
        report.kind.name(),
        match report.expect.promise {
            Promise::Exclusion => "exclusion",
            Promise::FencingOnly => "fencing only",
        },
        format!("{} (>= {})", report.sections, report.floor),
        format!("{}/{}", report.faults, report.expect.faults),
        overlaps,
        out_of_order,
        report.refused,
        report.accepted,
        if broken.is_empty() {
            ""
        } else {
            "   PROMISE BROKEN"
        }
    );
    for why in &broken {
        println!("    {why}");
    }
    for violation in report.violations.iter().take(3) {
        println!("    {}", violation.to_string().replace('\n', "\n    "));
    }
    for failure in &report.failed_workers {
        println!("    {failure}");
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("worker") {
        return tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?
            .block_on(worker::run());
    }
    let mut seconds = 20u64;
    let mut chosen = Vec::new();
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--seconds" => seconds = args.next().ok_or("--seconds needs a number")?.parse()?,
            name => chosen.push(scenarios::ALL.iter().find(|s| s.name == name).ok_or_else(
                || {
                    let names: Vec<_> = scenarios::ALL.iter().map(|s| s.name).collect();
                    format!("unknown scenario {name}; scenarios: {}", names.join(", "))
                },
            )?),
        }
    }
    if chosen.is_empty() {
        chosen = scenarios::ALL.iter().collect();
    }
    println!(
        "{} worker processes x {} tasks, 2 keys, ttl {} ms, {seconds} s per scenario",
        run::PROCESSES,
        worker::TASKS,
        worker::TTL_MS
    );
    println!(
        "{:<44} {:<10} {:>12} {:>14} {:>6} {:>8} {:>11} {:>7} {:>8}  errors surfaced to callers",
        "scenario",
        "kind",
        "promise",
        "sections",
        "faults",
        "overlaps",
        "token order",
        "refused",
        "accepted"
    );
    let mut broken = 0;
    for scenario in chosen {
        let report = (scenario.run)(seconds * 1_000)?;
        print_report(&report);
        if !report.broken().is_empty() {
            broken += 1;
        }
    }
    if broken > 0 {
        return Err(format!("{broken} scenario(s) broke their promise").into());
    }
    Ok(())
}

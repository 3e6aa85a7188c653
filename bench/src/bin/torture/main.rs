//! Mutual exclusion under faults, measured: the torture run.
//!
//! ```text
//! cargo run --release -p fencelock-bench --bin torture -- [--seconds N] [SCENARIO...]
//! ```
//!
//! Each scenario runs 4 worker processes × 8 tasks (this binary, `torture worker`) against a
//! private `redis-server`, taking locks on 2 keys. In each critical section a task reads a
//! counter on a protected resource (a second Redis) and writes it back plus one; the resource
//! refuses reads and writes whose fencing token is older than the newest it has seen. Every
//! section is recorded (CLOCK_MONOTONIC entry and exit, token); afterwards the history
//! checker looks for two holders at once and for tokens out of order, and the resource's
//! counters show lost updates. A scenario that breaks its promise makes the exit code 1.
//! Default: every scenario, 20 s each; `bench/tests/torture.rs` runs each for 3 s in CI.

mod run;
mod scenarios;
mod worker;

use run::{Promise, Report};

fn print_report(report: &Report) {
    let [lost, not_acquired, backend, other] = report.errors;
    println!(
        "{:<44} {:>13} {:>9} {:>10} {:>9} {:>6}  lost {lost}, not acquired {not_acquired}, backend {backend}, other {other}{}",
        report.scenario,
        match report.promise {
            Promise::Exclusion => "exclusion",
            Promise::FencingOnly => "fencing only",
        },
        report.sections,
        report.violations.len(),
        report.accepted,
        report.accepted - report.counted,
        if report.kept() {
            ""
        } else {
            "   PROMISE BROKEN"
        }
    );
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
        "{:<44} {:>13} {:>9} {:>10} {:>9} {:>6}  errors surfaced to callers",
        "scenario", "promise", "sections", "violations", "accepted", "lost"
    );
    let mut broken = 0;
    for scenario in chosen {
        let report = (scenario.run)(seconds * 1_000)?;
        print_report(&report);
        if !report.kept() {
            broken += 1;
        }
    }
    if broken > 0 {
        return Err(format!("{broken} scenario(s) broke their promise").into());
    }
    Ok(())
}

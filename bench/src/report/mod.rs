//! Tables on stdout, the targets, and the same figures as JSON.

mod cost;
mod footprint;
mod kinds;
mod open_loop;
mod telemetry;
mod topologies;

pub use cost::{CostRow, server_cost};
pub use footprint::footprint;
pub use kinds::{kinds, kinds_by_store, several_keys};
pub use open_loop::{Library, open_loop};
pub use telemetry::telemetry;
pub use topologies::topologies;

use std::time::Duration;

use serde_json::{Value, json};

use crate::stats::{Failures, Summary};
use crate::workloads::{Contention, Latency, ManyKeys, Mode, Throughput, W2_WAIT, W2_WORKERS};

/// Round trips per W2 critical section at best: acquire, GET, SET, release, and the
/// hand-off to the next waiter.
const W2_FLOOR_ROUND_TRIPS: f64 = 5.0;

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Prints rows under headers, the first column left-aligned, the others right-aligned.
fn table(headers: &[&str], rows: &[Vec<String>]) {
    let widths: Vec<usize> = (0..headers.len())
        .map(|c| {
            rows.iter()
                .map(|row| row[c].chars().count())
                .chain([headers[c].chars().count()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: Vec<&str>| {
        let cells: Vec<String> = cells
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(c, (cell, &w))| match c {
                0 => format!("{cell:<w$}"),
                _ => format!("{cell:>w$}"),
            })
            .collect();
        println!("  {}", cells.join("  "));
    };
    line(headers.to_vec());
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
}

fn first_errors(what: &str, failures: &Failures) {
    if let Some(error) = &failures.first {
        println!("  first {what}: {error}");
    }
}

fn summary_json(s: &Summary) -> Value {
    json!({
        "count": s.count,
        "mean_us": us(s.mean),
        "p50_us": us(s.p50),
        "p99_us": us(s.p99),
        "p999_us": us(s.p999),
        "max_us": us(s.max),
    })
}

fn failures_json(f: &Failures) -> Value {
    json!({ "count": f.count, "first": f.first })
}

/// One of the targets, met or not.
pub struct Target {
    what: String,
    measured: String,
    bound: String,
    met: bool,
}

impl Target {
    fn new(what: &str, measured: String, bound: String, met: bool) -> Target {
        Target {
            what: what.to_owned(),
            measured,
            bound,
            met,
        }
    }

    pub fn met(&self) -> bool {
        self.met
    }

    pub fn json(&self) -> Value {
        json!({ "what": self.what, "measured": self.measured, "bound": self.bound, "met": self.met })
    }
}

fn print_targets(targets: &[Target]) {
    for t in targets {
        let verdict = if t.met { "met   " } else { "MISSED" };
        println!(
            "  target {verdict} {}: {} (target {})",
            t.what, t.measured, t.bound
        );
    }
}

pub fn w0(ping: &Latency) -> Value {
    println!(
        "\nW0  floor: {} sequential PING, one multiplexed redis-rs connection",
        ping.iterations
    );
    let s = &ping.summary;
    table(
        &["operation", "mean µs", "p50 µs", "p99 µs", "failures"],
        &[vec![
            "PING (one round trip)".into(),
            format!("{:.1}", us(s.mean)),
            format!("{:.1}", us(s.p50)),
            format!("{:.1}", us(s.p99)),
            ping.failures.count.to_string(),
        ]],
    );
    first_errors("failure", &ping.failures);
    json!({
        "iterations": ping.iterations,
        "latency": summary_json(s),
        "failures": failures_json(&ping.failures),
    })
}

/// The W1 rows: fencelock's guard (what the target is about), fencelock's attribute, rslock.
pub struct W1<'a> {
    pub guard: &'a Latency,
    pub attribute: &'a Latency,
    pub rslock: &'a Latency,
}

pub fn w1(runs: &W1<'_>, ping: Duration, targets: &mut Vec<Target>) -> Value {
    println!(
        "\nW1  uncontended: one client, {} sequential acquire + release of one key",
        runs.guard.iterations
    );
    let ratio = |l: &Latency| l.summary.mean.as_secs_f64() / ping.as_secs_f64();
    let named = [
        ("fencelock", runs.guard),
        ("fencelock #[redis_lock]", runs.attribute),
        ("rslock", runs.rslock),
    ];
    let rows: Vec<Vec<String>> = named
        .iter()
        .map(|(name, l)| {
            vec![
                name.to_string(),
                format!("{:.1}", us(l.summary.mean)),
                format!("{:.1}", us(l.summary.p50)),
                format!("{:.1}", us(l.summary.p99)),
                format!("{:.2}x", ratio(l)),
                l.failures.count.to_string(),
            ]
        })
        .collect();
    table(
        &[
            "library",
            "mean µs",
            "p50 µs",
            "p99 µs",
            "mean / PING",
            "failures",
        ],
        &rows,
    );
    for (name, l) in named {
        first_errors(&format!("{name} failure"), &l.failures);
    }
    let fence = runs.guard;
    let against_rslock = ratio(fence) / ratio(runs.rslock);
    let new = vec![
        Target::new(
            "W1 fencelock mean",
            format!("{:.2}x PING", ratio(fence)),
            "<= 2.30x PING".into(),
            ratio(fence) <= 2.3 && fence.failures.count == 0,
        ),
        Target::new(
            "W1 fencelock mean vs rslock's",
            format!("{against_rslock:.2}x"),
            "<= 1.05x".into(),
            against_rslock <= 1.05 && fence.failures.count == 0,
        ),
    ];
    print_targets(&new);
    targets.extend(new);
    let row = |l: &Latency| {
        json!({
            "iterations": l.iterations,
            "latency": summary_json(&l.summary),
            "mean_over_ping": ratio(l),
            "failures": failures_json(&l.failures),
        })
    };
    json!({
        "fencelock": row(runs.guard),
        "fencelock_attribute": row(runs.attribute),
        "rslock": row(runs.rslock),
    })
}

/// The best W2 could do: `W2_FLOOR_ROUND_TRIPS` PINGs per critical section.
struct Floor {
    critical_section: Duration,
    ops_per_s: f64,
}

impl Floor {
    fn of(ping: Duration) -> Floor {
        let critical_section = ping.mul_f64(W2_FLOOR_ROUND_TRIPS);
        Floor {
            critical_section,
            ops_per_s: 1.0 / critical_section.as_secs_f64(),
        }
    }
}

pub fn w2(
    rows: &[Contention],
    per_worker: usize,
    ping: Duration,
    targets: &mut Vec<Target>,
) -> Value {
    let floor = Floor::of(ping);
    print_w2_table(rows, per_worker, ping, &floor);
    let new = w2_targets(rows, &floor);
    print_targets(&new);
    targets.extend(new);
    w2_json(rows, per_worker, &floor)
}

/// The heading, the floor, one row per mode and each mode's first errors.
fn print_w2_table(rows: &[Contention], per_worker: usize, ping: Duration, floor: &Floor) {
    println!(
        "\nW2  contended: {W2_WORKERS} workers, each its own client and connection, one key, \
         {per_worker} x (acquire -> GET -> SET -> release) each, wait <= {} s",
        W2_WAIT.as_secs()
    );
    println!(
        "  floor: {W2_FLOOR_ROUND_TRIPS} round trips per critical section = \
         {W2_FLOOR_ROUND_TRIPS} x {:.1} µs PING = {:.1} µs -> {:.0} ops/s",
        us(ping),
        us(floor.critical_section),
        floor.ops_per_s
    );
    let table_rows: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.mode.label().to_owned(),
                format!("{:.0}", r.ops_per_s()),
                format!("{:.1}%", 100.0 * r.ops_per_s() / floor.ops_per_s),
                format!("{:.2}", ms(r.wait.p50)),
                format!("{:.2}", ms(r.wait.p99)),
                format!("{:.2}", ms(r.wait.max)),
                format!(
                    "{:.0} / {:.0}",
                    us(r.handoff_gap.p50),
                    us(r.handoff_gap.p99)
                ),
                r.counter.to_string(),
                r.lost_updates().to_string(),
                match r.handoffs {
                    Some(handoffs) => format!("{handoffs}/{}", r.granted.saturating_sub(1)),
                    None => "n/a".to_owned(),
                },
                format!("{:.1}", us(r.critical_section.mean)),
                r.acquire_failures.count.to_string(),
                r.op_errors.count.to_string(),
            ]
        })
        .collect();
    table(
        &[
            "mode",
            "ops/s",
            "% floor",
            "p50 wait ms",
            "p99 wait ms",
            "max wait ms",
            "gap p50/p99 µs",
            "counter",
            "lost",
            "handed over",
            "mean CS µs",
            "acq. fail",
            "op errors",
        ],
        &table_rows,
    );
    println!(
        "  lost = increments made under the lock - counter; CS = granted -> release answered; \
         handed over = grants a release made (its announcements, heard by an operator's watch) \
         / grants - 1; gap = release sent -> the next grant (the key unused between holders)"
    );
    for r in rows {
        first_errors(
            &format!("acquire failure, {}", r.mode.label()),
            &r.acquire_failures,
        );
        first_errors(&format!("op error, {}", r.mode.label()), &r.op_errors);
    }
}

/// Throughput and worst wait against the floor and both rslock rows, no lost update in any
/// fencelock mode, and the fair mode's wait and throughput; a target whose modes did not run
/// is left out.
fn w2_targets(rows: &[Contention], floor: &Floor) -> Vec<Target> {
    let find = |mode: Mode| rows.iter().find(|r| r.mode == mode);
    let mut new = Vec::new();
    if let Some(default) = find(Mode::Default) {
        let share = default.ops_per_s() / floor.ops_per_s;
        new.push(Target::new(
            "W2 fencelock ops/s",
            format!("{:.1}% of floor", 100.0 * share),
            ">= 25% of floor".into(),
            share >= 0.25,
        ));
    }
    if let (Some(default), Some(rs)) = (find(Mode::Default), find(Mode::Rslock)) {
        new.push(at_least_ops(
            "W2 fencelock ops/s vs rslock",
            default,
            rs,
            1.0,
        ));
    }
    if let (Some(default), Some(tight)) = (find(Mode::Default), find(Mode::RslockTight)) {
        new.push(at_least_ops(
            "W2 fencelock ops/s vs rslock tight retry",
            default,
            tight,
            1.0,
        ));
        new.push(Target::new(
            "W2 fencelock max wait vs rslock tight retry",
            format!(
                "{:.2} ms vs {:.2} ms",
                ms(default.wait.max),
                ms(tight.wait.max)
            ),
            format!("<= half = {:.2} ms", ms(tight.wait.max) / 2.0),
            default.wait.max.mul_f64(2.0) <= tight.wait.max && default.acquire_failures.count == 0,
        ));
    }
    new.push(no_lost_update(rows));
    if let Some(fair) = find(Mode::Fair) {
        new.push(fair_p99_wait(fair));
    }
    if let (Some(fair), Some(default)) = (find(Mode::Fair), find(Mode::Default)) {
        new.push(at_least_ops("W2 fair ops/s vs default", fair, default, 0.9));
    }
    new
}

/// `row`'s ops/s at least `share` of `other`'s.
fn at_least_ops(what: &str, row: &Contention, other: &Contention, share: f64) -> Target {
    let (ops, bound) = (row.ops_per_s(), share * other.ops_per_s());
    Target::new(
        what,
        format!(
            "{ops:.0} vs {:.0} ({:.2}x)",
            other.ops_per_s(),
            ops / other.ops_per_s()
        ),
        format!(">= {:.0}% of it = {bound:.0}", 100.0 * share),
        ops >= bound && row.acquire_failures.count == 0,
    )
}

fn no_lost_update(rows: &[Contention]) -> Target {
    let fence_rows = rows.iter().filter(|r| r.mode.is_fencelock());
    let (lost, failed) = fence_rows.fold((0, 0), |(lost, failed), r| {
        (
            lost + r.lost_updates(),
            failed + r.acquire_failures.count + r.op_errors.count,
        )
    });
    Target::new(
        "W2 fencelock lost updates (all modes)",
        format!("{lost} lost, {failed} failed calls"),
        "0 lost".into(),
        lost == 0,
    )
}

fn fair_p99_wait(fair: &Contention) -> Target {
    let bound = fair
        .critical_section
        .mean
        .mul_f64(1.5 * (W2_WORKERS - 1) as f64);
    Target::new(
        "W2 fair p99 wait",
        format!("{:.2} ms", ms(fair.wait.p99)),
        format!(
            "<= 1.5 x ({W2_WORKERS} - 1) x mean CS {:.1} µs = {:.2} ms",
            us(fair.critical_section.mean),
            ms(bound)
        ),
        fair.wait.p99 <= bound && fair.acquire_failures.count == 0,
    )
}

/// The same figures as the table, and the floor, for the JSON report.
fn w2_json(rows: &[Contention], per_worker: usize, floor: &Floor) -> Value {
    let json_rows: Vec<Value> = rows
        .iter()
        .map(|r| {
            json!({
                "mode": r.mode.label(),
                "wall_s": r.wall.as_secs_f64(),
                "ops_per_s": r.ops_per_s(),
                "percent_of_floor": 100.0 * r.ops_per_s() / floor.ops_per_s,
                "wait": summary_json(&r.wait),
                "handoff_gap": summary_json(&r.handoff_gap),
                "critical_section": summary_json(&r.critical_section),
                "granted": r.granted,
                "increments": r.increments,
                "counter": r.counter,
                "lost_updates": r.lost_updates(),
                "handoffs": r.handoffs,
                "acquire_failures": failures_json(&r.acquire_failures),
                "op_errors": failures_json(&r.op_errors),
            })
        })
        .collect();
    json!({
        "workers": W2_WORKERS,
        "per_worker": per_worker,
        "floor_round_trips": W2_FLOOR_ROUND_TRIPS,
        "floor_critical_section_us": us(floor.critical_section),
        "floor_ops_per_s": floor.ops_per_s,
        "rows": json_rows,
    })
}

pub fn w3(
    runs: &ManyKeys,
    benchmark: &Result<f64, String>,
    per_worker: usize,
    benchmark_requests: usize,
    targets: &mut Vec<Target>,
) -> Value {
    println!(
        "\nW3  many keys: {} workers on {} keys, {per_worker} acquire + release each, all at \
         once; one shared client, then a client (and connection) per worker",
        runs.workers, runs.workers
    );
    print_w3_table(runs, benchmark, benchmark_requests);
    let new = vec![
        w3_against_set(&runs.fencelock_shared, benchmark),
        Target::new(
            "W3 fencelock ops/s vs rslock, client per worker",
            format!(
                "{:.0} vs {:.0}",
                runs.fencelock_own.ops_per_s(),
                runs.rslock_own.ops_per_s()
            ),
            ">= rslock".into(),
            runs.fencelock_own.ops_per_s() >= runs.rslock_own.ops_per_s()
                && runs.fencelock_own.failures.count == 0,
        ),
    ];
    print_targets(&new);
    targets.extend(new);
    w3_json(runs, benchmark, per_worker, benchmark_requests)
}

fn print_w3_table(runs: &ManyKeys, benchmark: &Result<f64, String>, benchmark_requests: usize) {
    let share = |commands: f64| match benchmark {
        Ok(rps) => format!("{:.1}%", 100.0 * commands / rps),
        Err(_) => "n/a".into(),
    };
    let mut rows: Vec<Vec<String>> = runs
        .rows()
        .iter()
        .map(|(name, t)| {
            vec![
                name.to_string(),
                format!("{:.0}", t.ops_per_s()),
                format!("{:.0}", 2.0 * t.ops_per_s()),
                share(2.0 * t.ops_per_s()),
                t.failures.count.to_string(),
            ]
        })
        .collect();
    rows.push(match benchmark {
        Ok(rps) => vec![
            format!("redis-benchmark SET -c 64 -n {benchmark_requests}"),
            "-".into(),
            format!("{rps:.0}"),
            "100.0%".into(),
            "-".into(),
        ],
        Err(why) => vec![
            format!("redis-benchmark: {why}"),
            "-".into(),
            "n/a".into(),
            "n/a".into(),
            "-".into(),
        ],
    });
    table(
        &["library", "ops/s", "commands/s", "% of SET", "failures"],
        &rows,
    );
    println!("  ops = acquire + release pairs; commands/s = 2 x ops/s");
    for (name, t) in runs.rows() {
        first_errors(&format!("{name} failure"), &t.failures);
    }
}

/// The shared client's pairs per second against half of `redis-benchmark`'s SETs per second
/// (a pair is two commands).
fn w3_against_set(fence: &Throughput, benchmark: &Result<f64, String>) -> Target {
    let ops = fence.ops_per_s();
    match benchmark {
        Ok(rps) => Target::new(
            "W3 fencelock ops/s, shared client",
            format!("{ops:.0} = {:.1}% of SET/s / 2", 200.0 * ops / rps),
            format!(">= 100% of redis-benchmark SET/s / 2 = {:.0}", rps / 2.0),
            ops >= rps / 2.0 && fence.failures.count == 0,
        ),
        Err(why) => Target::new(
            "W3 fencelock ops/s, shared client",
            format!("{ops:.0}"),
            format!(">= redis-benchmark SET/s / 2, not measured: {why}"),
            false,
        ),
    }
}

fn throughput_json(t: &Throughput) -> Value {
    json!({
        "pairs": t.pairs,
        "wall_s": t.wall.as_secs_f64(),
        "ops_per_s": t.ops_per_s(),
        "commands_per_s": 2.0 * t.ops_per_s(),
        "failures": failures_json(&t.failures),
    })
}

fn w3_json(
    runs: &ManyKeys,
    benchmark: &Result<f64, String>,
    per_worker: usize,
    benchmark_requests: usize,
) -> Value {
    json!({
        "workers": runs.workers,
        "per_worker": per_worker,
        "fencelock_shared_client": throughput_json(&runs.fencelock_shared),
        "rslock_shared_client": throughput_json(&runs.rslock_shared),
        "fencelock_client_per_worker": throughput_json(&runs.fencelock_own),
        "rslock_client_per_worker": throughput_json(&runs.rslock_own),
        "redis_benchmark_set": match benchmark {
            Ok(rps) => json!({ "requests": benchmark_requests, "requests_per_s": rps }),
            Err(why) => json!({ "error": why }),
        },
    })
}

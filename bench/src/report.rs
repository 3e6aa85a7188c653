//! Tables on stdout, the targets, and the same figures as JSON.

use std::time::Duration;

use serde_json::{Value, json};

use crate::stats::{Failures, Summary};
use crate::workloads::{Contention, Latency, Mode, Throughput, W2_WAIT, W2_WORKERS};

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

pub fn w1(fence: &Latency, rs: &Latency, ping: Duration, targets: &mut Vec<Target>) -> Value {
    println!(
        "\nW1  uncontended: one client, {} sequential acquire + release of one key",
        fence.iterations
    );
    let ratio = |l: &Latency| l.summary.mean.as_secs_f64() / ping.as_secs_f64();
    let rows: Vec<Vec<String>> = [("fencelock", fence), ("rslock", rs)]
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
    first_errors("fencelock failure", &fence.failures);
    first_errors("rslock failure", &rs.failures);
    let new = vec![Target::new(
        "W1 fencelock mean",
        format!("{:.2}x PING", ratio(fence)),
        "<= 2.30x PING".into(),
        ratio(fence) <= 2.3 && fence.failures.count == 0,
    )];
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
    json!({ "fencelock": row(fence), "rslock": row(rs) })
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
                r.counter.to_string(),
                r.lost_updates().to_string(),
                format!("{}/{}", r.handoffs, r.granted.saturating_sub(1)),
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
            "counter",
            "lost",
            "hand-offs",
            "mean CS µs",
            "acq. fail",
            "op errors",
        ],
        &table_rows,
    );
    println!("  lost = increments made under the lock - counter; CS = granted -> release answered");
    for r in rows {
        first_errors(
            &format!("acquire failure, {}", r.mode.label()),
            &r.acquire_failures,
        );
        first_errors(&format!("op error, {}", r.mode.label()), &r.op_errors);
    }
}

/// Throughput and worst wait against the floor and rslock, no lost update in any
/// fencelock mode, and the fair mode's p99 wait; a target whose mode did not run is left out.
fn w2_targets(rows: &[Contention], floor: &Floor) -> Vec<Target> {
    let find = |mode: Mode| rows.iter().find(|r| r.mode == mode);
    let mut new = Vec::new();
    if let (Some(default), Some(rs)) = (find(Mode::Default), find(Mode::Rslock)) {
        let share = default.ops_per_s() / floor.ops_per_s;
        new.push(Target::new(
            "W2 fencelock ops/s",
            format!("{:.1}% of floor", 100.0 * share),
            ">= 25% of floor".into(),
            share >= 0.25,
        ));
        new.push(Target::new(
            "W2 fencelock ops/s vs rslock",
            format!("{:.0} vs {:.0}", default.ops_per_s(), rs.ops_per_s()),
            ">= rslock".into(),
            default.ops_per_s() >= rs.ops_per_s(),
        ));
        new.push(Target::new(
            "W2 fencelock max wait",
            format!(
                "{:.2} ms vs rslock {:.2} ms",
                ms(default.wait.max),
                ms(rs.wait.max)
            ),
            format!("<= rslock / 5 = {:.2} ms", ms(rs.wait.max) / 5.0),
            default.wait.max.mul_f64(5.0) <= rs.wait.max && default.acquire_failures.count == 0,
        ));
    }
    let fence_rows = rows.iter().filter(|r| r.mode != Mode::Rslock);
    let (lost, failed) = fence_rows.fold((0, 0), |(lost, failed), r| {
        (
            lost + r.lost_updates(),
            failed + r.acquire_failures.count + r.op_errors.count,
        )
    });
    new.push(Target::new(
        "W2 fencelock lost updates (all modes)",
        format!("{lost} lost, {failed} failed calls"),
        "0 lost".into(),
        lost == 0,
    ));
    if let Some(fair) = find(Mode::Fair) {
        let bound = fair
            .critical_section
            .mean
            .mul_f64(1.5 * (W2_WORKERS - 1) as f64);
        new.push(Target::new(
            "fair p99 wait",
            format!("{:.2} ms", ms(fair.wait.p99)),
            format!(
                "<= 1.5 x ({W2_WORKERS} - 1) x mean CS {:.1} µs = {:.2} ms",
                us(fair.critical_section.mean),
                ms(bound)
            ),
            fair.wait.p99 <= bound && fair.acquire_failures.count == 0,
        ));
    }
    new
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
    fence: &Throughput,
    rs: &Throughput,
    benchmark: &Result<f64, String>,
    workers: usize,
    per_worker: usize,
    benchmark_requests: usize,
    targets: &mut Vec<Target>,
) -> Value {
    println!(
        "\nW3  many keys: {workers} workers on {workers} keys, {per_worker} acquire + release \
         each, all at once, one shared client"
    );
    let share = |commands: f64| match benchmark {
        Ok(rps) => format!("{:.1}%", 100.0 * commands / rps),
        Err(_) => "n/a".into(),
    };
    let mut rows: Vec<Vec<String>> = [("fencelock", fence), ("rslock", rs)]
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
    first_errors("fencelock failure", &fence.failures);
    first_errors("rslock failure", &rs.failures);
    let commands = 2.0 * fence.ops_per_s();
    let new = vec![match benchmark {
        Ok(rps) => Target::new(
            "W3 fencelock commands/s",
            format!("{commands:.0} = {:.1}% of SET", 100.0 * commands / rps),
            format!(">= 50% of redis-benchmark SET = {:.0}", rps / 2.0),
            commands >= rps / 2.0 && fence.failures.count == 0,
        ),
        Err(why) => Target::new(
            "W3 fencelock commands/s",
            format!("{commands:.0}"),
            format!(">= 50% of redis-benchmark SET, not measured: {why}"),
            false,
        ),
    }];
    print_targets(&new);
    targets.extend(new);
    let row = |t: &Throughput| {
        json!({
            "pairs": t.pairs,
            "wall_s": t.wall.as_secs_f64(),
            "ops_per_s": t.ops_per_s(),
            "commands_per_s": 2.0 * t.ops_per_s(),
            "failures": failures_json(&t.failures),
        })
    };
    json!({
        "workers": workers,
        "per_worker": per_worker,
        "fencelock": row(fence),
        "rslock": row(rs),
        "redis_benchmark_set": match benchmark {
            Ok(rps) => json!({ "requests": benchmark_requests, "requests_per_s": rps }),
            Err(why) => json!({ "error": why }),
        },
    })
}

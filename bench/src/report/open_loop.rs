//! The open-loop latency table.

use fencelock::DEFAULT_MAX_IN_FLIGHT;
use serde_json::{Value, json};

use super::{failures_json, first_errors, ms, summary_json, table};
use crate::open_loop::{CAPACITY_WORKERS, KEYS, MAX_IN_FLIGHT, OpenLoop};
use crate::workloads::Throughput;

/// One library's capacity run and its open-loop runs.
pub struct Library<'a> {
    pub name: &'a str,
    pub capacity: &'a Throughput,
    pub runs: &'a [OpenLoop],
}

pub fn open_loop(libraries: &[Library], base: f64, run_s: f64) -> Value {
    println!(
        "\nOpen loop: acquire + release on {KEYS} uniformly drawn keys at fixed intervals, \
         {run_s} s per rate, <= {MAX_IN_FLIGHT} in flight; latency = scheduled start -> \
         granted; refused = refused at once by the client's bound on keys with attempts at the \
         store (fencelock's default {DEFAULT_MAX_IN_FLIGHT}); refusal = the call -> refused"
    );
    for library in libraries {
        println!(
            "  capacity, {name}: {ops:.0} pairs/s ({CAPACITY_WORKERS} workers back to back, \
             one shared client, {failures} failures)",
            name = library.name,
            ops = library.capacity.ops_per_s(),
            failures = library.capacity.failures.count,
        );
    }
    println!("  offered rates: shares of fencelock's capacity {base:.0}/s, the same for both");
    let rows: Vec<Vec<String>> = libraries
        .iter()
        .flat_map(|library| library.runs.iter().map(|run| row(library.name, run)))
        .collect();
    table(
        &[
            "library",
            "load",
            "offered/s",
            "done/s",
            "p50 ms",
            "p99 ms",
            "p99.9 ms",
            "max ms",
            "sched. lag p99 ms",
            "refused",
            "refusal p99 ms",
            "failures",
        ],
        &rows,
    );
    for library in libraries {
        first_errors(
            &format!("{} capacity failure", library.name),
            &library.capacity.failures,
        );
        for run in library.runs {
            first_errors(
                &format!("{} failure at {:.0}%", library.name, 100.0 * run.load),
                &run.failures,
            );
        }
    }
    json!({
        "keys": KEYS,
        "run_s": run_s,
        "max_in_flight": MAX_IN_FLIGHT,
        "base_rate_per_s": base,
        "libraries": libraries.iter().map(library_json).collect::<Vec<_>>(),
    })
}

fn row(name: &str, run: &OpenLoop) -> Vec<String> {
    vec![
        name.to_owned(),
        format!("{:.0}%", 100.0 * run.load),
        format!("{:.0}", run.rate),
        format!("{:.0}", run.achieved()),
        format!("{:.3}", ms(run.latency.p50)),
        format!("{:.3}", ms(run.latency.p99)),
        format!("{:.3}", ms(run.latency.p999)),
        format!("{:.3}", ms(run.latency.max)),
        format!("{:.3}", ms(run.lag.p99)),
        run.refused.count.to_string(),
        match run.refused.count {
            0 => "-".to_owned(),
            _ => format!("{:.3}", ms(run.refused.p99)),
        },
        run.failures.count.to_string(),
    ]
}

fn library_json(library: &Library) -> Value {
    json!({
        "library": library.name,
        "capacity_ops_per_s": library.capacity.ops_per_s(),
        "capacity_failures": failures_json(&library.capacity.failures),
        "runs": library.runs.iter().map(|run| json!({
            "load": run.load,
            "offered_per_s": run.rate,
            "scheduled": run.scheduled,
            "achieved_per_s": run.achieved(),
            "latency": summary_json(&run.latency),
            "scheduler_lag": summary_json(&run.lag),
            "refused": summary_json(&run.refused),
            "failures": failures_json(&run.failures),
        })).collect::<Vec<_>>(),
    })
}

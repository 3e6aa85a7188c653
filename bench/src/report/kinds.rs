//! The lock kinds table.

use serde_json::{Value, json};

use super::{table, us};
use crate::kinds::{HOLD, KINDS, KindRun, SeveralRun, StoreKinds, WORKERS};
use crate::workloads::Latency;

pub fn kinds(ping: &Latency, runs: &[KindRun], per_worker: usize) -> Value {
    let floor = ping.summary.mean;
    println!(
        "\nLock kinds on one server: W1 (sequential uncontended acquire + release, {} pairs), \
         and {WORKERS} workers with a client each taking one key {per_worker} times, holding \
         it {} ms; round trips and commands per acquisition measured on the wire (a proxy \
         counting requests, Redis counting commands, a script's own included); floor: PING \
         {:.1} µs",
        runs.first().map_or(0, |run| run.uncontended.iterations),
        HOLD.as_millis(),
        us(floor)
    );
    let rows: Vec<Vec<String>> = runs
        .iter()
        .map(|run| {
            let w1 = run.uncontended.summary;
            let grants_per_s = run.grants as f64 / run.contended_wall.as_secs_f64();
            vec![
                run.label.to_owned(),
                format!("{:.1}", us(w1.mean)),
                format!("{:.1}", us(w1.p99)),
                format!("{:.2}x", w1.mean.as_secs_f64() / floor.as_secs_f64()),
                format!("{:.2}", run.wire.round_trips),
                format!("{:.1}", run.wire.commands),
                format!("{grants_per_s:.0}"),
                format!("{:.2}", run.contended_scripts.per(run.grants)),
                (run.failures.count + run.uncontended.failures.count).to_string(),
            ]
        })
        .collect();
    table(
        &[
            "kind",
            "W1 mean µs",
            "p99 µs",
            "/ PING",
            "round trips / acquire",
            "commands / acquire",
            "8 workers: grants/s",
            "scripts / grant",
            "failures",
        ],
        &rows,
    );
    json!({
        "ping_mean_us": us(floor),
        "rows": runs.iter().map(|run| json!({
            "kind": run.label,
            "w1_mean_us": us(run.uncontended.summary.mean),
            "w1_p99_us": us(run.uncontended.summary.p99),
            "round_trips_per_acquire": run.wire.round_trips,
            "commands_per_acquire": run.wire.commands,
            "contended_grants_per_s": run.grants as f64 / run.contended_wall.as_secs_f64(),
            "contended_scripts_per_grant": run.contended_scripts.per(run.grants),
            "failures": run.failures.count + run.uncontended.failures.count,
        })).collect::<Vec<_>>(),
    })
}

pub fn several_keys(ping: &Latency, runs: &[SeveralRun]) -> Value {
    let floor = ping.summary.mean;
    println!(
        "\nSeveral mutex keys on one server: W1 (free keys taken, then released; {} times), \
         `lock_all` (one call for every key) beside the same keys taken one by one; round \
         trips per acquisition of every key counted on the wire; floor: PING {:.1} µs",
        runs.first().map_or(0, |run| run.uncontended.iterations),
        us(floor)
    );
    let rows: Vec<Vec<String>> = runs
        .iter()
        .map(|run| {
            let w1 = run.uncontended.summary;
            vec![
                run.label.clone(),
                format!("{:.1}", us(w1.mean)),
                format!("{:.1}", us(w1.p99)),
                format!("{:.2}x", w1.mean.as_secs_f64() / floor.as_secs_f64()),
                format!("{:.2}", run.round_trips),
                run.uncontended.failures.count.to_string(),
            ]
        })
        .collect();
    table(
        &[
            "keys",
            "W1 mean µs",
            "p99 µs",
            "/ PING",
            "round trips / acquire",
            "failures",
        ],
        &rows,
    );
    json!({
        "ping_mean_us": us(floor),
        "rows": runs.iter().map(|run| json!({
            "keys": run.label,
            "w1_mean_us": us(run.uncontended.summary.mean),
            "w1_p99_us": us(run.uncontended.summary.p99),
            "round_trips_per_acquire": run.round_trips,
            "failures": run.uncontended.failures.count,
        })).collect::<Vec<_>>(),
    })
}

/// Each kind's W1 on each store, and its ratio to that store's mutex.
pub fn kinds_by_store(stores: &[StoreKinds]) -> Value {
    println!(
        "\nLock kinds on every store: W1 mean µs (sequential uncontended acquire + release, {} \
         pairs), and / the store's mutex; one member per consensus store",
        stores
            .iter()
            .flat_map(|store| store.w1.iter().flatten())
            .map(|w1| w1.iterations)
            .next()
            .unwrap_or(0)
    );
    let rows: Vec<Vec<String>> = KINDS
        .iter()
        .enumerate()
        .map(|(at, (label, _))| {
            let cells = stores.iter().map(|store| {
                let mutex = store.w1.first().and_then(Option::as_ref);
                let (Some(w1), Some(mutex)) = (store.w1[at].as_ref(), mutex) else {
                    return "not offered".to_owned();
                };
                let ratio = w1.summary.mean.as_secs_f64() / mutex.summary.mean.as_secs_f64();
                let failed = match w1.failures.count {
                    0 => String::new(),
                    n => format!(", {n} failed"),
                };
                format!("{:.1} ({ratio:.2}x{failed})", us(w1.summary.mean))
            });
            std::iter::once((*label).to_owned()).chain(cells).collect()
        })
        .collect();
    let headers: Vec<&str> = std::iter::once("kind")
        .chain(stores.iter().map(|store| store.store))
        .collect();
    table(&headers, &rows);
    json!(
        stores
            .iter()
            .map(|store| json!({
                "store": store.store,
                "w1_mean_us": store
                    .w1
                    .iter()
                    .map(|w1| w1.as_ref().map(|w1| us(w1.summary.mean)))
                    .collect::<Vec<_>>(),
            }))
            .collect::<Vec<_>>()
    )
}

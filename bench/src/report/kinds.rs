//! The lock kinds table.

use serde_json::{Value, json};

use super::{table, us};
use crate::kinds::{HOLD, KINDS, KindRun, PeerRun, SeveralRun, StoreKinds, WORKERS};
use crate::probe::ServerCost;
use crate::workloads::Latency;

pub fn kinds(ping: &Latency, runs: &[KindRun], peer: &PeerRun, per_worker: usize) -> Value {
    let floor = ping.summary.mean;
    println!(
        "\nLock kinds on one server: W1 (sequential uncontended acquire + release, {} pairs), \
         with the server's CPU and commands per pair (INFO cpu and commandstats, warm-up \
         included) beside rslock's mutex; and {WORKERS} workers with a client each taking one \
         key {per_worker} times, holding it {} ms; round trips and commands per acquisition \
         measured on the wire (a proxy counting requests, Redis counting commands, a script's \
         own included); floor: PING {:.1} µs",
        runs.first().map_or(0, |run| run.uncontended.iterations),
        HOLD.as_millis(),
        us(floor)
    );
    let pairs = |latency: &Latency| latency.operations;
    let peer_cpu = peer.uncontended_cost.cpu_per(pairs(&peer.uncontended));
    let cost = |latency: &Latency, cost: &ServerCost| {
        let cpu = cost.cpu_per(pairs(latency));
        [
            format!("{cpu:.1}"),
            format!("{:.2}x", cpu / peer_cpu),
            format!("{:.1}", cost.commands_per(pairs(latency))),
        ]
    };
    let w1 = |latency: &Latency| {
        let summary = latency.summary;
        [
            format!("{:.1}", us(summary.mean)),
            format!("{:.1}", us(summary.p99)),
            format!("{:.2}x", summary.mean.as_secs_f64() / floor.as_secs_f64()),
        ]
    };
    let mut rows: Vec<Vec<String>> = runs
        .iter()
        .map(|run| {
            let grants_per_s = run.grants as f64 / run.contended_wall.as_secs_f64();
            let mut row = vec![run.label.to_owned()];
            row.extend(w1(&run.uncontended));
            row.extend(cost(&run.uncontended, &run.uncontended_cost));
            row.extend([
                format!("{:.2}", run.wire.round_trips),
                format!("{:.1}", run.wire.commands),
                format!("{grants_per_s:.0}"),
                format!("{:.2}", run.contended_scripts.per(run.grants)),
                (run.failures.count + run.uncontended.failures.count).to_string(),
            ]);
            row
        })
        .collect();
    let mut peer_row = vec!["rslock 0.10 (mutex)".to_owned()];
    peer_row.extend(w1(&peer.uncontended));
    peer_row.extend(cost(&peer.uncontended, &peer.uncontended_cost));
    peer_row.extend(["-", "-", "-", "-"].map(str::to_owned));
    peer_row.push(peer.uncontended.failures.count.to_string());
    rows.push(peer_row);
    table(
        &[
            "kind",
            "W1 mean µs",
            "p99 µs",
            "/ PING",
            "Redis CPU µs / pair",
            "x rslock",
            "commands / pair",
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
        "rslock_w1_mean_us": us(peer.uncontended.summary.mean),
        "rslock_w1_redis_cpu_us_per_pair": peer_cpu,
        "rows": runs.iter().map(|run| json!({
            "kind": run.label,
            "w1_mean_us": us(run.uncontended.summary.mean),
            "w1_p99_us": us(run.uncontended.summary.p99),
            "w1_redis_cpu_us_per_pair": run.uncontended_cost.cpu_per(pairs(&run.uncontended)),
            "w1_commands_per_pair": run.uncontended_cost.commands_per(pairs(&run.uncontended)),
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

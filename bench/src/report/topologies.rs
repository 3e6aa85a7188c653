//! The topologies in one table.

use serde_json::{Value, json};

use super::{Target, failures_json, first_errors, print_targets, summary_json, table, us};
use crate::topologies::TopologyRun;
use crate::workloads::Latency;

pub fn topologies(ping: &Latency, runs: &[TopologyRun], targets: &mut Vec<Target>) -> Value {
    let floor = ping.summary.mean.as_secs_f64();
    println!(
        "\nTopologies: W1 ({} sequential pairs), W2 ({} workers with a client each on one key) \
         and W3 ({} workers on their own keys, one shared client); floor: PING {:.1} µs on the \
         first master (a database: its own SELECT 1; ZooKeeper and etcd: a write; in the last \
         column)",
        ping.iterations,
        crate::workloads::W2_WORKERS,
        crate::workloads::W3_WORKERS,
        us(ping.summary.mean)
    );
    let ratio = |run: &TopologyRun| run.w1.summary.mean.as_secs_f64() / floor;
    let rows: Vec<Vec<String>> = runs
        .iter()
        .map(|run| {
            vec![
                run.name.to_owned(),
                format!("{:.1}", us(run.w1.summary.mean)),
                format!("{:.1}", us(run.w1.summary.p99)),
                format!("{:.2}x", ratio(run)),
                format!("{:.0}", run.w2.ops_per_s()),
                format!("{:.1}", super::ms(run.w2.wait.max)),
                format!("{:.0}", run.w3.ops_per_s()),
                (run.w1.failures.count + run.w2.acquire_failures.count + run.w3.failures.count)
                    .to_string(),
                run.own_floor.as_ref().map_or_else(String::new, |floor| {
                    let ratio =
                        run.w1.summary.mean.as_secs_f64() / floor.summary.mean.as_secs_f64();
                    format!("{:.1} µs, W1 {ratio:.1}x", us(floor.summary.mean))
                }),
            ]
        })
        .collect();
    table(
        &[
            "topology",
            "W1 mean µs",
            "W1 p99 µs",
            "W1 / PING",
            "W2 ops/s",
            "W2 max wait ms",
            "W3 pairs/s",
            "failures",
            "own floor",
        ],
        &rows,
    );
    for run in runs {
        first_errors(&format!("{} failure", run.name), &run.w1.failures);
        first_errors(&format!("{} failure", run.name), &run.w3.failures);
    }
    let find = |name: &str| runs.iter().find(|run| run.name == name);
    let mut new = Vec::new();
    if let (Some(single), Some(redlock), Some(rslock)) =
        (find("single"), find("Redlock(5)"), find("rslock(5)"))
    {
        let slowdown = redlock.w1.summary.mean.as_secs_f64() / single.w1.summary.mean.as_secs_f64();
        new.push(Target::new(
            "Redlock(5) W1 mean against single-node W1",
            format!("{slowdown:.2}x"),
            "<= 1.30x".into(),
            slowdown <= 1.3,
        ));
        let ahead = redlock.w3.ops_per_s() / rslock.w3.ops_per_s();
        new.push(Target::new(
            "Redlock(5) W3 against rslock(5)",
            format!("{ahead:.2}x"),
            "> 1.00x".into(),
            ahead > 1.0,
        ));
    }
    if let (Some(one), Some(three)) = (find("Cluster, 1 master"), find("Cluster, 3 masters")) {
        let scaling = three.w3.ops_per_s() / one.w3.ops_per_s();
        new.push(Target::new(
            "Cluster W3, 3 masters against 1",
            format!("{scaling:.2}x"),
            "> 1.00x (scales with masters)".into(),
            scaling > 1.0,
        ));
    }
    print_targets(&new);
    targets.extend(new);
    json!(
        runs.iter()
            .map(|run| json!({
                "topology": run.name,
                "w1": summary_json(&run.w1.summary),
                "w1_failures": failures_json(&run.w1.failures),
                "w2_ops_per_s": run.w2.ops_per_s(),
            "w2_wait": summary_json(&run.w2.wait),
            "w2_lost_updates": run.w2.lost_updates(),
            "w3_pairs_per_s": run.w3.ops_per_s(),
                "w3_failures": failures_json(&run.w3.failures),
                "own_floor": run.own_floor.as_ref().map(|floor| summary_json(&floor.summary)),
            }))
            .collect::<Vec<_>>()
    )
}

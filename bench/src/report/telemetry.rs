//! The cost of telemetry on W1, in one table.

use std::time::Duration;

use serde_json::{Value, json};

use super::{table, us};
use crate::telemetry::Overhead;

/// The middle value of `values` (the upper one of an even count).
fn median(values: &[Duration]) -> Duration {
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    sorted[sorted.len() / 2]
}

pub fn telemetry(overhead: &Overhead) -> Value {
    let ping = median(&overhead.ping_means);
    let rounds = overhead.ping_means.len();
    println!(
        "\nTelemetry on W1 ({} sequential pairs per run, {rounds} rounds taking turns; the \
         median of the rounds' means); floor: PING {:.1} µs",
        overhead.iterations,
        us(ping)
    );
    let baseline = median(&overhead.means[0].1);
    let rows: Vec<(&str, Duration)> = overhead
        .means
        .iter()
        .map(|(listener, means)| (listener.label(), median(means)))
        .collect();
    let printed: Vec<Vec<String>> = rows
        .iter()
        .map(|(label, mean)| {
            vec![
                (*label).to_owned(),
                format!("{:.1}", us(*mean)),
                format!("{:+.1}", us(*mean) - us(baseline)),
                format!("{:.3}x", mean.as_secs_f64() / baseline.as_secs_f64()),
                format!("{:.2}x", mean.as_secs_f64() / ping.as_secs_f64()),
            ]
        })
        .collect();
    table(
        &["listening", "W1 mean µs", "Δ µs", "/ nothing", "/ PING"],
        &printed,
    );
    json!({
        "ping_mean_us": us(ping),
        "rows": rows.iter().map(|(label, mean)| json!({
            "listening": label,
            "w1_mean_us": us(*mean),
            "vs_nothing": mean.as_secs_f64() / baseline.as_secs_f64(),
        })).collect::<Vec<_>>(),
    })
}

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
         median of the rounds' means), on Redis and on the memory backend; floor: PING {:.1} µs",
        overhead.iterations,
        us(ping)
    );
    let medians: Vec<(&str, Duration, Duration)> = overhead
        .means
        .iter()
        .map(|(listener, means)| {
            (
                listener.label(),
                median(&means.redis),
                median(&means.memory),
            )
        })
        .collect();
    let (_, redis_base, memory_base) = medians[0];
    let rows: Vec<Vec<String>> = medians
        .iter()
        .map(|&(label, redis, memory)| {
            vec![
                label.to_owned(),
                format!("{:.1}", us(redis)),
                format!("{:+.1}", us(redis) - us(redis_base)),
                format!("{:.2}x", redis.as_secs_f64() / ping.as_secs_f64()),
                format!("{:.2}", us(memory)),
                format!("{:+.2}", us(memory) - us(memory_base)),
            ]
        })
        .collect();
    table(
        &[
            "listening",
            "Redis µs",
            "Δ µs",
            "/ PING",
            "memory µs",
            "Δ µs",
        ],
        &rows,
    );
    json!({
        "ping_mean_us": us(ping),
        "rows": medians.iter().map(|&(label, redis, memory)| json!({
            "listening": label,
            "w1_redis_mean_us": us(redis),
            "w1_memory_mean_us": us(memory),
        })).collect::<Vec<_>>(),
    })
}

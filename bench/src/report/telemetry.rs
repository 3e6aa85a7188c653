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

/// Half the range of `values`, in µs: how far one round strays, the noise a difference
/// between listeners is compared with.
fn spread_us(values: &[Duration]) -> f64 {
    let (min, max) = (values.iter().min(), values.iter().max());
    min.zip(max)
        .map_or(0.0, |(min, max)| (us(*max) - us(*min)) / 2.0)
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
    let medians: Vec<(&str, Duration, f64, Duration, f64)> = overhead
        .means
        .iter()
        .map(|(listener, means)| {
            (
                listener.label(),
                median(&means.redis),
                spread_us(&means.redis),
                median(&means.memory),
                spread_us(&means.memory),
            )
        })
        .collect();
    let (_, redis_base, _, memory_base, _) = medians[0];
    let rows: Vec<Vec<String>> = medians
        .iter()
        .map(|&(label, redis, redis_spread, memory, memory_spread)| {
            vec![
                label.to_owned(),
                format!("{:.1}", us(redis)),
                format!("±{redis_spread:.1}"),
                format!("{:+.1}", us(redis) - us(redis_base)),
                format!("{:.2}x", redis.as_secs_f64() / ping.as_secs_f64()),
                format!("{:.2}", us(memory)),
                format!("±{memory_spread:.2}"),
                format!("{:+.2}", us(memory) - us(memory_base)),
            ]
        })
        .collect();
    table(
        &[
            "listening",
            "Redis µs",
            "rounds ±",
            "Δ µs",
            "/ PING",
            "memory µs",
            "rounds ±",
            "Δ µs",
        ],
        &rows,
    );
    println!(
        "  rounds ± = half the range of the rounds' means: a Δ within it is noise, not a cost"
    );
    json!({
        "ping_mean_us": us(ping),
        "rows": medians.iter().map(|&(label, redis, redis_spread, memory, memory_spread)| json!({
            "listening": label,
            "w1_redis_mean_us": us(redis),
            "w1_redis_rounds_spread_us": redis_spread,
            "w1_memory_mean_us": us(memory),
            "w1_memory_rounds_spread_us": memory_spread,
        })).collect::<Vec<_>>(),
    })
}

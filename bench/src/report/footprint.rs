//! What a client and a held lock cost.

use serde_json::{Value, json};

use super::{Target, first_errors, ms, print_targets, summary_json, table};
use crate::footprint::{ClientCost, HELD_TTL_MS, HOLDERS, HeldCost, SETTLE};

/// Client memory a held lock may take.
const RSS_PER_LOCK_BOUND: f64 = 1024.0;

fn kib(bytes: f64) -> String {
    format!("{:.1} KiB", bytes / 1024.0)
}

fn bytes_or_absent(bytes: Option<i64>) -> String {
    bytes.map_or_else(|| "absent".into(), |b| format!("{b} B"))
}

pub fn footprint(clients: &ClientCost, held: &HeldCost, targets: &mut Vec<Target>) -> Value {
    print_clients(clients);
    print_held(held);
    let per_lock = held.rss_per_lock();
    let new = vec![Target::new(
        "client memory per held lock",
        format!("{per_lock:.0} B"),
        format!("<= {RSS_PER_LOCK_BOUND:.0} B"),
        per_lock <= RSS_PER_LOCK_BOUND && held.held == held.locks,
    )];
    print_targets(&new);
    targets.extend(new);
    json!({
        "clients": {
            "count": clients.clients,
            "connect": summary_json(&clients.connect),
            "rss_delta_bytes": clients.rss_delta,
            "threads_delta": clients.threads_delta,
            "redis_connections_delta": clients.connections_delta,
        },
        "held_locks": {
            "requested": held.locks,
            "held": held.held,
            "acquire_s": held.acquire_wall.as_secs_f64(),
            "client_rss_delta_bytes": held.rss_delta,
            "client_rss_per_lock_bytes": per_lock,
            "redis_used_memory_delta_bytes": held.used_memory_delta,
            "redis_used_memory_per_lock_bytes": held.used_memory_per_lock(),
            "redis_keys_delta": held.keys_delta,
            "memory_usage_lock_key_bytes": held.lock_key_bytes,
            "memory_usage_fence_key_bytes": held.fence_key_bytes,
            "acquire_failures": super::failures_json(&held.acquire_failures),
            "release_failures": super::failures_json(&held.release_failures),
        },
    })
}

fn print_clients(c: &ClientCost) {
    println!(
        "\nClient cost: {n} LockClient::connect one after another, then all {n} idle \
         (measured once the server's connection count held still for {settle} ms)",
        n = c.clients,
        settle = SETTLE.as_millis()
    );
    let n = c.clients as f64;
    table(
        &["what", "total", "per client"],
        &[
            vec![
                "connect time (mean / p99 / max)".into(),
                "-".into(),
                format!(
                    "{:.2} / {:.2} / {:.2} ms",
                    ms(c.connect.mean),
                    ms(c.connect.p99),
                    ms(c.connect.max)
                ),
            ],
            vec![
                "process RSS".into(),
                kib(c.rss_delta as f64),
                kib(c.rss_delta as f64 / n),
            ],
            vec![
                "process threads".into(),
                c.threads_delta.to_string(),
                format!("{:.2}", c.threads_delta as f64 / n),
            ],
            vec![
                "Redis connections".into(),
                c.connections_delta.to_string(),
                format!("{:.2}", c.connections_delta as f64 / n),
            ],
        ],
    );
}

fn print_held(h: &HeldCost) {
    println!(
        "\nHeld locks: {} distinct keys acquired on one client ({HOLDERS} tasks, renewal on, \
         lease {} s), measured while held, then released",
        h.locks,
        HELD_TTL_MS / 1000
    );
    let n = h.held.max(1) as f64;
    table(
        &["what", "total", "per held lock"],
        &[
            vec![
                "held / acquire time".into(),
                format!("{} / {:.2} s", h.held, h.acquire_wall.as_secs_f64()),
                "-".into(),
            ],
            vec![
                "client RSS".into(),
                kib(h.rss_delta as f64),
                format!("{:.0} B", h.rss_per_lock()),
            ],
            vec![
                "Redis used_memory".into(),
                kib(h.used_memory_delta as f64),
                format!("{:.0} B", h.used_memory_per_lock()),
            ],
            vec![
                "Redis keys".into(),
                h.keys_delta.to_string(),
                format!("{:.2}", h.keys_delta as f64 / n),
            ],
            vec![
                "MEMORY USAGE lock:{k}:v2 + lock:{k}:v2:fence".into(),
                "-".into(),
                format!(
                    "{} + {}",
                    bytes_or_absent(h.lock_key_bytes),
                    bytes_or_absent(h.fence_key_bytes)
                ),
            ],
        ],
    );
    first_errors("acquire failure", &h.acquire_failures);
    first_errors("release failure", &h.release_failures);
    if h.release_failures.count > 0 {
        println!("  {} releases failed", h.release_failures.count);
    }
}

//! Script calls per grant and the server time of an EVALSHA, per workload.

use serde_json::{Value, json};

use super::{Target, print_targets, table};
use crate::probe::{CommandCost, ScriptCalls};
use crate::workloads::{Contention, Mode};

/// Script calls per grant the default mode may make in W2: the acquire and the release.
const DEFAULT_SCRIPTS_PER_GRANT: f64 = 2.0;

/// The script calls the server counted during one workload, and the grants it made.
pub struct ScriptUse {
    pub workload: String,
    pub grants: u64,
    pub calls: ScriptCalls,
}

fn usec_per_call(cost: CommandCost) -> String {
    cost.usec_per_call()
        .map_or_else(|| "-".into(), |usec| format!("{usec:.1}"))
}

impl ScriptUse {
    fn of_w2(row: &Contention) -> ScriptUse {
        ScriptUse {
            workload: format!("W2 {}", row.mode.label()),
            grants: row.granted,
            calls: row.scripts,
        }
    }
}

/// The W1 rows as given, a row per W2 mode, and the default mode's target.
pub fn scripts(w1: Vec<ScriptUse>, w2: &[Contention], targets: &mut Vec<Target>) -> Value {
    let rows: Vec<ScriptUse> = w1
        .into_iter()
        .chain(w2.iter().map(ScriptUse::of_w2))
        .collect();
    println!(
        "\nScripts: EVALSHA + EVAL + FCALL calls the server counted per workload (INFO \
         commandstats before and after, from an inspector connection)"
    );
    let table_rows: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.workload.clone(),
                r.grants.to_string(),
                r.calls.evalsha.calls.to_string(),
                r.calls.eval.calls.to_string(),
                r.calls.fcall.calls.to_string(),
                format!("{:.2}", r.calls.per(r.grants)),
                usec_per_call(r.calls.evalsha),
            ]
        })
        .collect();
    table(
        &[
            "workload",
            "grants",
            "EVALSHA",
            "EVAL",
            "FCALL",
            "scripts / grant",
            "EVALSHA µs/call",
        ],
        &table_rows,
    );
    println!("  grants: successful acquisitions (W1: acquire + release calls, warm-up included)");
    let new: Vec<Target> = w2
        .iter()
        .filter(|r| r.mode == Mode::Default)
        .map(|r| {
            let per = r.scripts.per(r.granted);
            Target::new(
                "W2 default script calls per grant",
                format!("{per:.2}"),
                format!("<= {DEFAULT_SCRIPTS_PER_GRANT}"),
                per <= DEFAULT_SCRIPTS_PER_GRANT && r.granted > 0,
            )
        })
        .collect();
    print_targets(&new);
    targets.extend(new);
    Value::Array(rows.iter().map(row_json).collect())
}

fn cost_json(cost: CommandCost) -> Value {
    json!({ "calls": cost.calls, "usec": cost.usec, "usec_per_call": cost.usec_per_call() })
}

fn row_json(r: &ScriptUse) -> Value {
    json!({
        "workload": r.workload,
        "grants": r.grants,
        "evalsha": cost_json(r.calls.evalsha),
        "eval": cost_json(r.calls.eval),
        "fcall": cost_json(r.calls.fcall),
        "script_calls_per_grant": r.calls.per(r.grants),
    })
}

//! What the server (`INFO`, `MEMORY USAGE`) and this process (`/proc/self/status`) report
//! about themselves, read between workloads.

use std::collections::HashMap;

use redis::aio::MultiplexedConnection;

use crate::workloads::BoxError;

/// `field:value` of an `INFO <section>` reply.
async fn info_field(
    redis: &mut MultiplexedConnection,
    section: &str,
    field: &str,
) -> Result<String, BoxError> {
    let info: String = redis::cmd("INFO").arg(section).query_async(redis).await?;
    info.lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .map(|value| value.trim().to_owned())
        .ok_or_else(|| format!("INFO {section} has no {field}").into())
}

async fn info_number(
    redis: &mut MultiplexedConnection,
    section: &str,
    field: &str,
) -> Result<i64, BoxError> {
    Ok(info_field(redis, section, field).await?.parse()?)
}

/// Client connections the server has open (`INFO clients`), this inspector's included.
pub async fn connected_clients(redis: &mut MultiplexedConnection) -> Result<i64, BoxError> {
    info_number(redis, "clients", "connected_clients").await
}

/// Bytes the server's allocator holds for data and overhead (`INFO memory`).
pub async fn used_memory(redis: &mut MultiplexedConnection) -> Result<i64, BoxError> {
    info_number(redis, "memory", "used_memory").await
}

/// Keys in the selected database.
pub async fn key_count(redis: &mut MultiplexedConnection) -> Result<i64, BoxError> {
    Ok(redis::cmd("DBSIZE").query_async(redis).await?)
}

/// `MEMORY USAGE key`: bytes of one key with its value and overhead; `None` if it is absent.
pub async fn memory_usage(
    redis: &mut MultiplexedConnection,
    key: &str,
) -> Result<Option<i64>, BoxError> {
    Ok(redis::cmd("MEMORY")
        .arg("USAGE")
        .arg(key)
        .query_async(redis)
        .await?)
}

/// Calls and total server time of one command, from `INFO commandstats`.
#[derive(Clone, Copy, Debug, Default)]
pub struct CommandCost {
    pub calls: u64,
    pub usec: u64,
}

impl CommandCost {
    pub fn usec_per_call(self) -> Option<f64> {
        (self.calls > 0).then(|| self.usec as f64 / self.calls as f64)
    }
}

/// Every command's cost since the server started (or the last `CONFIG RESETSTAT`).
#[derive(Clone, Debug, Default)]
pub struct CommandStats(HashMap<String, CommandCost>);

impl CommandStats {
    pub async fn read(redis: &mut MultiplexedConnection) -> Result<CommandStats, BoxError> {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(redis)
            .await?;
        Ok(CommandStats(info.lines().filter_map(parse_line).collect()))
    }

    fn get(&self, command: &str) -> CommandCost {
        self.0.get(command).copied().unwrap_or_default()
    }

    /// The commands executed between `before` and `self` (those a script runs included), but
    /// the `INFO` that read them.
    pub fn commands_since(&self, before: &CommandStats) -> u64 {
        let calls = |stats: &CommandStats| -> u64 {
            let all: u64 = stats.0.values().map(|cost| cost.calls).sum();
            all - stats.get("info").calls
        };
        calls(self).saturating_sub(calls(before))
    }

    /// The script calls made between `before` and `self`. Differences, not a `CONFIG
    /// RESETSTAT`, so that nothing else reading the stats is disturbed.
    pub fn scripts_since(&self, before: &CommandStats) -> ScriptCalls {
        let since = |command: &str| {
            let (now, then) = (self.get(command), before.get(command));
            CommandCost {
                calls: now.calls.saturating_sub(then.calls),
                usec: now.usec.saturating_sub(then.usec),
            }
        };
        ScriptCalls {
            evalsha: since("evalsha"),
            eval: since("eval"),
            fcall: since("fcall"),
        }
    }
}

/// `cmdstat_evalsha:calls=3,usec=40,usec_per_call=13.33,...` -> ("evalsha", cost).
fn parse_line(line: &str) -> Option<(String, CommandCost)> {
    let (name, fields) = line.strip_prefix("cmdstat_")?.split_once(':')?;
    let field = |wanted: &str| {
        fields.split(',').find_map(|pair| {
            let (key, value) = pair.split_once('=')?;
            (key == wanted).then(|| value.trim().parse().ok())?
        })
    };
    let cost = CommandCost {
        calls: field("calls")?,
        usec: field("usec")?,
    };
    Some((name.to_ascii_lowercase(), cost))
}

/// The script commands of one workload.
#[derive(Clone, Copy, Debug, Default)]
pub struct ScriptCalls {
    pub evalsha: CommandCost,
    pub eval: CommandCost,
    pub fcall: CommandCost,
}

impl std::ops::Add for ScriptCalls {
    type Output = ScriptCalls;

    fn add(self, other: ScriptCalls) -> ScriptCalls {
        let sum = |a: CommandCost, b: CommandCost| CommandCost {
            calls: a.calls + b.calls,
            usec: a.usec + b.usec,
        };
        ScriptCalls {
            evalsha: sum(self.evalsha, other.evalsha),
            eval: sum(self.eval, other.eval),
            fcall: sum(self.fcall, other.fcall),
        }
    }
}

impl ScriptCalls {
    pub fn total(&self) -> u64 {
        self.evalsha.calls + self.eval.calls + self.fcall.calls
    }

    pub fn per(&self, operations: u64) -> f64 {
        self.total() as f64 / operations.max(1) as f64
    }
}

/// What the server spent while a workload ran: its CPU time (`used_cpu_user` +
/// `used_cpu_sys` of `INFO cpu`: every thread of the process, I/O included) and the commands
/// it executed (`INFO commandstats`, a script's own commands included).
#[derive(Clone, Copy, Debug, Default)]
pub struct ServerCost {
    pub cpu_usec: f64,
    pub commands: u64,
    pub scripts: ScriptCalls,
}

impl std::ops::Add for ServerCost {
    type Output = ServerCost;

    fn add(self, other: ServerCost) -> ServerCost {
        ServerCost {
            cpu_usec: self.cpu_usec + other.cpu_usec,
            commands: self.commands + other.commands,
            scripts: self.scripts + other.scripts,
        }
    }
}

impl ServerCost {
    /// CPU µs per operation.
    pub fn cpu_per(&self, operations: u64) -> f64 {
        self.cpu_usec / operations.max(1) as f64
    }

    /// Commands per operation.
    pub fn commands_per(&self, operations: u64) -> f64 {
        self.commands as f64 / operations.max(1) as f64
    }
}

/// The server's CPU time and command counters at one moment.
pub struct ServerReading {
    cpu_usec: f64,
    stats: CommandStats,
}

impl ServerReading {
    /// One `INFO cpu commandstats`.
    pub async fn read(redis: &mut MultiplexedConnection) -> Result<ServerReading, BoxError> {
        let info: String = redis::cmd("INFO")
            .arg("cpu")
            .arg("commandstats")
            .query_async(redis)
            .await?;
        let seconds = |field: &str| -> Result<f64, BoxError> {
            info.lines()
                .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
                .ok_or_else(|| format!("INFO cpu has no {field}"))?
                .trim()
                .parse::<f64>()
                .map_err(Into::into)
        };
        Ok(ServerReading {
            cpu_usec: (seconds("used_cpu_user")? + seconds("used_cpu_sys")?) * 1e6,
            stats: CommandStats(info.lines().filter_map(parse_line).collect()),
        })
    }

    /// What the server spent between `before` and `self`, the `INFO` calls left out.
    pub fn cost_since(&self, before: &ServerReading) -> ServerCost {
        ServerCost {
            cpu_usec: (self.cpu_usec - before.cpu_usec).max(0.0),
            commands: self.stats.commands_since(&before.stats),
            scripts: self.stats.scripts_since(&before.stats),
        }
    }
}

/// Runs `work`, returning what it returns and what the server spent meanwhile.
pub async fn measuring<T>(
    inspector: &mut MultiplexedConnection,
    work: impl Future<Output = T>,
) -> Result<(T, ServerCost), BoxError> {
    let before = ServerReading::read(inspector).await?;
    let output = work.await;
    let after = ServerReading::read(inspector).await?;
    Ok((output, after.cost_since(&before)))
}

/// A numeric field of `/proc/self/status`, e.g. `VmRSS` (in kB) or `Threads`.
fn proc_status(field: &str) -> Result<i64, BoxError> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|value| value.split_whitespace().next()?.parse().ok())
        .ok_or_else(|| format!("/proc/self/status has no {field}").into())
}

/// Resident memory of this process, in bytes.
pub fn rss_bytes() -> Result<i64, BoxError> {
    Ok(proc_status("VmRSS")? * 1024)
}

pub fn thread_count() -> Result<i64, BoxError> {
    proc_status("Threads")
}

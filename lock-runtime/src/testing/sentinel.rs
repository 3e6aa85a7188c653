//! A master, its replica and three Sentinels, each a private `redis-server` child process on
//! a free loopback port: the Sentinel topology for tests, ready for a failover.

use std::io::{self, Write};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

use super::{RedisServer, poll_until};

/// Sentinels in a group, and how many must agree that the master is down.
const SENTINELS: usize = 3;
const QUORUM: u32 = 2;
/// How long the Sentinels wait for an answer before they call the master down.
const DOWN_AFTER_MS: u64 = 1000;

/// A master with one replica, monitored by three Sentinels as `service`. Stopped when
/// dropped.
#[derive(Debug)]
pub struct SentinelGroup {
    /// The master the group started with.
    pub master: RedisServer,
    /// Its replica, which a failover promotes.
    pub replica: RedisServer,
    /// The Sentinels.
    pub sentinels: Vec<RedisServer>,
    service: String,
}

impl SentinelGroup {
    /// Starts the group and waits until the replica is in sync and every Sentinel knows
    /// the replica and the other Sentinels (so that a failover can be agreed on).
    pub async fn start(service: &str) -> io::Result<SentinelGroup> {
        let master = RedisServer::start()?;
        let port = master.port().to_string();
        let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &port])?;
        let sentinels = (0..SENTINELS)
            .map(|_| RedisServer::start_sentinel(master.port(), service, QUORUM, DOWN_AFTER_MS))
            .collect::<io::Result<Vec<_>>>()?;
        let group = SentinelGroup {
            master,
            replica,
            sentinels,
            service: service.to_owned(),
        };
        group.wait_until_ready().await?;
        Ok(group)
    }

    /// The Sentinels' URLs.
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels.iter().map(RedisServer::url).collect()
    }

    /// The service the Sentinels monitor.
    pub fn service(&self) -> &str {
        &self.service
    }

    /// The port of the master as the first Sentinel that answers names it.
    pub async fn master_port(&self) -> io::Result<u16> {
        let mut last_error = io::Error::other("no Sentinel answered");
        for sentinel in &self.sentinels {
            let reply: redis::RedisResult<(String, String)> = async {
                redis::cmd("SENTINEL")
                    .arg("get-master-addr-by-name")
                    .arg(&self.service)
                    .query_async(&mut sentinel.connection().await?)
                    .await
            }
            .await;
            match reply {
                Ok((_, port)) => return port.parse().map_err(io::Error::other),
                Err(error) => last_error = io::Error::other(error),
            }
        }
        Err(last_error)
    }

    /// Waits until the Sentinels name a master other than the one on `old_port` (a failover
    /// finished), and returns its port.
    pub async fn wait_for_failover_from(&self, old_port: u16) -> io::Result<u16> {
        let failover = format!("no failover from port {old_port}");
        poll_until(&failover, || async {
            let port = self.master_port().await.ok()?;
            let promoted = port != old_port && role(port).await.as_deref() == Some("master");
            promoted.then_some(port)
        })
        .await
    }

    /// Cuts the replication link: drops, with nftables, every packet the master sends the
    /// replica over it, so that the master's writes from now on stop reaching the replica
    /// (the kernel keeps them for retransmission). Lifted when the cut is dropped. Needs
    /// `nft` (Debian's `nftables`) and root; the error says which is missing.
    pub async fn cut_replication(&self) -> io::Result<ReplicationCut> {
        let clients: String = redis::cmd("CLIENT")
            .arg("LIST")
            .arg("TYPE")
            .arg("replica")
            .query_async(&mut self.master.connection().await.map_err(io::Error::other)?)
            .await
            .map_err(io::Error::other)?;
        let link_port = clients
            .split_whitespace()
            .find_map(|field| field.strip_prefix("addr="))
            .and_then(|addr| addr.rsplit(':').next())
            .and_then(|port| port.parse::<u16>().ok())
            .ok_or_else(|| io::Error::other(format!("no replica link on the master: {clients}")))?;
        ReplicationCut::start(self.master.port(), link_port)
    }

    /// Polls (bounded) until the replica is in sync and the Sentinels see the whole group.
    async fn wait_until_ready(&self) -> io::Result<()> {
        let ready = || async { self.is_ready().await.then_some(()) };
        poll_until("the Sentinel group was not ready", ready).await
    }

    async fn is_ready(&self) -> bool {
        let synced = self.replica.info("replication", "master_link_status").await;
        if synced.as_deref() != Some("up") {
            return false;
        }
        for sentinel in &self.sentinels {
            let fields: redis::RedisResult<Vec<String>> = async {
                redis::cmd("SENTINEL")
                    .arg("master")
                    .arg(&self.service)
                    .query_async(&mut sentinel.connection().await?)
                    .await
            }
            .await;
            let Ok(fields) = fields else { return false };
            let field = |name: &str| {
                fields
                    .chunks(2)
                    .find(|pair| pair[0] == name)
                    .map(|pair| pair[1].clone())
            };
            let others = (SENTINELS - 1).to_string();
            if field("num-slaves").as_deref() != Some("1")
                || field("num-other-sentinels").as_deref() != Some(others.as_str())
            {
                return false;
            }
        }
        true
    }
}

/// The `ROLE` of the server on `port` (`master`, `slave`), if it answers.
async fn role(port: u16) -> Option<String> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).ok()?;
    let mut connection = client.get_multiplexed_async_connection().await.ok()?;
    let role: Vec<redis::Value> = redis::cmd("ROLE").query_async(&mut connection).await.ok()?;
    match role.first()? {
        redis::Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        _ => None,
    }
}

/// A replication link cut by an nftables table of its own; dropping it deletes the table.
#[derive(Debug)]
pub struct ReplicationCut {
    table: String,
}

impl ReplicationCut {
    fn start(master_port: u16, link_port: u16) -> io::Result<ReplicationCut> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let table = format!(
            "fencelock_cut_{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let rules = format!(
            "table inet {table} {{\n\
             \tchain output {{\n\
             \t\ttype filter hook output priority 0; policy accept;\n\
             \t\tip saddr 127.0.0.1 tcp sport {master_port} tcp dport {link_port} drop\n\
             \t}}\n\
             }}\n"
        );
        nft(&["-f", "-"], Some(&rules))?;
        Ok(ReplicationCut { table })
    }
}

impl Drop for ReplicationCut {
    fn drop(&mut self) {
        let _ = nft(&["delete", "table", "inet", &self.table], None);
    }
}

/// Runs `nft` with `args` (and `input` on its standard input).
fn nft(args: &[&str], input: Option<&str>) -> io::Result<()> {
    let mut child = Command::new("nft")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cannot run `nft` ({e}): install nftables (`apt-get install nftables`)"),
            )
        })?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(input.unwrap_or_default().as_bytes())?;
    }
    let output = child.wait_with_output()?;
    if output.status.success() {
        return Ok(());
    }
    Err(io::Error::new(
        io::ErrorKind::PermissionDenied,
        format!(
            "`nft {}` failed (it needs root): {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        ),
    ))
}

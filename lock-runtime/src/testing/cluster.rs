//! A Redis Cluster of private `redis-server` child processes on free loopback ports, created
//! with `redis-cli --cluster create`.

use std::io;
use std::process::{Command, Stdio};

use super::{RedisServer, poll_until};

/// `cluster-node-timeout`: how long a node may be silent before the others fail it over.
const NODE_TIMEOUT_MS: u64 = 1000;

/// A Redis Cluster: `masters` masters with `replicas` replicas each. Stopped when dropped.
#[derive(Debug)]
pub struct RedisCluster {
    /// Every node, in the order `redis-cli --cluster create` was given them: the masters
    /// first.
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts the nodes, creates the cluster and waits until every node serves every slot.
    pub async fn start(masters: usize, replicas: usize) -> io::Result<RedisCluster> {
        let node_timeout = NODE_TIMEOUT_MS.to_string();
        let nodes = (0..masters * (1 + replicas))
            .map(|_| {
                RedisServer::start_with(&[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-node-timeout",
                    &node_timeout,
                ])
            })
            .collect::<io::Result<Vec<_>>>()?;
        let cluster = RedisCluster { nodes };
        if masters < 3 {
            cluster.assign_slots(replicas).await?;
        } else {
            cluster.create(replicas)?;
        }
        cluster.wait_until_ready().await?;
        Ok(cluster)
    }

    /// Creates the cluster with `redis-cli --cluster create` (which wants at least 3 masters).
    fn create(&self, replicas: usize) -> io::Result<()> {
        let addresses: Vec<String> = self
            .nodes
            .iter()
            .map(|node| format!("127.0.0.1:{}", node.port()))
            .collect();
        let output = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addresses)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("cannot run `redis-cli` ({e}): install Redis (`apt-get install redis-tools`)"),
                )
            })?;
        if !output.status.success() {
            return Err(io::Error::other(format!(
                "redis-cli --cluster create failed: {}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            )));
        }
        Ok(())
    }

    /// Creates a cluster of fewer than 3 masters by hand: each node takes an equal share of
    /// the slots, and meets the first.
    async fn assign_slots(&self, replicas: usize) -> io::Result<()> {
        if replicas > 0 {
            return Err(io::Error::other(
                "a cluster of fewer than 3 masters is made here without replicas",
            ));
        }
        let share = 16384 / self.nodes.len();
        for (index, node) in self.nodes.iter().enumerate() {
            let first = index * share;
            let last = if index + 1 == self.nodes.len() {
                16383
            } else {
                first + share - 1
            };
            let mut connection = node.connection().await.map_err(io::Error::other)?;
            redis::cmd("CLUSTER")
                .arg("ADDSLOTSRANGE")
                .arg(first)
                .arg(last)
                .query_async::<()>(&mut connection)
                .await
                .map_err(io::Error::other)?;
            if index > 0 {
                redis::cmd("CLUSTER")
                    .arg("MEET")
                    .arg("127.0.0.1")
                    .arg(self.nodes[0].port())
                    .query_async::<()>(&mut connection)
                    .await
                    .map_err(io::Error::other)?;
            }
        }
        Ok(())
    }

    /// Every node's URL.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// The indices (in `nodes`) of the nodes that are masters now.
    pub async fn masters(&self) -> Vec<usize> {
        let mut masters = Vec::new();
        for (index, node) in self.nodes.iter().enumerate() {
            if node.info("replication", "role").await.as_deref() == Some("master") {
                masters.push(index);
            }
        }
        masters
    }

    /// The index of a replica of the master `master`, if one is up.
    pub async fn replica_of(&self, master: usize) -> Option<usize> {
        let master_port = self.nodes[master].port().to_string();
        for (index, node) in self.nodes.iter().enumerate() {
            let replicating = node.info("replication", "master_port").await;
            if replicating.as_deref() == Some(master_port.as_str()) {
                return Some(index);
            }
        }
        None
    }

    /// Waits (bounded) until every running node serves every slot again (after a failover,
    /// say); polls, since the cluster announces nothing.
    pub async fn wait_until_ready(&self) -> io::Result<()> {
        let ready = || async { self.is_ready().await.then_some(()) };
        poll_until("the cluster did not serve every slot", ready).await
    }

    /// Whether every running node reports `cluster_state:ok` with every slot served.
    pub async fn is_ready(&self) -> bool {
        for node in self.nodes.iter().filter(|node| node.pid().is_some()) {
            let info: Option<String> = async {
                redis::cmd("CLUSTER")
                    .arg("INFO")
                    .query_async(&mut node.connection().await.ok()?)
                    .await
                    .ok()
            }
            .await;
            let Some(info) = info else { return false };
            if !info.contains("cluster_state:ok") || !info.contains("cluster_slots_ok:16384") {
                return false;
            }
        }
        true
    }
}

//! Private etcd servers: one member or a cluster of three, each a child process on free
//! loopback ports in a temporary directory, stopped on drop.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

use super::members::Members;
use super::redis_server::free_port;

/// Environment variable naming the `etcd` binary (default: `etcd` on PATH, from Debian's
/// `etcd-server` package).
pub const ETCD_ENV: &str = "FENCELOCK_ETCD";

/// An etcd cluster of one ([`EtcdCluster::start`]`(1)`) or three members, with etcd's default
/// timing (100 ms heartbeat, 1 s election timeout).
#[derive(Debug)]
pub struct EtcdCluster {
    members: Members,
    /// Each member's peer port, by index.
    peer_ports: Vec<u16>,
    binary: String,
    initial_cluster: String,
}

impl EtcdCluster {
    /// Starts `size` members and waits until every one reports itself healthy.
    pub fn start(size: usize) -> io::Result<EtcdCluster> {
        let binary = std::env::var(ETCD_ENV).unwrap_or_else(|_| "etcd".into());
        let members = Members::new("etcd", size, |index| format!("m{index}"))?;
        let peer_ports = (0..size)
            .map(|_| free_port())
            .collect::<io::Result<Vec<_>>>()?;
        let initial_cluster = members
            .all
            .iter()
            .zip(&peer_ports)
            .map(|(m, peer)| format!("{}=http://127.0.0.1:{peer}", m.name))
            .collect::<Vec<_>>()
            .join(",");
        let mut cluster = EtcdCluster {
            members,
            peer_ports,
            binary,
            initial_cluster,
        };
        for index in 0..size {
            cluster.spawn(index)?;
        }
        cluster.wait_healthy()?;
        Ok(cluster)
    }

    /// Every member's client URL (`http://127.0.0.1:<port>`).
    pub fn endpoints(&self) -> Vec<String> {
        let urls = self
            .members
            .all
            .iter()
            .map(|m| format!("http://127.0.0.1:{}", m.client_port));
        urls.collect()
    }

    /// The URL of every member, as [`LockClient::open`](crate::LockClient::open) takes it
    /// (`etcd://127.0.0.1:p1,127.0.0.1:p2,…`).
    pub fn url(&self) -> String {
        let hosts = self.endpoints().join(",");
        format!("etcd://{}", hosts.replace("http://", ""))
    }

    /// The process id of member `index`, while it runs.
    pub fn pid(&self, index: usize) -> Option<u32> {
        self.members.pid(index)
    }

    /// The index of the member that leads, as a running member reports it.
    pub fn leader(&self) -> Option<usize> {
        (0..self.members.all.len()).find(|&index| {
            let status = self.status(index);
            status.is_some_and(|(member, leader)| member == leader)
        })
    }

    /// Member `index`'s id and its leader's id, if it answers.
    fn status(&self, index: usize) -> Option<(String, String)> {
        let port = self.members.all[index].client_port;
        let reply = http(port, "POST", "/v3/maintenance/status", "{}").ok()?;
        let field = |name: &str| {
            let start = reply.find(&format!("\"{name}\":\""))? + name.len() + 4;
            let end = start + reply[start..].find('"')?;
            Some(reply[start..end].to_owned())
        };
        Some((field("member_id")?, field("leader")?))
    }

    /// Puts `key` = `value`, as another program would.
    pub async fn put(&self, key: &str, value: &[u8]) -> io::Result<()> {
        let mut client = etcd_client::Client::connect(self.endpoints(), None)
            .await
            .map_err(io::Error::other)?;
        client
            .put(key, value, None)
            .await
            .map(drop)
            .map_err(io::Error::other)
    }

    /// Compacts the keyspace up to the current revision (after a write of its own), as
    /// auto-compaction or an operator's `etcdctl compact` would; the revision compacted.
    pub async fn compact(&self) -> io::Result<i64> {
        let mut client = etcd_client::Client::connect(self.endpoints(), None)
            .await
            .map_err(io::Error::other)?;
        let put = client.put("fencelock-test-compaction", "x", None).await;
        let revision = put
            .map_err(io::Error::other)?
            .header()
            .map_or(0, |header| header.revision());
        let options = etcd_client::CompactionOptions::new().with_physical();
        client
            .compact(revision, Some(options))
            .await
            .map_err(io::Error::other)?;
        Ok(revision)
    }

    /// How many range reads member `index` has served (its Prometheus metrics); an error when
    /// the metrics do not count them.
    pub fn range_reads(&self, index: usize) -> io::Result<u64> {
        let metrics = http(self.members.all[index].client_port, "GET", "/metrics", "")?;
        let counts: Vec<f64> = metrics
            .lines()
            .filter(|line| {
                line.starts_with("grpc_server_handled_total")
                    && line.contains("grpc_method=\"Range\"")
            })
            .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
            .collect();
        if counts.is_empty() {
            return Err(io::Error::other(
                "etcd's /metrics has no grpc_server_handled_total for Range: a reading of \
                 0 would prove nothing",
            ));
        }
        Ok(counts.iter().sum::<f64>() as u64)
    }

    /// Kills member `index` with `SIGKILL`; its data stays for a restart.
    pub fn kill(&mut self, index: usize) -> io::Result<()> {
        self.members.kill(index)
    }

    /// Starts member `index` again (after [`kill`](Self::kill)) and waits until every running
    /// member is healthy.
    pub fn restart(&mut self, index: usize) -> io::Result<()> {
        self.kill(index)?;
        self.spawn(index)?;
        self.wait_healthy()
    }

    /// Freezes member `index` (`SIGSTOP`).
    pub fn pause(&self, index: usize) -> io::Result<()> {
        self.members.signal(index, libc::SIGSTOP)
    }

    /// Thaws member `index` (`SIGCONT`).
    pub fn resume(&self, index: usize) -> io::Result<()> {
        self.members.signal(index, libc::SIGCONT)
    }

    /// Waits until every running member reports itself healthy (a leader elected), for at
    /// most a minute.
    pub fn wait_healthy(&self) -> io::Result<()> {
        let running = self.members.running();
        self.members.wait_until("etcd was not healthy", || {
            running.iter().all(|&index| {
                http(self.members.all[index].client_port, "GET", "/health", "")
                    .is_ok_and(|reply| reply.contains("\"health\":\"true\""))
            })
        })
    }

    fn spawn(&mut self, index: usize) -> io::Result<()> {
        let member = &self.members.all[index];
        let client_url = format!("http://127.0.0.1:{}", member.client_port);
        let peer_url = format!("http://127.0.0.1:{}", self.peer_ports[index]);
        let mut command = Command::new(&self.binary);
        command
            .args(["--name", &member.name])
            .arg("--data-dir")
            .arg(member.dir.join("data"))
            .args(["--listen-client-urls", &client_url])
            .args(["--advertise-client-urls", &client_url])
            .args(["--listen-peer-urls", &peer_url])
            .args(["--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", &self.initial_cluster])
            .args(["--initial-cluster-token", "fencelock-test"])
            .args(["--initial-cluster-state", "new"]);
        let missing = format!(
            "cannot run `{}`: install etcd (`apt-get install etcd-server`) or set {ETCD_ENV} \
             to its path",
            self.binary
        );
        self.members.spawn(index, command, &missing)
    }
}

/// One HTTP/1.1 request on a fresh connection; the whole reply.
fn http(port: u16, method: &str, path: &str, body: &str) -> io::Result<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes())?;
    let mut reply = String::new();
    stream.read_to_string(&mut reply)?;
    Ok(reply)
}

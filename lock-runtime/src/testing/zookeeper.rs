//! Private ZooKeeper servers: a standalone server or a 3-member ensemble, each member a child
//! JVM on free loopback ports in a temporary directory, stopped on drop.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

use super::members::Members;
use super::redis_server::free_port;

/// Environment variable overriding the Java class path of ZooKeeper (default: Debian's
/// `zookeeper` package, `/etc/zookeeper/conf:/usr/share/java/zookeeper.jar`).
pub const ZOOKEEPER_CLASSPATH_ENV: &str = "FENCELOCK_ZOOKEEPER_CLASSPATH";

const DEBIAN_CLASSPATH: &str = "/etc/zookeeper/conf:/usr/share/java/zookeeper.jar";

/// The servers' tick: sessions may last 2 to 20 ticks (1 s to 10 s), so that tests of session
/// expiry are short.
const TICK_MS: u64 = 500;

/// A ZooKeeper standalone server ([`ZooKeeperEnsemble::start`]`(1)`) or ensemble of three
/// ([`ZooKeeperEnsemble::start`]`(3)`), with a 500 ms tick (sessions of 1 s to 10 s).
#[derive(Debug)]
pub struct ZooKeeperEnsemble {
    members: Members,
    classpath: String,
}

impl ZooKeeperEnsemble {
    /// Starts `size` members (1 or 3) and waits until every one serves clients.
    pub fn start(size: usize) -> io::Result<ZooKeeperEnsemble> {
        let classpath =
            std::env::var(ZOOKEEPER_CLASSPATH_ENV).unwrap_or_else(|_| DEBIAN_CLASSPATH.into());
        let jar_missing = classpath
            .split(':')
            .filter(|path| path.ends_with(".jar"))
            .any(|jar| !std::path::Path::new(jar).exists());
        if jar_missing {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!(
                    "ZooKeeper is not installed at {classpath}: install Debian's package \
                     (`apt-get install zookeeper`, with Java) or set {ZOOKEEPER_CLASSPATH_ENV}"
                ),
            ));
        }
        let members = Members::new("zookeeper", size, |index| format!("member-{}", index + 1))?;
        let mut peers = Vec::new();
        for id in 1..=size {
            peers.push(format!(
                "server.{id}=127.0.0.1:{}:{}",
                free_port()?,
                free_port()?
            ));
        }
        let peers = if size > 1 {
            peers.join("\n")
        } else {
            String::new()
        };
        for (index, member) in members.all.iter().enumerate() {
            std::fs::write(member.dir.join("myid"), (index + 1).to_string())?;
            let config = format!(
                "tickTime={TICK_MS}\ninitLimit=20\nsyncLimit=4\ndataDir={}\nclientPort={}\n\
                 clientPortAddress=127.0.0.1\nadmin.enableServer=false\n\
                 4lw.commands.whitelist=srvr,ruok,wchp\nmaxClientCnxns=0\n{peers}\n",
                member.dir.display(),
                member.client_port
            );
            std::fs::write(member.dir.join("zoo.cfg"), config)?;
        }
        let mut ensemble = ZooKeeperEnsemble { members, classpath };
        for index in 0..size {
            ensemble.spawn(index)?;
        }
        ensemble.wait_serving()?;
        Ok(ensemble)
    }

    /// The connect string of every member (`127.0.0.1:p1,127.0.0.1:p2,…`).
    pub fn connect_string(&self) -> String {
        let members = self
            .members
            .all
            .iter()
            .map(|m| format!("127.0.0.1:{}", m.client_port));
        members.collect::<Vec<_>>().join(",")
    }

    /// The URL of every member, as [`LockClient::open`](crate::LockClient::open) takes it
    /// (`zookeeper://127.0.0.1:p1,127.0.0.1:p2,…`).
    pub fn url(&self) -> String {
        format!("zookeeper://{}", self.connect_string())
    }

    /// The client port of member `index`.
    pub fn client_port(&self, index: usize) -> u16 {
        self.members.all[index].client_port
    }

    /// The process id of member `index`, while it runs.
    pub fn pid(&self, index: usize) -> Option<u32> {
        self.members.pid(index)
    }

    /// The index of the member that leads (the standalone server in an ensemble of one).
    pub fn leader(&self) -> Option<usize> {
        (0..self.members.all.len()).find(|&index| {
            self.mode(index)
                .is_some_and(|mode| mode == "leader" || mode == "standalone")
        })
    }

    /// Member `index`'s mode (`leader`, `follower`, `standalone`), if it serves.
    pub fn mode(&self, index: usize) -> Option<String> {
        let reply = four_letter_word(self.client_port(index), "srvr").ok()?;
        reply
            .lines()
            .find_map(|line| line.strip_prefix("Mode: "))
            .map(|mode| mode.trim().to_owned())
    }

    /// How many watches member `index` keeps on each node (its `wchp` report: a node's
    /// path, then one line per session watching it), by path.
    pub fn watches(&self, index: usize) -> io::Result<Vec<(String, usize)>> {
        let reply = four_letter_word(self.client_port(index), "wchp")?;
        let mut watches: Vec<(String, usize)> = Vec::new();
        for line in reply.lines() {
            match (line.starts_with('/'), watches.last_mut()) {
                (true, _) => watches.push((line.to_owned(), 0)),
                (false, Some((_, sessions))) if !line.trim().is_empty() => *sessions += 1,
                (false, _) => {}
            }
        }
        Ok(watches)
    }

    /// Creates the persistent node `path` (and its parents) holding `data`, as another
    /// program would.
    pub async fn create_node(&self, path: &str, data: &[u8]) -> io::Result<()> {
        let client = zookeeper_client::Client::connect(&self.connect_string())
            .await
            .map_err(io::Error::other)?;
        let persistent = zookeeper_client::CreateMode::Persistent
            .with_acls(zookeeper_client::Acls::anyone_all());
        let parent = path.rsplit_once('/').map_or("", |(parent, _)| parent);
        if !parent.is_empty() {
            client
                .mkdir(parent, &persistent)
                .await
                .map_err(io::Error::other)?;
        }
        client
            .create(path, data, &persistent)
            .await
            .map(drop)
            .map_err(io::Error::other)
    }

    /// Kills member `index` with `SIGKILL`; its data stays for a restart.
    pub fn kill(&mut self, index: usize) -> io::Result<()> {
        self.members.kill(index)
    }

    /// Starts member `index` again (after [`kill`](Self::kill)) and waits until the
    /// ensemble serves on every running member.
    pub fn restart(&mut self, index: usize) -> io::Result<()> {
        self.kill(index)?;
        self.spawn(index)?;
        self.wait_serving()
    }

    /// Freezes member `index` (`SIGSTOP`).
    pub fn pause(&self, index: usize) -> io::Result<()> {
        self.members.signal(index, libc::SIGSTOP)
    }

    /// Thaws member `index` (`SIGCONT`).
    pub fn resume(&self, index: usize) -> io::Result<()> {
        self.members.signal(index, libc::SIGCONT)
    }

    /// Waits until every running member serves clients with a leader elected, for at most
    /// a minute.
    pub fn wait_serving(&self) -> io::Result<()> {
        let running = self.members.running();
        self.members.wait_until("ZooKeeper did not serve", || {
            running.iter().all(|&i| self.mode(i).is_some()) && self.leader().is_some()
        })
    }

    fn spawn(&mut self, index: usize) -> io::Result<()> {
        let mut command = Command::new("java");
        command
            .args([
                "-Xmx256m",
                "-XX:+UseSerialGC",
                "-Dzookeeper.admin.enableServer=false",
            ])
            .arg("-cp")
            .arg(&self.classpath)
            .arg("org.apache.zookeeper.server.quorum.QuorumPeerMain")
            .arg(self.members.all[index].dir.join("zoo.cfg"));
        let missing = "cannot run `java` for ZooKeeper: install Java (`apt-get install \
                       default-jre-headless zookeeper`)";
        self.members.spawn(index, command, missing)
    }
}

/// Sends a four-letter word (`srvr`, `ruok`) and reads the whole reply.
fn four_letter_word(port: u16, word: &str) -> io::Result<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    stream.write_all(word.as_bytes())?;
    let mut reply = String::new();
    stream.read_to_string(&mut reply)?;
    Ok(reply)
}

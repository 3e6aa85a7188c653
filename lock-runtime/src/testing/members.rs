//! The member processes of a private cluster under test (a ZooKeeper ensemble, an etcd
//! cluster): each in a directory of its own under one temporary folder, its output in a log
//! there, killed and the folder removed on drop.

use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use super::redis_server::{free_port, send_signal};

/// How long a cluster may take to serve after a start or a restart.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// One member: its name, its client port, its directory, its process while it runs.
#[derive(Debug)]
pub(super) struct Member {
    pub(super) name: String,
    pub(super) client_port: u16,
    pub(super) dir: PathBuf,
    child: Option<Child>,
}

/// The members of one cluster.
#[derive(Debug)]
pub(super) struct Members {
    base: PathBuf,
    pub(super) all: Vec<Member>,
}

impl Members {
    /// `size` members named `name(index)`, each with a free client port and a directory
    /// under a fresh temporary folder named after `kind`; none started.
    pub(super) fn new(
        kind: &str,
        size: usize,
        name: impl Fn(usize) -> String,
    ) -> io::Result<Members> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let base = std::env::temp_dir().join(format!(
            "fencelock-{kind}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let mut all = Vec::with_capacity(size);
        for index in 0..size {
            let name = name(index);
            let dir = base.join(&name);
            std::fs::create_dir_all(&dir)?;
            all.push(Member {
                name,
                client_port: free_port()?,
                dir,
                child: None,
            });
        }
        Ok(Members { base, all })
    }

    /// Starts member `index` with `command`, its output into `server.log` in its directory;
    /// `missing` says what to install when the program is not there.
    pub(super) fn spawn(
        &mut self,
        index: usize,
        mut command: Command,
        missing: &str,
    ) -> io::Result<()> {
        let member = &mut self.all[index];
        let log = std::fs::File::create(member.dir.join("server.log"))?;
        let child = command
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .map_err(|e| io::Error::new(e.kind(), format!("{} ({e}): {missing}", member.name)))?;
        member.child = Some(child);
        Ok(())
    }

    /// The process id of member `index`, while it runs.
    pub(super) fn pid(&self, index: usize) -> Option<u32> {
        self.all[index].child.as_ref().map(Child::id)
    }

    /// The members that run.
    pub(super) fn running(&self) -> Vec<usize> {
        (0..self.all.len())
            .filter(|&i| self.all[i].child.is_some())
            .collect()
    }

    /// Kills member `index` with `SIGKILL`; its directory stays for a restart.
    pub(super) fn kill(&mut self, index: usize) -> io::Result<()> {
        if let Some(mut child) = self.all[index].child.take() {
            child.kill()?;
            child.wait()?;
        }
        Ok(())
    }

    /// Sends `signal` to member `index` (`SIGSTOP`, `SIGCONT`).
    pub(super) fn signal(&self, index: usize, signal: libc::c_int) -> io::Result<()> {
        let pid = self
            .pid(index)
            .ok_or_else(|| io::Error::other("not running"))?;
        send_signal(pid, signal)
    }

    /// Polls `ready` every 100 ms until it holds, for at most a minute (servers announce no
    /// readiness); the error says `what` did not happen and ends each member's log.
    pub(super) fn wait_until(&self, what: &str, ready: impl Fn() -> bool) -> io::Result<()> {
        let started = Instant::now();
        while !ready() {
            if started.elapsed() > READY_TIMEOUT {
                let logs: Vec<String> =
                    self.all.iter().map(|m| log_tail(&m.name, &m.dir)).collect();
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "{what} within {READY_TIMEOUT:?}; logs: {}",
                        logs.join(" || ")
                    ),
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(())
    }
}

fn log_tail(name: &str, dir: &Path) -> String {
    let text = std::fs::read_to_string(dir.join("server.log")).unwrap_or_default();
    let tail: Vec<&str> = text.lines().rev().take(3).collect();
    format!("{name}: {}", tail.join(" | "))
}

impl Drop for Members {
    fn drop(&mut self) {
        for index in 0..self.all.len() {
            let _ = self.kill(index);
        }
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

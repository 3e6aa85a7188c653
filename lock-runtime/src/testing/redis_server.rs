//! A private `redis-server` child process on a free loopback port.

use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Environment variable naming the `redis-server` binary (default: `redis-server` on PATH).
pub const REDIS_SERVER_ENV: &str = "FENCELOCK_REDIS_SERVER";

const READY_TIMEOUT: Duration = Duration::from_secs(10);
const START_TRIES: u32 = 5;

/// A `redis-server` run as a child process (not daemonized) in a temporary directory, on
/// `127.0.0.1` and a free port, with persistence off. Stopped when dropped.
#[derive(Debug)]
pub struct RedisServer {
    binary: String,
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
    extra_args: Vec<String>,
    env: Vec<(String, String)>,
    /// A configuration file's text, written into the server's directory and passed first
    /// (Sentinels rewrite theirs).
    config: Option<String>,
}

impl RedisServer {
    /// Starts a server and waits until it answers `PING`.
    pub fn start() -> io::Result<RedisServer> {
        RedisServer::start_with(&[])
    }

    /// Starts a server with extra command-line arguments (e.g. `["--maxmemory-policy",
    /// "volatile-lru"]`).
    pub fn start_with(extra_args: &[&str]) -> io::Result<RedisServer> {
        RedisServer::start_with_env(extra_args, &[])
    }

    /// Starts a server with extra arguments and environment variables (e.g. `LD_PRELOAD`
    /// of a clock shim).
    pub fn start_with_env(extra_args: &[&str], env: &[(&str, &str)]) -> io::Result<RedisServer> {
        let binary = std::env::var(REDIS_SERVER_ENV).unwrap_or_else(|_| "redis-server".into());
        RedisServer::start_binary(binary, extra_args, env)
    }

    /// Starts a Sentinel monitoring the master on `master_port` as `service` (quorum
    /// `quorum`), which it calls down after `down_after_ms` without an answer.
    pub fn start_sentinel(
        master_port: u16,
        service: &str,
        quorum: u32,
        down_after_ms: u64,
    ) -> io::Result<RedisServer> {
        let binary = std::env::var(REDIS_SERVER_ENV).unwrap_or_else(|_| "redis-server".into());
        let config = format!(
            "sentinel monitor {service} 127.0.0.1 {master_port} {quorum}\n\
             sentinel down-after-milliseconds {service} {down_after_ms}\n\
             sentinel failover-timeout {service} 10000\n\
             sentinel parallel-syncs {service} 1\n"
        );
        RedisServer::start_inner(binary, &["--sentinel"], &[], Some(config))
    }

    fn start_binary(
        binary: String,
        extra_args: &[&str],
        env: &[(&str, &str)],
    ) -> io::Result<RedisServer> {
        RedisServer::start_inner(binary, extra_args, env, None)
    }

    fn start_inner(
        binary: String,
        extra_args: &[&str],
        env: &[(&str, &str)],
        config: Option<String>,
    ) -> io::Result<RedisServer> {
        static NEXT_DIR: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "fencelock-redis-{}-{}",
            std::process::id(),
            NEXT_DIR.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir)?;
        let mut server = RedisServer {
            binary,
            child: None,
            port: 0,
            dir,
            extra_args: extra_args.iter().map(|a| a.to_string()).collect(),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            config,
        };
        let mut last_error = None;
        // A free port can be taken between our probe and the server's bind: try another.
        for _ in 0..START_TRIES {
            server.port = free_port()?;
            match server.spawn() {
                Ok(()) => return Ok(server),
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(e),
                Err(e) => last_error = Some(e),
            }
        }
        Err(last_error.unwrap_or_else(|| io::Error::other("redis-server did not start")))
    }

    /// `redis://127.0.0.1:<port>/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The port the server listens on (kept across [`RedisServer::restart`]).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// A connection of its own to the server.
    pub async fn connection(&self) -> redis::RedisResult<redis::aio::MultiplexedConnection> {
        redis::Client::open(self.url())?
            .get_multiplexed_async_connection()
            .await
    }

    /// A field of `INFO <section>` (e.g. `replication`, `role`), if the server answers.
    pub async fn info(&self, section: &str, field: &str) -> Option<String> {
        let info: String = redis::cmd("INFO")
            .arg(section)
            .query_async(&mut self.connection().await.ok()?)
            .await
            .ok()?;
        let prefix = format!("{field}:");
        info.lines()
            .find_map(|line| line.strip_prefix(&prefix))
            .map(|value| value.trim().to_owned())
    }

    /// The server's process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Kills the server with `SIGKILL` and waits for it to exit. Its data is gone.
    pub fn kill(&mut self) -> io::Result<()> {
        if let Some(mut child) = self.child.take() {
            child.kill()?;
            child.wait()?;
        }
        Ok(())
    }

    /// Kills the server if it runs, then starts an empty one on the same port.
    pub fn restart(&mut self) -> io::Result<()> {
        self.kill()?;
        self.spawn()
    }

    /// Freezes the server with `SIGSTOP`: it keeps its connections but answers nothing.
    pub fn pause(&self) -> io::Result<()> {
        self.signal(libc::SIGSTOP)
    }

    /// Thaws a server frozen by [`RedisServer::pause`] (`SIGCONT`).
    pub fn resume(&self) -> io::Result<()> {
        self.signal(libc::SIGCONT)
    }

    fn signal(&self, signal: libc::c_int) -> io::Result<()> {
        let pid = self
            .pid()
            .ok_or_else(|| io::Error::other("the server is not running"))?;
        send_signal(pid, signal)
    }

    fn spawn(&mut self) -> io::Result<()> {
        let binary = &self.binary;
        let log = self.dir.join("redis.log");
        let mut command = Command::new(binary);
        if let Some(config) = &self.config {
            let path = self.dir.join("redis.conf");
            std::fs::write(&path, config)?;
            command.arg(path);
        }
        let child = command
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .arg("--logfile")
            .arg(&log)
            .args(&self.extra_args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| {
                if e.kind() == io::ErrorKind::NotFound {
                    io::Error::new(
                        e.kind(),
                        format!(
                            "`{binary}` was not found: install Redis (`apt-get install \
                             redis-server`) or set {REDIS_SERVER_ENV} to its path"
                        ),
                    )
                } else {
                    e
                }
            })?;
        self.child = Some(child);
        match self.wait_ready() {
            Ok(()) => Ok(()),
            Err(e) => {
                self.kill()?;
                let log_text = std::fs::read_to_string(&log).unwrap_or_default();
                let tail: Vec<&str> = log_text.lines().rev().take(5).collect();
                Err(io::Error::other(format!(
                    "redis-server on port {} did not come up: {e}; log: {}",
                    self.port,
                    tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
                )))
            }
        }
    }

    /// Polls until the server answers `PING` (no signal exists for "ready"; bounded).
    fn wait_ready(&mut self) -> io::Result<()> {
        let started = Instant::now();
        loop {
            if let Some(child) = self.child.as_mut()
                && let Some(status) = child.try_wait()?
            {
                return Err(io::Error::other(format!("exited with {status}")));
            }
            if ping(self.port).is_ok() {
                return Ok(());
            }
            if started.elapsed() > READY_TIMEOUT {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "no PONG within 10 s",
                ));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Freezes process `pid` with `SIGSTOP` (a GC pause, a stalled VM, as the process sees it).
pub fn stop_process(pid: u32) -> io::Result<()> {
    send_signal(pid, libc::SIGSTOP)
}

/// Thaws a process frozen by [`stop_process`] (`SIGCONT`).
pub fn continue_process(pid: u32) -> io::Result<()> {
    send_signal(pid, libc::SIGCONT)
}

pub(super) fn send_signal(pid: u32, signal: libc::c_int) -> io::Result<()> {
    let pid = libc::pid_t::try_from(pid).map_err(io::Error::other)?;
    // SAFETY: kill(2) has no memory effects; the caller names a process of its own.
    if unsafe { libc::kill(pid, signal) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

pub(super) fn free_port() -> io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn ping(port: u16) -> io::Result<()> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(1)))?;
    stream.write_all(b"PING\r\n")?;
    let mut reply = [0u8; 7];
    stream.read_exact(&mut reply)?;
    if &reply == b"+PONG\r\n" {
        Ok(())
    } else {
        Err(io::Error::other("unexpected reply to PING"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_binary_is_named_in_the_error() {
        let error = RedisServer::start_binary("/nonexistent/redis-server".into(), &[], &[])
            .expect_err("there is no such binary");
        assert_eq!(error.kind(), io::ErrorKind::NotFound);
        let message = error.to_string();
        assert!(
            message.contains("/nonexistent/redis-server") && message.contains(REDIS_SERVER_ENV),
            "the error names the binary and how to point at another: {message}"
        );
    }
}

//! Running the `fencelock` binary as a process, against servers the tests start.

#![allow(dead_code, reason = "each test binary uses part of the helpers")]

use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use fencelock::testing::RedisServer;
use fencelock::{LockClient, LockGuard};

/// What one run of the binary gave.
#[derive(Debug)]
pub struct Run {
    pub success: bool,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// The run succeeded; its output.
    pub fn ok(self) -> String {
        assert!(self.success, "fencelock failed: {self:?}");
        self.stdout
    }

    /// The run's stdout as JSON.
    pub fn json(self) -> serde_json::Value {
        let stdout = self.ok();
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"))
    }

    /// The run failed with one line on stderr, which it returns.
    pub fn failed_with_one_line(self) -> String {
        assert!(!self.success, "fencelock succeeded: {self:?}");
        assert_eq!(self.stderr.lines().count(), 1, "one line: {self:?}");
        assert!(self.stderr.starts_with("fencelock: "), "{self:?}");
        self.stderr.trim_end().to_owned()
    }
}

fn command(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_fencelock"));
    command.args(args).env_remove("FENCELOCK_URL");
    command
}

/// Runs `fencelock ARGS` with a closed stdin, off the async runtime.
pub async fn fencelock(args: &[&str]) -> Run {
    let mut command = command(args);
    command.stdin(Stdio::null());
    let output = tokio::task::spawn_blocking(move || command.output())
        .await
        .expect("the run ends")
        .expect("the binary starts");
    Run {
        success: output.status.success(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// `fencelock --url URL ARGS`.
pub async fn on(server: &RedisServer, args: &[&str]) -> Run {
    let url = server.url();
    let mut all = vec!["--url", url.as_str()];
    all.extend_from_slice(args);
    fencelock(&all).await
}

/// A `fencelock watch` running in the background, read line by line.
pub struct Watch {
    child: Child,
    lines: tokio::sync::mpsc::UnboundedReceiver<String>,
}

impl Watch {
    /// Starts `fencelock ARGS` and waits for its first line (the subscription is in place).
    pub async fn start(args: &[&str]) -> (Watch, String) {
        let mut command = command(args);
        command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = command.spawn().expect("the binary starts");
        let stdout: ChildStdout = child.stdout.take().expect("piped");
        let (sender, lines) = tokio::sync::mpsc::unbounded_channel();
        // Ends with the process's stdout.
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if sender.send(line).is_err() {
                    return;
                }
            }
        });
        let mut watch = Watch { child, lines };
        let first = watch.next_line().await;
        (watch, first)
    }

    /// The next line it prints (the test fails if none comes within 10 s).
    pub async fn next_line(&mut self) -> String {
        let line = tokio::time::timeout(Duration::from_secs(10), self.lines.recv()).await;
        match line {
            Ok(Some(line)) => line,
            other => panic!("no line from the watch: {other:?}"),
        }
    }

    /// Waits for it to exit (within 10 s); whether it succeeded.
    pub fn wait(mut self) -> bool {
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(10) {
            if let Some(status) = self.child.try_wait().expect("a child") {
                return status.success();
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("the watch did not stop");
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn redis_server() -> RedisServer {
    RedisServer::start().unwrap_or_else(|e| panic!("cannot start a private redis-server: {e}"))
}

pub async fn client(server: &RedisServer) -> LockClient {
    LockClient::connect(&server.url()).await.expect("connects")
}

/// Takes `key`, free at this point, for a minute.
pub async fn hold(client: &LockClient, key: &str) -> LockGuard {
    let request = client.lock(key).ttl_ms(60_000).give_up();
    request.acquire().await.expect("the free key is granted")
}

/// Polls `check` every 10 ms until it holds, for at most 10 s.
pub async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let started = Instant::now();
    while !check().await {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{what}: not within 10 s"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

//! The `fencelock` command at the edges an outside review probed: keys no application could
//! write, foreign data next to a lock, a grant that changes hands while the operator reads
//! the prompt, Redlock's copies of one release, a connection that goes silent or away, hosts
//! that never answer, a cluster node given as one server.

mod support;

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use fencelock::admin::ReleaseEvent;
use fencelock::testing::{RedisCluster, RedisServer, TcpProxy};
use fencelock::{LockClient, LockError};
use redis::AsyncCommands;

use support::{Watch, client, fencelock, hold, on, redis_server};

/// A key with control characters is no lock of this library (no request can name it): it
/// is not listed, so it cannot forge rows or reach the terminal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_leaves_out_keys_no_request_could_name() {
    let server = redis_server();
    let locks = client(&server).await;
    let _held = hold(&locks, "stock:1").await;
    let mut redis = server.connection().await.unwrap();
    let forged = "lock:{x\x1b[2J\nforged:1  99s  1  deadbeefdeadbeef  0  -  1}";
    let _: () = redis.set_ex(forged, "abcdef:17", 60).await.unwrap();
    let table = on(&server, &["list"]).await.ok();
    assert!(!table.contains('\x1b'), "{table:?}");
    assert_eq!(
        table.lines().count(),
        2,
        "the header and stock:1: {table:?}"
    );
}

/// Another program's data in the queue of a held lock: no lock can work there, and the
/// forced release refuses rather than end the grant unconfirmed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_refuses_a_lock_with_foreign_data_next_to_it() {
    let server = redis_server();
    let locks = client(&server).await;
    let _held = hold(&locks, "job").await;
    let mut redis = server.connection().await.unwrap();
    let _: () = redis
        .set_ex("lock:{job}:v2:queue", "not a list", 600)
        .await
        .unwrap();
    let refusal = on(&server, &["release", "job", "--force", "--yes"])
        .await
        .failed_with_one_line();
    assert!(refusal.contains("not what a lock keeps there"), "{refusal}");
    let still: String = redis.get("lock:{job}:v2").await.unwrap();
    assert!(still.starts_with("h:"), "the grant was ended: {still}");
}

/// The prompt names one grant; if its holder releases and another owner takes the key
/// before the operator answers, the other owner's grant is left alone and the command says
/// why. Run on a terminal (`script`), as an operator would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_confirmed_release_leaves_a_grant_it_did_not_show() {
    let server = redis_server();
    let locks = client(&server).await;
    let first = hold(&locks, "stock:42").await;
    let bin = env!("CARGO_BIN_EXE_fencelock");
    let shell = format!("{bin} --url {} release stock:42 --force", server.url());
    let mut child = Command::new("script")
        .args(["-qec", &shell, "/dev/null"])
        .env_remove("FENCELOCK_URL")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("script(1), from util-linux");
    let mut stdout = child.stdout.take().unwrap();
    let (sender, mut output) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        let mut buffer = [0; 4096];
        while let Ok(n) = stdout.read(&mut buffer) {
            if n == 0 || sender.send(buffer[..n].to_vec()).is_err() {
                return;
            }
        }
    });
    let mut seen = Vec::new();
    read_until("Release it?", &mut output, &mut seen).await;
    // While the operator reads, the holder shown releases, and another owner takes the key.
    first.release().await.unwrap();
    let second = hold(&locks, "stock:42").await;
    child.stdin.as_mut().unwrap().write_all(b"y\n").unwrap();
    read_until("changed hands", &mut output, &mut seen).await;
    let status = tokio::task::spawn_blocking(move || child.wait()).await;
    assert!(!status.unwrap().unwrap().success());
    assert!(second.release().await.is_ok(), "the second grant was ended");
}

/// Reads `output` into `seen` until it holds `text` (for at most 10 s).
async fn read_until(
    text: &str,
    output: &mut tokio::sync::mpsc::UnboundedReceiver<Vec<u8>>,
    seen: &mut Vec<u8>,
) {
    let read = async {
        while !String::from_utf8_lossy(seen).contains(text) {
            match output.recv().await {
                Some(chunk) => seen.extend(chunk),
                None => return,
            }
        }
    };
    let within = tokio::time::timeout(Duration::from_secs(10), read).await;
    let shown = String::from_utf8_lossy(seen);
    assert!(
        within.is_ok() && shown.contains(text),
        "no `{text}`: {shown}"
    );
}

/// The server dies under a watch: the watch says the subscription was interrupted, and ends
/// with a failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_whose_server_dies_says_so_and_fails() {
    let mut server = redis_server();
    let url = server.url();
    let (mut watch, _watching) = Watch::start(&["--url", &url, "watch", "k"]).await;
    server.kill().unwrap();
    let line = watch.next_line().await;
    assert!(line.contains("interrupted"), "{line}");
    assert!(!watch.wait(), "ends with a failure");
}

/// A connection that goes silent (a partition that keeps the socket open) is found out by
/// the subscription's keepalive: the watch says it may have missed releases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_over_a_silent_connection_says_it_was_interrupted() {
    let server = redis_server();
    let proxy = TcpProxy::start(format!("127.0.0.1:{}", server.port()).parse().unwrap()).unwrap();
    let proxy_url = proxy.url();
    let (mut watch, _watching) = Watch::start(&["--url", &proxy_url, "watch", "k"]).await;
    proxy.freeze();
    let locks = client(&server).await;
    hold(&locks, "k").await.release().await.unwrap();
    // Within the keepalive (5 s) and a response timeout (2 s).
    let line = watch.next_line().await;
    assert!(line.contains("interrupted"), "{line}");
}

/// An empty `FENCELOCK_URL`, hosts that accept connections and never answer, a dead
/// Sentinel: each fails with one line, and none hangs (every connection is bounded by the
/// connect and response timeouts).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosts_that_never_answer_fail_with_one_line() {
    let empty = Command::new(env!("CARGO_BIN_EXE_fencelock"))
        .arg("list")
        .env("FENCELOCK_URL", "")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&empty.stderr);
    assert!(!empty.status.success());
    assert!(
        stderr.starts_with("fencelock: ") && stderr.lines().count() == 1,
        "{stderr}"
    );

    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_url = format!("redis://{}/", silent.local_addr().unwrap());
    std::thread::spawn(move || {
        let kept: Vec<_> = silent.incoming().collect();
        drop(kept);
    });
    let s = silent_url.as_str();
    for args in [
        vec!["--url", s, "list"],
        vec!["--url", s, "watch", "k"],
        vec!["--sentinel", "s", "--url", "redis://127.0.0.1:1/", "list"],
        vec!["--sentinel", "s", "--url", s, "list"],
        vec![
            "--redlock",
            "--url",
            s,
            "--url",
            "redis://127.0.0.1:1/",
            "list",
        ],
        vec!["--cluster", "--url", s, "list"],
    ] {
        let run = tokio::time::timeout(Duration::from_secs(30), fencelock(&args)).await;
        let run = run.unwrap_or_else(|_| panic!("{args:?} hangs"));
        run.failed_with_one_line();
    }
}

/// One release of a key kept by `min_hold_ms`, forced on Redlock, is heard once: every
/// master names the grant's token (the fencing counter's), so their copies are one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_redlock_a_forced_release_is_heard_once() {
    let masters: Vec<RedisServer> = (0..3).map(|_| redis_server()).collect();
    let locks = LockClient::redlock(masters.iter().map(RedisServer::url))
        .await
        .unwrap();
    let request = locks.lock("kept").ttl_ms(60_000).min_hold_ms(60_000);
    let guard = request.give_up().acquire().await.unwrap();
    let token = guard.token();
    guard.release().await.unwrap();
    let admin = locks.admin();
    let mut events = admin.watch("kept").await.unwrap();
    let forced = admin.force_release("kept").await.unwrap();
    assert!(forced.released, "{forced:?}");
    let mut heard = Vec::new();
    while let Ok(event) = tokio::time::timeout(Duration::from_millis(500), events.next()).await {
        heard.push(event.unwrap());
    }
    let once = ReleaseEvent::Released { token: Some(token) };
    assert_eq!(heard, [once], "one forced release, heard once");
}

/// A node of a Redis Cluster of several nodes given as one server would answer for its own
/// slots only: the connection is refused with the flag to use.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_node_given_as_one_server_is_refused() {
    let cluster = RedisCluster::start(2, 0).await.expect("a Redis Cluster");
    let urls = cluster.urls();
    let refusal = fencelock(&["--url", &urls[0], "list"])
        .await
        .failed_with_one_line();
    assert!(refusal.contains("--cluster"), "{refusal}");
    let refused = LockClient::connect(&urls[0]).await;
    assert!(
        matches!(refused, Err(LockError::InvalidConfig { .. })),
        "{refused:?}"
    );
}

/// Options that would be ignored are refused before connecting: a lock table beside Redis
/// topology flags, a topology flag beside a URL that names its topology.
#[tokio::test]
async fn options_that_would_be_ignored_are_refused() {
    let urls = [
        "--url",
        "redis://127.0.0.1:1",
        "--url",
        "redis://127.0.0.1:2",
    ];
    for (extra, says) in [
        (["--redlock", "--table", "t"], "leave out --table"),
        (
            ["--redlock", "--url", "redis+redlock://a:1,b:2"],
            "names its topology",
        ),
    ] {
        let mut args = urls.to_vec();
        args.extend_from_slice(&extra);
        args.push("list");
        let failed = fencelock(&args).await.failed_with_one_line();
        assert!(failed.contains(says), "{args:?}: {failed}");
    }
}

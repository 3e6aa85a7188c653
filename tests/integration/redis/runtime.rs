//! The runtime against a real, private `redis-server`.

use std::time::Duration;

use fencelock::testing::{Delivery, Direction, TcpProxy, conformance};
use fencelock::{LockClient, LockError, redis_lock};
use redis::AsyncCommands;

use crate::support::{self, client, eventually, inspector, redis_server};

#[tokio::test]
async fn the_redis_key_contains_the_lock_key_verbatim_and_only_its_tombstone_is_left() {
    let server = redis_server();
    let client = LockClient::builder(&server.url())
        .key_prefix("app:")
        .connect()
        .await
        .unwrap();
    let mut redis = inspector(&server).await;
    let guard = client.lock("stock:42").acquire().await.unwrap();
    let holder: String = redis.get("app:{stock:42}:v2").await.unwrap();
    let token = guard.token().to_string();
    let owner = holder
        .strip_prefix(&format!("h:{token}:{token}:0:"))
        .expect("`h:<token>:<run>:0:<owner>`: held, its run begun by this grant");
    assert_eq!(owner.len(), 32, "the owner is a 32-digit UUID");
    let ttl: i64 = redis.pttl("app:{stock:42}:v2").await.unwrap();
    assert!(
        ttl > 0 && ttl <= 30_000,
        "the lease is the key's TTL, got {ttl}"
    );
    guard.release().await.unwrap();
    let keys: Vec<String> = redis.keys("*").await.unwrap();
    assert_eq!(keys, ["app:{stock:42}:v2"], "one key per lock");
    let tombstone: String = redis.get("app:{stock:42}:v2").await.unwrap();
    assert_eq!(
        tombstone,
        format!("r:{token}:{token}:0:{owner}"),
        "released by its owner, free at once, with the last token"
    );
    // Three response timeouts (2 s by default) and a second: longer than a resend can take.
    let remembered: i64 = redis.pttl("app:{stock:42}:v2").await.unwrap();
    assert!(
        remembered > 6_000 && remembered <= 7_000,
        "the release is remembered for {remembered} ms"
    );
}

#[tokio::test]
async fn fencing_tokens_keep_increasing_across_a_restart_that_lost_the_data() {
    let mut server = redis_server();
    let client = client(&server).await;
    let mut tokens = Vec::new();
    for _ in 0..3 {
        let guard = client.lock("fenced").give_up().acquire().await.unwrap();
        tokens.push(guard.token());
        guard.release().await.unwrap();
        server.restart().unwrap();
        let keys: Vec<String> = inspector(&server).await.keys("*").await.unwrap();
        assert!(keys.is_empty(), "the restart lost the counter");
    }
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens must increase across restarts: {tokens:?}"
    );
    assert!(
        tokens[0] > 1_000_000_000_000_000,
        "tokens are at least the server time in µs"
    );
}

#[tokio::test]
async fn an_unreachable_server_is_a_backend_error_and_the_client_recovers() {
    let mut server = redis_server();
    let client = client(&server).await;
    server.kill().unwrap();
    for request in [
        client.lock("k").give_up(),
        client.lock("k").retry(2).sleep_ms(10),
    ] {
        match request.acquire().await {
            Err(LockError::Backend { .. }) => {}
            other => panic!("an outage must be Backend, never NotAcquired: {other:?}"),
        }
    }
    server.restart().unwrap();
    let recovered = eventually(Duration::from_secs(10), || async {
        client.lock("k").give_up().acquire().await.is_ok()
    })
    .await;
    assert!(recovered, "the same client works again once Redis is back");
}

#[tokio::test]
async fn connecting_to_nothing_is_a_backend_error() {
    let server = redis_server();
    let url = server.url();
    drop(server);
    match LockClient::connect(&url).await {
        Err(LockError::Backend { .. }) => {}
        other => panic!("expected Backend, got {other:?}"),
    }
    match LockClient::connect("http://127.0.0.1:1/").await {
        Err(LockError::InvalidConfig { .. }) => {}
        other => panic!("expected InvalidConfig for a non-Redis URL, got {other:?}"),
    }
}

#[tokio::test]
async fn rediss_urls_need_the_tls_feature() {
    let result = LockClient::connect("rediss://127.0.0.1:1/").await;
    // With TLS built in, the next thing missing is the application's crypto provider.
    let missing = if cfg!(feature = "tls-rustls") {
        "crypto provider"
    } else {
        "tls-rustls"
    };
    assert!(
        matches!(&result, Err(LockError::InvalidConfig { reason, .. }) if reason.contains(missing)),
        "the error names what is missing ({missing}): {result:?}"
    );
}

#[tokio::test]
async fn scripts_are_reloaded_after_script_flush() {
    let server = redis_server();
    let client = client(&server).await;
    support::lock_once(&client, "k").await;
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut inspector(&server).await)
        .await
        .unwrap();
    let guard = client
        .lock("k")
        .acquire()
        .await
        .expect("acquire after SCRIPT FLUSH");
    guard.release().await.expect("release after SCRIPT FLUSH");
}

#[tokio::test]
async fn scripts_are_reloaded_after_function_flush() {
    let server = redis_server();
    let client = client(&server).await;
    support::lock_once(&client, "k").await;
    let mut redis = inspector(&server).await;
    let _: () = redis::cmd("FUNCTION")
        .arg("FLUSH")
        .query_async(&mut redis)
        .await
        .unwrap();
    support::lock_once(&client, "k").await;
    assert_eq!(
        command_calls(&server, "evalsha").await,
        0,
        "the library was loaded again, and called"
    );
}

/// The calls of `command` the server counted (`INFO commandstats`).
async fn command_calls(server: &fencelock::testing::RedisServer, command: &str) -> u64 {
    let mut redis = inspector(server).await;
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut redis)
        .await
        .unwrap();
    info.lines()
        .find_map(|line| line.strip_prefix(&format!("cmdstat_{command}:calls=")))
        .and_then(|rest| rest.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

/// Locks are taken and released with `FCALL` of the library the client loads, whose name
/// carries its version: nothing runs as `EVALSHA`.
#[tokio::test]
async fn locks_run_as_functions_of_a_versioned_library() {
    let server = redis_server();
    let client = client(&server).await;
    support::lock_once(&client, "k").await;
    support::lock_once(&client, "k").await;
    let mut redis = inspector(&server).await;
    let listed: redis::Value = redis::cmd("FUNCTION")
        .arg("LIST")
        .arg("LIBRARYNAME")
        .arg("fencelock_*")
        .query_async(&mut redis)
        .await
        .unwrap();
    assert!(
        format!("{listed:?}").contains("fencelock_"),
        "the library is loaded: {listed:?}"
    );
    // Two acquires and two releases; the first acquire found no library and was sent again.
    assert_eq!(command_calls(&server, "fcall").await, 5);
    assert_eq!(command_calls(&server, "evalsha").await, 0);
}

/// A server without Functions (Redis 6; here `FCALL` renamed away), and a user who may not
/// load them, get the same scripts as `EVALSHA`.
#[tokio::test]
async fn without_functions_the_scripts_run_as_evalsha() {
    let server =
        fencelock::testing::RedisServer::start_with(&["--rename-command", "FCALL", ""]).unwrap();
    let client = client(&server).await;
    support::lock_once(&client, "k").await;
    support::lock_once(&client, "k").await;
    assert!(command_calls(&server, "evalsha").await >= 4);

    let server = redis_server();
    let mut admin = inspector(&server).await;
    let _: () = redis::cmd("ACL")
        .arg(&[
            "SETUSER",
            "app",
            "on",
            ">secret",
            "~*",
            "&*",
            "+@all",
            "-function",
        ])
        .query_async(&mut admin)
        .await
        .unwrap();
    let url = format!("redis://app:secret@127.0.0.1:{}", server.port());
    let client = LockClient::connect(&url).await.unwrap();
    support::lock_once(&client, "k").await;
    support::lock_once(&client, "k").await;
    assert!(command_calls(&server, "evalsha").await >= 4);
}

/// The full name of the library's function `name`, as `FUNCTION LIST` shows it.
async fn function_named(redis: &mut redis::aio::MultiplexedConnection, name: &str) -> String {
    fn strings(value: &redis::Value, found: &mut Vec<String>) {
        match value {
            redis::Value::BulkString(bytes) => found.push(String::from_utf8_lossy(bytes).into()),
            redis::Value::SimpleString(text) => found.push(text.clone()),
            redis::Value::Array(items) => items.iter().for_each(|item| strings(item, found)),
            redis::Value::Map(pairs) => pairs.iter().for_each(|(k, v)| {
                strings(k, found);
                strings(v, found);
            }),
            _ => {}
        }
    }
    let listed: redis::Value = redis::cmd("FUNCTION")
        .arg("LIST")
        .query_async(redis)
        .await
        .unwrap();
    let mut found = Vec::new();
    strings(&listed, &mut found);
    // `fencelock_v<layout>_<hash>_<name>`.
    found
        .into_iter()
        .find(|text| {
            text.strip_prefix("fencelock_v2_")
                .and_then(|rest| rest.split_once('_'))
                .is_some_and(|(_, function)| function == name)
        })
        .expect("the library is loaded")
}

/// A late copy of an owner's waiting attempt that finds the key kept after that owner's
/// release (`min_hold_ms`) takes no place in line: the owner has left, and its release found
/// the key kept and took no place back; a later release would hand the key to nobody.
#[tokio::test]
async fn a_late_attempt_takes_no_place_against_its_owners_kept_key() {
    let server = redis_server();
    support::lock_once(&client(&server).await, "warm").await;
    let mut redis = inspector(&server).await;
    let acquire = function_named(&mut redis, "acquire").await;
    let _: () = redis
        .set_options(
            "lock:{k}:v2",
            // Released by the owner, kept (min_hold_ms) until far in the future.
            "r:7:7:99999999999999:0123456789abcdef0123456789abcdef",
            redis::SetOptions::default().with_expiration(redis::SetExpiry::PX(5_000)),
        )
        .await
        .unwrap();
    let reply: redis::Value = redis::cmd("FCALL")
        .arg(&acquire)
        .arg(4)
        .arg(&[
            "lock:{k}:v2",
            "lock:{k}:v2:queue",
            "lock:{k}:v2:queue:deadlines",
            "lock:{k}:v2:fence",
        ])
        .arg(&[
            "0123456789abcdef0123456789abcdef",
            "30000",
            "10000",
            "0",
            "0",
            "",
        ])
        .query_async(&mut redis)
        .await
        .unwrap();
    let redis::Value::Array(answer) = &reply else {
        panic!("an acquire answers an array: {reply:?}");
    };
    assert_eq!(answer[0], redis::Value::Int(0), "not granted: {reply:?}");
    let queued: bool = redis.exists("lock:{k}:v2:queue").await.unwrap();
    assert!(!queued, "the owner that left took no place");
}

/// On a server out of memory (`maxmemory` reached, `noeviction`), a release and an inspection
/// still run (a release frees memory), an acquire is refused with the server's reason, and a
/// server that lost the library still has the key deleted by a release.
#[tokio::test]
async fn on_a_server_out_of_memory_releases_and_inspections_still_run() {
    let server = redis_server();
    let client = client(&server).await;
    let mut redis = inspector(&server).await;
    let admin = redis.clone();
    let set_maxmemory = move |bytes: &'static str| {
        let mut redis = admin.clone();
        async move {
            let _: () = redis::cmd("CONFIG")
                .arg(&["SET", "maxmemory", bytes])
                .query_async(&mut redis)
                .await
                .unwrap();
        }
    };
    let guard = client.lock("k").acquire().await.unwrap();
    set_maxmemory("1").await;
    let state = client
        .admin()
        .inspect("k")
        .await
        .expect("an inspection runs");
    assert!(
        matches!(state.holding, fencelock::admin::Holding::Held { .. }),
        "{state:?}"
    );
    let refused = client.lock("other").acquire().await.unwrap_err();
    let why = support::with_sources(&refused);
    assert!(why.contains("OOM"), "{why}");
    guard.release().await.expect("a release runs");
    let held = support::granted_in(&mut redis, "lock:{k}:v2").await;
    assert!(!held, "the key was released");

    set_maxmemory("0").await;
    let guard = client.lock("k").acquire().await.unwrap();
    let _: () = redis::cmd("FUNCTION")
        .arg("FLUSH")
        .query_async(&mut redis)
        .await
        .unwrap();
    set_maxmemory("1").await;
    // The library cannot be loaded now: the release goes as EVALSHA, whose tombstone is
    // refused; the key is deleted instead.
    let _ = guard.release().await;
    let held = support::granted_in(&mut redis, "lock:{k}:v2").await;
    assert!(!held, "the key was released without the library");
    set_maxmemory("0").await;
}

#[tokio::test]
async fn a_cancelled_acquire_whose_script_ran_later_leaves_nothing_behind() {
    let server = redis_server();
    let client = client(&server).await;
    let redis = inspector(&server).await;
    // Load the scripts first: a first FCALL finds no library, and a cancelled caller never
    // sends the FCALL that follows the load.
    support::lock_once(&client, "warm-up").await;
    server.pause().unwrap();
    // The request is on the wire when the caller gives up; Redis runs it once resumed.
    let attempt = client.lock("orphan").ttl_ms(60_000).give_up().acquire();
    let timed_out = tokio::time::timeout(Duration::from_millis(300), attempt).await;
    assert!(timed_out.is_err(), "the stopped server cannot answer");
    server.resume().unwrap();
    let cleaned = eventually(Duration::from_secs(10), || async {
        let mut redis = redis.clone();
        support::mutex_state(&mut redis, "lock:{orphan}:v2").await == Some('r')
    })
    .await;
    assert!(
        cleaned,
        "the acquire ran and its grant was released again (a tombstone is left)"
    );
}

#[tokio::test]
async fn a_cancelled_release_still_releases() {
    let server = redis_server();
    let client = client(&server).await;
    let guard = client.lock("k").ttl_ms(60_000).acquire().await.unwrap();
    server.pause().unwrap();
    let release = guard.release();
    assert!(
        tokio::time::timeout(Duration::from_millis(200), release)
            .await
            .is_err()
    );
    server.resume().unwrap();
    let free = eventually(Duration::from_secs(10), || async {
        client.lock("k").give_up().acquire().await.is_ok()
    })
    .await;
    assert!(
        free,
        "the dropped release future handed the release to the background"
    );
}

/// Each `#[tokio::test]` has a runtime of its own that ends with the test: a client made in
/// one must keep working in the next, because its connection lives on the library's background runtime.
#[test]
fn a_client_outlives_the_runtime_that_created_it() {
    let server = redis_server();
    let first = tokio::runtime::Runtime::new().unwrap();
    let client = first.block_on(client(&server));
    first
        .block_on(async { client.lock("k").acquire().await?.release().await })
        .unwrap();
    drop(first);
    let second = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    second
        .block_on(async { client.lock("k").acquire().await?.release().await })
        .expect("the client works in the next runtime");
}

#[test]
fn a_guard_dropped_outside_any_runtime_is_released() {
    let server = redis_server();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let client = runtime.block_on(client(&server));
    let guard = runtime
        .block_on(client.lock("k").ttl_ms(60_000).acquire())
        .unwrap();
    drop(runtime);
    drop(guard);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let free =
        runtime.block_on(async { client.lock("k").retry(1000).sleep_ms(10).acquire().await });
    assert!(
        free.is_ok(),
        "the drop outside a runtime released the lock: {free:?}"
    );
}

/// Review defect 8: every key of one lock must hash to one Redis Cluster slot whatever the key
/// text, also when it starts with `}` (which used to give the empty hash tag `{}`, so that
/// Redis hashed each whole key and `:fence` and `:queue` landed in other slots). A
/// one-node cluster owning every slot refuses scripts whose keys span slots (`CROSSSLOT`), so
/// the conformance suite run on it with keys starting with `}` proves the layout.
#[tokio::test]
async fn keys_starting_with_a_brace_keep_every_key_of_a_lock_in_one_cluster_slot() {
    let server = fencelock::testing::RedisServer::start_with(&["--cluster-enabled", "yes"])
        .expect("a cluster-enabled redis-server");
    let mut redis = inspector(&server).await;
    let _: () = redis::cmd("CLUSTER")
        .arg("ADDSLOTSRANGE")
        .arg(0)
        .arg(16383)
        .query_async(&mut redis)
        .await
        .unwrap();
    let ready = eventually(Duration::from_secs(10), || async {
        let info: String = redis::cmd("CLUSTER")
            .arg("INFO")
            .query_async(&mut redis.clone())
            .await
            .unwrap();
        info.contains("cluster_state:ok")
    })
    .await;
    assert!(ready, "the one-node cluster serves every slot");
    let locks = client(&server).await;
    for namespace in ["}", "{"] {
        conformance::run(&locks, namespace).await;
    }
}

#[tokio::test]
async fn a_key_prefix_with_braces_is_refused() {
    for prefix in ["a{", "a}", "{x}:"] {
        match LockClient::builder("redis://127.0.0.1:1/")
            .key_prefix(prefix)
            .connect()
            .await
        {
            Err(LockError::InvalidConfig { reason, .. }) => {
                assert!(reason.contains("brace"), "{prefix}: {reason}")
            }
            other => panic!("{prefix}: expected InvalidConfig, got {other:?}"),
        }
    }
}

/// Review defect 11: what a lock nobody takes any more leaves must not stay forever. A
/// released mutex is one key, its tombstone, which carries the last fencing token and
/// expires once a resent release can no longer arrive (tokens are server time in µs after
/// it, so nothing else is needed for them to keep increasing).
#[tokio::test]
async fn released_locks_leave_one_key_each_that_expires() {
    let server = redis_server();
    let client = client(&server).await;
    let mut redis = inspector(&server).await;
    for session in 0..1_000 {
        support::lock_once(&client, &format!("session:{session}")).await;
    }
    let keys: Vec<String> = redis.keys("*").await.unwrap();
    // The tombstones (7 s) of a slow run may have begun to lapse.
    assert!(
        keys.len() <= 1_000,
        "one key per lock at most: {}",
        keys.len()
    );
    for key in keys {
        let state = support::mutex_state(&mut redis, &key).await;
        assert!(
            matches!(state, Some('r') | None),
            "{key}: a tombstone, {state:?}"
        );
        let ttl: i64 = redis.pttl(&key).await.unwrap();
        assert!(
            ttl == -2 || (ttl > 0 && ttl <= 7_000),
            "{key} expires once a resend can no longer arrive, PTTL {ttl}"
        );
    }
}

/// A client through a proxy that can hold one request or reply back, with a short response
/// timeout, as `user` (None: the default user), without release notifications (so that its
/// only traffic is its own commands), with the scripts loaded.
async fn proxied_client(
    server: &fencelock::testing::RedisServer,
    user: Option<&str>,
) -> (TcpProxy, LockClient) {
    let proxy = TcpProxy::start(format!("127.0.0.1:{}", server.port()).parse().unwrap()).unwrap();
    let url = match user {
        Some(user) => proxy
            .url()
            .replace("redis://", &format!("redis://{user}:secret@")),
        None => proxy.url(),
    };
    let client = LockClient::builder(&url)
        .response_timeout(Duration::from_millis(500))
        .release_notifications(false)
        .connect()
        .await
        .unwrap();
    support::lock_once(&client, "warm-up").await;
    (proxy, client)
}

/// Review defect 2: an acquire held in the network past the client's timeout, then delivered after
/// the lock was taken (by the retry) and released, must not take the key for an owner nobody
/// tracks. Before, the retry went out on a new connection while the old one stayed open, and
/// the late request granted the key for its whole lease (here 60 s). Now the server closes
/// the old connection before the retry is sent, so the late request never runs; a user
/// that may not close connections gets a cleanup after the release instead.
#[tokio::test]
async fn an_acquire_delivered_after_its_timeout_and_the_release_takes_nothing() {
    let server = redis_server();
    let mut redis = inspector(&server).await;
    let _: () = redis::cmd("ACL")
        .arg(
            &[
                "SETUSER",
                "nokill",
                "on",
                ">secret",
                "~*",
                "&*",
                "+@all",
                "-client|kill",
            ][..],
        )
        .query_async(&mut redis)
        .await
        .unwrap();
    for (user, expected) in [
        (None, Delivery::Closed),
        (Some("nokill"), Delivery::Answered),
    ] {
        let (proxy, client) = proxied_client(&server, user).await;
        proxy.hold_next(Direction::ToServer);
        let guard = client.lock("late").ttl_ms(60_000).acquire().await.unwrap();
        proxy.held().await;
        guard.release().await.unwrap();
        assert_eq!(proxy.deliver_held().await, expected, "{user:?}");
        let free = eventually(Duration::from_secs(5), || async {
            !redis
                .clone()
                .exists::<_, bool>("lock:{late}:v2")
                .await
                .unwrap()
        })
        .await;
        assert!(free, "{user:?}: the late acquire left the key taken");
    }
}

/// Review defect 6, first half: a release whose reply is lost is sent again; when the second send
/// finds the key gone, the first one may have deleted it, or the lease had run out before.
/// Here it had: the call reports the loss instead of guessing "released".
#[tokio::test]
async fn a_resent_release_of_an_expired_lease_reports_the_loss() {
    let server = redis_server();
    let (proxy, client) = proxied_client(&server, None).await;
    let guard = client
        .lock("expired")
        .ttl_ms(300)
        .renew(false)
        .acquire()
        .await
        .unwrap();
    let lost = tokio::time::timeout(Duration::from_secs(5), guard.lost()).await;
    assert!(lost.is_ok(), "the 300 ms lease runs out");
    // The client counts it lost a little before Redis expires it: wait for Redis too.
    let redis = inspector(&server).await;
    let expired = eventually(Duration::from_secs(5), || async {
        !redis
            .clone()
            .exists::<_, bool>("lock:{expired}:v2")
            .await
            .unwrap()
    })
    .await;
    assert!(expired, "Redis expires the key");
    proxy.hold_next(Direction::ToClient);
    let released = guard.release().await;
    assert!(
        matches!(released, Err(LockError::Lost { .. })),
        "the lease had expired: {released:?}"
    );
}

/// Review defect 6, second half: when the second send finds the key taken by another owner, the
/// first send may have released it; Redis remembers each owner's release, so the call reports
/// the release, not a loss. Outside review, case (a): a release that keeps the key
/// (`min_hold_ms`) marks it rather than deleting it, and was not remembered: when the hold
/// ended and another owner took the key and released it before the resend arrived, the
/// resend reported `Lost`.
#[tokio::test]
async fn a_resent_release_that_finds_the_next_owner_reports_the_release() {
    let server = redis_server();
    let (proxy, client) = proxied_client(&server, None).await;
    let next_owner = support::client(&server).await;
    for (key, min_hold_ms) in [("handed", None), ("kept", Some(100))] {
        let mut request = client.lock(key).ttl_ms(60_000);
        if let Some(min_hold_ms) = min_hold_ms {
            request = request.min_hold_ms(min_hold_ms);
        }
        let guard = request.acquire().await.unwrap();
        proxy.hold_next(Direction::ToClient);
        let releasing = tokio::spawn(guard.release());
        proxy.held().await;
        // The first send ran (its reply is what is held): once the key is free (at once,
        // or when the hold ends), the next owner takes it, and releases it.
        let taken = next_owner
            .lock(key)
            .retry(500)
            .sleep_ms(10)
            .acquire()
            .await
            .expect("the first send released the key");
        taken.release().await.unwrap();
        let released = releasing.await.unwrap();
        assert!(released.is_ok(), "{key}: {released:?}");
    }
}

/// Review finding: a release whose first send died with the old server was taken for one
/// that ran, so a lock lost with a restart was reported released.
#[tokio::test]
async fn release_after_a_restart_without_data_reports_the_loss() {
    let mut server = redis_server();
    let locks = support::client(&server).await;
    let guard = locks
        .lock("restarted")
        .ttl_ms(30_000)
        .acquire()
        .await
        .unwrap();
    server.restart().unwrap();
    let released = guard.release().await;
    assert!(
        matches!(released, Err(LockError::Lost { .. })),
        "the key vanished with the restart, yet release() says {released:?}"
    );
}

#[redis_lock(key = "restarted-body", ttl_ms = 30_000, client = locks)]
async fn body_across_a_restart(
    locks: &LockClient,
    server: &mut fencelock::testing::RedisServer,
) -> Result<(), LockError> {
    server.restart().unwrap();
    Ok(())
}

#[tokio::test]
async fn attribute_call_across_a_restart_without_data_reports_the_loss() {
    let mut server = redis_server();
    let locks = support::client(&server).await;
    let result = body_across_a_restart(&locks, &mut server).await;
    assert!(
        matches!(result, Err(LockError::Lost { .. })),
        "on_lost = Abort: the lock vanished under the body, yet the call returns {result:?}"
    );
}

fn client_ids(list: &str) -> Vec<i64> {
    list.lines()
        .filter_map(|line| line.split_whitespace().next())
        .filter_map(|field| field.strip_prefix("id=")?.parse().ok())
        .collect()
}

/// Review finding: connection ids start again after a restart, so closing a given-up
/// connection of the old server by its id closed another application's.
#[tokio::test]
async fn settling_after_a_restart_closes_no_connection_of_the_new_server() {
    let mut server = redis_server();
    let locks = support::client(&server).await;
    let mut probe = inspector(&server).await;
    let probe_id: i64 = redis::cmd("CLIENT")
        .arg("ID")
        .query_async(&mut probe)
        .await
        .unwrap();
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query_async(&mut probe)
        .await
        .unwrap();
    let lock_ids: Vec<i64> = client_ids(&list)
        .into_iter()
        .filter(|id| *id != probe_id)
        .collect();
    assert!(!lock_ids.is_empty(), "the lock client has a connection");
    let highest = *lock_ids.iter().max().unwrap();
    server.restart().unwrap();
    // Another application connects to the new server; its connections get the low ids again.
    let mut victims = Vec::new();
    loop {
        let mut connection = inspector(&server).await;
        let id: i64 = redis::cmd("CLIENT")
            .arg("ID")
            .query_async(&mut connection)
            .await
            .unwrap();
        victims.push((id, connection));
        if id >= highest {
            break;
        }
    }
    // The lock client's next command finds its connection broken, reconnects, settles.
    let guard = locks.lock("after-restart").give_up().acquire().await;
    guard.expect("acquires").release().await.unwrap();
    let mut killed = Vec::new();
    for (id, connection) in &mut victims {
        let ping: Result<String, _> = redis::cmd("PING").query_async(connection).await;
        if ping.is_err() {
            killed.push(*id);
        }
    }
    assert!(
        killed.is_empty(),
        "the lock client closed connections {killed:?} of another application (its own old \
         ids were {lock_ids:?})"
    );
}

/// A lost acquire (its request held by the proxy) while `other_runtimes` other runtimes use
/// the client; then the cleanups, the holder's release and the late delivery. Returns what
/// the delivery met and whether the key was free afterwards.
async fn late_acquire_after_other_runtimes(other_runtimes: usize) -> (Delivery, bool) {
    let server = redis_server();
    let direct = support::client(&server).await;
    let proxy = TcpProxy::start(format!("127.0.0.1:{}", server.port()).parse().unwrap()).unwrap();
    let locks = LockClient::builder(&proxy.url())
        .response_timeout(Duration::from_millis(1_000))
        .release_notifications(false)
        .connect()
        .await
        .unwrap();
    support::lock_once(&locks, "warm-up").await;
    let holder = direct
        .lock("evicted")
        .ttl_ms(60_000)
        .acquire()
        .await
        .unwrap();
    proxy.hold_next(Direction::ToServer);
    let attempt = tokio::spawn({
        let locks = locks.clone();
        async move {
            locks
                .lock("evicted")
                .ttl_ms(60_000)
                .give_up()
                .acquire()
                .await
        }
    });
    proxy.held().await;
    // Other runtimes of the application use the same client meanwhile.
    for i in 0..other_runtimes {
        let locks = locks.clone();
        tokio::task::spawn_blocking(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                let guard = locks
                    .lock(format!("other-{i}"))
                    .give_up()
                    .acquire()
                    .await
                    .unwrap();
                guard.release().await.unwrap();
            });
        })
        .await
        .unwrap();
    }
    let outcome = attempt.await.unwrap();
    assert!(
        matches!(outcome, Err(LockError::NotAcquired { .. })),
        "{outcome:?}"
    );
    // The late request must find its connection closed whenever the cleanups run: what is
    // checked is what the delivery meets, not the cleanups' timing.
    holder.release().await.unwrap();
    let delivery = proxy.deliver_held().await;
    let free = direct.lock("evicted").give_up().acquire().await;
    let was_free = free.is_ok();
    if let Ok(guard) = free {
        guard.release().await.unwrap();
    }
    (delivery, was_free)
}

/// Review finding: a connection dropped from the cache (more caller runtimes than it keeps)
/// and then given up was never closed on the server, so its late acquire ran after every
/// cleanup.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_acquire_on_a_connection_evicted_from_the_cache_is_settled_too() {
    let (delivery, free) = late_acquire_after_other_runtimes(4).await;
    assert_eq!(delivery, Delivery::Closed);
    assert!(
        free,
        "the late acquire ran ({delivery:?}) after every cleanup and took the key for an \
         owner nobody tracks"
    );
}

//! Credentials and ACLs: a user limited to the lock prefix (and, as Redis 7 defaults, to no
//! pub/sub channels) can lock and release; a wrong password is a clear error.

use std::time::{Duration, Instant};

use fencelock::{LockClient, LockError};
use redis::AsyncCommands;

use crate::support::{
    self, command_stats, eventually, inspector, redis_server, script_calls, with_sources,
};

fn url_as(server: &fencelock::testing::RedisServer, user: &str, password: &str) -> String {
    format!("redis://{user}:{password}@127.0.0.1:{}/", server.port())
}

#[tokio::test]
async fn a_user_limited_to_the_lock_prefix_and_no_channels_can_lock_and_wait() {
    let server = redis_server();
    let mut admin = inspector(&server).await;
    let _: () = redis::cmd("ACL")
        .arg(&[
            "SETUSER",
            "locker",
            "on",
            ">secret",
            "~lock:*",
            "resetchannels",
            "+@all",
        ])
        .query_async(&mut admin)
        .await
        .unwrap();
    let locks = LockClient::connect(&url_as(&server, "locker", "secret"))
        .await
        .unwrap();
    let holder = locks.lock("k").ttl_ms(60_000).acquire().await.unwrap();
    let calls_before_waiter = script_calls(&mut admin).await;
    let waiter = tokio::spawn({
        let locks = locks.clone();
        async move {
            locks
                .lock("k")
                .sleep_ms(100)
                .wait_ms(10_000)
                .acquire()
                .await
        }
    });
    // Release only once the waiter has tried, and failed, at least once.
    let tried = eventually(Duration::from_secs(10), || {
        let mut admin = admin.clone();
        async move { script_calls(&mut admin).await > calls_before_waiter }
    })
    .await;
    assert!(tried, "the waiter made its first attempt");
    let released_at = Instant::now();
    // The release script's PUBLISH is refused (no channels): the release itself must stand.
    holder
        .release()
        .await
        .expect("released although PUBLISH is not allowed");
    let next = waiter
        .await
        .unwrap()
        .expect("the waiter, unable to subscribe, polls");
    assert!(released_at.elapsed() < Duration::from_secs(5));
    next.release().await.unwrap();
    let left = support::mutex_state(&mut admin, "lock:{k}:v2").await;
    assert_eq!(
        left,
        Some('r'),
        "nothing left behind but the release's tombstone"
    );
    // A refusal is not sent again (a dropped connection is).
    let stats = command_stats(&mut admin).await;
    let subscribe = stats
        .lines()
        .find(|line| line.starts_with("cmdstat_subscribe:"))
        .unwrap_or_default();
    assert!(
        subscribe.contains("rejected_calls=1,"),
        "one SUBSCRIBE refused: {subscribe}"
    );
}

#[tokio::test]
async fn a_wrong_password_is_a_backend_error_that_says_so() {
    let server = redis_server();
    let mut admin = inspector(&server).await;
    let _: () = redis::cmd("ACL")
        .arg(&["SETUSER", "locker", "on", ">secret", "~lock:*", "+@all"])
        .query_async(&mut admin)
        .await
        .unwrap();
    match LockClient::connect(&url_as(&server, "locker", "wrong")).await {
        Err(error @ LockError::Backend { .. }) => {
            let chain = with_sources(&error);
            assert!(
                chain.to_lowercase().contains("authentication"),
                "the error chain names the cause: {chain}"
            );
        }
        other => panic!("expected a Backend error, got {other:?}"),
    }
}

#[tokio::test]
async fn a_server_that_may_evict_locks_is_refused_unless_allowed() {
    let server =
        fencelock::testing::RedisServer::start_with(&["--maxmemory-policy", "volatile-lru"])
            .unwrap();
    match LockClient::connect(&server.url()).await {
        Err(LockError::InvalidConfig { reason, .. }) => {
            assert!(
                reason.contains("volatile-lru") && reason.contains("noeviction"),
                "{reason}"
            );
        }
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
    let allowed = LockClient::builder(&server.url())
        .allow_eviction(true)
        .connect()
        .await;
    allowed.expect("the risk can be accepted explicitly");
}

#[tokio::test]
async fn a_key_holding_foreign_data_is_reported_at_once_not_waited_for() {
    let server = redis_server();
    let locks = support::client(&server).await;
    let mut redis = inspector(&server).await;
    let _: () = redis
        .hset("lock:{hash}:v2", "field", "value")
        .await
        .unwrap();
    let _: () = redis
        .set("lock:{forever}:v2", "someone else's value")
        .await
        .unwrap();
    for (key, what) in [("hash", "a hash"), ("forever", "without a TTL")] {
        let started = Instant::now();
        match locks.lock(key).wait_ms(30_000).acquire().await {
            Err(LockError::KeyInUse { reason, .. }) => assert!(reason.contains(what), "{reason}"),
            other => panic!("{key}: expected KeyInUse, got {other:?}"),
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{key}: not waited for"
        );
    }
    let untouched: String = redis.hget("lock:{hash}:v2", "field").await.unwrap();
    assert_eq!(untouched, "value", "the foreign data is left alone");
}

/// Another program's value shaped as a released lock's (a tombstone) but without a TTL, which
/// every tombstone has: refused by a one-key request and by `lock_all`, and left as it was.
/// Found by the review of layout v2 (2026-12-08): a free-looking value was taken over.
#[tokio::test]
async fn a_value_shaped_as_a_tombstone_without_a_ttl_is_refused_and_left_alone() {
    let server = redis_server();
    let locks = support::client(&server).await;
    let mut redis = inspector(&server).await;
    let values = [("released", "r:5:5:0:x"), ("lined", "q:5:5:0:x")];
    for (key, value) in values {
        let _: () = redis
            .set(format!("lock:{{{key}}}:v2"), value)
            .await
            .unwrap();
    }
    for (key, _) in values {
        let one = locks.lock(key).give_up().acquire().await;
        let together = locks.lock_all([key, "free"]).acquire().await;
        for (how, outcome) in [("one key", one.map(drop)), ("lock_all", together.map(drop))] {
            match outcome {
                Err(LockError::KeyInUse { reason, .. }) => {
                    assert!(reason.contains("without a TTL"), "{key}, {how}: {reason}");
                }
                other => panic!("{key}, {how}: expected KeyInUse, got {other:?}"),
            }
        }
    }
    for (key, value) in values {
        let redis_key = format!("lock:{{{key}}}:v2");
        let left: String = redis.get(&redis_key).await.unwrap();
        let ttl: i64 = redis.pttl(&redis_key).await.unwrap();
        assert_eq!((left.as_str(), ttl), (value, -1), "{key} is left as it was");
    }
}

/// A CA and a server certificate for 127.0.0.1, made with the `openssl` command.
fn test_certificates(dir: &std::path::Path) -> std::path::PathBuf {
    let run = |args: &[&str]| {
        let status = std::process::Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .expect("openssl is installed");
        assert!(status.success(), "openssl {args:?}");
    };
    run(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "2",
        "-subj",
        "/CN=fencelock test CA",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
    ]);
    run(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=127.0.0.1",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
    ]);
    std::fs::write(dir.join("san.ext"), "subjectAltName=IP:127.0.0.1\n").unwrap();
    run(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        "san.ext",
        "-out",
        "server.crt",
    ]);
    dir.to_path_buf()
}

#[tokio::test]
async fn rediss_works_with_a_trusted_certificate_and_fails_clearly_with_an_unknown_one() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = std::env::temp_dir().join(format!("fencelock-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let certs = test_certificates(&dir);
    let tls_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let path = |name: &str| certs.join(name).to_string_lossy().into_owned();
    let server = fencelock::testing::RedisServer::start_with(&[
        "--tls-port",
        &tls_port.to_string(),
        "--tls-cert-file",
        &path("server.crt"),
        "--tls-key-file",
        &path("server.key"),
        "--tls-ca-cert-file",
        &path("ca.crt"),
        "--tls-auth-clients",
        "no",
    ])
    .unwrap();
    let url = format!("rediss://127.0.0.1:{tls_port}/");
    let ca = std::fs::read(certs.join("ca.crt")).unwrap();
    let locks = LockClient::builder(&url)
        .tls_root_certificate(ca)
        .connect()
        .await
        .unwrap();
    support::lock_once(&locks, "k").await;

    match LockClient::connect(&url).await {
        Err(error @ LockError::Backend { .. }) => {
            let chain = with_sources(&error);
            assert!(
                chain.to_lowercase().contains("certificate"),
                "the cause is named: {chain}"
            );
        }
        other => panic!("a server certificate from an unknown CA must be refused: {other:?}"),
    }
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn debug_output_shows_neither_owner_tokens_nor_passwords() {
    let server = redis_server();
    let mut redis = inspector(&server).await;
    let locks = support::client(&server).await;
    let guard = locks.lock("k").acquire().await.unwrap();
    let holder: String = redis.get("lock:{k}:v2").await.unwrap();
    let owner = holder.rsplit(':').next().unwrap().to_owned();
    for debug in [
        format!("{guard:?}"),
        format!("{locks:?}"),
        format!("{:?}", locks.lock("k")),
    ] {
        assert!(
            !debug.contains(&owner),
            "an owner token in Debug output: {debug}"
        );
    }
    let builder = LockClient::builder("redis://user:hunter2@127.0.0.1:1/");
    assert!(!format!("{builder:?}").contains("hunter2"));
    guard.release().await.unwrap();
}

/// Review defect 3: one lease key replaced by a hash must cost that lease only; before, the batch
/// extend script failed as a whole and every lease of the client was counted lost.
#[tokio::test]
async fn a_foreign_value_in_one_lease_key_loses_that_lease_only() {
    let server = redis_server();
    let locks = support::client(&server).await;
    let mut redis = inspector(&server).await;
    let mut guards = Vec::new();
    for key in ["a", "b", "c"] {
        guards.push(locks.lock(key).ttl_ms(900).acquire().await.unwrap());
    }
    let _: () = redis.del("lock:{b}:v2").await.unwrap();
    let _: () = redis.hset("lock:{b}:v2", "field", "value").await.unwrap();
    let rounds = locks.renewal_stats().rounds;
    let lost = tokio::time::timeout(Duration::from_secs(10), guards[1].lost())
        .await
        .expect("the renewal after the swap finds the hash");
    assert!(
        matches!(
            lost,
            LockError::Lost {
                cause: fencelock::LossCause::NotOwner,
                ..
            }
        ),
        "{lost:?}"
    );
    // Three more rounds, i.e. well past the 900 ms lease of any lease they failed to renew.
    let renewed = eventually(Duration::from_secs(10), || async {
        locks.renewal_stats().rounds >= rounds + 4
    })
    .await;
    assert!(renewed, "renewal goes on: {:?}", locks.renewal_stats());
    for (guard, key) in [(&guards[0], "lock:{a}:v2"), (&guards[2], "lock:{c}:v2")] {
        assert!(!guard.is_lost(), "{key} was renewed in the same batch");
        let ttl: i64 = redis.pttl(key).await.unwrap();
        assert!(ttl > 0, "{key} is still held: PTTL {ttl}");
    }
    let untouched: String = redis.hget("lock:{b}:v2", "field").await.unwrap();
    assert_eq!(untouched, "value");
}

/// Review defect 4: what a lock keeps next to its key (a shared kind's `:fence`, the
/// `:queue`) may also be taken by foreign data. Acquiring then reports `KeyInUse` at once,
/// naming the key, and releasing still releases; the foreign data is left as it was.
#[tokio::test]
async fn foreign_data_in_a_helper_key_is_key_in_use_and_does_not_block_release() {
    let server = redis_server();
    let locks = support::client(&server).await;
    let mut redis = inspector(&server).await;
    let _: () = redis
        .set("lock:{text-fence}:v2:fence", "abc")
        .await
        .unwrap();
    let _: () = redis
        .hset("lock:{hash-fence}:v2:fence", "f", "v")
        .await
        .unwrap();
    let _: () = redis
        .rpush("lock:{list-deadlines}:v2:queue:deadlines", "x")
        .await
        .unwrap();
    let _: () = redis
        .set("lock:{huge-fence}:v2:fence", "99999999999999999999")
        .await
        .unwrap();
    let _: () = redis
        .set("lock:{text-queue}:v2:queue", "not a list")
        .await
        .unwrap();
    // A mutex carries its fencing token in its value; a semaphore keeps a counter.
    let cases = [
        ("text-fence", true, "fence"),
        ("hash-fence", true, "fence"),
        ("huge-fence", true, "fence"),
        ("list-deadlines", false, "queue deadlines"),
        ("text-queue", false, "queue"),
    ];
    for (key, shared, helper) in cases {
        let started = Instant::now();
        let request = if shared {
            locks.semaphore(key, 2)
        } else {
            locks.lock(key)
        };
        match request.wait_ms(30_000).acquire().await {
            Err(LockError::KeyInUse { reason, .. }) => {
                assert!(reason.contains(helper), "{key}: {reason}")
            }
            other => panic!("{key}: expected KeyInUse, got {other:?}"),
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{key}: not retried until wait_ms"
        );
    }
    let fence: String = redis.get("lock:{text-fence}:v2:fence").await.unwrap();
    assert_eq!(fence, "abc", "the foreign data is left alone");

    // A release must not trip over foreign queue keys either (nor hand the key over).
    let guard = locks.lock("held").ttl_ms(60_000).acquire().await.unwrap();
    let _: () = redis
        .set("lock:{held}:v2:queue", "not a list")
        .await
        .unwrap();
    let _: () = redis
        .rpush("lock:{held}:v2:queue:deadlines", "x")
        .await
        .unwrap();
    guard.release().await.expect("the release goes through");
    let held = support::granted_in(&mut redis, "lock:{held}:v2").await;
    assert!(!held, "the lock is released");
}

/// Review findings: foreign data in the queue keys, or a foreign string with a TTL in the
/// lock key, was taken for a lock's (waited for, or changed).
#[tokio::test]
async fn a_foreign_list_in_the_queue_key_is_key_in_use_and_left_alone() {
    let server = redis_server();
    let locks = support::client(&server).await;
    let mut redis = inspector(&server).await;
    let _: () = redis
        .rpush("lock:{fq}:v2:queue", "another program's entry")
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let outcome = locks
        .lock("fq")
        .fair(true)
        .sleep_ms(100)
        .wait_ms(1_000)
        .acquire()
        .await;
    let waited = started.elapsed();
    let ttl: i64 = redis.pttl("lock:{fq}:v2:queue").await.unwrap();
    assert!(
        matches!(outcome, Err(LockError::KeyInUse { .. })) && ttl == -1,
        "a list without a TTL is no lock's queue, yet: {outcome:?} after {waited:?}, and the \
         foreign list now has PTTL {ttl} (it will vanish)"
    );
}

#[tokio::test]
async fn a_foreign_sorted_set_in_the_queue_deadlines_is_key_in_use_and_left_alone() {
    let server = redis_server();
    let locks = support::client(&server).await;
    let mut redis = inspector(&server).await;
    let _: () = redis
        .zadd(
            "lock:{fz}:v2:queue:deadlines",
            "another program's member",
            1,
        )
        .await
        .unwrap();
    let outcome = locks.lock("fz").fair(true).give_up().acquire().await;
    let members: Vec<String> = redis
        .zrange("lock:{fz}:v2:queue:deadlines", 0, -1)
        .await
        .unwrap();
    let granted = outcome.is_ok();
    if let Ok(guard) = outcome {
        guard.release().await.unwrap();
    }
    assert!(
        !granted && !members.is_empty(),
        "granted: {granted}; the foreign sorted set now holds {members:?}"
    );
}

#[tokio::test]
async fn a_foreign_string_with_a_ttl_in_the_lock_key_is_key_in_use() {
    let server = redis_server();
    let locks = support::client(&server).await;
    let mut redis = inspector(&server).await;
    let _: () = redis
        .set_ex("lock:{cached}:v2", "session data of another program", 3_600)
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let outcome = locks.lock("cached").wait_ms(1_000).acquire().await;
    assert!(
        matches!(outcome, Err(LockError::KeyInUse { .. })),
        "another program's value (not `<owner>:<token>`): {outcome:?} after {:?}",
        started.elapsed()
    );
}

/// Review finding: a server with `CLIENT` renamed (the way to restrict it before ACLs) could
/// not be used at all.
#[tokio::test]
async fn a_server_with_client_renamed_is_usable_without_settling() {
    let server = fencelock::testing::RedisServer::start_with(&[
        "--rename-command",
        "CLIENT",
        "hidden-client-command",
    ])
    .unwrap();
    let mut redis = inspector(&server).await;
    let pong: String = redis::cmd("PING").query_async(&mut redis).await.unwrap();
    assert_eq!(pong, "PONG");
    let locks = LockClient::connect(&server.url()).await;
    assert!(locks.is_ok(), "{locks:?}");
}

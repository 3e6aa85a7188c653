//! The `fencelock` binary against one private `redis-server`.

mod support;

use std::time::Duration;

use fencelock::admin::Holding;
use fencelock::{LockClient, LockError, LockGuard};
use redis::AsyncCommands;
use serde_json::Value;

use support::{Watch, client, eventually, fencelock, hold, on, redis_server};

/// A request that waits in the key's line (for up to 30 s) until it gets the lock.
fn waiter(client: &LockClient, key: &str) -> tokio::task::JoinHandle<Result<LockGuard, LockError>> {
    let request = client
        .lock(key)
        .ttl_ms(30_000)
        .sleep_ms(1_000)
        .wait_ms(30_000);
    tokio::spawn(request.acquire())
}

/// Waits until `key` has `n` waiters in line.
async fn waiters_in_line(client: &LockClient, key: &str, n: usize) {
    let admin = client.admin();
    eventually("the waiter is in line", || async {
        admin
            .inspect(key)
            .await
            .is_ok_and(|state| state.waiters == n)
    })
    .await;
}

fn lock<'a>(listed: &'a Value, key: &str) -> &'a Value {
    let locks = listed.as_array().expect("a JSON array");
    locks
        .iter()
        .find(|lock| lock["key"] == key)
        .unwrap_or_else(|| panic!("{key} in {listed}"))
}

fn is_tag(value: &Value) -> bool {
    value
        .as_str()
        .is_some_and(|tag| tag.len() == 16 && tag.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// `list` and `inspect` show a held lock's token, lease left, holder and waiter by tag (never
/// an owner token), in a table, in lines and as JSON; a pattern filters by key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_and_inspect_show_holder_token_ttl_and_the_waiter_next_in_line() {
    let server = redis_server();
    let locks = client(&server).await;
    let held = hold(&locks, "stock:42").await;
    let _other = hold(&locks, "order:7").await;
    let waiting = waiter(&client(&server).await, "stock:42");
    waiters_in_line(&locks, "stock:42", 1).await;
    let token = held.token().to_string();

    let table = on(&server, &["list"]).await.ok();
    let lines: Vec<&str> = table.lines().collect();
    assert!(
        lines[0].starts_with("KEY") && lines[0].contains("TOKEN"),
        "{table}"
    );
    assert!(lines[1].starts_with("order:7"), "sorted by key: {table}");
    assert!(
        lines[2].starts_with("stock:42") && lines[2].contains(&token),
        "{table}"
    );

    let listed = on(&server, &["--json", "list"]).await.json();
    let stock = lock(&listed, "stock:42");
    assert_eq!(stock["state"], "held");
    assert_eq!(stock["token"].as_u64(), Some(held.token()));
    let ttl = stock["ttl_ms"].as_u64().expect("a TTL");
    assert!(ttl > 0 && ttl <= 60_000, "{stock}");
    assert!(is_tag(&stock["holder"]), "{stock}");
    assert_eq!(stock["waiters"], 1);
    assert!(is_tag(&stock["next"]["waiter"]), "{stock}");
    assert_eq!(stock["next"]["lease_ms"], 30_000);
    assert!(
        stock["next"]["place_ms"]
            .as_u64()
            .is_some_and(|ms| ms <= 3_000),
        "{stock}"
    );
    assert!(
        stock["fence"]
            .as_u64()
            .is_some_and(|fence| fence >= held.token())
    );
    assert_eq!(lock(&listed, "order:7")["next"], Value::Null);

    let filtered = on(&server, &["--json", "list", "stock:*"]).await.json();
    assert_eq!(filtered.as_array().map(Vec::len), Some(1), "{filtered}");
    let none = on(&server, &["list", "nothing:*"]).await.ok();
    assert_eq!(none, "no held lock matches nothing:*\n");

    let details = on(&server, &["inspect", "stock:42"]).await.ok();
    assert!(details.contains(&format!("token:   {token}")), "{details}");
    assert!(
        details.contains("waiters: 1 in line") && details.contains("(next)"),
        "{details}"
    );
    let inspected = on(&server, &["--json", "inspect", "stock:42"]).await.json();
    assert_eq!(inspected["next"]["waiter"], stock["next"]["waiter"]);
    assert_eq!(
        inspected["queue"].as_array().map(Vec::len),
        Some(1),
        "{inspected}"
    );

    // Owner tokens stay in Redis.
    let mut redis = server.connection().await.unwrap();
    let value: String = redis.get("lock:{stock:42}:v2").await.unwrap();
    let (_, owner) = value.rsplit_once(':').unwrap();
    for output in [
        &table,
        &details,
        &listed.to_string(),
        &inspected.to_string(),
    ] {
        assert!(
            !output.contains(owner),
            "an owner token was shown: {output}"
        );
    }
    waiting.abort();
}

/// An operator who types what `redis-cli` shows (`lock:{stock:42}:v2`) where the commands take
/// the applications' key, or a pattern with the prefix, or a `--prefix` the applications do
/// not use, is told on standard error what to type; standard output stays as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_key_names_and_a_wrong_prefix_get_a_note_saying_what_to_type() {
    let server = redis_server();
    let locks = client(&server).await;
    let held = hold(&locks, "stock:42").await;
    let redis_name =
        "note: `lock:{stock:42}:v2` is how Redis names the lock `stock:42`, which is held";
    for args in [
        &["inspect", "lock:{stock:42}:v2"][..],
        &["release", "--force", "--yes", "lock:{stock:42}:v2"],
    ] {
        let run = on(&server, args).await;
        assert!(run.success && run.stderr.contains(redis_name), "{run:?}");
    }
    assert!(!held.is_lost(), "nothing was released");
    let run = on(&server, &["list", "lock:*"]).await;
    assert_eq!(run.stdout, "no held lock matches lock:*\n");
    assert!(
        run.stderr.contains("without the prefix `lock:`: try `*`"),
        "{run:?}"
    );
    let run = on(&server, &["--prefix", "locks:", "list"]).await;
    assert!(
        run.stderr.contains("but 1 do under the default `lock:`"),
        "{run:?}"
    );
    let run = on(&server, &["inspect", "stock:42"]).await;
    assert!(
        run.success && run.stderr.is_empty(),
        "no note for the right key: {run:?}"
    );
}

/// A forced release ends the holder's grant whoever it is: the waiting `acquire()` gets the
/// key with a greater token, the former holder's release reports `Lost` and so does its
/// renewal; without a waiter the key is free and its fencing counter stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forced_release_hands_the_key_to_the_waiter_and_the_holder_loses_it() {
    let server = redis_server();
    let locks = client(&server).await;
    let held = hold(&locks, "stock:42").await;
    let waiting = waiter(&client(&server).await, "stock:42");
    waiters_in_line(&locks, "stock:42", 1).await;

    let said = on(&server, &["release", "stock:42", "--force", "--yes"])
        .await
        .ok();
    assert!(said.starts_with("released `stock:42`, held by "), "{said}");
    assert!(said.contains(&format!("token {}", held.token())), "{said}");
    assert!(said.contains("handed over to "), "{said}");
    let next = tokio::time::timeout(Duration::from_secs(10), waiting).await;
    let next = next
        .expect("the waiter wakes")
        .unwrap()
        .expect("it gets the key");
    assert!(next.token() > held.token(), "a greater token");
    assert!(
        said.contains(&format!("with token {}", next.token())),
        "{said}"
    );
    match held.release().await {
        Err(LockError::Lost { .. }) => {}
        other => panic!("the former holder's release reports Lost, got {other:?}"),
    }
    next.release().await.unwrap();

    // Renewed every 500 ms: the first renewal after the release finds the grant gone.
    let renewed = locks
        .lock("job")
        .ttl_ms(1_500)
        .give_up()
        .acquire()
        .await
        .unwrap();
    let forced = on(&server, &["--json", "release", "job", "--force", "--yes"])
        .await
        .json();
    assert_eq!(forced["released"], true, "{forced}");
    assert_eq!(
        forced["found"]["token"].as_u64(),
        Some(renewed.token()),
        "{forced}"
    );
    assert_eq!(forced["announced"]["event"], "released", "{forced}");
    let lost = tokio::time::timeout(Duration::from_secs(10), renewed.lost()).await;
    assert!(lost.expect("the renewal finds it lost").is_lost());
    let after = on(&server, &["--json", "inspect", "job"]).await.json();
    assert_eq!(after["state"], "free", "{after}");
    assert_eq!(
        after["fence"].as_u64(),
        Some(renewed.token()),
        "the fencing counter stays"
    );

    let nothing = on(&server, &["release", "job", "--force", "--yes"])
        .await
        .ok();
    assert_eq!(nothing, "`job` was not held: nothing released\n");
}

/// A key starting with a brace (stored with one more in front) is listed, matched by
/// patterns, inspected and released as written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_starting_with_a_brace_are_found_by_their_text() {
    let server = redis_server();
    let locks = client(&server).await;
    let _guards = [
        hold(&locks, "{odd").await,
        hold(&locks, "}odd").await,
        hold(&locks, "plain:1").await,
    ];
    let keys = |listed: Value| -> Vec<String> {
        let listed = listed.as_array().cloned().unwrap_or_default();
        listed
            .iter()
            .map(|lock| lock["key"].as_str().unwrap().to_owned())
            .collect()
    };
    let all = on(&server, &["--json", "list"]).await.json();
    assert_eq!(keys(all), ["plain:1", "{odd", "}odd"]);
    for (pattern, expected) in [
        ("{*", vec!["{odd"]),
        ("?odd", vec!["{odd", "}odd"]),
        ("[}]*", vec!["}odd"]),
    ] {
        let listed = on(&server, &["--json", "list", pattern]).await.json();
        assert_eq!(keys(listed), expected, "{pattern}");
    }
    let inspected = on(&server, &["--json", "inspect", "{odd"]).await.json();
    assert_eq!(inspected["state"], "held");
    let released = on(&server, &["--json", "release", "}odd", "--force", "--yes"])
        .await
        .json();
    assert_eq!(released["found"]["state"], "held", "{released}");
    assert_eq!(released["released"], true, "{released}");
    let left = on(&server, &["--json", "list", "?odd"]).await.json();
    assert_eq!(keys(left), ["{odd"]);
}

/// 2,000 held locks take several `SCAN` pages; each is listed once, and `KEYS` is never
/// sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_thousand_locks_are_listed_over_several_scan_pages_without_keys() {
    let server = redis_server();
    let locks = client(&server).await;
    let mut guards = Vec::new();
    for n in 0..2_000 {
        guards.push(hold(&locks, &format!("bulk:{n:04}")).await);
    }
    let listed = on(&server, &["--json", "list", "bulk:*"]).await.json();
    let keys: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["key"].as_str().unwrap())
        .collect();
    let expected: Vec<String> = (0..2_000).map(|n| format!("bulk:{n:04}")).collect();
    assert_eq!(keys, expected, "each once, sorted");
    let stats = server
        .info("commandstats", "cmdstat_scan")
        .await
        .expect("SCAN was sent");
    let calls: u64 = stats
        .split("calls=")
        .nth(1)
        .and_then(|c| c.split(',').next())
        .unwrap()
        .parse()
        .unwrap();
    assert!(calls > 1, "more than one SCAN page: {stats}");
    assert_eq!(
        server.info("commandstats", "cmdstat_keys").await,
        None,
        "KEYS was sent"
    );
}

/// A refused connection, a wrong or missing password and a bad URL each fail with one line
/// that says what failed and why, and never show the password.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_failures_exit_non_zero_with_one_line() {
    let refused = fencelock(&["--url", "redis://127.0.0.1:1/", "list"]).await;
    let line = refused.failed_with_one_line();
    assert!(
        line.starts_with("fencelock: cannot connect: ") && line.contains("refused"),
        "{line}"
    );

    let server = redis_server();
    let mut redis = server.connection().await.unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg(&["SET", "requirepass", "s3cret-pw"])
        .query_async(&mut redis)
        .await
        .unwrap();
    let wrong = format!("redis://:not-the-pw@127.0.0.1:{}/", server.port());
    let line = fencelock(&["--url", &wrong, "list"])
        .await
        .failed_with_one_line();
    assert!(
        line.to_lowercase().contains("authentication failed"),
        "{line}"
    );
    assert!(
        !line.contains("not-the-pw"),
        "the password is shown: {line}"
    );
    let line = on(&server, &["inspect", "k"]).await.failed_with_one_line();
    assert!(line.contains("NOAUTH"), "{line}");
    let right = format!("redis://:s3cret-pw@127.0.0.1:{}/", server.port());
    fencelock(&["--url", &right, "list"]).await.ok();

    let line = fencelock(&["--url", "nonsense", "list"])
        .await
        .failed_with_one_line();
    assert!(line.contains("URL"), "{line}");
    let line = fencelock(&["--url", "redis://a/", "--url", "redis://b/", "list"])
        .await
        .failed_with_one_line();
    assert!(
        line.contains("--redlock") && line.contains("--cluster"),
        "{line}"
    );
}

/// A release is refused without `--force` (owner-unchecked), and without `--yes` when there
/// is no terminal to confirm on; the lock stays held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_refuses_without_force_and_without_confirmation() {
    let server = redis_server();
    let locks = client(&server).await;
    let held = hold(&locks, "k").await;
    let line = on(&server, &["release", "k"]).await.failed_with_one_line();
    assert!(
        line.contains("owner-unchecked") && line.contains("--force"),
        "{line}"
    );
    let line = on(&server, &["release", "k", "--force"])
        .await
        .failed_with_one_line();
    assert!(
        line.contains("not a terminal") && line.contains("--yes"),
        "{line}"
    );
    let state = locks.admin().inspect("k").await.unwrap();
    assert_eq!(state.holding.token(), Some(held.token()), "still held");
    held.release().await.expect("still the holder's");
}

/// `watch` prints one line per announcement: the hand-off to the waiter, then its release,
/// and stops after `--count`; as JSON, one object per line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_prints_each_hand_off_and_release() {
    let server = redis_server();
    let locks = client(&server).await;
    let held = hold(&locks, "stock:42").await;
    let waiting = waiter(&client(&server).await, "stock:42");
    waiters_in_line(&locks, "stock:42", 1).await;
    let url = server.url();
    let (mut watch, first) =
        Watch::start(&["--url", &url, "--json", "watch", "stock:42", "--count", "2"]).await;
    let (mut human, _) = Watch::start(&["--url", &url, "watch", "stock:42", "--count", "1"]).await;
    let parse = |line: String| -> Value { serde_json::from_str(&line).unwrap() };
    let first = parse(first);
    assert_eq!(
        (first["event"].as_str(), first["key"].as_str()),
        (Some("watching"), Some("stock:42"))
    );

    held.release().await.unwrap();
    let next = waiting.await.unwrap().unwrap();
    let handed = parse(watch.next_line().await);
    assert_eq!(handed["event"], "handed_over", "{handed}");
    assert!(is_tag(&handed["to"]), "{handed}");
    assert_eq!(handed["token"].as_u64(), Some(next.token()));
    assert!(
        handed["time"].as_str().is_some_and(|t| t.ends_with('Z')),
        "{handed}"
    );
    let line = human.next_line().await;
    assert!(
        line.contains(&format!(
            "stock:42  handed over to {} with token {}",
            handed["to"].as_str().unwrap(),
            next.token()
        )),
        "{line}"
    );

    let next_token = next.token();
    next.release().await.unwrap();
    let released = parse(watch.next_line().await);
    assert_eq!(
        (released["event"].as_str(), released["token"].as_u64()),
        (Some("released"), Some(next_token))
    );
    assert!(watch.wait(), "stopped after 2");
    assert!(human.wait(), "stopped after 1");
}

/// A key that shared kinds hold is shown by its grants (readers, a semaphore's permits), not
/// as foreign data. A forced release of a key several grants hold needs `--holder`, and ends
/// that grant only; of a key one grant holds, it ends that one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_kinds_show_their_grants_and_a_forced_release_ends_one() {
    let server = redis_server();
    let locks = client(&server).await;
    let read = |key: &str| locks.read_lock(key).ttl_ms(60_000).give_up().acquire();
    let readers = [read("report").await.unwrap(), read("report").await.unwrap()];
    let permit = locks
        .semaphore("pool", 5)
        .ttl_ms(60_000)
        .give_up()
        .acquire()
        .await
        .unwrap();
    // A request for fewer shards takes one below its count: the lock has the most asked for.
    let shard = |shards| locks.segmented("stock", shards).ttl_ms(60_000).acquire();
    let _shards = [shard(2).await.unwrap(), shard(8).await.unwrap()];

    let table = on(&server, &["list"]).await.ok();
    let row = |key: &str| {
        let line = table.lines().find(|line| line.starts_with(key));
        line.unwrap_or_else(|| panic!("{key} in {table}"))
            .to_owned()
    };
    assert!(row("pool").contains("1 of 5 permits"), "{table}");
    assert!(row("report").contains("2 readers"), "{table}");
    assert!(row("stock").contains("2 of 8 shards"), "{table}");
    assert!(!table.contains("foreign"), "{table}");

    let details = on(&server, &["inspect", "report"]).await.ok();
    assert!(details.contains("shared: 2 readers"), "{details}");
    for reader in &readers {
        assert!(
            details.contains(&format!("token {}", reader.token())),
            "{details}"
        );
    }
    let listed = on(&server, &["--json", "list"]).await.json();
    let pool = lock(&listed, "pool");
    assert_eq!(pool["state"], "shared", "{pool}");
    assert_eq!(pool["holders"], 1, "{pool}");
    let grant = &pool["grants"][0];
    assert_eq!(grant["kind"], "semaphore", "{grant}");
    assert_eq!(grant["count"], 5, "{grant}");
    assert_eq!(grant["token"].as_u64(), Some(permit.token()), "{grant}");
    assert!(is_tag(&grant["holder"]), "{grant}");

    let line = on(&server, &["release", "report", "--force", "--yes"])
        .await
        .failed_with_one_line();
    assert!(
        line.contains("2 readers") && line.contains("--holder"),
        "{line}"
    );
    let Holding::Shared { grants, .. } = locks.admin().inspect("report").await.unwrap().holding
    else {
        panic!("still held by both readers");
    };
    let ended = grants[0].clone();
    let line = on(
        &server,
        &[
            "release",
            "report",
            "--force",
            "--yes",
            "--holder",
            "0123456789abcdef",
        ],
    )
    .await
    .failed_with_one_line();
    assert!(line.contains("holds no grant"), "{line}");
    let tag = ended.owner.to_string();
    force_release_of_holder(&server, "report", &tag).await;
    let [first, second] = readers;
    let (lost, kept) = match Some(first.token()) == ended.token {
        true => (first, second),
        false => (second, first),
    };
    assert!(
        lost.release().await.unwrap_err().is_lost(),
        "the grant named ended"
    );
    let outcome = on(&server, &["release", "report", "--force", "--yes"])
        .await
        .ok();
    assert!(outcome.contains("the key is free"), "{outcome}");
    assert!(
        kept.release().await.unwrap_err().is_lost(),
        "the one grant left ended"
    );
    on(&server, &["release", "pool", "--force", "--yes"])
        .await
        .ok();
    assert!(permit.release().await.unwrap_err().is_lost());
}

/// More grants than an inspection shows (100, those whose leases end first): the TTL is the
/// longest lease of all of them, and a grant not shown is still ended by its holder's tag.
#[tokio::test]
async fn grants_beyond_those_shown_count_and_are_named_by_tag() {
    let server = redis_server();
    let locks = client(&server).await;
    let read = |ttl_ms| locks.read_lock("report").ttl_ms(ttl_ms).give_up().acquire();
    let longest = read(600_000).await.unwrap();
    let Holding::Shared { grants, .. } = locks.admin().inspect("report").await.unwrap().holding
    else {
        panic!("one reader holds it");
    };
    let tag = grants[0].owner.to_string();
    let mut others = Vec::new();
    for _ in 0..101 {
        others.push(read(60_000).await.unwrap());
    }

    let listed = on(&server, &["--json", "list"]).await.json();
    let report = lock(&listed, "report");
    assert_eq!(report["holders"], 102, "{report}");
    let shown = report["grants"].as_array().unwrap();
    assert_eq!(shown.len(), 100, "{report}");
    assert!(shown.iter().all(|grant| grant["holder"] != tag), "{report}");
    let ttl_ms = report["ttl_ms"].as_u64().unwrap();
    assert!(ttl_ms > 60_000, "the longest lease, not shown: {report}");

    force_release_of_holder(&server, "report", &tag).await;
    assert!(longest.release().await.unwrap_err().is_lost());
    let state = locks.admin().inspect("report").await.unwrap();
    assert!(
        matches!(state.holding, Holding::Shared { holders: 101, .. }),
        "the others hold it: {state:?}"
    );
    drop(others);
}

/// Ends the grant of `tag` on `key` with the CLI, and checks that it says so.
async fn force_release_of_holder(server: &fencelock::testing::RedisServer, key: &str, tag: &str) {
    let outcome = on(
        server,
        &["release", key, "--force", "--yes", "--holder", tag],
    )
    .await
    .ok();
    assert!(
        outcome.contains(&format!("the grant of {tag} ended")),
        "{outcome}"
    );
}

/// `refill` clears a segmented lock's exhausted marks: one shard's, or all of them; the
/// shards are taken again.
#[tokio::test]
async fn refill_clears_the_exhausted_marks() {
    let server = redis_server();
    let locks = client(&server).await;
    for _ in 0..2 {
        let guard = locks.segmented("stock:7", 2).acquire().await.unwrap();
        guard.mark_exhausted().await.unwrap();
        guard.release().await.unwrap();
    }
    let sold_out = locks.segmented("stock:7", 2).give_up().acquire().await;
    assert!(sold_out.unwrap_err().is_exhausted());

    let said = on(&server, &["refill", "stock:7", "--shard", "1"])
        .await
        .ok();
    assert_eq!(said.trim_end(), "refilled shard 1 of `stock:7`");
    let guard = locks.segmented("stock:7", 2).give_up().acquire().await;
    assert_eq!(guard.unwrap().shard(), Some(1), "the refilled shard alone");

    let said = on(&server, &["--json", "refill", "stock:7"]).await.json();
    assert_eq!(said["refilled"], true, "{said}");
    assert_eq!(said["shard"], serde_json::Value::Null, "{said}");
    let guard = locks.segmented("stock:7", 1).give_up().acquire().await;
    assert_eq!(guard.unwrap().shard(), Some(0), "every shard refilled");
}

/// `release-instance NAME --force` releases every lock of that instance's clients, and
/// nothing else; without --force it refuses and leaves them.
#[tokio::test]
async fn release_instance_frees_what_one_instance_holds() {
    let server = redis_server();
    let locks = client(&server).await;
    let instance = LockClient::open_builder(&server.url()).instance_id("web-3");
    let instance = instance.connect().await.unwrap();
    let held = instance.lock("job:a").acquire().await.unwrap();
    let permit = instance.semaphore("pool", 2).acquire().await.unwrap();
    let other = locks.semaphore("pool", 2).acquire().await.unwrap();

    let refused = on(&server, &["release-instance", "web-3"]).await;
    let refused = refused.failed_with_one_line();
    assert!(refused.contains("add --force"), "{refused}");
    fencelock::testing::assertions::assert_held_by(&locks, &held).await;
    let said = on(&server, &["release-instance", "web-3", "--force"])
        .await
        .ok();
    assert_eq!(
        said.trim_end(),
        "released 2 grants of instance `web-3`: `job:a`, `pool`"
    );
    fencelock::testing::assertions::assert_free(&locks, "job:a").await;
    fencelock::testing::assertions::assert_held_by(&locks, &other).await;
    assert!(held.release().await.unwrap_err().is_lost());
    assert!(permit.release().await.unwrap_err().is_lost());
    let said = on(&server, &["--json", "release-instance", "web-3", "--force"])
        .await
        .json();
    assert_eq!(said["found"], 0, "{said}");
    other.release().await.unwrap();
}

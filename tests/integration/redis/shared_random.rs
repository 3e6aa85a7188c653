//! Randomized acquire / release / keep / extend / crash / wait / hand-off / raise /
//! give-back cycles of the shared kinds against a real redis-server, checking the hash and
//! leases bookkeeping after every step.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use fencelock::LockKind;
use fencelock::backend::redis::{RedisBackend, RedisSettings};
use fencelock::backend::{Acquire, Extended, HeldLease, Lease, LockBackend, Turn};
use redis::AsyncCommands;

use crate::support::{inspector, redis_server};

const GRANT: &str = include_str!("../../../lock-runtime/src/backend/redis/lua/grant.lua");
const SHARED: &str = include_str!("../../../lock-runtime/src/backend/redis/lua/shared.lua");
const RAISE: &str = include_str!("../../../lock-runtime/src/backend/redis/lua/raise.lua");
const GIVE_BACK: &str = include_str!("../../../lock-runtime/src/backend/redis/lua/give_back.lua");

const SNAPSHOT: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lt = redis.call('TYPE', KEYS[1]).ok
local zt = redis.call('TYPE', KEYS[2]).ok
local h, z = {}, {}
if lt == 'hash' then h = redis.call('HGETALL', KEYS[1]) end
if zt == 'zset' then z = redis.call('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES') end
-- Time is frozen at the script's start for expiry, but TIME runs on: a key alive here may
-- have expired by `now` (by a ms or more on a loaded machine). Its remaining TTL is then 0,
-- never a negative number that reads as PEXPIRETIME's -1 (no TTL) or -2 (no key).
local function left(k) local at = redis.call('PEXPIRETIME', k); if at < 0 then return at end; return math.max(at - now, 0) end
return {string.format('%.0f', now), lt, zt, left(KEYS[1]), left(KEYS[2]), h, z}
"#;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len() as u64) as usize]
    }
}

#[derive(Debug)]
struct Snapshot {
    now: i64,
    lock_type: String,
    leases_type: String,
    lock_ttl: i64,
    leases_ttl: i64,
    hash: BTreeMap<String, String>,
    leases: BTreeMap<String, i64>,
}

async fn snapshot(conn: &mut redis::aio::MultiplexedConnection, lock: &str) -> Snapshot {
    snapshot_by(conn, &redis::Script::new(SNAPSHOT), lock).await
}

/// The snapshot that `script` returns (`SNAPSHOT`'s answer, maybe after other work).
async fn snapshot_by(
    conn: &mut redis::aio::MultiplexedConnection,
    script: &redis::Script,
    lock: &str,
) -> Snapshot {
    let leases = format!("{lock}:leases");
    let (now, lock_type, leases_type, lock_ttl, leases_ttl, h, z): (
        String,
        String,
        String,
        i64,
        i64,
        Vec<String>,
        Vec<String>,
    ) = script
        .key(lock)
        .key(&leases)
        .invoke_async(conn)
        .await
        .unwrap();
    Snapshot {
        now: now.parse().unwrap(),
        lock_type,
        leases_type,
        lock_ttl,
        leases_ttl,
        hash: h.chunks(2).map(|p| (p[0].clone(), p[1].clone())).collect(),
        leases: z
            .chunks(2)
            .map(|p| (p[0].clone(), p[1].parse::<f64>().unwrap() as i64))
            .collect(),
    }
}

#[derive(Debug, Clone)]
struct G {
    owner: String,
    kind: String,
    token: String,
    slot: u32,
    count: u32,
}

/// The invariants; pushes (category, detail) for each violation.
fn check(s: &Snapshot, out: &mut Vec<(&'static str, String)>) {
    let mut v = |cat: &'static str, d: String| out.push((cat, d));
    if !matches!(s.lock_type.as_str(), "none" | "hash")
        || !matches!(s.leases_type.as_str(), "none" | "zset")
    {
        v("types", format!("{} {}", s.lock_type, s.leases_type));
    }
    if (s.lock_type == "none") != (s.leases_type == "none") {
        let kept_only = s.leases_type == "none"
            && s.hash
                .iter()
                .filter(|(f, _)| f.starts_with("o:"))
                .all(|(_, g)| g.contains(" released "));
        if kept_only {
            v(
                "TTL longer than the last lease",
                format!("hash of kept grants outlives its leases: {s:?}"),
            );
            return;
        }
        v("one key without the other", format!("{s:?}"));
    }
    if s.lock_type == "none" && s.leases_type == "none" {
        return;
    }
    let max_score = s.leases.values().copied().max().unwrap_or(0);
    let live: Vec<&String> = s
        .leases
        .iter()
        .filter(|(_, sc)| **sc > s.now)
        .map(|(m, _)| m)
        .collect();
    for (name, ttl) in [("hash", s.lock_ttl), ("leases", s.leases_ttl)] {
        if ttl == -1 {
            v("key without TTL", format!("{name}: {s:?}"));
        } else if ttl >= 0 && s.now + ttl < max_score - 1 {
            v(
                "TTL shorter than a lease",
                format!(
                    "{name}: ttl {ttl}, lease ends in {}; {s:?}",
                    max_score - s.now
                ),
            );
        } else if ttl >= 0 && s.now + ttl > max_score.max(s.now) + 50 {
            v(
                "TTL longer than the last lease",
                format!(
                    "{name}: ttl {ttl} ms, last lease ends in {} ms, {} live",
                    max_score - s.now,
                    live.len()
                ),
            );
        }
    }
    // Grants.
    let mut grants: Vec<G> = Vec::new();
    for (field, value) in &s.hash {
        if let Some(owner) = field.strip_prefix("o:") {
            let parts: Vec<&str> = value.split(' ').collect();
            if parts.len() != 4 {
                v("grant shape", value.clone());
                continue;
            }
            grants.push(G {
                owner: owner.to_owned(),
                kind: parts[0].to_owned(),
                token: parts[1].to_owned(),
                slot: parts[2].parse().unwrap(),
                count: parts[3].parse().unwrap(),
            });
        }
    }
    let members: BTreeSet<String> = grants
        .iter()
        .map(|g| format!("{}:{}", g.owner, g.token))
        .collect();
    for g in &grants {
        let m = format!("{}:{}", g.owner, g.token);
        if !s.leases.contains_key(&m) {
            v(
                "grant without lease",
                format!("{m} {g:?} leases {:?}", s.leases),
            );
        }
    }
    for m in s.leases.keys() {
        if !members.contains(m) {
            v("lease without grant", format!("{m} hash {:?}", s.hash));
        }
    }
    // Writer.
    let writers: Vec<&G> = grants.iter().filter(|g| g.kind == "w").collect();
    match (s.hash.get("w"), writers.as_slice()) {
        (None, []) => {}
        (Some(w), [g]) if *w == g.owner => {}
        (w, ws) => v("writer field", format!("w={w:?} writers={ws:?}")),
    }
    // Slots.
    for (field, owner) in &s.hash {
        if let Some(slot) = field.strip_prefix("s:") {
            let slot: u32 = slot.parse().unwrap();
            if !grants
                .iter()
                .any(|g| (g.kind == "s" || g.kind == "g") && g.slot == slot && &g.owner == owner)
            {
                v(
                    "slot field without grant",
                    format!("s:{slot}={owner} grants {grants:?}"),
                );
            }
        }
    }
    for g in grants.iter().filter(|g| g.kind == "s" || g.kind == "g") {
        if s.hash.get(&format!("s:{}", g.slot)) != Some(&g.owner) {
            v(
                "grant's slot not recorded",
                format!("{g:?} hash {:?}", s.hash),
            );
        }
    }
    // Counts.
    let mut expect_n: BTreeMap<u32, i64> = BTreeMap::new();
    for g in grants.iter().filter(|g| g.kind == "s" || g.kind == "g") {
        *expect_n.entry(g.count).or_default() += 1;
    }
    let mut found_n: BTreeMap<u32, i64> = BTreeMap::new();
    for (field, value) in &s.hash {
        if let Some(c) = field.strip_prefix("n:") {
            found_n.insert(c.parse().unwrap(), value.parse().unwrap());
        }
    }
    if expect_n != found_n {
        v(
            "n:<count> drift",
            format!("expected {expect_n:?} found {found_n:?}"),
        );
    }
    let counts: Vec<u32> = s
        .hash
        .get("counts")
        .map(|c| c.split_whitespace().map(|x| x.parse().unwrap()).collect())
        .unwrap_or_default();
    let counts_set: BTreeSet<u32> = counts.iter().copied().collect();
    if counts_set.len() != counts.len() || counts_set != expect_n.keys().copied().collect() {
        v(
            "counts drift",
            format!("counts {counts:?} expected {:?}", expect_n.keys()),
        );
    }
    // Family.
    if let Some(g) = grants.first() {
        let fam = match g.kind.as_str() {
            "r" | "w" => "rw",
            k => k,
        };
        if s.hash.get("f").map(String::as_str) != Some(fam) {
            v(
                "family",
                format!("f={:?} grants {grants:?}", s.hash.get("f")),
            );
        }
    } else if !s.hash.is_empty() {
        v("hash without grants", format!("{s:?}"));
    }
    // Latest token.
    let t: u64 = s.hash.get("t").and_then(|t| t.parse().ok()).unwrap_or(0);
    for g in &grants {
        if let Ok(tok) = g.token.parse::<u64>()
            && tok > t
        {
            v("t below a grant's token", format!("t={t} {g:?}"));
        }
    }
    // Safety among live grants.
    let live_g: Vec<&G> = grants
        .iter()
        .filter(|g| {
            s.leases
                .get(&format!("{}:{}", g.owner, g.token))
                .is_some_and(|sc| *sc > s.now)
        })
        .collect();
    if live_g.iter().any(|g| g.kind == "w") && live_g.len() > 1 {
        v("writer not alone", format!("{live_g:?}"));
    }
    let sems: Vec<&&G> = live_g.iter().filter(|g| g.kind == "s").collect();
    if let Some(min) = sems.iter().map(|g| g.count).min()
        && sems.len() as u32 > min
    {
        v("more permits inside than asked for", format!("{sems:?}"));
    }
    let mut slots = BTreeSet::new();
    for g in live_g.iter().filter(|g| g.kind == "s" || g.kind == "g") {
        if !slots.insert(g.slot) || g.slot >= g.count {
            v("slot shared or out of range", format!("{live_g:?}"));
        }
    }
}

#[derive(Debug)]
enum Actor {
    Idle,
    Waiting(Lease, Turn),
    Holding(Lease, u64, Option<u32>),
}

fn kind_for(rng: &mut Rng, family: &str) -> LockKind {
    match family {
        "rw" => {
            if rng.below(4) == 0 {
                LockKind::Write
            } else {
                LockKind::Read
            }
        }
        "s" => LockKind::Semaphore {
            permits: rng.pick(&[2, 3, 5]),
        },
        _ => LockKind::Segmented {
            shards: rng.pick(&[2, 3, 6]),
        },
    }
}

async fn run_family(family: &str, seed: u64, steps: usize, out: &mut Vec<(&'static str, String)>) {
    let server = redis_server();
    let backend = RedisBackend::connect(&server.url(), RedisSettings::default())
        .await
        .unwrap();
    let mut conn = inspector(&server).await;
    let key = format!("rand-{family}");
    let lock = format!("lock:{{{key}}}:v2");
    let raise = redis::Script::new(&format!("{GRANT}\n{SHARED}\n{RAISE}"));
    let give_back = redis::Script::new(&format!("{GRANT}\n{SHARED}\n{GIVE_BACK}"));
    let mut rng = Rng(seed);
    let mut actors: Vec<Actor> = (0..8).map(|_| Actor::Idle).collect();
    let mut serial = 0u64;
    for step in 0..steps {
        let i = rng.below(actors.len() as u64) as usize;
        let op;
        match std::mem::replace(&mut actors[i], Actor::Idle) {
            Actor::Idle => {
                serial += 1;
                let lease = Lease {
                    key: key.clone(),
                    owner: format!("owner{i}x{serial}"),
                    ttl: Duration::from_millis(rng.pick(&[60, 150, 400, 1500])),
                    replicas: 0,
                    kind: kind_for(&mut rng, family),
                };
                let turn = match rng.below(3) {
                    0 => Turn::Once,
                    1 => Turn::InLine(Duration::from_millis(rng.pick(&[100, 600]))),
                    _ => Turn::Fair(Duration::from_millis(rng.pick(&[100, 600]))),
                };
                op = format!("acquire {:?} {:?} {turn:?}", lease.owner, lease.kind);
                match backend.acquire(&lease, turn).await {
                    Ok(Acquire::Granted { token, slot }) => {
                        actors[i] = Actor::Holding(lease, token, slot)
                    }
                    Ok(Acquire::Held { .. }) if turn.place().is_some() => {
                        actors[i] = Actor::Waiting(lease, turn)
                    }
                    Ok(Acquire::Held { .. }) => {}
                    Err(e) => out.push(("acquire error", format!("{e}"))),
                }
            }
            Actor::Waiting(lease, turn) => match rng.below(4) {
                0 => {
                    op = format!("waiter {} leaves", lease.owner);
                    let _ = backend.release(&lease, Duration::ZERO).await;
                }
                1 => op = format!("waiter {} dies", lease.owner),
                _ => {
                    op = format!("waiter {} tries again", lease.owner);
                    match backend.acquire(&lease, turn).await {
                        Ok(Acquire::Granted { token, slot }) => {
                            actors[i] = Actor::Holding(lease, token, slot)
                        }
                        Ok(Acquire::Held { .. }) => actors[i] = Actor::Waiting(lease, turn),
                        Err(e) => out.push(("acquire error", format!("{e}"))),
                    }
                }
            },
            Actor::Holding(lease, token, slot) => match rng.below(9) {
                7 if std::env::var("FENCELOCK_SHARED_NO_RAISE").is_ok() => {
                    op = format!("{} idles", lease.owner);
                    actors[i] = Actor::Holding(lease, token, slot);
                }
                0 | 1 => {
                    op = format!("{} releases", lease.owner);
                    let _ = backend.release(&lease, Duration::ZERO).await;
                }
                2 => {
                    op = format!("{} releases keeping 80 ms", lease.owner);
                    let _ = backend.release(&lease, Duration::from_millis(80)).await;
                }
                3 | 4 => {
                    op = format!("{} extends", lease.owner);
                    let held = HeldLease {
                        lease: lease.clone(),
                        token,
                        slot,
                    };
                    let extended = backend.extend(std::slice::from_ref(&held)).await.unwrap();
                    if matches!(extended[..], [Extended::Renewed]) {
                        actors[i] = Actor::Holding(lease, token, slot);
                    }
                }
                5 => op = format!("{} dies", lease.owner),
                6 => {
                    op = format!("{} gives back", lease.owner);
                    let _: i64 = give_back
                        .key(&lock)
                        .key(format!("{lock}:leases"))
                        .arg(&lease.owner)
                        .invoke_async(&mut conn)
                        .await
                        .unwrap();
                }
                7 => {
                    let t: Option<String> = conn.hget(&lock, "t").await.unwrap();
                    let chosen = t
                        .and_then(|t| t.parse::<u64>().ok())
                        .unwrap_or(token)
                        .max(token)
                        + 1
                        + rng.below(50);
                    op = format!("{} raises {token} to {chosen}", lease.owner);
                    let raised: i64 = raise
                        .key(&lock)
                        .key(format!("{lock}:fence"))
                        .key(format!("{lock}:leases"))
                        .arg(&lease.owner)
                        .arg(token.to_string())
                        .arg(chosen.to_string())
                        .invoke_async(&mut conn)
                        .await
                        .unwrap();
                    let token = if raised == 1 { chosen } else { token };
                    actors[i] = Actor::Holding(lease, token, slot);
                }
                _ => {
                    op = format!("{} asks again", lease.owner);
                    match backend.acquire(&lease, Turn::Once).await {
                        Ok(Acquire::Granted {
                            token: again,
                            slot: s2,
                        }) => {
                            // The same grant (its lease still ran) keeps its token and
                            // slot; a new one (the old lease ended, and the key was granted
                            // anew) has a greater token.
                            if again < token || (again == token && s2 != slot) {
                                out.push((
                                    "asked again",
                                    format!("held {token} in {slot:?}, granted {again} in {s2:?}"),
                                ));
                            }
                            actors[i] = Actor::Holding(lease, again, s2);
                        }
                        Ok(Acquire::Held { .. }) => {}
                        Err(e) => out.push(("acquire error", format!("{e}"))),
                    }
                }
            },
        }
        if rng.below(3) == 0 {
            tokio::time::sleep(Duration::from_millis(rng.below(60))).await;
        }
        let s = snapshot(&mut conn, &lock).await;
        if std::env::var("FENCELOCK_SHARED_TRACE").is_ok() {
            eprintln!(
                "{step}: {op} -> now {} ttl {} {} leases {:?}",
                s.now, s.lock_ttl, s.leases_ttl, s.leases
            );
        }
        let before = out.len();
        check(&s, out);
        for (_, d) in &mut out[before..] {
            *d = format!("[{family} seed {seed} step {step}: {op}] {d}");
        }
    }
    // Everybody releases what it holds, then the line and kept grants run out.
    for actor in &actors {
        match actor {
            Actor::Holding(lease, ..) | Actor::Waiting(lease, _) => {
                let _ = backend.release(lease, Duration::ZERO).await;
            }
            Actor::Idle => {}
        }
    }
    // The longest lease and place run out within 1.5 s of the last step; a loaded machine
    // may take longer to expire them, so the keys are read again until then (bounded).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    tokio::time::sleep(Duration::from_millis(1_600)).await;
    loop {
        let left = left_behind(&mut conn).await;
        if left.is_empty() || tokio::time::Instant::now() >= deadline {
            for (k, ttl) in left {
                let detail = format!("[{family} seed {seed}] {k} pttl {ttl}");
                out.push(("left behind at the end", detail));
            }
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The keys that outlive every lease and place: all but the fencing counters and the
/// release memories (which are kept for a while by design), with their TTL (-1: none).
async fn left_behind(conn: &mut redis::aio::MultiplexedConnection) -> Vec<(String, i64)> {
    let mut keys: Vec<String> = conn.keys("*").await.unwrap();
    keys.sort();
    let mut left = Vec::new();
    for k in keys {
        // -2: it lapsed after it was listed; -1: it never will.
        let ttl: i64 = conn.pttl(&k).await.unwrap();
        let remembered = k.ends_with(":fence") || k.contains("}:v2:released:");
        if ttl != -2 && (!remembered || ttl == -1) {
            left.push((k, ttl));
        }
    }
    left
}

/// One seed of 400 steps per family by default (about 20 s); `FENCELOCK_SHARED_SEEDS=1,2,3`,
/// `FENCELOCK_SHARED_STEPS=N` and `FENCELOCK_SHARED_FAMILIES=rw,s,g` run others,
/// `FENCELOCK_SHARED_TRACE=1` prints each step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_bookkeeping_survives_random_cycles() {
    let steps: usize = std::env::var("FENCELOCK_SHARED_STEPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(400);
    let seeds: Vec<u64> = std::env::var("FENCELOCK_SHARED_SEEDS")
        .ok()
        .map(|s| s.split(',').map(|x| x.parse().unwrap()).collect())
        .unwrap_or(vec![0x9e3779b97f4a7c15]);
    let skip: Vec<String> = std::env::var("FENCELOCK_SHARED_SKIP")
        .ok()
        .map(|s| s.split(',').map(str::to_owned).collect())
        .unwrap_or_default();
    let mut out = Vec::new();
    for seed in seeds {
        let families = std::env::var("FENCELOCK_SHARED_FAMILIES").unwrap_or("rw,s,g".into());
        for family in families.split(',') {
            run_family(family, seed, steps, &mut out).await;
        }
    }
    out.retain(|(cat, _)| !skip.iter().any(|s| s == cat));
    let mut by: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for (cat, d) in out {
        by.entry(cat).or_default().push(d);
    }
    let summary: Vec<String> = by
        .iter()
        .map(|(cat, ds)| format!("{cat}: {} times, first: {}", ds.len(), ds[0]))
        .collect();
    assert!(summary.is_empty(), "{summary:#?}");
}

/// A semaphore's keys whose expiry (the end of their last lease) is one ms behind the
/// snapshot's clock, yet alive in its script (Redis freezes time for expiry at the script's
/// start, while TIME runs on), as under heavy load: their TTL reads as ended, never as none.
#[tokio::test]
async fn snapshot_of_keys_expiring_meanwhile_shows_their_ttl() {
    let server = redis_server();
    let mut conn = inspector(&server).await;
    let lock = "lock:{expiring}:v2";
    // Writes a grant whose lease, and both keys, end 2 ms after the script's first clock
    // reading (still ahead of its frozen time), then waits, busy, until the clock is 1 ms past
    // that end, and takes the snapshot.
    let setup = r#"
local function clock()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local t0 = clock()
local ends = t0 + 2
local token = string.format('%.0f', t0 * 1000)
redis.call('HSET', KEYS[1], 'o:a', 's ' .. token .. ' 0 2', 'f', 's', 's:0', 'a', 'n:2', '1',
  'counts', '2', 't', token)
redis.call('ZADD', KEYS[2], ends, 'a:' .. token)
redis.call('PEXPIREAT', KEYS[1], ends)
redis.call('PEXPIREAT', KEYS[2], ends)
while clock() < ends + 1 do end
"#;
    let script = redis::Script::new(&format!("{setup}\nreturn (function()\n{SNAPSHOT}\nend)()"));
    let leases = format!("{lock}:leases");
    let mut hit = 0;
    for _ in 0..20 {
        let s = snapshot_by(&mut conn, &script, lock).await;
        let ends = s.leases.values().copied().max().unwrap();
        // The snapshot's clock read just after the wait, in the same ms (else: again).
        if s.lock_type == "hash" && s.now == ends + 1 {
            hit += 1;
            let mut out = Vec::new();
            check(&s, &mut out);
            assert!(out.is_empty(), "{out:#?}");
        }
        let _: () = redis::cmd("DEL")
            .arg(lock)
            .arg(&leases)
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    assert!(
        hit > 0,
        "the snapshot's clock never read 1 ms past the keys' expiry"
    );
}

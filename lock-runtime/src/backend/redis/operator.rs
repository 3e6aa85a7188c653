//! The operator's side of the Redis backend: listing locks (`SCAN` with `MATCH` and `COUNT`,
//! never `KEYS`; each page read in one pipeline; on a cluster, every master), inspecting one,
//! and releasing one by force. Keys are named through [`layout`], what a lock holds is read
//! by one read-only script per key (`inspect.lua`), and owners are named by tag.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::{RedisError, Value};

use super::connection::Route;
use super::scripts::{LIBRARY, LockScript};
use super::{Link, RedisBackend, backend_error, integer, invocation, layout, text, unexpected};
use crate::backend::{
    AsyncOperator, ForcedRelease, Grant, Holding, LockState, OwnedGrant, OwnerPrefix, QUEUE_SHOWN,
    SharedGrant, Waiter, release_memory,
};
use crate::glob::Glob;
use crate::release_hub::{OwnerTag, parse_announcement};
use crate::{LockError, LockKind, key};

/// Keys a `SCAN` call looks at (its `COUNT`): a page of about this many, read in one
/// pipeline, short enough not to hold the server up.
const SCAN_COUNT: usize = 1_000;

// An operator's calls (see `OperatorBackend`).
impl AsyncOperator for RedisBackend {
    /// The held locks whose key matches `pattern`.
    async fn list_held(&self, pattern: &str) -> Result<Vec<LockState>, LockError> {
        let shown = QUEUE_SHOWN.to_string();
        let replies = self
            .read_matching(pattern, &LIBRARY.inspect, &[&shown], "listing locks")
            .await?;
        // A key may come twice from a SCAN; one that was released since is left out.
        let mut held = BTreeMap::new();
        for (key, reply) in replies {
            let state = parse_state(&key, &reply)?;
            if state.holding != Holding::Free {
                held.insert(key, state);
            }
        }
        Ok(held.into_values().collect())
    }

    /// What `key` holds now.
    async fn inspect_held(&self, key: &str) -> Result<LockState, LockError> {
        let keys = layout::operator_keys(self.lock_key(key));
        let shown = QUEUE_SHOWN.to_string();
        let reply = self.run(&LIBRARY.inspect, &keys, &[&shown], key).await?;
        parse_state(key, &reply)
    }

    /// Releases `key` if it holds `grant` (`force_release.lua`).
    async fn force_release_held(
        &self,
        key: &str,
        grant: Grant,
    ) -> Result<ForcedRelease, LockError> {
        let keys = layout::operator_keys(self.lock_key(key));
        let channel = layout::release_channel(&keys[0]);
        let (owner, token) = (grant.owner.to_string(), grant.token.map(|t| t.to_string()));
        let token = token.as_deref().unwrap_or_default();
        let hand_over = if self.hands_over { "1" } else { "0" };
        let shown = QUEUE_SHOWN.to_string();
        let memory_ms = release_memory(self.response_timeout)
            .as_millis()
            .to_string();
        let args = [
            channel.as_str(),
            self.publish_command(),
            &owner,
            token,
            hand_over,
            &shown,
            &memory_ms,
        ];
        let reply = self.run(&LIBRARY.force_release, &keys, &args, key).await?;
        let unexpected = || unexpected(key, "forced release", &reply);
        let Value::Array(items) = &reply else {
            return Err(unexpected());
        };
        let (status, found, rest) = match items.as_slice() {
            [status] if integer(status) == Some(0) => return Ok(ForcedRelease::not_held(key)),
            [status, why] if integer(status) == Some(2) => {
                let why = text(why).ok_or_else(unexpected)?;
                return Err(LockError::key_in_use(key, why));
            }
            [status, state, holders, shown, longest, rest @ ..]
                if text(state).as_deref() == Some("shared") =>
            {
                let (found, rest) =
                    parse_shared([holders, shown, longest], rest).ok_or_else(unexpected)?;
                (status, found, rest)
            }
            [status, state, tag, token, remaining, rest @ ..] => {
                let found = parse_holding([state, tag, token, remaining]).ok_or_else(unexpected)?;
                (status, found, rest)
            }
            _ => return Err(unexpected()),
        };
        match (integer(status), rest) {
            (Some(3), []) => Ok(ForcedRelease::of(key, found)),
            (Some(1), [message]) => Ok(ForcedRelease {
                released: true,
                announced: text(message).map(|m| parse_announcement(&m)),
                ..ForcedRelease::of(key, found)
            }),
            _ => Err(unexpected()),
        }
    }

    /// The grants of `owners` (`owned.lua`, on each lock as a listing reads it).
    async fn owned_grants(
        &self,
        pattern: &str,
        owners: &OwnerPrefix,
    ) -> Result<Vec<OwnedGrant>, LockError> {
        let (starts, except) = (owners.starts(), owners.except().unwrap_or_default());
        let replies = self
            .read_matching(pattern, &LIBRARY.owned, &[starts, except], "finding grants")
            .await?;
        // A key may come twice from a SCAN: each grant once.
        let mut owned = BTreeSet::new();
        for (key, reply) in replies {
            let unexpected = || unexpected(&key, "finding grants", &reply);
            let Value::Array(items) = &reply else {
                return Err(unexpected());
            };
            for pair in items.chunks(2) {
                let [tag, token] = pair else {
                    return Err(unexpected());
                };
                let owner = text(tag).and_then(|tag| OwnerTag::from_hex(&tag));
                let token = text(token).and_then(|token| token.parse().ok());
                let (Some(owner), Some(token)) = (owner, token) else {
                    return Err(unexpected());
                };
                owned.insert((key.clone(), owner, token));
            }
        }
        let grants = owned.into_iter().map(|(key, owner, token)| {
            let token = Some(token);
            OwnedGrant::new(key, Grant { owner, token })
        });
        Ok(grants.collect())
    }
}

impl RedisBackend {
    /// Runs `script` (an operator's, on a lock's operator keys, with `args`) on every lock
    /// whose key matches `pattern`: on the server, or on each master of a cluster. Each lock
    /// key with its script's reply; `doing` names the work in errors.
    async fn read_matching(
        &self,
        pattern: &str,
        script: &LockScript,
        args: &[&str],
        doing: &str,
    ) -> Result<Vec<(String, Value)>, LockError> {
        let glob = Glob::parse(pattern)?;
        let mut replies = Vec::new();
        match &self.link {
            Link::Server { connection, .. } => {
                let live = connection
                    .get(Route::here())
                    .await
                    .map_err(|e| backend_error(None, "cannot connect to Redis", e))?;
                let read = self
                    .read_node(&mut live.connection(), &glob, script, args, &mut replies)
                    .await;
                if let Err(error) = read {
                    connection.note_error(&live, &error);
                    return Err(backend_error(None, &format!("{doing} failed"), error));
                }
            }
            Link::Cluster(cluster) => {
                let masters = cluster
                    .masters()
                    .await
                    .map_err(|e| backend_error(None, "cannot list the cluster's masters", e))?;
                for mut master in masters {
                    let read = self
                        .read_node(&mut master, &glob, script, args, &mut replies)
                        .await;
                    read.map_err(|e| {
                        backend_error(None, &format!("{doing} on {master} failed"), e)
                    })?;
                }
            }
        }
        Ok(replies)
    }

    /// Walks the keys of one server (or cluster node) that may be locks matching `glob`, and
    /// runs `script` on each page's locks in one pipeline; adds each lock key with its
    /// script's reply to `replies`.
    async fn read_node(
        &self,
        node: &mut impl ConnectionLike,
        glob: &Glob,
        script: &LockScript,
        args: &[&str],
        replies: &mut Vec<(String, Value)>,
    ) -> Result<(), RedisError> {
        let scan_pattern = layout::scan_pattern(&self.prefix, glob);
        let mut cursor = 0_u64;
        loop {
            let (next, redis_keys): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&scan_pattern)
                .arg("COUNT")
                .arg(SCAN_COUNT)
                .query_async(node)
                .await?;
            let keys: Vec<String> = redis_keys
                .into_iter()
                .filter_map(|redis_key| String::from_utf8(redis_key).ok())
                .filter_map(|redis_key| layout::key_of(&self.prefix, &redis_key))
                // A key no request could name (control characters, too long) is no lock of
                // this library, and must not reach an operator's terminal.
                .filter(|key| key::validate(key).is_ok() && glob.matches(key))
                .collect();
            if !keys.is_empty() {
                let (script, source) = script.eval();
                let mut pipeline = redis::pipe();
                pipeline.cmd("SCRIPT").arg("LOAD").arg(source).ignore();
                for key in &keys {
                    let lock_keys = layout::operator_keys(self.lock_key(key));
                    pipeline.invoke_script(&invocation(script, &lock_keys, args));
                }
                let page: Vec<Value> = pipeline.query_async(node).await?;
                replies.extend(keys.into_iter().zip(page));
            }
            if next == 0 {
                return Ok(());
            }
            cursor = next;
        }
    }
}

/// A lock's state from the inspection script's reply.
fn parse_state(key: &str, reply: &Value) -> Result<LockState, LockError> {
    let unexpected = || unexpected(key, "inspection", reply);
    let Value::Array(items) = reply else {
        return Err(unexpected());
    };
    if let [kind, why] = items.as_slice()
        && text(kind).as_deref() == Some("foreign")
    {
        let reason = text(why).ok_or_else(unexpected)?;
        return Ok(LockState {
            holding: Holding::Foreign { reason },
            ..LockState::free(key)
        });
    }
    let [
        state,
        tag,
        token,
        remaining,
        fence,
        waiters,
        holders,
        shown,
        rest @ ..,
    ] = items.as_slice()
    else {
        return Err(unexpected());
    };
    let (holding, entries) = match text(state).as_deref() {
        Some("shared") => parse_shared([holders, shown, remaining], rest).ok_or_else(unexpected)?,
        _ => {
            let holding = parse_holding([state, tag, token, remaining]).ok_or_else(unexpected)?;
            (holding, rest)
        }
    };
    let queue = entries
        .chunks(3)
        .map(|entry| match entry {
            [tag, lease, place_left] => Some(Waiter {
                owner: OwnerTag::from_hex(&text(tag)?)?,
                lease: text(lease)?.parse().ok().map(Duration::from_millis),
                place_left: positive_ms(integer(place_left)?),
            }),
            _ => None,
        })
        .collect::<Option<Vec<Waiter>>>()
        .ok_or_else(unexpected)?;
    Ok(LockState {
        key: key.to_owned(),
        holding,
        waiters: integer(waiters)
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(unexpected)?,
        queue,
        fence: text(fence).and_then(|token| token.parse().ok()),
        masters: None,
    })
}

/// Who holds a key, from the scripts' `state, tag, token, remaining ms` (see
/// `describe_holder` in `operator.lua`).
fn parse_holding([state, tag, token, remaining]: [&Value; 4]) -> Option<Holding> {
    let remaining = || positive_ms(integer(remaining)?).or(Some(Duration::ZERO));
    let owner = || OwnerTag::from_hex(&text(tag)?);
    match text(state)?.as_str() {
        "free" => Some(Holding::Free),
        "held" => Some(Holding::Held {
            owner: owner()?,
            token: text(token)?.parse().ok(),
            remaining: remaining()?,
        }),
        "kept" => Some(Holding::Kept {
            owner: owner()?,
            remaining: remaining()?,
        }),
        _ => None,
    }
}

/// What a shared kind's grants hold, from the scripts' `holders, shown, longest lease ms` and
/// the grants that `rest` starts with (see `describe_shared` in `operator.lua`); and what
/// follows them.
fn parse_shared<'v>(
    [holders, shown, longest]: [&Value; 3],
    rest: &'v [Value],
) -> Option<(Holding, &'v [Value])> {
    let count = |value| integer(value).and_then(|n| usize::try_from(n).ok());
    let shown = count(shown).filter(|n| n * 6 <= rest.len())?;
    let (grants, after) = rest.split_at(shown * 6);
    let holding = Holding::Shared {
        grants: grants
            .chunks(6)
            .map(parse_shared_grant)
            .collect::<Option<_>>()?,
        holders: count(holders)?,
        longest: positive_ms(integer(longest)?).unwrap_or(Duration::ZERO),
    };
    Some((holding, after))
}

/// A shared kind's grant from the inspection script's `tag, kind, token, slot, count, ms`
/// (see `describe_shared` in `operator.lua`).
fn parse_shared_grant(fields: &[Value]) -> Option<SharedGrant> {
    let [tag, kind, token, slot, count, remaining] = fields else {
        return None;
    };
    let count = || text(count)?.parse().ok();
    let kind = match text(kind)?.as_str() {
        "r" => LockKind::Read,
        "w" => LockKind::Write,
        "s" => LockKind::Semaphore { permits: count()? },
        "g" => LockKind::Segmented { shards: count()? },
        _ => return None,
    };
    Some(SharedGrant {
        owner: OwnerTag::from_hex(&text(tag)?)?,
        kind,
        slot: kind.count().and_then(|_| text(slot)?.parse().ok()),
        token: text(token)?.parse().ok(),
        remaining: positive_ms(integer(remaining)?).unwrap_or_default(),
    })
}

/// `ms` as a duration, if it is above zero.
fn positive_ms(ms: i64) -> Option<Duration> {
    u64::try_from(ms)
        .ok()
        .filter(|&ms| ms > 0)
        .map(Duration::from_millis)
}

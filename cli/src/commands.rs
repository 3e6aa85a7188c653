//! The commands, on the runtime's operator handle (`LockClient::admin`).

use std::io::{BufRead, IsTerminal, Write};

use fencelock::admin::{Grant, Holding, LockAdmin, OwnerTag, ReleaseEvent};
use fencelock::{LockClient, LockError};

use crate::args::{Cli, Command, Connection, DEFAULT_PREFIX};
use crate::connect::{connect, is_redis};
use crate::failure::{Failure, print};
use crate::output::{self, EventView, LockView, ReleaseView};

/// Runs the command of `cli`.
pub async fn run(cli: Cli) -> Result<(), Failure> {
    if let Command::Release {
        key, force: false, ..
    } = &cli.command
    {
        return Err(Failure::message(
            format!("refusing to release `{key}`"),
            "a release from here is owner-unchecked (it ends whoever holds the lock, who \
             learns of it only at its next renewal or release): add --force",
        ));
    }
    if let Command::ReleaseInstance { name, force: false } = &cli.command {
        return Err(Failure::message(
            format!("refusing to release the locks of instance `{name}`"),
            "a release from here is owner-unchecked (it ends its locks also if the instance \
             still runs, which learns of it only at its next renewal or release): add --force",
        ));
    }
    let client = connect(&cli.connection).await?;
    let admin = client.admin();
    let json = cli.json;
    let connection = &cli.connection;
    match &cli.command {
        Command::Refill { key, shard } => refill(&client, key, *shard, json).await,
        Command::ReleaseInstance { name, .. } => release_instance(&admin, name, json).await,
        Command::List { pattern } => list(&admin, connection, pattern, json).await,
        Command::Inspect { key } => inspect(&admin, connection, key, json).await,
        Command::Release {
            key, yes, holder, ..
        } => release(&admin, connection, key, holder.as_deref(), *yes, json).await,
        Command::Watch { key, count } => {
            note_redis_name(&admin, connection, key).await;
            watch(&admin, key, *count, json).await
        }
    }
}

async fn release_instance(admin: &LockAdmin, name: &str, json: bool) -> Result<(), Failure> {
    let failed = |error| {
        Failure::new(
            format!("releasing the locks of instance `{name}` failed"),
            error,
        )
    };
    let released = admin.release_instance(name).await.map_err(failed)?;
    let mut keys: Vec<&str> = released.released.iter().map(|f| f.key.as_str()).collect();
    let grants = keys.len();
    keys.dedup();
    if json {
        let view = serde_json::json!({ "instance": name, "found": released.found, "released": grants, "keys": keys });
        print(&output::json(&view))?;
    } else {
        let noun = if grants == 1 { "grant" } else { "grants" };
        let listed: Vec<String> = keys.iter().map(|key| format!("`{key}`")).collect();
        let listed = if listed.is_empty() {
            String::new()
        } else {
            format!(": {}", listed.join(", "))
        };
        print(&format!(
            "released {grants} {noun} of instance `{name}`{listed}"
        ))?;
    }
    match released.failed.into_iter().next() {
        None => Ok(()),
        Some((key, error)) => Err(Failure::new(
            format!(
                "releasing `{key}` of instance `{name}` failed (run the command again for the keys left)"
            ),
            error,
        )),
    }
}

async fn refill(
    client: &LockClient,
    key: &str,
    shard: Option<u32>,
    json: bool,
) -> Result<(), Failure> {
    let refilled = match shard {
        Some(shard) => client.refill_shard(key, shard).await,
        None => client.refill_shards(key).await,
    };
    refilled.map_err(|error| Failure::new(format!("refilling `{key}` failed"), error))?;
    let shards = shard.map_or("every shard".to_owned(), |shard| format!("shard {shard}"));
    if json {
        let view = serde_json::json!({ "key": key, "refilled": true, "shard": shard });
        print(&output::json(&view))
    } else {
        print(&format!("refilled {shards} of `{key}`"))
    }
}

async fn list(
    admin: &LockAdmin,
    connection: &Connection,
    pattern: &str,
    json: bool,
) -> Result<(), Failure> {
    let locks = admin
        .list(pattern)
        .await
        .map_err(|error| Failure::new("listing locks failed", error))?;
    if json {
        let views: Vec<LockView> = locks.iter().map(LockView::from).collect();
        print(&output::json(&views))?;
    } else {
        print(&output::lock_table(&locks, pattern))?;
    }
    if locks.is_empty() {
        note_prefix(connection, pattern).await;
    }
    Ok(())
}

async fn inspect(
    admin: &LockAdmin,
    connection: &Connection,
    key: &str,
    json: bool,
) -> Result<(), Failure> {
    let state = admin
        .inspect(key)
        .await
        .map_err(|error| Failure::new(format!("inspecting `{key}` failed"), error))?;
    if json {
        print(&output::json(&LockView::from(&state)))?;
    } else {
        print(&output::lock_details(&state))?;
    }
    if !state.holding.is_held() {
        note_redis_name(admin, connection, key).await;
    }
    Ok(())
}

/// On standard error, for an operator who typed how Redis names a lock (`lock:{stock:42}:v2`,
/// as `redis-cli` shows it) where the commands take the key the applications write
/// (`stock:42`): what to type, when that lock is held.
async fn note_redis_name(admin: &LockAdmin, connection: &Connection, key: &str) {
    if !is_redis(connection) {
        return;
    }
    let Some(lock_key) = key
        .strip_prefix(connection.redis_prefix())
        .and_then(|rest| rest.strip_prefix('{'))
        .and_then(|rest| rest.strip_suffix("}:v2").or_else(|| rest.strip_suffix('}')))
    else {
        return;
    };
    if admin
        .inspect(lock_key)
        .await
        .is_ok_and(|state| state.holding.is_held())
    {
        eprintln!(
            "note: `{key}` is how Redis names the lock `{lock_key}`, which is held; the \
             commands take the key as the applications write it: `{lock_key}`"
        );
    }
}

/// On standard error, when nothing matched `pattern`: a pattern written with the prefix, or
/// a `--prefix` other than the default under which locks are held, and what to type.
async fn note_prefix(connection: &Connection, pattern: &str) {
    if !is_redis(connection) {
        return;
    }
    let prefix = connection.redis_prefix();
    if let Some(rest) = pattern.strip_prefix(prefix) {
        eprintln!(
            "note: patterns match the keys as the applications write them, without the \
             prefix `{prefix}`: try `{rest}`"
        );
        return;
    }
    if prefix == DEFAULT_PREFIX {
        return;
    }
    let default = Connection {
        prefix: Some(DEFAULT_PREFIX.to_owned()),
        ..connection.clone()
    };
    let Ok(client) = connect(&default).await else {
        return;
    };
    if let Ok(locks) = client.admin().list(pattern).await
        && !locks.is_empty()
    {
        eprintln!(
            "note: no lock matches under the prefix `{prefix}`, but {} do under the default \
             `{DEFAULT_PREFIX}`: if the applications keep the default `key_prefix`, add \
             --prefix {DEFAULT_PREFIX}",
            locks.len()
        );
    }
}

/// Reads the key, shows what holds it and asks (unless `yes`), then releases that grant only
/// (the one of `holder`, when given): one that took its place meanwhile is left alone, and the
/// command fails saying so.
async fn release(
    admin: &LockAdmin,
    connection: &Connection,
    key: &str,
    holder: Option<&str>,
    yes: bool,
    json: bool,
) -> Result<(), Failure> {
    let failed = |error: LockError| Failure::new(format!("releasing `{key}` failed"), error);
    let refused = |why: String| Failure::message(format!("refusing to release `{key}`"), why);
    let state = admin.inspect(key).await.map_err(failed)?;
    let grant = match &state.holding {
        Holding::Foreign { reason } => {
            return Err(refused(format!(
                "it holds something that is not a lock's ({reason}); no lock can be taken \
                 there, so there is nothing to release"
            )));
        }
        holding => chosen_grant(holding, holder).map_err(refused)?,
    };
    let Some(grant) = grant else {
        let view = ReleaseView::not_held(key);
        match json {
            true => print(&output::json(&view))?,
            false => print(&output::not_held(key))?,
        };
        note_redis_name(admin, connection, key).await;
        return Ok(());
    };
    if !yes {
        confirm(key, &output::release_plan(&state, grant))?;
    }
    let shown = state.holding.grants().contains(&grant);
    let forced = admin.force_release_of(key, grant).await.map_err(failed)?;
    if !forced.released && forced.found.is_held() && !shown {
        return Err(refused(format!(
            "{} holds no grant of it: it is {}",
            grant.owner,
            output::holder_words(&forced.found)
        )));
    }
    if !forced.released && forced.found.is_held() {
        return Err(refused(format!(
            "it changed hands since it was read: {}, not the grant shown; run the command \
             again to release that one",
            output::holder_words(&forced.found)
        )));
    }
    match json {
        true => print(&output::json(&ReleaseView::from(&forced))),
        false => print(&output::release_outcome(&forced, grant)),
    }
}

/// The grant of `holding` to release: the one of `holder` (a tag), when given; else the only
/// one. Or why there is none to pick: `holder` holds no grant there, or several grants of a
/// shared kind hold the key and `--holder` must name one. A tag among grants not shown (more
/// than an inspection shows) names whichever grant its owner holds.
fn chosen_grant(holding: &Holding, holder: Option<&str>) -> Result<Option<Grant>, String> {
    let grants = holding.grants();
    let Some(holder) = holder else {
        return match grants.as_slice() {
            [_, _, ..] => Err(format!(
                "it is {}: a forced release ends one grant; add --holder TAG, one of {}",
                output::holder_words(holding),
                output::tags(&grants)
            )),
            grants => Ok(grants.first().copied()),
        };
    };
    let named = grants
        .iter()
        .find(|grant| grant.owner.to_string().eq_ignore_ascii_case(holder));
    let unshown = matches!(holding, Holding::Shared { holders, .. } if *holders > grants.len());
    match named {
        Some(grant) => Ok(Some(*grant)),
        None if unshown => OwnerTag::parse(holder)
            .map(|owner| Some(Grant::of_owner(owner)))
            .ok_or_else(|| format!("`{holder}` is not a holder's tag: 16 hex digits")),
        None if grants.is_empty() => Ok(None),
        None => Err(format!(
            "{holder} holds no grant of it: it is {} (holders: {})",
            output::holder_words(holding),
            output::tags(&grants)
        )),
    }
}

/// Shows `plan` and asks for a yes on the terminal; refuses without one, and without a
/// terminal to ask on (a script must say --yes: it would otherwise hang or guess).
fn confirm(key: &str, plan: &str) -> Result<(), Failure> {
    let refused = |why: &str| Failure::message(format!("refusing to release `{key}`"), why);
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        return Err(refused(
            "standard input is not a terminal to confirm on: add --yes",
        ));
    }
    eprint!("{plan}\nRelease it? [y/N] ");
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    stdin
        .lock()
        .read_line(&mut answer)
        .map_err(|error| Failure::new(format!("reading the answer for `{key}` failed"), error))?;
    match answer.trim() {
        "y" | "Y" | "yes" => Ok(()),
        _ => Err(refused("not confirmed")),
    }
}

async fn watch(
    admin: &LockAdmin,
    key: &str,
    count: Option<u64>,
    json: bool,
) -> Result<(), Failure> {
    let failed = |error: LockError| Failure::new(format!("watching `{key}` failed"), error);
    let mut events = admin.watch(key).await.map_err(failed)?;
    print(&output::watch_line(key, EventView::watching(), json))?;
    let mut seen = 0;
    while count.is_none_or(|count| seen < count) {
        let event = tokio::select! {
            event = events.next() => event.map_err(failed)?,
            _ = tokio::signal::ctrl_c() => return Ok(()),
        };
        print(&output::watch_line(key, EventView::from(event), json))?;
        if event != ReleaseEvent::Interrupted {
            seen += 1;
        }
    }
    Ok(())
}

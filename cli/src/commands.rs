//! The commands, on the runtime's operator handle (`LockClient::admin`).

use std::io::{BufRead, IsTerminal, Write};

use fencelock::LockError;
use fencelock::admin::{Holding, LockAdmin, ReleaseEvent};

use crate::args::{Cli, Command};
use crate::connect::connect;
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
    let admin = connect(&cli.connection).await?.admin();
    let json = cli.json;
    match cli.command {
        Command::List { pattern } => list(&admin, &pattern, json).await,
        Command::Inspect { key } => inspect(&admin, &key, json).await,
        Command::Release { key, yes, .. } => release(&admin, &key, yes, json).await,
        Command::Watch { key, count } => watch(&admin, &key, count, json).await,
    }
}

async fn list(admin: &LockAdmin, pattern: &str, json: bool) -> Result<(), Failure> {
    let locks = admin
        .list(pattern)
        .await
        .map_err(|error| Failure::new("listing locks failed", error))?;
    if json {
        let views: Vec<LockView> = locks.iter().map(LockView::from).collect();
        print(&output::json(&views))
    } else {
        print(&output::lock_table(&locks, pattern))
    }
}

async fn inspect(admin: &LockAdmin, key: &str, json: bool) -> Result<(), Failure> {
    let state = admin
        .inspect(key)
        .await
        .map_err(|error| Failure::new(format!("inspecting `{key}` failed"), error))?;
    if json {
        print(&output::json(&LockView::from(&state)))
    } else {
        print(&output::lock_details(&state))
    }
}

/// Reads the key, shows what holds it and asks (unless `yes`), then releases that grant only:
/// one that took its place meanwhile is left alone, and the command fails saying so.
async fn release(admin: &LockAdmin, key: &str, yes: bool, json: bool) -> Result<(), Failure> {
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
        holding => holding.grant(),
    };
    let Some(grant) = grant else {
        let view = ReleaseView::not_held(key);
        return match json {
            true => print(&output::json(&view)),
            false => print(&output::not_held(key)),
        };
    };
    if !yes {
        confirm(key, &output::release_plan(&state))?;
    }
    let forced = admin.force_release_of(key, grant).await.map_err(failed)?;
    if !forced.released && forced.found.is_held() {
        return Err(refused(format!(
            "it changed hands since it was read: {}, not the grant shown; run the command \
             again to release that one",
            output::holder_words(&forced.found)
        )));
    }
    match json {
        true => print(&output::json(&ReleaseView::from(&forced))),
        false => print(&output::release_outcome(&forced)),
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

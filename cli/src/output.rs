//! What the commands print: tables and sentences for people, JSON for scripts (durations in
//! ms, owners by tag).

use std::time::{Duration, SystemTime};

use fencelock::LockKind;
use fencelock::admin::{
    ForcedRelease, Grant, Holding, LockState, Masters, ReleaseEvent, SharedGrant, Waiter,
};
use serde::Serialize;

/// Who holds a key, as JSON.
#[derive(Debug, Serialize)]
pub struct HoldingView {
    /// `free`, `held`, `kept` (released, kept by `min_hold_ms`), `shared` (see `grants`) or
    /// `foreign`.
    state: &'static str,
    holder: Option<String>,
    token: Option<u64>,
    /// For `shared`: the longest lease.
    ttl_ms: Option<u64>,
    /// What foreign data was found.
    reason: Option<String>,
    /// For `shared`: how many grants hold the key, and the first of them by lease end.
    #[serde(skip_serializing_if = "Option::is_none")]
    holders: Option<usize>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    grants: Vec<GrantView>,
}

/// One grant of a shared kind, as JSON.
#[derive(Debug, Serialize)]
pub struct GrantView {
    holder: String,
    /// `read`, `write`, `semaphore` or `segmented`.
    kind: &'static str,
    /// The permits or shards its holder asked for.
    count: Option<u32>,
    /// The permit or shard it holds.
    slot: Option<u32>,
    /// `null` once released and kept by `min_hold_ms`.
    token: Option<u64>,
    ttl_ms: u64,
}

/// One lock, as JSON.
#[derive(Debug, Serialize)]
pub struct LockView {
    key: String,
    #[serde(flatten)]
    holding: HoldingView,
    fence: Option<u64>,
    waiters: usize,
    next: Option<WaiterView>,
    queue: Vec<WaiterView>,
    masters: Option<MastersView>,
}

#[derive(Debug, Serialize)]
pub struct WaiterView {
    waiter: String,
    lease_ms: Option<u64>,
    /// How long the place lasts; `null` once it lapsed.
    place_ms: Option<u64>,
}

#[derive(Debug, Serialize)]
pub struct MastersView {
    holding: usize,
    answered: usize,
    of: usize,
}

/// A forced release, as JSON.
#[derive(Debug, Serialize)]
pub struct ReleaseView {
    key: String,
    /// What held the key when the release ran.
    found: HoldingView,
    released: bool,
    announced: Option<EventView>,
    masters: Option<MastersView>,
}

impl ReleaseView {
    /// Nothing held `key`: nothing was released.
    pub fn not_held(key: &str) -> ReleaseView {
        ReleaseView {
            key: key.to_owned(),
            found: HoldingView::from(&Holding::Free),
            released: false,
            announced: None,
            masters: None,
        }
    }
}

/// A release announcement, as JSON.
#[derive(Debug, Serialize)]
pub struct EventView {
    /// `released`, `handed_over`, `waiter_left`, `unrecognised`, `interrupted`, or
    /// `watching` (the first line of a watch: the subscription is in place).
    event: &'static str,
    token: Option<u64>,
    to: Option<String>,
}

/// One line of `watch --json`.
#[derive(Debug, Serialize)]
pub struct WatchLine<'a> {
    time: String,
    key: &'a str,
    #[serde(flatten)]
    event: EventView,
}

fn ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

impl From<&Holding> for HoldingView {
    fn from(holding: &Holding) -> Self {
        let state = match holding {
            Holding::Held { .. } => "held",
            Holding::Kept { .. } => "kept",
            Holding::Shared { .. } => "shared",
            Holding::Foreign { .. } => "foreign",
            _ => "free",
        };
        let (holders, grants) = match holding {
            Holding::Shared {
                grants, holders, ..
            } => (Some(*holders), grants.iter().map(GrantView::from).collect()),
            _ => (None, Vec::new()),
        };
        HoldingView {
            state,
            holder: holding.owner().map(|owner| owner.to_string()),
            token: holding.token(),
            ttl_ms: holding.remaining().map(ms),
            reason: match holding {
                Holding::Foreign { reason } => Some(reason.clone()),
                _ => None,
            },
            holders,
            grants,
        }
    }
}

impl From<&SharedGrant> for GrantView {
    fn from(grant: &SharedGrant) -> Self {
        GrantView {
            holder: grant.owner.to_string(),
            kind: grant.kind.name(),
            count: grant.kind.count(),
            slot: grant.slot,
            token: grant.token,
            ttl_ms: ms(grant.remaining),
        }
    }
}

impl From<&Waiter> for WaiterView {
    fn from(waiter: &Waiter) -> Self {
        WaiterView {
            waiter: waiter.owner.to_string(),
            lease_ms: waiter.lease.map(ms),
            place_ms: waiter.place_left.map(ms),
        }
    }
}

impl From<&Masters> for MastersView {
    fn from(masters: &Masters) -> Self {
        MastersView {
            holding: masters.holding,
            answered: masters.answered,
            of: masters.of,
        }
    }
}

impl From<&LockState> for LockView {
    fn from(state: &LockState) -> Self {
        LockView {
            key: state.key.clone(),
            holding: HoldingView::from(&state.holding),
            fence: state.fence,
            waiters: state.waiters,
            next: state.next_waiter().map(WaiterView::from),
            queue: state.queue.iter().map(WaiterView::from).collect(),
            masters: state.masters.as_ref().map(MastersView::from),
        }
    }
}

impl From<&ForcedRelease> for ReleaseView {
    fn from(forced: &ForcedRelease) -> Self {
        ReleaseView {
            key: forced.key.clone(),
            found: HoldingView::from(&forced.found),
            released: forced.released,
            announced: forced.announced.map(EventView::from),
            masters: forced.masters.as_ref().map(MastersView::from),
        }
    }
}

impl From<ReleaseEvent> for EventView {
    fn from(event: ReleaseEvent) -> Self {
        let (event, token, to) = match event {
            ReleaseEvent::Released { token } => ("released", token, None),
            ReleaseEvent::HandedOver { to, token, .. } => ("handed_over", Some(token), Some(to)),
            ReleaseEvent::WaiterLeft => ("waiter_left", None, None),
            ReleaseEvent::Interrupted => ("interrupted", None, None),
            _ => ("unrecognised", None, None),
        };
        EventView {
            event,
            token,
            to: to.map(|owner| owner.to_string()),
        }
    }
}

impl EventView {
    /// The first line of a watch.
    pub fn watching() -> EventView {
        EventView {
            event: "watching",
            token: None,
            to: None,
        }
    }
}

/// `value` as one line of JSON.
pub fn json(value: &impl Serialize) -> String {
    serde_json::to_string(value).unwrap_or_else(|error| format!("{{\"error\":\"{error}\"}}"))
}

/// A watch line: the time (UTC, ms), the key and the event.
pub fn watch_line(key: &str, event: EventView, as_json: bool) -> String {
    let time = humantime::format_rfc3339_millis(SystemTime::now()).to_string();
    if as_json {
        return json(&WatchLine { time, key, event });
    }
    let what = match (event.event, event.token, &event.to) {
        ("watching", ..) => "watching; Ctrl-C to stop".to_owned(),
        ("released", Some(token), _) => format!("released token {token}: free"),
        ("released", None, _) => "released: free".to_owned(),
        ("handed_over", Some(token), Some(to)) => format!("handed over to {to} with token {token}"),
        ("waiter_left", ..) => "a waiter left the line of the free key".to_owned(),
        ("interrupted", ..) => {
            "subscription interrupted: releases may have gone unheard; subscribing again".to_owned()
        }
        _ => "an announcement this version cannot read".to_owned(),
    };
    format!("{time}  {key}  {what}")
}

/// A duration for people: `850ms`, `12.3s`.
fn human(duration: Duration) -> String {
    if duration < Duration::from_secs(1) {
        format!("{}ms", duration.as_millis())
    } else {
        format!("{:.1}s", duration.as_secs_f64())
    }
}

fn or_dash<T: ToString>(value: Option<T>) -> String {
    value.map_or_else(|| "-".to_owned(), |value| value.to_string())
}

/// The token column: the grant's token, or what stands in for one.
fn token_cell(holding: &Holding) -> String {
    match holding {
        Holding::Kept { .. } => "(released)".to_owned(),
        Holding::Foreign { .. } => "(foreign)".to_owned(),
        Holding::Shared { grants, .. } => {
            or_dash(grants.iter().filter_map(|grant| grant.token).max())
        }
        holding => or_dash(holding.token()),
    }
}

/// The holder column: the owner's tag, or who a shared kind's grants are.
fn holder_cell(holding: &Holding) -> String {
    match holding {
        Holding::Shared {
            grants, holders, ..
        } => shared_words(grants, *holders),
        holding => or_dash(holding.owner()),
    }
}

/// A shared kind's grants in words: `3 readers`, `writer TAG`, `2 of 5 permits`, `1 of 8
/// shards`.
fn shared_words(grants: &[SharedGrant], holders: usize) -> String {
    let plural = |one: &str| format!("{one}{}", if holders == 1 { "" } else { "s" });
    let counts = || grants.iter().filter_map(|grant| grant.kind.count());
    match grants.first().map(|grant| (grant.kind, grant.owner)) {
        Some((LockKind::Write, owner)) => format!("writer {owner}"),
        Some((LockKind::Read, _)) => format!("{holders} {}", plural("reader")),
        // The smallest count asked for is how many permits there are; the largest, how many
        // shards (a request for fewer takes one below its count).
        Some((LockKind::Semaphore { .. }, _)) => {
            format!("{holders} of {} permits", or_dash(counts().min()))
        }
        Some((LockKind::Segmented { .. }, _)) => {
            format!("{holders} of {} shards", or_dash(counts().max()))
        }
        _ => format!("{holders} {}", plural("grant")),
    }
}

fn next_cell(state: &LockState) -> String {
    match state.next_waiter() {
        Some(waiter) => format!(
            "{} ({})",
            waiter.owner,
            or_dash(waiter.place_left.map(human))
        ),
        None => "-".to_owned(),
    }
}

fn masters_cell(masters: &Masters) -> String {
    format!("{}/{}", masters.holding, masters.of)
}

/// The locks as a table (with a MASTERS column on Redlock), and what foreign data was found.
pub fn lock_table(locks: &[LockState], pattern: &str) -> String {
    if locks.is_empty() {
        return format!("no held lock matches {pattern}\n");
    }
    let with_masters = locks.iter().any(|state| state.masters.is_some());
    let mut header = vec![
        "KEY",
        "TTL",
        "TOKEN",
        "HOLDER",
        "WAITERS",
        "NEXT (PLACE)",
        "FENCE",
    ];
    if with_masters {
        header.push("MASTERS");
    }
    let mut rows: Vec<Vec<String>> = vec![header.into_iter().map(str::to_owned).collect()];
    for state in locks {
        let mut row = vec![
            state.key.clone(),
            or_dash(state.holding.remaining().map(human)),
            token_cell(&state.holding),
            holder_cell(&state.holding),
            state.waiters.to_string(),
            next_cell(state),
            or_dash(state.fence),
        ];
        if with_masters {
            row.push(or_dash(state.masters.as_ref().map(masters_cell)));
        }
        rows.push(row);
    }
    let mut table = aligned(&rows);
    for state in locks {
        if let Holding::Foreign { reason } = &state.holding {
            table.push_str(&format!("{}: foreign data: {reason}\n", state.key));
        }
    }
    table
}

/// Rows in columns, two spaces apart.
fn aligned(rows: &[Vec<String>]) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            rows.iter()
                .filter_map(|row| row.get(c))
                .map(|cell| cell.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut text = String::new();
    for row in rows {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, width)| format!("{cell:width$}"))
            .collect();
        text.push_str(cells.join("  ").trim_end());
        text.push('\n');
    }
    text
}

/// One lock, line by line.
pub fn lock_details(state: &LockState) -> String {
    let mut lines = vec![("key", state.key.clone())];
    let holding = &state.holding;
    let described = match holding {
        Holding::Held { .. } => "held".to_owned(),
        Holding::Kept { .. } => "released, kept taken by min_hold_ms".to_owned(),
        Holding::Shared {
            grants, holders, ..
        } => {
            format!("shared: {}", shared_words(grants, *holders))
        }
        Holding::Foreign { reason } => format!("foreign data: {reason}"),
        _ => "free".to_owned(),
    };
    lines.push(("state", described));
    if let Holding::Shared { .. } = holding {
        lines.push(("ttl", or_dash(holding.remaining().map(human))));
    } else if holding.is_held() {
        lines.push(("holder", or_dash(holding.owner())));
        lines.push(("token", token_cell(holding)));
        lines.push(("ttl", or_dash(holding.remaining().map(human))));
    }
    if let Some(masters) = &state.masters {
        let on = format!(
            "{} of {} ({} answered)",
            masters.holding, masters.of, masters.answered
        );
        lines.push(("masters", on));
    }
    lines.push(("fence", or_dash(state.fence)));
    lines.push(("waiters", format!("{} in line", state.waiters)));
    let mut text: String = lines
        .iter()
        .map(|(name, value)| format!("{:9}{value}\n", format!("{name}:")))
        .collect();
    if let Holding::Shared {
        grants, holders, ..
    } = holding
    {
        let cut = match grants.len() < *holders {
            true => format!(" (the {} whose leases end first shown)", grants.len()),
            false => String::new(),
        };
        text.push_str(&format!("grants:  {holders}{cut}\n"));
        for grant in grants {
            let count = or_dash(grant.kind.count());
            let what = match (grant.kind, grant.slot) {
                (LockKind::Semaphore { .. }, Some(slot)) => format!("permit {slot} of {count}"),
                (LockKind::Segmented { .. }, Some(slot)) => format!("shard {slot} of {count}"),
                (kind, _) => kind.name().to_owned(),
            };
            let token = grant
                .token
                .map_or_else(|| "(released)".to_owned(), |token| token.to_string());
            text.push_str(&format!(
                "  {}  {what}  token {token}  ttl {}\n",
                grant.owner,
                human(grant.remaining)
            ));
        }
    }
    let next = state.next_waiter().map(|waiter| waiter.owner);
    for (place, waiter) in state.queue.iter().enumerate() {
        let lease = or_dash(waiter.lease.map(human));
        let left = waiter.place_left.map_or_else(
            || "lapsed".to_owned(),
            |left| format!("place {}", human(left)),
        );
        let mark = if Some(waiter.owner) == next {
            "  (next)"
        } else {
            ""
        };
        text.push_str(&format!(
            "  {}. {}  lease {lease}  {left}{mark}\n",
            place + 1,
            waiter.owner
        ));
    }
    text
}

/// Who holds a key, in words: `held by TAG (token N, 12.3s left)`.
pub fn holder_words(holding: &Holding) -> String {
    let left = or_dash(holding.remaining().map(human));
    match holding {
        Holding::Kept { owner, .. } => {
            format!("released by {owner} and kept by min_hold_ms ({left} left)")
        }
        Holding::Shared {
            grants, holders, ..
        } => format!(
            "held by {} ({left} left on the longest lease)",
            shared_words(grants, *holders)
        ),
        holding => format!(
            "held by {} (token {}, {left} left)",
            or_dash(holding.owner()),
            token_cell(holding)
        ),
    }
}

/// The owners of `grants`, by tag.
pub fn tags(grants: &[Grant]) -> String {
    let tags: Vec<String> = grants.iter().map(|grant| grant.owner.to_string()).collect();
    tags.join(", ")
}

/// What a forced release of `grant` is about to do, for the confirmation.
pub fn release_plan(state: &LockState, grant: Grant) -> String {
    let after = match (&state.holding, state.next_waiter()) {
        (Holding::Shared { .. }, _) => {
            "the waiters at the head of the line join the grants left as far as they may".to_owned()
        }
        (_, Some(waiter)) => format!("the next waiter in line, {}, gets the key", waiter.owner),
        (_, None) => "nobody waits in line: the key becomes free".to_owned(),
    };
    let ended = match state.holding {
        Holding::Shared { .. } if !state.holding.grants().contains(&grant) => format!(
            "whichever grant {} holds (not among those shown, so not checked beforehand)",
            grant.owner
        ),
        Holding::Shared { .. } => format!("the grant of {}", grant.owner),
        _ => "that grant".to_owned(),
    };
    format!(
        "`{}` is {}.\nA forced release ends {ended} without its holder knowing (its next \
         renewal or release reports the lock lost); {after}; the fencing counter is kept.",
        state.key,
        holder_words(&state.holding)
    )
}

/// What a forced release of a key nobody held did.
pub fn not_held(key: &str) -> String {
    format!("`{key}` was not held: nothing released\n")
}

/// What a forced release of `grant` did.
pub fn release_outcome(forced: &ForcedRelease, grant: Grant) -> String {
    let holding = &forced.found;
    if !forced.released {
        return not_held(&forced.key);
    }
    let after = match (forced.announced, holding) {
        (Some(ReleaseEvent::HandedOver { to, token, .. }), _) => {
            format!("handed over to {to} with token {token}")
        }
        (_, Holding::Shared { holders, .. }) if *holders > 1 => {
            format!(
                "the grant of {} ended, the other grants hold on",
                grant.owner
            )
        }
        _ => "the key is free".to_owned(),
    };
    let on = forced.masters.as_ref().map_or_else(String::new, |masters| {
        format!(" on {} of {} masters", masters.holding, masters.of)
    });
    format!(
        "released `{}`{on}, {}; {after}\n",
        forced.key,
        holder_words(holding)
    )
}

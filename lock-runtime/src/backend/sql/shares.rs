//! The shared kinds on SQL (read/write locks, semaphores, segmented locks): a row per grant,
//! and per waiting writer's place, in `<table>_shares` (see `shares_schema.sql`), admitted by
//! the rule every store applies ([`admit`]); a segmented lock's grant holds its shard as its
//! slot.
//!
//! While a share of a name is live, the lock table holds a marker row for the name (owner
//! [`SHARED_MARKER`]) that lasts at least as long as every live share: the mutex's one
//! statement sees the key held, and a mutex attempt tells the marker apart only on that busy
//! path, to refuse the key. Acquires and releases take the fence row lock, then the lock row
//! (the marker) lock, then read the shares, and set the marker to the longest live share
//! before they commit (or delete it with the last). A renewal locks the markers first, then
//! the grants, renews them and makes the markers last as long: so a marker never ends before
//! a share it covers, and a mutex takes over only a marker whose every share has expired.
//!
//! The exhausted shards of segmented locks are rows of `<table>_exhausted`. A mark is written
//! under the same locks as an acquire, once the holder's grant of the shard is found held; a
//! refill deletes marks under the fence lock; an acquire of a segmented lock reads them under
//! its locks: it is refused when every shard below its count is marked, else skips them.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use super::session::{Param, Session, Value};
use super::statements::{SHARED_MARKER, Statements};
use super::{GrantId, GrantRow, Store, grant_id, millis, unexpected};
use crate::backend::sharing::{
    Share, admit, conflict, every_shard_exhausted, kind_of_script, script_kind, slot_of,
};
use crate::backend::{
    Acquire, Extended, ForcedRelease, Grant, HeldLease, Holding, Lease, Release, SharedGrant, Turn,
};
use crate::release_hub::{ReleaseEvent, owner_tag};
use crate::{LockError, LockKind, random};

/// What a share row is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ShareState {
    /// A grant.
    Held,
    /// A grant released with `min_hold_ms`: it counts until it expires, renewed no more.
    Kept,
    /// A waiting writer's place: it holds back the readers that arrive after it.
    Waiting,
}

impl ShareState {
    fn of(text: &str) -> Option<ShareState> {
        match text {
            "held" => Some(ShareState::Held),
            "kept" => Some(ShareState::Kept),
            "waiting" => Some(ShareState::Waiting),
            _ => None,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            ShareState::Held => "held",
            ShareState::Kept => "kept",
            ShareState::Waiting => "waiting",
        }
    }
}

/// A row of the shares table, as read.
#[derive(Debug, Clone)]
pub(super) struct ShareRow {
    pub(super) owner: String,
    kind: LockKind,
    slot: u32,
    pub(super) token: u64,
    pub(super) state: ShareState,
    remaining_us: i64,
}

impl ShareRow {
    /// From owner, kind, count asked for, slot, token, state and microseconds left; `None`
    /// for a row of another shape (not written by fencelock).
    fn from_values(values: &[Value]) -> Option<ShareRow> {
        let [owner, kind, asked, slot, token, state, remaining] = values else {
            return None;
        };
        let asked = u32::try_from(asked.int()?).ok()?;
        Some(ShareRow {
            owner: owner.text()?.to_owned(),
            kind: kind_of_script(kind.text()?, asked)?,
            slot: u32::try_from(slot.int()?).ok()?,
            token: u64::try_from(token.int()?).ok()?,
            state: ShareState::of(state.text()?)?,
            remaining_us: remaining.int()?,
        })
    }

    fn live(&self) -> bool {
        self.remaining_us > 0
    }

    /// Whether it holds the key (a live grant, kept or not), rather than waits for it.
    fn holds(&self) -> bool {
        self.live() && self.state != ShareState::Waiting
    }

    fn remaining(&self) -> Duration {
        Duration::from_micros(u64::try_from(self.remaining_us).unwrap_or_default())
    }

    fn share(&self) -> Share {
        Share {
            kind: self.kind,
            slot: self.slot,
        }
    }

    /// Whether it is `held`'s grant of a segmented lock's `shard`, held and live.
    fn holds_shard(&self, held: &HeldLease, shard: u32) -> bool {
        self.live()
            && self.state == ShareState::Held
            && matches!(self.kind, LockKind::Segmented { .. })
            && self.owner == held.lease.owner
            && self.token == held.token
            && self.slot == shard
    }

    /// Its token, while it is not released (a kept grant names none).
    fn held_token(&self) -> Option<u64> {
        (self.state == ShareState::Held).then_some(self.token)
    }

    /// The grant, as an operator sees it.
    fn shown(&self) -> SharedGrant {
        SharedGrant {
            owner: owner_tag(&self.owner),
            kind: self.kind,
            slot: slot_of(self.kind, self.slot),
            token: self.held_token(),
            remaining: self.remaining(),
        }
    }
}

/// A name's share rows; `foreign` counts the rows of another shape.
pub(super) struct Shares {
    pub(super) rows: Vec<ShareRow>,
    foreign: usize,
}

impl Shares {
    fn of_rows(rows: &[Vec<Value>]) -> Shares {
        let parsed: Vec<ShareRow> = rows
            .iter()
            .filter_map(|row| ShareRow::from_values(row))
            .collect();
        Shares {
            foreign: rows.len() - parsed.len(),
            rows: parsed,
        }
    }

    /// The live grants (kept ones included).
    pub(super) fn holding(&self) -> impl Iterator<Item = &ShareRow> {
        self.rows.iter().filter(|row| row.holds())
    }
}

/// Who holds a key that the live grants `rows` hold, as an operator sees it; free without any.
pub(super) fn shared_holding<'a>(rows: impl IntoIterator<Item = &'a ShareRow>) -> Holding {
    let grants: Vec<SharedGrant> = rows.into_iter().map(ShareRow::shown).collect();
    if grants.is_empty() {
        Holding::Free
    } else {
        Holding::shared(grants)
    }
}

/// Why a mutex cannot have a key that shares hold.
pub(super) fn held_by_shares(key: &str) -> LockError {
    LockError::key_in_use(
        key,
        "it is held as a read/write lock, a semaphore or a segmented lock, and a mutex lock was \
         requested; use one kind of lock per key",
    )
}

impl GrantRow {
    /// Whether the row is a name's marker (its shares hold the name), not a mutex's grant.
    pub(super) fn is_marker(&self) -> bool {
        self.owner == SHARED_MARKER
    }
}

impl Store {
    /// One attempt of a shared kind (see [`LockBackend::acquire`](crate::backend::LockBackend::acquire)):
    /// joins the name's grants if [`admit`] lets it; else a writer waiting in line keeps a place
    /// (other turns take none: SQL hands nothing over). Creates the shares table first where
    /// an earlier version's tables lack it (and this client creates tables).
    pub(super) async fn acquire_shared(
        &self,
        lease: &Lease,
        turn: Turn,
    ) -> Result<Result<Acquire, LockError>, sqlx::Error> {
        let schema = &self.statements.shares_schema;
        self.creating(schema, || self.acquire_share_once(lease, turn))
            .await
    }

    async fn acquire_share_once(
        &self,
        lease: &Lease,
        turn: Turn,
    ) -> Result<Result<Acquire, LockError>, sqlx::Error> {
        let key = lease.key.as_str();
        let mut transaction = self.transaction().await?;
        let session = transaction.session();
        self.lock_fence(session, key, true).await?;
        let (drawn, found) = self.lock_marker(session, key).await?;
        let drawn = drawn.ok_or_else(|| unexpected("a missing fence row"))?;
        if found.is_some_and(|row| row.live() && !row.is_marker()) {
            transaction.commit().await?;
            let why = conflict(LockKind::Mutex, lease.kind);
            return Ok(Err(LockError::key_in_use(key, why)));
        }
        let shares = self.read_shares(session, key).await?;
        let outcome = if shares.foreign > 0 {
            Err(LockError::key_in_use(
                key,
                "its shares table holds rows fencelock did not write: delete them",
            ))
        } else {
            self.admit_share(session, lease, turn, drawn, &shares)
                .await?
        };
        self.settle_marker(session, key).await?;
        transaction.commit().await?;
        Ok(outcome)
    }

    /// Grants `lease` a share with the token `drawn` if [`admit`] lets it in, or refreshes
    /// its own grant (a retry after a lost reply); else keeps a writer's place.
    async fn admit_share(
        &self,
        session: &mut dyn Session,
        lease: &Lease,
        turn: Turn,
        drawn: u64,
        shares: &Shares,
    ) -> Result<Result<Acquire, LockError>, sqlx::Error> {
        let live = || shares.rows.iter().filter(|row| row.live());
        let mine = live().find(|row| row.owner == lease.owner);
        if let Some(mine) = mine.filter(|mine| mine.state == ShareState::Held) {
            // Never shortened, as on Redis.
            let params = [
                Param::Int(millis(lease.ttl)),
                lease.key.as_str().into(),
                lease.owner.as_str().into(),
            ];
            let refresh = &self.statements.sharing.refresh;
            session.execute(refresh, &params).await?;
            return Ok(Ok(Acquire::Granted {
                token: mine.token,
                slot: slot_of(mine.kind, mine.slot),
            }));
        }
        // Its grant kept after its release (min_hold_ms) is all a late copy of the owner's
        // attempt may find: no second grant, and no place.
        let kept = mine.is_some_and(|mine| mine.state == ShareState::Kept);
        let exhausted = self.exhausted(session, &lease.key, lease.kind).await?;
        if every_shard_exhausted(lease.kind, &exhausted) {
            // No release would let it in: refused at once, leaving nothing.
            return Ok(Err(LockError::exhausted(&lease.key, None)));
        }
        let holders: Vec<Share> = shares.holding().map(ShareRow::share).collect();
        let ahead = live()
            .filter(|row| row.state == ShareState::Waiting && row.owner != lease.owner)
            .map(|row| row.kind);
        let start = lease.kind.count().map_or(0, random::below);
        let admitted = match admit(lease.kind, &holders, ahead, false, start, &exhausted) {
            Ok(admitted) => admitted.filter(|_| !kept),
            Err(why) => return Ok(Err(LockError::key_in_use(&lease.key, why))),
        };
        if let Some(slot) = admitted {
            let grant = (slot, drawn, ShareState::Held, lease.ttl);
            self.put_share(session, lease, grant).await?;
            return Ok(Ok(Acquire::Granted {
                token: drawn,
                slot: slot_of(lease.kind, slot),
            }));
        }
        // Only a writer keeps a place: it holds back the readers that arrive after it.
        let place = turn
            .place()
            .filter(|_| lease.kind == LockKind::Write && !kept);
        if let Some(place) = place {
            self.put_share(session, lease, (0, 0, ShareState::Waiting, place))
                .await?;
        }
        Ok(Ok(Acquire::Held {
            remaining: shares.holding().map(ShareRow::remaining).min(),
            latest_token: drawn,
        }))
    }

    /// `key`'s shards marked exhausted, for an acquire of a segmented lock (`kind`): read under
    /// its fence and marker locks, as marks and refills are written under the fence lock.
    /// Other kinds read none (and need no exhausted shards' table).
    async fn exhausted(
        &self,
        session: &mut dyn Session,
        key: &str,
        kind: LockKind,
    ) -> Result<Vec<u32>, sqlx::Error> {
        if !matches!(kind, LockKind::Segmented { .. }) {
            return Ok(Vec::new());
        }
        let read = &self.statements.sharing.read_exhausted;
        let rows = session.fetch(read, &[key.into()]).await?;
        let shard = |row: &Vec<Value>| u32::try_from(row.first()?.int()?).ok();
        Ok(rows.iter().filter_map(shard).collect())
    }

    /// Marks the shard of `held` (a segmented lock's grant) exhausted if that grant still holds
    /// it (see [`ShardMarks::mark_exhausted`](crate::backend::ShardMarks::mark_exhausted)):
    /// checked and written under the name's fence and marker locks, as an acquire reads the
    /// marks. Creates the shared kinds' tables first where they are missing (as
    /// [`acquire_shared`](Self::acquire_shared)).
    pub(super) async fn mark_exhausted(&self, held: &HeldLease) -> Result<bool, sqlx::Error> {
        let segmented = matches!(held.lease.kind, LockKind::Segmented { .. });
        let Some(shard) = held.slot.filter(|_| segmented) else {
            return Ok(false);
        };
        let schema = &self.statements.shares_schema;
        self.creating(schema, || self.mark_once(held, shard)).await
    }

    async fn mark_once(&self, held: &HeldLease, shard: u32) -> Result<bool, sqlx::Error> {
        let key = held.lease.key.as_str();
        // Its reads all come after the name's fence row lock: the latest commits, at any level.
        let mut transaction = self.transaction_read_committed().await?;
        let session = transaction.session();
        self.lock_fence(session, key, false).await?;
        self.lock_marker(session, key).await?;
        let shares = self.read_shares(session, key).await?;
        let holds = shares.rows.iter().any(|row| row.holds_shard(held, shard));
        if holds {
            let params = [key.into(), Param::Int(i64::from(shard))];
            let mark = &self.statements.sharing.mark_exhausted;
            session.execute(mark, &params).await?;
        }
        // MySQL's lock_marker.sql may have written an expired marker.
        self.settle_marker(session, key).await?;
        transaction.commit().await?;
        Ok(holds)
    }

    /// Clears the marks of `key`'s exhausted shards, `shard`'s or every one (see
    /// [`ShardMarks::refill`](crate::backend::ShardMarks::refill)), under the name's fence
    /// lock.
    pub(super) async fn refill(&self, key: &str, shard: Option<u32>) -> Result<(), sqlx::Error> {
        let schema = &self.statements.shares_schema;
        self.creating(schema, || self.refill_once(key, shard)).await
    }

    async fn refill_once(&self, key: &str, shard: Option<u32>) -> Result<(), sqlx::Error> {
        let mut transaction = self.transaction_read_committed().await?;
        let session = transaction.session();
        self.lock_fence(session, key, false).await?;
        // A negative shard clears every mark (see refill.sql).
        let shard = Param::Int(shard.map_or(-1, i64::from));
        let params = [key.into(), shard.clone(), shard];
        session
            .execute(&self.statements.sharing.refill, &params)
            .await?;
        transaction.commit().await
    }

    /// Writes `lease`'s share row: its slot, token, state, and how long it lasts.
    async fn put_share(
        &self,
        session: &mut dyn Session,
        lease: &Lease,
        (slot, token, state, lasts): (u32, u64, ShareState, Duration),
    ) -> Result<(), sqlx::Error> {
        let (tag, asked) = script_kind(lease.kind);
        let params = [
            lease.key.as_str().into(),
            lease.owner.as_str().into(),
            tag.into(),
            Param::Int(i64::from(asked)),
            Param::Int(i64::from(slot)),
            Param::Int(i64::try_from(token).unwrap_or(i64::MAX)),
            state.as_str().into(),
            Param::Int(millis(lasts)),
        ];
        session
            .execute(&self.statements.sharing.put, &params)
            .await?;
        Ok(())
    }

    /// Locks `key`'s lock row (see `lock_marker.sql`), then reads the latest token drawn and
    /// the row.
    pub(super) async fn lock_marker(
        &self,
        session: &mut dyn Session,
        key: &str,
    ) -> Result<(Option<u64>, Option<GrantRow>), sqlx::Error> {
        let lock_marker = &self.statements.sharing.lock_marker;
        session.execute(lock_marker, &[key.into()]).await?;
        self.read(session, key).await
    }

    /// `key`'s share rows, expired ones too.
    pub(super) async fn read_shares(
        &self,
        session: &mut dyn Session,
        key: &str,
    ) -> Result<Shares, sqlx::Error> {
        let rows = session
            .fetch(&self.statements.sharing.read, &[key.into()])
            .await?;
        Ok(Shares::of_rows(&rows))
    }

    /// Deletes `key`'s expired share rows, then makes its marker last as long as its longest
    /// live grant, or deletes it with none left: the last step of every acquire, release and
    /// forced release of a shared kind, under the fence and marker locks.
    async fn settle_marker(&self, session: &mut dyn Session, key: &str) -> Result<(), sqlx::Error> {
        let shares = self.read_shares(session, key).await?;
        for expired in shares.rows.iter().filter(|row| !row.live()) {
            self.delete_share(session, key, &expired.owner).await?;
        }
        let sharing = &self.statements.sharing;
        let longest = shares.holding().max_by_key(|row| row.remaining_us);
        let Some(longest) = longest else {
            session
                .execute(&sharing.delete_marker, &[key.into()])
                .await?;
            return Ok(());
        };
        let latest = shares
            .holding()
            .map(|row| row.token)
            .max()
            .unwrap_or_default();
        let params = [
            key.into(),
            Param::Int(i64::try_from(latest).unwrap_or(i64::MAX)),
            Param::Int(longest.remaining_us),
        ];
        session.execute(&sharing.put_marker, &params).await?;
        Ok(())
    }

    async fn delete_share(
        &self,
        session: &mut dyn Session,
        key: &str,
        owner: &str,
    ) -> Result<(), sqlx::Error> {
        let params = [key.into(), owner.into()];
        session
            .execute(&self.statements.sharing.delete, &params)
            .await?;
        Ok(())
    }

    /// Releases a shared kind's `lease` (see [`LockBackend::release`](crate::backend::LockBackend::release)):
    /// its grant ends (or, with `min_hold`, is kept until then), or its place goes. Now and
    /// then deletes lapsed releases afterwards.
    pub(super) async fn release_shared(
        &self,
        lease: &Lease,
        min_hold: Duration,
    ) -> Result<Release, sqlx::Error> {
        let schema = &self.statements.shares_schema;
        let release = self
            .creating(schema, || self.release_share_once(lease, min_hold))
            .await?;
        if random::unit() < 1.0 / 8.0 {
            self.forget_releases().await;
        }
        Ok(release)
    }

    async fn release_share_once(
        &self,
        lease: &Lease,
        min_hold: Duration,
    ) -> Result<Release, sqlx::Error> {
        let (key, owner) = (lease.key.as_str(), lease.owner.as_str());
        let mut transaction = self.transaction().await?;
        let session = transaction.session();
        self.lock_fence(session, key, false).await?;
        self.lock_marker(session, key).await?;
        let shares = self.read_shares(session, key).await?;
        let mine = shares
            .rows
            .iter()
            .find(|row| row.owner == owner && row.live());
        let release = match mine.map(|mine| (mine.state, mine.token)) {
            Some((ShareState::Held, token)) => {
                // As on Redis, whose lease has millisecond resolution.
                if min_hold.as_millis() == 0 {
                    self.delete_share(session, key, owner).await?;
                    self.announce(session, key, &format!("released {token}"))
                        .await?;
                } else {
                    let params = [Param::Int(millis(min_hold)), key.into(), owner.into()];
                    let keep = &self.statements.sharing.keep;
                    session.execute(keep, &params).await?;
                }
                let params = [owner.into(), key.into(), self.release_memory_ms()];
                let remember = &self.statements.remember_release;
                session.execute(remember, &params).await?;
                Release::Released
            }
            Some((ShareState::Kept, _)) => Release::Released,
            waiting => {
                if waiting.is_some() {
                    // The readers it held back try again.
                    self.delete_share(session, key, owner).await?;
                    self.announce(session, key, "left").await?;
                }
                let params = [owner.into(), key.into()];
                let recent = &self.statements.released_recently;
                if session.fetch(recent, &params).await?.is_empty() {
                    Release::NotOwner
                } else {
                    Release::Released
                }
            }
        };
        self.settle_marker(session, key).await?;
        transaction.commit().await?;
        Ok(release)
    }

    /// A forced release of `key`, whose lock row is a marker: ends the grant named, if a live
    /// one of the key is, and settles the marker.
    pub(super) async fn force_release_shared(
        &self,
        session: &mut dyn Session,
        key: &str,
        grant: Grant,
    ) -> Result<ForcedRelease, sqlx::Error> {
        let shares = self.read_shares(session, key).await?;
        let found = shared_holding(shares.holding());
        let named = shares
            .holding()
            .find(|row| grant.is(owner_tag(&row.owner), row.held_token()));
        let forced = match named {
            None => ForcedRelease::of(key, found),
            Some(named) => {
                self.delete_share(session, key, &named.owner).await?;
                let token = named.token;
                self.announce(session, key, &format!("released {token}"))
                    .await?;
                ForcedRelease {
                    released: true,
                    announced: Some(ReleaseEvent::Released { token: Some(token) }),
                    ..ForcedRelease::of(key, found)
                }
            }
        };
        self.settle_marker(session, key).await?;
        Ok(forced)
    }

    /// Renews a batch of shared grants, in one transaction of steps (see the module docs);
    /// each is renewed or lost. A marker another session holds locked is waited for (an
    /// acquire or release holds it for a moment) up to the lock wait, past which the batch
    /// fails and the next round asks again.
    pub(super) async fn extend_shares(
        &self,
        batch: &[HeldLease],
    ) -> Result<Vec<Extended>, sqlx::Error> {
        let sharing = &self.statements.sharing;
        let with = |statement: &str, count| self.statements.with_grants(statement, count, false);
        // In name order: MySQL locks the markers in the order of the grants it is given.
        let mut by_name: Vec<&HeldLease> = batch.iter().collect();
        by_name.sort_by(|a, b| a.lease.key.cmp(&b.lease.key));
        let params = Statements::grant_params(by_name);
        // At READ COMMITTED on MySQL: a marker or grant not found would lock the gap where
        // it would be, and hold up other names' writes there until the commit.
        let mut transaction = self.transaction_read_committed().await?;
        let session = transaction.session();
        let lock_markers = with(&sharing.lock_markers, batch.len());
        let markers: HashSet<String> = session
            .fetch(&lock_markers, &params)
            .await?
            .iter()
            .filter_map(|row| Some(row.first()?.text()?.to_owned()))
            .collect();
        let lock_grants = with(&sharing.lock_grants, batch.len());
        let locked = granted_slots(&session.fetch(&lock_grants, &params).await?);
        let renews: Vec<bool> = batch
            .iter()
            .map(|held| markers.contains(&held.lease.key) && holds(&locked, held))
            .collect();
        let renewing: Vec<&HeldLease> = batch
            .iter()
            .zip(&renews)
            .filter_map(|(held, renews)| renews.then_some(held))
            .collect();
        if !renewing.is_empty() {
            let params = Statements::grant_params(renewing.iter().copied());
            for step in [&sharing.renew, &sharing.bump_markers] {
                session
                    .execute(&with(step, renewing.len()), &params)
                    .await?;
            }
        }
        transaction.commit().await?;
        Ok(renews.into_iter().map(Extended::found).collect())
    }

    /// Every live grant of a shared kind whose name `matches`, by name (none while the shares
    /// table is missing: an earlier version's tables hold no shares).
    pub(super) async fn live_shares(
        &self,
        matches: impl Fn(&str) -> bool,
    ) -> Result<HashMap<String, Vec<ShareRow>>, sqlx::Error> {
        let mut session = self.sessions.session().await?;
        let rows = match session.fetch(&self.statements.sharing.list, &[]).await {
            Err(error) if super::is_missing_table(self.dialect(), &error) => Vec::new(),
            rows => rows?,
        };
        let mut by_name: HashMap<String, Vec<ShareRow>> = HashMap::new();
        for row in &rows {
            let Some((name, share)) = row.split_first() else {
                continue;
            };
            let share = ShareRow::from_values(share);
            if let (Some(name), Some(share)) = (name.text().filter(|n| matches(n)), share) {
                by_name.entry(name.to_owned()).or_default().push(share);
            }
        }
        Ok(by_name)
    }
}

/// The grants named by rows of name, owner, token and slot, with their slots.
fn granted_slots(rows: &[Vec<Value>]) -> HashMap<GrantId, i64> {
    rows.iter()
        .filter_map(|row| match row.as_slice() {
            [name, owner, token, slot, ..] => Some((
                (
                    name.text()?.to_owned(),
                    owner.text()?.to_owned(),
                    token.int()?,
                ),
                slot.int()?,
            )),
            _ => None,
        })
        .collect()
}

/// Whether `locked` holds the grant `held` in the permit it names (readers and writers name
/// none).
fn holds(locked: &HashMap<GrantId, i64>, held: &HeldLease) -> bool {
    locked
        .get(&grant_id(held))
        .is_some_and(|slot| held.slot.is_none_or(|named| i64::from(named) == *slot))
}

/// What the conformance suite does not reach: the marker under renewal and release, marks of
/// grants that hold no shard, and rows fencelock did not write. On each database the machine runs (skipped without one).
#[cfg(all(test, feature = "testing", feature = "postgres", feature = "mysql"))]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::LockClient;
    use crate::backend::LockBackend;
    use crate::testing::{SqlDatabase, SqlKind};

    const KINDS: [SqlKind; 2] = [SqlKind::Postgres, SqlKind::MySql];

    async fn databases() -> Vec<SqlDatabase> {
        let mut reached = Vec::new();
        for kind in KINDS {
            reached.extend(SqlDatabase::reach(kind).await);
        }
        reached
    }

    fn lease(key: &str, owner: &str, kind: LockKind, ttl_ms: u64) -> Lease {
        Lease {
            key: key.to_owned(),
            owner: owner.to_owned(),
            ttl: Duration::from_millis(ttl_ms),
            replicas: 0,
            kind,
        }
    }

    async fn granted(backend: &Arc<dyn LockBackend>, lease: &Lease) -> HeldLease {
        match backend.acquire(lease, Turn::Once).await {
            Ok(Acquire::Granted { token, slot }) => HeldLease {
                lease: lease.clone(),
                token,
                slot,
            },
            other => panic!("{}: a free key: {other:?}", lease.owner),
        }
    }

    /// Whether a mutex attempt finds the key held by shares (and says so).
    async fn mutex_refused(backend: &Arc<dyn LockBackend>, key: &str, owner: &str) -> bool {
        let mutex = lease(key, owner, LockKind::Mutex, 60_000);
        match backend.acquire(&mutex, Turn::Once).await {
            Err(LockError::KeyInUse { reason, .. }) => {
                assert!(reason.contains("one kind of lock per key"), "{reason}");
                true
            }
            Ok(Acquire::Granted { .. }) => false,
            other => panic!("{other:?}"),
        }
    }

    async fn client(database: &SqlDatabase) -> LockClient {
        database.client().await
    }

    /// A share renewed past its first lease keeps its marker alive: a mutex never takes the
    /// name over meanwhile; once renewal stops, the name frees itself with the share. The
    /// lease leaves each round 800 ms for its renewal and its mutex attempt: a loaded machine
    /// took the 200 ms that a 300 ms lease left.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_mutex_never_takes_a_name_over_while_a_share_is_live() {
        for database in databases().await {
            let client = client(&database).await;
            let backend = client.backend();
            let reader = lease("renewed", "reader", LockKind::Read, 1_000);
            let held = granted(backend, &reader).await;
            for round in 0..12 {
                tokio::time::sleep(Duration::from_millis(200)).await;
                let renewed = backend.extend(std::slice::from_ref(&held)).await.unwrap();
                assert!(matches!(renewed[..], [Extended::Renewed]), "{renewed:?}");
                let owner = format!("mutex-{round}");
                assert!(
                    mutex_refused(backend, "renewed", &owner).await,
                    "{:?}: round {round}: a mutex took a name a live share holds",
                    database.kind()
                );
            }
            tokio::time::sleep(Duration::from_millis(1_100)).await;
            assert!(!mutex_refused(backend, "renewed", "after").await);
            database.drop_tables().await;
        }
    }

    /// A released share leaves nothing to renew, and the marker goes with the last share (a
    /// kept one's marker lasts as long as its keep, not its lease).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_renewal_after_a_release_keeps_nothing() {
        for database in databases().await {
            let client = client(&database).await;
            let backend = client.backend();
            let permit = LockKind::Semaphore { permits: 2 };
            let mine = lease("released", "permit", permit, 60_000);
            let held = granted(backend, &mine).await;
            let released = backend.release(&mine, Duration::ZERO).await.unwrap();
            assert_eq!(released, Release::Released);
            let renewed = backend.extend(std::slice::from_ref(&held)).await.unwrap();
            assert!(matches!(renewed[..], [Extended::Lost]), "{renewed:?}");
            let state = client.admin().inspect("released").await.unwrap();
            assert_eq!(state.holding, Holding::Free, "{state:?}");
            assert!(!mutex_refused(backend, "released", "mutex").await);
            let mutex = lease("released", "mutex", LockKind::Mutex, 60_000);
            backend.release(&mutex, Duration::ZERO).await.unwrap();

            let kept = lease("kept", "permit", permit, 60_000);
            let held = granted(backend, &kept).await;
            let released = backend.release(&kept, Duration::from_millis(300)).await;
            assert_eq!(released.unwrap(), Release::Released);
            let renewed = backend.extend(std::slice::from_ref(&held)).await.unwrap();
            assert!(matches!(renewed[..], [Extended::Lost]), "{renewed:?}");
            assert!(mutex_refused(backend, "kept", "early").await);
            tokio::time::sleep(Duration::from_millis(400)).await;
            assert!(
                !mutex_refused(backend, "kept", "late").await,
                "{:?}: the marker outlived the kept share",
                database.kind()
            );
            database.drop_tables().await;
        }
    }

    /// A renewal of shares touches only the rows of the names it renews: another session that
    /// holds the lock row of an unrelated name (an acquire of it in progress, an operator's
    /// transaction) does not hold it up. Found by the review of shares on SQL
    /// (2026-12-06): on MariaDB with small tables, the renewal of two or more grants scanned
    /// `<table>` and `<table>_shares` with locking reads at REPEATABLE READ, and waited for
    /// and locked every row of both.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_renewal_of_shares_waits_for_no_other_name() {
        let mut failures = Vec::new();
        for database in databases().await {
            let client = client(&database).await;
            let backend = client.backend();
            let a = granted(backend, &lease("a", "reader-a", LockKind::Read, 60_000)).await;
            let d = granted(backend, &lease("d", "reader-d", LockKind::Read, 60_000)).await;
            granted(backend, &lease("b", "mutex-b", LockKind::Mutex, 60_000)).await;
            let held = database
                .hold_lock_row("b", Duration::from_secs(4))
                .await
                .unwrap();
            let started = std::time::Instant::now();
            let batch = [a, d];
            let renewal = backend.extend(&batch);
            let renewed = tokio::time::timeout(Duration::from_secs(2), renewal).await;
            let took = started.elapsed();
            held.await.unwrap();
            tokio::time::sleep(Duration::from_secs(3)).await;
            let kind = database.kind();
            database.drop_tables().await;
            match renewed {
                Ok(Ok(found)) if matches!(found[..], [Extended::Renewed, Extended::Renewed]) => {}
                other => failures.push(format!(
                    "{kind:?}: a renewal of `a` and `d` waited {took:?} for the lock row of \
                     `b`: {other:?}"
                )),
            }
        }
        assert!(failures.is_empty(), "{failures:#?}");
    }

    /// Two mutex requests race for a name whose readers crashed (its marker lapsed, not yet
    /// deleted): one gets it, the other finds it held by that mutex and waits. Found by the
    /// same review: on PostgreSQL the loser read the owner from its statement's snapshot,
    /// taken before it waited for the fence row, saw the lapsed marker and was refused with
    /// `KeyInUse`.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_mutex_racing_for_a_lapsed_marker_is_not_refused() {
        let mut failures = Vec::new();
        for database in databases().await {
            let client = client(&database).await;
            let backend = client.backend().clone();
            granted(&backend, &lease("lapsed", "reader", LockKind::Read, 200)).await;
            tokio::time::sleep(Duration::from_millis(400)).await;
            let held = database
                .hold_fence_row("lapsed", Duration::from_millis(800))
                .await
                .unwrap();
            let attempts = ["m1", "m2"].map(|owner| {
                let backend = backend.clone();
                tokio::spawn(async move {
                    let mutex = lease("lapsed", owner, LockKind::Mutex, 60_000);
                    backend.acquire(&mutex, Turn::Once).await
                })
            });
            held.await.unwrap();
            let mut answers = Vec::new();
            for attempt in attempts {
                answers.push(attempt.await.unwrap());
            }
            let kind = database.kind();
            database.drop_tables().await;
            let granted = answers
                .iter()
                .filter(|a| matches!(a, Ok(Acquire::Granted { .. })))
                .count();
            let waits = answers
                .iter()
                .filter(|a| matches!(a, Ok(Acquire::Held { .. })))
                .count();
            if !(granted == 1 && waits == 1) {
                failures.push(format!("{kind:?}: {answers:?}"));
            }
        }
        assert!(failures.is_empty(), "{failures:#?}");
    }

    /// Only a held grant marks its shard: one kept after its release (`min_hold_ms`) marks
    /// nothing, and its shard stays free of marks for the next request; nor does a segmented
    /// lease on a name a mutex holds, whose row stays the mutex's.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn only_a_held_grant_marks_its_shard() {
        for database in databases().await {
            let kind = database.kind();
            let client = client(&database).await;
            let backend = client.backend();
            let marks = backend.shard_marks().expect("segmented locks keep marks");
            let shards = LockKind::Segmented { shards: 2 };
            let kept = lease("kept", "holder", shards, 60_000);
            let held = granted(backend, &kept).await;
            let released = backend.release(&kept, Duration::from_secs(60)).await;
            assert_eq!(released.unwrap(), Release::Released);
            let marked = marks.mark_exhausted(&held).await.unwrap();
            assert!(!marked, "{kind:?}: a kept grant marked its shard");
            let next = granted(backend, &lease("kept", "next", shards, 60_000)).await;
            assert!(
                next.slot.is_some() && next.slot != held.slot,
                "{kind:?}: {next:?}"
            );

            let mutex = lease("mutex", "owner", LockKind::Mutex, 60_000);
            let mutex = granted(backend, &mutex).await;
            let stray = HeldLease {
                lease: lease("mutex", "owner", shards, 60_000),
                token: mutex.token,
                slot: Some(0),
            };
            assert!(!marks.mark_exhausted(&stray).await.unwrap(), "{kind:?}");
            let other = lease("mutex", "other", LockKind::Mutex, 60_000);
            let answer = backend.acquire(&other, Turn::Once).await;
            assert!(
                matches!(answer, Ok(Acquire::Held { .. })),
                "{kind:?}: the mutex still holds its name: {answer:?}"
            );
            database.drop_tables().await;
        }
    }

    /// Runs `statements` in a transaction on a connection of its own and returns once they
    /// ran; the returned task commits after `hold` (a stalled client's transaction).
    async fn hold_transaction(
        database: &SqlDatabase,
        isolation: &str,
        statements: Vec<String>,
        hold: Duration,
    ) -> tokio::task::JoinHandle<()> {
        use sqlx::Connection;
        let isolation = format!("SET TRANSACTION ISOLATION LEVEL {isolation}");
        macro_rules! hold_with {
            ($connection:ty) => {{
                let mut connection = <$connection>::connect(database.url()).await.unwrap();
                if database.kind() == SqlKind::MySql {
                    sqlx::Executor::execute(&mut connection, isolation.as_str())
                        .await
                        .unwrap();
                }
                sqlx::Executor::execute(&mut connection, "BEGIN")
                    .await
                    .unwrap();
                for statement in &statements {
                    sqlx::Executor::execute(&mut connection, statement.as_str())
                        .await
                        .unwrap();
                }
                tokio::spawn(async move {
                    tokio::time::sleep(hold).await;
                    let _ = sqlx::Executor::execute(&mut connection, "COMMIT").await;
                })
            }};
        }
        match database.kind() {
            SqlKind::Postgres => hold_with!(sqlx::PgConnection),
            SqlKind::MySql => hold_with!(sqlx::MySqlConnection),
        }
    }

    /// Marks of shards at or above a request's count, and rows of another shape,
    /// neither refuse it nor keep it from a free shard; a request whose every shard is marked
    /// is refused with `Exhausted { shard: None }` and writes nothing.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn marks_above_the_count_and_foreign_marks_are_ignored() {
        for database in databases().await {
            let kind = database.kind();
            let client = client(&database).await;
            let backend = client.backend();
            let marks = backend.shard_marks().unwrap();
            marks.refill("k", None).await.unwrap();
            let table = format!("{}_exhausted", database.table());
            for (name, shard) in [("k", 1), ("k", 2), ("k", 3), ("k", -1), ("K", 0), ("k ", 0)] {
                let insert =
                    format!("INSERT INTO {table} (name, shard) VALUES ('{name}', {shard})");
                database.execute(&insert).await.unwrap();
            }
            let two = LockKind::Segmented { shards: 2 };
            let first = granted(backend, &lease("k", "first", two, 60_000)).await;
            assert_eq!(first.slot, Some(0), "{kind:?}");
            assert!(marks.mark_exhausted(&first).await.unwrap(), "{kind:?}");
            let refused = backend
                .acquire(&lease("k", "second", two, 60_000), Turn::Once)
                .await;
            assert!(
                matches!(refused, Err(LockError::Exhausted { shard: None, .. })),
                "{kind:?}: {refused:?}"
            );
            let five = LockKind::Segmented { shards: 5 };
            let wide = granted(backend, &lease("k", "wide", five, 60_000)).await;
            assert_eq!(wide.slot, Some(4), "{kind:?}: the only free unmarked shard");
            let state = client.admin().inspect("k").await.unwrap();
            assert!(
                matches!(state.holding, Holding::Shared { holders: 2, .. }),
                "{kind:?}: {state:?}"
            );
            database.drop_tables().await;
        }
    }

    /// A grant that expired marks nothing, also after another owner took its shard,
    /// whose own mark counts.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_expired_grant_marks_nothing() {
        for database in databases().await {
            let kind = database.kind();
            let client = client(&database).await;
            let backend = client.backend();
            let marks = backend.shard_marks().unwrap();
            let one = LockKind::Segmented { shards: 1 };
            let old = granted(backend, &lease("e", "old", one, 200)).await;
            tokio::time::sleep(Duration::from_millis(400)).await;
            assert!(
                !marks.mark_exhausted(&old).await.unwrap(),
                "{kind:?}: expired"
            );
            let new = granted(backend, &lease("e", "new", one, 60_000)).await;
            assert_eq!(new.slot, old.slot);
            assert!(
                !marks.mark_exhausted(&old).await.unwrap(),
                "{kind:?}: another's now"
            );
            assert!(marks.mark_exhausted(&new).await.unwrap(), "{kind:?}");
            let refused = backend
                .acquire(&lease("e", "third", one, 60_000), Turn::Once)
                .await;
            assert!(
                matches!(refused, Err(LockError::Exhausted { shard: None, .. })),
                "{kind:?}: {refused:?}"
            );
            marks.refill("e", Some(0)).await.unwrap();
            let waits = backend
                .acquire(&lease("e", "third", one, 60_000), Turn::Once)
                .await;
            assert!(
                matches!(waits, Ok(Acquire::Held { .. })),
                "{kind:?}: {waits:?}"
            );
            database.drop_tables().await;
        }
    }

    /// On MySQL, a mark, a refill and a renewal of shares run at READ COMMITTED (what the
    /// test below relies on): seen in `information_schema.innodb_trx` while the first two
    /// wait for the name's fence row and the renewal for its marker, the lock row.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn marks_refills_and_renewals_run_at_read_committed_on_mysql() {
        use sqlx::Connection;
        for database in databases().await {
            if database.kind() != SqlKind::MySql {
                continue;
            }
            let client = client(&database).await;
            let backend = client.backend();
            let marks = backend.shard_marks().unwrap();
            let two = LockKind::Segmented { shards: 2 };
            let held = granted(backend, &lease("a", "holder-a", two, 60_000)).await;
            // The exhausted shards' table exists before the rows are held.
            marks.refill("a", None).await.unwrap();
            let hold = Duration::from_secs(3);
            let fence = database.hold_fence_row("a", hold).await.unwrap();
            let marker = database.hold_lock_row("a", hold).await.unwrap();
            let renewed = std::slice::from_ref(&held);
            let (marked, refilled, extended, levels) = tokio::join!(
                marks.mark_exhausted(&held),
                marks.refill("a", None),
                backend.extend(renewed),
                async {
                    let mut inspector = sqlx::MySqlConnection::connect(database.url())
                        .await
                        .unwrap();
                    // This test's transactions only: other tests run beside it on the server.
                    let waiting = format!(
                        "SELECT trx_isolation_level FROM information_schema.innodb_trx \
                         WHERE trx_state = 'LOCK WAIT' AND INSTR(trx_query, '{}') > 0",
                        database.table()
                    );
                    for _ in 0..25 {
                        let levels: Vec<String> = sqlx::query_scalar(&waiting)
                            .fetch_all(&mut inspector)
                            .await
                            .unwrap();
                        if levels.len() == 3 {
                            return levels;
                        }
                        // MariaDB refreshes this view only once it has not been read for
                        // 100 ms: read faster, it shows the same rows forever.
                        tokio::time::sleep(Duration::from_millis(150)).await;
                    }
                    Vec::new()
                }
            );
            fence.await.unwrap();
            marker.await.unwrap();
            database.drop_tables().await;
            assert!(marked.unwrap() && refilled.is_ok() && extended.is_ok());
            assert_eq!(levels, ["READ COMMITTED"; 3]);
        }
    }

    /// A mark and a refill of one name wait for no other name's marks: another
    /// session's transaction that marked a shard of `b` (as a mark of `b` in progress does,
    /// or one whose client stalled before its commit) holds up neither a refill nor a mark
    /// of `a`. Found by the review of segmented locks on SQL (2026-12-06): on MariaDB at
    /// REPEATABLE READ, `INSERT ... ON DUPLICATE KEY UPDATE` of an existing mark took a
    /// next-key lock (the gap before it), and the refill's range delete locked the gaps it
    /// scanned; both now run at READ COMMITTED (see the test above).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn marks_and_refills_wait_for_no_other_name() {
        let mut failures = Vec::new();
        for database in databases().await {
            let kind = database.kind();
            let client = client(&database).await;
            let backend = client.backend();
            let marks = backend.shard_marks().unwrap();
            let one = LockKind::Segmented { shards: 2 };
            let b = granted(backend, &lease("b", "holder-b", one, 60_000)).await;
            assert!(marks.mark_exhausted(&b).await.unwrap());
            let a = granted(backend, &lease("a", "holder-a", one, 60_000)).await;
            let table = format!("{}_exhausted", database.table());
            let upsert = match kind {
                SqlKind::Postgres => format!(
                    "INSERT INTO {table} (name, shard) VALUES ('b', {}) ON CONFLICT DO NOTHING",
                    b.slot.unwrap()
                ),
                SqlKind::MySql => format!(
                    "INSERT INTO {table} (name, shard) VALUES ('b', {}) ON DUPLICATE KEY \
                     UPDATE shard = shard",
                    b.slot.unwrap()
                ),
            };
            // A refill of `b` in progress: its range delete.
            let delete = format!("DELETE FROM {table} WHERE name = 'b' AND (-1 < 0 OR shard = -1)");
            // As fencelock's refill runs it: at READ COMMITTED on MySQL.
            let refilling = vec![upsert, delete];
            let hold = Duration::from_secs(4);
            let held = hold_transaction(&database, "READ COMMITTED", refilling, hold).await;
            let started = std::time::Instant::now();
            let mark = tokio::time::timeout(Duration::from_secs(2), marks.mark_exhausted(&a)).await;
            let mark_took = started.elapsed();
            let started = std::time::Instant::now();
            let refill =
                tokio::time::timeout(Duration::from_secs(2), marks.refill("a", None)).await;
            let refill_took = started.elapsed();
            held.await.unwrap();
            tokio::time::sleep(Duration::from_secs(3)).await;
            database.drop_tables().await;
            if !matches!(mark, Ok(Ok(true))) {
                failures.push(format!(
                    "{kind:?}: a mark of `a` waited {mark_took:?} for `b`: {mark:?}"
                ));
            }
            if !matches!(refill, Ok(Ok(()))) {
                failures.push(format!(
                    "{kind:?}: a refill of `a` waited {refill_took:?} for `b`: {refill:?}"
                ));
            }
        }
        assert!(failures.is_empty(), "{failures:#?}");
    }

    /// Lazy creation of the exhausted shards' table while another session has an
    /// open transaction on the shares table (an acquire in progress, an operator's query)
    /// does not hold the segmented acquire up.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn lazy_creation_waits_for_no_open_transaction() {
        let mut failures = Vec::new();
        for database in databases().await {
            let kind = database.kind();
            let client = client(&database).await;
            let backend = client.backend();
            granted(backend, &lease("r", "reader", LockKind::Read, 60_000)).await;
            let table = database.table().to_owned();
            database
                .execute(&format!("DROP TABLE {table}_exhausted"))
                .await
                .unwrap();
            let read = format!("SELECT count(*) FROM {table}_shares");
            let hold = Duration::from_secs(4);
            let held = hold_transaction(&database, "REPEATABLE READ", vec![read], hold).await;
            let two = LockKind::Segmented { shards: 2 };
            let started = std::time::Instant::now();
            let segment = lease("s", "segment", two, 60_000);
            let attempt = backend.acquire(&segment, Turn::Once);
            let answer = tokio::time::timeout(Duration::from_secs(2), attempt).await;
            let took = started.elapsed();
            held.await.unwrap();
            tokio::time::sleep(Duration::from_secs(1)).await;
            database.drop_tables().await;
            if !matches!(answer, Ok(Ok(Acquire::Granted { slot: Some(_), .. }))) {
                failures.push(format!("{kind:?}: waited {took:?}: {answer:?}"));
            }
        }
        assert!(failures.is_empty(), "{failures:#?}");
    }

    /// With `create_tables(false)` and an earlier version's tables (no exhausted
    /// shards' table), the other kinds work, a segmented lock is refused naming the table,
    /// and the last statement of `schema()` creates it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn without_created_tables_the_last_schema_statement_suffices() {
        for database in databases().await {
            let kind = database.kind();
            let _ = database.client().await;
            let table = database.table().to_owned();
            database
                .execute(&format!("DROP TABLE {table}_exhausted"))
                .await
                .unwrap();
            let builder = database.builder().create_tables(false);
            let schema = builder.schema().unwrap();
            let client = builder.connect().await.unwrap();
            let backend = client.backend();
            granted(backend, &lease("x", "reader", LockKind::Read, 60_000)).await;
            let two = LockKind::Segmented { shards: 2 };
            let answer = backend
                .acquire(&lease("y", "seg", two, 60_000), Turn::Once)
                .await;
            match answer {
                Err(LockError::Backend { .. }) | Err(LockError::InvalidConfig { .. }) => {
                    let text = format!("{}", crate::WithSources(&answer.unwrap_err()));
                    assert!(
                        text.contains(&format!("{table}_exhausted")),
                        "{kind:?}: {text}"
                    );
                }
                other => panic!("{kind:?}: {other:?}"),
            }
            database.execute(schema.last().unwrap()).await.unwrap();
            granted(backend, &lease("y", "seg", two, 60_000)).await;
            database.drop_tables().await;
        }
    }

    /// Two clients race for the shards of one name while holders mark and a refiller
    /// refills: never two holders of one shard, never a shard at or above the count, and a
    /// refusal only when the marks cover every shard.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn two_clients_racing_never_share_a_shard() {
        use std::sync::Mutex;
        for database in databases().await {
            let kind = database.kind();
            let clients = [client(&database).await, client(&database).await];
            let inside: Arc<Mutex<[Option<String>; 3]>> = Arc::default();
            let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let refiller = {
                let client = clients[0].clone();
                let stop = stop.clone();
                tokio::spawn(async move {
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        tokio::time::sleep(Duration::from_millis(15)).await;
                        let shard = crate::random::below(4);
                        let marks = client.backend().shard_marks().unwrap();
                        let which = (shard < 3).then_some(shard);
                        marks.refill("race", which).await.unwrap();
                    }
                })
            };
            let mut tasks = Vec::new();
            for n in 0..6 {
                let client = clients[n % 2].clone();
                let inside = inside.clone();
                tasks.push(tokio::spawn(async move {
                    let (mut grants, mut refusals) = (0, 0);
                    for round in 0..40 {
                        let backend = client.backend();
                        let owner = format!("t{n}-{round}");
                        let three = LockKind::Segmented { shards: 3 };
                        let mine = lease("race", &owner, three, 5_000);
                        match backend
                            .acquire(&mine, Turn::Once)
                            .await
                            .unwrap_or_else(|e| {
                                if e.is_exhausted() {
                                    Acquire::Held {
                                        remaining: None,
                                        latest_token: 0,
                                    }
                                } else {
                                    panic!("{e}")
                                }
                            }) {
                            Acquire::Granted { token, slot } => {
                                grants += 1;
                                let shard = slot.expect("a shard") as usize;
                                assert!(shard < 3);
                                {
                                    let mut inside = inside.lock().unwrap();
                                    if let Some(other) = &inside[shard] {
                                        panic!("{owner} and {other} hold shard {shard}");
                                    }
                                    inside[shard] = Some(owner.clone());
                                }
                                tokio::time::sleep(Duration::from_millis(3)).await;
                                if round % 3 == 0 {
                                    let held = HeldLease {
                                        lease: mine.clone(),
                                        token,
                                        slot,
                                    };
                                    let marks = backend.shard_marks().unwrap();
                                    assert!(marks.mark_exhausted(&held).await.unwrap());
                                }
                                inside.lock().unwrap()[shard] = None;
                                let released = backend.release(&mine, Duration::ZERO).await;
                                assert_eq!(released.unwrap(), Release::Released);
                            }
                            Acquire::Held { .. } => refusals += 1,
                        }
                    }
                    (grants, refusals)
                }));
            }
            let mut totals = (0, 0);
            for task in tasks {
                let (g, r) = task.await.unwrap();
                totals = (totals.0 + g, totals.1 + r);
            }
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            refiller.await.unwrap();
            eprintln!("{kind:?}: {totals:?}");
            assert!(totals.0 > 0);
            database.drop_tables().await;
        }
    }

    /// A share row fencelock did not write makes the name refuse shared requests (KeyInUse),
    /// and is skipped by the operator's calls; nothing panics.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn share_rows_of_another_shape_are_refused_not_panicked_on() {
        for database in databases().await {
            let client = client(&database).await;
            let backend = client.backend();
            let reader = lease("odd", "reader", LockKind::Read, 60_000);
            granted(backend, &reader).await;
            let future = match database.kind() {
                SqlKind::Postgres => "now() + interval '1 minute'",
                SqlKind::MySql => "UTC_TIMESTAMP(6) + INTERVAL 1 MINUTE",
            };
            let insert = format!(
                "INSERT INTO {}_shares (name, owner, kind, asked, slot, token, state, \
                 expires_at) VALUES ('odd', 'stranger', 'x', -1, -5, -7, 'odd', {future})",
                database.table()
            );
            database.execute(&insert).await.unwrap();
            let other = lease("odd", "other", LockKind::Read, 60_000);
            match backend.acquire(&other, Turn::Once).await {
                Err(LockError::KeyInUse { reason, .. }) => {
                    assert!(reason.contains("did not write"), "{reason}")
                }
                other => panic!("{other:?}"),
            }
            let state = client.admin().inspect("odd").await.unwrap();
            assert!(
                matches!(state.holding, Holding::Shared { holders: 1, .. }),
                "{state:?}"
            );
            let listed = client.admin().list("odd").await.unwrap();
            assert_eq!(listed.len(), 1, "{listed:?}");
            let released = backend.release(&reader, Duration::ZERO).await.unwrap();
            assert_eq!(released, Release::Released);
            database.drop_tables().await;
        }
    }
}

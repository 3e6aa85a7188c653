//! The SQL backends: locks in a PostgreSQL or MySQL/MariaDB table, with the semantics of
//! every other backend (leases, owner-checked renewal and release, fencing tokens).
//!
//! Seed 000's table lock, without its three faults: a lock row carries its lease's expiry on
//! the database's own clock (an expired row is taken over), waiters are woken by releases
//! (PostgreSQL `LISTEN/NOTIFY`) or poll (MySQL), and reentrancy comes from the runtime.
//!
//! Six tables: `<table>` holds a row per held lock (name, owner token, fencing token,
//! expiry), inserted to lock and deleted to unlock; `<table>_fences` keeps each name's
//! fencing counter, which outlives the lock row, so tokens keep increasing per name;
//! `<table>_releases` remembers each owner's release for as long as a resend of it can
//! arrive, so that a release sent again after a lost reply learns what the first one did;
//! `<table>_results` keeps a single-flight call's value (`action = Share`); `<table>_shares`
//! holds the grants of read/write locks, semaphores and segmented locks (a shard is a
//! grant's slot) and the places of waiting writers, while a marker row in `<table>` keeps the
//! mutex off their names; `<table>_exhausted` holds the shards of segmented locks marked
//! exhausted, until refilled (see `shares.rs`). The last three are created on their first
//! use where an earlier version created the others. Every
//! acquire and release of a name runs in one short transaction that first takes the name's
//! fence row lock: acquirers of one name queue on it, one at a time, at each database's
//! default isolation level. Renewal takes no fence lock: it updates only a row that is
//! still live and its owner's, and an acquire takes over only a row that has expired, both
//! checked on the row's latest version, so the two never both succeed. A deadlock, a
//! serialization failure or a lock wait that timed out is retried inside the backend.
//!
//! What the SQL backends do not offer yet: fair mode (no line of waiters is kept, but a
//! waiting writer's place: a release wakes the waiters, and they compete), `min_replicas` and
//! TLS connections.

mod calls;
mod errors;
#[cfg(feature = "mysql")]
mod mysql;
#[cfg(feature = "postgres")]
mod postgres;
mod session;
mod shares;
mod statements;

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use self::calls::Calls;
#[cfg(feature = "postgres")]
use self::errors::is_lock_wait;
use self::errors::{backend_error, is_missing_table, is_transient, redacted};
use self::session::{Param, Session, Sessions, Transaction, Value};
use self::shares::{ShareState, held_by_shares};
#[cfg(feature = "mysql")]
use self::statements::{AcquireSteps, ExtendSteps, ReleaseSteps};
use self::statements::{Acquiring, Dialect, Extending, Releasing, SHARED_MARKER, Statements};
use super::{
    Acquire, AsyncBackend, AsyncOperator, AsyncResults, AsyncShardMarks, Extended, HeldLease,
    Lease, Published, Release, ReleaseWatch, ResultChange, ResultStore, ShardMarks, SharedResult,
    Turn, change_at_release, holding_of, owned_grant, release_memory, released_mark,
};
use crate::backend::{
    Capabilities, ForcedRelease, Grant, Holding, LockState, OperatorBackend, OwnedGrant,
    OwnerPrefix, Timeouts,
};
use crate::background::Background;
use crate::glob::Glob;
use crate::instance::InstanceId;
use crate::release_hub::ReleaseEvent;
use crate::{LockClient, LockError, random};

/// The lock table's name unless one is configured.
pub const DEFAULT_TABLE: &str = "fencelock_locks";

/// How long a lock table name may be: PostgreSQL cuts identifiers at 63 bytes, and the
/// fence table and the notification channel add to it.
const MAX_TABLE_LEN: usize = 48;

/// Grants renewed by one statement.
const EXTEND_BATCH: usize = 200;

/// How long a PostgreSQL renewal waits for a row another session holds before it skips it:
/// longer than a contender's attempt holds the row, far shorter than a lease.
#[cfg(feature = "postgres")]
const RENEWAL_LOCK_WAIT: Duration = Duration::from_millis(100);

/// How often a transaction that lost a race (deadlock, serialization failure, lock wait
/// timeout) or its connection is tried before the error is reported (the response timeout
/// bounds the time): enough to get past every pooled connection a cut or a restart of the
/// server broke (each is closed when it fails).
const TRIES: u32 = 24;

/// A lock backend on a PostgreSQL or MySQL/MariaDB database; see the [module](self) docs.
/// Built by [`LockClient::postgres`] and [`LockClient::mysql`] (or their builders).
pub struct SqlBackend {
    store: Arc<Store>,
    calls: Calls,
    #[cfg(feature = "postgres")]
    listener: Option<postgres::Listener>,
}

/// The tables and the connections to them.
struct Store {
    statements: Statements,
    sessions: Box<dyn Sessions>,
    /// The database's address without its password, for messages.
    at: String,
    /// How long a release is remembered for a resend of it.
    release_memory: Duration,
    /// Whether this client creates missing tables (the results table included, on the first
    /// value kept where an earlier version created the others).
    create_tables: bool,
    /// Whether this client deletes lapsed single-flight values already.
    forgetting_results: AtomicBool,
    /// Whether this client deletes lapsed releases already: two such range deletes deadlock
    /// each other on MySQL.
    forgetting: AtomicBool,
}

impl std::fmt::Debug for SqlBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlBackend")
            .field("database", &self.store.statements.dialect.name())
            .field("at", &self.store.at)
            .field("table", &self.store.statements.table)
            .finish_non_exhaustive()
    }
}

/// A lock row as read: its owner (or released mark), token, and time left.
struct GrantRow {
    owner: String,
    token: u64,
    remaining_us: i64,
}

impl GrantRow {
    fn from_values(values: &[Value]) -> Result<GrantRow, sqlx::Error> {
        match values {
            [
                Value::Text(owner),
                Value::Int(token),
                Value::Int(remaining_us),
                ..,
            ] => Ok(GrantRow {
                owner: owner.clone(),
                token: u64::try_from(*token).unwrap_or_default(),
                remaining_us: *remaining_us,
            }),
            _ => Err(unexpected("a lock row")),
        }
    }

    fn live(&self) -> bool {
        self.remaining_us > 0
    }

    fn remaining(&self) -> Duration {
        Duration::from_micros(u64::try_from(self.remaining_us).unwrap_or_default())
    }

    /// Who holds the row, as an operator sees it.
    fn holding(&self) -> Holding {
        holding_of(&self.owner, self.token, self.remaining())
    }
}

/// A grant as renewal statements name it: name, owner, token.
type GrantId = (String, String, i64);

fn grant_id(held: &HeldLease) -> GrantId {
    let token = i64::try_from(held.token).unwrap_or(i64::MAX);
    (held.lease.key.clone(), held.lease.owner.clone(), token)
}

/// The grants named by rows that start with name, owner and token.
fn grant_ids(rows: &[Vec<Value>]) -> HashSet<GrantId> {
    rows.iter()
        .filter_map(|row| match row.as_slice() {
            [name, owner, token, ..] => Some((
                name.text()?.to_owned(),
                owner.text()?.to_owned(),
                token.int()?,
            )),
            _ => None,
        })
        .collect()
}

/// What a renewal found of a batch: the grants it renewed, and those live whose row another
/// session held locked (unknown: the next round asks again). The others are lost.
struct Renewal {
    renewed: HashSet<GrantId>,
    held_elsewhere: HashSet<GrantId>,
}

impl Renewal {
    /// From rows of name, owner, token and a flag: 1 renewed, 0 held by another session.
    #[cfg(feature = "postgres")]
    fn of_flagged(rows: &[Vec<Value>]) -> Renewal {
        let (renewed, held_elsewhere): (Vec<_>, Vec<_>) = rows
            .iter()
            .partition(|row| row.get(3).and_then(Value::int) == Some(1));
        Renewal {
            renewed: grant_ids(&renewed.into_iter().cloned().collect::<Vec<_>>()),
            held_elsewhere: grant_ids(&held_elsewhere.into_iter().cloned().collect::<Vec<_>>()),
        }
    }

    fn answer(&self, held: &HeldLease) -> Extended {
        let id = grant_id(held);
        if self.renewed.contains(&id) {
            Extended::Renewed
        } else if self.held_elsewhere.contains(&id) {
            Extended::Unknown(LockError::backend(
                Some(&held.lease.key),
                "its lock row was held locked by another session; renewal asks again",
                None,
            ))
        } else {
            Extended::Lost
        }
    }
}

/// A reply this backend's statements never give (a table changed by hand, say).
fn unexpected(what: &str) -> sqlx::Error {
    sqlx::Error::Protocol(format!("unexpected reply: {what} of another shape"))
}

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

impl Store {
    fn dialect(&self) -> Dialect {
        self.statements.dialect
    }

    /// Runs `op` until it succeeds, fails for good, or has been tried [`TRIES`] times or until
    /// `retry_until`: a transaction that lost a race, or whose connection broke, is tried
    /// again on a fresh connection (each operation is safe to repeat for the same owner).
    async fn retrying<T, F, Fut>(
        &self,
        key: Option<&str>,
        retry_until: tokio::time::Instant,
        op: F,
    ) -> Result<T, LockError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, sqlx::Error>>,
    {
        let mut tries = 1;
        loop {
            match op().await {
                Ok(done) => return Ok(done),
                Err(error)
                    if tries < TRIES
                        && tokio::time::Instant::now() < retry_until
                        && is_transient(self.dialect(), &error) =>
                {
                    tracing::debug!(target: "fencelock", key, tries, error = %error, "database statement failed; trying again");
                    let pause = Duration::from_micros(500 + (random::unit() * 2_000.0) as u64);
                    tokio::time::sleep(pause * tries).await;
                    tries += 1;
                }
                Err(error) => return Err(backend_error(&self.statements, &self.at, key, error)),
            }
        }
    }

    async fn transaction(&self) -> Result<Transaction, sqlx::Error> {
        Transaction::begin(self.sessions.session().await?).await
    }

    /// A transaction that runs at READ COMMITTED on MySQL, for writes to a range of rows: at
    /// REPEATABLE READ they would also lock the gaps beside them, and hold up other names'
    /// writes there until the commit.
    async fn transaction_read_committed(&self) -> Result<Transaction, sqlx::Error> {
        let mut session = self.sessions.session().await?;
        self.read_committed_on_mysql(&mut *session).await?;
        Transaction::begin(session).await
    }

    /// Takes the fence row lock of `key`; with `draw`, also draws a token from its counter
    /// (what [`read`](Self::read) then returns as the latest).
    async fn lock_fence(
        &self,
        session: &mut dyn Session,
        key: &str,
        draw: bool,
    ) -> Result<(), sqlx::Error> {
        let draw = Param::Int(i64::from(draw));
        let params = [key.into(), draw.clone(), draw.clone(), draw];
        session
            .execute(&self.statements.lock_fence, &params)
            .await?;
        Ok(())
    }

    /// The latest token drawn for `key` (`None`: no fence row, as before its first lock or
    /// after the row was pruned) and its lock row.
    async fn read(
        &self,
        session: &mut dyn Session,
        key: &str,
    ) -> Result<(Option<u64>, Option<GrantRow>), sqlx::Error> {
        let params = [key.into(), key.into()];
        let rows = session.fetch(&self.statements.read, &params).await?;
        let Some(row) = rows.first() else {
            return Err(unexpected("a lock row read"));
        };
        let latest = row.first().and_then(Value::int);
        let grant = match row.get(1) {
            Some(Value::Null) => None,
            _ => Some(GrantRow::from_values(&row[1..])?),
        };
        Ok((latest.and_then(|token| u64::try_from(token).ok()), grant))
    }

    /// Announces `event` for `key` to the listeners, when the transaction commits.
    async fn announce(
        &self,
        session: &mut dyn Session,
        key: &str,
        event: &str,
    ) -> Result<(), sqlx::Error> {
        if let Some(notify) = &self.statements.notify {
            let channel = channel(&self.statements.table);
            let params = [Param::Text(channel), Param::Text(format!("{event}\n{key}"))];
            session.execute(notify, &params).await?;
        }
        Ok(())
    }

    /// Creates the tables if they are missing (and `create` allows it).
    async fn ensure_tables(
        &self,
        create: bool,
        retry_until: tokio::time::Instant,
    ) -> Result<(), LockError> {
        let probe = || async {
            let mut session = self.sessions.session().await?;
            session.execute(&self.statements.probe, &[]).await
        };
        match probe().await {
            Ok(_) => return Ok(()),
            Err(error) if !create || !is_missing_table(self.dialect(), &error) => {
                return Err(backend_error(&self.statements, &self.at, None, error));
            }
            Err(_) => {}
        }
        self.retrying(None, retry_until, || self.create(&self.statements.schema))
            .await?;
        // Once more: a table of that name that was there already may be another's.
        probe()
            .await
            .map(drop)
            .map_err(|error| backend_error(&self.statements, &self.at, None, error))
    }

    /// One attempt (see [`LockBackend::acquire`](crate::backend::LockBackend::acquire)); the
    /// inner error refuses the key (held by another kind, or foreign data).
    async fn acquire(
        &self,
        lease: &Lease,
        turn: Turn,
    ) -> Result<Result<Acquire, LockError>, sqlx::Error> {
        if lease.kind.is_shared() {
            return self.acquire_shared(lease, turn).await;
        }
        let acquired = match &self.statements.acquiring {
            #[cfg(feature = "postgres")]
            Acquiring::AtOnce(statement) => self.acquire_at_once(statement, lease).await?,
            #[cfg(feature = "mysql")]
            Acquiring::InSteps(steps) => self.acquire_in_steps(steps, lease).await?,
        };
        // Held by shares (its marker): told apart on this busy path only.
        Ok(match acquired {
            (_, Some(holder)) if holder == SHARED_MARKER => Err(held_by_shares(&lease.key)),
            (acquired, _) => Ok(acquired),
        })
    }

    /// PostgreSQL's attempt of a mutex: the answer, and the owner of the row that holds the
    /// key when it is not granted.
    #[cfg(feature = "postgres")]
    async fn acquire_at_once(
        &self,
        statement: &str,
        lease: &Lease,
    ) -> Result<(Acquire, Option<String>), sqlx::Error> {
        let ttl = Param::Int(millis(lease.ttl));
        let params = [lease.key.as_str().into(), lease.owner.as_str().into(), ttl];
        let mut session = self.sessions.session().await?;
        let rows = session.fetch(statement, &params).await?;
        let Some([granted, latest, remaining, holder]) = rows.first().map(Vec::as_slice) else {
            return Err(unexpected("an acquire's answer"));
        };
        let latest = latest.int().ok_or_else(|| unexpected("a fence token"))?;
        Ok(match granted.int() {
            Some(token) => {
                let token = u64::try_from(token).unwrap_or_default();
                (Acquire::Granted { token, slot: None }, None)
            }
            None => {
                let held = Acquire::Held {
                    remaining: remaining
                        .int()
                        .and_then(|us| u64::try_from(us).ok())
                        .map(Duration::from_micros),
                    latest_token: u64::try_from(latest).unwrap_or_default(),
                };
                let mut holder = holder.text().map(str::to_owned);
                // The statement's snapshot predates its wait for the fence row: the marker
                // seen there may have lapsed, and a mutex taken the key since. Read again
                // (a new snapshot) before refusing the key as held by shares.
                if holder.as_deref() == Some(SHARED_MARKER) {
                    let (_, now) = self.read(&mut *session, &lease.key).await?;
                    holder = now.filter(GrantRow::live).map(|row| row.owner);
                }
                (held, holder)
            }
        })
    }

    /// MySQL's attempt of a mutex: the answer, and the owner of the row that holds the key
    /// when it is not granted.
    #[cfg(feature = "mysql")]
    async fn acquire_in_steps(
        &self,
        steps: &AcquireSteps,
        lease: &Lease,
    ) -> Result<(Acquire, Option<String>), sqlx::Error> {
        let key = lease.key.as_str();
        let owner = lease.owner.as_str();
        let ttl = Param::Int(millis(lease.ttl));
        let mut transaction = self.transaction().await?;
        let session = transaction.session();
        self.lock_fence(session, key, true).await?;
        let (drawn, found) = self.read(session, key).await?;
        let drawn = drawn.ok_or_else(|| unexpected("a missing fence row"))?;
        let mut holder = None;
        let outcome = match &found {
            Some(grant) if grant.live() && grant.owner == owner => {
                // The holder asks again (a retry after a lost reply): never shortened.
                let params = [ttl, key.into(), owner.into()];
                session.execute(&steps.refresh, &params).await?;
                Acquire::Granted {
                    token: grant.token,
                    slot: None,
                }
            }
            Some(grant) if grant.live() => {
                holder = Some(grant.owner.clone());
                Acquire::Held {
                    remaining: Some(grant.remaining()),
                    latest_token: drawn,
                }
            }
            _ => {
                let as_token = Param::Int(i64::try_from(drawn).unwrap_or(i64::MAX));
                let taken = match found {
                    None => {
                        let params = [key.into(), owner.into(), as_token, ttl];
                        session.execute(&steps.insert, &params).await?
                    }
                    Some(_) => {
                        let params = [owner.into(), as_token, ttl, key.into()];
                        session.execute(&steps.take_over, &params).await?
                    }
                };
                if taken == 0 {
                    // Renewed by its holder meanwhile.
                    Acquire::Held {
                        remaining: None,
                        latest_token: drawn,
                    }
                } else {
                    Acquire::Granted {
                        token: drawn,
                        slot: None,
                    }
                }
            }
        };
        transaction.commit().await?;
        Ok((outcome, holder))
    }

    /// Releases `lease` (see [`LockBackend::release`]); `retried` when an earlier try of this
    /// call failed after it may have been applied: finding the key not the owner's then, with
    /// no release of the owner's remembered, the answer is that it cannot tell.
    async fn release(
        &self,
        lease: &Lease,
        min_hold: Duration,
        retried: bool,
    ) -> Result<Release, sqlx::Error> {
        let released = match &self.statements.releasing {
            _ if lease.kind.is_shared() => self.release_shared(lease, min_hold).await?,
            #[cfg(feature = "postgres")]
            Releasing::AtOnce(statement) => {
                self.release_at_once(statement, lease, min_hold).await?
            }
            #[cfg(feature = "mysql")]
            Releasing::InSteps(steps) => self.release_in_steps(steps, lease, min_hold).await?,
        };
        Ok(match released {
            Release::NotOwner if retried => Release::Unconfirmed,
            released => released,
        })
    }

    /// How long a release is remembered for a resend of it, in ms.
    fn release_memory_ms(&self) -> Param {
        Param::Int(millis(self.release_memory))
    }

    #[cfg(feature = "postgres")]
    async fn release_at_once(
        &self,
        statement: &str,
        lease: &Lease,
        min_hold: Duration,
    ) -> Result<Release, sqlx::Error> {
        let params = [
            lease.key.as_str().into(),
            lease.owner.as_str().into(),
            Param::Int(millis(min_hold)),
            Param::Text(released_mark(&lease.owner)),
            self.release_memory_ms(),
            Param::Text(channel(&self.statements.table)),
        ];
        let mut session = self.sessions.session().await?;
        let rows = session.fetch(statement, &params).await?;
        let Some([now, before]) = rows.first().map(Vec::as_slice) else {
            return Err(unexpected("a release's answer"));
        };
        let released = now.int().unwrap_or_default() + before.int().unwrap_or_default();
        Ok(if released > 0 {
            Release::Released
        } else {
            Release::NotOwner
        })
    }

    #[cfg(feature = "mysql")]
    async fn release_in_steps(
        &self,
        steps: &ReleaseSteps,
        lease: &Lease,
        min_hold: Duration,
    ) -> Result<Release, sqlx::Error> {
        let key = lease.key.as_str();
        let owner = lease.owner.as_str();
        let mut transaction = self.transaction().await?;
        let session = transaction.session();
        self.lock_fence(session, key, false).await?;
        let (_, found) = self.read(session, key).await?;
        let marked = released_mark(owner);
        let release = match found {
            Some(grant) if grant.owner == owner && grant.live() => {
                // As on Redis, whose lease has millisecond resolution.
                if min_hold.as_millis() == 0 {
                    let params = [key.into(), owner.into()];
                    session.execute(&self.statements.delete, &params).await?;
                } else {
                    let min_hold = Param::Int(millis(min_hold));
                    let params = [marked.as_str().into(), min_hold, key.into(), owner.into()];
                    session.execute(&steps.keep, &params).await?;
                }
                let params = [owner.into(), key.into(), self.release_memory_ms()];
                let remember = &self.statements.remember_release;
                session.execute(remember, &params).await?;
                Release::Released
            }
            Some(grant) if grant.owner == marked => Release::Released,
            _ => {
                let params = [owner.into(), key.into()];
                let recent = &self.statements.released_recently;
                let recent = session.fetch(recent, &params).await?;
                if recent.is_empty() {
                    Release::NotOwner
                } else {
                    Release::Released
                }
            }
        };
        transaction.commit().await?;
        if random::unit() < 1.0 / 8.0 {
            self.forget_releases().await;
        }
        Ok(release)
    }

    /// Deletes releases that lapsed (see `forget_releases.sql`), unless this client does
    /// already; a failure (another client's delete deadlocking this one) only leaves them to
    /// the next try.
    async fn forget_releases(&self) {
        /// Clears the flag however the delete ends (the release's call may be dropped).
        struct Forgetting<'a>(&'a AtomicBool);
        impl Drop for Forgetting<'_> {
            fn drop(&mut self) {
                self.0.store(false, Ordering::Release);
            }
        }
        if self.forgetting.swap(true, Ordering::AcqRel) {
            return;
        }
        let _forgetting = Forgetting(&self.forgetting);
        let forgetting = async {
            let mut session = self.sessions.session().await?;
            self.read_committed_on_mysql(&mut *session).await?;
            session.execute(&self.statements.forget_releases, &[]).await
        };
        if let Err(error) = forgetting.await {
            tracing::debug!(target: "fencelock", error = %error, "deleting lapsed releases failed; the next try will");
        }
    }

    /// On MySQL, runs the session's next transaction at READ COMMITTED: a range delete then
    /// locks only the rows it deletes (see `mysql/forget_releases.sql`).
    async fn read_committed_on_mysql(&self, session: &mut dyn Session) -> Result<(), sqlx::Error> {
        #[cfg(feature = "mysql")]
        if self.dialect() == Dialect::MySql {
            let read_committed = "SET TRANSACTION ISOLATION LEVEL READ COMMITTED";
            session.execute(read_committed, &[]).await?;
        }
        let _ = session;
        Ok(())
    }

    /// Renews `held` in batches, the mutex's grants apart from the shared kinds'; each grant's
    /// answer on its own, in order.
    async fn extend(&self, held: &[HeldLease]) -> Result<Vec<Extended>, sqlx::Error> {
        let mut answers: Vec<Option<Extended>> = vec![None; held.len()];
        for shared in [false, true] {
            let part: Vec<(usize, &HeldLease)> = held
                .iter()
                .enumerate()
                .filter(|(_, held)| held.lease.kind.is_shared() == shared)
                .collect();
            for batch in part.chunks(EXTEND_BATCH) {
                let leases: Vec<HeldLease> =
                    batch.iter().map(|(_, held)| (*held).clone()).collect();
                let found = if shared {
                    self.extend_shares(&leases).await?
                } else {
                    self.extend_mutexes(&leases).await?
                };
                for ((at, _), found) in batch.iter().zip(found) {
                    answers[*at] = Some(found);
                }
            }
        }
        let lost = |found: Option<Extended>| found.unwrap_or(Extended::Lost);
        Ok(answers.into_iter().map(lost).collect())
    }

    /// Renews a batch of mutex grants; each grant's answer on its own (see [`Renewal`]).
    async fn extend_mutexes(&self, batch: &[HeldLease]) -> Result<Vec<Extended>, sqlx::Error> {
        let params = Statements::grant_params(batch);
        let renewal = match &self.statements.extending {
            #[cfg(feature = "postgres")]
            Extending::AtOnce(statement) => self.extend_at_once(statement, batch, &params).await?,
            #[cfg(feature = "mysql")]
            Extending::InSteps(steps) => self.extend_in_steps(steps, batch, &params).await?,
        };
        Ok(batch.iter().map(|held| renewal.answer(held)).collect())
    }

    /// PostgreSQL's renewal of a batch: a contender's attempt locks the holder's row for a
    /// moment (its `ON CONFLICT`), so the rows are waited for, up to [`RENEWAL_LOCK_WAIT`];
    /// past it, the batch is sent again skipping the rows another session holds, which are
    /// answered unknown.
    #[cfg(feature = "postgres")]
    async fn extend_at_once(
        &self,
        statement: &str,
        batch: &[HeldLease],
        params: &[Param],
    ) -> Result<Renewal, sqlx::Error> {
        let waiting = async {
            let mut transaction = self.transaction().await?;
            let lock_wait = format!("SET LOCAL lock_timeout = {}", RENEWAL_LOCK_WAIT.as_millis());
            transaction.session().execute(&lock_wait, &[]).await?;
            let statement = self.statements.with_grants(statement, batch.len(), false);
            let rows = transaction.session().fetch(&statement, params).await?;
            transaction.commit().await?;
            Ok(rows)
        };
        let rows = match waiting.await {
            Err(error) if is_lock_wait(self.dialect(), &error) => {
                let statement = self.statements.with_grants(statement, batch.len(), true);
                let mut session = self.sessions.session().await?;
                session.fetch(&statement, params).await?
            }
            rows => rows?,
        };
        Ok(Renewal::of_flagged(&rows))
    }

    /// MySQL's renewal of a batch, in a transaction of steps: lock the live grants nobody
    /// else holds (a MySQL attempt reads a held row without locking it) and renew them; when
    /// some were skipped, read which of those are live.
    #[cfg(feature = "mysql")]
    async fn extend_in_steps(
        &self,
        steps: &ExtendSteps,
        batch: &[HeldLease],
        params: &[Param],
    ) -> Result<Renewal, sqlx::Error> {
        let with_grants =
            |statement: &str, count| self.statements.with_grants(statement, count, true);
        let mut transaction = self.transaction().await?;
        let session = transaction.session();
        let lock_grants = with_grants(&steps.lock_grants, batch.len());
        let locked = grant_ids(&session.fetch(&lock_grants, params).await?);
        let live: Vec<&HeldLease> = batch
            .iter()
            .filter(|held| locked.contains(&grant_id(held)))
            .collect();
        if !live.is_empty() {
            let update = with_grants(&steps.update, live.len());
            session
                .execute(&update, &Statements::grant_params(live))
                .await?;
        }
        let seen_live = if locked.len() < batch.len() {
            let extended = with_grants(&steps.extended, batch.len());
            grant_ids(&session.fetch(&extended, params).await?)
        } else {
            HashSet::new()
        };
        transaction.commit().await?;
        Ok(Renewal {
            held_elsewhere: seen_live.difference(&locked).cloned().collect(),
            renewed: locked,
        })
    }

    async fn force_release(&self, key: &str, grant: Grant) -> Result<ForcedRelease, sqlx::Error> {
        let mut transaction = self.transaction().await?;
        let session = transaction.session();
        self.lock_fence(session, key, false).await?;
        let (_, found) = self.lock_marker(session, key).await?;
        let forced = match found {
            Some(marker) if marker.is_marker() && marker.live() => {
                self.force_release_shared(session, key, grant).await?
            }
            Some(marker) if marker.is_marker() => {
                // Every share of it ended (or MySQL's lock_marker.sql just wrote it).
                let delete_marker = &self.statements.sharing.delete_marker;
                session.execute(delete_marker, &[key.into()]).await?;
                ForcedRelease::not_held(key)
            }
            found => self.force_release_mutex(session, key, grant, found).await?,
        };
        transaction.commit().await?;
        Ok(forced)
    }

    /// A forced release of `key`, whose lock row is `found` (not a marker).
    async fn force_release_mutex(
        &self,
        session: &mut dyn Session,
        key: &str,
        grant: Grant,
        found: Option<GrantRow>,
    ) -> Result<ForcedRelease, sqlx::Error> {
        Ok(match found.filter(GrantRow::live) {
            None => ForcedRelease::not_held(key),
            Some(found) => {
                let holding = found.holding();
                let its = holding
                    .owner()
                    .is_some_and(|owner| grant.is(owner, Some(found.token)));
                if its {
                    let params = [key.into(), found.owner.as_str().into()];
                    session.execute(&self.statements.delete, &params).await?;
                    let event = format!("released {}", found.token);
                    self.announce(session, key, &event).await?;
                    let released = ReleaseEvent::Released {
                        token: Some(found.token),
                    };
                    ForcedRelease {
                        released: true,
                        announced: Some(released),
                        ..ForcedRelease::of(key, holding)
                    }
                } else {
                    ForcedRelease::of(key, holding)
                }
            }
        })
    }

    /// The single-flight value kept under `key`, if any (none while the results table is
    /// missing: see [`publish_result`](Self::publish_result)).
    async fn read_result(&self, key: &str) -> Result<Option<SharedResult>, sqlx::Error> {
        let mut session = self.sessions.session().await?;
        let rows = match session
            .fetch(&self.statements.result_read, &[key.into()])
            .await
        {
            Err(error) if is_missing_table(self.dialect(), &error) => return Ok(None),
            rows => rows?,
        };
        let Some(row) = rows.first() else {
            return Ok(None);
        };
        match row.as_slice() {
            [Value::Int(token), Value::Text(value)] => Ok(Some(SharedResult {
                token: u64::try_from(*token).unwrap_or_default(),
                value: value.clone().into_bytes(),
            })),
            _ => Err(unexpected("a single-flight value")),
        }
    }

    /// Keeps `value` (of the grant `token`) under `key` for `keep`, if that grant holds the
    /// key and no value of it or a later grant is kept: checked and written under the key's
    /// fence row lock, which its acquires and releases take too. Where the results table is
    /// missing (tables an earlier version created), creates it first if this client creates
    /// tables. Now and then, deletes some lapsed values afterwards, off the call.
    async fn publish_result(
        self: Arc<Self>,
        key: &str,
        token: u64,
        value: &str,
        keep: Duration,
    ) -> Result<Published, sqlx::Error> {
        let schema = &self.statements.results_schema;
        let published = self
            .creating(schema, || self.publish_once(key, token, value, keep))
            .await?;
        if published == Published::Kept && random::unit() < 1.0 / 16.0 {
            tokio::spawn(async move { self.forget_results().await });
        }
        Ok(published)
    }

    async fn publish_once(
        &self,
        key: &str,
        token: u64,
        value: &str,
        keep: Duration,
    ) -> Result<Published, sqlx::Error> {
        let mut transaction = self.transaction().await?;
        let session = transaction.session();
        self.lock_fence(session, key, false).await?;
        let (_, found) = self.read(session, key).await?;
        let holds = found.filter(|grant| grant.live() && !grant.is_marker());
        let holds = holds.map(|grant| grant.holding());
        let holds = matches!(holds, Some(Holding::Held { token: Some(t), .. }) if t == token);
        let kept = session
            .fetch(&self.statements.result_read, &[key.into()])
            .await?;
        let later = kept
            .first()
            .and_then(|row| row.first())
            .and_then(Value::int);
        let later = later.is_some_and(|kept| u64::try_from(kept).unwrap_or_default() >= token);
        let published = if !holds {
            Published::NotHeld
        } else if later {
            Published::LaterKept
        } else {
            session
                .execute(&self.statements.result_delete, &[key.into()])
                .await?;
            let params = [
                key.into(),
                Param::Int(i64::try_from(token).unwrap_or(i64::MAX)),
                value.into(),
                Param::Int(millis(keep)),
            ];
            session
                .execute(&self.statements.result_write, &params)
                .await?;
            Published::Kept
        };
        transaction.commit().await?;
        Ok(published)
    }

    /// Runs `op`; where it finds a table missing and this client creates tables, creates the
    /// tables of `schema` (one an earlier version did not create: the results or the shares)
    /// and runs it again.
    async fn creating<T, F, Fut>(&self, schema: &[String], op: F) -> Result<T, sqlx::Error>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, sqlx::Error>>,
    {
        match op().await {
            Err(error) if self.create_tables && is_missing_table(self.dialect(), &error) => {
                self.create(schema).await?;
                op().await
            }
            done => done,
        }
    }

    /// Creates the tables of `schema` in one transaction, its statements sent as one text: a
    /// round trip instead of one per statement, so that creating them fits between the
    /// cuts of a slow, unreliable link.
    async fn create(&self, schema: &[String]) -> Result<(), sqlx::Error> {
        let mut transaction = self.transaction().await?;
        transaction
            .session()
            .execute(&schema.join(";\n"), &[])
            .await?;
        transaction.commit().await
    }

    /// Deletes some lapsed single-flight values, unless this client does already (on MySQL
    /// at READ COMMITTED, as `forget_releases`); a failure leaves them to the next try.
    async fn forget_results(&self) {
        if self.forgetting_results.swap(true, Ordering::AcqRel) {
            return;
        }
        let forgetting = async {
            let mut session = self.sessions.session().await?;
            self.read_committed_on_mysql(&mut *session).await?;
            session.execute(&self.statements.results_forget, &[]).await
        };
        if let Err(error) = forgetting.await {
            tracing::debug!(target: "fencelock", error = %error, "deleting lapsed single-flight values failed; the next try will");
        }
        self.forgetting_results.store(false, Ordering::Release);
    }

    async fn inspect(&self, key: &str) -> Result<LockState, sqlx::Error> {
        let mut session = self.sessions.session().await?;
        let (fence, found) = self.read(&mut *session, key).await?;
        let holding = match found.filter(GrantRow::live) {
            Some(marker) if marker.is_marker() => {
                let shares = self.read_shares(&mut *session, key).await?;
                shares::shared_holding(shares.holding())
            }
            Some(grant) => grant.holding(),
            None => Holding::Free,
        };
        Ok(LockState {
            holding,
            fence,
            ..LockState::free(key)
        })
    }

    async fn list(&self, glob: &Glob) -> Result<Vec<LockState>, sqlx::Error> {
        let rows = self.lock_rows(glob).await?;
        let shares = if rows.iter().any(|(_, grant, _)| grant.is_marker()) {
            self.live_shares(|name| glob.matches(name)).await?
        } else {
            HashMap::new()
        };
        let states = rows.into_iter().filter_map(|(key, grant, fence)| {
            let holding = if grant.is_marker() {
                shares::shared_holding(shares.get(&key).into_iter().flatten())
            } else {
                grant.holding()
            };
            // A marker whose last share ended since the lock rows were read.
            holding.is_held().then(|| LockState {
                holding,
                fence,
                ..LockState::free(&key)
            })
        });
        Ok(states.collect())
    }

    /// The live grants of `owners` among the locks whose key matches `glob`.
    async fn owned(
        &self,
        glob: &Glob,
        owners: &OwnerPrefix,
    ) -> Result<Vec<OwnedGrant>, sqlx::Error> {
        let rows = self.lock_rows(glob).await?;
        let live = rows
            .into_iter()
            .filter(|(_, grant, _)| grant.live() && !grant.is_marker());
        let mut owned: Vec<OwnedGrant> = live
            .filter_map(|(key, grant, _)| {
                owned_grant(&key, &grant.owner, Some(grant.token), owners)
            })
            .collect();
        let shares = self.live_shares(|name| glob.matches(name)).await?;
        for (key, rows) in &shares {
            // A grant kept after its release (min_hold_ms) is left to its keep.
            let held = rows.iter().filter(|row| row.state == ShareState::Held);
            owned.extend(
                held.filter_map(|row| owned_grant(key, &row.owner, Some(row.token), owners)),
            );
        }
        Ok(owned)
    }

    /// The lock rows whose key matches `glob`, each with its name's fencing counter.
    async fn lock_rows(
        &self,
        glob: &Glob,
    ) -> Result<Vec<(String, GrantRow, Option<u64>)>, sqlx::Error> {
        let mut session = self.sessions.session().await?;
        let rows = session.fetch(&self.statements.list, &[]).await?;
        let mut locks = Vec::new();
        for row in &rows {
            let key = row
                .first()
                .and_then(Value::text)
                .ok_or_else(|| unexpected("a name"))?;
            if glob.matches(key) {
                let grant = GrantRow::from_values(&row[1..])?;
                let fence = row.get(4).and_then(Value::int);
                let fence = fence.and_then(|t| u64::try_from(t).ok());
                locks.push((key.to_owned(), grant, fence));
            }
        }
        Ok(locks)
    }
}

impl SqlBackend {
    /// Runs `op` against the store on the background runtime, settled and retried (see [`Calls`]).
    async fn call<T, F, Fut>(&self, key: Option<&str>, op: F) -> Result<T, LockError>
    where
        T: Send + 'static,
        F: Fn(Arc<Store>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<T, sqlx::Error>> + Send,
    {
        let store = self.store.clone();
        let owned_key = key.map(str::to_owned);
        let call = move |retry_until| async move {
            let key = owned_key.as_deref();
            store.retrying(key, retry_until, || op(store.clone())).await
        };
        self.calls.run(key, call).await
    }
}

// The calls of every lock (see `LockBackend`), each a transaction run by `call`.
impl AsyncBackend for SqlBackend {
    async fn try_acquire(&self, lease: &Lease, turn: Turn) -> Result<Acquire, LockError> {
        if lease.replicas > 0 {
            return Err(LockError::invalid_config(
                "`min_replicas` needs a Redis master with replicas; the SQL backends count \
                 none (the database's own replication settings decide what a commit waits \
                 for): remove `min_replicas` here",
            ));
        }
        if let Turn::Fair(_) = turn {
            return Err(LockError::invalid_config(
                "fair mode needs a line of waiters, which the SQL backends do not keep (a \
                 release wakes the waiters, and they compete): drop `fair`, or use Redis or \
                 the memory backend",
            ));
        }
        let owned = lease.clone();
        self.call(Some(&lease.key), move |store| {
            let lease = owned.clone();
            async move { store.acquire(&lease, turn).await }
        })
        .await?
    }

    async fn watch_releases(&self, key: &str) -> Result<ReleaseWatch, LockError> {
        self.announced_releases(key).await.unwrap_or_else(|| {
            Err(LockError::invalid_config(
                "MySQL announces no releases: its waiters poll every `sleep_ms` (with jitter); \
                 PostgreSQL, Redis and the memory backend announce them",
            ))
        })
    }

    fn watch_subscribed(&self, key: &str) -> Option<ReleaseWatch> {
        #[cfg(feature = "postgres")]
        if let Some(listener) = &self.listener {
            return listener.watch_if_subscribed(key);
        }
        let _ = key;
        None
    }

    fn offers(&self) -> Capabilities {
        Capabilities::EVERY_KIND.with_hands_off(false)
    }

    async fn extend_grants(&self, held: &[HeldLease]) -> Result<Vec<Extended>, LockError> {
        let held = held.to_vec();
        self.call(None, move |store| {
            let held = held.clone();
            async move { store.extend(&held).await }
        })
        .await
    }

    async fn release_grant(&self, lease: &Lease, min_hold: Duration) -> Result<Release, LockError> {
        let owned = lease.clone();
        let tried = AtomicBool::new(false);
        self.call(Some(&lease.key), move |store| {
            let lease = owned.clone();
            let retried = tried.swap(true, Ordering::Relaxed);
            async move { store.release(&lease, min_hold, retried).await }
        })
        .await
    }

    fn operator_calls(&self) -> Option<&dyn OperatorBackend> {
        Some(self)
    }

    fn result_calls(&self) -> Option<&dyn ResultStore> {
        Some(self)
    }

    fn shard_mark_calls(&self) -> Option<&dyn ShardMarks> {
        Some(self)
    }
}

// Exhausted shards of segmented locks: a row per marked shard in `<table>_exhausted`.
impl AsyncShardMarks for SqlBackend {
    async fn mark(&self, held: &HeldLease) -> Result<bool, LockError> {
        let owned = held.clone();
        self.call(Some(&held.lease.key), move |store| {
            let held = owned.clone();
            async move { store.mark_exhausted(&held).await }
        })
        .await
    }

    async fn clear_marks(&self, key: &str, shard: Option<u32>) -> Result<(), LockError> {
        let owned = key.to_owned();
        self.call(Some(key), move |store| {
            let key = owned.clone();
            async move { store.refill(&key, shard).await }
        })
        .await
    }
}

impl SqlBackend {
    /// A watch of `key`'s releases where the database announces them (PostgreSQL's
    /// `NOTIFY`); `None` on MySQL.
    async fn announced_releases(&self, key: &str) -> Option<Result<ReleaseWatch, LockError>> {
        #[cfg(feature = "postgres")]
        if let Some(listener) = &self.listener {
            return Some(listener.subscribe(key).await);
        }
        let _ = key;
        None
    }
}

// Single-flight values (`action = Share`): a row per name in `<table>_results`.
impl AsyncResults for SqlBackend {
    async fn watch_kept(&self, key: &str) -> Result<Option<ResultChange>, LockError> {
        let releases = self.announced_releases(key).await.transpose()?;
        Ok(releases.map(change_at_release))
    }

    async fn read_kept(&self, key: &str) -> Result<Option<SharedResult>, LockError> {
        let owned = key.to_owned();
        self.call(Some(key), move |store| {
            let key = owned.clone();
            async move { store.read_result(&key).await }
        })
        .await
    }

    async fn publish(
        &self,
        key: &str,
        result: &SharedResult,
        keep: Duration,
    ) -> Result<Published, LockError> {
        let value = String::from_utf8(result.value.clone())
            .ok()
            .filter(|text| !text.contains('\0'))
            .ok_or_else(|| {
                LockError::invalid_config(
                    "the SQL stores keep a single-flight value as text, and this one is not \
                     UTF-8 or holds a NUL character",
                )
            })?;
        let (owned, token, value) = (key.to_owned(), result.token, Arc::new(value));
        self.call(Some(key), move |store| {
            let (key, value) = (owned.clone(), value.clone());
            async move { store.publish_result(&key, token, &value, keep).await }
        })
        .await
    }
}

// An operator's calls (see `OperatorBackend`).
impl AsyncOperator for SqlBackend {
    async fn list_held(&self, pattern: &str) -> Result<Vec<LockState>, LockError> {
        let glob = Arc::new(Glob::parse(pattern)?);
        self.call(None, move |store| {
            let glob = glob.clone();
            async move { store.list(&glob).await }
        })
        .await
    }

    async fn inspect_held(&self, key: &str) -> Result<LockState, LockError> {
        let owned = key.to_owned();
        self.call(Some(key), move |store| {
            let key = owned.clone();
            async move { store.inspect(&key).await }
        })
        .await
    }

    async fn force_release_held(
        &self,
        key: &str,
        grant: Grant,
    ) -> Result<ForcedRelease, LockError> {
        let owned = key.to_owned();
        self.call(Some(key), move |store| {
            let key = owned.clone();
            async move { store.force_release(&key, grant).await }
        })
        .await
    }

    async fn owned_grants(
        &self,
        pattern: &str,
        owners: &OwnerPrefix,
    ) -> Result<Vec<OwnedGrant>, LockError> {
        let glob = Arc::new(Glob::parse(pattern)?);
        let owners = Arc::new(owners.clone());
        self.call(None, move |store| {
            let (glob, owners) = (glob.clone(), owners.clone());
            async move { store.owned(&glob, &owners).await }
        })
        .await
    }
}

/// How a SQL client keeps its locks and how long it waits: [`SqlClientBuilder::settings`]
/// takes them at once. Start from [`SqlSettings::default`] and change the fields you need.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SqlSettings {
    /// The lock table's name (default [`DEFAULT_TABLE`]); see [`SqlClientBuilder::table`].
    pub table: String,
    /// The connection pool's size (default [`DEFAULT_MAX_CONNECTIONS`]).
    pub max_connections: u32,
    /// Whether connecting creates the tables when they are missing (default `true`).
    pub create_tables: bool,
    /// How long opening a connection may take (default [`DEFAULT_CONNECT_TIMEOUT`]), and one
    /// call, retries of lost races included (default [`DEFAULT_RESPONSE_TIMEOUT`]).
    pub timeouts: Timeouts,
}

impl Default for SqlSettings {
    fn default() -> Self {
        SqlSettings {
            table: DEFAULT_TABLE.to_owned(),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            create_tables: true,
            timeouts: Timeouts::new(DEFAULT_CONNECT_TIMEOUT, DEFAULT_RESPONSE_TIMEOUT),
        }
    }
}

/// A builder for a PostgreSQL or MySQL client: its [`SqlSettings`] (the lock table's name,
/// the pool's size, timeouts). From [`LockClient::postgres_builder`] or
/// [`LockClient::mysql_builder`].
#[derive(Clone)]
pub struct SqlClientBuilder {
    dialect: Dialect,
    url: String,
    settings: SqlSettings,
    instance: Option<String>,
}

// The URL's password stays out of Debug output.
impl std::fmt::Debug for SqlClientBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlClientBuilder")
            .field("database", &self.dialect.name())
            .field("url", &redacted(&self.url))
            .field("settings", &self.settings)
            .finish()
    }
}

/// The pool's size unless configured.
pub const DEFAULT_MAX_CONNECTIONS: u32 = 10;
/// How long opening a connection may take unless configured.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one call (an attempt, a renewal batch, a release, with its retries) may take
/// unless configured.
pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a statement waits for a row lock held by another transaction before it gives
/// up (and the backend tries the transaction again): the lock transactions take
/// milliseconds, so a longer wait means a stopped client holds one.
pub(crate) const LOCK_WAIT: Duration = Duration::from_secs(1);

/// How long a transaction may sit idle before the server ends it (PostgreSQL, MariaDB): a
/// client stopped inside one would otherwise keep its name's fence row locked.
pub(crate) const IDLE_IN_TRANSACTION: Duration = Duration::from_secs(5);

impl SqlClientBuilder {
    fn new(dialect: Dialect, url: &str) -> Self {
        SqlClientBuilder {
            dialect,
            url: url.to_owned(),
            settings: SqlSettings::default(),
            instance: None,
        }
    }

    /// The instance this client runs as (see [`OpenBuilder::instance_id`](crate::OpenBuilder::instance_id)).
    pub fn instance_id(mut self, name: impl Into<String>) -> Self {
        self.instance = Some(name.into());
        self
    }

    /// Every setting at once.
    pub fn settings(mut self, settings: SqlSettings) -> Self {
        self.settings = settings;
        self
    }

    /// The lock table's name (default [`DEFAULT_TABLE`]); the fence, release, results, shares
    /// and exhausted shards' tables are named after it, with `_fences`, `_releases`,
    /// `_results`, `_shares` and `_exhausted`. Lowercase ASCII letters, digits and `_`, starting with a letter or `_`, at
    /// most 48 bytes; the table lives in the connection's default schema (database).
    pub fn table(mut self, name: impl Into<String>) -> Self {
        self.settings.table = name.into();
        self
    }

    /// The connection pool's size (default [`DEFAULT_MAX_CONNECTIONS`]).
    pub fn max_connections(mut self, connections: u32) -> Self {
        self.settings.max_connections = connections;
        self
    }

    /// How long opening a connection may take (default [`DEFAULT_CONNECT_TIMEOUT`]).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.settings.timeouts.connect = timeout;
        self
    }

    /// How long one call may take, retries of lost races included (default
    /// [`DEFAULT_RESPONSE_TIMEOUT`]); past it, the call fails with [`LockError::Backend`].
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.settings.timeouts.response = timeout;
        self
    }

    /// Whether [`connect`](Self::connect) creates the tables when they are missing
    /// (default `true`; it needs the CREATE privilege). With `false`, create them beforehand
    /// with [`schema`](Self::schema)'s statements, say in a migration.
    pub fn create_tables(mut self, create: bool) -> Self {
        self.settings.create_tables = create;
        self
    }

    /// The statements that create the tables (each idempotent), in order: for a migration.
    pub fn schema(&self) -> Result<Vec<String>, LockError> {
        check_table_name(&self.settings.table)?;
        let statements = Statements::new(self.dialect, &self.settings.table);
        Ok(statements.schema)
    }

    /// Connects (opening one connection now, so that a wrong URL, password or privilege is
    /// an error here), creates the tables if they are missing and allowed to, and returns
    /// the client.
    pub async fn connect(self) -> Result<LockClient, LockError> {
        let settings = &self.settings;
        check_table_name(&settings.table)?;
        let instance = InstanceId::of_setting(self.instance.as_deref())?;
        if settings.max_connections == 0 {
            return Err(LockError::invalid_config(
                "`max_connections` is 0: a pool needs at least one connection",
            ));
        }
        let statements = Statements::new(self.dialect, &settings.table);
        let at = redacted(&self.url);
        let pool = match self.dialect {
            #[cfg(feature = "postgres")]
            Dialect::Postgres => postgres::pool(&self.url, settings).await,
            #[cfg(feature = "mysql")]
            Dialect::MySql => mysql::pool(&self.url, settings).await,
            #[allow(unreachable_patterns)]
            _ => {
                return Err(LockError::invalid_config(
                    "this SQL backend is not built in",
                ));
            }
        };
        let pool = pool.map_err(|error| backend_error(&statements, &at, None, error))?;
        #[cfg(feature = "postgres")]
        let listener = pool.listener(channel(&settings.table), settings.timeouts.response);
        // Waiters subscribe where releases are announced (PostgreSQL), else poll.
        #[cfg(feature = "postgres")]
        let notifies = listener.is_some();
        #[cfg(not(feature = "postgres"))]
        let notifies = false;
        let store = Store {
            statements,
            sessions: pool.sessions,
            at,
            release_memory: release_memory(settings.timeouts.response),
            create_tables: settings.create_tables,
            forgetting_results: AtomicBool::new(false),
            forgetting: AtomicBool::new(false),
        };
        let backend = SqlBackend {
            store: Arc::new(store),
            calls: Calls::new(settings.timeouts.response),
            #[cfg(feature = "postgres")]
            listener,
        };
        // On the background runtime, as every call: a connection the pool opens belongs to the runtime
        // it was opened on.
        let (store, create) = (backend.store.clone(), settings.create_tables);
        let ensuring = |retry_until| async move { store.ensure_tables(create, retry_until).await };
        backend.calls.run(None, ensuring).await?;
        Ok(LockClient::with_background(
            Arc::new(backend),
            Background::Driver,
            notifies,
            instance,
        ))
    }
}

/// Runs `opening` on the background runtime, where the pool must live (its connections are
/// driven there, whatever runtime its users run on).
async fn on_background<T: Send + 'static>(
    opening: impl Future<Output = Result<T, sqlx::Error>> + Send + 'static,
) -> Result<T, sqlx::Error> {
    let task = Background::Driver
        .spawn(opening)
        .map_err(|error| sqlx::Error::Configuration(Box::new(error)))?;
    task.await
        .map_err(|error| sqlx::Error::Configuration(Box::new(error)))?
}

/// Runs `attempt` until it succeeds, fails other than on a connection cut under it, or
/// `timeout` has passed: a first connection that a network blip cuts is tried again, while a
/// refused connection, login or database is an answer.
async fn connecting<T, F, Fut>(timeout: Duration, attempt: F) -> Result<T, sqlx::Error>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<T, sqlx::Error>>,
{
    use std::io::ErrorKind;
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        match attempt().await {
            Err(sqlx::Error::Io(cut))
                if tokio::time::Instant::now() < deadline
                    && matches!(
                        cut.kind(),
                        ErrorKind::UnexpectedEof
                            | ErrorKind::ConnectionReset
                            | ErrorKind::ConnectionAborted
                            | ErrorKind::BrokenPipe
                    ) =>
            {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            done => return done,
        }
    }
}

/// An open pool, and (PostgreSQL) what a release listener connects with.
pub(crate) struct Pool {
    sessions: Box<dyn Sessions>,
    #[cfg(feature = "postgres")]
    listens: Option<sqlx::PgPool>,
}

#[cfg(feature = "postgres")]
impl Pool {
    fn listener(&self, channel: String, response_timeout: Duration) -> Option<postgres::Listener> {
        let pool = self.listens.clone()?;
        Some(postgres::Listener::new(pool, channel, response_timeout))
    }
}

/// The notification channel of the lock table `table`.
fn channel(table: &str) -> String {
    format!("fencelock_{table}")
}

fn check_table_name(table: &str) -> Result<(), LockError> {
    let mut chars = table.chars();
    let starts_well = chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_');
    let rest_well = chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if starts_well && rest_well && table.len() <= MAX_TABLE_LEN {
        return Ok(());
    }
    Err(LockError::invalid_config(format!(
        "the lock table name {table:?} is not one fencelock accepts: use lowercase ASCII \
         letters, digits and `_`, starting with a letter or `_`, at most {MAX_TABLE_LEN} \
         bytes (e.g. `fencelock_locks`)"
    )))
}

impl LockClient {
    /// Connects to PostgreSQL at `url` (`postgres://user:password@host:5432/database`) with
    /// the default settings of [`LockClient::postgres_builder`]. Releases are announced
    /// with `LISTEN/NOTIFY`.
    #[cfg(feature = "postgres")]
    pub async fn postgres(url: &str) -> Result<LockClient, LockError> {
        LockClient::postgres_builder(url).connect().await
    }

    /// A builder for a PostgreSQL client: table name, pool size, timeouts.
    #[cfg(feature = "postgres")]
    pub fn postgres_builder(url: &str) -> SqlClientBuilder {
        SqlClientBuilder::new(Dialect::Postgres, url)
    }

    /// Connects to MySQL or MariaDB at `url` (`mysql://user:password@host:3306/database`)
    /// with the default settings of [`LockClient::mysql_builder`]. Waiters poll every
    /// `sleep_ms` (jittered): MySQL announces no releases.
    #[cfg(feature = "mysql")]
    pub async fn mysql(url: &str) -> Result<LockClient, LockError> {
        LockClient::mysql_builder(url).connect().await
    }

    /// A builder for a MySQL or MariaDB client: table name, pool size, timeouts.
    #[cfg(feature = "mysql")]
    pub fn mysql_builder(url: &str) -> SqlClientBuilder {
        SqlClientBuilder::new(Dialect::MySql, url)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_names_are_plain_lowercase_identifiers() {
        for good in ["fencelock_locks", "_t", "locks2"] {
            assert!(check_table_name(good).is_ok(), "{good}");
        }
        let too_long = "t".repeat(MAX_TABLE_LEN + 1);
        for bad in [
            "",
            "Locks",
            "2locks",
            "locks;drop",
            "a-b",
            "\"x\"",
            too_long.as_str(),
        ] {
            let error = check_table_name(bad).unwrap_err().to_string();
            assert!(error.contains("lowercase ASCII"), "{bad}: {error}");
        }
    }

    /// A settings value replaces every setting; the shorthands change one of them.
    #[cfg(feature = "postgres")]
    #[test]
    fn settings_are_taken_whole_and_shorthands_change_one() {
        let settings = SqlSettings {
            table: "billing_locks".to_owned(),
            ..SqlSettings::default()
        };
        let builder = LockClient::postgres_builder("postgres://u:secret@db/app")
            .table("replaced")
            .settings(settings.clone());
        assert_eq!(builder.settings, settings);
        let schema = builder.schema().unwrap().join("\n");
        assert!(schema.contains("billing_locks_fences"), "{schema}");
        let builder = builder.response_timeout(Duration::from_millis(250));
        assert_eq!(
            builder.settings.timeouts.response,
            Duration::from_millis(250)
        );
        assert_eq!(builder.settings.timeouts.connect, DEFAULT_CONNECT_TIMEOUT);
        let shown = format!("{builder:?}");
        assert!(
            shown.contains("billing_locks") && !shown.contains("secret"),
            "{shown}"
        );
    }
}

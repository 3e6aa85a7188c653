//! Redlock: one lock over several independent Redis masters, held while a majority of them
//! grants it.
//!
//! Each master keeps the single-node layout and scripts of [`RedisBackend`] (so each settles
//! its own lost replies). An acquire asks every master at once; it succeeds when a majority
//! granted within the lease's validity (the lease less the time the attempt took and less
//! the clock drift allowed, 1 % of the lease plus 2 ms, as the Redlock description sets it),
//! and otherwise takes back whatever it was granted. Renewal and release go to every master,
//! and a lease renewed on fewer than a majority counts as lost.
//!
//! Fencing: every master grants `max(its last token + 1, the client's proposal)`, the proposal
//! being the client's clock in µs, the same for every master of one attempt; the client takes
//! the greatest token of the granting majority and writes it back to the masters that gave
//! less (`raise.lua`) before returning it (when their counters agree, as after a write-back,
//! none did, and the attempt costs one round trip). Every returned token is then on the counter of a
//! majority, and any later majority shares one master with it, whose next token is greater.
//!
//! Waiting: releases are heard from every master that could be subscribed. Masters keep no
//! common line of waiters (a release on each master could hand the key to a different
//! waiter), so a release hands nothing over: it wakes the waiters, which attempt again; fair
//! mode is refused.
//!
//! Shared kinds (read/write locks, semaphores, segmented locks): each master admits by the
//! rule of one server (`sharing.rs`) among its own grants, and an attempt holds what a
//! majority granted, with one token settled as for the mutex (`raise.lua` rewrites a grant in
//! a shared key's hash too, and `give_back.lua` deletes one).
//! - A writer excludes every other holder: its majority and any reader's or writer's share a
//!   master, which admitted only one of them. A waiting writer keeps a place on every master
//!   (the only place Redlock's masters keep), so that readers arriving after it are held back
//!   there as on one server and a stream of readers does not starve it; when it hears of a
//!   release it attempts again.
//! - Permits and shards: the masters of one attempt look for a free slot from one start, and
//!   the attempt holds the slot that a majority granted, giving back the grants of other
//!   slots. Two holders of one slot would need two majorities, which share a master that
//!   granted it to one of them only: holders' slots differ, so no more hold at once than the
//!   largest count asked for (slots lie below the count of the request that took them). Each
//!   master lets the smallest count among its own holders win, but holders that asked for
//!   different counts may count past the smallest together on different majorities. A count
//!   of holders per master would not be enough: with 5 masters and 2 permits, three holders
//!   can each win 3 masters without any master holding more than 2.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use std::future::Future;

use futures_util::future::join_all;

use super::redis::{Proposal, RedisBackend, RedisSettings};
use super::{
    Acquire, AsyncBackend, AsyncOperator, AsyncShardMarks, Extended, HeldLease, Lease, LockBackend,
    Release, ReleaseWatch, ShardMarks, Turn,
};
use crate::backend::{
    Capabilities, ForcedRelease, Grant, Holding, LockState, Masters, OperatorBackend, OwnedGrant,
    OwnerPrefix, QUEUE_SHOWN, SharedGrant,
};
use crate::release_hub::{OwnerTag, ReleaseEvent};
use crate::{LockError, LockKind, random};

/// The clock drift a Redlock lease allows for: this share of the lease, plus
/// [`CLOCK_DRIFT_MIN`].
const CLOCK_DRIFT_FACTOR: f64 = 0.01;
const CLOCK_DRIFT_MIN: Duration = Duration::from_millis(2);

/// Default time a master may take to answer, for Redlock: a dead or frozen master must cost
/// an attempt little of its lease.
pub const DEFAULT_NODE_TIMEOUT: Duration = Duration::from_millis(500);

/// Locks over several independent Redis masters (Redlock).
pub struct RedlockBackend {
    masters: Vec<RedisBackend>,
    /// How long each master may take for one call: a slow minority must not slow everyone.
    node_timeout: Duration,
}

impl std::fmt::Debug for RedlockBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let addrs: Vec<String> = self.masters.iter().map(RedisBackend::addr).collect();
        f.debug_struct("RedlockBackend")
            .field("masters", &addrs)
            .finish()
    }
}

impl RedlockBackend {
    /// Connects to every master of `urls` with `settings` (a majority must answer `PING`;
    /// the others are reached when they come up).
    pub async fn connect(
        urls: impl IntoIterator<Item = impl AsRef<str>>,
        settings: RedisSettings,
    ) -> Result<Self, LockError> {
        let clients = urls
            .into_iter()
            .map(|url| super::redis::open(url.as_ref(), None))
            .collect::<Result<Vec<_>, _>>()?;
        RedlockBackend::from_clients(clients, settings).await
    }

    /// A backend over one `redis::Client` per master, built by the caller (custom TLS
    /// settings, for instance).
    pub async fn from_clients(
        clients: Vec<redis::Client>,
        settings: RedisSettings,
    ) -> Result<Self, LockError> {
        let node_timeout = settings.timeouts.response;
        let masters = clients
            .into_iter()
            .map(|client| RedisBackend::redlock_master(client, settings.clone()))
            .collect::<Result<Vec<_>, _>>()?;
        let backend = RedlockBackend::new(masters, node_timeout)?;
        let reachable = backend.on_every_master(RedisBackend::check_reachable).await;
        // A master that answers but cannot serve (a cluster node) is a mistake to fix, not an
        // outage that a majority rides out.
        let misconfigured = reachable.iter().find_map(|checked| match checked {
            Err(error @ LockError::InvalidConfig { .. }) => Some(error.clone()),
            _ => None,
        });
        if let Some(error) = misconfigured {
            return Err(error);
        }
        backend.majority_answered(None, "cannot connect to Redlock's masters", reachable)?;
        Ok(backend)
    }

    fn new(masters: Vec<RedisBackend>, node_timeout: Duration) -> Result<Self, LockError> {
        if masters.is_empty() {
            return Err(LockError::invalid_config(
                "Redlock needs the URLs of its masters: give at least one (3 or 5 independent \
                 servers are usual)",
            ));
        }
        let mut addrs: Vec<String> = masters.iter().map(RedisBackend::addr).collect();
        addrs.sort();
        if let Some(twice) = addrs.windows(2).find(|pair| pair[0] == pair[1]) {
            return Err(LockError::invalid_config(format!(
                "Redlock's masters must be distinct servers, but {} is given twice: it would \
                 count twice towards the majority",
                twice[0]
            )));
        }
        Ok(RedlockBackend {
            masters,
            node_timeout,
        })
    }

    /// Runs `call` on every master at once, each cut off after the node timeout (a cut-off
    /// call may still run on its master; everything after it on that master's connection
    /// runs after it, and a connection given up is closed on the server first).
    async fn on_every_master<'a, T, F>(
        &'a self,
        call: impl Fn(&'a RedisBackend) -> F,
    ) -> Vec<Result<T, LockError>>
    where
        F: Future<Output = Result<T, LockError>> + 'a,
    {
        let every = (0..self.masters.len()).map(|m| (m, ()));
        self.on_masters(every, |m, ()| call(&self.masters[m])).await
    }

    /// Runs `call` on the masters of `which` (each with its own argument) at once, each cut
    /// off after the node timeout.
    async fn on_masters<'a, A, T, F>(
        &'a self,
        which: impl IntoIterator<Item = (usize, A)>,
        call: impl Fn(usize, A) -> F,
    ) -> Vec<Result<T, LockError>>
    where
        F: Future<Output = Result<T, LockError>> + 'a,
    {
        let call = &call;
        join_all(which.into_iter().map(|(m, argument)| async move {
            let timeout = self.node_timeout;
            tokio::time::timeout(timeout, call(m, argument))
                .await
                .unwrap_or_else(|_| {
                    Err(LockError::backend(
                        None,
                        format!(
                            "Redis at {} gave no answer within {timeout:?}",
                            self.masters[m].addr()
                        ),
                        None,
                    ))
                })
        }))
        .await
    }

    /// Refuses masters whose `maxmemory-policy` may evict keys (see
    /// [`RedisBackend::check_eviction_policy`]); masters that do not answer pass.
    pub async fn check_eviction_policy(&self) -> Result<(), LockError> {
        let checks = self
            .on_every_master(RedisBackend::check_eviction_policy)
            .await;
        match checks
            .into_iter()
            .find(|c| matches!(c, Err(e) if !e.is_backend()))
        {
            Some(refused) => refused,
            None => Ok(()),
        }
    }

    /// How many masters make a majority.
    pub fn quorum(&self) -> usize {
        self.masters.len() / 2 + 1
    }

    /// The greatest of `values` (one per master) that a majority reaches: the quorum-th
    /// greatest, or on a minority the greatest there is. So a lease's remaining time is how
    /// long a majority still holds it.
    fn on_majority<T: Ord>(&self, values: impl Iterator<Item = T>) -> Option<T> {
        let mut values: Vec<T> = values.collect();
        values.sort_unstable_by(|a, b| b.cmp(a));
        let quorum = self.quorum().min(values.len());
        values.into_iter().nth(quorum.checked_sub(1)?)
    }

    /// The answers of the masters that gave one, or an error when fewer than a majority did
    /// (naming how many failed, and the first failure: a master may have answered and still
    /// failed, as one whose replicas did not confirm a grant for `min_replicas`).
    fn majority_answered<T>(
        &self,
        key: Option<&str>,
        what: &str,
        replies: Vec<Result<T, LockError>>,
    ) -> Result<Vec<(usize, T)>, LockError> {
        let mut answers = Vec::with_capacity(replies.len());
        let mut first_failure = None;
        for (master, reply) in replies.into_iter().enumerate() {
            match reply {
                Ok(answer) => answers.push((master, answer)),
                Err(error) => {
                    first_failure.get_or_insert(error);
                }
            }
        }
        if answers.len() >= self.quorum() {
            return Ok(answers);
        }
        Err(LockError::backend(
            key,
            format!(
                "{what}: {} of {} masters failed, and a majority ({}) must succeed",
                self.masters.len() - answers.len(),
                self.masters.len(),
                self.quorum()
            ),
            first_failure.map(|e| Arc::new(e) as _),
        ))
    }
}

/// How long a lease asked for at `started` is valid for on a majority, or `None` when the
/// attempt used it up.
fn validity(ttl: Duration, started: Instant) -> Option<Duration> {
    let drift = ttl.mul_f64(CLOCK_DRIFT_FACTOR) + CLOCK_DRIFT_MIN;
    ttl.checked_sub(started.elapsed() + drift)
        .filter(|left| !left.is_zero())
}

// Acquire.
impl RedlockBackend {
    /// Makes the grants of `agreeing` carry one token, the greatest granted, and returns it;
    /// `None` when they are fewer than a majority, or fewer than a majority carry it in time.
    async fn settle_token(
        &self,
        lease: &Lease,
        agreeing: &[(usize, u64)],
        started: Instant,
    ) -> Option<u64> {
        if agreeing.len() < self.quorum() || validity(lease.ttl, started).is_none() {
            return None;
        }
        let chosen = agreeing.iter().map(|&(_, token)| token).max()?;
        let lower: Vec<&(usize, u64)> = agreeing.iter().filter(|(_, t)| *t < chosen).collect();
        let raised = self
            .on_masters(lower.iter().copied().copied(), |m, token| {
                self.masters[m].raise_token(lease, token, chosen)
            })
            .await;
        let carrying =
            agreeing.len() - lower.len() + raised.iter().filter(|r| matches!(r, Ok(true))).count();
        (carrying >= self.quorum() && validity(lease.ttl, started).is_some()).then_some(chosen)
    }

    /// Takes back, silently, what an attempt was granted outside the grants `kept` (a
    /// release would wake every waiter into another attempt): grants of another slot and,
    /// when nothing is kept, whatever a master whose reply was lost may have granted. After
    /// a success such a master is left alone, as the holder's: a give-back there could cost
    /// the attempt the node timeout.
    async fn give_back_unkept(&self, lease: &Lease, replies: &[Answer], kept: &[(usize, u64)]) {
        let unkept = replies
            .iter()
            .enumerate()
            .filter(|(master, reply)| match reply {
                Ok(Acquire::Held { .. }) => false,
                Ok(Acquire::Granted { .. }) => !kept.iter().any(|(k, _)| k == master),
                Err(_) => kept.is_empty(),
            })
            .map(|(master, _)| (master, ()));
        self.on_masters(unkept, |m, ()| self.masters[m].give_back(lease))
            .await;
    }

    /// The answer to an attempt that holds nothing: `Held`, with the shortest lease a master
    /// named and the greatest token any master knew; or the error of the foreign data in the
    /// key when so many masters have it that no majority can form (a master with foreign
    /// data is one that cannot grant, the key is not unusable for that); or a backend error
    /// when fewer than a majority answered.
    fn refusal(&self, lease: &Lease, replies: Vec<Answer>) -> Result<Acquire, LockError> {
        let foreign: Vec<&LockError> = replies
            .iter()
            .filter_map(|reply| reply.as_ref().err().filter(|e| refuses_alike(e)))
            .collect();
        if foreign.len() > self.masters.len() - self.quorum() {
            return Err(foreign[0].clone());
        }
        let answers = self.majority_answered(Some(&lease.key), "acquiring failed", replies)?;
        let mut remaining: Option<Duration> = None;
        let mut latest_token = 0;
        for (_, answer) in answers {
            match answer {
                Acquire::Granted { token, .. } => latest_token = latest_token.max(token),
                Acquire::Held {
                    remaining: left,
                    latest_token: latest,
                } => {
                    remaining = match (remaining, left) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    };
                    latest_token = latest_token.max(latest);
                }
            }
        }
        Ok(Acquire::Held {
            remaining,
            latest_token,
        })
    }
}

/// One master's answer to an acquire attempt.
type Answer = Result<Acquire, LockError>;

/// How an attempt of `kind` competes on each master. Masters keep no common line, so only a
/// waiting writer keeps a place, on every master: there it holds back the readers that arrive
/// after it, as on one server (the key is never handed to it: it attempts again when it hears
/// of a release). Fair mode is refused.
fn turn_on_masters(kind: LockKind, turn: Turn) -> Result<Turn, LockError> {
    match turn {
        Turn::Fair(_) => Err(LockError::invalid_config(
            "fair mode needs one line of waiters, and Redlock's masters keep none (a release \
             on each could favour a different waiter): drop `fair`, or lock on a single Redis",
        )),
        Turn::InLine(place) if kind == LockKind::Write => Ok(Turn::InLine(place)),
        Turn::InLine(_) | Turn::Once => Ok(Turn::Once),
    }
}

/// The slot that the most masters granted, and those masters with their tokens. A permit or
/// shard is held only where a majority granted that same one: two holders of one slot would
/// need two majorities, which share a master that granted it to one of them only. Readers,
/// writers and a mutex name no slot: their grants form one group.
fn largest_agreement(replies: &[Answer]) -> (Option<u32>, Vec<(usize, u64)>) {
    let mut by_slot: BTreeMap<Option<u32>, Vec<(usize, u64)>> = BTreeMap::new();
    for (master, reply) in replies.iter().enumerate() {
        if let Ok(Acquire::Granted { token, slot }) = reply {
            by_slot.entry(*slot).or_default().push((master, *token));
        }
    }
    by_slot
        .into_iter()
        .max_by_key(|(_, grants)| grants.len())
        .unwrap_or_default()
}

/// This machine's clock in µs since the Unix epoch (0 before it): a proposal only, the
/// masters' counters keep the tokens increasing whatever it says.
fn clock_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_micros() as u64)
}

/// A master's refusal that every master in the same state gives alike: foreign data in the
/// key, or every shard marked exhausted.
fn refuses_alike(error: &LockError) -> bool {
    matches!(
        error,
        LockError::KeyInUse { .. } | LockError::Exhausted { .. }
    )
}

// Release.
impl RedlockBackend {
    /// Releases `lease` on every master (`token`: see `RedisBackend::release_of`): released
    /// where a majority released it.
    async fn release_on_masters(
        &self,
        lease: &Lease,
        token: Option<u64>,
        min_hold: Duration,
    ) -> Result<Release, LockError> {
        let replies = self
            .on_every_master(|m| m.release_of(lease, token, min_hold))
            .await;
        let released = replies
            .iter()
            .filter(|r| matches!(r, Ok(Release::Released)))
            .count();
        // A master that could not tell (or did not answer) may have held it.
        let unknown = replies
            .iter()
            .filter(|r| !matches!(r, Ok(Release::Released | Release::NotOwner)))
            .count();
        let first_failure = replies.into_iter().find_map(Result::err);
        if released >= self.quorum() {
            Ok(Release::Released)
        } else if released + unknown < self.quorum() {
            Ok(Release::NotOwner)
        } else {
            // The masters that did not answer decide whether a majority still held it.
            Err(LockError::backend(
                Some(&lease.key),
                format!(
                    "releasing failed: {released} of {} masters released and {unknown} did \
                     not answer or could not tell, so whether a majority held the lease is \
                     unknown",
                    self.masters.len()
                ),
                first_failure.map(|e| Arc::new(e) as _),
            ))
        }
    }
}

// The operator's view: each lock merged over the masters.
impl RedlockBackend {
    /// One lock's state over the masters that answered (`states`: those on which the key
    /// holds anything; the others hold nothing there).
    fn merge(&self, key: &str, states: Vec<LockState>, answered: usize) -> LockState {
        let (holding, masters) =
            self.merge_holdings(states.iter().map(|state| &state.holding), answered);
        let fence = states.iter().filter_map(|state| state.fence).max();
        // Masters keep no line of waiters; should one have some, the longest line is shown.
        let line = states.into_iter().max_by_key(|state| state.waiters);
        let (waiters, queue) = line.map_or((0, Vec::new()), |state| (state.waiters, state.queue));
        LockState {
            key: key.to_owned(),
            holding,
            waiters,
            queue,
            fence,
            masters: Some(masters),
        }
    }

    /// Who holds a key over the masters that answered: the owner holding it on the most of
    /// them (of two, the one with the greater token), with the greatest token it holds and
    /// the time until fewer than a majority hold it (on a minority: until the last lease
    /// ends); foreign data when no owner holds it and a master has some.
    fn merge_holdings<'h>(
        &self,
        holdings: impl Iterator<Item = &'h Holding> + Clone,
        answered: usize,
    ) -> (Holding, Masters) {
        let mut by_owner: BTreeMap<OwnerTag, Vec<&Holding>> = BTreeMap::new();
        for holding in holdings.clone() {
            if let Some(owner) = holding.owner() {
                by_owner.entry(owner).or_default().push(holding);
            }
        }
        let top = by_owner
            .into_values()
            .max_by_key(|held| (held.len(), held.iter().filter_map(|h| h.token()).max()));
        let masters = |holding| Masters {
            holding,
            answered,
            of: self.masters.len(),
        };
        // Shared grants are shown unless a mutex's owner holds the key on more masters (the
        // kinds conflict only where another program mixed them).
        let shared_on = holdings
            .clone()
            .filter(|h| matches!(h, Holding::Shared { .. }))
            .count();
        if shared_on > 0 && top.as_ref().is_none_or(|held| held.len() <= shared_on) {
            let (shared, fewest) = self.merge_shared(holdings);
            return (shared, masters(fewest));
        }
        let Some(held) = top else {
            let foreign = holdings.filter(|h| matches!(h, Holding::Foreign { .. }));
            let holding = foreign.clone().next().cloned().unwrap_or(Holding::Free);
            return (holding, masters(foreign.count()));
        };
        let until = self
            .on_majority(held.iter().filter_map(|h| h.remaining()))
            .unwrap_or(Duration::ZERO);
        let token = held.iter().filter_map(|h| h.token()).max();
        let merged = match held[0] {
            Holding::Held { owner, .. } => Holding::Held {
                owner: *owner,
                token,
                remaining: until,
            },
            Holding::Kept { owner, .. } => Holding::Kept {
                owner: *owner,
                remaining: until,
            },
            unowned => unowned.clone(),
        };
        (merged, masters(held.len()))
    }

    /// The grants of a shared kind over the masters: each grant a majority holds (on a
    /// minority, every grant there is), with the time until fewer than a majority hold it, as
    /// for a mutex; and on how many masters the grant shown on the fewest is.
    fn merge_shared<'h>(&self, holdings: impl Iterator<Item = &'h Holding>) -> (Holding, usize) {
        let mut by_grant: BTreeMap<(OwnerTag, Option<u32>), Vec<&SharedGrant>> = BTreeMap::new();
        // Each master's count and longest lease, of all its grants (shown or not).
        let mut totals = Vec::new();
        for (grants, total) in holdings.filter_map(|holding| match holding {
            Holding::Shared {
                grants,
                holders,
                longest,
            } => Some((grants, (*holders, *longest))),
            _ => None,
        }) {
            totals.push(total);
            for grant in grants {
                by_grant
                    .entry((grant.owner, grant.slot))
                    .or_default()
                    .push(grant);
            }
        }
        let on_majority = by_grant.values().any(|on| on.len() >= self.quorum());
        let mut grants: Vec<(SharedGrant, usize)> = by_grant
            .into_values()
            .filter(|on| !on_majority || on.len() >= self.quorum())
            .map(|on| {
                let until = self.on_majority(on.iter().map(|grant| grant.remaining));
                let token = on.iter().filter_map(|grant| grant.token).max();
                let merged = SharedGrant {
                    token,
                    remaining: until.unwrap_or(Duration::ZERO),
                    ..on[0].clone()
                };
                (merged, on.len())
            })
            .collect();
        grants.sort_by_key(|(grant, _)| grant.remaining);
        let fewest = grants.iter().map(|(_, on)| *on).min().unwrap_or(0);
        // Past the grants each master shows, its totals count: as many as a majority has.
        let holders = grants.len().max(
            self.on_majority(totals.iter().map(|(holders, _)| *holders))
                .unwrap_or(0),
        );
        let longest = grants
            .last()
            .map(|(grant, _)| grant.remaining)
            .max(self.on_majority(totals.iter().map(|(_, longest)| *longest)))
            .unwrap_or(Duration::ZERO);
        let grants = grants.into_iter().map(|(grant, _)| grant).take(QUEUE_SHOWN);
        let shared = Holding::Shared {
            grants: grants.collect(),
            holders,
            longest,
        };
        (shared, fewest)
    }
}

// The calls of every lock (see `LockBackend`).
impl AsyncBackend for RedlockBackend {
    async fn try_acquire(&self, lease: &Lease, turn: Turn) -> Result<Acquire, LockError> {
        let turn = turn_on_masters(lease.kind, turn)?;
        let started = Instant::now();
        // One proposal for every master: masters whose counters agree grant the same token,
        // and the write-back is needed only where one is behind or ahead; masters whose
        // grants agree grant the same permit or shard.
        let proposal = Proposal {
            floor: Some(clock_us()),
            start: lease.kind.count().map_or(0, random::below),
        };
        let replies = self
            .on_every_master(|m| m.acquire_as_proposed(lease, turn, proposal))
            .await;
        let (slot, agreeing) = largest_agreement(&replies);
        let token = self.settle_token(lease, &agreeing, started).await;
        let kept = if token.is_some() { &agreeing[..] } else { &[] };
        self.give_back_unkept(lease, &replies, kept).await;
        match token {
            Some(token) => Ok(Acquire::Granted { token, slot }),
            None => self.refusal(lease, replies),
        }
    }

    async fn watch_releases(&self, key: &str) -> Result<ReleaseWatch, LockError> {
        let watches = self.on_every_master(|m| m.subscribe(key)).await;
        let subscribed = self.majority_answered(Some(key), "subscribing failed", watches)?;
        Ok(ReleaseWatch::any_of(
            subscribed.into_iter().map(|(_, watch)| watch),
        ))
    }

    fn watch_subscribed(&self, key: &str) -> Option<ReleaseWatch> {
        let watches: Vec<ReleaseWatch> = self
            .masters
            .iter()
            .filter_map(|m| m.watch_if_subscribed(key))
            .collect();
        (watches.len() >= self.quorum()).then(|| ReleaseWatch::any_of(watches))
    }

    fn offers(&self) -> Capabilities {
        Capabilities::EVERY_KIND.with_hands_off(false)
    }

    async fn extend_grants(&self, held: &[HeldLease]) -> Result<Vec<Extended>, LockError> {
        let replies = self.on_every_master(|m| m.extend(held)).await;
        let answers = self.majority_answered(None, "renewing leases failed", replies)?;
        let unanswered = self.masters.len() - answers.len();
        let decided = |i: usize, lease: &HeldLease| {
            let on = |found: fn(&Extended) -> bool| {
                let told = answers.iter().filter_map(|(_, extended)| extended.get(i));
                told.filter(|extended| found(extended)).count()
            };
            let renewed = on(|e| matches!(e, Extended::Renewed));
            let unknown = unanswered + on(|e| matches!(e, Extended::Unknown(_)));
            if renewed >= self.quorum() {
                Extended::Renewed
            } else if renewed + unknown < self.quorum() {
                Extended::Lost
            } else {
                // The masters that did not answer (or could not tell) decide: asked again.
                Extended::Unknown(LockError::backend(
                    Some(&lease.lease.key),
                    format!(
                        "renewing failed: {renewed} of {} masters renewed the lease and \
                         {unknown} did not answer or could not tell, so whether a majority \
                         holds it is unknown",
                        self.masters.len()
                    ),
                    None,
                ))
            }
        };
        Ok(held
            .iter()
            .enumerate()
            .map(|(i, lease)| decided(i, lease))
            .collect())
    }

    async fn release_grant(&self, lease: &Lease, min_hold: Duration) -> Result<Release, LockError> {
        self.release_on_masters(lease, None, min_hold).await
    }

    async fn release_held_grant(
        &self,
        held: &HeldLease,
        min_hold: Duration,
    ) -> Result<Release, LockError> {
        self.release_on_masters(&held.lease, Some(held.token), min_hold)
            .await
    }

    fn operator_calls(&self) -> Option<&dyn OperatorBackend> {
        Some(self)
    }

    fn shard_mark_calls(&self) -> Option<&dyn ShardMarks> {
        Some(self)
    }
}

// Exhausted shards: marked on each master that still holds the grant, and marked for all only
// if a majority does; a request refused as exhausted by so many masters that no majority can
// grant is refused as such.
impl AsyncShardMarks for RedlockBackend {
    async fn mark(&self, held: &HeldLease) -> Result<bool, LockError> {
        let replies = self.on_every_master(|master| master.mark(held)).await;
        let answers = self.majority_answered(
            Some(&held.lease.key),
            "marking a shard exhausted failed",
            replies,
        )?;
        let marked = answers.iter().filter(|(_, marked)| *marked).count();
        Ok(marked >= self.quorum())
    }

    async fn clear_marks(&self, key: &str, shard: Option<u32>) -> Result<(), LockError> {
        let replies = self
            .on_every_master(|master| master.clear_marks(key, shard))
            .await;
        self.majority_answered(Some(key), "refilling shards failed", replies)
            .map(drop)
    }
}

// An operator's calls (see `OperatorBackend`): every master asked, each lock merged over them.
impl AsyncOperator for RedlockBackend {
    async fn list_held(&self, pattern: &str) -> Result<Vec<LockState>, LockError> {
        let replies = self.on_every_master(|m| m.list_locks(pattern)).await;
        let answers = self.majority_answered(None, "listing locks failed", replies)?;
        let answered = answers.len();
        let mut by_key: BTreeMap<String, Vec<LockState>> = BTreeMap::new();
        for state in answers.into_iter().flat_map(|(_, states)| states) {
            by_key.entry(state.key.clone()).or_default().push(state);
        }
        Ok(by_key
            .into_iter()
            .map(|(key, states)| self.merge(&key, states, answered))
            .collect())
    }

    async fn inspect_held(&self, key: &str) -> Result<LockState, LockError> {
        let replies = self.on_every_master(|m| m.inspect_lock(key)).await;
        let answers = self.majority_answered(Some(key), "inspecting failed", replies)?;
        let answered = answers.len();
        let states = answers.into_iter().map(|(_, state)| state).collect();
        Ok(self.merge(key, states, answered))
    }

    async fn force_release_held(
        &self,
        key: &str,
        grant: Grant,
    ) -> Result<ForcedRelease, LockError> {
        let replies = self.on_every_master(|m| m.force_release(key, grant)).await;
        let answers = self.majority_answered(Some(key), "releasing by force failed", replies)?;
        let answered = answers.len();
        let released_on = answers.iter().filter(|(_, forced)| forced.released).count();
        // What was released, where anything was; else what holds the key.
        let found = answers
            .iter()
            .filter(|(_, forced)| forced.released || released_on == 0)
            .map(|(_, forced)| &forced.found);
        let (found, _) = self.merge_holdings(found, answered);
        // Masters keep no line: each announces that the key is free (waiters hear one).
        let announced = answers
            .iter()
            .filter_map(|(_, forced)| forced.announced)
            .max_by_key(|event| match event {
                ReleaseEvent::Released { token } => *token,
                _ => None,
            });
        Ok(ForcedRelease {
            released: released_on > 0,
            announced,
            masters: Some(Masters {
                holding: released_on,
                answered,
                of: self.masters.len(),
            }),
            ..ForcedRelease::of(key, found)
        })
    }

    /// The grants found on any master that answered, once each (with its greatest token, so
    /// that a forced release names it on every master).
    async fn owned_grants(
        &self,
        pattern: &str,
        owners: &OwnerPrefix,
    ) -> Result<Vec<OwnedGrant>, LockError> {
        let replies = self
            .on_every_master(|m| m.grants_of_owners(pattern, owners))
            .await;
        let answers = self.majority_answered(None, "finding grants failed", replies)?;
        let mut merged: BTreeMap<(String, OwnerTag), Option<u64>> = BTreeMap::new();
        for owned in answers.into_iter().flat_map(|(_, owned)| owned) {
            let token = merged.entry((owned.key, owned.grant.owner)).or_default();
            *token = (*token).max(owned.grant.token);
        }
        let grants = merged
            .into_iter()
            .map(|((key, owner), token)| OwnedGrant::new(key, Grant { owner, token }));
        Ok(grants.collect())
    }
}

//! What happened in one run, on the virtual clock, and the checks of the promises on it.

use std::collections::BTreeMap;
use std::time::Duration;

use fencelock::backend::Release;
use fencelock::testing::history;
use fencelock::{LockError, LockKind, LossCause};
use tokio::time::Instant;

/// The simulated operation a record belongs to; 0 for a client's background work.
pub type OpId = u64;

/// What an operation was configured to do, as far as the checks need it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Spec {
    pub renew: bool,
    pub continue_on_loss: bool,
    pub max_hold: Option<Duration>,
    pub gives_up: bool,
    /// The bound on the wait (`wait_ms`), when the request has one.
    pub wait: Option<Duration>,
    /// `#[redis_lock]` awaiting the release (a `Send` output), under `on_lost = Abort`:
    /// a loss the release finds must fail the call.
    pub release_decides: bool,
    /// A guard taken by hand: `release()` may report `Lost` whatever the policy.
    pub by_hand: bool,
}

#[derive(Debug)]
pub enum Outcome {
    Running,
    Done,
    Cancelled,
    Failed(LockError),
}

#[derive(Debug)]
struct Op {
    client: u32,
    kind: &'static str,
    spec: Spec,
    started: Instant,
    /// When the request's acquisition ended (for the wait bound): observed for guards taken
    /// by hand, and for calls that failed to acquire (they end there).
    acquired_at: Option<Instant>,
    outcome: Outcome,
    /// A call of this operation went unanswered (failed, or dropped before its reply).
    unanswered: bool,
    /// An acquire's reply reached it while its client was frozen: a grant may have come
    /// back too late, which fails the call as an unanswered one does.
    late_reply: bool,
    /// Release calls this operation sent, and the replies they got.
    release_calls: u32,
    release_replies: Vec<Release>,
    /// (outer, inner) tokens of a reentrant call.
    reentry: Option<(u64, Option<u64>)>,
}

/// A grant the store made, as it made it.
#[derive(Debug)]
pub struct Grant {
    pub key: String,
    pub owner: String,
    pub token: u64,
    pub kind: LockKind,
    /// The permit or shard granted.
    pub slot: Option<u32>,
    /// Made by a release, to the waiter at the head of the key's line.
    pub handed_off: bool,
}

#[derive(Debug)]
struct Granted {
    seq: u64,
    at: Instant,
    grant: Grant,
    /// Made by a request delivered after the client's delayed cleanup (the README's gap
    /// without settling): it may keep the key for its lease, unreleased.
    past_cleanup: bool,
}

/// A waiter's place in a key's line, as the store kept (or renewed) it.
#[derive(Debug)]
struct Place {
    seq: u64,
    key: String,
    owner: String,
    lapses_at: Instant,
}

#[derive(Debug)]
struct Section {
    op: OpId,
    key: String,
    token: u64,
    kind: LockKind,
    /// The shard of a segmented lock, as the body learnt it.
    shard: Option<u32>,
    ttl: Duration,
    seq: u64,
    entered: Instant,
    exited: Option<Instant>,
    lost_at: Option<Instant>,
}

#[derive(Debug)]
struct Deletion {
    seq: u64,
    at: Instant,
    key: String,
}

/// Everything recorded in one run. Owner tokens appear in the trace by their first 6 digits.
#[derive(Debug)]
pub struct History {
    start: Instant,
    seq: u64,
    ops: BTreeMap<OpId, Op>,
    grants: Vec<Granted>,
    places: Vec<Place>,
    /// (seq, owner) of every release call sent and every release executed.
    release_events: Vec<(u64, String)>,
    sections: Vec<Section>,
    deletions: Vec<Deletion>,
    trace: Vec<String>,
    /// Owner tokens by order of appearance: the trace names them `o1`, `o2`, ..., so that it
    /// reads the same on every run of a seed (the tokens themselves are random).
    owners: std::collections::HashMap<String, usize>,
    /// Calls sent per operation (to cancel one right after a send).
    sends: BTreeMap<OpId, u32>,
    pub faults_injected: u64,
}

impl History {
    pub fn new(start: Instant) -> History {
        History {
            start,
            seq: 0,
            ops: BTreeMap::new(),
            grants: Vec::new(),
            places: Vec::new(),
            release_events: Vec::new(),
            sections: Vec::new(),
            deletions: Vec::new(),
            trace: Vec::new(),
            owners: std::collections::HashMap::new(),
            sends: BTreeMap::new(),
            faults_injected: 0,
        }
    }

    /// The trace's name of an owner token.
    pub fn owner(&mut self, token: &str) -> String {
        let next = self.owners.len() + 1;
        format!("o{}", self.owners.entry(token.to_owned()).or_insert(next))
    }

    pub fn trace(&self) -> &[String] {
        &self.trace
    }

    pub fn note(&mut self, line: impl std::fmt::Display) {
        self.seq += 1;
        let at = self.start.elapsed().as_secs_f64();
        self.trace.push(format!("{at:>11.6} s  {line}"));
    }

    pub fn op_started(&mut self, op: OpId, client: u32, kind: &'static str, spec: Spec) {
        self.note(format_args!("client {client} op {op}: {kind} {spec:?}"));
        self.ops.insert(
            op,
            Op {
                client,
                kind,
                spec,
                started: Instant::now(),
                acquired_at: None,
                outcome: Outcome::Running,
                unanswered: false,
                late_reply: false,
                release_calls: 0,
                release_replies: Vec::new(),
                reentry: None,
            },
        );
    }

    pub fn sent(&mut self, op: OpId) {
        *self.sends.entry(op).or_default() += 1;
    }

    pub fn sends(&self, op: OpId) -> u32 {
        self.sends.get(&op).copied().unwrap_or(0)
    }

    pub fn op_acquired(&mut self, op: OpId) {
        if let Some(record) = self.ops.get_mut(&op) {
            record.acquired_at = Some(Instant::now());
        }
    }

    pub fn op_reentered(&mut self, op: OpId, outer: u64, inner: Option<u64>) {
        if let Some(record) = self.ops.get_mut(&op) {
            record.reentry = Some((outer, inner));
        }
    }

    pub fn op_ended(&mut self, op: OpId, outcome: Outcome) {
        self.note(format_args!("op {op} ended: {outcome:?}"));
        if let Some(record) = self.ops.get_mut(&op) {
            let failed_to_acquire = matches!(
                outcome,
                Outcome::Failed(LockError::NotAcquired { .. } | LockError::Backend { .. })
            );
            if failed_to_acquire && !record.spec.by_hand {
                record.acquired_at = Some(Instant::now());
            }
            record.outcome = outcome;
        }
    }

    pub fn faulted(&mut self, op: OpId, what: impl std::fmt::Display) {
        self.faults_injected += 1;
        self.note(format_args!("op {op}: fault: {what}"));
    }

    /// A call of `op` ended without a reply.
    /// Operation `op`'s client was frozen on an acquire's reply.
    pub fn late_reply(&mut self, op: OpId) {
        if let Some(record) = self.ops.get_mut(&op) {
            record.late_reply = true;
        }
    }

    pub fn unanswered(&mut self, op: OpId, what: &str) {
        self.note(format_args!("op {op}: {what}: no reply"));
        if let Some(record) = self.ops.get_mut(&op) {
            record.unanswered = true;
        }
    }

    /// The store granted `grant` (or answered an attempt with its owner's grant again).
    pub fn granted(&mut self, client: u32, grant: Grant) {
        let owner_name = self.owner(&grant.owner);
        let again = self
            .grants
            .iter()
            .any(|g| g.grant.key == grant.key && g.grant.token == grant.token);
        let Grant {
            key,
            token,
            kind,
            slot,
            handed_off,
            ..
        } = &grant;
        let how = match (again, handed_off) {
            (true, _) => "grants again",
            (false, true) => "hands over",
            (false, false) => "grants",
        };
        self.note(format_args!(
            "client {client}: store {how} {key} ({} {slot:?}) to {owner_name} token {token}",
            kind.name()
        ));
        if !again {
            self.grants.push(Granted {
                seq: self.seq,
                at: Instant::now(),
                grant,
                past_cleanup: false,
            });
        }
    }

    /// The store kept (or renewed) `owner`'s place in `key`'s line until `lapses_at`.
    pub fn placed(&mut self, key: &str, owner: &str, lapses_at: Instant) {
        let owner_name = self.owner(owner);
        let lasts = lapses_at - Instant::now();
        self.note(format_args!(
            "store keeps {owner_name}'s place in {key}'s line for {lasts:?}"
        ));
        self.places.push(Place {
            seq: self.seq,
            key: key.to_owned(),
            owner: owner.to_owned(),
            lapses_at,
        });
    }

    /// The grant of `token` came from a request delivered past the delayed cleanup.
    pub fn delivered_past_cleanup(&mut self, key: &str, token: u64) {
        self.note(format_args!(
            "{key} token {token}: delivered after the client's delayed cleanup"
        ));
        if let Some(granted) = self
            .grants
            .iter_mut()
            .rev()
            .find(|g| g.grant.key == key && g.grant.token == token)
        {
            granted.past_cleanup = true;
        }
    }

    pub fn release_sent(&mut self, op: OpId, owner: &str) {
        let owner_name = self.owner(owner);
        self.note(format_args!("op {op}: release of {owner_name} sent"));
        self.release_events.push((self.seq, owner.to_owned()));
        if let Some(record) = self.ops.get_mut(&op) {
            record.release_calls += 1;
        }
    }

    pub fn released(&mut self, key: &str, owner: &str, outcome: Release) {
        let owner_name = self.owner(owner);
        self.note(format_args!(
            "store releases {key} for {owner_name}: {outcome:?}"
        ));
        self.release_events.push((self.seq, owner.to_owned()));
    }

    pub fn release_answered(&mut self, op: OpId, outcome: Release) {
        if let Some(record) = self.ops.get_mut(&op) {
            record.release_replies.push(outcome);
        }
    }

    pub fn deleted(&mut self, key: &str) {
        self.note(format_args!(
            "fault: the store deletes {key} under its holder"
        ));
        self.deletions.push(Deletion {
            seq: self.seq,
            at: Instant::now(),
            key: key.to_owned(),
        });
    }

    /// A body started under `token` (on `shard` of a segmented lock); returns the section's
    /// index.
    pub fn entered(
        &mut self,
        op: OpId,
        key: &str,
        kind: LockKind,
        ttl: Duration,
        token: u64,
        shard: Option<u32>,
    ) -> usize {
        self.note(format_args!(
            "op {op}: enters {key} ({} {shard:?}) with token {token}",
            kind.name()
        ));
        self.sections.push(Section {
            op,
            key: key.to_owned(),
            token,
            kind,
            shard,
            ttl,
            seq: self.seq,
            entered: Instant::now(),
            exited: None,
            lost_at: None,
        });
        self.sections.len() - 1
    }

    pub fn told_lost(&mut self, section: usize) {
        let section = &mut self.sections[section];
        section.lost_at.get_or_insert_with(Instant::now);
        let (op, key) = (section.op, section.key.clone());
        self.note(format_args!("op {op}: told {key} is lost"));
    }

    pub fn exited(&mut self, section: usize) {
        let section = &mut self.sections[section];
        section.exited = Some(Instant::now());
        let (op, key) = (section.op, section.key.clone());
        self.note(format_args!("op {op}: leaves {key}"));
    }

    pub fn sections(&self) -> usize {
        self.sections.len()
    }

    pub fn grants(&self) -> usize {
        self.grants.len()
    }

    /// Every promise, checked on the record; `keys_in_use` is what the store still held once
    /// everything was over.
    pub fn violations(&self, keys_in_use: usize) -> Vec<String> {
        let mut found = Vec::new();
        self.check_sections(&mut found);
        self.check_exclusion(&mut found);
        self.check_tokens(&mut found);
        self.check_hand_offs(&mut found);
        self.check_orphans(&mut found);
        self.check_ops(&mut found);
        found.dedup();
        if keys_in_use > 0 {
            found.push(format!(
                "{keys_in_use} key(s) still in use after every client was done and every \
                 lease and place had run out"
            ));
        }
        found
    }

    /// When the holder of `section` stopped believing it held the lock.
    fn believed_until(&self, section: &Section) -> Instant {
        let end = section.exited.unwrap_or_else(Instant::now);
        section.lost_at.map_or(end, |lost| lost.min(end))
    }

    /// The record of the store's grant of `token` for `key`.
    fn grant_of(&self, key: &str, token: u64) -> Option<&Granted> {
        self.grants
            .iter()
            .find(|g| g.grant.key == key && g.grant.token == token)
    }

    /// Whether the store deleted the key under `section`'s grant before its holder stopped
    /// believing it held it.
    fn deleted_under(&self, section: &Section) -> bool {
        let granted = self
            .grant_of(&section.key, section.token)
            .map_or(0, |g| g.seq);
        self.deletions
            .iter()
            .any(|d| d.key == section.key && d.seq > granted && d.at < self.believed_until(section))
    }

    /// The history checkers of the fault scenarios (`fencelock::testing::history`), on the
    /// intervals in which holders believed they held their lock, each kind by its rule: no
    /// two sections at once of a mutex, or of one shard of a segmented lock (a key of its
    /// own here), with tokens increasing in entry order; no reader or writer beside a writer;
    /// no more sections at once than a semaphore's permits. A reentrant call's sections are
    /// one (same operation, same token; a read inside a write is the write); a section whose
    /// grant the store deleted under it is left out (its holder may overlap the next one
    /// until it learns, which `check_exclusion` bounds).
    fn check_sections(&self, found: &mut Vec<String>) {
        let mut merged: BTreeMap<(OpId, u64), (LockKind, history::Section)> = BTreeMap::new();
        for section in self.sections.iter().filter(|s| !self.deleted_under(s)) {
            let ns = |at: Instant| (at - self.start).as_nanos() as u64;
            let (entered_ns, exited_ns) = (ns(section.entered), ns(self.believed_until(section)));
            let key = match section.shard {
                Some(shard) => format!("{}#{shard}", section.key),
                None => section.key.clone(),
            };
            let (kind, entry) = merged
                .entry((section.op, section.token))
                .or_insert_with(|| {
                    let merged = history::Section {
                        process: self.ops.get(&section.op).map_or(0, |op| op.client),
                        task: section.op as u32,
                        key,
                        token: section.token,
                        entered_ns,
                        exited_ns,
                    };
                    (section.kind, merged)
                });
            if section.kind == LockKind::Write {
                *kind = LockKind::Write;
            }
            entry.entered_ns = entry.entered_ns.min(entered_ns);
            entry.exited_ns = entry.exited_ns.max(exited_ns);
        }
        let (mut exclusive, mut readers, mut writers) = (Vec::new(), Vec::new(), Vec::new());
        let mut by_permits: BTreeMap<u32, Vec<history::Section>> = BTreeMap::new();
        for (kind, section) in merged.into_values() {
            match kind {
                LockKind::Read => readers.push(section),
                LockKind::Write => writers.push(section),
                LockKind::Semaphore { permits } => {
                    by_permits.entry(permits).or_default().push(section)
                }
                _ => exclusive.push(section),
            }
        }
        let semaphores = by_permits
            .iter()
            .map(|(permits, sections)| history::check_at_most(sections, *permits as usize));
        let reports = [
            history::check(&exclusive),
            history::check_read_write(&readers, &writers),
        ];
        for report in reports.into_iter().chain(semaphores) {
            for violation in report.violations {
                found.push(format!("history checker: {violation}"));
            }
        }
    }

    /// A holder believes it holds its grant only while the store keeps it: from the grant
    /// until the holder leaves or is told of the loss, the store grants nothing the grant
    /// excludes (beside a mutex or a writer nothing, beside a reader no writer, beside a
    /// shard not that shard, beside a semaphore's permits no permit beyond their count).
    /// Every loss is reported before. A section claims its grant from the grant on, before
    /// its body enters too: a body that enters after the store gave its grant away is a
    /// second holder. The exception is a key the store deleted under its holder (an
    /// operator, a restart without data); that holder must learn of it within its lease.
    fn check_exclusion(&self, found: &mut Vec<String>) {
        for granted in &self.grants {
            let grant = &granted.grant;
            // The earlier grants of the key that sections still claimed at this one.
            let mut claimed: Vec<(&Granted, &Section)> = Vec::new();
            for section in &self.sections {
                if section.key != grant.key || section.token >= grant.token {
                    continue;
                }
                let until = self.believed_until(section);
                // Events of one instant are told apart by their order.
                if !(granted.at < until || granted.seq < section.seq) {
                    continue;
                }
                // A section under a token never granted is `check_tokens`'s.
                let Some(own) = self.grant_of(&section.key, section.token) else {
                    continue;
                };
                // The deletion that ended the section's grant: the first after it.
                let deleted = self
                    .deletions
                    .iter()
                    .find(|d| d.key == section.key && d.seq > own.seq)
                    .filter(|d| d.seq < granted.seq);
                match deleted {
                    Some(deletion) if until <= deletion.at + section.ttl => {}
                    Some(deletion) => found.push(format!(
                        "op {} held {} (token {}) until {:?}, more than its lease after the \
                         store deleted it at {:?}",
                        section.op,
                        section.key,
                        section.token,
                        self.at(until),
                        self.at(deletion.at)
                    )),
                    None if claimed.iter().any(|(g, _)| g.grant.token == section.token) => {}
                    None => claimed.push((own, section)),
                }
            }
            let excluded = |(claim, _): &&(&Granted, &Section)| match grant.kind {
                LockKind::Read => claim.grant.kind == LockKind::Write,
                LockKind::Segmented { .. } => claim.grant.slot == grant.slot,
                _ => true,
            };
            let room = match grant.kind {
                LockKind::Semaphore { permits } => (permits as usize).saturating_sub(1),
                _ => 0,
            };
            let excluding: Vec<_> = claimed.iter().filter(excluded).collect();
            if excluding.len() <= room {
                continue;
            }
            for (claim, section) in excluding {
                found.push(format!(
                    "the store granted {} ({} {:?}) to token {} at {:?} while op {} still \
                     believed it held it ({} {:?}) with token {} (granted {:?}, entered {:?}, \
                     until {:?})",
                    grant.key,
                    grant.kind.name(),
                    grant.slot,
                    grant.token,
                    self.at(granted.at),
                    section.op,
                    claim.grant.kind.name(),
                    claim.grant.slot,
                    section.token,
                    self.at(claim.at),
                    self.at(section.entered),
                    self.at(self.believed_until(section))
                ));
            }
        }
    }

    /// Each new grant's token exceeds every earlier one of the key; every body runs under a
    /// token the store granted for its key, on the shard it granted.
    fn check_tokens(&self, found: &mut Vec<String>) {
        let mut last: BTreeMap<&str, u64> = BTreeMap::new();
        for Granted { grant, .. } in &self.grants {
            if let Some(token) = last.get(grant.key.as_str())
                && *token >= grant.token
            {
                found.push(format!(
                    "{}: token {} granted after token {token}",
                    grant.key, grant.token
                ));
            }
            last.insert(&grant.key, grant.token);
        }
        for section in &self.sections {
            match self.grant_of(&section.key, section.token) {
                None => found.push(format!(
                    "op {} ran under token {} that the store never granted for {}",
                    section.op, section.token, section.key
                )),
                Some(Granted { grant, .. })
                    if matches!(grant.kind, LockKind::Segmented { .. })
                        && section.shard != grant.slot =>
                {
                    found.push(format!(
                        "op {} ran on shard {:?} of {} under token {}, granted shard {:?}",
                        section.op, section.shard, section.key, section.token, grant.slot
                    ))
                }
                Some(_) => {}
            }
        }
    }

    /// A release hands the key only to a waiter whose place in line lasts (each attempt
    /// that keeps a place renews it): a key handed to a lapsed place goes to a waiter that
    /// may have left.
    fn check_hand_offs(&self, found: &mut Vec<String>) {
        for granted in self.grants.iter().filter(|g| g.grant.handed_off) {
            let grant = &granted.grant;
            let place = self
                .places
                .iter()
                .rev()
                .filter(|p| p.seq < granted.seq)
                .find(|p| p.key == grant.key && p.owner == grant.owner);
            let lapsed = match place {
                Some(place) if place.lapses_at > granted.at => continue,
                Some(place) => format!("whose place had lapsed at {:?}", self.at(place.lapses_at)),
                None => "that never had a place".to_owned(),
            };
            found.push(format!(
                "a release handed {} to token {} at {:?}, {lapsed}",
                grant.key,
                grant.token,
                self.at(granted.at)
            ));
        }
    }

    /// No orphan: after every grant, its owner's client sends (or the store runs) a release
    /// for that owner; a grant nobody would ever release is the orphan of a lost reply.
    fn check_orphans(&self, found: &mut Vec<String>) {
        let name = |owner: &str| self.owners.get(owner).map_or(0, |n| *n);
        for granted in self.grants.iter().filter(|g| !g.past_cleanup) {
            let grant = &granted.grant;
            let cleaned = self
                .release_events
                .iter()
                .any(|(seq, owner)| *seq > granted.seq && *owner == grant.owner);
            if !cleaned {
                found.push(format!(
                    "orphan: {} granted to o{} (token {}) at {:?} was never released",
                    grant.key,
                    name(&grant.owner),
                    grant.token,
                    self.at(granted.at)
                ));
            }
        }
    }

    /// Each operation ended, with an error of the right variant.
    fn check_ops(&self, found: &mut Vec<String>) {
        for (id, op) in &self.ops {
            let mut wrong = |why: String| {
                found.push(format!(
                    "op {id} ({}, client {}): {why}; outcome {:?}",
                    op.kind, op.client, op.outcome
                ))
            };
            if let Some((outer, inner)) = op.reentry
                && inner.is_some_and(|inner| inner != outer)
            {
                wrong(format!("re-entered with token {inner:?} under {outer}"));
            }
            if let (Some(wait), Some(acquired_at)) = (op.spec.wait, op.acquired_at)
                && acquired_at - op.started > wait
            {
                wrong(format!(
                    "waited {:?}, beyond wait_ms {:?}",
                    acquired_at - op.started,
                    wait
                ));
            }
            let error = match &op.outcome {
                Outcome::Running => {
                    wrong("never ended".into());
                    continue;
                }
                Outcome::Cancelled => continue,
                Outcome::Done => {
                    if op.spec.release_decides
                        && op.release_calls == 1
                        && op.release_replies == [Release::NotOwner]
                    {
                        wrong("returned Ok although its release found the key gone".into());
                    }
                    continue;
                }
                Outcome::Failed(error) => error,
            };
            match error {
                LockError::Lost { cause, .. } => {
                    if op.spec.continue_on_loss && !op.spec.by_hand {
                        wrong("Lost under on_lost = Continue".into());
                    }
                    if *cause == LossCause::MaxHold && op.spec.max_hold.is_none() {
                        wrong("MaxHold without max_hold_ms".into());
                    }
                    if *cause == LossCause::Expired && op.spec.renew {
                        wrong("Expired although renewed".into());
                    }
                }
                LockError::Backend { .. } if !op.unanswered && !op.late_reply => {
                    wrong("Backend although every call it made was answered".into());
                }
                LockError::Backend { .. } => {}
                LockError::NotAcquired { attempts, .. } => {
                    if op.spec.gives_up && *attempts != 1 {
                        wrong(format!("GiveUp made {attempts} attempts"));
                    }
                }
                other => wrong(format!("unexpected error {other}")),
            }
        }
    }

    fn at(&self, instant: Instant) -> Duration {
        instant - self.start
    }
}

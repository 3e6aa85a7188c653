//! The behaviour every backend must show, as one suite: run [`run`] against a client of the
//! backend under test. Each check uses keys of its own under `namespace`, and panics with a
//! message naming the broken rule.

mod kinds;
mod lifecycle;

pub use kinds::{
    a_kind_not_offered_is_refused, a_release_hands_over_to_the_readers_at_the_head,
    a_renewal_in_flight_never_revives_a_kept_release, a_semaphore_lets_in_its_permits,
    a_shared_min_hold_keeps_the_grant, a_shared_release_is_announced_and_remembered,
    a_waiting_writer_goes_before_later_readers, an_expired_permit_comes_back,
    an_operator_sees_and_ends_shared_grants, exhausted_shards_are_skipped_until_refilled,
    kinds_do_not_mix_on_one_key, kinds_not_offered_are_refused,
    readers_share_and_a_writer_excludes, shards_are_exclusive_and_named,
    shared_grants_are_renewed_owner_checked, the_smallest_count_inside_wins,
};
pub use lifecycle::{
    a_release_in_flight_does_not_refuse_the_same_client,
    a_restarted_instance_releases_what_its_earlier_run_left,
    a_shared_value_is_kept_for_its_grant_only, a_value_left_or_a_holder_gone_is_watched,
    shutdown_releases_and_withdraws,
};

use std::sync::Arc;
use std::time::Duration;

use crate::admin::{Grant, Holding, ReleaseEvent};
use crate::backend::late_replies::LateReplies;
use crate::backend::{Acquire, BoxFuture, Extended, HeldLease, Lease, LockBackend, Release, Turn};
use crate::release_hub::owner_tag;
use crate::{LockClient, LockError, LockKind, LossCause, glob};

/// Leases in the checks that wait for expiry: short enough to keep the suite fast, long
/// enough that a loaded machine does not expire a lease between two steps that need it.
const SHORT_TTL_MS: u64 = 300;
/// The lease of the checks that renewal keeps a lease: long enough that a renewal round held
/// up a second (a loaded machine, a store's pause) still comes in time, since a lease that a
/// late round lets end is rightly lost.
const RENEWED_TTL_MS: u64 = 1_500;
const LONG_TTL_MS: u64 = 60_000;
/// A place in line that outlasts every check.
const LONG: Duration = Duration::from_millis(LONG_TTL_MS);

/// One rule of the suite: a check on keys of its own, and which backends it applies to. A
/// test harness that names one test per rule (fencelock's own `tests/conformance.rs`) lets
/// `cargo test <rule>` check one rule on every backend.
#[derive(Clone, Copy)]
pub struct Rule {
    /// The rule's name, its check's: what the check panics with names it too.
    pub name: &'static str,
    applies: fn(&LockClient) -> bool,
    check: for<'a> fn(&'a LockClient, &'a str) -> BoxFuture<'a, ()>,
}

impl Rule {
    /// Whether the rule applies to `client`'s backend (a backend that offers no
    /// announcements is checked to be polled instead, one without a line to refuse fair mode).
    pub fn applies(&self, client: &LockClient) -> bool {
        (self.applies)(client)
    }

    /// Checks the rule on `client`, with keys under `namespace`, if it applies.
    pub async fn check(&self, client: &LockClient, namespace: &str) {
        if self.applies(client) {
            (self.check)(client, &format!("{namespace}:{}", self.name)).await;
        }
    }
}

impl std::fmt::Debug for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

/// A [`Rule`] for the check `$check`, which applies where `$applies` says (everywhere).
macro_rules! rule {
    ($check:ident) => {
        rule!($check, |_| true)
    };
    ($check:ident, $applies:expr) => {
        Rule {
            name: stringify!($check),
            applies: $applies,
            check: |client, key| Box::pin($check(client, key)),
        }
    };
}

fn notifies(client: &LockClient) -> bool {
    client.notifies()
}

pub(super) fn hands_off(client: &LockClient) -> bool {
    client.backend().capabilities().hands_off
}

/// Every rule, in the order [`run`] checks them.
pub const RULES: &[Rule] = &[
    rule!(grant_is_exclusive),
    rule!(tokens_strictly_increase),
    rule!(expired_holder_cannot_release_successor),
    rule!(a_grant_answered_after_its_lease_gives_no_guard),
    rule!(dropped_guard_releases),
    rule!(a_release_in_flight_does_not_refuse_the_same_client),
    rule!(shutdown_releases_and_withdraws),
    rule!(a_restarted_instance_releases_what_its_earlier_run_left),
    rule!(
        a_shared_value_is_kept_for_its_grant_only,
        lifecycle::keeps_results
    ),
    rule!(
        a_value_left_or_a_holder_gone_is_watched,
        lifecycle::keeps_and_announces
    ),
    rule!(give_up_makes_one_attempt),
    rule!(continue_stops_after_its_retries),
    rule!(bad_input_is_refused),
    rule!(renewal_outlives_the_ttl),
    rule!(extend_is_owner_checked),
    rule!(min_hold_keeps_the_key_after_release),
    rule!(a_resent_release_is_remembered_for_its_owner),
    rule!(releases_are_announced, notifies),
    rule!(without_announcements_waiters_poll, |client| !notifies(
        client
    )),
    rule!(a_retry_by_the_holder_never_shortens_its_lease),
    rule!(an_operator_lists_and_inspects_held_locks),
    rule!(a_forced_release_ends_the_grant_and_wakes_the_line),
    rule!(an_operator_watch_sees_every_announcement, notifies),
    rule!(a_release_hands_the_key_to_the_oldest_waiter, hands_off),
    rule!(a_lapsed_place_is_skipped, hands_off),
    rule!(a_free_key_goes_to_the_head_in_fair_mode_only, hands_off),
    rule!(without_a_line_fair_mode_is_refused, |client| !hands_off(
        client
    )),
    rule!(kinds_not_offered_are_refused),
    rule!(
        readers_share_and_a_writer_excludes,
        kinds::offers_read_write
    ),
    rule!(
        a_waiting_writer_goes_before_later_readers,
        kinds::offers_read_write
    ),
    rule!(a_release_hands_over_to_the_readers_at_the_head, |client| {
        kinds::offers_read_write(client) && hands_off(client)
    }),
    rule!(
        a_shared_release_is_announced_and_remembered,
        kinds::offers_read_write
    ),
    rule!(a_semaphore_lets_in_its_permits, kinds::offers_semaphores),
    rule!(the_smallest_count_inside_wins, kinds::offers_semaphores),
    rule!(an_expired_permit_comes_back, kinds::offers_semaphores),
    rule!(a_shared_min_hold_keeps_the_grant, kinds::offers_semaphores),
    rule!(shards_are_exclusive_and_named, kinds::offers_shards),
    rule!(
        exhausted_shards_are_skipped_until_refilled,
        kinds::offers_shards
    ),
    rule!(
        an_operator_sees_and_ends_shared_grants,
        kinds::offers_read_write
    ),
    rule!(kinds_do_not_mix_on_one_key),
    rule!(shared_grants_are_renewed_owner_checked),
    rule!(a_renewal_in_flight_never_revives_a_kept_release),
];

/// Checks every rule that applies, one after the other. `namespace` keeps keys apart from
/// other runs on the same backend.
pub async fn run(client: &LockClient, namespace: &str) {
    for rule in RULES {
        rule.check(client, namespace).await;
    }
}

fn expect_not_acquired(result: Result<crate::LockGuard, LockError>, attempts: u32, rule: &str) {
    match result {
        Err(LockError::NotAcquired { attempts: a, .. }) if a == attempts => {}
        other => panic!("{rule}: expected NotAcquired after {attempts} attempt(s), got {other:?}"),
    }
}

/// Takes `key`, free at this point of a check, with a lease that outlasts the check.
pub(super) async fn hold(client: &LockClient, key: &str) -> crate::LockGuard {
    let guard = client
        .lock(key)
        .ttl_ms(LONG_TTL_MS)
        .give_up()
        .acquire()
        .await;
    guard.unwrap_or_else(|e| panic!("the free key {key} must be granted: {e}"))
}

/// One attempt straight at the backend (the checks of waiting semantics bypass the client);
/// panics with `rule` unless it is granted, else returns the grant.
async fn expect_granted(
    backend: &Arc<dyn LockBackend>,
    lease: &Lease,
    turn: Turn,
    rule: &str,
) -> HeldLease {
    let outcome = backend.acquire(lease, turn).await.expect("backend answers");
    match outcome {
        Acquire::Granted { token, slot } => HeldLease {
            lease: lease.clone(),
            token,
            slot,
        },
        Acquire::Held { .. } => panic!("{rule}: {outcome:?}"),
    }
}

/// As [`expect_granted`], for an attempt that must find the key taken.
async fn expect_held(backend: &Arc<dyn LockBackend>, lease: &Lease, turn: Turn, rule: &str) {
    let outcome = backend.acquire(lease, turn).await.expect("backend answers");
    assert!(
        matches!(outcome, Acquire::Held { .. }),
        "{rule}: {outcome:?}"
    );
}

/// Which leases a renewal renewed; every lease must have an answer (a backend under test
/// that cannot tell fails the check).
fn renewed(answers: Result<Vec<Extended>, LockError>) -> Vec<bool> {
    let answers = answers.expect("backend answers");
    let known = answers.iter().map(|answer| match answer {
        Extended::Renewed => true,
        Extended::Lost => false,
        Extended::Unknown(error) => panic!("a renewal could not tell: {error}"),
    });
    known.collect()
}

/// Releases `lease` straight at the backend, whatever the outcome.
async fn release_now(backend: &Arc<dyn LockBackend>, lease: &Lease) {
    backend
        .release(lease, Duration::ZERO)
        .await
        .expect("backend answers");
}

/// A held key refuses other owners until its holder releases it.
pub async fn grant_is_exclusive(client: &LockClient, key: &str) {
    let first = hold(client, key).await;
    let second = client
        .lock(key)
        .ttl_ms(LONG_TTL_MS)
        .give_up()
        .acquire()
        .await;
    expect_not_acquired(second, 1, "a held key must refuse another owner");
    first
        .release()
        .await
        .expect("the holder releases its own lock");
    let third = client.lock(key).give_up().acquire().await;
    third
        .expect("a released key is free again")
        .release()
        .await
        .expect("release");
}

/// Each grant's fencing token exceeds every earlier one for the key.
pub async fn tokens_strictly_increase(client: &LockClient, key: &str) {
    let mut last = 0;
    for _ in 0..20 {
        let guard = client
            .lock(key)
            .give_up()
            .acquire()
            .await
            .expect("free key");
        assert!(
            guard.token() > last,
            "fencing tokens must strictly increase: {} after {last}",
            guard.token()
        );
        last = guard.token();
        guard.release().await.expect("release");
    }
}

/// A holder whose lease expired, and whose key another owner took, gets `Lost` from its
/// release and leaves the new owner's lock in place.
pub async fn expired_holder_cannot_release_successor(client: &LockClient, key: &str) {
    let stale = client
        .lock(key)
        .ttl_ms(SHORT_TTL_MS)
        .renew(false)
        .give_up()
        .acquire()
        .await;
    let stale = stale.expect("free key");
    // The successor polls until the stale lease ends: the expiry is the event awaited.
    let successor = client
        .lock(key)
        .ttl_ms(LONG_TTL_MS)
        .retry(500)
        .sleep_ms(10)
        .acquire()
        .await
        .expect("the key is granted once the first lease expires");
    assert!(
        successor.token() > stale.token(),
        "the successor's token is newer"
    );
    match stale.release().await {
        Err(LockError::Lost { .. }) => {}
        other => panic!("releasing an expired lease must report Lost, got {other:?}"),
    }
    let intruder = client.lock(key).give_up().acquire().await;
    expect_not_acquired(
        intruder,
        1,
        "the stale release must not delete the successor's lock",
    );
    successor
        .release()
        .await
        .expect("the successor still owns its lock");
}

/// A grant whose reply reaches the client after the lease could have ended (the client frozen
/// between the store's grant and its reading of the reply) gives no guard, so no body runs
/// on it: the lease, less the time since the request was sent and the drift allowance,
/// leaves nothing. The grant is released (or has run out), so the next owner gets the key at
/// once. A reply late by less than that gives a guard as usual.
pub async fn a_grant_answered_after_its_lease_gives_no_guard(client: &LockClient, key: &str) {
    let frozen_for = |delay_ms| {
        let late = LateReplies::new(client.backend().clone(), Duration::from_millis(delay_ms));
        LockClient::with_background(
            Arc::new(late),
            client.background().clone(),
            client.notifies(),
            None,
        )
    };
    let late = frozen_for(SHORT_TTL_MS * 3 / 2)
        .lock(key)
        .ttl_ms(SHORT_TTL_MS)
        .give_up()
        .acquire()
        .await;
    assert!(
        late.as_ref().is_err_and(LockError::is_backend),
        "a grant read after its lease must give no guard, and fail as a late reply: {late:?}"
    );
    let next = hold(client, key).await;
    let in_time = frozen_for(SHORT_TTL_MS / 6)
        .lock(key)
        .ttl_ms(LONG_TTL_MS)
        .wait_ms(LONG_TTL_MS)
        .sleep_ms(10);
    let in_time = tokio::spawn(in_time.acquire());
    next.release().await.expect("the next owner held the key");
    let in_time = in_time.await.expect("the request ran");
    let in_time = in_time.expect("a grant read well within its lease gives a guard");
    in_time.release().await.expect("release");
}

/// Dropping a guard releases the lock long before its lease would end.
pub async fn dropped_guard_releases(client: &LockClient, key: &str) {
    drop(hold(client, key).await);
    let started = std::time::Instant::now();
    let next = client
        .lock(key)
        .ttl_ms(LONG_TTL_MS)
        .retry(1000)
        .sleep_ms(10)
        .acquire()
        .await
        .expect("a dropped guard's lock is released in the background");
    assert!(
        started.elapsed() < Duration::from_millis(LONG_TTL_MS / 4),
        "the drop released the lock, not the lease's expiry"
    );
    next.release().await.expect("release");
}

/// `GiveUp` asks once and reports contention as `NotAcquired`.
pub async fn give_up_makes_one_attempt(client: &LockClient, key: &str) {
    let holder = hold(client, key).await;
    let started = std::time::Instant::now();
    let refused = client.lock(key).sleep_ms(5_000).give_up().acquire().await;
    expect_not_acquired(refused, 1, "GiveUp makes exactly one attempt");
    assert!(
        started.elapsed() < Duration::from_millis(2_500),
        "GiveUp must not sleep"
    );
    holder.release().await.expect("release");
}

/// `Continue` makes `1 + retry` attempts, then reports `NotAcquired`.
pub async fn continue_stops_after_its_retries(client: &LockClient, key: &str) {
    let holder = hold(client, key).await;
    // A long `wait_ms`: the default bound (`retry × sleep_ms`, 30 ms) can run out before the
    // retries on a loaded machine, where an attempt on Redlock takes longer than a pause.
    let refused = client.lock(key).retry(3).sleep_ms(10).wait_ms(60_000);
    expect_not_acquired(
        refused.acquire().await,
        4,
        "Continue with retry = 3 makes four attempts",
    );
    holder.release().await.expect("release");
}

/// A renewed lease outlives its TTL several times over; without renewal it ends.
pub async fn renewal_outlives_the_ttl(client: &LockClient, key: &str) {
    let acquired_at = tokio::time::Instant::now();
    let renewed = client
        .lock(key)
        .ttl_ms(RENEWED_TTL_MS)
        .give_up()
        .acquire()
        .await;
    let renewed = renewed.expect("free key");
    let unrenewed_key = format!("{key}:fixed");
    let unrenewed = client
        .lock(&unrenewed_key)
        .ttl_ms(SHORT_TTL_MS)
        .renew(false)
        .give_up();
    let unrenewed = unrenewed.acquire().await.expect("free key");
    let lost = tokio::time::timeout(Duration::from_millis(SHORT_TTL_MS * 10), unrenewed.lost())
        .await
        .expect("a lease without renewal is counted lost once it runs out");
    assert!(
        matches!(
            lost,
            LockError::Lost {
                cause: LossCause::Expired,
                ..
            }
        ),
        "{lost:?}"
    );
    tokio::time::sleep_until(acquired_at + Duration::from_millis(RENEWED_TTL_MS * 3)).await;
    assert!(!renewed.is_lost(), "renewal keeps the lease");
    let intruder = client.lock(key).give_up().acquire().await;
    expect_not_acquired(
        intruder,
        1,
        "a renewed lease is still exclusive after 3 TTLs",
    );
    renewed
        .release()
        .await
        .expect("the renewed lease is still ours");
    let _ = unrenewed.release().await;
}

/// Extending is owner-checked, per lease of a batch, extends only the grant it names, and
/// ends with the release.
pub async fn extend_is_owner_checked(client: &LockClient, key: &str) {
    let backend = client.backend();
    let lease = |owner: &str| Lease {
        key: key.to_owned(),
        owner: owner.to_owned(),
        ttl: Duration::from_millis(LONG_TTL_MS),
        replicas: 0,
        kind: LockKind::Mutex,
    };
    let (mine, other) = (lease("conformance-owner-a"), lease("conformance-owner-b"));
    let granted = expect_granted(backend, &mine, Turn::Once, "the free key is granted").await;
    let not_granted = HeldLease {
        lease: other.clone(),
        ..granted.clone()
    };
    let extended = renewed(backend.extend(&[granted.clone(), not_granted]).await);
    assert_eq!(
        extended,
        vec![true, false],
        "only the owner's lease is extended"
    );
    let released = backend.release(&mine, Duration::ZERO).await;
    assert_eq!(released.expect("backend answers"), Release::Released);
    let again = backend.release(&mine, Duration::ZERO).await;
    assert_eq!(
        again.expect("backend answers"),
        Release::Released,
        "a release sent again (its first reply lost) learns that the first one released"
    );
    let extended = renewed(backend.extend(std::slice::from_ref(&granted)).await);
    assert_eq!(extended, vec![false], "a released lease cannot be extended");

    // Deleted under its holder, then granted anew to the same owner (a late acquire of that
    // owner): the holder's grant is over, and renewing it must say so.
    let again = expect_granted(backend, &mine, Turn::Once, "the free key is granted").await;
    assert!(again.token > granted.token, "a new grant has a new token");
    let extended = renewed(backend.extend(&[granted.clone(), again.clone()]).await);
    assert_eq!(
        extended,
        vec![false, true],
        "renewal extends the grant it names, not a later grant to the same owner"
    );
    release_now(backend, &mine).await;

    // Kept after release (min_hold_ms): a renewal already on its way must not revive it,
    // and the same release sent again still finds it released.
    let kept = expect_granted(backend, &mine, Turn::Once, "the free key is granted").await;
    let min_hold = Duration::from_millis(SHORT_TTL_MS);
    for _ in 0..2 {
        let released = backend
            .release(&mine, min_hold)
            .await
            .expect("backend answers");
        assert_eq!(released, Release::Released);
    }
    let extended = renewed(backend.extend(&[kept]).await);
    assert_eq!(
        extended,
        vec![false],
        "a kept lease is not extended after its release"
    );
    expect_held(
        backend,
        &other,
        Turn::Once,
        "the key stays taken while kept",
    )
    .await;
}

/// `min_hold_ms`: a release before the minimum hold shortens the lease instead of deleting
/// it, so the key stays taken until the minimum has passed.
pub async fn min_hold_keeps_the_key_after_release(client: &LockClient, key: &str) {
    let guard = client
        .lock(key)
        .ttl_ms(LONG_TTL_MS)
        .min_hold_ms(SHORT_TTL_MS)
        .give_up();
    let guard = guard.acquire().await.expect("free key");
    let released_at = std::time::Instant::now();
    guard.release().await.expect("release");
    let refused = client.lock(key).give_up().acquire().await;
    expect_not_acquired(
        refused,
        1,
        "the key stays taken until min_hold_ms has passed",
    );
    let next = client.lock(key).retry(1_000).sleep_ms(10).acquire().await;
    let next = next.expect("the key frees itself once min_hold_ms has passed");
    assert!(
        released_at.elapsed() < Duration::from_millis(LONG_TTL_MS / 4),
        "freed by the shortened lease, not by ttl_ms"
    );
    next.release().await.expect("release");
}

/// A subscription made before a release hears of it; one made after does not.
pub async fn releases_are_announced(client: &LockClient, key: &str) {
    let holder = hold(client, key).await;
    let mut watch = client
        .backend()
        .subscribe(key)
        .await
        .expect("backend answers");
    holder.release().await.expect("release");
    tokio::time::timeout(Duration::from_secs(5), watch.released(None))
        .await
        .expect("the release is announced to a subscribed watch");
    let unannounced = tokio::time::timeout(Duration::from_millis(50), watch.released(None)).await;
    assert!(unannounced.is_err(), "nothing happened since");
}

/// A backend that announces no releases refuses a subscription (so that waiters poll), and
/// a waiter that polls gets the key once the holder's lease ends: an end nobody announces,
/// which only another attempt finds.
pub async fn without_announcements_waiters_poll(client: &LockClient, key: &str) {
    match client.backend().subscribe(key).await {
        Err(LockError::InvalidConfig { .. }) => {}
        other => panic!("a subscription must be refused with InvalidConfig: {other:?}"),
    }
    // Held for a second, unrenewed, from before the waiter's first attempt.
    let holder = client
        .lock(key)
        .ttl_ms(1_000)
        .renew(false)
        .give_up()
        .acquire();
    let holder = holder.await.expect("the free key is granted");
    let waiting = client.lock(key).sleep_ms(20).wait_ms(10_000).acquire();
    let polled = tokio::time::timeout(Duration::from_secs(15), waiting).await;
    let guard = polled.expect("the waiter polls in time");
    let guard = guard.expect("the expired key is granted to the polling waiter");
    assert!(guard.token() > holder.token(), "a new grant");
    guard.release().await.expect("release");
    drop(holder);
}

fn owner(key: &str, name: &str) -> Lease {
    owner_of(key, name, LockKind::Mutex)
}

fn owner_of(key: &str, name: &str, kind: LockKind) -> Lease {
    Lease {
        key: key.to_owned(),
        owner: format!("conformance-{name}"),
        ttl: Duration::from_millis(LONG_TTL_MS),
        replicas: 0,
        kind,
    }
}

/// Other owners' grants and releases between a release and its resend: more than a key's
/// memory once held (the shared kinds kept their latest 64 releases).
const RELEASES_BETWEEN: usize = 70;

/// A release sent again after its reply was lost learns that the first send released the key,
/// for the owner who asks, whatever the key saw between the two, in every kind the backend
/// offers: a `min_hold_ms` hold that ended and another owner's grant and release in the gap;
/// many other owners' grants and releases. Nobody else's release passes for it. Each case
/// first confirms that the first send released. The holder sends its grant
/// ([`LockBackend::release_held`]), as a guard does.
pub async fn a_resent_release_is_remembered_for_its_owner(client: &LockClient, namespace: &str) {
    let backend = client.backend();
    let kinds = [
        LockKind::Mutex,
        LockKind::Read,
        LockKind::Write,
        LockKind::Semaphore { permits: 2 },
        LockKind::Segmented { shards: 4 },
    ];
    for kind in kinds
        .into_iter()
        .filter(|kind| backend.capabilities().offers(*kind))
    {
        let key = format!("{namespace}:{}", kind.name());
        let rule = |what: &str| format!("{}: {what}", kind.name());
        let kept = owner_of(&key, "kept", kind);
        let kept = expect_granted(backend, &kept, Turn::Once, &rule("a free key")).await;
        let min_hold = Duration::from_millis(SHORT_TTL_MS);
        let first = backend
            .release_held(&kept, min_hold)
            .await
            .expect("backend answers");
        assert_eq!(first, Release::Released, "{}", rule("the first send"));
        // The hold ends and another owner takes the key and releases it before the resend.
        let next = owner_of(&key, "after-the-hold", kind);
        granted_within(backend, &next, Duration::from_millis(LONG_TTL_MS / 4)).await;
        release_now(backend, &next).await;
        let again = backend
            .release_held(&kept, min_hold)
            .await
            .expect("backend answers");
        assert_eq!(
            again,
            Release::Released,
            "{}",
            rule("a resend after the hold ended")
        );

        let busy = owner_of(&key, "busy", kind);
        let busy = expect_granted(backend, &busy, Turn::Once, &rule("a free key")).await;
        let first = backend.release_held(&busy, Duration::ZERO).await;
        assert_eq!(
            first.ok(),
            Some(Release::Released),
            "{}",
            rule("the first send")
        );
        for i in 0..RELEASES_BETWEEN {
            let other = owner_of(&key, &format!("other-{i}"), kind);
            expect_granted(backend, &other, Turn::Once, &rule("a released key")).await;
            release_now(backend, &other).await;
        }
        let again = backend.release_held(&busy, Duration::ZERO).await;
        assert_eq!(
            again.ok(),
            Some(Release::Released),
            "{}",
            rule("a resend after other owners' grants and releases")
        );
        let stranger = owner_of(&key, "stranger", kind);
        let foreign = backend.release(&stranger, Duration::ZERO).await;
        assert_eq!(
            foreign.ok(),
            Some(Release::NotOwner),
            "{}",
            rule("nobody else's release passes for it")
        );
    }
}

/// Attempts `lease` every 10 ms until it is granted (a hold or a lease running out), at most
/// `within`.
async fn granted_within(backend: &Arc<dyn LockBackend>, lease: &Lease, within: Duration) {
    let started = std::time::Instant::now();
    loop {
        let outcome = backend.acquire(lease, Turn::Once).await;
        match outcome.expect("backend answers") {
            Acquire::Granted { .. } => return,
            Acquire::Held { .. } if started.elapsed() < within => {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            held => panic!("{:?} not granted within {within:?}: {held:?}", lease.key),
        }
    }
}

/// A release hands the key to the oldest waiter in line, in either mode: the release
/// announces it with the new grant's token (which is greater, and which the waiter's next
/// attempt finds its own); the others, newcomers included, find the key held.
pub async fn a_release_hands_the_key_to_the_oldest_waiter(client: &LockClient, key: &str) {
    let backend = client.backend();
    for place in [Turn::InLine(LONG), Turn::Fair(LONG)] {
        let [holder, first, second] = ["holder", "first", "second"].map(|name| owner(key, name));
        let held = expect_granted(backend, &holder, place, "the free key is granted").await;
        for waiter in [&first, &second] {
            expect_held(backend, waiter, place, "the key is taken").await;
        }
        let first_grant = handed_over(client, &held, &first).await;
        assert!(first_grant.token > held.token, "{place:?}: tokens increase");
        expect_held(backend, &owner(key, "newcomer"), place, "a newcomer waits").await;
        let extended = renewed(backend.extend(std::slice::from_ref(&first_grant)).await);
        assert_eq!(extended, vec![true], "the handed-over grant renews");
        handed_over(client, &first_grant, &second).await;
        for lease in [&second, &owner(key, "newcomer")] {
            release_now(backend, lease).await;
        }
    }
}

/// Releases `from`'s grant, which must hand the key to `to`: the release announces that
/// (with the token) and `to`'s next attempt finds the key its own, with that token. The
/// watch shows what the backend announces (the Redis backend: a pub/sub message).
async fn handed_over(client: &LockClient, from: &HeldLease, to: &Lease) -> HeldLease {
    let backend = client.backend();
    let mut watch = backend
        .subscribe(&from.lease.key)
        .await
        .expect("subscribes");
    release_now(backend, &from.lease).await;
    // A release of an earlier step can still be on its way to the subscriber (on a loaded
    // machine): only this release hands the key over with a token newer than `from`'s. It
    // may be announced after this one and, to an onlooker, stand for it (a watch keeps the
    // last announcement); asked for `to`'s hand-off, as `to`'s own request asks, the watch
    // finds it among the recent ones.
    let hand_off = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            if let Some(hand_off) = watch.released(Some(owner_tag(&to.owner))).await
                && hand_off.token > from.token
            {
                return hand_off;
            }
        }
    });
    let hand_off = hand_off
        .await
        .expect("the release is announced, naming the waiter it handed the key to");
    assert_eq!(
        hand_off.owner,
        owner_tag(&to.owner),
        "handed to the oldest waiter"
    );
    let grant = expect_granted(backend, to, Turn::Once, "the key was handed over").await;
    assert_eq!(
        grant.token, hand_off.token,
        "the announced token is the grant's"
    );
    grant
}

/// A waiter that stops attempting (it died) is skipped once its place has lapsed.
pub async fn a_lapsed_place_is_skipped(client: &LockClient, key: &str) {
    let backend = client.backend();
    let [ghost, waiter] = ["ghost", "waiter"].map(|name| owner(key, name));
    let holder = expect_granted(backend, &owner(key, "holder"), Turn::Once, "free").await;
    let short_place = Turn::Fair(Duration::from_millis(SHORT_TTL_MS));
    expect_held(backend, &ghost, short_place, "the key is taken").await;
    expect_held(backend, &waiter, Turn::Fair(LONG), "the key is taken").await;
    tokio::time::sleep(Duration::from_millis(SHORT_TTL_MS + 50)).await;
    handed_over(client, &holder, &waiter).await;
    release_now(backend, &waiter).await;
}

/// An acquire by the holder itself (a retry after a lost reply, or a waiter that missed the
/// release handing it the key) restarts its lease, but never shortens it: a late copy of an
/// attempt must not cut a lease its owner counts on.
pub async fn a_retry_by_the_holder_never_shortens_its_lease(client: &LockClient, key: &str) {
    let backend = client.backend();
    let holder = owner(key, "holder");
    let granted = expect_granted(backend, &holder, Turn::Once, "the free key is granted").await;
    let mut shorter = holder.clone();
    shorter.ttl = Duration::from_millis(SHORT_TTL_MS);
    let again = expect_granted(backend, &shorter, Turn::Once, "the holder asks again").await;
    assert_eq!(again.token, granted.token, "the same grant");
    let outcome = backend.acquire(&owner(key, "other"), Turn::Once).await;
    match outcome {
        Ok(Acquire::Held {
            remaining: Some(remaining),
            ..
        }) => assert!(
            remaining > Duration::from_millis(LONG_TTL_MS / 2),
            "the lease was shortened to {remaining:?}"
        ),
        other => panic!("the key stays held, with its lease: {other:?}"),
    }
    release_now(backend, &holder).await;
}

/// A key whose lease ran out (no release handed it over) goes, in fair mode, only to the
/// oldest waiter; in the default mode to whoever asks first, unless the backend's line is
/// always fair ([`Capabilities::always_fair`](crate::backend::Capabilities::always_fair)).
pub async fn a_free_key_goes_to_the_head_in_fair_mode_only(client: &LockClient, key: &str) {
    let backend = client.backend();
    let newcomer_takes_it =
        |turn| turn == Turn::InLine(LONG) && !backend.capabilities().always_fair;
    let [head, newcomer] = ["head", "newcomer"].map(|name| owner(key, name));
    for (newcomer_turn, rule) in [
        (Turn::Fair(LONG), "fair: the head's turn, not a newcomer's"),
        (
            Turn::InLine(LONG),
            "default mode: a free key goes to whoever asks",
        ),
    ] {
        let mut short_lived = owner(key, "short-lived");
        short_lived.ttl = Duration::from_millis(SHORT_TTL_MS);
        expect_granted(backend, &short_lived, Turn::Once, "the free key is granted").await;
        expect_held(backend, &head, Turn::Fair(LONG), "the key is taken").await;
        tokio::time::sleep(Duration::from_millis(SHORT_TTL_MS + 50)).await;
        let outcome = backend.acquire(&newcomer, newcomer_turn).await;
        let granted = matches!(outcome, Ok(Acquire::Granted { .. }));
        assert_eq!(
            granted,
            newcomer_takes_it(newcomer_turn),
            "{rule}: {outcome:?}"
        );
        let first = if granted { &newcomer } else { &head };
        let next = if granted { &head } else { &newcomer };
        let first_grant = expect_granted(backend, first, newcomer_turn, rule).await;
        handed_over(client, &first_grant, next).await;
        release_now(backend, next).await;
    }
}

/// A backend without a line of waiters refuses fair mode (it could not keep its promise),
/// and a waiter's attempt there leaves no place behind: the holder's release hands the key
/// to nobody, and whoever asks first gets it.
pub async fn without_a_line_fair_mode_is_refused(client: &LockClient, key: &str) {
    match client.lock(key).fair(true).give_up().acquire().await {
        Err(LockError::InvalidConfig { .. }) => {}
        other => panic!("fair mode must be refused with InvalidConfig, got {other:?}"),
    }
    let backend = client.backend();
    let [holder, waiter, newcomer] = ["holder", "waiter", "newcomer"].map(|n| owner(key, n));
    expect_granted(backend, &holder, Turn::Once, "the free key is granted").await;
    expect_held(backend, &waiter, Turn::InLine(LONG), "the key is taken").await;
    release_now(backend, &holder).await;
    expect_granted(backend, &newcomer, Turn::Once, "nobody was handed the key").await;
    release_now(backend, &newcomer).await;
}

/// Bad keys and options are refused before anything reaches the backend.
pub async fn bad_input_is_refused(client: &LockClient, key: &str) {
    let cases = [
        (client.lock(""), "an empty key"),
        (client.lock(format!("{key}\n")), "a key with a newline"),
        (
            client.lock("x".repeat(crate::MAX_KEY_LEN + 1)),
            "a key over the limit",
        ),
    ];
    for (request, what) in cases {
        match request.acquire().await {
            Err(LockError::InvalidKey { .. }) => {}
            other => panic!("{what} must be refused with InvalidKey, got {other:?}"),
        }
    }
    for request in [
        client.lock(key).ttl_ms(0),
        client.lock(key).ttl_ms(crate::MAX_TTL_MS + 1),
        client.lock(key).sleep_ms(0),
    ] {
        match request.acquire().await {
            Err(LockError::InvalidConfig { .. }) => {}
            other => panic!("out-of-range options must be refused, got {other:?}"),
        }
    }
    let free = client.lock(key).give_up().acquire().await;
    free.expect("refused requests leave nothing behind")
        .release()
        .await
        .expect("release");
}

/// An operator lists the held locks whose key matches a pattern (and no others), and
/// inspects one: holder by tag (never the owner token), the grant's token, the lease left,
/// the waiters in line and the next one; the fencing counter, where the store keeps one per
/// key, is not behind the grant. A free key inspects as free, bad patterns and keys are
/// refused.
pub async fn an_operator_lists_and_inspects_held_locks(client: &LockClient, key: &str) {
    let (backend, admin) = (client.backend(), client.admin());
    let [first, second] = ["a", "b"].map(|name| owner(&format!("{key}:{name}"), "holder"));
    let elsewhere = owner(&format!("{key}-elsewhere"), "holder");
    let mut grants = Vec::new();
    for lease in [&first, &second, &elsewhere] {
        grants.push(
            expect_granted(backend, lease, Turn::Once, "free")
                .await
                .token,
        );
    }
    let waiter = owner(&first.key, "waiter");
    expect_held(backend, &waiter, Turn::InLine(LONG), "the key is taken").await;
    let pattern = format!("{}:*", glob::escape(key));
    let listed = admin.list(&pattern).await.expect("backend answers");
    let keys: Vec<&str> = listed.iter().map(|state| state.key.as_str()).collect();
    assert_eq!(
        keys,
        [&first.key, &second.key],
        "the keys matching {pattern}, sorted"
    );
    let state = &listed[0];
    match &state.holding {
        Holding::Held {
            owner,
            token,
            remaining,
        } => {
            assert_eq!(*owner, owner_tag(&first.owner), "the holder, by tag");
            assert_eq!(*token, Some(grants[0]), "the grant's token");
            assert!(
                *remaining > Duration::ZERO && *remaining <= LONG,
                "{remaining:?}"
            );
        }
        other => panic!("a held key lists as held: {other:?}"),
    }
    assert!(
        state.fence.is_none_or(|fence| fence >= grants[0]),
        "{state:?}"
    );
    if backend.capabilities().hands_off {
        assert_eq!(state.waiters, 1, "one waiter in line");
        let next = state.next_waiter().expect("the waiter is next");
        assert_eq!(next.owner, owner_tag(&waiter.owner));
        assert!(next.place_left.is_some_and(|left| left <= LONG), "{next:?}");
        assert_eq!(next.lease, Some(waiter.ttl));
    }
    let one = admin.list(&format!("{}:[a]", glob::escape(key))).await;
    assert_eq!(
        one.expect("backend answers").len(),
        1,
        "a set in the pattern"
    );
    let inspected = admin.inspect(&first.key).await.expect("backend answers");
    // All but the times, which run on between the two reads.
    let timeless = |state: &crate::admin::LockState| {
        let queue: Vec<_> = state.queue.iter().map(|waiter| waiter.owner).collect();
        let holding = (state.holding.owner(), state.holding.token());
        (
            state.key.clone(),
            holding,
            state.waiters,
            queue,
            state.fence,
        )
    };
    assert_eq!(
        timeless(&inspected),
        timeless(state),
        "inspect reads what list reads"
    );
    for lease in [&waiter, &first, &second, &elsewhere] {
        release_now(backend, lease).await;
    }
    let free = admin.inspect(&first.key).await.expect("backend answers");
    assert_eq!(free.holding, Holding::Free, "a released key is free");
    assert!(
        matches!(admin.list("").await, Err(LockError::InvalidKey { .. })),
        "an empty pattern is refused"
    );
    for bad in ["", "a\nb"] {
        let refused = admin.inspect(bad).await;
        assert!(
            matches!(refused, Err(LockError::InvalidKey { .. })),
            "{refused:?}"
        );
    }
}

/// An operator's forced release ends the grant it found, whoever holds it: the holder's
/// renewal and release find it lost (no release is remembered for it), the key goes to the
/// oldest waiter with a greater token (the fencing counter is kept) or is announced free, and
/// the release is announced as it is; sent again, or for another holder than the one there,
/// it releases nothing; a free key is left as it is.
pub async fn a_forced_release_ends_the_grant_and_wakes_the_line(client: &LockClient, key: &str) {
    let (backend, admin) = (client.backend(), client.admin());
    let [holder, waiter] = ["holder", "waiter"].map(|name| owner(key, name));
    let held = expect_granted(backend, &holder, Turn::Once, "the free key is granted").await;
    expect_held(backend, &waiter, Turn::InLine(LONG), "the key is taken").await;
    let mut events = match client.notifies() {
        true => Some(admin.watch(key).await.expect("subscribes")),
        false => None,
    };
    let holder_tag = owner_tag(&holder.owner);
    let grant = |owner, token| Grant {
        owner,
        token: Some(token),
    };
    let others = [
        (
            grant(owner_tag(&waiter.owner), held.token),
            "another owner's",
        ),
        (
            grant(holder_tag, held.token - 1),
            "an earlier grant of the holder's",
        ),
    ];
    for (other, whose) in others {
        let not_its = admin.force_release_of(key, other).await;
        let not_its = not_its.expect("backend answers");
        assert!(
            !not_its.released,
            "a release of {whose} leaves the grant: {not_its:?}"
        );
        assert_eq!(not_its.found.owner(), Some(holder_tag), "and names it");
    }
    let forced = admin.force_release(key).await.expect("backend answers");
    assert!(forced.released, "{forced:?}");
    assert_eq!(forced.found.owner(), Some(holder_tag));
    assert_eq!(forced.found.token(), Some(held.token), "{forced:?}");
    let announced = forced.announced.expect("a release is announced");
    let again = admin
        .force_release_of(key, grant(holder_tag, held.token))
        .await;
    let again = again.expect("backend answers");
    assert!(
        !again.released,
        "sent again, it releases nothing: {again:?}"
    );
    if let Some(events) = &mut events {
        let heard = tokio::time::timeout(Duration::from_secs(5), events.next()).await;
        let heard = heard.expect("the watch hears the forced release");
        assert_eq!(heard.expect("backend answers"), announced, "as announced");
    }
    let extended = renewed(backend.extend(std::slice::from_ref(&held)).await);
    assert_eq!(extended, vec![false], "the holder's renewal finds it lost");
    let released = backend.release(&holder, Duration::ZERO).await;
    assert_eq!(released.ok(), Some(Release::NotOwner), "its release too");
    let next = if backend.capabilities().hands_off {
        let ReleaseEvent::HandedOver { to, token, .. } = announced else {
            panic!("the key goes to the waiter in line: {announced:?}");
        };
        assert_eq!(to, owner_tag(&waiter.owner));
        let grant = expect_granted(backend, &waiter, Turn::Once, "handed to the waiter").await;
        assert_eq!(grant.token, token, "with the announced grant");
        grant
    } else {
        assert_eq!(
            announced,
            ReleaseEvent::Released {
                token: Some(held.token)
            }
        );
        expect_granted(backend, &waiter, Turn::Once, "the key is free").await
    };
    assert!(next.token > held.token, "tokens go on increasing");
    // Nobody in line now: the key is announced free, and its fencing counter stays.
    let before = admin.inspect(key).await.expect("backend answers");
    let forced = admin.force_release(key).await.expect("backend answers");
    let free = ReleaseEvent::Released {
        token: Some(next.token),
    };
    assert_eq!(forced.announced, Some(free), "announced free");
    let after = admin.inspect(key).await.expect("backend answers");
    assert_eq!(after.holding, Holding::Free);
    assert_eq!(after.fence, before.fence, "the fencing counter is kept");
    let again = admin.force_release(key).await.expect("backend answers");
    assert_eq!(
        (again.found, again.released, again.announced),
        (Holding::Free, false, None),
        "nothing held"
    );
}

/// An operator's watch sees every announcement in order, also those waiters would see only
/// the last of: two releases in a row, and a waiter leaving a free key's line.
pub async fn an_operator_watch_sees_every_announcement(client: &LockClient, key: &str) {
    let (backend, admin) = (client.backend(), client.admin());
    let mut events = admin.watch(key).await.expect("subscribes");
    let mut expected = Vec::new();
    for _ in 0..2 {
        let guard = hold(client, key).await;
        expected.push(ReleaseEvent::Released {
            token: Some(guard.token()),
        });
        guard.release().await.expect("release");
    }
    if backend.capabilities().hands_off {
        let [short_lived, waiter] = ["short-lived", "waiter"].map(|name| owner(key, name));
        let mut short_lived = short_lived;
        short_lived.ttl = Duration::from_millis(SHORT_TTL_MS);
        expect_granted(backend, &short_lived, Turn::Once, "free").await;
        expect_held(backend, &waiter, Turn::Fair(LONG), "the key is taken").await;
        if backend.capabilities().always_fair {
            // The lease runs out (no release): the line has no free key, the waiter takes it.
            let mut heard = Vec::new();
            while heard.len() <= expected.len() {
                heard.push(next_event(&mut events).await);
            }
            let Some(&ReleaseEvent::HandedOver { to, token, .. }) = heard.last() else {
                panic!("the waiter takes the key whose lease ran out: {heard:?}");
            };
            assert_eq!(to, owner_tag(&waiter.owner), "{heard:?}");
            expected.push(heard[expected.len()]);
            release_now(backend, &waiter).await;
            expected.push(ReleaseEvent::Released { token: Some(token) });
            heard.push(next_event(&mut events).await);
            assert_eq!(heard, expected, "every announcement, in order");
            return;
        }
        // The lease runs out (no release); the waiter gives up its place on a free key.
        tokio::time::sleep(Duration::from_millis(SHORT_TTL_MS + 50)).await;
        release_now(backend, &waiter).await;
        expected.push(ReleaseEvent::WaiterLeft);
    }
    let mut heard = Vec::new();
    while heard.len() < expected.len() {
        heard.push(next_event(&mut events).await);
    }
    assert_eq!(heard, expected, "every announcement, in order");
}

async fn next_event(events: &mut crate::admin::ReleaseEvents) -> ReleaseEvent {
    let event = tokio::time::timeout(Duration::from_secs(5), events.next()).await;
    event.expect("each is heard").expect("backend answers")
}

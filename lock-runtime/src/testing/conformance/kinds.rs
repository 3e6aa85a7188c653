//! The conformance checks of the shared kinds (read/write locks, semaphores, segmented
//! locks), for every backend that offers them; a backend that does not must refuse them
//! with a clear error.

use std::time::Duration;

use super::{
    LONG, LONG_TTL_MS, RENEWED_TTL_MS, SHORT_TTL_MS, expect_granted, expect_held,
    expect_not_acquired, release_now, renewed,
};
use crate::admin::{Grant, Holding, ReleaseEvent};
use crate::backend::{HeldLease, Lease, Turn};
use crate::release_hub::owner_tag;
use crate::{LockClient, LockError, LockGuard, LockKind};

const SEMAPHORE: LockKind = LockKind::Semaphore { permits: 3 };
const SHARDS: LockKind = LockKind::Segmented { shards: 4 };

/// Each kind the backend does not offer is refused before anything is sent.
pub async fn kinds_not_offered_are_refused(client: &LockClient, namespace: &str) {
    for kind in [LockKind::Read, LockKind::Write, SEMAPHORE, SHARDS] {
        a_kind_not_offered_is_refused(client, &format!("{namespace}:{}", kind.name()), kind).await;
    }
}

/// Whether the backend offers read/write locks.
pub(super) fn offers_read_write(client: &LockClient) -> bool {
    client.backend().capabilities().offers(LockKind::Read)
}

/// Whether the backend offers semaphores.
pub(super) fn offers_semaphores(client: &LockClient) -> bool {
    client.backend().capabilities().offers(SEMAPHORE)
}

/// Whether the backend offers segmented locks.
pub(super) fn offers_shards(client: &LockClient) -> bool {
    client.backend().capabilities().offers(SHARDS)
}

/// A lease of `kind` for `name`, straight at the backend.
fn lease(key: &str, name: &str, kind: LockKind) -> Lease {
    Lease {
        key: key.to_owned(),
        owner: format!("conformance-{name}"),
        ttl: Duration::from_millis(LONG_TTL_MS),
        replicas: 0,
        kind,
    }
}

/// One attempt of a `kind` request that gives up at once.
async fn try_once(client: &LockClient, key: &str, kind: LockKind) -> Result<LockGuard, LockError> {
    let request = client.request(key, kind).ttl_ms(LONG_TTL_MS).give_up();
    request.acquire().await
}

async fn take(client: &LockClient, key: &str, kind: LockKind, rule: &str) -> LockGuard {
    try_once(client, key, kind)
        .await
        .unwrap_or_else(|e| panic!("{rule}: {e}"))
}

/// A backend that does not offer a kind refuses it before sending anything.
pub async fn a_kind_not_offered_is_refused(client: &LockClient, key: &str, kind: LockKind) {
    if client.backend().capabilities().offers(kind) {
        return;
    }
    match try_once(client, key, kind).await {
        Err(LockError::InvalidConfig { reason }) => assert!(
            reason.contains(&format!("does not offer {} locks", kind.name())),
            "{reason}"
        ),
        other => panic!("a kind the backend does not offer must be refused: {other:?}"),
    }
}

/// Readers hold a key together; a writer waits for all of them, and readers for it; the
/// writer's token exceeds the readers'.
pub async fn readers_share_and_a_writer_excludes(client: &LockClient, key: &str) {
    let first = take(client, key, LockKind::Read, "a free key admits a reader").await;
    let second = take(client, key, LockKind::Read, "readers share a key").await;
    let writer = try_once(client, key, LockKind::Write).await;
    expect_not_acquired(writer, 1, "a writer must wait for the readers");
    first.release().await.expect("release");
    let writer = try_once(client, key, LockKind::Write).await;
    expect_not_acquired(writer, 1, "a writer must wait for the last reader");
    let reader_token = second.token();
    second.release().await.expect("release");
    let writer = take(
        client,
        key,
        LockKind::Write,
        "a key without readers admits a writer",
    )
    .await;
    assert!(
        writer.token() > reader_token,
        "a writer's token exceeds the readers'"
    );
    let reader = try_once(client, key, LockKind::Read).await;
    expect_not_acquired(reader, 1, "a reader must wait for the writer");
    let writer_again = try_once(client, key, LockKind::Write).await;
    expect_not_acquired(writer_again, 1, "writers exclude each other");
    writer.release().await.expect("release");
}

/// A writer that waits in line holds back the readers that arrive after it, though only
/// readers hold the key; it gets the key when the readers leave (handed over by the last
/// release, or at its next attempt where releases hand nothing over), before those readers.
pub async fn a_waiting_writer_goes_before_later_readers(client: &LockClient, key: &str) {
    let backend = client.backend();
    let reader = lease(key, "reader", LockKind::Read);
    let writer = lease(key, "writer", LockKind::Write);
    let late = lease(key, "late-reader", LockKind::Read);
    let held = expect_granted(backend, &reader, Turn::Once, "a free key admits a reader").await;
    expect_held(
        backend,
        &writer,
        Turn::InLine(LONG),
        "a writer waits for the reader",
    )
    .await;
    expect_held(
        backend,
        &late,
        Turn::InLine(LONG),
        "a reader after a waiting writer waits",
    )
    .await;
    release_now(backend, &held.lease).await;
    let written = expect_granted(
        backend,
        &writer,
        Turn::InLine(LONG),
        "the writer gets the key once the reader left",
    )
    .await;
    assert!(
        written.token > held.token,
        "the writer's token exceeds the reader's"
    );
    expect_held(
        backend,
        &late,
        Turn::InLine(LONG),
        "the late reader waits for the writer",
    )
    .await;
    release_now(backend, &writer).await;
    let read = expect_granted(
        backend,
        &late,
        Turn::Once,
        "the reader gets the key once the writer left",
    )
    .await;
    assert!(
        read.token > written.token,
        "tokens increase across the hand-over"
    );
    release_now(backend, &late).await;
}

/// A writer's release hands the key to every reader at the head of the line at once, up to
/// the next writer in line, which waits for them.
pub async fn a_release_hands_over_to_the_readers_at_the_head(client: &LockClient, key: &str) {
    let backend = client.backend();
    let writer = lease(key, "writer", LockKind::Write);
    let readers = ["first", "second"].map(|name| lease(key, name, LockKind::Read));
    let next_writer = lease(key, "next-writer", LockKind::Write);
    let last = lease(key, "last", LockKind::Read);
    expect_granted(backend, &writer, Turn::Once, "a free key admits a writer").await;
    for waiting in readers.iter().chain([&next_writer, &last]) {
        expect_held(
            backend,
            waiting,
            Turn::InLine(LONG),
            "the writer holds the key",
        )
        .await;
    }
    release_now(backend, &writer).await;
    for reader in &readers {
        expect_granted(
            backend,
            reader,
            Turn::Once,
            "the readers at the head get the key together",
        )
        .await;
    }
    expect_held(
        backend,
        &next_writer,
        Turn::InLine(LONG),
        "the next writer waits for them",
    )
    .await;
    expect_held(
        backend,
        &last,
        Turn::InLine(LONG),
        "a reader behind that writer waits too",
    )
    .await;
    for reader in &readers {
        release_now(backend, reader).await;
    }
    expect_granted(
        backend,
        &next_writer,
        Turn::Once,
        "the last reader's release hands over to the writer",
    )
    .await;
    for lease in [&next_writer, &last] {
        release_now(backend, lease).await;
    }
}

/// A semaphore admits its permits and no more; a released permit admits the next request.
pub async fn a_semaphore_lets_in_its_permits(client: &LockClient, key: &str) {
    let mut inside = Vec::new();
    for _ in 0..3 {
        inside.push(take(client, key, SEMAPHORE, "a permit is free").await);
    }
    let fourth = try_once(client, key, SEMAPHORE).await;
    expect_not_acquired(fourth, 1, "no more holders than permits");
    let tokens: Vec<u64> = inside.iter().map(LockGuard::token).collect();
    assert!(
        tokens.windows(2).all(|pair| pair[0] < pair[1]),
        "tokens increase: {tokens:?}"
    );
    inside
        .pop()
        .expect("three")
        .release()
        .await
        .expect("release");
    let fourth = take(client, key, SEMAPHORE, "a released permit is free again").await;
    assert!(fourth.shard().is_none(), "a semaphore names no shard");
    inside.push(fourth);
    for guard in inside {
        guard.release().await.expect("release");
    }
}

/// Holders that ask for different counts: nobody enters while as many are inside as the
/// smallest count of those inside, or its own.
pub async fn the_smallest_count_inside_wins(client: &LockClient, key: &str) {
    let two = LockKind::Semaphore { permits: 2 };
    let five = LockKind::Semaphore { permits: 5 };
    let small = take(client, key, two, "a free semaphore").await;
    let big = take(client, key, five, "one of five").await;
    let refused = try_once(client, key, five).await;
    expect_not_acquired(
        refused,
        1,
        "a holder that asked for 2 is inside with another",
    );
    small.release().await.expect("release");
    let admitted = take(
        client,
        key,
        five,
        "without the holder of 2, five permits hold",
    )
    .await;
    let refused = try_once(client, key, two).await;
    expect_not_acquired(refused, 1, "a request for 2 finds 2 inside");
    for guard in [big, admitted] {
        guard.release().await.expect("release");
    }
}

/// A permit whose holder stops renewing (it crashed) comes back when its lease ends.
pub async fn an_expired_permit_comes_back(client: &LockClient, key: &str) {
    let one = LockKind::Semaphore { permits: 1 };
    let crashed = client
        .request(key, one)
        .ttl_ms(SHORT_TTL_MS)
        .renew(false)
        .give_up();
    let crashed = crashed.acquire().await.expect("a free permit");
    let refused = try_once(client, key, one).await;
    expect_not_acquired(refused, 1, "the permit is held until its lease ends");
    let next = client
        .request(key, one)
        .sleep_ms(20)
        .wait_ms(LONG_TTL_MS / 4)
        .acquire()
        .await;
    let next = next.expect("the permit comes back when its lease ends");
    assert!(next.token() > crashed.token(), "tokens increase");
    next.release().await.expect("release");
    drop(crashed);
}

/// A segmented lock grants each shard to one holder and names it; a request finds a free
/// shard while there is one, and a released shard is the one granted next.
pub async fn shards_are_exclusive_and_named(client: &LockClient, key: &str) {
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(take(client, key, SHARDS, "a shard is free").await);
    }
    let mut shards: Vec<u32> = held
        .iter()
        .map(|g| g.shard().expect("a shard is named"))
        .collect();
    shards.sort_unstable();
    assert_eq!(shards, [0, 1, 2, 3], "each shard once");
    let fifth = try_once(client, key, SHARDS).await;
    expect_not_acquired(fifth, 1, "every shard is held");
    let freed = held.swap_remove(1);
    let shard = freed.shard();
    freed.release().await.expect("release");
    let next = take(client, key, SHARDS, "a released shard is free").await;
    assert_eq!(next.shard(), shard, "the only free shard is granted");
    held.push(next);
    for guard in held {
        guard.release().await.expect("release");
    }
    // Counts need not agree: a request for fewer shards takes one below its count, and one
    // for more takes a free shard beside it.
    let narrow = take(
        client,
        key,
        LockKind::Segmented { shards: 1 },
        "shard 0 is free",
    )
    .await;
    assert_eq!(narrow.shard(), Some(0));
    let wide = take(client, key, SHARDS, "shards 1 to 3 are free beside shard 0").await;
    assert_ne!(wide.shard(), Some(0));
    for guard in [narrow, wide] {
        guard.release().await.expect("release");
    }
}

/// A shard marked exhausted by its holder is skipped by every later request until refilled;
/// a request whose every shard is marked is refused at once with `Exhausted`; only the
/// grant that holds a shard can mark it.
pub async fn exhausted_shards_are_skipped_until_refilled(client: &LockClient, key: &str) {
    let rule = "exhausted_shards_are_skipped_until_refilled";
    let marks = client
        .backend()
        .shard_marks()
        .expect("segmented locks keep marks");
    let first = take(client, key, SHARDS, rule).await;
    let marked = first.shard().expect("a shard is named");
    first
        .mark_exhausted()
        .await
        .expect("the holder marks its shard");
    let stale = HeldLease {
        lease: lease(key, "stale", SHARDS),
        token: first.token(),
        slot: first.shard(),
    };
    let not_held = marks.mark_exhausted(&stale).await.expect("mark");
    assert!(!not_held, "{rule}: another owner cannot mark a shard");
    first.release().await.expect("release");
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(take(client, key, SHARDS, rule).await);
    }
    assert!(
        held.iter().all(|g| g.shard() != Some(marked)),
        "{rule}: the marked shard {marked} is skipped"
    );
    expect_not_acquired(try_once(client, key, SHARDS).await, 1, rule);
    for guard in held {
        guard
            .mark_exhausted()
            .await
            .expect("the holder marks its shard");
        guard.release().await.expect("release");
    }
    let refused = client
        .request(key, SHARDS)
        .ttl_ms(LONG_TTL_MS)
        .wait_ms(LONG.as_millis() as u64)
        .acquire()
        .await;
    match refused {
        Err(LockError::Exhausted { shard: None, .. }) => {}
        other => panic!("{rule}: every shard marked refuses at once, got {other:?}"),
    }
    client.refill_shard(key, 2).await.expect("refill");
    let refilled = take(client, key, SHARDS, rule).await;
    assert_eq!(refilled.shard(), Some(2), "{rule}: the refilled shard");
    let released = refilled.held_lease();
    refilled.release().await.expect("release");
    let gone = marks.mark_exhausted(&released).await.expect("mark");
    assert!(!gone, "{rule}: a released grant marks nothing");
    client.refill_shards(key).await.expect("refill");
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(take(client, key, SHARDS, rule).await);
    }
    for guard in held {
        guard.release().await.expect("release");
    }
}

/// A key held by one kind refuses requests of another, with `KeyInUse`, whichever way round.
pub async fn kinds_do_not_mix_on_one_key(client: &LockClient, key: &str) {
    let pairs = [
        (LockKind::Mutex, LockKind::Read),
        (LockKind::Read, LockKind::Mutex),
        (SEMAPHORE, LockKind::Write),
        (SHARDS, SEMAPHORE),
    ];
    let offered = |kind| client.backend().capabilities().offers(kind);
    for (held, asked) in pairs.into_iter().filter(|&(a, b)| offered(a) && offered(b)) {
        let holder = take(client, key, held, "a free key").await;
        match try_once(client, key, asked).await {
            Err(LockError::KeyInUse { reason, .. }) => {
                assert!(reason.contains("use one kind of lock per key"), "{reason}")
            }
            other => panic!(
                "a {} lock of a {} key: {other:?}",
                asked.name(),
                held.name()
            ),
        }
        holder.release().await.expect("release");
    }
}

/// Renewal extends a shared grant only for its owner and token, and not after its release.
pub async fn shared_grants_are_renewed_owner_checked(client: &LockClient, key: &str) {
    let backend = client.backend();
    let shared = [LockKind::Read, SEMAPHORE, SHARDS].into_iter();
    for kind in shared.filter(|kind| backend.capabilities().offers(*kind)) {
        let mine = lease(key, "mine", kind);
        let granted = expect_granted(backend, &mine, Turn::Once, "a free key").await;
        let stale = HeldLease {
            token: granted.token + 1,
            ..granted.clone()
        };
        let other = HeldLease {
            lease: lease(key, "other", kind),
            ..granted.clone()
        };
        // The same grant in another permit or shard (on Redlock, a stray grant of a master
        // whose give-back was lost) is not this one.
        let elsewhere = HeldLease {
            slot: granted.slot.map(|slot| (slot + 1) % 3),
            ..granted.clone()
        };
        let extended = renewed(
            backend
                .extend(&[granted.clone(), stale, other, elsewhere])
                .await,
        );
        // Readers name no slot: there, the last lease is the grant itself again.
        assert_eq!(
            extended,
            [true, false, false, granted.slot.is_none()],
            "{}: only the grant itself is extended",
            kind.name()
        );
        release_now(backend, &mine).await;
        let extended = renewed(backend.extend(&[granted]).await);
        assert_eq!(
            extended,
            [false],
            "{}: a released grant is not extended",
            kind.name()
        );
    }
    if !backend.capabilities().offers(LockKind::Read) {
        return;
    }
    let renewed = client
        .request(key, LockKind::Read)
        .ttl_ms(RENEWED_TTL_MS)
        .give_up();
    let acquired_at = tokio::time::Instant::now();
    let renewed = renewed.acquire().await.expect("a free key");
    tokio::time::sleep_until(acquired_at + Duration::from_millis(RENEWED_TTL_MS * 3)).await;
    assert!(
        !renewed.is_lost(),
        "renewal keeps a reader's lease past its ttl"
    );
    let writer = try_once(client, key, LockKind::Write).await;
    expect_not_acquired(writer, 1, "the renewed reader still holds the key");
    renewed
        .release()
        .await
        .expect("the renewed grant is still the reader's");
}

/// `min_hold_ms` keeps a released shared grant counted until the minimum has passed.
pub async fn a_shared_min_hold_keeps_the_grant(client: &LockClient, key: &str) {
    let one = LockKind::Semaphore { permits: 2 };
    // A late copy of the owner's attempt finds its kept grant: no second permit.
    let backend = client.backend();
    let late_key = format!("{key}:late");
    let mine = lease(&late_key, "kept", one);
    expect_granted(backend, &mine, Turn::Once, "a free permit").await;
    let kept = backend
        .release(&mine, Duration::from_millis(SHORT_TTL_MS))
        .await
        .expect("backend answers");
    assert_eq!(kept, crate::backend::Release::Released);
    expect_held(
        backend,
        &mine,
        Turn::InLine(LONG),
        "a late attempt of the owner takes no second grant beside its kept one",
    )
    .await;
    release_now(backend, &mine).await;
    let other = expect_granted(
        backend,
        &lease(&late_key, "other", one),
        Turn::Once,
        "one permit of two is free",
    )
    .await;
    release_now(backend, &other.lease).await;
    let one = LockKind::Semaphore { permits: 1 };
    let kept = client
        .request(key, one)
        .ttl_ms(LONG_TTL_MS)
        .min_hold_ms(SHORT_TTL_MS)
        .give_up();
    kept.acquire()
        .await
        .expect("a free permit")
        .release()
        .await
        .expect("release");
    let refused = try_once(client, key, one).await;
    expect_not_acquired(
        refused,
        1,
        "the permit stays taken until min_hold_ms has passed",
    );
    let next = client
        .request(key, one)
        .sleep_ms(20)
        .wait_ms(LONG_TTL_MS / 4)
        .acquire()
        .await;
    next.expect("the permit frees itself once min_hold_ms has passed")
        .release()
        .await
        .expect("release");
}

/// A shared release wakes a subscribed watch (where the backend announces releases), and a
/// release sent again finds it released.
pub async fn a_shared_release_is_announced_and_remembered(client: &LockClient, key: &str) {
    let backend = client.backend();
    let reader = lease(key, "reader", LockKind::Read);
    expect_granted(backend, &reader, Turn::Once, "a free key").await;
    let mut watch = if client.notifies() {
        Some(backend.subscribe(key).await.expect("backend answers"))
    } else {
        None
    };
    let released = backend
        .release(&reader, Duration::ZERO)
        .await
        .expect("backend answers");
    assert_eq!(released, crate::backend::Release::Released);
    if let Some(watch) = &mut watch {
        tokio::time::timeout(Duration::from_secs(5), watch.released(None))
            .await
            .expect("the release is announced");
    }
    let again = backend
        .release(&reader, Duration::ZERO)
        .await
        .expect("backend answers");
    assert_eq!(
        again,
        crate::backend::Release::Released,
        "a resent release learns it released"
    );
    let stranger = lease(key, "stranger", LockKind::Read);
    let foreign = backend
        .release(&stranger, Duration::ZERO)
        .await
        .expect("backend answers");
    assert_eq!(
        foreign,
        crate::backend::Release::NotOwner,
        "nobody else's release succeeds"
    );
}

/// An operator sees the grants of a shared kind (readers, the writer, each permit and shard
/// with its count) by owner tag, token and lease, and lists the key as held. A forced release
/// of the key is refused while several grants hold it (naming them); one of a grant named
/// ends that grant only (its renewal finds it lost, sent again it ends nothing), and of the
/// one grant left, the key's, which goes to a writer waiting in line where releases hand
/// keys over.
pub async fn an_operator_sees_and_ends_shared_grants(client: &LockClient, key: &str) {
    let (backend, admin) = (client.backend(), client.admin());
    let mut kinds = vec![LockKind::Read];
    let offered = |kind: &LockKind| backend.capabilities().offers(*kind);
    kinds.extend([SEMAPHORE, SHARDS].into_iter().filter(offered));
    for kind in kinds {
        let kind_key = format!("{key}:{}", kind.name());
        let mut held = Vec::new();
        for name in ["first", "second"] {
            let lease = lease(&kind_key, &format!("{}-{name}", kind.name()), kind);
            held.push(expect_granted(backend, &lease, Turn::Once, "a shared grant").await);
        }
        let state = admin.inspect(&kind_key).await.expect("backend answers");
        let Holding::Shared {
            grants, holders, ..
        } = &state.holding
        else {
            panic!(
                "a key two {} grants hold inspects as shared: {state:?}",
                kind.name()
            );
        };
        assert_eq!(*holders, 2, "{state:?}");
        let mut seen: Vec<_> = grants
            .iter()
            .map(|grant| (grant.owner, grant.kind, grant.token, grant.slot))
            .collect();
        let mut expected: Vec<_> = held
            .iter()
            .map(|h| (owner_tag(&h.lease.owner), kind, Some(h.token), h.slot))
            .collect();
        seen.sort_unstable_by_key(|(owner, ..)| *owner);
        expected.sort_unstable_by_key(|(owner, ..)| *owner);
        assert_eq!(seen, expected, "each grant by tag, kind, token and slot");
        assert!(
            grants
                .iter()
                .all(|grant| grant.remaining > Duration::ZERO && grant.remaining <= LONG),
            "{grants:?}"
        );
        let listed = admin
            .list(&format!("{}*", crate::glob::escape(&kind_key)))
            .await
            .expect("backend answers");
        assert_eq!(listed.len(), 1, "a shared key lists as held: {listed:?}");
        assert!(listed[0].holding.is_held(), "{listed:?}");
        let forced = admin.force_release(&kind_key).await;
        assert!(
            matches!(&forced, Err(LockError::InvalidConfig { reason })
                if reason.contains(&owner_tag(&held[0].lease.owner).to_string())),
            "a forced release of a key several grants hold names them: {forced:?}"
        );
        let first = grants
            .iter()
            .find(|grant| grant.owner == owner_tag(&held[0].lease.owner))
            .expect("shown");
        let forced = admin.force_release_of(&kind_key, first.grant()).await;
        let forced = forced.expect("backend answers");
        assert!(forced.released, "{forced:?}");
        assert!(
            matches!(forced.found, Holding::Shared { holders: 2, .. }),
            "{forced:?}"
        );
        let extended = renewed(backend.extend(&held).await);
        assert_eq!(extended, [false, true], "only the grant named ended");
        let again = admin.force_release_of(&kind_key, first.grant()).await;
        assert!(!again.expect("backend answers").released, "ended once");
        let last = admin
            .force_release(&kind_key)
            .await
            .expect("backend answers");
        assert!(last.released, "the one grant left: {last:?}");
        let after = admin.inspect(&kind_key).await.expect("backend answers");
        assert_eq!(after.holding, Holding::Free, "{after:?}");
        let extended = renewed(backend.extend(&held[1..]).await);
        assert_eq!(extended, [false], "the last grant ended too");
    }
    let writer = lease(&format!("{key}:write"), "writer", LockKind::Write);
    let held = expect_granted(backend, &writer, Turn::Once, "a free key").await;
    let state = admin.inspect(&writer.key).await.expect("backend answers");
    match &state.holding {
        Holding::Shared {
            grants, holders: 1, ..
        } => assert_eq!(
            (grants[0].owner, grants[0].kind, grants[0].token),
            (owner_tag(&writer.owner), LockKind::Write, Some(held.token)),
        ),
        other => panic!("a writer's key inspects as shared: {other:?}"),
    }
    release_now(backend, &writer).await;
    let free = admin.inspect(&writer.key).await.expect("backend answers");
    assert_eq!(free.holding, Holding::Free, "a released key is free");
    if !backend.capabilities().hands_off {
        return;
    }
    let handed_key = format!("{key}:handed");
    let reader = lease(&handed_key, "reader", LockKind::Read);
    expect_granted(backend, &reader, Turn::Once, "a free key").await;
    let writer = lease(&handed_key, "waiting-writer", LockKind::Write);
    expect_held(backend, &writer, Turn::InLine(LONG), "a reader holds it").await;
    let forced = admin
        .force_release(&handed_key)
        .await
        .expect("backend answers");
    match forced.announced {
        Some(ReleaseEvent::HandedOver { to, .. }) => {
            assert_eq!(to, owner_tag(&writer.owner), "{forced:?}")
        }
        other => panic!("the waiting writer gets the key: {other:?}"),
    }
    let state = admin.inspect(&handed_key).await.expect("backend answers");
    match &state.holding {
        Holding::Shared {
            grants, holders: 1, ..
        } => {
            assert_eq!(grants[0].owner, owner_tag(&writer.owner), "{state:?}")
        }
        other => panic!("the writer holds the key: {other:?}"),
    }
    release_now(backend, &writer).await;
}

/// A renewal already on its way when its holder releases with `min_hold_ms` never revives the
/// grant: the key stays kept (no token, no lease) rather than held again for a whole lease.
/// The two calls race at offsets of 0 to 1.1 ms. Found by the review of consensus semaphores
/// (2026-12-05): ZooKeeper and etcd revived it in about a third of the tries.
pub async fn a_renewal_in_flight_never_revives_a_kept_release(client: &LockClient, key: &str) {
    let (backend, admin) = (client.backend().clone(), client.admin());
    let kinds = [LockKind::Mutex, SEMAPHORE];
    for kind in kinds
        .into_iter()
        .filter(|kind| backend.capabilities().offers(*kind))
    {
        for round in 0..24_u64 {
            let mine = lease(key, &format!("revive-{}-{round}", kind.name()), kind);
            let held = expect_granted(&backend, &mine, Turn::Once, "a free key").await;
            let (releasing, extending) = (backend.clone(), backend.clone());
            let released = tokio::spawn({
                let mine = mine.clone();
                async move { releasing.release(&mine, Duration::from_secs(3)).await }
            });
            let extended = tokio::spawn(async move {
                tokio::time::sleep(Duration::from_micros(round % 12 * 100)).await;
                extending.extend(&[held]).await
            });
            released.await.expect("joins").expect("backend answers");
            let _ = extended.await.expect("joins");
            let tag = owner_tag(&mine.owner);
            let state = admin.inspect(key).await.expect("backend answers");
            let revived = match &state.holding {
                Holding::Held { owner, token, .. } => *owner == tag && token.is_some(),
                Holding::Shared { grants, .. } => {
                    grants.iter().any(|g| g.owner == tag && g.token.is_some())
                }
                _ => false,
            };
            assert!(
                !revived,
                "round {round}: a renewal revived a kept {} grant: {state:?}",
                kind.name()
            );
            admin
                .force_release_of(key, Grant::of_owner(tag))
                .await
                .expect("backend answers");
        }
    }
}

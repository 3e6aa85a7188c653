//! Races of a waiter's attempts with its client's watch, which only an order of replies that
//! a real store gives by chance shows: here on a store in memory whose next read a test
//! holds until it lets it go.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, oneshot};

use super::state::{EntryKind, State};
use super::{ConsensusBackend, ConsensusStore, Entry, Kept};
use crate::backend::{
    Acquire, BoxFuture, Lease, LockBackend, Published, Release, SharedResult, Turn,
};
use crate::background::Background;
use crate::release_hub::owner_tag;
use crate::sync::lock_ignoring_poison;
use crate::{LockError, LockKind};

const KEY: &str = "stock:7";
/// Long enough that no place or lease lapses while a test runs.
const PLACE: Duration = Duration::from_secs(30);

#[derive(Debug, Default)]
struct Lines {
    by_key: BTreeMap<String, Vec<Entry>>,
    /// Single-flight values and their versions.
    results: BTreeMap<String, (Vec<u8>, i64)>,
    /// Orders, tokens and versions: one counter, as ZooKeeper's zxid.
    counter: u64,
}

/// A line store in memory; `hold_next_read` holds the reply of the next `line` call.
#[derive(Debug, Default, Clone)]
struct HeldStore(Arc<Shared>);

#[derive(Debug, Default)]
struct Shared {
    lines: Mutex<Lines>,
    changed: Notify,
    /// Told of each watch made (a permit kept until a test awaits it).
    watched: Notify,
    next_read: Mutex<Option<Hold>>,
}

#[derive(Debug)]
struct Hold {
    read: oneshot::Sender<()>,
    go: oneshot::Receiver<()>,
}

impl HeldStore {
    /// Holds the next read of a line once it has read: completes the first channel then,
    /// and returns the line when the second is sent to.
    fn hold_next_read(&self) -> (oneshot::Receiver<()>, oneshot::Sender<()>) {
        let (read, has_read) = oneshot::channel();
        let (let_go, go) = oneshot::channel();
        *lock_ignoring_poison(&self.0.next_read) = Some(Hold { read, go });
        (has_read, let_go)
    }

    /// Applies `change` to the entry `id` of `key` if it still has `version` (any: `None`).
    fn change<T>(
        &self,
        key: &str,
        id: &str,
        version: Option<i64>,
        change: impl FnOnce(&mut Vec<Entry>, usize, i64) -> T,
    ) -> Option<T> {
        let mut lines = lock_ignoring_poison(&self.0.lines);
        lines.counter += 1;
        let next_version = lines.counter as i64;
        let line = lines.by_key.get_mut(key)?;
        let at = line.iter().position(|entry| entry.id == id)?;
        if version.is_some_and(|version| version != line[at].version) {
            return None;
        }
        let changed = change(line, at, next_version);
        self.0.changed.notify_waiters();
        Some(changed)
    }

    /// The version of `id` in `key`'s line, if it is there.
    fn version(&self, key: &str, id: &str) -> Option<i64> {
        let lines = lock_ignoring_poison(&self.0.lines);
        let line = lines.by_key.get(key)?;
        line.iter()
            .find(|entry| entry.id == id)
            .map(|entry| entry.version)
    }
}

impl ConsensusStore for HeldStore {
    fn enter<'a>(
        &'a self,
        key: &'a str,
        owner: &'a str,
        kind: EntryKind,
        state: State,
    ) -> BoxFuture<'a, Result<Entry, LockError>> {
        let mut lines = lock_ignoring_poison(&self.0.lines);
        lines.counter += 1;
        let order = lines.counter;
        let entry = Entry {
            id: format!("{key}/{order}"),
            owner: owner.to_owned(),
            order,
            token: order,
            version: order as i64,
            kind,
            state,
            session: 1,
        };
        let line = lines.by_key.entry(key.to_owned()).or_default();
        line.push(entry.clone());
        self.0.changed.notify_waiters();
        Box::pin(std::future::ready(Ok(entry)))
    }

    fn line<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Vec<Entry>, LockError>> {
        let line = lock_ignoring_poison(&self.0.lines)
            .by_key
            .get(key)
            .cloned()
            .unwrap_or_default();
        let hold = lock_ignoring_poison(&self.0.next_read).take();
        Box::pin(async move {
            if let Some(Hold { read, go }) = hold {
                let _ = read.send(());
                let _ = go.await;
            }
            Ok(line)
        })
    }

    fn write<'a>(
        &'a self,
        key: &'a str,
        entry: &'a Entry,
        state: State,
        version: Option<i64>,
    ) -> BoxFuture<'a, Result<Option<i64>, LockError>> {
        let written = self.change(key, &entry.id, version, |line, at, next| {
            line[at].state = state;
            line[at].version = next;
            next
        });
        Box::pin(std::future::ready(Ok(written)))
    }

    fn remove<'a>(
        &'a self,
        key: &'a str,
        entry: &'a Entry,
        version: Option<i64>,
    ) -> BoxFuture<'a, Result<bool, LockError>> {
        let removed = self.change(key, &entry.id, version, |line, at, _| line.remove(at));
        Box::pin(std::future::ready(Ok(removed.is_some())))
    }

    fn watch<'a>(
        &'a self,
        key: &'a str,
        entry: &'a Entry,
    ) -> BoxFuture<'a, Result<Option<BoxFuture<'static, ()>>, LockError>> {
        let Some(version) = self.version(key, &entry.id) else {
            return Box::pin(std::future::ready(Ok(None)));
        };
        self.0.watched.notify_one();
        let (store, key, id) = (self.clone(), key.to_owned(), entry.id.clone());
        let changed: BoxFuture<'static, ()> = Box::pin(async move {
            loop {
                let notified = store.0.changed.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                if store.version(&key, &id) != Some(version) {
                    return;
                }
                notified.await;
            }
        });
        Box::pin(std::future::ready(Ok(Some(changed))))
    }

    fn keys(&self) -> BoxFuture<'_, Result<Vec<String>, LockError>> {
        let keys = lock_ignoring_poison(&self.0.lines)
            .by_key
            .keys()
            .cloned()
            .collect();
        Box::pin(std::future::ready(Ok(keys)))
    }

    fn session(&self) -> u64 {
        1
    }

    fn result<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Kept, LockError>> {
        let kept = lock_ignoring_poison(&self.0.lines)
            .results
            .get(key)
            .cloned();
        Box::pin(std::future::ready(Ok(kept)))
    }

    fn put_result<'a>(
        &'a self,
        key: &'a str,
        data: &'a [u8],
        version: Option<i64>,
        holder: &'a Entry,
    ) -> BoxFuture<'a, Result<bool, LockError>> {
        let mut lines = lock_ignoring_poison(&self.0.lines);
        lines.counter += 1;
        let next_version = lines.counter as i64;
        let held = lines
            .by_key
            .get(key)
            .is_some_and(|line| line.iter().any(|entry| entry.id == holder.id));
        let unchanged = lines.results.get(key).map(|(_, version)| *version) == version;
        let written = held && unchanged;
        if written {
            lines
                .results
                .insert(key.to_owned(), (data.to_vec(), next_version));
        }
        Box::pin(std::future::ready(Ok(written)))
    }

    fn marks<'a>(&'a self, _: &'a str) -> BoxFuture<'a, Result<Kept, LockError>> {
        Box::pin(std::future::ready(Ok(None)))
    }

    fn put_marks<'a>(
        &'a self,
        _: &'a str,
        _: &'a [u8],
        _: Option<i64>,
        _: Option<&'a Entry>,
    ) -> BoxFuture<'a, Result<bool, LockError>> {
        Box::pin(std::future::ready(Ok(false)))
    }

    fn session_timeout(&self) -> Duration {
        PLACE * 4
    }
}

fn lease(owner: &str) -> Lease {
    Lease {
        key: KEY.to_owned(),
        owner: owner.to_owned(),
        ttl: PLACE,
        replicas: 0,
        kind: LockKind::Mutex,
    }
}

/// A store, a client on it, a holder of `KEY` and a waiter in line behind it.
async fn held_with_a_waiter() -> (HeldStore, Arc<ConsensusBackend<HeldStore>>) {
    let store = HeldStore::default();
    let background = Background::Runtime(tokio::runtime::Handle::current());
    let backend = Arc::new(ConsensusBackend::new(store.clone(), background));
    let holder = backend.acquire(&lease("holder"), Turn::Once).await;
    assert!(matches!(holder, Ok(Acquire::Granted { .. })), "{holder:?}");
    let waiter = backend.acquire(&lease("waiter"), Turn::InLine(PLACE)).await;
    assert!(matches!(waiter, Ok(Acquire::Held { .. })), "{waiter:?}");
    // The client's watch of the holder's entry is set: it reads the line again only when
    // that entry changes.
    store.0.watched.notified().await;
    (store, backend)
}

/// The waiter's attempt, sent again (renewing its place), in a task of its own.
fn attempt(
    backend: &Arc<ConsensusBackend<HeldStore>>,
) -> tokio::task::JoinHandle<Result<Acquire, LockError>> {
    let backend = backend.clone();
    tokio::spawn(async move { backend.acquire(&lease("waiter"), Turn::InLine(PLACE)).await })
}

async fn release_the_holder(backend: &ConsensusBackend<HeldStore>) {
    let released = backend.release(&lease("holder"), Duration::ZERO).await;
    assert!(matches!(released, Ok(Release::Released)), "{released:?}");
}

/// The watch claims the key for the waiter, for the place it read, while an attempt that
/// read the line before the release is on its way: that attempt's answer would restart the
/// waiter's count of the hand-off after the lease the watch wrote, so it takes the key.
#[tokio::test]
async fn an_attempt_answered_after_the_watchs_claim_takes_the_key() {
    let (store, backend) = held_with_a_waiter().await;
    let mut releases = backend.subscribe(KEY).await.expect("subscribed");
    let (read, let_go) = store.hold_next_read();
    let second = attempt(&backend);
    read.await
        .expect("the attempt read the line, the holder ahead");
    release_the_holder(&backend).await;
    let handed = releases.released(Some(owner_tag("waiter"))).await;
    assert!(
        handed.is_some_and(|h| h.owner == owner_tag("waiter")),
        "the watch claimed for the waiter"
    );
    let_go.send(()).expect("the attempt waits");
    let answer = second.await.expect("the attempt ran");
    assert!(
        matches!(answer, Ok(Acquire::Granted { .. })),
        "an attempt that finds the watch's claim takes the key: {answer:?}"
    );
}

/// An attempt answered between the watch's read of the place and its claim renewed the
/// place: the waiter counts a hand-off from that attempt, later than the lease the watch
/// wrote. The claim is then not announced as a hand-off, and the next attempt takes the key.
#[tokio::test]
async fn a_hand_off_is_announced_only_for_the_latest_place() {
    let (store, backend) = held_with_a_waiter().await;
    let mut releases = backend.subscribe(KEY).await.expect("subscribed");
    let (attempt_read, let_attempt_go) = store.hold_next_read();
    let second = attempt(&backend);
    attempt_read
        .await
        .expect("the attempt read the line, the holder ahead");
    let (watch_read, let_watch_go) = store.hold_next_read();
    release_the_holder(&backend).await;
    watch_read
        .await
        .expect("the watch read the line, the waiter at its head");
    let_attempt_go.send(()).expect("the attempt waits");
    let answer = second.await.expect("the attempt ran");
    assert!(
        matches!(answer, Ok(Acquire::Held { .. })),
        "the attempt renewed the place: {answer:?}"
    );
    let_watch_go.send(()).expect("the watch waits");
    let handed = releases.released(Some(owner_tag("waiter"))).await;
    assert!(
        handed.is_none(),
        "a claim counted from an earlier place than the waiter's latest is no hand-off"
    );
    let third = attempt(&backend).await.expect("the attempt ran");
    assert!(
        matches!(third, Ok(Acquire::Granted { .. })),
        "the next attempt takes the key: {third:?}"
    );
}

/// Review finding: a value was written once the line read showed its grant holding the key,
/// also when the grant ended between that read and the write. The write is conditioned on
/// the holder's entry: a grant that ended meanwhile keeps nothing.
#[tokio::test]
async fn a_value_of_a_grant_that_ended_after_the_line_was_read_is_not_kept() {
    let store = HeldStore::default();
    let background = Background::Runtime(tokio::runtime::Handle::current());
    let backend = Arc::new(ConsensusBackend::new(store.clone(), background));
    let granted = backend.acquire(&lease("holder"), Turn::Once).await;
    let Ok(Acquire::Granted { token, .. }) = granted else {
        panic!("{granted:?}");
    };
    let (read, let_go) = store.hold_next_read();
    let publishing = {
        let backend = backend.clone();
        let result = SharedResult {
            token,
            value: b"42".to_vec(),
        };
        tokio::spawn(async move {
            let results = backend.results().expect("values are kept");
            results
                .publish_result(KEY, &result, Duration::from_secs(30))
                .await
        })
    };
    read.await
        .expect("the publish read the line, the grant holding");
    release_the_holder(&backend).await;
    let_go.send(()).expect("the publish waits");
    let published = publishing.await.expect("the publish ran");
    assert!(matches!(published, Ok(Published::NotHeld)), "{published:?}");
    let kept = backend
        .results()
        .expect("values are kept")
        .read_result(KEY)
        .await;
    assert!(matches!(kept, Ok(None)), "{kept:?}");
}

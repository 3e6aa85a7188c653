//! The in-process side of release notifications: waiters sleep until the key they wait for
//! is released, whatever the backend that announces it.
//!
//! Each backend feeds one `ReleaseHub` per client: the Redis backend from its pub/sub
//! subscription, the memory backend directly from its release. A waiter holds a
//! [`ReleaseWatch`] while it waits; the hub counts watchers per key, so a backend can drop
//! its subscription when nobody waits for the key any more.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use tokio::sync::{Notify, OnceCell, mpsc};

use crate::sync::lock_ignoring_poison;

/// A waiter's subscription to the releases of one key (on each store that announces them:
/// several for Redlock); dropping it ends the subscription.
#[derive(Debug)]
pub struct ReleaseWatch {
    stores: Vec<KeyWatch>,
    /// Each store announces a release over several stores (Redlock's masters), and only the
    /// first announcement wakes the waiter.
    seen_grants: SeenGrants,
}

/// The fencing tokens of the last grants whose release a watch over several stores returned.
#[derive(Debug, Default)]
struct SeenGrants(Vec<u64>);

/// Released grants a watch over several stores remembers: more than the releases that can
/// be on their way at once.
const SEEN_GRANTS: usize = 16;

/// Announcements a key keeps for waiters that look late: more than one release hands over
/// at once (a writer's release to the readers at the head of a line of waiters).
const RECENT: usize = 64;

impl SeenGrants {
    /// Whether `event` is news: not another store's copy of a release already returned.
    fn is_new(&mut self, event: ReleaseEvent) -> bool {
        let Some(grant) = event.grant() else {
            return true;
        };
        if self.0.contains(&grant) {
            return false;
        }
        if self.0.len() == SEEN_GRANTS {
            self.0.remove(0);
        }
        self.0.push(grant);
        true
    }
}

/// A subscription to one store's announcements of one key's releases.
#[derive(Debug)]
struct KeyWatch {
    hub: Arc<ReleaseHub>,
    key: String,
    releases: Arc<Releases>,
    /// The release count this watch has seen.
    seen: u64,
}

/// A key's release count, and its waiters. A `Notify` rather than a `watch`: `watch` wakes
/// its waiters in a random order, and a simulation on the paused clock must take the same
/// path on every run of a seed.
#[derive(Debug, Default)]
struct Releases {
    announced_so_far: Mutex<Announced>,
    announced: Notify,
}

/// How many releases were announced, what the last one said, and who follows every one.
#[derive(Debug)]
struct Announced {
    count: u64,
    last: ReleaseEvent,
    /// The last [`RECENT`] announcements with their counts: a waiter that looks after several
    /// finds a hand-off to itself among them, not only the last (a writer's release hands
    /// the key to every reader at the head of the line at once, one announcement each).
    recent: VecDeque<(u64, ReleaseEvent)>,
    /// Operators' watches, which see every announcement in order (waiters see the last of
    /// those that came since they looked): empty on the waiters' path.
    followers: Vec<mpsc::UnboundedSender<ReleaseEvent>>,
}

impl Default for Announced {
    fn default() -> Self {
        Announced {
            count: 0,
            last: ReleaseEvent::Unrecognised,
            recent: VecDeque::new(),
            followers: Vec::new(),
        }
    }
}

/// What a release announced (on the key's channel, for Redis), as an operator watching the
/// key sees it ([`LockAdmin::watch`](crate::admin::LockAdmin::watch)). Owners are named by
/// their [`OwnerTag`], never by their token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReleaseEvent {
    /// The key was released (by its holder, or forced by an operator) and is free: nobody
    /// waited in line for it, so waiters that poll may take it.
    Released {
        /// The fencing token of the grant released; `None` when the store does not name it
        /// (older versions, or a key kept by `min_hold_ms` after its own release).
        token: Option<u64>,
    },
    /// The release handed the key to the oldest waiter in line, which holds it now.
    HandedOver {
        /// The new holder.
        to: OwnerTag,
        /// The fencing token of its grant.
        token: u64,
        /// The permit or shard granted, for a semaphore or a segmented lock; `None` for
        /// other kinds.
        slot: Option<u32>,
    },
    /// A waiter left the line of a free key (it gave up, or its request was dropped); it may
    /// have been the one whose turn it was, so the others try again.
    WaiterLeft,
    /// A message this version cannot read (sent by another version of the library).
    Unrecognised,
    /// The subscription was interrupted (its connection was lost, or its slot moved to another
    /// node): releases in the meantime may have gone unheard.
    Interrupted,
}

impl ReleaseEvent {
    /// The hand-off this announces, if any.
    fn handed_to(self) -> Option<HandOff> {
        match self {
            ReleaseEvent::HandedOver { to, token, slot } => Some(HandOff {
                owner: to,
                token,
                slot,
            }),
            _ => None,
        }
    }

    /// The fencing token of the grant whose end this announces, when it names one.
    fn grant(self) -> Option<u64> {
        match self {
            ReleaseEvent::Released { token } => token,
            _ => None,
        }
    }
}

/// A release that handed the key to a waiter: whom (by tag), with which fencing token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HandOff {
    pub(crate) owner: OwnerTag,
    pub(crate) token: u64,
    /// The permit or shard handed over (semaphores and segmented locks).
    pub(crate) slot: Option<u32>,
}

impl Releases {
    /// How many releases were announced, and the one a waiter that saw `seen` of them hears:
    /// the last hand-off to `mine` among those since, if any, else the last.
    fn announced(&self, seen: u64, mine: Option<OwnerTag>) -> (u64, ReleaseEvent) {
        let announced = lock_ignoring_poison(&self.announced_so_far);
        let handed_to_mine = mine.and_then(|mine| {
            let since = announced
                .recent
                .iter()
                .rev()
                .take_while(|(count, _)| *count > seen);
            since
                .map(|(_, event)| *event)
                .find(|event| event.handed_to().is_some_and(|to| to.owner == mine))
        });
        (announced.count, handed_to_mine.unwrap_or(announced.last))
    }

    fn announce(&self, last: ReleaseEvent) {
        {
            let mut announced = lock_ignoring_poison(&self.announced_so_far);
            announced.count += 1;
            announced.last = last;
            let count = announced.count;
            if announced.recent.len() == RECENT {
                announced.recent.pop_front();
            }
            announced.recent.push_back((count, last));
            if !announced.followers.is_empty() {
                announced
                    .followers
                    .retain(|follower| follower.send(last).is_ok());
            }
        }
        self.announced.notify_waiters();
    }
}

/// A short, one-way tag of an owner token, by which releases and operators name an owner
/// without revealing its token (whoever has the token can release the lock): the first 64
/// bits of the token's SHA-1 (Redis computes it with `redis.sha1hex`). Shown as 16 hex digits.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OwnerTag(u64);

impl std::fmt::Display for OwnerTag {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

impl std::fmt::Debug for OwnerTag {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "OwnerTag({self})")
    }
}

impl OwnerTag {
    /// The tag shown as `text` (16 hex digits, either case), as an operator types it.
    ///
    /// ```
    /// use fencelock::admin::OwnerTag;
    ///
    /// let tag = OwnerTag::parse("0123456789ABCDEF").unwrap();
    /// assert_eq!(tag.to_string(), "0123456789abcdef");
    /// assert_eq!(OwnerTag::parse("0123"), None);
    /// ```
    pub fn parse(text: &str) -> Option<OwnerTag> {
        let digits = text.len() == 16 && text.bytes().all(|b| b.is_ascii_hexdigit());
        digits.then(|| OwnerTag::from_hex(text)).flatten()
    }

    /// The tag of a hex SHA-1 digest (its first 16 digits), as the scripts send it.
    pub(crate) fn from_hex(hex_digest: &str) -> Option<OwnerTag> {
        u64::from_str_radix(hex_digest.get(..16)?, 16)
            .ok()
            .map(OwnerTag)
    }
}

/// The tag of `owner`.
pub(crate) fn owner_tag(owner: &str) -> OwnerTag {
    let digest = sha1_smol::Sha1::from(owner).digest().bytes();
    let mut first = [0; 8];
    first.copy_from_slice(&digest[..8]);
    OwnerTag(u64::from_be_bytes(first))
}

/// What a release message announces: `granted <sha1 of the owner token> <token>` a hand-off
/// (followed by ` <slot>` for a semaphore's permit or a segmented lock's shard),
/// `released <token>` the end of that grant (`released` alone when the store does not name
/// it), `left` a waiter that left a free key; anything else wakes the waiters and says
/// nothing more.
pub(crate) fn parse_announcement(message: &str) -> ReleaseEvent {
    let mut words = message.split(' ');
    let (kind, first, second) = (words.next(), words.next(), words.next());
    let third = words.next();
    let parsed = match (kind, first, second) {
        (Some("granted"), Some(tag), Some(token)) => {
            let slot = third.map(str::parse).transpose().ok();
            OwnerTag::from_hex(tag)
                .zip(token.parse().ok())
                .zip(slot)
                .map(|((to, token), slot)| ReleaseEvent::HandedOver { to, token, slot })
        }
        (Some("released"), None, None) => Some(ReleaseEvent::Released { token: None }),
        (Some("released"), Some(token), None) => token
            .parse()
            .ok()
            .map(|token| ReleaseEvent::Released { token: Some(token) }),
        (Some("left"), None, None) => Some(ReleaseEvent::WaiterLeft),
        _ => None,
    };
    parsed.unwrap_or(ReleaseEvent::Unrecognised)
}

impl ReleaseWatch {
    /// One watch of the key's releases on every store of `watches` (Redlock's masters): it
    /// completes when any of them announces one.
    pub(crate) fn any_of(watches: impl IntoIterator<Item = ReleaseWatch>) -> ReleaseWatch {
        ReleaseWatch {
            stores: watches.into_iter().flat_map(|w| w.stores).collect(),
            seen_grants: SeenGrants::default(),
        }
    }

    /// Completes at the next release of the key after the watch was made or last completed,
    /// with the hand-off, when the release gave the key to a waiter (only that waiter can
    /// use it). `None` when anyone may try. Of several releases at once, a hand-off to the
    /// waiter `mine` tells, else the last one. Cancel-safe: a release is marked seen only
    /// when this returns it.
    pub(crate) async fn released(&mut self, mine: Option<OwnerTag>) -> Option<HandOff> {
        if let [one] = self.stores.as_mut_slice() {
            return one.released(mine).await.handed_to();
        }
        loop {
            let each = self
                .stores
                .iter_mut()
                .map(|store| Box::pin(store.released(mine)));
            let event = futures_util::future::select_all(each).await.0;
            if self.seen_grants.is_new(event) {
                return event.handed_to();
            }
        }
    }

    /// Every announcement from now on, in order (a store's copies of a release that another
    /// store announced first left out). Announcements that came after the watch was made
    /// and before this call are given first: the last of them, after an
    /// [`ReleaseEvent::Interrupted`] when there were several (only the last is known).
    pub(crate) fn follow(self) -> Following {
        let (sender, events) = mpsc::unbounded_channel();
        for store in &self.stores {
            store.follow(sender.clone());
        }
        Following {
            watch: self,
            events,
        }
    }

    /// Whether the backend still announces releases of the key to this watch: `false` after
    /// a subscription connection was lost (on any of the stores), until someone subscribes
    /// the key again.
    pub fn is_subscribed(&self) -> bool {
        !self.stores.is_empty() && self.stores.iter().all(KeyWatch::is_subscribed)
    }
}

/// A watch that sees every announcement of a key's releases, for an operator.
#[derive(Debug)]
pub(crate) struct Following {
    /// Keeps the subscription.
    watch: ReleaseWatch,
    events: mpsc::UnboundedReceiver<ReleaseEvent>,
}

impl Following {
    /// The next announcement; `None` once the backend that announces them is gone.
    pub(crate) async fn next(&mut self) -> Option<ReleaseEvent> {
        loop {
            let event = self.events.recv().await?;
            if self.watch.stores.len() == 1 || self.watch.seen_grants.is_new(event) {
                return Some(event);
            }
        }
    }
}

impl KeyWatch {
    async fn released(&mut self, mine: Option<OwnerTag>) -> ReleaseEvent {
        loop {
            let announced = self.releases.announced.notified();
            tokio::pin!(announced);
            // Registered before the check: a release right after it still wakes this waiter.
            announced.as_mut().enable();
            let (count, heard) = self.releases.announced(self.seen, mine);
            if count > self.seen {
                self.seen = count;
                return heard;
            }
            announced.await;
        }
    }

    /// Sends every announcement to `follower` from now on, after what was announced since
    /// this watch last looked (see [`ReleaseWatch::follow`]).
    fn follow(&self, follower: mpsc::UnboundedSender<ReleaseEvent>) {
        let mut announced = lock_ignoring_poison(&self.releases.announced_so_far);
        let missed = announced.count - self.seen;
        if missed > 1 {
            let _ = follower.send(ReleaseEvent::Interrupted);
        }
        if missed > 0 {
            let _ = follower.send(announced.last);
        }
        announced.followers.push(follower);
    }

    fn is_subscribed(&self) -> bool {
        self.hub
            .keys()
            .get(&self.key)
            .is_some_and(|watched| watched.subscribed.initialized())
    }
}

impl Drop for KeyWatch {
    fn drop(&mut self) {
        self.hub.unwatch(&self.key);
    }
}

/// The keys being waited for in one client, and their release counters.
#[derive(Debug, Default)]
pub(crate) struct ReleaseHub {
    keys: Mutex<HashMap<String, Watched>>,
    /// Receives keys nobody waits for any more (the Redis backend unsubscribes them).
    idle: Option<mpsc::UnboundedSender<String>>,
}

#[derive(Debug)]
struct Watched {
    releases: Arc<Releases>,
    watchers: usize,
    /// Set once the backend confirmed its subscription to the key; replaced when the
    /// subscription connection is lost.
    subscribed: Arc<OnceCell<()>>,
}

impl ReleaseHub {
    /// A hub that reports keys nobody waits for to `idle`.
    pub(crate) fn with_idle_reports(idle: mpsc::UnboundedSender<String>) -> Self {
        ReleaseHub {
            keys: Mutex::default(),
            idle: Some(idle),
        }
    }

    fn keys(&self) -> std::sync::MutexGuard<'_, HashMap<String, Watched>> {
        // Every update is one insert, remove or counter change: never half-done.
        lock_ignoring_poison(&self.keys)
    }

    /// A new watch of `key`, and the cell in which the backend records its subscription.
    pub(crate) fn watch(self: &Arc<Self>, key: &str) -> (ReleaseWatch, Arc<OnceCell<()>>) {
        let mut keys = self.keys();
        let watched = keys.entry(key.to_owned()).or_insert_with(|| Watched {
            releases: Arc::default(),
            watchers: 0,
            subscribed: Arc::new(OnceCell::new()),
        });
        (self.add_watcher(key, watched), watched.subscribed.clone())
    }

    /// A new watch of `key` if the backend already announces its releases (another waiter
    /// of this client subscribed it, and it is still subscribed), with no round trip; `None`
    /// otherwise, leaving nothing behind.
    pub(crate) fn watch_subscribed(self: &Arc<Self>, key: &str) -> Option<ReleaseWatch> {
        let mut keys = self.keys();
        let watched = keys.get_mut(key)?;
        if !watched.subscribed.initialized() {
            return None;
        }
        Some(self.add_watcher(key, watched))
    }

    /// A new watch of `key`, counted in its entry, seeing releases from now on.
    fn add_watcher(self: &Arc<Self>, key: &str, watched: &mut Watched) -> ReleaseWatch {
        watched.watchers += 1;
        ReleaseWatch {
            seen_grants: SeenGrants::default(),
            stores: vec![KeyWatch {
                hub: self.clone(),
                key: key.to_owned(),
                seen: watched.releases.announced(0, None).0,
                releases: watched.releases.clone(),
            }],
        }
    }

    fn unwatch(&self, key: &str) {
        let mut keys = self.keys();
        if let Some(watched) = keys.get_mut(key) {
            watched.watchers -= 1;
            if watched.watchers == 0 {
                // With an idle report, the entry (and its confirmed subscription) stays
                // until the backend retires it, so a waiter that comes back soon reuses it.
                match &self.idle {
                    Some(idle) => {
                        let _ = idle.send(key.to_owned());
                    }
                    None => {
                        keys.remove(key);
                    }
                }
            }
        }
    }

    /// Forgets `key` if nobody waits for it; `true` if it did.
    pub(crate) fn retire_if_idle(&self, key: &str) -> bool {
        let mut keys = self.keys();
        let idle = keys.get(key).is_some_and(|watched| watched.watchers == 0);
        if idle {
            keys.remove(key);
        }
        idle
    }

    /// Wakes the waiters of `key` with what its release announced.
    pub(crate) fn announce(&self, key: &str, event: ReleaseEvent) {
        let releases = self.keys().get(key).map(|watched| watched.releases.clone());
        if let Some(releases) = releases {
            releases.announce(event);
        }
    }

    /// The subscription of `key` ended (the server moved its slot elsewhere): it must be
    /// subscribed again, and its waiters wake to try once more.
    pub(crate) fn subscription_lost(&self, key: &str) {
        let releases = self.keys().get_mut(key).map(|watched| {
            watched.subscribed = Arc::new(OnceCell::new());
            watched.releases.clone()
        });
        if let Some(releases) = releases {
            releases.announce(ReleaseEvent::Interrupted);
        }
    }

    /// The subscription connection was lost: every key must be subscribed again, and every
    /// waiter wakes to try once more (a release may have gone unannounced).
    pub(crate) fn subscriptions_lost(&self) {
        let mut announce = Vec::new();
        for watched in self.keys().values_mut() {
            watched.subscribed = Arc::new(OnceCell::new());
            announce.push(watched.releases.clone());
        }
        for releases in announce {
            releases.announce(ReleaseEvent::Interrupted);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn tags_agree_with_the_release_script_s_sha1hex() {
        // SHA-1("abc") = a9993e364706816aba3e25717850c26c9cd0d89d
        assert_eq!(owner_tag("abc"), OwnerTag(0xa999_3e36_4706_816a));
        assert_eq!(owner_tag("abc").to_string(), "a9993e364706816a");
        let hex = sha1_smol::Sha1::from("abc").digest().to_string();
        assert_eq!(OwnerTag::from_hex(&hex), Some(owner_tag("abc")));
        assert_eq!(OwnerTag::from_hex("short"), None);
        assert_eq!(OwnerTag::from_hex("zz993e364706816aba3e"), None);
    }

    #[test]
    fn announcements_are_read_from_release_messages() {
        let hex = sha1_smol::Sha1::from("abc").digest().to_string();
        let parse = |m: &str| parse_announcement(m);
        let handed = ReleaseEvent::HandedOver {
            to: owner_tag("abc"),
            token: 17,
            slot: None,
        };
        assert_eq!(parse(&format!("granted {hex} 17")), handed);
        assert_eq!(handed.handed_to().map(|h| h.token), Some(17));
        let shard = ReleaseEvent::HandedOver {
            to: owner_tag("abc"),
            token: 17,
            slot: Some(3),
        };
        assert_eq!(parse(&format!("granted {hex} 17 3")), shard);
        for unreadable in [
            format!("granted {hex}"),
            format!("granted {hex} x"),
            format!("granted {hex} 17 x"),
            "x".into(),
        ] {
            assert_eq!(
                parse(&unreadable),
                ReleaseEvent::Unrecognised,
                "{unreadable}"
            );
        }
        assert_eq!(parse("released"), ReleaseEvent::Released { token: None });
        let released = ReleaseEvent::Released { token: Some(42) };
        assert_eq!(parse("released 42"), released);
        assert_eq!(released.grant(), Some(42));
        assert_eq!(parse("left"), ReleaseEvent::WaiterLeft);
    }

    /// A waiter learns the last of several announcements that came while it was busy; a
    /// follower (an operator's watch) gets each of them, in order, and those that came
    /// between the watch and the following as the last of them after `Interrupted`.
    #[tokio::test]
    async fn a_follower_sees_every_announcement_and_a_waiter_the_last() {
        let hub = Arc::new(ReleaseHub::default());
        let (mut waiter, _) = hub.watch("k");
        let (before, _) = hub.watch("k");
        let released = |token| ReleaseEvent::Released { token: Some(token) };
        hub.announce("k", released(1));
        hub.announce("k", released(2));
        let mut following = before.follow();
        hub.announce("k", ReleaseEvent::WaiterLeft);
        hub.announce("k", released(3));
        assert_eq!(waiter.released(None).await, None);
        let mut events = Vec::new();
        for _ in 0..4 {
            events.push(following.next().await.expect("the hub is there"));
        }
        let expected = [
            ReleaseEvent::Interrupted,
            released(2),
            ReleaseEvent::WaiterLeft,
            released(3),
        ];
        assert_eq!(events, expected);
        let more = tokio::time::timeout(Duration::from_millis(20), following.next()).await;
        assert!(more.is_err(), "nothing else happened");
    }

    /// A release over several stores (Redlock) is announced by each: the watch returns the
    /// first and lets the copies of the same grant's release pass.
    #[tokio::test]
    async fn a_watch_over_several_stores_wakes_once_per_release() {
        let hubs = [
            Arc::new(ReleaseHub::default()),
            Arc::new(ReleaseHub::default()),
        ];
        let mut watch = ReleaseWatch::any_of(hubs.iter().map(|hub| hub.watch("k").0));
        let mut following = ReleaseWatch::any_of(hubs.iter().map(|hub| hub.watch("k").0)).follow();
        let ended = |grant| ReleaseEvent::Released { token: Some(grant) };
        hubs[0].announce("k", ended(7));
        watch.released(None).await;
        hubs[1].announce("k", ended(7));
        let copy = tokio::time::timeout(Duration::from_millis(20), watch.released(None)).await;
        assert!(copy.is_err(), "the second store's copy wakes nobody");
        hubs[1].announce("k", ended(9));
        tokio::time::timeout(Duration::from_secs(5), watch.released(None))
            .await
            .expect("another grant's release wakes the waiter");
        hubs[0].announce("k", ended(3));
        tokio::time::timeout(Duration::from_secs(5), watch.released(None))
            .await
            .expect("so does one with a lower token (a master whose clock is behind)");
        let mut followed = Vec::new();
        for _ in 0..3 {
            followed.push(following.next().await.expect("the hubs are there"));
        }
        assert_eq!(followed, [ended(7), ended(9), ended(3)], "a follower too");
    }
}

//! The in-process side of release notifications: waiters sleep until the key they wait for
//! is released, whatever the backend that announces it.
//!
//! Each backend feeds one `ReleaseHub` per client: the Redis backend from its pub/sub
//! subscription, the memory backend directly from its release. A waiter holds a
//! [`ReleaseWatch`] while it waits; the hub counts watchers per key, so a backend can drop
//! its subscription when nobody waits for the key any more.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{Notify, OnceCell, mpsc};

use crate::sync::lock_ignoring_poison;

/// A waiter's subscription to the releases of one key; dropping it ends the subscription.
#[derive(Debug)]
pub struct ReleaseWatch {
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

/// How many releases were announced, and to whom the last one handed the key.
#[derive(Debug, Default, Clone, Copy)]
struct Announced {
    count: u64,
    handed_to: Option<HandOff>,
}

/// A release that handed the key to a waiter: whom (by tag), with which fencing token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HandOff {
    pub(crate) owner: OwnerTag,
    pub(crate) token: u64,
}

impl Releases {
    fn announced(&self) -> Announced {
        *lock_ignoring_poison(&self.announced_so_far)
    }

    fn announce(&self, handed_to: Option<HandOff>) {
        {
            let mut announced = lock_ignoring_poison(&self.announced_so_far);
            announced.count += 1;
            announced.handed_to = handed_to;
        }
        self.announced.notify_waiters();
    }
}

/// A short, one-way tag of an owner token, by which a release names the waiter it handed
/// the key to without revealing its token: the first 64 bits of the token's SHA-1 (Redis
/// computes it with `redis.sha1hex`).
pub(crate) type OwnerTag = u64;

/// The tag of `owner`.
pub(crate) fn owner_tag(owner: &str) -> OwnerTag {
    let digest = sha1_smol::Sha1::from(owner).digest().bytes();
    let mut first = [0; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(first)
}

/// The tag in a release message, as the hex digest the release script sends.
fn parse_owner_tag(hex_digest: &str) -> Option<OwnerTag> {
    u64::from_str_radix(hex_digest.get(..16)?, 16).ok()
}

/// The hand-off a release message announces: `granted <sha1 of the owner token> <token>`;
/// `None` for `released` (the key is free: anyone may try), `left`, or anything unexpected.
pub(crate) fn parse_hand_off(message: &str) -> Option<HandOff> {
    let mut words = message.strip_prefix("granted ")?.split(' ');
    let owner = parse_owner_tag(words.next()?)?;
    let token = words.next()?.parse().ok()?;
    Some(HandOff { owner, token })
}

impl ReleaseWatch {
    /// Completes at the next release of the key after the watch was made or last completed,
    /// with the hand-off, when the release gave the key to a waiter (only that waiter can
    /// use it). `None` when anyone may try. Of several releases at once, the last one tells.
    pub(crate) async fn released(&mut self) -> Option<HandOff> {
        loop {
            let announced = self.releases.announced.notified();
            tokio::pin!(announced);
            // Registered before the check: a release right after it still wakes this waiter.
            announced.as_mut().enable();
            let now = self.releases.announced();
            if now.count > self.seen {
                self.seen = now.count;
                return now.handed_to;
            }
            announced.await;
        }
    }

    /// Whether the backend still announces releases of the key to this watch: `false` after
    /// the subscription connection was lost, until someone subscribes the key again.
    pub fn is_subscribed(&self) -> bool {
        self.hub
            .keys()
            .get(&self.key)
            .is_some_and(|watched| watched.subscribed.initialized())
    }
}

impl Drop for ReleaseWatch {
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
            hub: self.clone(),
            key: key.to_owned(),
            seen: watched.releases.announced().count,
            releases: watched.releases.clone(),
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

    /// Wakes the waiters of `key`; `handed_to` names the one the key went to, if any.
    pub(crate) fn released(&self, key: &str, handed_to: Option<HandOff>) {
        let releases = self.keys().get(key).map(|watched| watched.releases.clone());
        if let Some(releases) = releases {
            releases.announce(handed_to);
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
            releases.announce(None);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_agree_with_the_release_script_s_sha1hex() {
        // SHA-1("abc") = a9993e364706816aba3e25717850c26c9cd0d89d
        assert_eq!(owner_tag("abc"), 0xa999_3e36_4706_816a);
        let hex = sha1_smol::Sha1::from("abc").digest().to_string();
        assert_eq!(parse_owner_tag(&hex), Some(owner_tag("abc")));
        assert_eq!(parse_owner_tag("short"), None);
        assert_eq!(parse_owner_tag("zz993e364706816aba3e"), None);
    }

    #[test]
    fn hand_offs_are_read_from_granted_messages_only() {
        let hex = sha1_smol::Sha1::from("abc").digest().to_string();
        let hand_off = HandOff {
            owner: owner_tag("abc"),
            token: 17,
        };
        assert_eq!(parse_hand_off(&format!("granted {hex} 17")), Some(hand_off));
        assert_eq!(parse_hand_off(&format!("granted {hex}")), None);
        assert_eq!(parse_hand_off(&format!("granted {hex} x")), None);
        assert_eq!(parse_hand_off("released"), None);
        assert_eq!(parse_hand_off("left"), None);
    }
}

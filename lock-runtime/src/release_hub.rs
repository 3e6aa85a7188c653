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
    count: Mutex<u64>,
    announced: Notify,
}

impl Releases {
    fn count(&self) -> u64 {
        *lock_ignoring_poison(&self.count)
    }

    fn announce(&self) {
        *lock_ignoring_poison(&self.count) += 1;
        self.announced.notify_waiters();
    }
}

impl ReleaseWatch {
    /// Completes at the next release of the key after the watch was made or last completed.
    pub async fn released(&mut self) {
        loop {
            let announced = self.releases.announced.notified();
            tokio::pin!(announced);
            // Registered before the check: a release right after it still wakes this waiter.
            announced.as_mut().enable();
            let count = self.releases.count();
            if count > self.seen {
                self.seen = count;
                return;
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
        watched.watchers += 1;
        let watch = ReleaseWatch {
            hub: self.clone(),
            key: key.to_owned(),
            seen: watched.releases.count(),
            releases: watched.releases.clone(),
        };
        (watch, watched.subscribed.clone())
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

    /// Wakes the waiters of `key`.
    pub(crate) fn released(&self, key: &str) {
        let releases = self.keys().get(key).map(|watched| watched.releases.clone());
        if let Some(releases) = releases {
            releases.announce();
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
            releases.announce();
        }
    }
}

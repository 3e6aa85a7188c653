//! Known defects a test plants in the library, to prove that its checks would catch them: a
//! checker that passes the real code must fail the code with a defect planted.
//!
//! A defect is planted on the calling thread only, while its [`Planted`] guard lives: a
//! simulation on a current-thread runtime runs every task (the in-memory store's included)
//! on its own thread, while tests on other threads keep running the real code. Without the
//! `testing` feature this module is only the names of the defects, and none is ever planted.

/// A defect that [`plant`] puts in the library, each where the library keeps the promise it
/// breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Defect {
    /// The memory backend releases a mutex whoever holds it: a stale release (sent again,
    /// a cleanup, a waiter giving up its place) deletes the next owner's grant.
    ReleaseWithoutOwnerCheck,
    /// The memory backend's renewal extends a mutex whoever holds it, and reports the lease
    /// renewed: an owner whose lease ended (or was deleted) goes on over the next owner.
    RenewalExtendsAnyOwner,
    /// The memory backend's hand-off of a mutex ignores when places lapse: it takes the
    /// head of the line, lapsed or not, and grants it the waiter's whole lease (a store
    /// whose places never lapse): a key goes to a waiter that may have left.
    HandOffToLapsedPlace,
    /// The acquire loop enters the body on a grant whose reply came after its lease could
    /// have ended (the check of `Acquisition::in_time` skipped).
    BodyOnExpiredGrant,
}

#[cfg(feature = "testing")]
pub(crate) use switch::planted;
#[cfg(feature = "testing")]
pub use switch::{Planted, plant};

#[cfg(feature = "testing")]
mod switch {
    use std::cell::Cell;
    use std::marker::PhantomData;

    use super::Defect;

    impl Defect {
        /// Every defect, in declaration order.
        pub const ALL: [Defect; 4] = [
            Defect::ReleaseWithoutOwnerCheck,
            Defect::RenewalExtendsAnyOwner,
            Defect::HandOffToLapsedPlace,
            Defect::BodyOnExpiredGrant,
        ];
    }

    thread_local! {
        /// The defect planted on this thread, if any.
        static PLANTED: Cell<Option<Defect>> = const { Cell::new(None) };
    }

    /// Plants `defect` on the calling thread (in place of any other) until the returned
    /// guard is dropped.
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// use fencelock::LockKind;
    /// use fencelock::backend::memory::MemoryBackend;
    /// use fencelock::backend::{Lease, LockBackend, Release, Turn};
    /// use fencelock::testing::defects::{Defect, plant};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), fencelock::LockError> {
    /// let store = MemoryBackend::new();
    /// let lease = |owner: &str| Lease {
    ///     key: "k".into(),
    ///     owner: owner.into(),
    ///     ttl: Duration::from_secs(10),
    ///     replicas: 0,
    ///     kind: LockKind::Mutex,
    /// };
    /// store.acquire(&lease("a"), Turn::Once).await?;
    /// let stale = store.release(&lease("b"), Duration::ZERO).await?;
    /// assert_eq!(stale, Release::NotOwner);
    /// let planted = plant(Defect::ReleaseWithoutOwnerCheck);
    /// let stale = store.release(&lease("b"), Duration::ZERO).await?;
    /// assert_eq!(stale, Release::Released, "b deleted a's grant");
    /// drop(planted);
    /// # Ok(())
    /// # }
    /// ```
    pub fn plant(defect: Defect) -> Planted {
        let previous = PLANTED.with(|planted| planted.replace(Some(defect)));
        Planted {
            previous,
            thread_bound: PhantomData,
        }
    }

    /// Keeps a defect planted on its thread; dropping it puts back what was planted before.
    /// Not `Send`: it clears the thread it planted on.
    #[derive(Debug)]
    #[must_use = "the defect is cleared when the guard is dropped"]
    pub struct Planted {
        previous: Option<Defect>,
        thread_bound: PhantomData<*const ()>,
    }

    impl Drop for Planted {
        fn drop(&mut self) {
            PLANTED.with(|planted| planted.set(self.previous));
        }
    }

    /// Whether a test planted `defect` on this thread.
    pub(crate) fn planted(defect: Defect) -> bool {
        PLANTED
            .try_with(|planted| planted.get() == Some(defect))
            .unwrap_or(false)
    }
}

/// Whether a test planted `defect`: never, without the `testing` feature.
#[cfg(not(feature = "testing"))]
pub(crate) const fn planted(_: Defect) -> bool {
    false
}

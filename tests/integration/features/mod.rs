//! What does not depend on the store: the attribute, both tokio runtimes, late grants,
//! renewal timing on the paused clock, several OS processes, and processes that end.

mod attribute;
mod late_grants;
mod lease_timing;
mod multiprocess;
mod runtimes;
mod shutdown;

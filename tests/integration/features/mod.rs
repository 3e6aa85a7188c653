//! What does not depend on the store: the attribute, both tokio runtimes, late grants,
//! renewal timing on the paused clock, several OS processes, processes that end, the test
//! kit's assertions, several keys in the attribute, transfers under multi-key locks, and
//! single-flight.

mod attribute;
mod late_grants;
mod lease_timing;
mod multiprocess;
mod runtimes;
mod several_keys;
mod shutdown;
mod single_flight;
mod test_kit;
mod transfers;

//! What does not depend on the store: admission control, the attribute, both tokio runtimes, late grants,
//! renewal timing on the paused clock, several OS processes, processes that end, the test
//! kit's assertions, several keys in the attribute, transfers under multi-key locks,
//! single-flight, and segmented locks that find their stock.

mod admission;
mod attribute;
mod late_grants;
mod lease_timing;
mod multiprocess;
mod runtimes;
mod several_keys;
mod shard_stock;
mod shutdown;
mod single_flight;
mod test_kit;
mod transfers;

//! The stores besides Redis (PostgreSQL, MySQL/MariaDB, ZooKeeper, etcd) under faults, and
//! `LockClient::open` reaching each store by its URL.

#[cfg(all(feature = "zookeeper", feature = "etcd"))]
mod consensus;
mod open;
mod sql;

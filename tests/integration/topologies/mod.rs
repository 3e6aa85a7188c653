//! Redis topologies of several servers: Cluster, Sentinel, Redlock.

mod cluster;
mod redlock;
mod redlock_shared;
mod sentinel;

//! Test support (feature `testing`): private `redis-server` processes, a TCP proxy that
//! cuts clients off, the conformance suite every backend must pass, and the history checker
//! that proves mutual exclusion on recorded runs.

pub mod conformance;
pub mod history;
mod proxy;
mod redis_server;

pub use proxy::{Delivery, Direction, TcpProxy};
pub use redis_server::{RedisServer, continue_process, stop_process};

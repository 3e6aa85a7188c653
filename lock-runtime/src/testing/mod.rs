//! Test support (feature `testing`): private `redis-server` processes and the conformance
//! suite every backend must pass.

pub mod conformance;
mod redis_server;

pub use redis_server::RedisServer;

//! Test support (feature `testing`): private `redis-server` processes, a TCP proxy that
//! cuts clients off, and the conformance suite every backend must pass.

pub mod conformance;
mod proxy;
mod redis_server;

pub use proxy::TcpProxy;
pub use redis_server::RedisServer;

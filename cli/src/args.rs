//! The command line.

use clap::{Args, Parser, Subcommand};

/// The key prefix of fencelock's Redis backends by default.
pub use fencelock::backend::redis::DEFAULT_PREFIX;
/// The lock table of fencelock's SQL backends by default.
pub use fencelock::backend::sql::DEFAULT_TABLE;

/// Operate fencelock's locks: list the held ones, inspect one, release one by force, watch a
/// key's hand-offs. Owners are shown by tag (the first 16 hex digits of the SHA-1 of their
/// owner token, as release notifications name them), never by token.
#[derive(Debug, Parser)]
#[command(name = "fencelock", version)]
pub struct Cli {
    #[command(flatten)]
    pub connection: Connection,
    /// Print JSON for scripts (one document; for `watch`, one object per line).
    #[arg(long, global = true)]
    pub json: bool,
    #[command(subcommand)]
    pub command: Command,
}

/// Where the locks are.
#[derive(Debug, Clone, Args)]
pub struct Connection {
    /// The store, by the URL's scheme, as `LockClient::open` takes it: `redis://`, `rediss://`,
    /// `redis+sentinel://host:26379[,host:port…]/SERVICE`, `redis+cluster://host:port[,…]`,
    /// `redis+redlock://host:port,host:port,host:port`, `postgres://`, `mysql://`,
    /// `mariadb://`, `zookeeper://host:2181[,…][/chroot]`, `etcd://host:2379[,…]`. Or a Redis
    /// URL given several times with --redlock, --cluster or --sentinel.
    #[arg(
        long = "url",
        value_name = "URL",
        env = "FENCELOCK_URL",
        default_value = "redis://127.0.0.1:6379/",
        hide_env_values = true,
        global = true
    )]
    pub urls: Vec<String>,
    /// The key prefix the applications use: Redis (default `lock:`), etcd (default
    /// `fencelock`), the root node on ZooKeeper (default `/fencelock`).
    #[arg(long, global = true)]
    pub prefix: Option<String>,
    /// The lock table the applications use (PostgreSQL, MySQL; default `fencelock_locks`).
    #[arg(long, global = true)]
    pub table: Option<String>,
    /// The URLs are nodes of one Redis Cluster.
    #[arg(long, global = true, conflicts_with_all = ["sentinel", "redlock"])]
    pub cluster: bool,
    /// The URLs are Sentinels monitoring the master of SERVICE.
    #[arg(
        long,
        value_name = "SERVICE",
        global = true,
        conflicts_with = "redlock"
    )]
    pub sentinel: Option<String>,
    /// The URLs are independent masters, locked with Redlock.
    #[arg(long, global = true)]
    pub redlock: bool,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// List the held locks whose key matches PATTERN, sorted by key.
    List {
        /// A Redis glob over the lock key (`*` any text, `?` one byte, `[a-z]`, `\` escapes).
        #[arg(default_value = "*")]
        pattern: String,
    },
    /// Show one lock: holder, token, lease left, fencing counter, the waiters in line.
    Inspect {
        /// The lock key, as the applications write it (`stock:42`).
        key: String,
    },
    /// Release a lock whoever holds it (owner-unchecked; needs --force). The fencing counter
    /// is kept, the oldest waiter in line gets the key, and the former holder's next renewal
    /// or release reports the lock lost.
    Release {
        /// The lock key, as the applications write it.
        key: String,
        /// Confirm that the release is owner-unchecked.
        #[arg(long)]
        force: bool,
        /// Release only the grant of this holder (its tag, as `list` shows it): one of the
        /// grants of a read/write lock, semaphore or segmented lock, which a key held by
        /// several needs. A tag beyond the 100 grants shown ends whichever grant it holds
        /// then (there is no token shown to check).
        #[arg(long, value_name = "TAG")]
        holder: Option<String>,
        /// Do not ask before releasing.
        #[arg(long)]
        yes: bool,
    },
    /// Release every lock that one instance holds (the clients built with
    /// `instance_id(NAME)`, every run of it; owner-unchecked; needs --force): for an instance
    /// known to be gone, whose restart would otherwise release them.
    ReleaseInstance {
        /// The instance id, as its clients were built with.
        name: String,
        /// Confirm that the release is owner-unchecked.
        #[arg(long)]
        force: bool,
    },
    /// Clear the exhausted marks of a segmented lock's shards (`shard_exhausted()` set them),
    /// once the stock they guard is back: calls take those shards again.
    Refill {
        /// The lock key, as the applications write it.
        key: String,
        /// Clear this shard's mark only (every mark without it).
        #[arg(long, value_name = "N")]
        shard: Option<u32>,
    },
    /// Print each release of KEY as it happens (released, handed over, waiter left) until
    /// Ctrl-C.
    Watch {
        /// The lock key, as the applications write it.
        key: String,
        /// Stop after this many releases.
        #[arg(long, value_name = "N")]
        count: Option<u64>,
    },
}

impl Connection {
    /// The key prefix of the locks on Redis.
    pub fn redis_prefix(&self) -> &str {
        self.prefix.as_deref().unwrap_or(DEFAULT_PREFIX)
    }
}

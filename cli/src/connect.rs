//! The client for the store the options name.

use fencelock::open::Store;
use fencelock::{LockClient, LockError, RedisClientBuilder};

use crate::args::{Connection, DEFAULT_PREFIX, DEFAULT_TABLE};
use crate::failure::Failure;

/// Connects as the options say: one URL through [`LockClient::open_builder`], whatever store
/// it names; several with --redlock, --cluster or --sentinel. A server that may evict keys is
/// accepted: an operator must still reach the locks on it. A SQL store's lock table is never
/// created.
pub async fn connect(connection: &Connection) -> Result<LockClient, Failure> {
    let connecting = match one_url(connection) {
        Some(url) => {
            if let Some(feature) = store(connection).and_then(|store| left_out(store, BUILT_WITH)) {
                return Err(Failure::message(
                    "cannot connect",
                    format!(
                        "this fencelock command was built without its `{feature}` feature: \
                         reinstall it with `cargo install fencelock-cli --features {feature}`"
                    ),
                ));
            }
            let mut builder = LockClient::open_builder(url)
                .allow_eviction(true)
                .create_tables(false);
            if let Some(prefix) = &connection.prefix {
                builder = builder.key_prefix(prefix);
            }
            if let Some(table) = &connection.table {
                builder = builder.table(table);
            }
            builder.connect().await
        }
        None => {
            let prefix = connection.prefix.as_deref().unwrap_or(DEFAULT_PREFIX);
            let builder = topology(connection)?
                .key_prefix(prefix)
                .allow_eviction(true);
            builder.connect().await
        }
    };
    connecting.map_err(|error| no_such_table(connection, error))
}

/// The optional stores this command was built with.
const BUILT_WITH: &[Store] = &[
    #[cfg(feature = "zookeeper")]
    Store::ZooKeeper,
    #[cfg(feature = "etcd")]
    Store::Etcd,
];

/// The command's feature `store` needs, if the command was built without it (`built_with`).
fn left_out(store: Store, built_with: &[Store]) -> Option<&'static str> {
    let feature = match store {
        Store::ZooKeeper => "zookeeper",
        Store::Etcd => "etcd",
        _ => return None,
    };
    (!built_with.contains(&store)).then_some(feature)
}

/// The URL of the options when it alone names the store (no topology flag).
fn one_url(connection: &Connection) -> Option<&str> {
    let topology_flag = connection.cluster || connection.redlock || connection.sentinel.is_some();
    match connection.urls.as_slice() {
        [url] if !topology_flag => Some(url),
        _ => None,
    }
}

/// The store the options reach, if they name one.
fn store(connection: &Connection) -> Option<Store> {
    match one_url(connection) {
        Some(url) => LockClient::open_builder(url).store().ok(),
        None => Some(Store::Redis),
    }
}

/// Whether the options reach Redis, where lock keys carry `--prefix`.
pub fn is_redis(connection: &Connection) -> bool {
    store(connection).is_some_and(Store::is_redis)
}

/// The failure to connect: for missing lock tables, the operator's fix (`--table`) rather
/// than the library's (create them).
fn no_such_table(connection: &Connection, error: LockError) -> Failure {
    match &error {
        LockError::Backend { message, .. } if message.contains("are missing in") => {
            let table = connection.table.as_deref().unwrap_or(DEFAULT_TABLE);
            Failure::message(
                "cannot connect",
                format!(
                    "the database of the URL has no lock table `{table}` (with \
                     `{table}_fences` and `{table}_releases`): --table names the lock table \
                     the applications use (their `table(...)`, `{DEFAULT_TABLE}` by default); \
                     check it, and the database in the URL"
                ),
            )
        }
        _ => Failure::new("cannot connect", error),
    }
}

fn topology(connection: &Connection) -> Result<RedisClientBuilder, Failure> {
    let urls = &connection.urls;
    let refused = |why: &str| Err(Failure::message("cannot connect", why.to_owned()));
    if connection.table.is_some() {
        return refused(
            "--table names a SQL lock table, but several --url (or --redlock, --cluster, \
             --sentinel) reach Redis, whose locks live under --prefix: leave out --table",
        );
    }
    if urls.iter().any(|url| {
        url.split("://")
            .next()
            .is_some_and(|scheme| scheme.contains('+'))
    }) {
        return refused(
            "a redis+…:// URL names its topology and hosts itself: give it alone, without \
             --redlock, --cluster or --sentinel",
        );
    }
    if connection.cluster {
        return Ok(LockClient::cluster_builder(urls));
    }
    if let Some(service) = &connection.sentinel {
        return Ok(LockClient::sentinel_builder(urls, service));
    }
    if connection.redlock {
        return Ok(LockClient::redlock_builder(urls));
    }
    Err(Failure::message(
        "cannot connect",
        format!(
            "{} URLs given for one store: give one --url (redis+redlock://a:6379,b:6379,c:6379 \
             names several hosts), or add --redlock (independent masters), --cluster (nodes of \
             one cluster) or --sentinel SERVICE (Sentinels)",
            urls.len()
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_store_left_out_of_the_build_names_the_command_s_feature() {
        assert_eq!(left_out(Store::Etcd, &[Store::ZooKeeper]), Some("etcd"));
        assert_eq!(left_out(Store::ZooKeeper, &[]), Some("zookeeper"));
        assert_eq!(
            left_out(Store::Etcd, &[Store::ZooKeeper, Store::Etcd]),
            None
        );
        assert_eq!(left_out(Store::Redis, &[]), None);
    }
}

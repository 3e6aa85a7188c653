//! The client for the topology the options name.

use fencelock::{LockClient, LockClientBuilder, LockError};

use crate::args::Connection;
use crate::failure::Failure;

/// Connects as the options say. A server that may evict keys is accepted: an operator must
/// still reach the locks on it. A `postgres://` or `mysql://` URL reaches the lock table
/// `--table` there, which the command never creates.
pub async fn connect(connection: &Connection) -> Result<LockClient, Failure> {
    if let [url] = connection.urls.as_slice() {
        let database = match database_url(connection) {
            Some(Database::Postgres) => Some(LockClient::postgres_builder(url)),
            Some(Database::MySql) => Some(LockClient::mysql_builder(url)),
            None => None,
        };
        if let Some(database) = database {
            let builder = database.table(&connection.table).create_tables(false);
            let connecting = builder.connect().await;
            return connecting.map_err(|error| no_such_table(connection, error));
        }
    }
    let builder = builder(connection)?
        .key_prefix(&connection.prefix)
        .allow_eviction(true);
    builder
        .connect()
        .await
        .map_err(|error| Failure::new("cannot connect", error))
}

/// The failure to connect to a database: for missing lock tables, the operator's fix
/// (`--table`) rather than the library's (create them).
fn no_such_table(connection: &Connection, error: LockError) -> Failure {
    match &error {
        LockError::Backend { message, .. } if message.contains("are missing in") => {
            let table = &connection.table;
            Failure::message(
                "cannot connect",
                format!(
                    "the database of the URL has no lock table `{table}` (with \
                     `{table}_fences` and `{table}_releases`): --table names the lock table \
                     the applications use (their `table(...)`, `fencelock_locks` by default); \
                     check it, and the database in the URL"
                ),
            )
        }
        _ => Failure::new("cannot connect", error),
    }
}

/// A database a URL names.
enum Database {
    Postgres,
    MySql,
}

/// The database the options' one URL names, if it names one (else Redis).
fn database_url(connection: &Connection) -> Option<Database> {
    let [url] = connection.urls.as_slice() else {
        return None;
    };
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        Some(Database::Postgres)
    } else if url.starts_with("mysql://") {
        Some(Database::MySql)
    } else {
        None
    }
}

/// Whether the options reach Redis, where lock keys carry `--prefix`.
pub fn is_redis(connection: &Connection) -> bool {
    database_url(connection).is_none()
}

fn builder(connection: &Connection) -> Result<LockClientBuilder, Failure> {
    let urls = &connection.urls;
    if connection.cluster {
        return Ok(LockClient::cluster_builder(urls));
    }
    if let Some(service) = &connection.sentinel {
        return Ok(LockClient::sentinel_builder(urls, service));
    }
    if connection.redlock {
        return Ok(LockClient::redlock_builder(urls));
    }
    match urls.as_slice() {
        [url] => Ok(LockClient::builder(url)),
        _ => Err(Failure::message(
            "cannot connect",
            format!(
                "{} URLs given for one server: add --redlock (independent masters), --cluster \
                 (nodes of one cluster) or --sentinel SERVICE (Sentinels), or give one --url",
                urls.len()
            ),
        )),
    }
}

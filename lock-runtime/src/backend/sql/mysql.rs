//! MySQL and MariaDB: the pool. Waiters poll (MySQL has no notifications to offer).

use std::str::FromStr;
use std::sync::Arc;

use sqlx::mysql::{MySqlConnectOptions, MySqlConnection, MySqlPoolOptions};
use sqlx::{Connection, Executor};

use super::{IDLE_IN_TRANSACTION, LOCK_WAIT, Pool, SqlSettings, connecting, on_background};

/// Opens the pool on the background runtime, once a first connection succeeded. Each connection waits for
/// a row lock at most [`LOCK_WAIT`] and, on MariaDB, is ended by the server after
/// [`IDLE_IN_TRANSACTION`] idle inside a transaction (MySQL has no such setting).
pub(super) async fn pool(url: &str, settings: &SqlSettings) -> Result<Pool, sqlx::Error> {
    let options = MySqlConnectOptions::from_str(url)?;
    let (connect_timeout, response_timeout) =
        (settings.timeouts.connect, settings.timeouts.response);
    let pool_options = MySqlPoolOptions::new()
        .max_connections(settings.max_connections)
        .acquire_timeout(settings.timeouts.connect)
        .test_before_acquire(false);
    let pool = on_background(async move {
        // One connection of its own first: the pool would retry until its timeout and
        // report only that, not why (a refused login, a closed port). It also tells
        // MySQL from MariaDB, for the settings of the pool's connections.
        let version = connecting(connect_timeout, || async {
            let mut first = MySqlConnection::connect_with(&options).await?;
            let version: String = sqlx::query_scalar("SELECT VERSION()")
                .fetch_one(&mut first)
                .await?;
            first.close().await?;
            Ok(version)
        })
        .await?;
        // UTC: tokens draw on the clock's microseconds, which a daylight-saving fold of a
        // local time zone would step back.
        let mut settings = format!(
            "SET SESSION time_zone = '+00:00', innodb_lock_wait_timeout = {}",
            LOCK_WAIT.as_secs().max(1)
        );
        if version.contains("MariaDB") {
            let idle = IDLE_IN_TRANSACTION.as_secs().max(1);
            // No statement outlives a call's task (see `Calls`).
            let statement = response_timeout.as_secs_f64();
            settings.push_str(&format!(
                ", idle_transaction_timeout = {idle}, max_statement_time = {statement}"
            ));
        }
        let settings: Arc<str> = settings.into();
        let pool_options = pool_options.after_connect(move |connection, _| {
            let settings = settings.clone();
            Box::pin(async move {
                connection.execute(&*settings).await?;
                Ok(())
            })
        });
        Ok::<_, sqlx::Error>(pool_options.connect_lazy_with(options))
    })
    .await?;
    Ok(Pool {
        sessions: Box::new(pool),
        #[cfg(feature = "postgres")]
        listens: None,
    })
}

//! What a failed statement means: retried inside the backend (deadlocks, serialization
//! failures, lock waits that timed out), or a [`LockError::Backend`] whose message names the
//! cause and the fix.

use std::sync::Arc;

use super::statements::{Dialect, Statements};
use crate::LockError;

/// What went wrong, as far as the fix goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cause {
    /// A transaction lost a race it can win next time: retried.
    Transient,
    /// A statement waited for a row lock longer than the lock wait: retried (renewal then
    /// skips the locked rows).
    LockWait,
    /// The server ended the connection (restart, administrator, idle timeout): retried on
    /// another.
    Broken,
    /// The table of that name is not a lock table of this version.
    ForeignTable,
    Login,
    Privilege,
    MissingTable,
    MissingDatabase,
    Other,
}

fn cause(dialect: Dialect, error: &sqlx::Error) -> Cause {
    let Some(database) = error.as_database_error() else {
        return Cause::Other;
    };
    match dialect {
        #[cfg(feature = "postgres")]
        Dialect::Postgres => match database.code().as_deref() {
            // serialization_failure, deadlock_detected, unique_violation (a racing insert of
            // the same row).
            Some("40001" | "40P01" | "23505") => Cause::Transient,
            // lock_not_available (lock_timeout).
            Some("55P03") => Cause::LockWait,
            // admin_shutdown, crash_shutdown, cannot_connect_now, the connection exceptions,
            // idle_in_transaction_session_timeout.
            Some("57P01" | "57P02" | "57P03" | "25P03") => Cause::Broken,
            Some(code) if code.starts_with("08") => Cause::Broken,
            // undefined_column, datatype_mismatch.
            Some("42703" | "42804") => Cause::ForeignTable,
            Some("28P01" | "28000") => Cause::Login,
            Some("42501") => Cause::Privilege,
            Some("42P01") => Cause::MissingTable,
            Some("3D000") => Cause::MissingDatabase,
            _ => Cause::Other,
        },
        #[cfg(feature = "mysql")]
        Dialect::MySql => {
            let number = mysql_number(database);
            match number {
                // ER_LOCK_DEADLOCK, ER_DUP_ENTRY (a racing insert).
                Some(1213 | 1062) => Cause::Transient,
                // ER_LOCK_WAIT_TIMEOUT.
                Some(1205) => Cause::LockWait,
                // ER_SERVER_SHUTDOWN, CR_SERVER_GONE_ERROR, CR_SERVER_LOST, ER_CONNECTION_KILLED.
                Some(1053 | 2006 | 2013 | 1927) => Cause::Broken,
                // ER_BAD_FIELD_ERROR.
                Some(1054) => Cause::ForeignTable,
                // ER_ACCESS_DENIED_ERROR, ER_ACCESS_DENIED_NO_PASSWORD_ERROR.
                Some(1045 | 1698) => Cause::Login,
                // ER_TABLEACCESS_DENIED_ERROR, ER_COLUMNACCESS_DENIED_ERROR,
                // ER_SPECIFIC_ACCESS_DENIED_ERROR, ER_DBACCESS_DENIED_ERROR.
                Some(1142 | 1143 | 1227 | 1044) => Cause::Privilege,
                Some(1146) => Cause::MissingTable,
                Some(1049) => Cause::MissingDatabase,
                _ => Cause::Other,
            }
        }
    }
}

#[cfg(feature = "mysql")]
fn mysql_number(error: &dyn sqlx::error::DatabaseError) -> Option<u16> {
    error
        .try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
        .map(sqlx::mysql::MySqlDatabaseError::number)
}

/// Whether a statement failed on a race that the next try can win, or on a connection that
/// broke (a fresh one may work).
pub(crate) fn is_transient(dialect: Dialect, error: &sqlx::Error) -> bool {
    let broken = matches!(error, sqlx::Error::Io(_) | sqlx::Error::WorkerCrashed);
    let cause = cause(dialect, error);
    broken || matches!(cause, Cause::Transient | Cause::LockWait | Cause::Broken)
}

/// Whether a statement waited for a row lock past the lock wait.
#[cfg(feature = "postgres")]
pub(crate) fn is_lock_wait(dialect: Dialect, error: &sqlx::Error) -> bool {
    cause(dialect, error) == Cause::LockWait
}

/// Whether a statement failed because a table is missing.
pub(crate) fn is_missing_table(dialect: Dialect, error: &sqlx::Error) -> bool {
    cause(dialect, error) == Cause::MissingTable
}

/// A [`LockError::Backend`] for `error`, met at `at` (the database's address, without its
/// password) on behalf of `key`.
pub(crate) fn backend_error(
    statements: &Statements,
    at: &str,
    key: Option<&str>,
    error: sqlx::Error,
) -> LockError {
    let db = statements.dialect.name();
    let (table, fences, releases) = (&statements.table, &statements.fences, &statements.releases);
    let (results, shares) = (&statements.results, &statements.shares);
    let exhausted = &statements.exhausted;
    let message = match cause(statements.dialect, &error) {
        Cause::Login => format!(
            "{db} at {at} refused the login: check the user and password in the URL \
             (and that the user may connect from this host)"
        ),
        Cause::Privilege => format!(
            "{db} at {at} refused a statement on the lock tables `{table}`, `{fences}`, \
             `{releases}`, `{results}` (for `action = Share`), `{shares}` (for read/write \
             locks, semaphores and segmented locks) and `{exhausted}` (for segmented locks' \
             exhausted shards) for lack of a privilege: grant the URL's user SELECT, INSERT, \
             UPDATE and DELETE on them (and CREATE, to let fencelock create them on first use, \
             or create them beforehand with the statements of `SqlClientBuilder::schema`)"
        ),
        Cause::MissingTable => format!(
            "the lock tables `{table}`, `{fences}`, `{releases}`, `{results}` (for \
             `action = Share`), `{shares}` (for read/write locks, semaphores and segmented \
             locks) and `{exhausted}` (for segmented locks' exhausted shards), or one of them, \
             are missing in {db} at {at}: create them with the statements of \
             `SqlClientBuilder::schema`, or let fencelock create them (`create_tables(true)`, \
             the default, with the CREATE privilege)"
        ),
        Cause::MissingDatabase => format!(
            "the database named in the URL does not exist on {db} at {at}: create it, or \
             name an existing one"
        ),
        Cause::ForeignTable => format!(
            "the table `{table}`, `{fences}` or `{releases}` in {db} at {at} is not a fencelock \
             lock table of this version (another program's, or an older layout): name another \
             table with `table(...)`, or compare it with the statements of \
             `SqlClientBuilder::schema`"
        ),
        Cause::Broken => format!(
            "{db} at {at} kept ending the connections (restarting, or an administrator ended \
             them), each tried again on another"
        ),
        Cause::Transient | Cause::LockWait => format!(
            "{db} at {at} kept failing a lock statement on a race with another transaction \
             (deadlock, serialization failure or lock wait timeout), retried each time"
        ),
        Cause::Other => match &error {
            sqlx::Error::Io(_) | sqlx::Error::Tls(_) => {
                format!("cannot reach {db} at {at}: is it running, and is the URL right?")
            }
            sqlx::Error::PoolTimedOut => format!(
                "no connection to {db} at {at} became free or could be opened in time \
                 (unreachable, or every pooled connection busy)"
            ),
            sqlx::Error::Configuration(_) => format!("the {db} URL is not valid ({at})"),
            _ => format!("{db} at {at} failed a lock statement"),
        },
    };
    // The database's (or the socket's) own error as the source: sqlx's wrapper would show
    // its text twice.
    let source: Arc<dyn std::error::Error + Send + Sync> = match error {
        sqlx::Error::Database(database) => {
            Arc::from(database as Box<dyn std::error::Error + Send + Sync>)
        }
        sqlx::Error::Io(io) => Arc::new(io),
        sqlx::Error::Tls(tls) => Arc::from(tls),
        error => Arc::new(error),
    };
    LockError::backend(key, message, Some(source))
}

pub(crate) use crate::error::redacted_url as redacted;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_redacted_url_keeps_the_user_host_and_database_but_not_the_password() {
        assert_eq!(
            redacted("postgres://app:s3cret@db.example:5432/locks?sslmode=require"),
            "postgres://app@db.example:5432/locks"
        );
        assert_eq!(
            redacted("mysql://root@127.0.0.1/test"),
            "mysql://root@127.0.0.1/test"
        );
        assert_eq!(redacted("mysql://localhost"), "mysql://localhost");
        assert!(!redacted("nonsense:s3cret").contains("s3cret"));
    }
}

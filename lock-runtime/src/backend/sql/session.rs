//! One pooled connection, as the backend's statements use it: text and integer parameters in,
//! rows of text and integers out, and transactions that end with the connection closed when
//! they are not committed (so that an interrupted one never goes back to the pool open).
//!
//! The same code serves PostgreSQL and MySQL: the bounds that make a sqlx database usable
//! here are written once, on the implementations below.

use sqlx::pool::PoolConnection;
use sqlx::{ColumnIndex, Database, Decode, Encode, Executor, IntoArguments, Pool, Row, Type};

use crate::backend::BoxFuture;

/// A statement's parameter.
#[derive(Debug, Clone)]
pub(crate) enum Param {
    Text(String),
    Int(i64),
}

impl From<&str> for Param {
    fn from(text: &str) -> Self {
        Param::Text(text.to_owned())
    }
}

/// A column's value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Value {
    Text(String),
    Int(i64),
    Null,
}

impl Value {
    pub(crate) fn int(&self) -> Option<i64> {
        match self {
            Value::Int(int) => Some(*int),
            _ => None,
        }
    }

    pub(crate) fn text(&self) -> Option<&str> {
        match self {
            Value::Text(text) => Some(text),
            _ => None,
        }
    }
}

/// What a statement matched, for each database's result type (sqlx has no trait for it).
pub(crate) trait Matched {
    fn matched(&self) -> u64;
}

#[cfg(feature = "postgres")]
impl Matched for sqlx::postgres::PgQueryResult {
    fn matched(&self) -> u64 {
        self.rows_affected()
    }
}

#[cfg(feature = "mysql")]
impl Matched for sqlx::mysql::MySqlQueryResult {
    fn matched(&self) -> u64 {
        self.rows_affected()
    }
}

/// A connection taken from the pool.
pub(crate) trait Session: Send {
    /// Runs `sql`; the number of rows it matched (sqlx asks MySQL for matched rows, not
    /// changed ones).
    fn execute<'a>(
        &'a mut self,
        sql: &'a str,
        params: &'a [Param],
    ) -> BoxFuture<'a, Result<u64, sqlx::Error>>;

    /// Runs `sql`; the rows it returned.
    fn fetch<'a>(
        &'a mut self,
        sql: &'a str,
        params: &'a [Param],
    ) -> BoxFuture<'a, Result<Vec<Vec<Value>>, sqlx::Error>>;

    /// Closes the connection when it goes back to the pool instead of keeping it (an open
    /// transaction on it then ends with a rollback on the server).
    fn close_on_drop(&mut self);
}

/// Where sessions come from.
pub(crate) trait Sessions: Send + Sync + std::fmt::Debug {
    fn session(&self) -> BoxFuture<'_, Result<Box<dyn Session>, sqlx::Error>>;
}

impl<DB> Sessions for Pool<DB>
where
    DB: Database,
    PoolConnection<DB>: Session,
{
    fn session(&self) -> BoxFuture<'_, Result<Box<dyn Session>, sqlx::Error>> {
        Box::pin(async move {
            let session: Box<dyn Session> = Box::new(self.acquire().await?);
            Ok(session)
        })
    }
}

impl<DB> Session for PoolConnection<DB>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> String: Encode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    for<'r> Option<String>: Decode<'r, DB>,
    for<'r> Option<i64>: Decode<'r, DB>,
    String: Type<DB>,
    i64: Type<DB>,
    usize: ColumnIndex<DB::Row>,
    DB::QueryResult: Matched,
{
    fn execute<'a>(
        &'a mut self,
        sql: &'a str,
        params: &'a [Param],
    ) -> BoxFuture<'a, Result<u64, sqlx::Error>> {
        Box::pin(async move {
            // Without parameters, as plain text (MySQL's protocol takes `BEGIN` only so).
            let done = if params.is_empty() {
                (&mut **self).execute(sql).await?
            } else {
                bound::<DB>(sql, params).execute(&mut **self).await?
            };
            Ok(done.matched())
        })
    }

    fn fetch<'a>(
        &'a mut self,
        sql: &'a str,
        params: &'a [Param],
    ) -> BoxFuture<'a, Result<Vec<Vec<Value>>, sqlx::Error>> {
        Box::pin(async move {
            let rows = bound::<DB>(sql, params).fetch_all(&mut **self).await?;
            rows.iter().map(values::<DB>).collect()
        })
    }

    fn close_on_drop(&mut self) {
        PoolConnection::close_on_drop(self);
    }
}

fn bound<'q, DB>(sql: &'q str, params: &[Param]) -> sqlx::query::Query<'q, DB, DB::Arguments<'q>>
where
    DB: Database,
    String: Encode<'q, DB> + Type<DB>,
    i64: Encode<'q, DB> + Type<DB>,
{
    params
        .iter()
        .fold(sqlx::query::<DB>(sql), |query, param| match param {
            Param::Text(text) => query.bind(text.clone()),
            Param::Int(int) => query.bind(*int),
        })
}

/// A row's columns: each statement returns only integers and text.
fn values<DB>(row: &DB::Row) -> Result<Vec<Value>, sqlx::Error>
where
    DB: Database,
    for<'r> Option<String>: Decode<'r, DB>,
    for<'r> Option<i64>: Decode<'r, DB>,
    String: Type<DB>,
    i64: Type<DB>,
    usize: ColumnIndex<DB::Row>,
{
    (0..row.len())
        .map(|at| {
            let value = match row.try_get::<Option<i64>, _>(at) {
                Ok(int) => int.map(Value::Int),
                Err(_) => row.try_get::<Option<String>, _>(at)?.map(Value::Text),
            };
            Ok(value.unwrap_or(Value::Null))
        })
        .collect()
}

/// A transaction on a session: committed with [`commit`](Self::commit), else the session's
/// connection is closed when it is dropped (the server rolls back).
pub(crate) struct Transaction {
    session: Box<dyn Session>,
    committed: bool,
}

impl Transaction {
    pub(crate) async fn begin(session: Box<dyn Session>) -> Result<Self, sqlx::Error> {
        // Built first: a `BEGIN` whose reply is lost closes the connection too.
        let mut transaction = Transaction {
            session,
            committed: false,
        };
        transaction.session.execute("BEGIN", &[]).await?;
        Ok(transaction)
    }

    pub(crate) fn session(&mut self) -> &mut dyn Session {
        &mut *self.session
    }

    pub(crate) async fn commit(mut self) -> Result<(), sqlx::Error> {
        self.session.execute("COMMIT", &[]).await?;
        self.committed = true;
        Ok(())
    }
}

impl Drop for Transaction {
    fn drop(&mut self) {
        if !self.committed {
            self.session.close_on_drop();
        }
    }
}

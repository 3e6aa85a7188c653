//! The SQL databases the tests run against (each with its feature, `postgres` or `mysql`): PostgreSQL and MySQL/MariaDB servers the machine
//! provides (tests do not start their own: a database server takes seconds to start, and CI
//! starts one of each). Each [`SqlDatabase`] uses lock tables of its own, dropped by
//! [`SqlDatabase::drop_tables`], so tests on one server share nothing.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::LockClient;
use crate::backend::sql::SqlClientBuilder;

/// The PostgreSQL URL unless `FENCELOCK_POSTGRES_URL` names another.
pub const DEFAULT_POSTGRES_URL: &str = "postgres://postgres@127.0.0.1:5432/test";
/// The MySQL/MariaDB URL unless `FENCELOCK_MYSQL_URL` names another.
pub const DEFAULT_MYSQL_URL: &str = "mysql://root@127.0.0.1:3306/test";

/// Which database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SqlKind {
    /// PostgreSQL (with the `postgres` feature).
    #[cfg(feature = "postgres")]
    Postgres,
    /// MySQL or MariaDB (with the `mysql` feature).
    #[cfg(feature = "mysql")]
    MySql,
}

impl SqlKind {
    fn name(self) -> &'static str {
        match self {
            #[cfg(feature = "postgres")]
            SqlKind::Postgres => "PostgreSQL",
            #[cfg(feature = "mysql")]
            SqlKind::MySql => "MySQL/MariaDB",
        }
    }

    fn variable(self) -> &'static str {
        match self {
            #[cfg(feature = "postgres")]
            SqlKind::Postgres => "FENCELOCK_POSTGRES_URL",
            #[cfg(feature = "mysql")]
            SqlKind::MySql => "FENCELOCK_MYSQL_URL",
        }
    }

    /// The URL the tests use.
    pub fn url(self) -> String {
        let default = match self {
            #[cfg(feature = "postgres")]
            SqlKind::Postgres => DEFAULT_POSTGRES_URL,
            #[cfg(feature = "mysql")]
            SqlKind::MySql => DEFAULT_MYSQL_URL,
        };
        std::env::var(self.variable()).unwrap_or_else(|_| default.to_owned())
    }
}

/// A database for one test, with lock tables of its own.
#[derive(Debug, Clone)]
pub struct SqlDatabase {
    kind: SqlKind,
    url: String,
    table: String,
}

impl SqlDatabase {
    /// The test database of `kind`, if its server answers. Without one, prints which suite
    /// skips and why, and returns `None`; in CI (`CI` set) that is a failure, never a skip.
    pub async fn reach(kind: SqlKind) -> Option<SqlDatabase> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let url = kind.url();
        let table = format!(
            "fencelock_test_{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let database = SqlDatabase { kind, url, table };
        // A plain query: the tables are created by the test's first client, not here.
        let probe = tokio::time::timeout(Duration::from_secs(10), database.execute("SELECT 1"));
        match probe.await {
            Ok(Ok(_)) => Some(database),
            failed => {
                let why = match failed {
                    Ok(Err(error)) => error.to_string(),
                    _ => "no answer within 10 s".to_owned(),
                };
                let (name, variable) = (kind.name(), kind.variable());
                if std::env::var_os("CI").is_some() {
                    panic!("CI must run the {name} tests: {why}");
                }
                eprintln!(
                    "SKIPPED: the {name} tests need a server at {} (set {variable}): {why}",
                    database.url
                );
                None
            }
        }
    }

    /// Which database.
    pub fn kind(&self) -> SqlKind {
        self.kind
    }

    /// Its URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The name of this database's lock table.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The server's address (host and port of the URL, on loopback unless it names another
    /// IP address).
    pub fn addr(&self) -> Option<std::net::SocketAddr> {
        let rest = self.url.split_once("://")?.1;
        let authority = rest.split('/').next()?;
        let host_port = authority
            .rsplit_once('@')
            .map_or(authority, |(_, host)| host);
        let (host, port) = host_port.rsplit_once(':')?;
        let ip = match host {
            "localhost" => std::net::IpAddr::from([127, 0, 0, 1]),
            ip => ip.parse().ok()?,
        };
        Some(std::net::SocketAddr::new(ip, port.parse().ok()?))
    }

    /// This database's URL with its server's address replaced by `addr` (a proxy's).
    pub fn url_via(&self, addr: std::net::SocketAddr) -> Option<String> {
        let server = self.addr()?;
        let port = format!(":{}/", server.port());
        let (scheme, rest) = self.url.split_once("://")?;
        let (user, authority_rest) = match rest.rsplit_once('@') {
            Some((user, rest)) => (format!("{user}@"), rest),
            None => (String::new(), rest),
        };
        let path = authority_rest.split_once(&port)?.1;
        Some(format!("{scheme}://{user}{addr}/{path}"))
    }

    /// Restarts the machine's database server, as its packages run it (as root: PostgreSQL
    /// with `pg_ctlcluster`, MariaDB with `mariadb-admin shutdown` and `mariadbd` started
    /// again in the background), and waits (at most 60 s) until it answers. Data on disk
    /// survives; connections do not.
    pub async fn restart_server(&self) -> std::io::Result<()> {
        let run = |program: &str, args: &[&str]| -> std::io::Result<()> {
            let status = std::process::Command::new(program)
                .args(args)
                .stdout(std::process::Stdio::null())
                .status()?;
            if status.success() {
                Ok(())
            } else {
                Err(std::io::Error::other(format!(
                    "{program} {args:?}: {status}"
                )))
            }
        };
        match self.kind {
            #[cfg(feature = "postgres")]
            SqlKind::Postgres => {
                let version = std::fs::read_dir("/etc/postgresql")?
                    .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
                    .next()
                    .ok_or_else(|| std::io::Error::other("no cluster under /etc/postgresql"))?;
                let args = ["--skip-systemctl-redirect", &version, "main", "restart"];
                run("pg_ctlcluster", &args)?;
            }
            #[cfg(feature = "mysql")]
            SqlKind::MySql => {
                run("mariadb-admin", &["-h127.0.0.1", "-uroot", "shutdown"])?;
                // The shutdown's reply may come before the server has exited.
                let started = std::time::Instant::now();
                let running = || run("pgrep", &["-x", "mariadbd"]).is_ok();
                while running() && started.elapsed() < Duration::from_secs(60) {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                let start = [
                    "--start",
                    "--oknodo",
                    "--background",
                    "--exec",
                    "/usr/sbin/mariadbd",
                ];
                run("start-stop-daemon", &start)?;
            }
        }
        let started = std::time::Instant::now();
        while self.execute("SELECT 1").await.is_err() {
            if started.elapsed() > Duration::from_secs(60) {
                return Err(std::io::Error::other(
                    "the database did not come back in 60 s",
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(())
    }

    /// A builder for a client on this database's lock table.
    pub fn builder(&self) -> SqlClientBuilder {
        let builder = match self.kind {
            #[cfg(feature = "postgres")]
            SqlKind::Postgres => LockClient::postgres_builder(&self.url),
            #[cfg(feature = "mysql")]
            SqlKind::MySql => LockClient::mysql_builder(&self.url),
        };
        builder.table(&self.table)
    }

    /// A client on this database's lock table.
    pub async fn client(&self) -> LockClient {
        let connecting = self.builder().connect().await;
        connecting.unwrap_or_else(|e| panic!("{}: {}", self.kind.name(), crate::WithSources(&e)))
    }

    /// Runs `statement` (no parameters) on the database: for tests that change the tables
    /// behind the backend's back.
    pub async fn execute(&self, statement: &str) -> Result<u64, sqlx::Error> {
        use sqlx::Connection;
        let statement = statement.to_owned();
        match self.kind {
            #[cfg(feature = "postgres")]
            SqlKind::Postgres => {
                let mut connection = sqlx::PgConnection::connect(&self.url).await?;
                let done = sqlx::Executor::execute(&mut connection, statement.as_str()).await?;
                Ok(done.rows_affected())
            }
            #[cfg(feature = "mysql")]
            SqlKind::MySql => {
                let mut connection = sqlx::MySqlConnection::connect(&self.url).await?;
                let done = sqlx::Executor::execute(&mut connection, statement.as_str()).await?;
                Ok(done.rows_affected())
            }
        }
    }

    /// Locks the fence row of `key` (which must exist: lock `key` once first) in a
    /// transaction of its own, as a stuck client would, and returns once it is locked; the
    /// returned task commits after `hold`.
    pub async fn hold_fence_row(
        &self,
        key: &str,
        hold: Duration,
    ) -> Result<tokio::task::JoinHandle<()>, sqlx::Error> {
        self.hold_row(&format!("{}_fences", self.table), key, hold)
            .await
    }

    /// Locks the lock row of `key` (held now) as [`hold_fence_row`](Self::hold_fence_row)
    /// locks its fence row: as an administrator's open transaction would.
    pub async fn hold_lock_row(
        &self,
        key: &str,
        hold: Duration,
    ) -> Result<tokio::task::JoinHandle<()>, sqlx::Error> {
        self.hold_row(&self.table, key, hold).await
    }

    async fn hold_row(
        &self,
        table: &str,
        key: &str,
        hold: Duration,
    ) -> Result<tokio::task::JoinHandle<()>, sqlx::Error> {
        use sqlx::Connection;
        let select = format!("SELECT token FROM {table} WHERE name = ");
        macro_rules! hold_with {
            ($connection:ty, $placeholder:literal) => {{
                let mut connection = <$connection>::connect(&self.url).await?;
                sqlx::Executor::execute(&mut connection, "BEGIN").await?;
                let select = format!("{select}{} FOR UPDATE", $placeholder);
                sqlx::query(&select)
                    .bind(key)
                    .execute(&mut connection)
                    .await?;
                tokio::spawn(async move {
                    tokio::time::sleep(hold).await;
                    let _ = sqlx::Executor::execute(&mut connection, "COMMIT").await;
                })
            }};
        }
        Ok(match self.kind {
            #[cfg(feature = "postgres")]
            SqlKind::Postgres => hold_with!(sqlx::PgConnection, "$1"),
            #[cfg(feature = "mysql")]
            SqlKind::MySql => hold_with!(sqlx::MySqlConnection, "?"),
        })
    }

    /// Drops this database's lock tables (tried 3 times: the connections of a test's
    /// finished processes may still hold locks on them for a moment).
    pub async fn drop_tables(&self) {
        let drop = format!(
            "DROP TABLE IF EXISTS {0}, {0}_fences, {0}_releases, {0}_results, {0}_shares, \
             {0}_exhausted",
            self.table
        );
        for tries_left in (0..3).rev() {
            match self.execute(&drop).await {
                Ok(_) => return,
                Err(error) if tries_left == 0 => {
                    eprintln!("could not drop the test tables {}: {error}", self.table);
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    }
}

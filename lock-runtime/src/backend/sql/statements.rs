//! The statements of each SQL dialect, read from the `.sql` files beside this module, with
//! the configured table names in place.

use super::session::Param;

/// Which SQL database a backend talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dialect {
    #[cfg(feature = "postgres")]
    Postgres,
    #[cfg(feature = "mysql")]
    MySql,
}

impl Dialect {
    /// The database's name, for messages.
    pub(crate) fn name(self) -> &'static str {
        match self {
            #[cfg(feature = "postgres")]
            Dialect::Postgres => "PostgreSQL",
            #[cfg(feature = "mysql")]
            Dialect::MySql => "MySQL",
        }
    }

    /// A table name quoted as an identifier.
    fn quoted(self, table: &str) -> String {
        match self {
            #[cfg(feature = "postgres")]
            Dialect::Postgres => format!("\"{table}\""),
            #[cfg(feature = "mysql")]
            Dialect::MySql => format!("`{table}`"),
        }
    }
}

/// Reads one `.sql` file of each dialect.
macro_rules! sql_file {
    ($dialect:expr, $file:literal) => {
        match $dialect {
            #[cfg(feature = "postgres")]
            Dialect::Postgres => include_str!(concat!("postgres/", $file)),
            #[cfg(feature = "mysql")]
            Dialect::MySql => include_str!(concat!("mysql/", $file)),
        }
    };
}

/// How an acquire runs: one statement that does it all (PostgreSQL's data-modifying
/// `WITH`), or steps in a transaction, decided in Rust between them (MySQL).
#[derive(Debug)]
pub(crate) enum Acquiring {
    #[cfg(feature = "postgres")]
    AtOnce(String),
    #[cfg(feature = "mysql")]
    InSteps(AcquireSteps),
}

/// How a release runs, as [`Acquiring`] says of an acquire.
#[derive(Debug)]
pub(crate) enum Releasing {
    #[cfg(feature = "postgres")]
    AtOnce(String),
    #[cfg(feature = "mysql")]
    InSteps(ReleaseSteps),
}

/// An acquire's steps after the fence lock and the read of the lock row (nothing more when
/// another holds it).
#[cfg(feature = "mysql")]
#[derive(Debug)]
pub(crate) struct AcquireSteps {
    pub(crate) refresh: String,
    pub(crate) insert: String,
    pub(crate) take_over: String,
}

/// A release's steps after the fence lock and the read of the lock row (besides `delete`).
#[cfg(feature = "mysql")]
#[derive(Debug)]
pub(crate) struct ReleaseSteps {
    pub(crate) keep: String,
    pub(crate) remember_release: String,
    pub(crate) released_recently: String,
}

/// Every statement the backend sends, for one lock table.
#[derive(Debug)]
pub(crate) struct Statements {
    pub(crate) dialect: Dialect,
    /// The lock table's name, unquoted (for messages).
    pub(crate) table: String,
    /// The fence table's name, unquoted.
    pub(crate) fences: String,
    /// Creates both tables, one statement after the other.
    pub(crate) schema: Vec<String>,
    /// Fails when a table is missing.
    pub(crate) probe: String,
    /// Takes the name's fence row lock (and draws a token, for an acquire).
    pub(crate) lock_fence: String,
    /// The name's latest token and lock row.
    pub(crate) read: String,
    pub(crate) delete: String,
    pub(crate) acquiring: Acquiring,
    pub(crate) releasing: Releasing,
    pub(crate) list: String,
    /// PostgreSQL's `pg_notify` (MySQL announces nothing: waiters poll).
    pub(crate) notify: Option<String>,
    /// Renews a batch (`{grants}` left in, for [`Statements::grants`]).
    extend: String,
    /// MySQL: reads back which grants of the batch were renewed (PostgreSQL's update returns
    /// them).
    extended: Option<String>,
}

impl Statements {
    pub(crate) fn new(dialect: Dialect, table: &str) -> Statements {
        let fences = format!("{table}_fences");
        let (locks_id, fences_id) = (dialect.quoted(table), dialect.quoted(&fences));
        let prepare = |text: &str| -> String {
            let kept: Vec<&str> = text
                .lines()
                .filter(|line| !line.trim_start().starts_with("--"))
                .collect();
            kept.join("\n")
                .replace("{locks}", &locks_id)
                .replace("{fences}", &fences_id)
                .trim()
                .to_owned()
        };
        let split = |text: &str| -> Vec<String> {
            prepare(text)
                .split(';')
                .map(str::trim)
                .filter(|statement| !statement.is_empty())
                .map(str::to_owned)
                .collect()
        };
        Statements {
            dialect,
            table: table.to_owned(),
            schema: split(sql_file!(dialect, "schema.sql")),
            probe: prepare(sql_file!(dialect, "probe.sql")),
            lock_fence: prepare(sql_file!(dialect, "lock_fence.sql")),
            read: prepare(sql_file!(dialect, "read.sql")),
            delete: prepare(sql_file!(dialect, "delete.sql")),
            acquiring: match dialect {
                #[cfg(feature = "postgres")]
                Dialect::Postgres => {
                    Acquiring::AtOnce(prepare(include_str!("postgres/acquire.sql")))
                }
                #[cfg(feature = "mysql")]
                Dialect::MySql => Acquiring::InSteps(AcquireSteps {
                    refresh: prepare(include_str!("mysql/refresh.sql")),
                    insert: prepare(include_str!("mysql/insert.sql")),
                    take_over: prepare(include_str!("mysql/take_over.sql")),
                }),
            },
            releasing: match dialect {
                #[cfg(feature = "postgres")]
                Dialect::Postgres => {
                    Releasing::AtOnce(prepare(include_str!("postgres/release.sql")))
                }
                #[cfg(feature = "mysql")]
                Dialect::MySql => Releasing::InSteps(ReleaseSteps {
                    keep: prepare(include_str!("mysql/keep.sql")),
                    remember_release: prepare(include_str!("mysql/remember_release.sql")),
                    released_recently: prepare(include_str!("mysql/released_recently.sql")),
                }),
            },
            list: prepare(sql_file!(dialect, "list.sql")),
            notify: match dialect {
                #[cfg(feature = "postgres")]
                Dialect::Postgres => Some(prepare(include_str!("postgres/notify.sql"))),
                #[cfg(feature = "mysql")]
                Dialect::MySql => None,
            },
            extend: prepare(sql_file!(dialect, "extend.sql")),
            extended: match dialect {
                #[cfg(feature = "postgres")]
                Dialect::Postgres => None,
                #[cfg(feature = "mysql")]
                Dialect::MySql => Some(prepare(include_str!("mysql/extended.sql"))),
            },
            fences,
        }
    }

    /// The statements that renew `count` grants, whose parameters are each grant's name,
    /// owner, token and lease in ms, in that order: the update, and (MySQL) the read-back
    /// of the renewed ones, which takes the same parameters.
    pub(crate) fn extend(&self, count: usize) -> (String, Option<String>) {
        let grants = match self.dialect {
            #[cfg(feature = "postgres")]
            Dialect::Postgres => (0..count)
                .map(|at| {
                    let n = at * 4;
                    format!(
                        "(${}::TEXT, ${}::TEXT, ${}::BIGINT, ${}::BIGINT)",
                        n + 1,
                        n + 2,
                        n + 3,
                        n + 4
                    )
                })
                .collect::<Vec<_>>()
                .join(", "),
            #[cfg(feature = "mysql")]
            Dialect::MySql => {
                let first = "SELECT CAST(? AS BINARY) AS name, ? AS owner, \
                             CAST(? AS SIGNED) AS token, CAST(? AS SIGNED) AS ttl";
                let more = " UNION ALL SELECT CAST(? AS BINARY), ?, CAST(? AS SIGNED), \
                            CAST(? AS SIGNED)";
                format!("{first}{}", more.repeat(count.saturating_sub(1)))
            }
        };
        (
            self.extend.replace("{grants}", &grants),
            self.extended
                .as_ref()
                .map(|extended| extended.replace("{grants}", &grants)),
        )
    }

    /// The parameters of one grant in [`extend`](Self::extend)'s statements.
    pub(crate) fn extend_params(key: &str, owner: &str, token: u64, ttl_ms: i64) -> [Param; 4] {
        [
            Param::from(key),
            Param::from(owner),
            Param::Int(token as i64),
            Param::Int(ttl_ms),
        ]
    }
}

#[cfg(test)]
#[cfg(all(feature = "postgres", feature = "mysql"))]
mod tests {
    use super::*;

    #[test]
    fn every_statement_names_the_configured_tables_and_no_placeholder_is_left() {
        for dialect in [Dialect::Postgres, Dialect::MySql] {
            let statements = Statements::new(dialect, "app_locks");
            let (update, read_back) = statements.extend(3);
            let mut all = vec![statements.probe.clone(), statements.read.clone(), update];
            all.extend(statements.schema.clone());
            all.push(statements.lock_fence.clone());
            all.extend(read_back);
            for statement in all {
                assert!(!statement.contains('{'), "{dialect:?}: {statement}");
                assert!(!statement.contains("--"), "{dialect:?}: {statement}");
                assert!(statement.contains("app_locks"), "{dialect:?}: {statement}");
            }
            assert!(
                statements
                    .schema
                    .iter()
                    .any(|s| s.contains("app_locks_fences"))
            );
        }
    }

    #[test]
    fn a_batch_binds_four_parameters_per_grant() {
        let (update, _) = Statements::new(Dialect::Postgres, "t").extend(2);
        assert!(update.contains("$8::BIGINT") && !update.contains("$9"));
        let (update, read_back) = Statements::new(Dialect::MySql, "t").extend(2);
        assert_eq!(update.matches('?').count(), 8);
        assert_eq!(read_back.map(|s| s.matches('?').count()), Some(8));
    }
}

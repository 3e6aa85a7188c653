//! The statements of each SQL dialect, read from the `.sql` files beside this module, with
//! the configured table names in place.

use super::session::Param;
use crate::backend::HeldLease;

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

/// How a renewal of a batch runs, as [`Acquiring`] says of an acquire.
#[derive(Debug)]
pub(crate) enum Extending {
    #[cfg(feature = "postgres")]
    AtOnce(String),
    #[cfg(feature = "mysql")]
    InSteps(ExtendSteps),
}

/// A renewal's steps in one transaction: lock the rows nobody else holds, renew the live ones
/// among them, and (when rows were skipped) read which skipped ones are live. Each leaves
/// `{grants}` in, for [`Statements::with_grants`].
#[cfg(feature = "mysql")]
#[derive(Debug)]
pub(crate) struct ExtendSteps {
    pub(crate) lock_grants: String,
    pub(crate) update: String,
    pub(crate) extended: String,
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

/// A release's steps after the fence lock and the read of the lock row (besides `delete` and
/// the statements of releases remembered).
#[cfg(feature = "mysql")]
#[derive(Debug)]
pub(crate) struct ReleaseSteps {
    pub(crate) keep: String,
}

/// The owner of a name's marker row in the lock table while shares of the name are live: no
/// owner token is this (they are hex digits, or start with an instance's tag).
pub(crate) const SHARED_MARKER: &str = ":shared";

/// The statements of the shared kinds (read/write locks, semaphores, segmented locks), each
/// dialect's; see `shares_schema.sql` and the module docs.
#[derive(Debug)]
pub(crate) struct ShareStatements {
    /// Locks the name's lock row (marker) after the fence row.
    pub(crate) lock_marker: String,
    /// The name's shares.
    pub(crate) read: String,
    /// Every live share.
    pub(crate) list: String,
    /// A grant or a writer's place.
    pub(crate) put: String,
    /// The holder asks again.
    pub(crate) refresh: String,
    /// A release with `min_hold_ms`.
    pub(crate) keep: String,
    pub(crate) delete: String,
    /// The name's marker, lasting as long as its longest share.
    pub(crate) put_marker: String,
    pub(crate) delete_marker: String,
    /// A renewal's steps, each with `{grants}`: lock the markers, lock the grants, renew
    /// them, make the markers last as long.
    pub(crate) lock_markers: String,
    pub(crate) lock_grants: String,
    pub(crate) renew: String,
    pub(crate) bump_markers: String,
    /// The name's exhausted shards.
    pub(crate) read_exhausted: String,
    /// Marks a shard exhausted.
    pub(crate) mark_exhausted: String,
    /// Clears one mark of the name, or all.
    pub(crate) refill: String,
}

/// Every statement the backend sends, for one lock table.
#[derive(Debug)]
pub(crate) struct Statements {
    pub(crate) dialect: Dialect,
    /// The lock table's name, unquoted (for messages).
    pub(crate) table: String,
    /// The fence table's name, unquoted.
    pub(crate) fences: String,
    /// The release table's name, unquoted.
    pub(crate) releases: String,
    /// The results table's name, unquoted.
    pub(crate) results: String,
    /// The shares table's name, unquoted.
    pub(crate) shares: String,
    /// The exhausted shards' table's name, unquoted.
    pub(crate) exhausted: String,
    /// Creates the tables, one statement after the other.
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
    /// The single-flight value kept under a name.
    pub(crate) result_read: String,
    /// Keeps a single-flight value under a name, once the one kept is taken out.
    pub(crate) result_write: String,
    /// Takes the single-flight value kept under a name out.
    pub(crate) result_delete: String,
    /// Creates the results table (also one of `schema`).
    pub(crate) results_schema: Vec<String>,
    /// Deletes the single-flight values that lapsed.
    pub(crate) results_forget: String,
    /// Creates the shared kinds' tables, the shares and the exhausted shards (also of
    /// `schema`).
    pub(crate) shares_schema: Vec<String>,
    /// The shared kinds' statements.
    pub(crate) sharing: ShareStatements,
    /// Remembers an owner's release (MySQL's mutex and every share's; PostgreSQL's mutex
    /// release does it itself).
    pub(crate) remember_release: String,
    /// Whether an owner released a name lately.
    pub(crate) released_recently: String,
    /// Deletes some releases that lapsed.
    pub(crate) forget_releases: String,
    /// PostgreSQL's `pg_notify` (MySQL announces nothing: waiters poll).
    pub(crate) notify: Option<String>,
    /// Renews a batch of grants.
    pub(crate) extending: Extending,
}

impl Statements {
    pub(crate) fn new(dialect: Dialect, table: &str) -> Statements {
        let fences = format!("{table}_fences");
        let releases = format!("{table}_releases");
        let (locks_id, fences_id) = (dialect.quoted(table), dialect.quoted(&fences));
        let releases_id = dialect.quoted(&releases);
        let results = format!("{table}_results");
        let results_id = dialect.quoted(&results);
        let results_index = dialect.quoted(&format!("{results}_until"));
        let shares = format!("{table}_shares");
        let shares_id = dialect.quoted(&shares);
        let exhausted = format!("{table}_exhausted");
        let exhausted_id = dialect.quoted(&exhausted);
        // Index names are the schema's on PostgreSQL: named after the table, 63 bytes at most
        // with a table name of `MAX_TABLE_LEN`.
        let releases_index = dialect.quoted(&format!("{releases}_until"));
        let prepare = |text: &str| -> String {
            let kept: Vec<&str> = text
                .lines()
                .filter(|line| !line.trim_start().starts_with("--"))
                .collect();
            kept.join("\n")
                .replace("{locks}", &locks_id)
                .replace("{fences}", &fences_id)
                .replace("{releases}", &releases_id)
                .replace("{results_until}", &results_index)
                .replace("{results}", &results_id)
                .replace("{releases_until}", &releases_index)
                .replace("{shares}", &shares_id)
                .replace("{exhausted}", &exhausted_id)
                .replace("{marker}", &format!("'{SHARED_MARKER}'"))
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
            schema: [
                split(sql_file!(dialect, "schema.sql")),
                split(sql_file!(dialect, "results_schema.sql")),
                split(sql_file!(dialect, "shares_schema.sql")),
            ]
            .concat(),
            results_schema: split(sql_file!(dialect, "results_schema.sql")),
            shares_schema: split(sql_file!(dialect, "shares_schema.sql")),
            sharing: ShareStatements {
                lock_marker: prepare(sql_file!(dialect, "lock_marker.sql")),
                read: prepare(sql_file!(dialect, "read_shares.sql")),
                list: prepare(sql_file!(dialect, "list_shares.sql")),
                put: prepare(sql_file!(dialect, "put_share.sql")),
                refresh: prepare(sql_file!(dialect, "refresh_share.sql")),
                keep: prepare(sql_file!(dialect, "keep_share.sql")),
                delete: prepare(sql_file!(dialect, "delete_share.sql")),
                put_marker: prepare(sql_file!(dialect, "put_marker.sql")),
                delete_marker: prepare(sql_file!(dialect, "delete_marker.sql")),
                lock_markers: prepare(sql_file!(dialect, "lock_markers.sql")),
                lock_grants: prepare(sql_file!(dialect, "lock_shares.sql")),
                renew: prepare(sql_file!(dialect, "renew_shares.sql")),
                bump_markers: prepare(sql_file!(dialect, "bump_markers.sql")),
                read_exhausted: prepare(sql_file!(dialect, "read_exhausted.sql")),
                mark_exhausted: prepare(sql_file!(dialect, "mark_exhausted.sql")),
                refill: prepare(sql_file!(dialect, "refill.sql")),
            },
            remember_release: prepare(sql_file!(dialect, "remember_release.sql")),
            released_recently: prepare(sql_file!(dialect, "released_recently.sql")),
            forget_releases: prepare(sql_file!(dialect, "forget_releases.sql")),
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
                }),
            },
            list: prepare(sql_file!(dialect, "list.sql")),
            result_read: prepare(sql_file!(dialect, "result_read.sql")),
            result_write: prepare(sql_file!(dialect, "result_write.sql")),
            result_delete: prepare(sql_file!(dialect, "result_delete.sql")),
            results_forget: prepare(sql_file!(dialect, "results_forget.sql")),
            notify: match dialect {
                #[cfg(feature = "postgres")]
                Dialect::Postgres => Some(prepare(include_str!("postgres/notify.sql"))),
                #[cfg(feature = "mysql")]
                Dialect::MySql => None,
            },
            extending: match dialect {
                #[cfg(feature = "postgres")]
                Dialect::Postgres => {
                    Extending::AtOnce(prepare(include_str!("postgres/extend.sql")))
                }
                #[cfg(feature = "mysql")]
                Dialect::MySql => Extending::InSteps(ExtendSteps {
                    lock_grants: prepare(include_str!("mysql/lock_grants.sql")),
                    update: prepare(include_str!("mysql/extend.sql")),
                    extended: prepare(include_str!("mysql/extended.sql")),
                }),
            },
            fences,
            releases,
            results,
            shares,
            exhausted,
        }
    }

    /// A renewal's `statement` for `count` grants, whose parameters are each grant's name,
    /// owner, token and lease in ms, in that order; with `skip_locked`, the rows another
    /// session holds locked are skipped rather than waited for.
    pub(crate) fn with_grants(&self, statement: &str, count: usize, skip_locked: bool) -> String {
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
        let skip_locked = if skip_locked { "SKIP LOCKED" } else { "" };
        statement
            .replace("{grants}", &grants)
            .replace("{skip_locked}", skip_locked)
    }

    /// The parameters of [`with_grants`](Self::with_grants)'s statements for `held`.
    pub(crate) fn grant_params<'a>(held: impl IntoIterator<Item = &'a HeldLease>) -> Vec<Param> {
        held.into_iter()
            .flat_map(|held| {
                let ttl_ms = i64::try_from(held.lease.ttl.as_millis()).unwrap_or(i64::MAX);
                [
                    Param::from(held.lease.key.as_str()),
                    Param::from(held.lease.owner.as_str()),
                    Param::Int(held.token as i64),
                    Param::Int(ttl_ms),
                ]
            })
            .collect()
    }
}

#[cfg(test)]
#[cfg(all(feature = "postgres", feature = "mysql"))]
mod tests {
    use super::*;

    /// A renewal's statements, each for `count` grants.
    fn renewal(statements: &Statements, count: usize) -> Vec<String> {
        let with = |statement: &String| statements.with_grants(statement, count, true);
        match &statements.extending {
            Extending::AtOnce(statement) => vec![with(statement)],
            Extending::InSteps(steps) => [&steps.lock_grants, &steps.update, &steps.extended]
                .into_iter()
                .map(with)
                .collect(),
        }
    }

    #[test]
    fn every_statement_names_the_configured_tables_and_no_placeholder_is_left() {
        for dialect in [Dialect::Postgres, Dialect::MySql] {
            let statements = Statements::new(dialect, "app_locks");
            let mut all = vec![statements.probe.clone(), statements.read.clone()];
            all.extend(renewal(&statements, 3));
            all.extend(statements.schema.clone());
            all.push(statements.lock_fence.clone());
            all.extend([
                statements.result_read.clone(),
                statements.result_write.clone(),
            ]);
            let sharing = &statements.sharing;
            all.extend(
                [
                    &sharing.lock_marker,
                    &sharing.read,
                    &sharing.list,
                    &sharing.put,
                    &sharing.refresh,
                    &sharing.keep,
                    &sharing.delete,
                    &sharing.put_marker,
                    &sharing.delete_marker,
                    &sharing.read_exhausted,
                    &sharing.mark_exhausted,
                    &sharing.refill,
                    &statements.remember_release,
                    &statements.released_recently,
                    &statements.forget_releases,
                ]
                .map(String::clone),
            );
            let renewal = [
                &sharing.lock_markers,
                &sharing.lock_grants,
                &sharing.renew,
                &sharing.bump_markers,
            ];
            all.extend(renewal.map(|step| statements.with_grants(step, 3, false)));
            for statement in all {
                assert!(!statement.contains('{'), "{dialect:?}: {statement}");
                assert!(!statement.contains("--"), "{dialect:?}: {statement}");
                assert!(statement.contains("app_locks"), "{dialect:?}: {statement}");
            }
            for table in [
                "app_locks_fences",
                "app_locks_releases",
                "app_locks_results",
                "app_locks_shares",
                "app_locks_exhausted",
            ] {
                assert!(statements.schema.iter().any(|s| s.contains(table)));
            }
        }
    }

    #[test]
    fn a_batch_binds_four_parameters_per_grant() {
        let [at_once] = &renewal(&Statements::new(Dialect::Postgres, "t"), 2)[..] else {
            panic!("one statement");
        };
        assert!(at_once.contains("$8::BIGINT") && !at_once.contains("$9"));
        for step in renewal(&Statements::new(Dialect::MySql, "t"), 2) {
            assert_eq!(step.matches('?').count(), 8, "{step}");
        }
    }
}

//! The SQL backends on the machine's PostgreSQL and MySQL/MariaDB servers
//! (`FENCELOCK_POSTGRES_URL`, `FENCELOCK_MYSQL_URL`): the conformance suite, exclusion on
//! recorded histories, fencing across deleted rows, and the errors a misconfigured client
//! gets. Each test uses lock tables of its own.

use fencelock::testing::{SqlDatabase, SqlKind, conformance};

const KINDS: [SqlKind; 2] = [SqlKind::Postgres, SqlKind::MySql];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_pass_the_conformance_suite() {
    for kind in KINDS {
        let Some(database) = SqlDatabase::reach(kind).await else {
            continue;
        };
        conformance::run(&database.client().await, "conformance").await;
        database.drop_tables().await;
    }
}

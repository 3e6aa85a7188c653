//! The README's database example: a ShedLock-style job on PostgreSQL, and a MySQL table
//! created by a migration.

use fencelock::{LockClient, LockError, lock, with_client};

#[lock(key = "nightly-report:{day}", ttl_ms = 600_000, action = GiveUp)]
async fn nightly_report(day: u32) -> Result<u32, LockError> {
    // One instance of the fleet runs it; the others get `NotAcquired` and skip.
    Ok(day)
}

async fn run(postgres_url: &str) -> Result<(), LockError> {
    // Creates `fencelock_locks` and the tables beside it if they are missing.
    let locks = LockClient::postgres(postgres_url).await?;
    with_client(locks, nightly_report(20261202)).await?;

    // A table of your own, created by your migrations instead:
    let builder = LockClient::mysql_builder("mysql://app:secret@db:3306/app")
        .table("app_locks")
        .create_tables(false);
    for statement in builder.schema()? {
        println!("{statement};");
    }
    Ok(())
}

// ---- not in the README: runs it on the machine's PostgreSQL, if it answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs() {
    use fencelock::testing::{SqlDatabase, SqlKind};
    let Some(database) = SqlDatabase::reach(SqlKind::Postgres).await else {
        return;
    };
    run(database.url()).await.unwrap();
    let drop = "DROP TABLE IF EXISTS fencelock_locks, fencelock_locks_fences, \
        fencelock_locks_releases";
    database.execute(drop).await.unwrap();
}

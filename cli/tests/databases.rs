//! The `fencelock` command on the SQL backends: a lock held in PostgreSQL and in MySQL is
//! listed, inspected and released by force through the database's URL and the lock table; a
//! table that is not there is named, with `--table` as the fix.

mod support;

use fencelock::testing::{SqlDatabase, SqlKind};

use support::fencelock;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_lock_is_listed_inspected_and_released() {
    for kind in [SqlKind::Postgres, SqlKind::MySql] {
        let Some(database) = SqlDatabase::reach(kind).await else {
            continue;
        };
        let locks = database.client().await;
        let guard = locks.lock("stock:42").acquire().await.unwrap();
        let on = |args: &[&str]| {
            let mut all = vec!["--url", database.url(), "--table", database.table()];
            all.extend_from_slice(args);
            all.iter().map(|arg| (*arg).to_owned()).collect::<Vec<_>>()
        };
        let args = on(&["list", "--json"]);
        let listed = fencelock(&args.iter().map(String::as_str).collect::<Vec<_>>()).await;
        let listed = listed.json();
        assert_eq!(listed[0]["key"], "stock:42", "{kind:?}: {listed}");
        assert_eq!(listed[0]["token"], guard.token(), "{kind:?}: {listed}");
        let args = on(&["release", "stock:42", "--force", "--yes"]);
        let released = fencelock(&args.iter().map(String::as_str).collect::<Vec<_>>()).await;
        released.ok();
        let args = on(&["inspect", "stock:42", "--json"]);
        let inspected = fencelock(&args.iter().map(String::as_str).collect::<Vec<_>>()).await;
        let inspected = inspected.json();
        assert_eq!(inspected["state"], "free", "{kind:?}: {inspected}");
        assert!(guard.release().await.unwrap_err().is_lost(), "{kind:?}");
        let args = on(&["list"]);
        let mut args: Vec<&str> = args.iter().map(String::as_str).collect();
        let table = args.iter().position(|arg| *arg == "--table").unwrap() + 1;
        args[table] = "fencelock_absent";
        let missing = fencelock(&args).await.failed_with_one_line();
        assert!(
            missing.contains("no lock table `fencelock_absent`")
                && missing.contains("--table names the lock table")
                && !missing.contains("create_tables"),
            "{kind:?}: {missing}"
        );
        database.drop_tables().await;
    }
}

//! Property: no part of a URL's password shows in what fencelock says about the URL (Debug
//! output of the builders, errors and their sources), whatever printable characters the
//! password holds, for every scheme [`LockClient::open`] knows.

use std::fmt::Write as _;
use std::sync::LazyLock;
use std::time::Duration;

use proptest::prelude::*;

use super::parse;
use crate::{LockClient, LockError, WithSources};

/// The schemes of the stores, each checked.
const SCHEMES: [&str; 11] = [
    "redis",
    "rediss",
    "redis+sentinel",
    "redis+cluster",
    "redis+redlock",
    "postgres",
    "postgresql",
    "mysql",
    "mariadb",
    "zookeeper",
    "etcd",
];

/// URLs without a scheme and with one no store has: only their errors are checked.
const NOT_SCHEMES: [&str; 2] = ["", "http"];

/// Passwords whose outputs are the context: what fencelock says whatever the password (hosts,
/// messages), what it says of a `%` that escapes nothing or of an escape that is not UTF-8,
/// and of a password that would run into the path (refused). A window of the password found
/// in the context proves nothing, and is not checked.
const PLACEHOLDERS: [&str; 4] = ["pw", "%zz", "%ff", "1/z"];

/// How short a run of a password may be and still not be checked: two characters are found
/// in any message by chance.
const WINDOW: usize = 3;

/// The URL of the store `scheme` names, with user `u` and `password`, at a closed port of
/// this host (connecting fails at once); with no scheme when `scheme` is empty.
fn url(scheme: &str, password: &str) -> String {
    let (hosts, path) = match scheme {
        "redis+sentinel" => ("127.0.0.1:1", "/mymaster"),
        "redis+redlock" => ("127.0.0.1:1,127.0.0.2:1,127.0.0.3:1", ""),
        "postgres" | "postgresql" | "mysql" | "mariadb" => ("127.0.0.1:1", "/db"),
        _ => ("127.0.0.1:1", ""),
    };
    // Without a scheme, the user is no scheme either (a `_`): `u` and a password starting
    // with `//` would write `u://…`, a URL of scheme `u` whose user is the password's rest.
    let (scheme, user) = if scheme.is_empty() {
        (String::new(), "u_")
    } else {
        (format!("{scheme}://"), "u")
    };
    format!("{scheme}{user}:{password}@{hosts}{path}")
}

/// Each form an error shows itself in: Display, Debug, and with its sources as logs show it.
fn said_of(error: &LockError, into: &mut String) {
    let _ = write!(into, "\n{error}\n{error:?}\n{}", WithSources(error));
}

/// What fencelock says of `url` without connecting.
#[cfg_attr(
    not(any(feature = "postgres", feature = "mysql", feature = "etcd")),
    allow(unused_variables)
)]
fn said(scheme: &str, url: &str) -> String {
    let mut said = format!("{:?}", LockClient::open_builder(url));
    if let Err(error) = parse(url) {
        said_of(&error, &mut said);
    }
    if let Err(error) = LockClient::open_builder(url).store() {
        said_of(&error, &mut said);
    }
    let _ = write!(said, "\n{:?}", LockClient::builder(url));
    #[cfg(feature = "postgres")]
    if scheme.starts_with("postgres") {
        let _ = write!(said, "\n{:?}", LockClient::postgres_builder(url));
    }
    #[cfg(feature = "mysql")]
    if matches!(scheme, "mysql" | "mariadb") {
        let _ = write!(said, "\n{:?}", LockClient::mysql_builder(url));
    }
    #[cfg(feature = "etcd")]
    if scheme == "etcd" {
        let password = url
            .split_once("u:")
            .and_then(|(_, rest)| rest.rsplit_once('@'));
        let password = password.map_or("", |(password, _)| password);
        let builder = LockClient::etcd_builder(["http://127.0.0.1:1"]).user("u", password);
        let _ = write!(said, "\n{builder:?}");
    }
    said
}

/// A runtime for the connecting checks, shared by their cases.
static RUNTIME: LazyLock<tokio::runtime::Runtime> = LazyLock::new(|| {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a test runtime")
});

/// What connecting to `url` (which fails) says.
fn said_connecting(url: &str) -> String {
    let connecting = LockClient::open_builder(url)
        .connect_timeout(Duration::from_millis(300))
        .connect();
    let mut said = String::new();
    match RUNTIME.block_on(connecting) {
        Ok(_) => said.push_str("connected"),
        Err(error) => said_of(&error, &mut said),
    }
    said
}

/// `password` percent-encoded, as a URL handed on may carry it.
fn encoded(password: &str) -> String {
    password.bytes().fold(String::new(), |mut encoded, byte| {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            encoded.push(char::from(byte));
        } else {
            let _ = write!(encoded, "%{byte:02X}");
        }
        encoded
    })
}

/// Fails when a run of `WINDOW` characters of `password`, raw or percent-encoded, shows in
/// `said` but not in `context`.
fn check(password: &str, said: &str, context: &str) -> Result<(), TestCaseError> {
    for text in [password.to_owned(), encoded(password)] {
        for window in text.as_bytes().windows(WINDOW) {
            let window = std::str::from_utf8(window).expect("printable ASCII");
            if !context.contains(window) {
                prop_assert!(
                    !said.contains(window),
                    "`{}` of the password `{}` shows in:{}",
                    window,
                    password,
                    said
                );
            }
        }
    }
    Ok(())
}

/// Every printable ASCII character, 3 to 23 of them.
fn password() -> impl Strategy<Value = String> {
    "[ -~]{3,23}"
}

/// The context of each scheme and of each URL without one, in their order.
static SAID_OF_PLACEHOLDERS: LazyLock<Vec<String>> = LazyLock::new(|| {
    SCHEMES
        .iter()
        .chain(&NOT_SCHEMES)
        .map(|scheme| {
            let urls = PLACEHOLDERS.map(|placeholder| url(scheme, placeholder));
            urls.iter().map(|url| said(scheme, url)).collect()
        })
        .collect()
});

/// The context of connecting, for each scheme in its order.
static CONNECTING_TO_PLACEHOLDERS: LazyLock<Vec<String>> = LazyLock::new(|| {
    SCHEMES
        .iter()
        .map(|scheme| {
            let urls = PLACEHOLDERS.map(|placeholder| url(scheme, placeholder));
            urls.iter().map(|url| said_connecting(url)).collect()
        })
        .collect()
});

/// `count` cases, none of them kept in a file for the next run (the case count is the
/// test's).
fn cases(count: u32) -> ProptestConfig {
    ProptestConfig {
        cases: count,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(cases(256))]

    /// Debug output of the builders and the errors of a URL before connecting, for each
    /// scheme and each URL without one.
    #[test]
    fn no_part_of_a_password_shows_before_connecting(password in password()) {
        for (scheme, context) in SCHEMES.iter().chain(&NOT_SCHEMES).zip(&*SAID_OF_PLACEHOLDERS) {
            check(&password, &said(scheme, &url(scheme, &password)), context)?;
        }
    }
}

proptest! {
    #![proptest_config(cases(64))]

    /// The errors of connecting to a closed port, with their sources (the drivers'), for
    /// each scheme.
    #[test]
    fn no_part_of_a_password_shows_in_connecting_errors(password in password()) {
        for (scheme, context) in SCHEMES.iter().zip(&*CONNECTING_TO_PLACEHOLDERS) {
            check(&password, &said_connecting(&url(scheme, &password)), context)?;
        }
    }
}

proptest! {
    #![proptest_config(cases(256))]

    /// The URL [`LockClient::open`] hands to redis-rs and sqlx names the host, user, password
    /// and database the URL named (without a `%`, which would start an escape).
    #[test]
    fn a_url_handed_on_names_the_same_host_user_and_password(
        password in "[ -$&-~]{3,23}",
    ) {
        let url = format!("{}/3", url("redis", &password));
        // A password that reads as a path or query too is refused (a test of its own).
        prop_assume!(!super::reads_past_the_authority(&format!("u:{password}@")));
        let parsed = parse(&url).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let handed_on = parsed.escaped_url("redis");
        let info = redis::IntoConnectionInfo::into_connection_info(handed_on.as_str())
            .map_err(|e| TestCaseError::fail(format!("{handed_on}: {e}")))?;
        let tcp = redis::ConnectionAddr::Tcp("127.0.0.1".to_owned(), 1);
        prop_assert_eq!(info.addr(), &tcp);
        prop_assert_eq!(info.redis_settings().username(), Some("u"));
        prop_assert_eq!(info.redis_settings().password(), Some(password.as_str()));
        prop_assert_eq!(info.redis_settings().db(), 3);
        #[cfg(feature = "postgres")]
        {
            let handed_on = parsed.escaped_url("postgres");
            let options: sqlx::postgres::PgConnectOptions = handed_on
                .parse()
                .map_err(|e| TestCaseError::fail(format!("{handed_on}: {e}")))?;
            prop_assert_eq!(options.get_host(), "127.0.0.1");
            prop_assert_eq!(options.get_port(), 1);
            prop_assert_eq!(options.get_username(), "u");
            prop_assert_eq!(options.get_database(), Some("3"));
        }
    }
}

/// A user and a password holding what a URL gives meaning to (`@ # ? / :`), written raw,
/// log in to a Redis server that requires them; a `%` that escapes nothing stands for
/// itself, and an escape (`%41`) for its character.
#[cfg(feature = "testing")]
#[tokio::test]
async fn a_raw_user_and_password_log_in_to_redis() {
    let server = crate::testing::RedisServer::start().expect("a redis-server");
    let admin = redis::Client::open(server.url()).expect("the server's URL");
    let mut admin = admin
        .get_multiplexed_async_connection()
        .await
        .expect("admin");
    redis::cmd("ACL")
        .arg(&[
            "SETUSER",
            "a@b",
            "on",
            ">p#ss?w/@:rd%zzA",
            "~*",
            "&*",
            "+@all",
        ])
        .query_async::<()>(&mut admin)
        .await
        .expect("ACL SETUSER");
    let url = format!("redis://a@b:p#ss?w/@:rd%zz%41@127.0.0.1:{}/", server.port());
    let locks = LockClient::open(&url).await;
    locks.unwrap_or_else(|e| panic!("{}", WithSources(&e)));
}

/// The URL's host and user reach PostgreSQL whole past a raw `#`, `?`, `/`, `@` in the
/// password (the test server trusts its local users, whatever the password).
#[cfg(all(feature = "testing", feature = "postgres"))]
#[tokio::test]
async fn a_raw_password_leaves_the_postgres_host_and_user_whole() {
    use crate::testing::{SqlDatabase, SqlKind};
    let Some(database) = SqlDatabase::reach(SqlKind::Postgres).await else {
        return;
    };
    let Some(parts) = super::UrlParts::of(database.url()) else {
        panic!("the test URL {} has no scheme", database.url());
    };
    if parts.userinfo.contains(':') {
        eprintln!("SKIPPED: the test URL has a password of its own");
        return;
    }
    let user = parts.user();
    let (hosts, path) = (parts.hosts, parts.path);
    let url = format!("postgres://{user}:p#ss?w/@:rd@{hosts}{path}");
    let locks = LockClient::open_builder(&url)
        .table(database.table())
        .connect()
        .await;
    locks.unwrap_or_else(|e| panic!("{}", WithSources(&e)));
}

//! The scripts every acquire and release runs, as one Redis Functions library: loaded once
//! per server (`FUNCTION LOAD`), so that a call (`FCALL`) runs only its own function, where
//! `EVALSHA` runs the whole shared prelude again first. A server without Functions (Redis 6),
//! or a user whose ACL does not allow them, gets the same text as `EVALSHA` scripts instead.
//!
//! The library's name and its functions' names carry the key layout's version and a hash of
//! its text, so that a changed library never replaces the one an older client calls; the keys
//! carry the layout's version too, so that clients of two layouts never read each other's
//! locks (see `layout`).

use std::sync::LazyLock;
use std::sync::atomic::{AtomicBool, Ordering};

use redis::aio::ConnectionLike;
use redis::{Cmd, ErrorKind, RedisError, RedisResult, Script, ServerErrorKind, Value};

use super::layout;

const GRANT: &str = include_str!("lua/grant.lua");
const MUTEX: &str = include_str!("lua/mutex.lua");
const SHARED: &str = include_str!("lua/shared.lua");
const OPERATOR: &str = include_str!("lua/operator.lua");

/// One script of the library: its function, and the same as an `EVALSHA` script.
#[derive(Debug)]
pub(crate) struct LockScript {
    function: String,
    eval: Script,
    eval_source: String,
}

impl LockScript {
    /// The script as `EVALSHA` sends it, and its text: the operator's listing pipelines it
    /// after a `SCRIPT LOAD`, on whichever node a page came from.
    pub(crate) fn eval(&self) -> (&Script, &str) {
        (&self.eval, &self.eval_source)
    }
}

/// The library's scripts and its source.
pub(crate) struct Library {
    pub(crate) acquire: LockScript,
    pub(crate) acquire_together: LockScript,
    pub(crate) release: LockScript,
    pub(crate) shared_acquire: LockScript,
    pub(crate) shared_release: LockScript,
    pub(crate) give_back: LockScript,
    pub(crate) raise: LockScript,
    pub(crate) inspect: LockScript,
    pub(crate) force_release: LockScript,
    pub(crate) result_publish: LockScript,
    pub(crate) result_read: LockScript,
    pub(crate) shard_mark: LockScript,
    pub(crate) shard_refill: LockScript,
    pub(crate) owned: LockScript,
    source: String,
}

/// A function of the library: its name, the shared parts it uses (in this order), its body
/// (reading `KEYS` and `ARGV`), and its flags: a release frees memory, so it runs on a
/// server out of memory too (`allow-oom`); an inspection only reads (`no-writes`), so it
/// runs there as well.
struct Part {
    name: &'static str,
    prelude: &'static [&'static str],
    body: &'static str,
    flags: &'static str,
}

const PARTS: [Part; 14] = [
    Part {
        name: "acquire",
        prelude: &[GRANT, MUTEX],
        body: include_str!("lua/acquire.lua"),
        flags: "",
    },
    Part {
        name: "acquire_together",
        prelude: &[GRANT, MUTEX],
        body: include_str!("lua/acquire_together.lua"),
        flags: "",
    },
    Part {
        name: "release",
        prelude: &[GRANT, MUTEX],
        body: include_str!("lua/release.lua"),
        flags: "'allow-oom'",
    },
    Part {
        name: "shared_acquire",
        prelude: &[GRANT, MUTEX, SHARED],
        body: include_str!("lua/shared_acquire.lua"),
        flags: "",
    },
    Part {
        name: "shared_release",
        prelude: &[GRANT, MUTEX, SHARED],
        body: include_str!("lua/shared_release.lua"),
        flags: "'allow-oom'",
    },
    Part {
        name: "give_back",
        prelude: &[GRANT, MUTEX, SHARED],
        body: include_str!("lua/give_back.lua"),
        flags: "'allow-oom'",
    },
    Part {
        name: "raise",
        prelude: &[GRANT, MUTEX, SHARED],
        body: include_str!("lua/raise.lua"),
        flags: "",
    },
    Part {
        name: "inspect",
        prelude: &[GRANT, MUTEX, SHARED, OPERATOR],
        body: include_str!("lua/inspect.lua"),
        flags: "'no-writes'",
    },
    Part {
        name: "force_release",
        prelude: &[GRANT, MUTEX, SHARED, OPERATOR],
        body: include_str!("lua/force_release.lua"),
        flags: "'allow-oom'",
    },
    Part {
        name: "result_publish",
        prelude: &[GRANT, MUTEX],
        body: include_str!("lua/result_publish.lua"),
        flags: "",
    },
    Part {
        name: "result_read",
        prelude: &[],
        body: include_str!("lua/result_read.lua"),
        flags: "'no-writes'",
    },
    Part {
        name: "shard_mark",
        prelude: &[GRANT, MUTEX, SHARED],
        body: include_str!("lua/shard_mark.lua"),
        flags: "",
    },
    Part {
        name: "shard_refill",
        prelude: &[SHARED],
        body: include_str!("lua/shard_refill.lua"),
        flags: "'allow-oom'",
    },
    Part {
        name: "owned",
        prelude: &[GRANT, MUTEX, SHARED, OPERATOR],
        body: include_str!("lua/owned.lua"),
        flags: "'no-writes'",
    },
];

/// The library, built once.
pub(crate) static LIBRARY: LazyLock<Library> = LazyLock::new(Library::build);

impl Library {
    fn build() -> Library {
        let prelude = [GRANT, MUTEX, SHARED, OPERATOR].concat();
        // Everything that makes a function what it is, its flags too: a library that
        // differs in any of it gets another name.
        let parts: String = PARTS
            .iter()
            .map(|part| format!("{}\n{}\n{}\n", part.name, part.flags, part.body))
            .collect();
        let hash = Script::new(&format!("{prelude}{parts}"))
            .get_hash()
            .to_owned();
        let library = format!("fencelock_v{}_{}", layout::VERSION, &hash[..12]);
        let mut source = format!("#!lua name={library}\n{prelude}\n");
        let [
            acquire,
            acquire_together,
            release,
            shared_acquire,
            shared_release,
            give_back,
            raise,
            inspect,
            force_release,
            result_publish,
            result_read,
            shard_mark,
            shard_refill,
            owned,
        ] = PARTS.map(|part| {
            let function = format!("{library}_{}", part.name);
            source.push_str(&format!(
                "redis.register_function{{function_name='{function}', flags={{{}}}, \
                 callback=function(KEYS, ARGV)\n{}\nend}}\n",
                part.flags, part.body
            ));
            let eval_source = format!("{}{}", part.prelude.concat(), part.body);
            LockScript {
                function,
                eval: Script::new(&eval_source),
                eval_source,
            }
        });
        Library {
            acquire,
            acquire_together,
            release,
            shared_acquire,
            shared_release,
            give_back,
            raise,
            inspect,
            force_release,
            result_publish,
            result_read,
            shard_mark,
            shard_refill,
            owned,
            source,
        }
    }
}

/// How a backend calls the library's scripts on its server (or cluster).
#[derive(Debug)]
pub(crate) struct Caller {
    /// Until the server showed it has no Functions, or this user may not use them.
    functions: AtomicBool,
}

impl Caller {
    pub(crate) fn new() -> Caller {
        Caller {
            functions: AtomicBool::new(true),
        }
    }

    /// Runs `script` with `keys` and `args` on `connection`: `FCALL`, loading the library
    /// first where the server does not have it (a new server, a `FUNCTION FLUSH`, a failover
    /// to a replica that never had it); `EVALSHA` once the server showed it cannot.
    pub(crate) async fn call(
        &self,
        script: &LockScript,
        keys: &[String],
        args: &[&str],
        connection: &mut impl ConnectionLike,
    ) -> RedisResult<Value> {
        if self.functions.load(Ordering::Relaxed) {
            let mut fcall = redis::cmd("FCALL");
            fcall
                .arg(&script.function)
                .arg(keys.len())
                .arg(keys)
                .arg(args);
            match self.fcall(&fcall, connection).await {
                Err(error) if functions_refused(&error) => {
                    self.functions.store(false, Ordering::Relaxed);
                }
                // A server out of memory refuses a function that may write, and the
                // library's load, before they run. As `EVALSHA` the call runs until one of
                // its writes is refused: an acquire still learns the key is held, and a
                // release of a server that lost the library still deletes the key.
                Err(error) if error.code() == Some("OOM") => {}
                replied => return replied,
            }
        }
        let mut invocation = script.eval.prepare_invoke();
        for key in keys {
            invocation.key(key);
        }
        for arg in args {
            invocation.arg(*arg);
        }
        // Sends EVALSHA and, on NOSCRIPT, loads the script and sends it again.
        invocation.invoke_async(connection).await
    }

    /// Sends the function call `fcall`, loading the library first where the server does not
    /// have it.
    async fn fcall(&self, fcall: &Cmd, connection: &mut impl ConnectionLike) -> RedisResult<Value> {
        match send(fcall, connection).await {
            Err(error) if function_missing(&error) => {
                load(connection).await?;
                send(fcall, connection).await
            }
            replied => replied,
        }
    }
}

/// The reply to `command`, an error reply as an error.
async fn send(command: &Cmd, connection: &mut impl ConnectionLike) -> RedisResult<Value> {
    match connection.req_packed_command(command).await? {
        Value::ServerError(error) => Err(error.into()),
        reply => Ok(reply),
    }
}

/// Loads the library (on a cluster, on every master). A server that has it already (another
/// client loaded it meanwhile) is fine.
async fn load(connection: &mut impl ConnectionLike) -> RedisResult<()> {
    let mut load = redis::cmd("FUNCTION");
    load.arg("LOAD").arg(&LIBRARY.source);
    match send(&load, connection).await {
        Err(error) if error.detail().is_some_and(|d| d.contains("already exists")) => Ok(()),
        loaded => loaded.map(drop),
    }
}

/// The server has Functions, but not this library's function.
fn function_missing(error: &RedisError) -> bool {
    error
        .detail()
        .is_some_and(|d| d.starts_with("Function not found"))
}

/// The server has no Functions (Redis before 7: an unknown command), or this user may not
/// call or load them.
fn functions_refused(error: &RedisError) -> bool {
    error.kind() == ErrorKind::Server(ServerErrorKind::NoPerm)
        || error
            .detail()
            .is_some_and(|d| d.starts_with("unknown command"))
}

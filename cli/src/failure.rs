//! How the command fails: one line on stderr, `fencelock: <what failed>: <cause chain>`.

use std::error::Error;

/// What failed, and why (the error with each of its sources).
#[derive(Debug)]
pub struct Failure {
    what: String,
    cause: String,
}

impl Failure {
    /// `what` failed with `error`.
    pub fn new(what: impl Into<String>, error: impl Error) -> Failure {
        let mut cause = error.to_string();
        let mut source = error.source();
        while let Some(next) = source {
            cause.push_str(": ");
            cause.push_str(&next.to_string());
            source = next.source();
        }
        Failure::message(what, cause)
    }

    /// `what` failed, for the reason `cause`.
    pub fn message(what: impl Into<String>, cause: impl Into<String>) -> Failure {
        Failure {
            what: what.into(),
            cause: cause.into(),
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // One line whatever the causes hold.
        let line = format!("{}: {}", self.what, self.cause);
        f.write_str(&line.split_whitespace().collect::<Vec<_>>().join(" "))
    }
}

//! How the command fails: one line on stderr, `fencelock: <what failed>: <cause chain>`; or,
//! when whoever read its output went away (`fencelock watch k | head -1`), quietly.

use std::error::Error;

use fencelock::WithSources;

/// What failed, and why (the error with each of its sources, each once).
#[derive(Debug)]
pub enum Failure {
    /// A failure to report.
    Said { what: String, cause: String },
    /// Standard output was closed by its reader: nothing more to say, nothing to report.
    OutputClosed,
}

impl Failure {
    /// `what` failed with `error`.
    pub fn new(what: impl Into<String>, error: impl Error + 'static) -> Failure {
        Failure::message(what, WithSources(&error).to_string())
    }

    /// `what` failed, for the reason `cause`.
    pub fn message(what: impl Into<String>, cause: impl Into<String>) -> Failure {
        Failure::Said {
            what: what.into(),
            cause: cause.into(),
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Said { what, cause } => {
                // One line whatever the causes hold.
                let line = format!("{what}: {cause}");
                f.write_str(&line.split_whitespace().collect::<Vec<_>>().join(" "))
            }
            Failure::OutputClosed => f.write_str("standard output was closed"),
        }
    }
}

/// Writes `text` to standard output (a line of it: a newline is added).
pub fn print(text: &str) -> Result<(), Failure> {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    let written = writeln!(stdout, "{}", text.trim_end_matches('\n')).and_then(|()| stdout.flush());
    written.map_err(|error| match error.kind() {
        std::io::ErrorKind::BrokenPipe => Failure::OutputClosed,
        _ => Failure::new("writing the output failed", error),
    })
}

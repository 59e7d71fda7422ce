//! How a command ends: its output and exit status, or a one-line failure (exit 2). Every
//! command module returns these; `main` prints them.

use std::fmt;
use std::process::ExitCode;

/// What a command printed and how it ends.
pub(crate) struct Outcome {
    pub stdout: String,
    /// Notes for the reader that are not part of the output (what an export cannot express).
    pub stderr: String,
    pub code: ExitCode,
}

impl Outcome {
    pub(crate) fn ok(stdout: String) -> Outcome {
        Outcome { stdout, stderr: String::new(), code: ExitCode::SUCCESS }
    }
}

/// A one-line error for standard error; the process exits with 2.
#[derive(Debug)]
pub(crate) struct Failure(pub String);

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl<E: std::error::Error> From<E> for Failure {
    fn from(error: E) -> Failure {
        Failure(error.to_string())
    }
}

//! The guard between the agent and an engine.
//!
//! The agent starts each engine's process group with the guard as its leader; the guard
//! starts the engine in that group and then watches two things: the engine (its exit is the
//! guard's, `128 + signal` when a signal ended it) and its own parent. When the parent
//! changes, the agent is gone — killed outright, with no chance to stop anything — and the
//! guard kills the whole group, itself included. Linux's parent-death signal would do this
//! without a process in between, but only from code run between fork and exec, which needs
//! `unsafe`; polling the parent costs a wake-up every [`POLL`].

use std::ffi::OsStr;
use std::process::{Command, ExitCode};
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::{Pid, getpgrp};

/// How often the guard looks at the engine and at its parent.
pub const POLL: Duration = Duration::from_millis(100);

/// Runs `program` with `args` in the guard's process group until it exits, or until the
/// guard's parent is no longer `parent` (then the group is killed). The agent passes its own
/// id: a parent that died before the guard first looked would otherwise go unnoticed.
pub fn run(parent: u32, program: &OsStr, args: impl Iterator<Item = std::ffi::OsString>) -> ExitCode {
    if std::os::unix::process::parent_id() != parent {
        kill_group(getpgrp());
    }
    let mut child = match Command::new(program).args(args).spawn() {
        Ok(child) => child,
        Err(e) => {
            report(&format!("cannot start {}: {e}", program.to_string_lossy()));
            // As a shell says a command was not found or could not run.
            return ExitCode::from(if e.kind() == std::io::ErrorKind::NotFound { 127 } else { 126 });
        }
    };
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return ExitCode::from(exit_code(status)),
            Ok(None) => {}
            Err(e) => report(&format!("cannot wait for the engine: {e}")),
        }
        if std::os::unix::process::parent_id() != parent {
            kill_group(getpgrp());
        }
        std::thread::sleep(POLL);
    }
}

/// The code a shell would give: the exit status, or 128 + the signal that ended it.
fn exit_code(status: std::process::ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code & 0xff).unwrap_or(1),
        (None, Some(signal)) => u8::try_from(128 + (signal & 0x7f)).unwrap_or(1),
        (None, None) => 1,
    }
}

/// Kills every process of `group`, the caller too when it is in it.
fn kill_group(group: Pid) {
    // `killpg` of 1 is every process.
    if group.as_raw() > 1 {
        let _ = killpg(group, Signal::SIGKILL);
    }
}

#[allow(clippy::print_stderr)]
fn report(message: &str) {
    eprintln!("stageplan-guard: {message}");
}

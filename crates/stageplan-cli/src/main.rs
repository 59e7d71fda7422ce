//! `stageplan`: plan a model across machines from the command line.
//!
//! Exit status: 0 when the plan fits, 1 when nothing fits (the plan says what is missing),
//! 2 for bad input (a one-line error naming the field and the fix).
//!
//! The split is uv's and ripgrep's: arguments are declared in one place, each command is one
//! body that computes values, and the renderer alone turns values into text.
//!
//! - `cli`: the clap definitions, whose doc comments are `--help`; defaults stated once.
//! - `commands`: `run` dispatches; one module per command body (`plan`, `deploy`, …).
//! - `render`: every table and text block, one file per kind of output; no I/O.
//! - `cluster`: what `status` and `nodes list` show, computed from a store snapshot.
//! - `store`: opening `--store` (checked, read-only where asked, patient with a busy file).
//! - `observe`: the loop's measurements (`--metrics`, `--prometheus`), failing soft.
//! - `load`: scenarios checked into problems, model files read by their headers.
//! - `input`: files from the command line opened safely and read bounded.
//! - `outcome`: what a command prints and its exit status, or a one-line failure.

#![allow(clippy::print_stdout, clippy::print_stderr)]

mod cli;
mod cluster;
mod commands;
mod input;
mod load;
mod observe;
mod outcome;
mod render;
mod store;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    match commands::run(cli) {
        Ok(outcome) => {
            // Names from the input reach these lines: no terminal control gets through.
            print!("{}", stageplan::quote::terminal(&outcome.stdout));
            eprint!("{}", stageplan::quote::terminal(&outcome.stderr));
            outcome.code
        }
        Err(error) => {
            eprintln!("error: {}", stageplan::quote::line(&error.to_string()));
            ExitCode::from(2)
        }
    }
}

//! `stageplan`: plan a model across machines from the command line.
//!
//! Exit status: 0 when the plan fits, 1 when nothing fits (the plan says what is missing),
//! 2 for bad input (a one-line error naming the field and the fix).

#![allow(clippy::print_stdout, clippy::print_stderr)]

mod cluster;
mod commands;
mod gpu;
mod input;
mod load;
mod observe;
mod outcome;
mod render;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = commands::Cli::parse();
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

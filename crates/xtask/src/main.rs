//! Project automation, run as `cargo xtask <task>`.
//!
//! - `cargo xtask test`: installs what the tests need (skipping what is already there), then
//!   runs every test: formatting, lints, unit and property tests, import tests against the
//!   reference writers, the CLI fixtures, the core built for `wasm32-unknown-unknown`, the
//!   web planner and the embed widget in headless Chromium, the JS API on Node, and each
//!   fuzz target for a bounded time.
//! - `cargo xtask checks`: only the repository-wide checks (no module circles, no file over
//!   900 lines, no constant defined twice) that `test` runs after formatting.
//! - `cargo xtask fuzz [SECONDS]`: only the fuzz targets, each for SECONDS (default 60).
//! - `cargo xtask cpu-check`: only the check of a probed CPU's plans against llama-bench on
//!   this machine (a step of `test`); prints the table BENCHMARKS.md quotes.
//! - `cargo xtask serve-check`: a real llama-server on this machine's CPU under 1, 2, 4 and
//!   8 concurrent users: time to first token, time per output token and aggregate tok/s
//!   (issue #47's ground truth; a measurement, not a step of `test`).
//! - `cargo xtask gpu`: on a machine with a GPU, in one run: build, check the kernels on
//!   every adapter, probe them, time the kernels against the CPU, and run a plan sharded
//!   across the local devices with predicted against measured stage times.
//! - `cargo xtask serve`: builds the web planner and serves it on 127.0.0.1, printing its URL.
//! - `cargo xtask web`: builds the web planner into `dist/` (what `serve` serves), for the
//!   browser tests run alone.
//! - `cargo xtask embed`: builds the JS package and `<stage-plan>` widget into `dist/embed/`.
//! - `cargo xtask plan [SCENARIO]`: plans a scenario with the CLI (the example by default).
//! - `cargo xtask bench`: the criterion benchmarks, then plan quality — the `optimal`
//!   policy beside the baselines — for every scenario under `tests/scenarios/`, as the
//!   Markdown tables `BENCHMARKS.md` quotes.
//!
//! Every step prints its command and how long it took, so a slow or failing step is easy
//! to find in a CI log.

#![allow(clippy::print_stdout, clippy::print_stderr)]

mod artifacts;
mod bench;
mod calibrate;
mod checks;
mod cpu_check;
mod parts;
mod serve_check;
mod setup;
mod split;
mod test;
mod web;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

use bench::{bench, plan, quality};
use setup::{setup, web_tools};
use test::{fuzz, gpu, test};
use web::{build_embed, build_web, serve};

const WASM_TARGET: &str = "wasm32-unknown-unknown";

const EXAMPLE: &str = "tests/scenarios/home-70b.json";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("test") => test(),
        Some("checks") => checks::checks(),
        Some("serve") => serve(args.get(1).and_then(|p| p.parse().ok()).unwrap_or(8080)),
        Some("plan") => plan(args.get(1).map_or(EXAMPLE, String::as_str)),
        Some("bench") => bench(),
        Some("calibrate") => calibrate::calibrate(&root()),
        Some("quality") => quality().map(|table| println!("{table}")),
        Some("gpu") => gpu(),
        Some("cpu-check") => test::cpu_check_alone(),
        Some("serve-check") => test::serve_check_alone(),
        Some("web") => web_tools().and_then(|()| build_web()).map(|out| println!("web planner: {}", out.display())),
        Some("embed") => {
            web_tools().and_then(|()| build_embed()).map(|out| println!("embed package: {}", out.display()))
        }
        Some("fuzz") => {
            let seconds = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(60);
            setup().and_then(|python| fuzz(&python, seconds))
        }
        _ => {
            eprintln!(
                "usage: cargo xtask test | checks | serve [PORT] | plan [SCENARIO] | bench | quality | calibrate | cpu-check | serve-check | fuzz [SECONDS] | gpu | web | embed"
            );
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("xtask: {message}");
            ExitCode::FAILURE
        }
    }
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn cargo() -> Command {
    let mut command = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    command.current_dir(root());
    command
}

/// Runs a command, echoing it and its duration; fails on a non-zero exit.
fn step(title: &str, mut command: Command) -> Result<(), String> {
    println!("==> {title}: {}", describe(&command));
    let started = Instant::now();
    let status = command.status().map_err(|e| format!("{title}: cannot start: {e}"))?;
    println!("    {title}: {:.1} s", started.elapsed().as_secs_f64());
    if status.success() { Ok(()) } else { Err(format!("{title} failed ({status})")) }
}

fn describe(command: &Command) -> String {
    let mut words = vec![command.get_program().to_string_lossy().into_owned()];
    words.extend(command.get_args().map(|a| a.to_string_lossy().into_owned()));
    words.join(" ")
}

fn output(program: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(program).args(args).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Where installed tools live between runs: outside the clone.
fn cache() -> PathBuf {
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("/tmp"), PathBuf::from);
    home.join(".cache/stageplan")
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root().join("target"), PathBuf::from)
}

/// Mesa complains on every start without a runtime directory; give it one.
fn quiet_mesa(command: &mut Command) {
    if std::env::var_os("XDG_RUNTIME_DIR").is_none() {
        command.env("XDG_RUNTIME_DIR", std::env::temp_dir());
    }
}

/// What `wasm-bindgen-test-runner` needs to drive Debian's Chromium with WebGPU on.
fn browser_env(command: &mut Command) {
    command
        .env("CHROMEDRIVER", "/usr/bin/chromedriver")
        .env("WASM_BINDGEN_TEST_WEBDRIVER_JSON", root().join("webdriver.json"))
        .env("WASM_BINDGEN_TEST_TIMEOUT", "180");
}

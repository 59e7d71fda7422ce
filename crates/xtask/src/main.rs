//! Project automation, run as `cargo xtask <task>`.
//!
//! - `cargo xtask test`: installs what the tests need (skipping what is already there), then
//!   runs every test: formatting, lints, unit and property tests, the CLI fixtures, and the
//!   core built for `wasm32-unknown-unknown`.
//! - `cargo xtask plan [SCENARIO]`: plans a scenario with the CLI (the example by default).
//! - `cargo xtask bench`: the criterion benchmarks, then plan quality — the `optimal`
//!   policy beside the baselines — for every scenario under `tests/scenarios/`, as the
//!   Markdown tables `BENCHMARKS.md` quotes.
//!
//! Every step prints its command and how long it took, so a slow or failing step is easy
//! to find in a CI log.

#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

const WASM_TARGET: &str = "wasm32-unknown-unknown";
const EXAMPLE: &str = "tests/scenarios/home-70b.json";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("test") => test(),
        Some("plan") => plan(args.get(1).map_or(EXAMPLE, String::as_str)),
        Some("bench") => bench(),
        _ => {
            eprintln!("usage: cargo xtask test | cargo xtask plan [SCENARIO] | cargo xtask bench");
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

/// Installs what the tests need, once: the wasm32 target.
fn setup() -> Result<(), String> {
    let installed = output("rustup", &["target", "list", "--installed"]).unwrap_or_default();
    if !installed.lines().any(|t| t.trim() == WASM_TARGET) {
        let mut add = Command::new("rustup");
        add.args(["target", "add", WASM_TARGET]);
        step("install the wasm32 target", add)?;
    }
    Ok(())
}

fn test() -> Result<(), String> {
    let started = Instant::now();
    setup()?;
    let mut fmt = cargo();
    fmt.args(["fmt", "--all", "--check"]);
    step("formatting", fmt)?;
    let mut clippy = cargo();
    clippy.args(["clippy", "--workspace", "--all-targets", "--locked", "--", "-D", "warnings"]);
    step("lints", clippy)?;
    let mut tests = cargo();
    tests.args(["test", "--workspace", "--locked"]);
    step("unit, property and CLI tests", tests)?;
    let mut wasm = cargo();
    wasm.args(["build", "--package", "stageplan", "--target", WASM_TARGET, "--locked"]);
    step("core for wasm32", wasm)?;
    let mut example = cargo();
    example.args(["run", "--quiet", "--package", "stageplan-cli", "--locked", "--", "plan", EXAMPLE]);
    step("the README's example plan", example)?;
    println!("==> all tests passed in {:.0} s", started.elapsed().as_secs_f64());
    Ok(())
}

fn plan(scenario: &str) -> Result<(), String> {
    let mut run = cargo();
    run.args(["run", "--quiet", "--release", "--package", "stageplan-cli", "--", "plan", scenario]);
    step("plan", run)
}

fn bench() -> Result<(), String> {
    let mut criterion = cargo();
    criterion.args(["bench", "--package", "stageplan", "--bench", "planner", "--locked"]);
    step("planner benchmarks", criterion)?;
    println!("\n{}", quality()?);
    Ok(())
}

/// Tokens/s (throughput) and ms per token (latency) of every policy on every scenario.
fn quality() -> Result<String, String> {
    use stageplan::{Objective, Policy, Scenario};
    let mut files: Vec<PathBuf> = std::fs::read_dir(root().join("tests/scenarios"))
        .map_err(|e| format!("tests/scenarios: {e}"))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    let mut table = String::from(
        "| scenario | objective | optimal | memory-proportional | even | greedy | search |\n|---|---|---|---|---|---|---|\n",
    );
    for file in files {
        let text = std::fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))?;
        let name = file.file_stem().map_or_else(String::new, |s| s.to_string_lossy().into_owned());
        for objective in [Objective::Throughput, Objective::Latency] {
            let mut scenario = Scenario::from_json(&text).map_err(|e| format!("{name}: {e}"))?;
            scenario.objective = objective;
            scenario.policy = Policy::Optimal;
            let problem = scenario.problem().map_err(|e| format!("{name}: {e}"))?;
            let plan = stageplan::plan(&problem);
            let figure = |feasible: bool, tokens: f64, latency: Option<f64>| {
                if !feasible {
                    return "does not fit".to_owned();
                }
                match objective {
                    Objective::Throughput => format!("{} tok/s", stageplan::planner::sig3(tokens)),
                    Objective::Latency => latency.map_or_else(String::new, |l| format!("{:.2} ms", l * 1e3)),
                }
            };
            let baseline = |policy: Policy| {
                plan.baselines
                    .iter()
                    .find(|b| b.policy == policy)
                    .map_or_else(String::new, |b| figure(b.feasible, b.tokens_per_s, b.latency_s))
            };
            table.push_str(&format!(
                "| {name} | {} | **{}** | {} | {} | {} | {} |\n",
                objective.name(),
                figure(plan.feasible, plan.tokens_per_s, plan.latency_s),
                baseline(Policy::MemoryProportional),
                baseline(Policy::Even),
                baseline(Policy::Greedy),
                plan.search.method,
            ));
        }
    }
    Ok(table)
}

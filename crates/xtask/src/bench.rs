//! `cargo xtask plan`, `bench` and `quality`: the example plan, the benchmarks, and plan
//! quality beside the baselines for every scenario.

use std::path::PathBuf;
use std::process::Command;

use crate::{cargo, quiet_mesa, root, setup::setup, step};

pub(crate) fn plan(scenario: &str) -> Result<(), String> {
    let mut run = cargo();
    run.args(["run", "--quiet", "--release", "--package", "stageplan-cli", "--", "plan", scenario]);
    step("plan", run)
}

pub(crate) fn bench() -> Result<(), String> {
    let python = setup()?;
    let mut criterion = cargo();
    criterion.args(["bench", "--package", "stageplan", "--package", "stageplan-reconcile", "--locked"]);
    step("planner, import and reconcile benchmarks", criterion)?;
    let mut kernels = cargo();
    kernels.args(["bench", "--package", "stageplan-gpu", "--bench", "kernels", "--locked"]);
    quiet_mesa(&mut kernels);
    step("GPU kernel benchmarks against the CPU", kernels)?;
    // The baseline for header import: the reference reader on the file the import bench wrote.
    let file = std::env::temp_dir().join("stageplan-bench-llama-100.gguf");
    let mut reference = Command::new(python);
    reference.arg("-c").arg(format!(
        "import timeit; from gguf import GGUFReader; n = 3; \
         t = timeit.timeit(lambda: GGUFReader({file:?}), number=n) / n; \
         print(f'gguf.GGUFReader on the same 100-layer file: {{t * 1e3:.0f}} ms')",
        file = file.display().to_string()
    ));
    step("reference GGUF reader", reference)?;
    println!("\n{}", quality()?);
    Ok(())
}

/// Tokens/s (throughput) and ms per token (latency) of every policy on every scenario.
pub(crate) fn quality() -> Result<String, String> {
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
            let problem = stageplan::check(scenario, stageplan::check::no_model_files)
                .map_err(|e| format!("{name}: {e}"))?
                .problem;
            let plan = stageplan::plan(&problem);
            let figure = |feasible: bool, tokens: f64, latency: Option<f64>| {
                if !feasible {
                    return "does not fit".to_owned();
                }
                match objective {
                    Objective::Throughput => format!("{} tok/s", stageplan::units::sig3(tokens)),
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

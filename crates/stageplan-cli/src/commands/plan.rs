//! `stageplan plan`: a scenario planned, and with `--verify` checked against exhaustive search.

use std::path::Path;
use std::process::ExitCode;

use stageplan::{Objective, Policy, Scenario};

use crate::cli::{Format, ObjectiveArg, PolicyArg};
use crate::outcome::{Failure, Outcome};
use crate::{input, load, render};

/// Plans the scenario at `path`, its objective and policy overridden when given; exit 1 when
/// nothing fits.
pub(super) fn plan(
    path: &Path,
    format: Format,
    objective: Option<ObjectiveArg>,
    policy: Option<PolicyArg>,
    verify: bool,
) -> Result<Outcome, Failure> {
    let mut scenario = Scenario::from_json(&input::read_text(path)?)?;
    if let Some(objective) = objective {
        scenario.objective = match objective {
            ObjectiveArg::Throughput => Objective::Throughput,
            ObjectiveArg::Latency => Objective::Latency,
        };
    }
    if let Some(policy) = policy {
        scenario.policy = match policy {
            PolicyArg::Optimal => Policy::Optimal,
            PolicyArg::MemoryProportional => Policy::MemoryProportional,
            PolicyArg::Even => Policy::Even,
            PolicyArg::Greedy => Policy::Greedy,
            PolicyArg::Manual => Policy::Manual,
            PolicyArg::LayerOffload => Policy::LayerOffload,
            PolicyArg::LlamaFit => Policy::LlamaFit,
        };
    }
    let problem = load::problem(path, scenario)?;
    let plan = stageplan::plan(&problem);
    let verified = if verify {
        const LIMIT: u64 = 200_000_000;
        Some(stageplan::planner::verify(&problem, LIMIT).ok_or_else(|| {
            Failure(format!(
                "`--verify` searches at most {LIMIT} plans and this scenario has more; drop `--verify` or use fewer nodes"
            ))
        })?)
    } else {
        None
    };
    let stdout = match format {
        Format::Json => {
            let mut text = match &verified {
                None => serde_json::to_string_pretty(&plan)?,
                Some(exhaustive) => {
                    serde_json::to_string_pretty(&serde_json::json!({"plan": plan, "exhaustive": exhaustive}))?
                }
            };
            text.push('\n');
            text
        }
        Format::Table => {
            let mut text = render::plan::table(&problem, &plan);
            if let Some(exhaustive) = &verified {
                text.push_str(&render::plan::verification(&plan, exhaustive));
            }
            text
        }
    };
    let code = if plan.feasible { ExitCode::SUCCESS } else { ExitCode::from(1) };
    Ok(Outcome { stdout, stderr: String::new(), code })
}

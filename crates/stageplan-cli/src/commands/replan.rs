//! `stageplan replan`: a running plan and a changed cluster → the new plan and its moves.

use std::path::Path;
use std::process::ExitCode;

use crate::cli::Format;
use crate::outcome::{Failure, Outcome};
use crate::{input, load, render};

/// Re-plans `scenario` from the plan at `current`; exit 1 when nothing fits.
pub(super) fn replan(
    current: &Path,
    scenario: &Path,
    options: stageplan::ReplanOptions,
    format: Format,
) -> Result<Outcome, Failure> {
    let stages = stageplan::planner::replan::current_from_json(&input::read_text(current)?)
        .map_err(|e| Failure(format!("`{}`: {e}", current.display())))?;
    let problem = load::problem(scenario, input::read_text(scenario)?.as_str())?;
    let result = stageplan::replan(&problem, &stages, options)?;
    let stdout = match format {
        Format::Json => serde_json::to_string_pretty(&result)? + "\n",
        Format::Table => render::plan::replan(&problem, &result),
    };
    let code = if result.plan.feasible { ExitCode::SUCCESS } else { ExitCode::from(1) };
    Ok(Outcome { stdout, stderr: String::new(), code })
}

//! `stageplan plan`: a scenario planned, and with `--verify` checked against exhaustive search.

use std::path::Path;
use std::process::ExitCode;

use stageplan::demand::{Asked, Demand};
use stageplan::serving::{self, Targets};
use stageplan::{Objective, Policy, Scenario};

use crate::cli::{Format, ObjectiveArg, PercentileArg, PolicyArg};
use crate::outcome::{Failure, Outcome};
use crate::{input, load, render};

/// What the command line changes of a scenario: its objective and policy, the users of one
/// server (`--users`), and what they must see (`--ttft`, `--tpot`).
#[derive(Copy, Clone)]
pub(super) struct Overrides {
    pub objective: Option<ObjectiveArg>,
    pub policy: Option<PolicyArg>,
    pub users: Option<u32>,
    pub rate: Option<f64>,
    pub spread: Option<f64>,
    pub targets: Option<Targets>,
}

/// `--ttft` and `--tpot` read as times, held at `percentile` (p95 when not given); `None`
/// when neither is given.
///
/// # Errors
/// A flag's text is not a time above 0, or a percentile without a target to hold at it.
pub(super) fn targets(
    ttft: Option<&str>,
    tpot: Option<&str>,
    percentile: Option<PercentileArg>,
) -> Result<Option<Targets>, Failure> {
    if percentile.is_some() && ttft.is_none() && tpot.is_none() {
        return Err(Failure(
            "`--percentile` is what `--ttft` and `--tpot` hold at; give one of them, or leave it out".into(),
        ));
    }
    let time = |flag: &str, text: Option<&str>| -> Result<Option<f64>, Failure> {
        let Some(text) = text else { return Ok(None) };
        match stageplan::units::Seconds::parse(text) {
            Ok(time) if time.get() > 0.0 => Ok(Some(time.get())),
            Ok(_) => Err(Failure(format!("`{flag}` is 0, which no user meets; give a time above 0, like `2s`"))),
            Err(e) => Err(Failure(format!("`{flag}`: {e}"))),
        }
    };
    let (ttft_s, tpot_s) = (time("--ttft", ttft)?, time("--tpot", tpot)?);
    let percentile = match percentile {
        Some(PercentileArg::P50) => serving::Percentile::P50,
        Some(PercentileArg::P95) | None => serving::Percentile::P95,
    };
    Ok((ttft_s.is_some() || tpot_s.is_some()).then_some(Targets { ttft_s, tpot_s, percentile }))
}

/// Plans the scenario at `path`, as `overrides` change it; exit 1 when nothing fits.
pub(super) fn plan(path: &Path, format: Format, overrides: Overrides, verify: bool) -> Result<Outcome, Failure> {
    let Overrides { objective, policy, users, rate, spread, targets } = overrides;
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
    let mut problem = load::problem(path, scenario)?;
    let asked = Asked::of(Demand { users, targets, rate, spread: spread.unwrap_or(0.0) }, problem.serving);
    let demand = asked.demand;
    let Demand { users, targets, spread, .. } = demand;
    if users.is_none() && targets.is_none() && spread > 0.0 {
        return Err(Failure(
            "`--spread` draws the lengths of the requests simulated; give `--users` or a `--ttft`/`--tpot` target with it".into(),
        ));
    }
    if objective.is_some() && (users.is_some() || targets.is_some()) {
        let asked = if asked.from_scenario { "the scenario's `serving`" } else { "`--users`/`--ttft`/`--tpot`" };
        return Err(Failure(format!(
            "`--objective` does not apply to {asked}: llama-server steps every user through every stage in turn, so their split is the one with the fastest step; leave `--objective` out"
        )));
    }
    let (plan, answer) = if users.is_some() || targets.is_some() {
        let flag = asked.field("--users", "--ttft`/`--tpot");
        let answer = serving::answer(&problem, demand).map_err(|e| Failure(format!("`{flag}`: {e}")))?;
        // The plan is for the users served: a slot and its context each, the fastest step.
        problem.workload.batch = u64::from(answer.served.as_ref().map_or(users.unwrap_or(1), |s| s.users));
        problem.objective = Objective::Latency;
        (answer.plan.clone(), Some(answer))
    } else {
        (stageplan::plan(&problem), None)
    };
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
            let mut text = match (&verified, &answer) {
                (None, None) => serde_json::to_string_pretty(&plan)?,
                (None, Some(answer)) => serde_json::to_string_pretty(answer)?,
                (Some(exhaustive), answer) => {
                    let mut wrapped = match answer {
                        Some(answer) => serde_json::to_value(answer)?,
                        None => serde_json::json!({"plan": plan}),
                    };
                    wrapped["exhaustive"] = serde_json::to_value(exhaustive)?;
                    serde_json::to_string_pretty(&wrapped)?
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
            if let Some(answer) = &answer {
                text.push_str(&render::plan::answer(&problem, answer, demand));
            }
            text
        }
    };
    // What answers: a plan that fits; asked how many meet the targets, one user at least
    // (on one server or replicas); asked a count, its users on one server or spread over
    // replicas.
    let answered = match (&answer, users) {
        (None, _) => plan.feasible,
        (Some(a), None) => {
            plan.feasible && a.capacity.as_ref().is_none_or(|found| found.users != 0 || a.replicas.is_some())
        }
        (Some(a), Some(users)) => plan.feasible || a.replicas.as_ref().is_some_and(|r| r.users >= users),
    };
    let code = if answered { ExitCode::SUCCESS } else { ExitCode::from(1) };
    Ok(Outcome { stdout, stderr: String::new(), code })
}

//! `stageplan plan`: a scenario planned, and with `--verify` checked against exhaustive search.

use std::path::Path;
use std::process::ExitCode;

use stageplan::serving::{self, Load, ServingCost};
use stageplan::{Objective, Policy, Scenario};

use crate::cli::{Format, ObjectiveArg, PolicyArg};
use crate::outcome::{Failure, Outcome};
use crate::{input, load, render};

/// What the command line changes of a scenario: its objective and policy, and the users of
/// one server (`--users`).
#[derive(Copy, Clone)]
pub(super) struct Overrides {
    pub objective: Option<ObjectiveArg>,
    pub policy: Option<PolicyArg>,
    pub users: Option<u32>,
}

/// Plans the scenario at `path`, as `overrides` change it; exit 1 when nothing fits.
pub(super) fn plan(path: &Path, format: Format, overrides: Overrides, verify: bool) -> Result<Outcome, Failure> {
    let Overrides { objective, policy, users } = overrides;
    let mut scenario = Scenario::from_json(&input::read_text(path)?)?;
    if let Some(users) = users {
        if scenario.engine != stageplan::engine::Engine::LlamaCpp {
            return Err(Failure(
                "`--users` simulates llama-server's scheduler; this scenario's `engine` is another: plan it with `\"engine\": \"llama.cpp\"`".to_owned(),
            ));
        }
        // A slot and its context per user: the KV cache of every one placed.
        scenario.workload.batch = u64::from(users);
    }
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
    let served = match users {
        Some(users) if plan.feasible => {
            let cost = ServingCost::of(&problem, &plan).map_err(|e| Failure(format!("`--users`: {e}")))?;
            let load = Load {
                users,
                prompt: u32::try_from(problem.workload.prompt).unwrap_or(u32::MAX),
                response: u32::try_from(problem.workload.response).unwrap_or(u32::MAX),
                requests_per_user: serving::REQUESTS_PER_USER,
                n_batch: 2048,
                n_ubatch: 512,
            };
            Some((load, serving::simulate(load, cost).map_err(|e| Failure(format!("`--users`: {e}")))?))
        }
        _ => None,
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
            let mut text = match (&verified, &served) {
                (None, None) => serde_json::to_string_pretty(&plan)?,
                (exhaustive, served) => {
                    let mut wrapped = serde_json::json!({"plan": plan});
                    if let Some(exhaustive) = exhaustive {
                        wrapped["exhaustive"] = serde_json::to_value(exhaustive)?;
                    }
                    if let Some((load, served)) = served {
                        wrapped["served"] = serde_json::json!({
                            "users": load.users, "prompt": load.prompt, "response": load.response,
                            "requests_per_user": load.requests_per_user,
                            "ttft_s": served.ttft_s, "tpot_s": served.tpot_s,
                            "tokens_per_s": served.tokens_per_s,
                        });
                    }
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
            if let Some((load, served)) = &served {
                text.push_str(&render::plan::served(load, served));
            }
            text
        }
    };
    let code = if plan.feasible { ExitCode::SUCCESS } else { ExitCode::from(1) };
    Ok(Outcome { stdout, stderr: String::new(), code })
}

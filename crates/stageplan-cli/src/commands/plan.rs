//! `stageplan plan`: a scenario planned, and with `--verify` checked against exhaustive search.

use std::path::Path;
use std::process::ExitCode;

use stageplan::serving::{self, Capacity, Load, ServingCost, Targets};
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
    pub targets: Option<Targets>,
}

/// What the users of one llama-server saw: a count given (`--users`), with the targets it
/// was held to, or the most that meet the targets.
enum Serving {
    Users { load: Load, served: serving::Served, targets: Option<Targets> },
    Capacity { targets: Targets, found: Box<Capacity> },
}

/// `--ttft` and `--tpot` read as times, held at `percentile`; `None` when neither is given.
///
/// # Errors
/// A flag's text is not a time above 0.
pub(super) fn targets(
    ttft: Option<&str>,
    tpot: Option<&str>,
    percentile: PercentileArg,
) -> Result<Option<Targets>, Failure> {
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
        PercentileArg::P50 => serving::Percentile::P50,
        PercentileArg::P95 => serving::Percentile::P95,
    };
    Ok((ttft_s.is_some() || tpot_s.is_some()).then_some(Targets { ttft_s, tpot_s, percentile }))
}

/// Plans the scenario at `path`, as `overrides` change it; exit 1 when nothing fits.
pub(super) fn plan(path: &Path, format: Format, overrides: Overrides, verify: bool) -> Result<Outcome, Failure> {
    let Overrides { objective, policy, users, targets } = overrides;
    let mut scenario = Scenario::from_json(&input::read_text(path)?)?;
    let flag = if users.is_some() { "--users" } else { "--ttft`/`--tpot" };
    if (users.is_some() || targets.is_some()) && scenario.engine != stageplan::engine::Engine::LlamaCpp {
        return Err(Failure(format!(
            "`{flag}` simulates llama-server's scheduler; this scenario's `engine` is another: plan it with `\"engine\": \"llama.cpp\"`"
        )));
    }
    if let Some(users) = users {
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
    let mut problem = load::problem(path, scenario)?;
    let load = |users: u32| Load {
        users,
        prompt: u32::try_from(problem.workload.prompt).unwrap_or(u32::MAX),
        response: u32::try_from(problem.workload.response).unwrap_or(u32::MAX),
        requests_per_user: serving::REQUESTS_PER_USER,
        n_batch: 2048,
        n_ubatch: 512,
    };
    let failed = |e: serving::ServingError| Failure(format!("`{flag}`: {e}"));
    let (plan, serving) = match (users, targets) {
        (None, Some(targets)) => {
            let found = serving::capacity(&problem, load(1), targets).map_err(failed)?;
            // The plan shown is the one for the users found.
            problem.workload.batch = u64::from(found.load.users);
            (found.plan.clone(), Some(Serving::Capacity { targets, found: Box::new(found) }))
        }
        (users, targets) => {
            let plan = stageplan::plan(&problem);
            let serving = match users {
                Some(users) if plan.feasible => {
                    let cost = ServingCost::of(&problem, &plan).map_err(failed)?;
                    let served = serving::simulate(load(users), cost).map_err(failed)?;
                    Some(Serving::Users { load: load(users), served, targets })
                }
                _ => None,
            };
            (plan, serving)
        }
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
            let mut text = match (&verified, &serving) {
                (None, None) => serde_json::to_string_pretty(&plan)?,
                (exhaustive, served) => {
                    let mut wrapped = serde_json::json!({"plan": plan});
                    if let Some(exhaustive) = exhaustive {
                        wrapped["exhaustive"] = serde_json::to_value(exhaustive)?;
                    }
                    match served {
                        Some(Serving::Users { load, served, targets }) => {
                            wrapped["served"] = served_json(load, served);
                            if let Some(targets) = targets {
                                wrapped["targets"] = targets_json(targets);
                                wrapped["targets"]["missed"] =
                                    serde_json::json!(targets.missed(served).map(missed_json));
                            }
                        }
                        Some(Serving::Capacity { targets, found }) => {
                            wrapped["served"] = served_json(&found.load, &found.served);
                            wrapped["targets"] = targets_json(targets);
                            wrapped["capacity"] =
                                serde_json::json!({"users": found.users, "limit": limit_json(&found.limit)});
                        }
                        None => {}
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
            match &serving {
                Some(Serving::Users { load, served, targets }) => {
                    text.push_str(&render::plan::served(load, served));
                    if let Some(targets) = targets {
                        text.push_str(&render::plan::targets_held(targets, served));
                    }
                }
                Some(Serving::Capacity { targets, found }) => {
                    text.push_str(&render::plan::served(&found.load, &found.served));
                    text.push_str(&render::plan::capacity(targets, found));
                }
                None => {}
            }
            text
        }
    };
    // No user meeting the targets is, as nothing fitting, a plan that does not answer.
    let answered = !matches!(&serving, Some(Serving::Capacity { found, .. }) if found.users == 0);
    let code = if plan.feasible && answered { ExitCode::SUCCESS } else { ExitCode::from(1) };
    Ok(Outcome { stdout, stderr: String::new(), code })
}

fn served_json(load: &Load, served: &serving::Served) -> serde_json::Value {
    serde_json::json!({
        "users": load.users, "prompt": load.prompt, "response": load.response,
        "requests_per_user": load.requests_per_user,
        "ttft_s": served.ttft_s, "tpot_s": served.tpot_s,
        "tokens_per_s": served.tokens_per_s,
    })
}

fn targets_json(targets: &Targets) -> serde_json::Value {
    serde_json::json!({"percentile": targets.percentile.name(), "ttft_s": targets.ttft_s, "tpot_s": targets.tpot_s})
}

fn missed_json(missed: serving::Missed) -> serde_json::Value {
    serde_json::json!({"target": missed.target, "seen_s": missed.seen_s, "asked_s": missed.asked_s})
}

fn limit_json(limit: &serving::Limit) -> serde_json::Value {
    match limit {
        serving::Limit::Target { users, missed } => {
            serde_json::json!({"reason": "target", "users": users, "missed": missed_json(*missed)})
        }
        serving::Limit::Memory { users } => serde_json::json!({"reason": "memory", "users": users}),
        serving::Limit::Stages { users, stages } => {
            serde_json::json!({"reason": "stages", "users": users, "stages": stages})
        }
        serving::Limit::Most => serde_json::json!({"reason": "most", "users": serving::MAX_USERS}),
    }
}

//! Several users on one engine (issue #47): what each waits for its first token and between
//! tokens, found by running the engine's scheduler over the plan's step times rather than by
//! a closed formula, which would hide the tail.
//!
//! The scheduler is llama-server's (`update_slots` in `tools/server/server-context.cpp`):
//! one slot per user (`--parallel`); each step, every generating slot adds its last sampled
//! token, then pending prompts join in slot order up to `n_batch` tokens (continuous
//! batching); the step is one `llama_decode`, after which each slot whose prompt is done has
//! its first token and each generating slot one more. A request that arrives while a step
//! runs joins the next. `llama_decode` runs a step in graphs of `n_ubatch` tokens; each
//! reads the weights ([`ServingCost::step_s`], one sequence's whole step, for the first
//! token), and each further token adds its own: a decoding sequence its KV cache and its
//! products ([`ServingCost::sequence_s`], as the cost model prices a step of many: on a
//! probed CPU at about its prompt's rate, the serve check's machine taking 102.6 ms for a
//! 4-user step against 55.2 for one), a prompt token its products at the prompt's rate
//! ([`ServingCost::token_s`]).
//!
//! vLLM's scheduler is simulated as vLLM runs it (`serving/vllm.rs`): a budget of tokens a step, KV
//! blocks from a pool, the newest request preempted when they run out, and as many batches
//! in flight as the pipeline has stages.
//!
//! The load is the serve check's and most published concurrency tables': `users` each send a
//! request, read it to its end and send the next at once (a fixed concurrency, as vLLM's
//! `benchmark_serving --max-concurrency`), all starting together. Or requests arrive at a
//! rate whatever the replies (an open loop, as `--request-rate`: at random, a Poisson
//! process), `users` then the server's slots (vLLM: what it runs at once), the rest of the
//! requests waiting their turn in the server's queue.

use crate::calibration::quantile;

mod draws;
mod llama_server;
mod replicas;
mod users;
mod vllm;

pub use crate::demand::{Demand, MAX_USERS, MAX_VLLM_USERS, Percentile, Targets, most_users};
pub use replicas::{MAX_REPLICA_MACHINES, NotSplit, Replica, Replicas, not_split, replicas};
pub use users::{UsersPoint, by_users};

/// What a step of the engine costs: a whole step for its first token, then each further
/// sequence decoding and each prompt token; how the step divides among the pipeline's
/// stages, and the KV cache the split holds.
#[derive(Clone, Debug, PartialEq)]
pub struct ServingCost {
    /// One sequence's decode step (a one-user plan's `1 ÷ stream_tokens_per_s`).
    pub step_s: f64,
    /// Each further sequence a step decodes: its share of a step of many (its KV cache read
    /// and its products, as the cost model prices a step of `batch` sequences).
    pub sequence_s: f64,
    /// Each further prompt token of a step: the plan's `1 ÷ prefill_tokens_per_s`.
    pub token_s: f64,
    /// Each stage's share of a step, in pipeline order, summing to 1 (`[1.0]` for one):
    /// vLLM keeps a batch in each stage at once.
    pub stage_shares: Vec<f64>,
    /// Tokens of KV cache the split holds beside its weights for all its sequences
    /// together: vLLM's pool of blocks (llama-server sizes each slot up front).
    pub kv_tokens: u64,
}

impl ServingCost {
    /// The steps of `plan`, made for `problem`, as one server runs them: one sequence's
    /// decode step through every stage with the memory of all the problem's sequences (their
    /// KV cache placed, a step reading one at the requests' mean depth, their prompt and
    /// half their response), and the plan's prompt rate.
    ///
    /// A pipeline is one llama-server whose devices (its own and its rpc-servers') run each
    /// step's graph in turn, the activations hopping between them: a step costs the sum of
    /// its stages and hops, as the plan's `latency_s` does for one sequence. llama.cpp
    /// overlaps devices only across the micro-batches of one long prompt, and only where every
    /// device has events, which the RPC backend has not; so a prompt token costs every
    /// stage's prefill in turn too.
    ///
    /// A tensor-parallel stage (llama.cpp's `--split-mode tensor`) is one device of the
    /// step: its GPUs run each layer together, as the cost model prices its group.
    ///
    /// # Errors
    /// A plan that does not fit, or whose stages are not the problem's.
    pub fn of(problem: &crate::Problem, plan: &crate::Plan) -> Result<ServingCost, ServingError> {
        if plan.stages.is_empty() || !plan.feasible {
            return Err(ServingError::NoPlan);
        }
        let full = crate::CostModel::new(problem);
        // Each stage as the cost model knows it: a node, or a group's node past them.
        let stages: Option<Vec<crate::problem::Placement>> = plan
            .stages
            .iter()
            .map(|stage| {
                let node = match stage.nodes(problem).collect::<Vec<_>>().as_slice() {
                    [] => return None,
                    [node] => *node,
                    members => full.node_count() + full.groups().iter().position(|g| g.members == members)?,
                };
                Some(crate::problem::Placement::new(node, stage.layers[0], stage.layers[1]))
            })
            .collect();
        let Some(stages) = stages else { return Err(ServingError::NoPlan) };
        let batch = problem.workload.batch;
        // A request's steps read its prompt and half its answer's cache, on the average; the
        // stages stay placed as at the full context (what is in RAM, where).
        let depth = problem.workload.prompt.saturating_add(problem.workload.response / 2);
        let placed = stages.iter().filter_map(|&p| Some((p, full.offload(p.node, p.start, p.end)?)));
        let all = crate::CostModel::at_depth(problem, depth).with_placements(placed);
        // A step through every stage, each sending to the next and the last back to the first.
        let step = |cost: &crate::CostModel| -> f64 {
            let next = |s: usize| crate::cost::Next::of(&stages, s);
            stages.iter().enumerate().map(|(s, p)| cost.time(p.node, p.start, p.end, next(s)).total()).sum()
        };
        let step_s = step(&all.micro_batched(batch));
        let token_s: f64 = plan.stages.iter().map(|s| s.time.prefill_s).sum();
        let sequence_s = match batch {
            0 | 1 => token_s,
            _ => ((step(&all) - step_s) / (batch - 1) as f64).max(0.0),
        };
        let times: Vec<f64> = (0..stages.len())
            .map(|s| {
                all.time(stages[s].node, stages[s].start, stages[s].end, crate::cost::Next::of(&stages, s)).total()
            })
            .collect();
        let whole: f64 = times.iter().sum();
        let stage_shares =
            times.iter().map(|t| if whole > 0.0 { t / whole } else { 1.0 / times.len() as f64 }).collect();
        let kv_tokens = crate::planner::kv_tokens(&full, &stages).saturating_mul(batch.max(1));
        Ok(ServingCost { step_s, sequence_s, token_s, stage_shares, kv_tokens })
    }
}

/// Whose scheduler a load runs through, with what it is told.
#[derive(Copy, Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "server", rename_all = "kebab-case")]
#[cfg_attr(feature = "typescript", derive(ts_rs::TS))]
pub enum Scheduler {
    /// llama-server: one slot a user, up to `n_batch` tokens a step (`-b`), run in graphs of
    /// `n_ubatch` (`-ub`), each of which reads the weights.
    LlamaServer { n_batch: u32, n_ubatch: u32 },
    /// vLLM: up to `max_num_seqs` requests running (`--max-num-seqs`) and
    /// `max_num_batched_tokens` tokens a step (`--max-num-batched-tokens`), one forward pass.
    Vllm { max_num_seqs: u32, max_num_batched_tokens: u32 },
}

/// A fixed number of users, each sending requests one after another; or, at a `rate`,
/// `users × requests_per_user` requests arriving at random whatever the replies.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Load {
    pub users: u32,
    /// Prompt tokens of every request.
    pub prompt: u32,
    /// Tokens generated for every request (the first included).
    pub response: u32,
    /// Requests each user sends.
    pub requests_per_user: u32,
    pub scheduler: Scheduler,
    /// Requests a second, arriving at random (a Poisson process), `users` the server's slots;
    /// `None`: each user sends its next request when the last ends.
    pub rate: Option<f64>,
    /// How far each request's prompt and response stray from `prompt` and `response`: drawn
    /// at random within `±spread` of them (vLLM's `--random-range-ratio`); 0: exactly them.
    pub spread: f64,
}

/// Requests each user sends, one after another, in `stageplan plan --users` and the serve
/// check that holds it to a real llama-server.
pub const REQUESTS_PER_USER: u32 = 3;

impl Load {
    /// `users` users of a llama-server run with its defaults (`-b 2048 -ub 512`), each sending
    /// [`REQUESTS_PER_USER`] requests of the workload's prompt and response.
    pub fn llama_server(problem: &crate::Problem, users: u32) -> Load {
        let tokens = |n: u64| u32::try_from(n).unwrap_or(u32::MAX);
        Load {
            users,
            prompt: tokens(problem.workload.prompt),
            response: tokens(problem.workload.response),
            requests_per_user: REQUESTS_PER_USER,
            scheduler: Scheduler::LlamaServer { n_batch: 2048, n_ubatch: 512 },
            rate: None,
            spread: 0.0,
        }
    }

    /// `users` users of the engine `problem` names, run with its defaults: llama-server's
    /// ([`Load::llama_server`]), or `vllm serve`'s tokens a step for the GPU of `plan`'s
    /// first stage ([`crate::engine::vllm_max_num_batched_tokens`]) and the plan's batch as
    /// `--max-num-seqs`, as the vLLM export writes it.
    pub fn of(problem: &crate::Problem, plan: &crate::Plan, users: u32) -> Load {
        let load = Load::llama_server(problem, users);
        if problem.workload.engine != crate::engine::Engine::Vllm {
            return load;
        }
        let first = plan.stages.first().and_then(|s| s.nodes(problem).next()).map(|k| &problem.nodes[k]);
        let tokens = crate::engine::vllm_max_num_batched_tokens(
            first.map_or(0, |n| n.memory),
            first.and_then(|n| n.device.as_deref()),
        );
        let max_num_seqs = u32::try_from(plan.workload.batch.max(1)).unwrap_or(u32::MAX);
        Load { scheduler: Scheduler::Vllm { max_num_seqs, max_num_batched_tokens: tokens }, ..load }
    }
}

/// The most requests a simulation runs: `users × requests_per_user` past it is refused
/// before anything is allocated.
pub const MAX_REQUESTS: u64 = 1 << 20;

/// What the users saw, with the load that they were.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[cfg_attr(feature = "typescript", derive(ts_rs::TS))]
pub struct Served {
    pub users: u32,
    /// The server they used and its settings.
    pub scheduler: Scheduler,
    /// Prompt tokens of every request.
    pub prompt: u32,
    /// Tokens generated for every request.
    pub response: u32,
    pub requests_per_user: u32,
    /// Requests a second arriving at random, where they came at a rate.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "typescript", ts(optional))]
    pub rate: Option<f64>,
    /// How far each request's lengths strayed from `prompt` and `response` (0.5: ±50%),
    /// where they did.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "typescript", ts(optional))]
    pub spread: Option<f64>,
    /// Time to first token, sent to first token: 50th and 95th percentiles, seconds.
    pub ttft_s: [f64; 2],
    /// Time per output token after the first: 50th and 95th percentiles, seconds.
    pub tpot_s: [f64; 2],
    /// Tokens generated over the time from the first request to the last token.
    pub tokens_per_s: f64,
    /// That time, seconds.
    #[serde(skip)]
    #[cfg_attr(feature = "typescript", ts(skip))]
    pub wall_s: f64,
}

/// Why a load cannot be simulated.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ServingError {
    #[error("`{field}` is 0; give at least 1")]
    Zero { field: &'static str },
    #[error(
        "{requests} requests (users × requests per user) is past the {MAX_REQUESTS} a simulation runs; simulate fewer"
    )]
    TooMany { requests: u64 },
    #[error(
        "the step costs {step_s} s and each further prompt token {token_s} s; both must be finite and above 0, and a further sequence's cost finite"
    )]
    Cost { step_s: f64, token_s: f64 },
    #[error("nothing fits, so no users are served; see the plan's fixes")]
    NoPlan,
    #[error(
        "llama-server's and vLLM's schedulers are what is simulated; this scenario's `engine` is neither: plan it with `\"engine\": \"llama.cpp\"` or `\"vllm\"`"
    )]
    Engine,
    #[error(
        "a request holds up to {tokens} tokens of KV cache and the split holds {pool} beside its weights: shorten `workload.prompt` or `workload.response`, or give it more memory"
    )]
    Pool { tokens: u64, pool: u64 },
    #[error("no target: give a time to first token, a time per token, or both")]
    NoTarget,
    #[error("the `{field}` target must be a time from 1 µs to 1 h")]
    Target { field: &'static str },
    #[error("{rate} requests a second is not a rate requests arrive at; give a number above 0")]
    Rate { rate: f64 },
    #[error("a rate needs a count of users too, the server's slots the requests are served in")]
    RateWithoutUsers,
    #[error("a spread of {spread} is not a share of the lengths; give one from 0 up to, not including, 1")]
    Spread { spread: f64 },
    #[error("{users} users are {}", crate::demand::past_most(*engine))]
    Slots { users: u32, engine: crate::engine::Engine },
    #[error(
        "a request of a {prompt}-token prompt and a {response}-token answer does not fit a user's slot, `workload.context` = {context}: raise the context or shorten `workload.prompt` or `workload.response`"
    )]
    Request { prompt: u64, response: u64, context: u64 },
}

/// Runs `load` through its engine's scheduler with steps priced by `cost`.
///
/// # Errors
/// A zero in `load`, more than [`MAX_REQUESTS`] requests, a step that costs nothing or
/// forever, or (vLLM) a request longer than the KV pool.
pub fn simulate(load: Load, cost: &ServingCost) -> Result<Served, ServingError> {
    let scheduler = match load.scheduler {
        Scheduler::LlamaServer { n_batch, n_ubatch } => [("n_batch", n_batch), ("n_ubatch", n_ubatch)],
        Scheduler::Vllm { max_num_seqs, max_num_batched_tokens } => {
            [("max_num_seqs", max_num_seqs), ("max_num_batched_tokens", max_num_batched_tokens)]
        }
    };
    for (field, value) in [
        ("users", load.users),
        ("prompt", load.prompt),
        ("response", load.response),
        ("requests_per_user", load.requests_per_user),
    ]
    .into_iter()
    .chain(scheduler)
    {
        if value == 0 {
            return Err(ServingError::Zero { field });
        }
    }
    let requests = u64::from(load.users) * u64::from(load.requests_per_user);
    if requests > MAX_REQUESTS {
        return Err(ServingError::TooMany { requests });
    }
    let positive = |s: f64| s.is_finite() && s > 0.0;
    if let Some(rate) = load.rate.filter(|&rate| !positive(rate)) {
        return Err(ServingError::Rate { rate });
    }
    if !(0.0..1.0).contains(&load.spread) {
        return Err(ServingError::Spread { spread: load.spread });
    }
    let shares = !cost.stage_shares.is_empty()
        && cost.stage_shares.iter().all(|s| s.is_finite() && *s >= 0.0)
        && (cost.stage_shares.iter().sum::<f64>() - 1.0).abs() < 1e-6;
    if !(positive(cost.step_s)
        && positive(cost.token_s)
        && cost.sequence_s.is_finite()
        && cost.sequence_s >= 0.0
        && shares)
    {
        return Err(ServingError::Cost { step_s: cost.step_s, token_s: cost.token_s });
    }
    match load.scheduler {
        Scheduler::LlamaServer { n_batch, n_ubatch } => Ok(llama_server::steps(load, n_batch, n_ubatch, cost)),
        Scheduler::Vllm { max_num_seqs, max_num_batched_tokens } => {
            vllm::simulate(load, max_num_seqs, max_num_batched_tokens, cost)
        }
    }
}

impl Served {
    /// What `load`'s users saw: each request's time to first token and per token, the tokens
    /// generated, and the time from the first request to the last token.
    fn of(load: Load, ttft: &[f64], tpot: &[f64], tokens: u64, wall_s: f64) -> Served {
        Served {
            users: load.users,
            scheduler: load.scheduler,
            prompt: load.prompt,
            response: load.response,
            requests_per_user: load.requests_per_user,
            rate: load.rate,
            spread: (load.spread > 0.0).then_some(load.spread),
            ttft_s: [quantile(ttft, 0.5), quantile(ttft, 0.95)],
            tpot_s: [quantile(tpot, 0.5), quantile(tpot, 0.95)],
            tokens_per_s: tokens as f64 / wall_s,
            wall_s,
        }
    }
}

/// A target a load missed: which, what the users saw and what was asked.
#[derive(Copy, Clone, Debug, PartialEq, serde::Serialize)]
#[cfg_attr(feature = "typescript", derive(ts_rs::TS))]
pub struct Missed {
    /// `ttft` or `tpot`.
    pub target: &'static str,
    pub seen_s: f64,
    pub asked_s: f64,
}

impl Targets {
    /// The first target `served` misses (the first token's before the others').
    pub fn missed(&self, served: &Served) -> Option<Missed> {
        [("ttft", self.ttft_s, served.ttft_s), ("tpot", self.tpot_s, served.tpot_s)].into_iter().find_map(
            |(target, asked, seen)| {
                let (asked_s, seen_s) = (asked?, self.percentile.of(seen));
                (seen_s > asked_s).then_some(Missed { target, seen_s, asked_s })
            },
        )
    }

    pub(crate) fn check(&self) -> Result<(), ServingError> {
        if self.ttft_s.is_none() && self.tpot_s.is_none() {
            return Err(ServingError::NoTarget);
        }
        match self.out_of_range() {
            Some(field) => Err(ServingError::Target { field }),
            None => Ok(()),
        }
    }
}

/// How many users one server serves within [`Targets`], and what they see.
#[derive(Clone, Debug, PartialEq)]
pub struct Capacity {
    /// The most users that meet the targets; 0 when one user alone misses them.
    pub users: u32,
    /// The plan for `users` (for one user when none meets the targets: the nearest), its
    /// load and what its users saw.
    pub plan: crate::Plan,
    pub load: Load,
    pub served: Served,
    /// Why one more user is not served so.
    pub limit: Limit,
}

/// What stops one more user.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[serde(tag = "reason", rename_all = "lowercase")]
#[cfg_attr(feature = "typescript", derive(ts_rs::TS))]
pub enum Limit {
    /// With `users` users a target is missed.
    Target { users: u32, missed: Missed },
    /// `users` users' slots and KV cache do not fit one machine.
    Memory { users: u32 },
    /// [`most_users`] of the engine meet the targets; more are not tried.
    Most,
}

/// A count of users run: its plan, load and what they saw.
type Ran = Box<(crate::Plan, Load, Served)>;

/// One count of users tried: it met the targets, or why not.
enum Trial {
    Met(Ran),
    /// A target missed ([`Limit::Target`]), with the run that missed it.
    Missed(Limit, Ran),
    Failed(Limit),
}

/// The most users of one server that see `targets`, each sending requests as `load`
/// says (its `users` is what is searched), the plan remade for each count: a slot and its
/// context each, as `stageplan plan --users` plans them.
///
/// The search doubles the users until a count fails, then halves the gap: it takes what
/// users see to grow with their number (memory with every slot, the queue for the first
/// token, the step with every sequence), which the property test below holds against
/// trying every count.
///
/// # Errors
/// An engine other than llama.cpp, no target, a target that is not a positive time, a zero
/// in `load`, or a problem where one user's plan does not fit.
pub fn capacity(problem: &crate::Problem, load: Load, targets: Targets) -> Result<Capacity, ServingError> {
    let found = search_on(problem, None, load, targets, 1)?;
    Ok(explained(problem, None, found))
}

/// `found` with its plan explained (baselines, left-out machines, fixes) for its users, or
/// for one user when none meets the targets (the nearest).
fn explained(problem: &crate::Problem, enabled: Option<&[bool]>, found: Capacity) -> Capacity {
    let options = crate::planner::PlanOptions { enabled, ..crate::planner::PlanOptions::default() };
    let (_, plan) = plan_for(&with_batch(problem, found.users.max(1)), options);
    Capacity { plan, ..found }
}

/// Counts of users tried on one set of machines: the problem copied once (a model's tensors
/// are hundreds of allocations to copy), its batch set by each try.
struct Trials<'a> {
    batched: crate::Problem,
    options: crate::planner::PlanOptions<'a>,
    load: Load,
    targets: Targets,
}

impl<'a> Trials<'a> {
    /// Tries on the machines marked in `enabled` (one entry per problem node; `None`: all),
    /// their plans bare.
    fn new(
        problem: &crate::Problem,
        enabled: Option<&'a [bool]>,
        load: Load,
        targets: Targets,
    ) -> Result<Trials<'a>, ServingError> {
        served_engine(problem, load.spread)?;
        targets.check()?;
        let options = crate::planner::PlanOptions { enabled, bare: true, ..crate::planner::PlanOptions::default() };
        Ok(Trials { batched: with_batch(problem, 1), options, load, targets })
    }

    /// `users` planned, simulated and held to the targets.
    fn run(&mut self, users: u32) -> Result<Trial, ServingError> {
        self.batched.workload.batch = u64::from(users);
        let (problem, plan) = plan_for(&self.batched, self.options);
        if !plan.feasible {
            return Ok(Trial::Failed(Limit::Memory { users }));
        }
        let cost = ServingCost::of(&problem, &plan)?;
        let load = Load { users, scheduler: Load::of(&problem, &plan, users).scheduler, ..self.load };
        let served = simulate(load, &cost)?;
        Ok(match self.targets.missed(&served) {
            None => Trial::Met(Box::new((plan, load, served))),
            Some(missed) => Trial::Missed(Limit::Target { users, missed }, Box::new((plan, load, served))),
        })
    }
}

/// [`capacity`]'s search on the machines marked in `enabled` (one entry per problem node;
/// `None`: all), its plan bare: [`replicas`] search every set of machines and explain only
/// the sets they choose. It starts at `from` users, a count fewer of these machines met
/// (1 when none is known): met, the search goes up from there; else it starts again at one.
fn search_on(
    problem: &crate::Problem,
    enabled: Option<&[bool]>,
    load: Load,
    targets: Targets,
    from: u32,
) -> Result<Capacity, ServingError> {
    let mut trials = Trials::new(problem, enabled, load, targets)?;
    let mut trial = |users: u32| trials.run(users);
    let most = most_users(problem.workload.engine);
    // A count fewer machines met, when these meet it too.
    let started = match from.min(most) {
        0 | 1 => None,
        from => match trial(from)? {
            Trial::Met(ran) => Some((from, ran)),
            Trial::Missed(..) | Trial::Failed(_) => None,
        },
    };
    let mut met = match started {
        Some(met) => met,
        None => match trial(1)? {
            Trial::Met(ran) => (1, ran),
            Trial::Failed(_) => return Err(ServingError::NoPlan),
            Trial::Missed(limit, ran) => {
                // None meets them: the nearest is one user.
                let (plan, load, served) = *ran;
                return Ok(Capacity { users: 0, plan, load, served, limit });
            }
        },
    };
    // Up by a step that doubles until a count fails (or the most is met), then halve the
    // gap. From one user the counts tried double: 2, 4, 8.
    let mut failed = None;
    let mut step = 1u32;
    while failed.is_none() && met.0 < most {
        let next = met.0.saturating_add(step).min(most);
        step = step.saturating_mul(2);
        match trial(next)? {
            Trial::Met(ran) => met = (next, ran),
            Trial::Missed(limit, _) | Trial::Failed(limit) => failed = Some((next, limit)),
        }
    }
    while let Some(hi) = failed.as_ref().map(|(hi, _)| *hi).filter(|hi| hi - met.0 > 1) {
        let mid = met.0 + (hi - met.0) / 2;
        match trial(mid)? {
            Trial::Met(ran) => met = (mid, ran),
            Trial::Missed(limit, _) | Trial::Failed(limit) => failed = Some((mid, limit)),
        }
    }
    let (users, ran) = met;
    let (plan, load, served) = *ran;
    Ok(Capacity { users, plan, load, served, limit: failed.map_or(Limit::Most, |(_, limit)| limit) })
}

/// What `stageplan plan --users`/`--ttft`/`--tpot` and the JS API's `serve` answer: the plan,
/// what its users saw, the targets held and, without a count of users, how many meet them.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[cfg_attr(feature = "typescript", derive(ts_rs::TS))]
pub struct Answer {
    /// For the users of `served` (a count given that does not fit: for those, infeasible).
    pub plan: crate::Plan,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "typescript", ts(optional))]
    pub served: Option<Served>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "typescript", ts(optional))]
    pub targets: Option<TargetsHeld>,
    /// How many meet the targets on one server: without a count of users, or with one
    /// that one server misses where its machines could be split.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "typescript", ts(optional))]
    pub capacity: Option<Found>,
    /// The machines split into replicas, where that serves more users within the targets
    /// than one server over all of them: without a count of users, each at what it
    /// serves; with one that one server misses, the users spread over the split (each
    /// replica's share in proportion to what it serves), where it serves them all.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "typescript", ts(optional))]
    pub replicas: Option<Replicas>,
}

/// The targets asked, and the one the served users missed.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[cfg_attr(feature = "typescript", derive(ts_rs::TS))]
pub struct TargetsHeld {
    pub percentile: Percentile,
    pub ttft_s: Option<f64>,
    pub tpot_s: Option<f64>,
    pub missed: Option<Missed>,
}

/// The most users that meet the targets, and what stops one more.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[cfg_attr(feature = "typescript", derive(ts_rs::TS))]
pub struct Found {
    pub users: u32,
    pub limit: Limit,
}

/// `users` users of one server planned and simulated (their targets checked), at a `rate`
/// if the demand gives one, or without `users` the most that meet `targets` ([`capacity`]).
///
/// # Errors
/// An engine other than llama.cpp or vLLM; neither `users` nor a target; a rate without
/// users; as [`capacity`] and [`simulate`] do otherwise.
pub fn answer(problem: &crate::Problem, demand: Demand) -> Result<Answer, ServingError> {
    let Demand { users, targets, rate, spread } = demand;
    served_engine(problem, spread)?;
    let one_user = Load { spread, ..Load::llama_server(problem, 1) };
    let held = |served: &Served| {
        targets.map(|t| TargetsHeld {
            percentile: t.percentile,
            ttft_s: t.ttft_s,
            tpot_s: t.tpot_s,
            missed: t.missed(served),
        })
    };
    let Some(users) = users else {
        if rate.is_some() {
            return Err(ServingError::RateWithoutUsers);
        }
        let (load, targets) = (one_user, targets.ok_or(ServingError::NoTarget)?);
        let found = capacity(problem, load, targets)?;
        return Ok(Answer {
            targets: held(&found.served),
            replicas: replicas(problem, load, targets, found.users)?,
            capacity: Some(Found { users: found.users, limit: found.limit }),
            plan: found.plan,
            served: Some(found.served),
        });
    };
    if users == 0 {
        return Err(ServingError::Zero { field: "users" });
    }
    let engine = problem.workload.engine;
    if users > most_users(engine) {
        return Err(ServingError::Slots { users, engine });
    }
    if let Some(targets) = targets {
        targets.check()?;
    }
    let (plan, served) = served_by(problem, users, Traffic { rate, spread }, None)?;
    let mut answer = Answer { targets: served.as_ref().and_then(held), plan, served, capacity: None, replicas: None };
    // Missed on one server (or its slots do not fit): spread over replicas where a split
    // of the machines serves them all. (Requests at a rate come to the one server asked.)
    let missed = answer.served.is_none() || answer.targets.as_ref().is_some_and(|t| t.missed.is_some());
    if let Some(targets) = targets.filter(|_| missed && rate.is_none() && not_split(problem).is_none()) {
        let load = one_user;
        let one_server = match capacity(problem, load, targets) {
            Ok(found) => Found { users: found.users, limit: found.limit },
            Err(ServingError::NoPlan) => Found { users: 0, limit: Limit::Memory { users: 1 } },
            Err(e) => return Err(e),
        };
        answer.replicas = replicas::spread(problem, load, targets, users, one_server.users)?;
        answer.capacity = Some(one_server);
    }
    Ok(answer)
}

/// Requests simulated at a rate: at least this many, for percentiles that mean something,
/// or [`REQUESTS_PER_USER`] a slot where that is more.
pub const RATE_REQUESTS: u32 = 100;

/// How requests come besides their number: at a rate or one after another, and how far
/// their lengths stray ([`Load::rate`], [`Load::spread`]).
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub struct Traffic {
    pub rate: Option<f64>,
    pub spread: f64,
}

/// A server as it was run and what its users sent: a published measurement's settings.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct AsRun {
    pub scheduler: Scheduler,
    pub requests_per_user: u32,
}

/// `users` users of one server of `problem`'s engine, its plan made as `stageplan plan
/// --users` makes it, each user sending the workload's requests one after another (or, at
/// a `rate`, [`RATE_REQUESTS`] arriving at random into `users` slots): as the export starts
/// the server and [`REQUESTS_PER_USER`] each when `as_run` is `None`. What
/// they saw, `None` when the plan does not fit.
///
/// # Errors
/// An engine neither llama.cpp nor vLLM, a request past the context, and as [`simulate`].
pub fn served_by(
    problem: &crate::Problem,
    users: u32,
    traffic: Traffic,
    as_run: Option<AsRun>,
) -> Result<(crate::Plan, Option<Served>), ServingError> {
    let Traffic { rate, spread } = traffic;
    served_engine(problem, spread)?;
    let (batched, plan) = plan_for(&with_batch(problem, users), crate::planner::PlanOptions::default());
    if !plan.feasible {
        return Ok((plan, None));
    }
    let mut load = Load { spread, ..Load::of(&batched, &plan, users) };
    if rate.is_some() {
        let requests_per_user = RATE_REQUESTS.div_ceil(users.max(1)).max(REQUESTS_PER_USER);
        load = Load { rate, requests_per_user, ..load };
    }
    if let Some(AsRun { scheduler, requests_per_user }) = as_run {
        load = Load { scheduler, requests_per_user, ..load };
    }
    let served = simulate(load, &ServingCost::of(&batched, &plan)?)?;
    Ok((plan, Some(served)))
}

/// Whether `problem` runs on llama.cpp or vLLM, whose schedulers are the ones simulated,
/// with requests that fit a user's context: llama-server gives each of `--parallel` slots
/// its share of `--ctx-size`, the workload's context, and a request past it is cut short;
/// vLLM refuses one past `--max-model-len`, the same context.
fn served_engine(problem: &crate::Problem, spread: f64) -> Result<(), ServingError> {
    use crate::engine::Engine;
    if !matches!(problem.workload.engine, Engine::LlamaCpp | Engine::Vllm) {
        return Err(ServingError::Engine);
    }
    if !(0.0..1.0).contains(&spread) {
        return Err(ServingError::Spread { spread });
    }
    let crate::problem::Workload { prompt, response, context, .. } = problem.workload;
    // The longest request drawn must fit too.
    let (prompt, response) = draws::longest(prompt, response, spread);
    if prompt.saturating_add(response) > context {
        return Err(ServingError::Request { prompt, response, context });
    }
    Ok(())
}

/// `problem` planned for `users` sequences as llama-server runs them: a slot and its context
/// each, and the split that makes a step of all of them fastest (the latency objective, the
/// least sum of stage times at that batch: a step runs every sequence through every device
/// in turn, [`ServingCost::of`]). The throughput objective would pick a split for
/// micro-batches in flight at once, which llama-server's decode does not run.
fn with_batch(problem: &crate::Problem, users: u32) -> crate::Problem {
    let mut problem = problem.clone();
    problem.workload.batch = u64::from(users);
    problem.objective = crate::Objective::Latency;
    problem
}

/// The plan `problem` (made by [`with_batch`]) is served on, and the problem it was made
/// for. llama-server's slots each hold the context, so its split holds them all.
///
/// vLLM pages its cache: a request holds blocks for its own tokens, and vLLM's one check at
/// start is that a request of `--max-model-len` fits. So its split is planned for the
/// requests it runs at once, each sequence's context their tokens (prompt and response) or
/// its share of the context asked, whichever is more (the export's `--max-model-len`): the
/// users' requests, up to vLLM's own `--max-num-seqs` for the GPU that leads the split
/// ([`crate::engine::vllm_max_num_seqs`]); where they do not fit, as many as do. The export
/// writes that count as `--max-num-seqs`; the rest wait their turn in vLLM's queue.
fn plan_for(problem: &crate::Problem, options: crate::planner::PlanOptions) -> (crate::Problem, crate::Plan) {
    if problem.workload.engine != crate::engine::Engine::Vllm {
        return (problem.clone(), crate::plan_with(problem, options));
    }
    // vLLM's larger default first; the GPU that leads the split may take the smaller.
    let most = u64::from(crate::engine::vllm_max_num_seqs(u64::MAX, None));
    let (paged, plan) = paged_for(problem, options, problem.workload.batch.clamp(1, most));
    let lead = plan.stages.first().and_then(|s| s.nodes(&paged).next()).map(|k| &paged.nodes[k]);
    let running = lead.map(|n| u64::from(crate::engine::vllm_max_num_seqs(n.memory, n.device.as_deref())));
    match running {
        Some(running) if plan.feasible && running < paged.workload.batch => paged_for(problem, options, running),
        _ => (paged, plan),
    }
}

/// vLLM's split for `users` requests at once ([`plan_for`]), or for as many as fit.
fn paged_for(
    problem: &crate::Problem,
    options: crate::planner::PlanOptions,
    users: u64,
) -> (crate::Problem, crate::Plan) {
    let workload = &problem.workload;
    let at = |batch: u64| {
        let mut paged = problem.clone();
        let request = workload.prompt.saturating_add(workload.response);
        paged.workload.batch = batch;
        paged.workload.context = request.max(workload.context.div_ceil(batch)).min(workload.context);
        let plan = crate::plan_with(&paged, options);
        (paged, plan)
    };
    let all = at(users);
    if all.1.feasible || users == 1 {
        return all;
    }
    // The most sequences at once that fit (one always, when any plan does).
    let (mut fits, mut lo, mut hi) = (at(1), 1, users);
    if !fits.1.feasible {
        return all;
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        let tried = at(mid);
        if tried.1.feasible {
            (fits, lo) = (tried, mid);
        } else {
            hi = mid;
        }
    }
    fits
}

#[cfg(test)]
mod tests;

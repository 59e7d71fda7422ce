//! Planning: turn a checked scenario into a [`Plan`] under its policy, with the other
//! policies beside it, the nodes left out and why, and fixes when nothing fits.
//!
//! Every policy produces an assignment (a [`Placement`] per stage); one evaluator turns
//! any assignment into a plan through the [`CostModel`], so optimal, baseline, manual and
//! exhaustive plans are measured with the same ruler.

mod baselines;
pub mod exhaustive;
mod fixes;
pub mod replan;
mod riders;
mod search;
mod shared_ram;

use crate::cost::{CostModel, RamShare, Schedule};
use crate::plan::{
    Accuracy, AtDepth, Baseline, BaselineStage, Bound, Change, Diagnostic, LeftOut, Level, MemoryBreakdown,
    PipelineFull, Plan, PlannedModel, PlannedWorkload, Search, Stage, StageOffload, TimeBreakdown,
};
use crate::problem::{Placement, Problem};
use crate::scenario::{Objective, Policy};
use crate::units::{format_bandwidth, format_bytes, format_compute, format_flops, format_seconds, group_digits, sig3};

/// Plans `problem` under its own policy and objective.
///
/// Never fails: a cluster that cannot hold the model gets a plan with `feasible: false`,
/// no stages, and diagnostics that say how much is missing and what would fix it.
///
/// # Examples
/// ```
/// let checked = stageplan::check(r#"{
///     "model": {"preset": "llama-3.1-8b", "weights": "q4_k_m"},
///     "nodes": [{"name": "desk", "device": "rtx-4090"}, {"name": "laptop", "device": "m1-16gb"}]
/// }"#, stageplan::check::no_model_files).unwrap();
/// let plan = stageplan::plan(&checked.problem);
/// assert!(plan.feasible);
/// assert_eq!(plan.stages[0].layers, [0, 32]); // all on the 4090: the laptop would slow it down
/// ```
pub fn plan(problem: &Problem) -> Plan {
    plan_with(problem, PlanOptions::default())
}

/// What to plan beyond the problem as written. The default: every machine, the problem's
/// own policy, explained (baselines, left-out machines, fixes).
#[derive(Copy, Clone, Debug, Default)]
pub struct PlanOptions<'a> {
    /// The machines that may be used, one entry per problem node (what-if: a machine
    /// switched off); `None`: all. An entry past the problem's nodes is ignored, a missing
    /// one is off.
    pub enabled: Option<&'a [bool]>,
    /// The split to make instead of the problem's policy (the page's memory-proportional
    /// split that shows how far over each machine is when nothing fits).
    pub policy: Option<Policy>,
    /// The plan alone, without baselines, left-out explanations or fixes: for callers that
    /// re-plan often and show only the split (sweeps, re-planning, the search's benchmarks).
    pub bare: bool,
    /// A machine the optimal search must use (what rides along is tried on each machine as
    /// that much less memory there, so the plan must hold a stage there); `None`: any.
    pub(crate) required: Option<usize>,
}

impl<'a> PlanOptions<'a> {
    /// The plan alone (see [`PlanOptions::bare`]).
    pub fn bare() -> PlanOptions<'a> {
        PlanOptions { bare: true, ..PlanOptions::default() }
    }

    /// Only the machines marked in `enabled`.
    #[must_use]
    pub fn enabled(self, enabled: &'a [bool]) -> PlanOptions<'a> {
        PlanOptions { enabled: Some(enabled), ..self }
    }

    /// Under `policy` instead of the problem's.
    #[must_use]
    pub fn policy(self, policy: Policy) -> PlanOptions<'a> {
        PlanOptions { policy: Some(policy), ..self }
    }
}

/// Plans `problem` with `options`: the one planner entry besides [`plan`], which is this
/// with the defaults.
///
/// # Examples
/// ```
/// use stageplan::planner::PlanOptions;
/// let checked = stageplan::check(r#"{
///     "model": {"preset": "llama-3.1-8b", "weights": "q4_k_m"},
///     "nodes": [{"name": "desk", "device": "rtx-4090"}, {"name": "laptop", "device": "m1-16gb"}]
/// }"#, stageplan::check::no_model_files).unwrap();
/// let without_desk = stageplan::plan_with(&checked.problem, PlanOptions::bare().enabled(&[false, true]));
/// assert_eq!(without_desk.stages[0].node, "laptop");
/// ```
pub fn plan_with(problem: &Problem, options: PlanOptions<'_>) -> Plan {
    if !problem.riders.is_empty() {
        return riders::plan(problem, options);
    }
    let allowed: Vec<bool> = (0..problem.nodes.len())
        .map(|i| options.enabled.is_none_or(|enabled| enabled.get(i).copied().unwrap_or(false)))
        .collect();
    let policy = options.policy.unwrap_or(problem.policy);
    if RamShare::candidates(problem).len() == 1 {
        let cost = CostModel::new(problem);
        return plan_on(problem, &cost, &allowed, policy, problem.objective, !options.bare, options.required);
    }
    let (choice, cost) = shared_ram::best_share(problem, &allowed, policy, problem.objective, options.required);
    report(problem, &cost, choice, &allowed, policy, problem.objective, !options.bare, options.required)
}

/// Whether `a` is a better plan than `b` for their objective: feasible first, then faster.
fn better(a: &Plan, b: &Plan) -> bool {
    match (a.objective_value(), b.objective_value()) {
        (Some(x), Some(y)) => match a.objective {
            Objective::Throughput => x > y,
            Objective::Latency => x < y,
        },
        (Some(_), None) => true,
        _ => false,
    }
}

/// The best plan found by exhaustive search over every ordered subset and split, when the
/// instance has at most `limit` plans to visit; for checking the `optimal` policy.
pub fn verify(problem: &Problem, limit: u64) -> Option<Plan> {
    let count = exhaustive::plan_count(problem.nodes.len(), problem.model.num_layers())?;
    if count > limit {
        return None;
    }
    // The best over every division of a machine's RAM the planner tries.
    let mut plan: Option<Plan> = None;
    let mut shares = RamShare::candidates(problem);
    if shares.len() > 1 {
        // As the planner does: the relaxation first, kept where it fits the RAM.
        let relaxed = CostModel::with_share(problem, RamShare::Whole);
        let stages = exhaustive::best(&relaxed, problem.objective, None).map(|(_, a)| a).unwrap_or_default();
        if relaxed.fits_shared_ram(problem, &stages) {
            plan = Some(evaluate(problem, &relaxed, &stages, Policy::Manual, problem.objective));
            shares.clear();
        }
    }
    for share in shares {
        let cost = CostModel::with_share(problem, share);
        let stages = exhaustive::best(&cost, problem.objective, None).map(|(_, a)| a).unwrap_or_default();
        let found = evaluate(problem, &cost, &stages, Policy::Manual, problem.objective);
        if plan.as_ref().is_none_or(|b| better(&found, b)) {
            plan = Some(found);
        }
    }
    let mut plan = plan.expect("at least one division");
    plan.search = Search {
        method: "exhaustive".to_owned(),
        detail: format!("every ordered subset and split: {} plans", group_digits(count)),
        bound: plan.objective_value(),
        gap: Some(0.0),
    };
    Some(plan)
}

pub(crate) fn plan_on(
    problem: &Problem,
    cost: &CostModel,
    allowed: &[bool],
    policy: Policy,
    objective: Objective,
    explain: bool,
    required: Option<usize>,
) -> Plan {
    let choice = Choice::of(problem, cost, allowed, policy, objective, required);
    report(problem, cost, choice, allowed, policy, objective, explain, required)
}

/// The stages a policy chooses, on the cost model its offload rule makes, with what its
/// search found.
struct Choice {
    /// Under `layer-offload` and `llama-fit` machines with system RAM place tensors by that
    /// rule: the cost model under it (`None`: the one given).
    ruled: Option<CostModel>,
    stages: Vec<Placement>,
    search: Option<search::Found>,
}

impl Choice {
    fn of(
        problem: &Problem,
        cost: &CostModel,
        allowed: &[bool],
        policy: Policy,
        objective: Objective,
        required: Option<usize>,
    ) -> Choice {
        // The split among machines is the optimal one under the rule.
        let ruled = match crate::cost::OffloadRule::of(policy) {
            crate::cost::OffloadRule::Fastest => None,
            rule => Some(cost.with_rule(rule)),
        };
        let on = ruled.as_ref().unwrap_or(cost);
        let (stages, search) = match policy {
            Policy::Optimal | Policy::LayerOffload | Policy::LlamaFit => {
                let found = search::optimal(on, objective, allowed, required);
                let stages = found.best.as_ref().map(|b| b.1.clone()).unwrap_or_default();
                (stages, Some(found))
            }
            Policy::MemoryProportional => (baselines::memory_proportional(&restricted(on, allowed)), None),
            Policy::Even => (baselines::even(&restricted(on, allowed)), None),
            Policy::Greedy => (baselines::greedy(&restricted(on, allowed)), None),
            Policy::Manual => (problem.manual.clone().unwrap_or_default(), None),
        };
        let stages = match policy {
            Policy::MemoryProportional | Policy::Even | Policy::Greedy => unrestrict(&stages, allowed),
            _ => stages,
        };
        Choice { ruled, stages, search }
    }

    /// Its objective value in seconds (less is better), `None` when a stage does not fit.
    fn value(&self, cost: &CostModel, objective: Objective) -> Option<f64> {
        search::value(self.ruled.as_ref().unwrap_or(cost), &self.stages, objective)
    }
}

/// The plan of `choice` made on `cost`: its figures, and with `explain` the baselines,
/// left-out machines, notes and fixes.
#[allow(clippy::too_many_arguments)]
fn report(
    problem: &Problem,
    cost: &CostModel,
    choice: Choice,
    allowed: &[bool],
    policy: Policy,
    objective: Objective,
    explain: bool,
    required: Option<usize>,
) -> Plan {
    let base = cost;
    let cost = choice.ruled.as_ref().unwrap_or(cost);
    let (stages, search) = (choice.stages, choice.search);
    let mut plan = evaluate(problem, cost, &stages, policy, objective);
    if let Some(found) = &search {
        let to_objective = |seconds: f64| match objective {
            Objective::Throughput => problem.workload.batch as f64 / seconds,
            Objective::Latency => seconds,
        };
        plan.search = Search {
            method: if found.exact { "exact" } else { "heuristic" }.to_owned(),
            detail: found.detail.clone(),
            bound: found.bound.map(to_objective),
            gap: match (found.bound, plan.objective_value()) {
                (Some(b), Some(v)) => Some(((v - to_objective(b)) / to_objective(b)).abs()),
                _ => None,
            },
        };
    }
    if !explain {
        return plan;
    }
    if policy == Policy::Optimal {
        plan.left_out = left_out(problem, cost, allowed, &plan, objective, search.as_ref().is_some_and(|f| f.exact));
    }
    plan.baselines = Policy::ALL
        .iter()
        // The offload rules differ from `optimal` only on machines with system RAM.
        .filter(|&&p| {
            p != policy
                && p != Policy::Manual
                && (cost.has_host_tiers() || crate::cost::OffloadRule::of(p) == Default::default())
        })
        .map(|&p| {
            // Each rule with its own best division of a machine's RAM among its GPUs.
            let other = if RamShare::candidates(problem).len() == 1 {
                plan_on(problem, base, allowed, p, objective, false, None)
            } else {
                let (choice, cost) = shared_ram::best_share(problem, allowed, p, objective, None);
                report(problem, &cost, choice, allowed, p, objective, false, None)
            };
            Baseline {
                policy: p,
                feasible: other.feasible,
                tokens_per_s: other.tokens_per_s,
                latency_s: other.latency_s,
                stages: other.stages.iter().map(|s| BaselineStage { node: s.node.clone(), layers: s.layers }).collect(),
                problem: (!other.feasible).then(|| overflow_summary(&other)),
            }
        })
        .collect();
    plan.diagnostics.extend(explain_plan(problem, &plan));
    if policy == Policy::Optimal && plan.feasible {
        plan.diagnostics.extend(tensor_parallel_note(problem, cost, allowed, required, &plan));
    }
    plan.diagnostics.extend(shared_ram::notes(cost.share, &plan));
    if !plan.feasible {
        plan.diagnostics.extend(fixes::fixes(problem, cost, allowed));
    }
    plan
}

/// The cost model of the enabled nodes only (baselines use every node they are given).
fn restricted(cost: &CostModel, allowed: &[bool]) -> CostModel {
    cost.subset(allowed)
}

/// Maps node positions of a restricted cost model back to the scenario's indices.
fn unrestrict(stages: &[Placement], allowed: &[bool]) -> Vec<Placement> {
    let indices: Vec<usize> = (0..allowed.len()).filter(|&k| allowed[k]).collect();
    stages.iter().map(|&p| Placement { node: indices[p.node], ..p }).collect()
}

/// Turns an assignment into a plan: breakdowns, pipeline figures, longest context.
pub(crate) fn evaluate(
    problem: &Problem,
    cost: &CostModel,
    stages: &[Placement],
    policy: Policy,
    objective: Objective,
) -> Plan {
    let count = stages.len();
    let batch = problem.workload.batch as f64;
    // The throughput objective runs the workload's sequences in the micro-batches that serve
    // them fastest; the latency objective steps them all together.
    let schedule = match objective {
        Objective::Throughput if !stages.is_empty() => cost.best_schedule(stages),
        _ => Schedule { micro_batches: 1, cycle_s: cost.stage_times(stages).iter().sum() },
    };
    let micro;
    let step_cost = if schedule.micro_batches > 1 {
        micro = cost.micro_batched(schedule.micro_batches);
        &micro
    } else {
        cost
    };
    let mut out = Vec::with_capacity(count);
    for (s, &Placement { node, start, end }) in stages.iter().enumerate() {
        let time = step_cost.time(node, start, end, crate::cost::Next::of(stages, s));
        // A tensor-parallel group's stage: each GPU's share; the problem's figures are its
        // first GPU's.
        let members = cost.members(node);
        let memory = per_gpu(cost.memory(node, start, end), members.len() as u64);
        let budget = cost.budget(node);
        let lead = members[0];
        let total = memory.total();
        let offload = cost.offload(node, start, end).map(|o| {
            let (_, host) = cost.tier_parts(node, start, end, o);
            let budget = cost.host_budget(node);
            let (f0, f1) = o.ffn_range(start, end);
            let (h0, h1) = o.host_range(start, end);
            StageOffload {
                host_layers: o.host_layers,
                host_ffn: o.host_ffn,
                host_range: [h0, h1],
                ffn_layers: [f0, f1],
                head_on_host: o.head_on_host,
                threads: problem.nodes[lead].host.as_ref().map_or(1, |h| h.threads),
                experts: problem.model.arch.moe.is_some(),
                memory: MemoryBreakdown {
                    weights: host.weights,
                    kv: host.kv,
                    embed_head: host.embed_head,
                    workspace: host.workspace,
                    reserve: host.reserve,
                    riders: 0,
                    total: host.total(),
                    budget,
                    headroom: crate::cost::clamp_i64(i128::from(budget) - i128::from(host.total())),
                },
            }
        });
        out.push(Stage {
            node: problem.nodes[lead].name.clone(),
            kind: problem.nodes[lead].kind,
            threads: problem.nodes[lead].threads,
            gpu_of: problem.nodes[lead]
                .gpu_of
                .as_ref()
                .map(|g| crate::plan::MachineGpu { machine: g.machine.clone(), index: g.index }),
            tensor_parallel: if members.len() > 1 {
                members.iter().filter_map(|&k| problem.nodes[k].gpu_of.as_ref().map(|g| g.index)).collect()
            } else {
                Vec::new()
            },
            layers: [start, end],
            embedding: start == 0,
            head: end == cost.layers(),
            memory: MemoryBreakdown {
                weights: memory.weights,
                kv: memory.kv,
                embed_head: memory.embed_head,
                workspace: memory.workspace,
                reserve: memory.reserve,
                riders: 0,
                total,
                budget,
                headroom: crate::cost::clamp_i64(i128::from(budget) - i128::from(total)),
            },
            time_s: time.total(),
            time: TimeBreakdown {
                memory_s: time.memory_s,
                compute_s: time.compute_s,
                overhead_s: time.overhead_s,
                batch_s: time.batch_s,
                send_s: time.send_s,
                bound: if time.memory_s >= time.compute_s + time.batch_s { Bound::Memory } else { Bound::Compute },
                prefill_s: time.prefill_s,
                host_s: time.host_s,
                split_s: time.split_s,
                all_reduce_s: time.all_reduce_s,
            },
            offload,
        });
    }
    if cost.share == RamShare::Whole {
        shared_ram::machine_budgets(&mut out);
    }
    let feasible = !stages.is_empty() && stages.iter().all(|p| cost.fits(p.node, p.start, p.end));
    let bottleneck =
        out.iter().enumerate().max_by(|a, b| a.1.time_s.total_cmp(&b.1.time_s).then(b.0.cmp(&a.0))).map(|(i, _)| i);
    let latency: f64 = out.iter().map(|s| s.time_s).sum();
    let prefill = out.iter().map(|s| s.time.prefill_s).fold(0.0, f64::max);
    let has_stages = !out.is_empty();
    let pipeline_full = (has_stages && feasible).then(|| {
        let slowest = cost.stage_times(stages).into_iter().fold(0.0, f64::max);
        let sequences = problem.workload.batch.saturating_mul(count as u64);
        PipelineFull {
            sequences,
            tokens_per_s: batch / slowest,
            kv_fits: stages.iter().all(|p| cost.fits_sequences(p.node, p.start, p.end, sequences)),
        }
    });
    Plan {
        policy,
        objective,
        model: PlannedModel {
            name: problem.model.name.clone(),
            weights: problem.model.weights.clone(),
            layers: problem.model.num_layers(),
            experts: problem.model.arch.moe.as_ref().map(|m| m.experts),
            nextn_layers: usize::try_from(problem.model.arch.nextn_layers).unwrap_or(usize::MAX),
            file: problem.file.clone(),
        },
        engine: problem.workload.engine,
        workload: PlannedWorkload {
            context: problem.workload.context,
            batch: problem.workload.batch,
            kv: problem.workload.kv.name().to_owned(),
            kv_v: (problem.workload.kv_v != problem.workload.kv).then(|| problem.workload.kv_v.name().to_owned()),
            prefill_chunk: problem.workload.prefill_chunk,
            flash_attention: problem.workload.flash_attention,
            prompt: problem.workload.prompt,
            depth: problem.workload.depth,
            response: problem.workload.response,
        },
        feasible,
        accuracy: if has_stages && feasible { accuracy(problem, cost, stages, batch / schedule.cycle_s) } else { None },
        tokens_per_s: if has_stages && feasible { batch / schedule.cycle_s } else { 0.0 },
        micro_batches: schedule.micro_batches,
        pipeline_full,
        latency_s: (has_stages && feasible).then_some(latency),
        stream_tokens_per_s: if has_stages && feasible { batch / latency } else { 0.0 },
        at_depth: (has_stages && feasible).then(|| at_depth(problem, cost, stages, schedule)),
        prefill_tokens_per_s: if has_stages && feasible { 1.0 / prefill } else { 0.0 },
        time_to_first_token_s: (has_stages && feasible).then(|| {
            // A chunk passes every stage in turn; later chunks follow one slowest stage apart.
            let first = problem.workload.prompt.min(problem.workload.prefill_chunk) as f64;
            let trip: f64 = out.iter().map(|s| s.time.prefill_s).sum();
            first * trip + (problem.workload.prompt as f64 - first) * prefill
        }),
        bottleneck: if has_stages { bottleneck } else { None },
        max_context: if feasible { max_context(problem, cost, stages) } else { None },
        stages: out,
        left_out: Vec::new(),
        search: Search {
            method: "given".to_owned(),
            detail: format!("the `{}` policy", policy.name()),
            bound: None,
            gap: None,
        },
        baselines: Vec::new(),
        diagnostics: Vec::new(),
        riders: Vec::new(),
    }
}

/// How the plan compares with the other way to use a machine's GPUs: the best layer split
/// when the plan is tensor parallel, the best tensor-parallel group when it is not (and one
/// fits).
fn tensor_parallel_note(
    problem: &Problem,
    cost: &CostModel,
    allowed: &[bool],
    required: Option<usize>,
    plan: &Plan,
) -> Option<Diagnostic> {
    let objective = plan.objective;
    let current = plan.objective_value()?;
    let groups = search::tensor_parallel(cost, allowed, required);
    let speed = |seconds: f64| match objective {
        Objective::Throughput => cost.batch() as f64 / seconds,
        Objective::Latency => 1.0 / seconds,
    };
    let current = match objective {
        Objective::Throughput => current,
        Objective::Latency => 1.0 / current,
    };
    let message = if plan.stages.iter().any(|s| !s.tensor_parallel.is_empty()) {
        let found = search::pipeline(cost, objective, allowed, required);
        let other = found.best.map(|b| speed(b.0));
        let label = plan.stages.iter().map(Stage::label).collect::<Vec<_>>().join("`, `");
        match other {
            Some(other) => format!(
                "tensor parallel on `{label}` (llama.cpp's `--split-mode tensor`, vLLM's `--tensor-parallel-size`): {}× the best layer split ({} tok/s)",
                sig3(current / other),
                sig3(other)
            ),
            None => format!("tensor parallel on `{label}`: no layer split fits"),
        }
    } else {
        let (seconds, stages) = groups
            .into_iter()
            .filter_map(|stages| Some((search::value(cost, &stages, objective)?, stages)))
            .min_by(|a, b| a.0.total_cmp(&b.0))?;
        let members = cost.members(stages[0].node);
        let d = members.len();
        let all_reduce = cost.time(stages[0].node, 0, cost.layers(), None).all_reduce_s;
        format!(
            "tensor parallel over {d} GPUs ({}): {}× this plan, its all-reduces taking {} a step",
            members.iter().map(|&k| format!("`{}`", problem.nodes[k].name)).collect::<Vec<_>>().join(", "),
            sig3(speed(seconds) / current),
            format_seconds(all_reduce)
        )
    };
    Some(Diagnostic { level: Level::Info, message, fix: None, change: None })
}

/// What each of `d` GPUs holds of a stage split among them: its share of the weights, cache
/// and head (rounded up), and its own buffers and reserve.
fn per_gpu(memory: crate::cost::MemoryParts, d: u64) -> crate::cost::MemoryParts {
    crate::cost::MemoryParts {
        weights: memory.weights.div_ceil(d),
        kv: memory.kv.div_ceil(d),
        embed_head: memory.embed_head.div_ceil(d),
        ..memory
    }
}

/// The plan's speeds with each decode step reading the cache a response `workload.depth`
/// tokens in reads, its stages placed as at the full context.
fn at_depth(problem: &Problem, cost: &CostModel, stages: &[Placement], schedule: Schedule) -> AtDepth {
    let tokens = problem.workload.decode_depth();
    let placed = stages.iter().filter_map(|&p| Some((p, cost.offload(p.node, p.start, p.end)?)));
    let shallow = CostModel::at_depth(problem, tokens).with_placements(placed);
    // Steps of the plan's micro-batches, as its own figures are.
    let k = schedule.micro_batches;
    let step = if k > 1 { shallow.micro_batched(k) } else { shallow };
    let batch = problem.workload.batch as f64;
    let latency: f64 = step.stage_times(stages).iter().sum();
    let cycle = if k > 1 { step.cycle_s(stages, k) } else { latency };
    AtDepth { tokens, tokens_per_s: batch / cycle, stream_tokens_per_s: batch / latency }
}

/// The typical error of the least certain node among the stages: a measured node's from its
/// probe ([`crate::calibration::Measured::typical_error`]), any other's from its backend's
/// calibration; `None` when a stage plans with spec-sheet peaks.
fn accuracy(problem: &Problem, cost: &CostModel, stages: &[Placement], tokens_per_s: f64) -> Option<Accuracy> {
    let mut worst: Option<(f64, String)> = None;
    for p in stages {
        // A stage that runs a part from host RAM: the host tier's check.
        let offload = cost.offload(p.node, p.start, p.end);
        if offload.is_some_and(|o| o.host_layers + o.host_ffn > 0)
            && worst.as_ref().is_none_or(|w| crate::cost::HOST_TIER_ERROR > w.0)
        {
            worst = Some((crate::cost::HOST_TIER_ERROR, "llama.cpp partial offload".to_owned()));
        }
        let node = &problem.nodes[cost.members(p.node)[0]];
        let terms = crate::calibration::FITTED.backend(node.backend);
        let (e, class) = match (crate::calibration::Measured::of_node(node), terms) {
            // The calibration is llama.cpp's; vLLM's own published runs say how far it holds.
            _ if problem.workload.engine == crate::engine::Engine::Vllm => {
                (crate::engine::VLLM_DECODE_ERROR, "vLLM, published runs".to_owned())
            }
            (Some(m), terms) => (
                m.typical_error(terms.map_or(0.0, |t| t.typical_error)),
                format!("measured, llama.cpp {}", node.backend.title()),
            ),
            (None, Some(t)) => (t.typical_error, format!("llama.cpp {}", t.backend.title())),
            (None, None) => return None,
        };
        if worst.as_ref().is_none_or(|w| e > w.0) {
            worst = Some((e, class));
        }
    }
    let (e, class) = worst?;
    Some(Accuracy {
        typical_error: e,
        class,
        tokens_per_s_range: [tokens_per_s / (1.0 + e), tokens_per_s / (1.0 - e).max(0.05)],
    })
}

/// The longest context at which every stage of this split still fits, capped at the model's
/// own maximum when it states one.
fn max_context(problem: &Problem, cost: &CostModel, stages: &[Placement]) -> Option<u64> {
    longest_fitting(cost, stages, problem.model.arch.max_context.unwrap_or(MOST_CONTEXT))
}

/// The most context searched for: 64 Mi tokens.
const MOST_CONTEXT: u64 = 1 << 26;

/// The tokens of KV cache each of the problem's sequences can hold on this split, past the
/// model's own maximum context (0 when none fits): with vLLM, whose blocks hold any
/// request's tokens, `× batch` is its pool.
pub(crate) fn kv_tokens(cost: &CostModel, stages: &[Placement]) -> u64 {
    longest_fitting(cost, stages, MOST_CONTEXT).unwrap_or(0)
}

/// The longest context up to `cap` at which every stage of this split fits.
fn longest_fitting(cost: &CostModel, stages: &[Placement], cap: u64) -> Option<u64> {
    let cap = cap.max(1);
    let fits = |context: u64| stages.iter().all(|p| cost.fits_at_context(p.node, p.start, p.end, context));
    if !fits(1) {
        return None;
    }
    if fits(cap) {
        return Some(cap);
    }
    let (mut lo, mut hi) = (1u64, cap);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if fits(mid) { lo = mid } else { hi = mid }
    }
    Some(lo)
}

/// Why each unused node is left out: what the best plan that uses it would reach.
fn left_out(
    problem: &Problem,
    cost: &CostModel,
    allowed: &[bool],
    plan: &Plan,
    objective: Objective,
    exact: bool,
) -> Vec<LeftOut> {
    const EXPLAIN_AT_MOST: usize = 8;
    let mut used: Vec<&str> = plan.stages.iter().map(|s| s.node.as_str()).collect();
    // A tensor-parallel stage uses each of its GPUs.
    for stage in plan.stages.iter().filter(|s| !s.tensor_parallel.is_empty()) {
        used.extend(stage.nodes(problem).map(|k| problem.nodes[k].name.as_str()));
    }
    let mut out = Vec::new();
    let mut unexplained = 0usize;
    // With uniform links, identical nodes have identical answers: search once per kind.
    let mut seen: Vec<(usize, Option<f64>, String)> = Vec::new();
    let same = |a: usize, b: usize| {
        let (x, y) = (&problem.nodes[a], &problem.nodes[b]);
        cost.uniform_links()
            && x.memory == y.memory
            && x.reserve == y.reserve
            && x.bandwidth == y.bandwidth
            && x.compute == y.compute
            && x.host == y.host
    };
    for (k, node) in problem.nodes.iter().enumerate() {
        if !allowed[k] || used.contains(&node.name.as_str()) {
            continue;
        }
        let name = &node.name;
        let capacity = cost.nodes[k].capacity;
        if capacity < 0 {
            out.push(LeftOut {
                node: name.clone(),
                reason: format!(
                    "`{name}` left out: its reserve and workspace ({}) exceed its memory ({})",
                    format_bytes(node.reserve.saturating_add(cost.workspace()) as f64),
                    format_bytes(node.memory as f64)
                ),
                with_node: None,
            });
            continue;
        }
        if let Some((_, with_node, tail)) = seen.iter().find(|(twin, _, _)| same(*twin, k)) {
            out.push(LeftOut {
                node: name.clone(),
                reason: format!("`{name}` left out: {tail}"),
                with_node: *with_node,
            });
            continue;
        }
        if seen.len() >= EXPLAIN_AT_MOST || !plan.feasible {
            unexplained += 1;
            continue;
        }
        let found = search::optimal(cost, objective, allowed, Some(k));
        let with = found.best.as_ref().map(|b| b.0);
        let (reason, with_node) = match (with, plan.objective_value()) {
            (None, _) => (format!("`{name}` left out: no plan that uses it fits in memory"), None),
            (Some(seconds), Some(current)) => match objective {
                Objective::Throughput => {
                    let rate = problem.workload.batch as f64 / seconds;
                    let verb = if rate < current * (1.0 - 1e-9) { "cut" } else { "not raise" };
                    (
                        format!(
                            "`{name}` left out: it would {verb} throughput from {} to {} tok/s",
                            sig3(current),
                            sig3(rate)
                        ),
                        Some(rate),
                    )
                }
                Objective::Latency => {
                    let verb = if seconds > current * (1.0 + 1e-9) { "raise" } else { "not lower" };
                    (
                        format!(
                            "`{name}` left out: it would {verb} latency from {} to {} per token",
                            format_seconds(current),
                            format_seconds(seconds)
                        ),
                        Some(seconds),
                    )
                }
            },
            (Some(_), None) => (format!("`{name}` left out"), None),
        };
        let reason = if exact { reason } else { format!("{reason} (best found)") };
        let tail = reason.split_once(" left out: ").map_or_else(String::new, |(_, tail)| tail.to_owned());
        seen.push((k, with_node, tail));
        out.push(LeftOut { node: name.clone(), reason, with_node });
    }
    if unexplained > 0 && plan.feasible {
        out.push(LeftOut {
            node: String::new(),
            reason: format!("{unexplained} more node{} left out", if unexplained == 1 { "" } else { "s" }),
            with_node: None,
        });
    }
    out
}

fn overflow_summary(plan: &Plan) -> String {
    let over: Vec<String> = plan
        .stages
        .iter()
        .filter(|s| s.memory.headroom < 0)
        .map(|s| {
            format!("`{}` over by {}", s.node, format_bytes(s.memory.total.saturating_sub(s.memory.budget) as f64))
        })
        .collect();
    match over.len() {
        0 => "no stages".to_owned(),
        1..=3 => format!("does not fit: {}", over.join(", ")),
        n => format!("does not fit: {} and {} more", over[..2].join(", "), n - 2),
    }
}

/// The bottleneck, tight memory, and context notes.
fn explain_plan(problem: &Problem, plan: &Plan) -> Vec<Diagnostic> {
    let mut notes = Vec::new();
    if let Some(b) = plan.bottleneck.filter(|_| plan.feasible) {
        let stage = &plan.stages[b];
        let node = &problem.nodes.iter().find(|n| n.name == stage.node);
        let why = match (stage.time.bound, node) {
            (Bound::Memory, Some(n)) => format!(
                "memory-bound, reads {} per step at {}",
                format_bytes(stage.time.memory_s * n.bandwidth),
                format_bandwidth(n.bandwidth)
            ),
            (Bound::Compute, Some(n)) => format!(
                "compute-bound, {} per step at {}",
                format_flops(stage.time.compute_s * n.compute),
                format_compute(n.compute)
            ),
            _ => String::new(),
        };
        // A tensor-parallel stage: each GPU reads its share, and the group exchanges.
        let why = if stage.tensor_parallel.is_empty() {
            why
        } else {
            format!(
                "{why} on each of its {} GPUs, plus {} of all-reduces over the machine's GPU link",
                stage.tensor_parallel.len(),
                format_seconds(stage.time.all_reduce_s)
            )
        };
        // A machine with system RAM: the CPU's part and the changes of tier, besides.
        let why = if stage.time.host_s > 0.0 {
            format!(
                "{why} on the GPU, plus {} on the CPU from system RAM and {} changing between them",
                format_seconds(stage.time.host_s),
                format_seconds(stage.time.split_s)
            )
        } else {
            why
        };
        if plan.stages.len() > 1 || plan.objective == Objective::Throughput {
            notes.push(Diagnostic {
                level: Level::Info,
                message: format!(
                    "stage {b} (`{}`, layers {}–{}) sets the pace: {why}; {} per step",
                    stage.label(),
                    stage.layers[0],
                    stage.layers[1],
                    format_seconds(stage.time_s)
                ),
                fix: None,
                change: None,
            });
        }
    }
    for stage in plan.stages.iter().filter(|s| s.memory.headroom >= 0) {
        let headroom = stage.memory.headroom as f64;
        if headroom < 0.02 * stage.memory.budget as f64 {
            notes.push(Diagnostic {
                level: Level::Warning,
                message: format!("`{}` has only {} of headroom", stage.node, format_bytes(headroom)),
                fix: Some("raise its `reserve` if other programs share it, or plan a shorter context".to_owned()),
                change: None,
            });
        }
    }
    notes.extend(problem.notes.iter().map(|message| Diagnostic {
        level: Level::Info,
        message: message.clone(),
        fix: None,
        change: None,
    }));
    if let Some(max) = problem.model.arch.max_context
        && problem.workload.context > max
    {
        notes.push(Diagnostic {
            level: Level::Warning,
            message: format!("context {} is beyond the model's maximum of {max} tokens", problem.workload.context),
            fix: Some(format!("set `workload.context` to at most {max}")),
            change: Some(Change::Context(max)),
        });
    }
    notes
}

#[cfg(test)]
mod shared_ram_tests;
#[cfg(test)]
mod tensor_parallel_measured;
#[cfg(test)]
mod tensor_parallel_tests;
#[cfg(test)]
mod tests;

//! What rides along with the model: a speculative-decoding draft model and a vision
//! projector, each placed whole on one machine of the plan, as llama.cpp's
//! `--device-draft` and `--mmproj-device` put them.
//!
//! A rider's bytes are two parts: what its device holds (weights, KV cache, its compute
//! buffer) and what the host running the server holds for it (the CPU's compute buffer and
//! input copies). Each rider is tried on every machine that holds a stage of the plan without
//! it, its device part on that machine and its host part on every machine that could run the
//! server; the placement whose plan serves the objective best is kept, and the plan is then
//! made again with the host part only where the server runs. The planner itself never sees a
//! rider: it sees machines with that much less memory, so every policy, baseline and fix
//! counts it alike.

use crate::cost::{CostModel, MemoryParts};
use crate::plan::{Diagnostic, Level, MemoryBreakdown, Plan, PlannedRider, RiderKind};
use crate::problem::{DEFAULT_LINK, Links, Node, Problem, Riders, Workload};
use crate::scenario::Objective;
use crate::units::format_bytes;

use super::PlanOptions;

/// Machines a rider is tried on: each try is a plan.
const MAX_CANDIDATES: usize = 16;

/// A rider's bytes on one machine: what its device holds, by part, and what the server's
/// host holds for it.
#[derive(Copy, Clone, Debug, Default)]
struct Footprint {
    device: MemoryParts,
    /// The host's buffers for it.
    host: u64,
    /// A draft's token embedding, which llama.cpp keeps in the server's RAM: counted on a
    /// server whose memory the plan holds it in (a CPU or unified memory, as the model's).
    embedding: u64,
}

impl Footprint {
    fn device_total(&self) -> u64 {
        self.device.total()
    }

    /// What the server's machine holds for it, when that is `node`.
    fn host_on(&self, node: &Node, engine: crate::engine::Engine) -> u64 {
        let keeps = engine.rules().embedding_on_device(node.kind);
        self.host.saturating_add(if keeps { self.embedding } else { 0 })
    }
}

/// One rider to place.
struct Rider {
    kind: RiderKind,
    name: String,
    file: Option<String>,
    weights: String,
    kv: String,
    /// A draft's blocks, counting the NextN ones llama.cpp counts in its slots.
    layers: usize,
    /// Its footprint on node `k`.
    footprint: Box<dyn Fn(&Node) -> Footprint>,
}

/// Plans `problem` with its riders placed (see the module's comment).
pub(super) fn plan(problem: &Problem, options: PlanOptions<'_>) -> Plan {
    let riders = riders(problem);
    let mut carrying = problem.clone();
    carrying.riders = Riders::default();
    let bare = PlanOptions { bare: true, ..options };
    let allowed = |k: usize| options.enabled.is_none_or(|e| e.get(k).copied().unwrap_or(false));
    let without = super::plan_with(&carrying, bare);
    let index_of = |name: &str| problem.nodes.iter().position(|n| n.name == name);
    // Every machine on a small cluster; on a large one the plan's machines first, then the
    // largest: a rider moves layers off its machine, onto one the plan may not have used.
    let in_plan = |k: usize| without.stages.iter().any(|s| s.node == problem.nodes[k].name);
    let mut candidates: Vec<usize> = (0..problem.nodes.len()).filter(|&k| allowed(k)).collect();
    candidates.sort_by_key(|&k| (!in_plan(k), std::cmp::Reverse(problem.nodes[k].memory)));
    candidates.truncate(MAX_CANDIDATES);
    // Bytes added to each node's reserve for the riders placed so far (conservative: the
    // host part on every node but the rider's own).
    let mut added = vec![0u64; problem.nodes.len()];
    let mut placed: Vec<(Rider, usize, Footprint)> = Vec::new();
    let mut misplaced: Vec<String> = Vec::new();
    for rider in riders {
        let mut best: Option<(usize, f64)> = None;
        for &k in &candidates {
            let footprint = (rider.footprint)(&problem.nodes[k]);
            let trial = with_rider(&carrying, &added, k, footprint);
            // The best plan with a stage on `k`, where the rider is: the best plan overall may
            // leave `k` out once the rider's bytes are there.
            let plan = super::plan_with(&trial, PlanOptions { required: Some(k), ..bare });
            let on_stages = holds_all(&plan, problem, placed.iter().map(|(_, k, _)| *k).chain([k]));
            let Some(value) = plan.objective_value().filter(|_| on_stages) else { continue };
            let better = best.is_none_or(|(_, v)| match problem.objective {
                Objective::Throughput => value > v,
                Objective::Latency => value < v,
            });
            if better {
                best = Some((k, value));
            }
        }
        // Where it fits nowhere, on the machine with the most memory: the plan then says
        // what is missing there.
        let k = if let Some((k, _)) = best {
            k
        } else {
            misplaced.push(rider.name.clone());
            candidates.iter().copied().max_by_key(|&k| problem.nodes[k].memory).unwrap_or(0)
        };
        let footprint = (rider.footprint)(&problem.nodes[k]);
        add(&mut added, &problem.nodes, problem.workload.engine, k, footprint);
        placed.push((rider, k, footprint));
    }
    // The plan with every rider's bytes, holding a stage on each rider's machine: the search
    // requires one machine, so each rider's in turn until a plan holds them all.
    let on_riders = |with: &Problem| {
        let mut plans =
            placed.iter().map(|(_, k, _)| super::plan_with(with, PlanOptions { required: Some(*k), ..options }));
        let first = plans.next().unwrap_or_else(|| super::plan_with(with, options));
        if riders_on_stages(&first, problem, &placed) {
            return first;
        }
        plans.find(|plan| riders_on_stages(plan, problem, &placed)).unwrap_or(first)
    };
    let mut plan = on_riders(&with_added(&carrying, &added));
    let mut on_node = added;
    // The host parts where the server runs, only: the first stage's machine.
    if let Some(first) = plan.stages.first().and_then(|s| index_of(&s.node)) {
        let mut exact = vec![0u64; problem.nodes.len()];
        for (_, k, footprint) in &placed {
            exact[*k] = exact[*k].saturating_add(footprint.device_total());
            exact[first] =
                exact[first].saturating_add(footprint.host_on(&problem.nodes[first], problem.workload.engine));
        }
        let refined = on_riders(&with_added(&carrying, &exact));
        let same_first = refined.stages.first().map(|s| &s.node) == plan.stages.first().map(|s| &s.node);
        if refined.feasible && same_first && riders_on_stages(&refined, problem, &placed) {
            plan = refined;
            on_node = exact;
        }
    }
    annotate(&mut plan, problem, &placed, &on_node, &misplaced);
    // A rider that fits on no machine beside some layers leaves the plan short of it.
    if !misplaced.is_empty() {
        plan.feasible = false;
    }
    plan
}

/// The problem's riders, each with how to size it on a machine.
fn riders(problem: &Problem) -> Vec<Rider> {
    let mut out = Vec::new();
    if let Some(draft) = &problem.riders.draft {
        let model = draft.model.clone();
        let workload = Workload { kv: draft.kv, kv_v: draft.kv, ..problem.workload.clone() };
        out.push(Rider {
            kind: RiderKind::Draft,
            name: draft.model.name.clone(),
            file: draft.file.clone(),
            weights: draft.model.weights.clone(),
            kv: draft.kv.name().to_owned(),
            layers: draft
                .model
                .num_layers()
                .saturating_add(usize::try_from(draft.model.arch.nextn_layers).unwrap_or(0)),
            footprint: Box::new(move |node| draft_footprint(&model, &workload, node)),
        });
    }
    if let Some(projector) = &problem.riders.projector {
        let (weights, compute) = (projector.weights, projector.compute);
        let name = projector.file.as_deref().map_or("mmproj", |f| f.rsplit(['/', '\\']).next().unwrap_or(f)).to_owned();
        out.push(Rider {
            kind: RiderKind::Mmproj,
            name,
            file: projector.file.clone(),
            weights: String::new(),
            kv: String::new(),
            layers: 0,
            footprint: Box::new(move |_| Footprint {
                device: MemoryParts { weights, workspace: compute, ..MemoryParts::default() },
                host: 0,
                embedding: 0,
            }),
        });
    }
    out
}

/// The draft whole on `node`, as its own context: every layer and the output there
/// (`--gpu-layers-draft all`), the token embedding where the node's kind keeps it, its KV
/// cache at the model's context, and its buffers as one stage's; the host's share of them
/// is held where the server runs.
fn draft_footprint(model: &crate::model::Model, workload: &Workload, node: &Node) -> Footprint {
    let rules = workload.engine.rules();
    // Where the engine keeps the token embedding in the server's RAM, the device holds none
    // whatever its kind (`Footprint::host_on` counts it where the server runs).
    let kind = if rules.embedding_in_host_ram { Some(crate::device::DeviceKind::Gpu) } else { node.kind };
    let alone = Node { reserve: 0, host: None, kind, ..node.clone() };
    let cost = CostModel::build(model, workload, std::slice::from_ref(&alone), &Links::uniform(1, DEFAULT_LINK));
    let mut device = cost.memory(0, 0, cost.layers());
    device.reserve = 0;
    if !rules.embedding_in_host_ram {
        return Footprint { device, host: 0, embedding: 0 };
    }
    let host = rules.buffers(&crate::engine::Dims::of(model), workload.shape()).first_single;
    device.workspace = device.workspace.saturating_sub(host);
    // A tied head's copy stays on the device; the embedding itself is the server's.
    let embedding = model.bytes_at(crate::model::Place::Embedding);
    Footprint { device, host, embedding }
}

/// Adds a rider on node `k` to the bytes per node, its host part on every node, as any may
/// run the server.
fn add(added: &mut [u64], nodes: &[Node], engine: crate::engine::Engine, k: usize, footprint: Footprint) {
    for (i, bytes) in added.iter_mut().enumerate() {
        let mut more = footprint.host_on(&nodes[i], engine);
        if i == k {
            more = more.saturating_add(footprint.device_total());
        }
        *bytes = bytes.saturating_add(more);
    }
}

fn with_rider(problem: &Problem, added: &[u64], k: usize, footprint: Footprint) -> Problem {
    let mut added = added.to_vec();
    add(&mut added, &problem.nodes, problem.workload.engine, k, footprint);
    with_added(problem, &added)
}

fn with_added(problem: &Problem, added: &[u64]) -> Problem {
    let mut out = problem.clone();
    for (node, &bytes) in out.nodes.iter_mut().zip(added) {
        node.reserve = node.reserve.saturating_add(bytes);
    }
    out
}

fn riders_on_stages(plan: &Plan, problem: &Problem, placed: &[(Rider, usize, Footprint)]) -> bool {
    holds_all(plan, problem, placed.iter().map(|(_, k, _)| *k))
}

/// Whether `plan` holds a stage on each of the machines `nodes`.
fn holds_all(plan: &Plan, problem: &Problem, mut nodes: impl Iterator<Item = usize>) -> bool {
    nodes.all(|k| plan.stages.iter().any(|s| s.node == problem.nodes[k].name))
}

/// Moves the riders' bytes from each stage's `reserve` to its `riders`, lists the riders and
/// says what they cost.
fn annotate(
    plan: &mut Plan,
    problem: &Problem,
    placed: &[(Rider, usize, Footprint)],
    on_node: &[u64],
    misplaced: &[String],
) {
    for stage in &mut plan.stages {
        let Some(k) = problem.nodes.iter().position(|n| n.name == stage.node) else { continue };
        let bytes = on_node[k].min(stage.memory.reserve);
        stage.memory.reserve -= bytes;
        stage.memory.riders = bytes;
    }
    let server = plan.stages.first().and_then(|s| problem.nodes.iter().find(|n| n.name == s.node));
    for (rider, k, footprint) in placed {
        let node = &problem.nodes[*k];
        let d = footprint.device;
        let host = server.map_or(footprint.host, |n| footprint.host_on(n, problem.workload.engine));
        let total = d.total().saturating_add(host);
        let headroom = plan.stages.iter().find(|s| s.node == node.name).map_or(0, |s| s.memory.headroom);
        plan.riders.push(PlannedRider {
            kind: rider.kind,
            name: rider.name.clone(),
            file: rider.file.clone(),
            node: node.name.clone(),
            layers: rider.layers,
            weights: rider.weights.clone(),
            kv: rider.kv.clone(),
            memory: MemoryBreakdown {
                weights: d.weights,
                kv: d.kv,
                embed_head: d.embed_head.saturating_add(host - footprint.host.min(host)),
                workspace: d.workspace.saturating_add(footprint.host.min(host)),
                reserve: 0,
                riders: 0,
                total,
                budget: node.memory,
                headroom,
            },
        });
        let what = match rider.kind {
            RiderKind::Draft => format!("The draft model `{}`", crate::quote::line(&rider.name)),
            RiderKind::Mmproj => format!("The vision projector `{}`", crate::quote::line(&rider.name)),
        };
        let message = if misplaced.contains(&rider.name) {
            format!(
                "{what} needs {} beside the layers of some machine, and none has it: the plan shows the shortfall on {}",
                format_bytes(total as f64),
                node.name
            )
        } else {
            match rider.kind {
                RiderKind::Draft => format!(
                    "{what} runs whole on {}: {} with its KV cache and buffers. Tokens/s is the model's alone; speculative decoding adds to it as far as the model accepts the draft's tokens",
                    node.name,
                    format_bytes(total as f64)
                ),
                RiderKind::Mmproj => format!(
                    "{what} encodes images on {}: {} of weights and buffers, held while the server runs",
                    node.name,
                    format_bytes(total as f64)
                ),
            }
        };
        let level = if misplaced.contains(&rider.name) { Level::Error } else { Level::Info };
        let fix = misplaced.contains(&rider.name).then(|| match rider.kind {
            RiderKind::Draft => {
                "give a smaller or more quantized draft (`model.draft.weights`), or remove `model.draft`".to_owned()
            }
            RiderKind::Mmproj => "use a quantized projector file, or remove `model.mmproj`".to_owned(),
        });
        plan.diagnostics.push(Diagnostic { level, message, fix, change: None });
    }
}

#[cfg(test)]
mod tests {
    use crate::check::no_model_files;
    use crate::plan::RiderKind;

    fn home_with(riders: &str) -> crate::Plan {
        let text = include_str!("../../../../tests/scenarios/home-70b.json").replacen(
            r#""weights": "q4_k_m"}"#,
            &format!(r#""weights": "q4_k_m", {riders}}}"#),
            1,
        );
        crate::plan(&crate::check(text.as_str(), no_model_files).unwrap().problem)
    }

    #[test]
    fn riders_go_on_a_stage_machine_and_are_counted_there() {
        let plan = home_with(
            r#""draft": {"preset": "llama-3.2-1b", "weights": "q8_0"}, "mmproj": {"weights": "600 MiB", "compute": "300 MiB"}"#,
        );
        assert!(plan.feasible, "{:?}", plan.diagnostics);
        assert_eq!(plan.riders.len(), 2);
        let draft = &plan.riders[0];
        assert_eq!((draft.kind, draft.kv.as_str(), draft.layers), (RiderKind::Draft, "f16", 16));
        let mmproj = &plan.riders[1];
        assert_eq!(mmproj.memory.total, 900 << 20);
        for rider in &plan.riders {
            assert!(plan.stages.iter().any(|s| s.node == rider.node), "{} is on a stage's machine", rider.name);
        }
        // Every byte is in some stage's `riders`, and each stage's parts add up.
        let riding: u64 = plan.stages.iter().map(|s| s.memory.riders).sum();
        assert!(riding >= plan.riders.iter().map(|r| r.memory.total).sum::<u64>());
        for stage in &plan.stages {
            let m = &stage.memory;
            assert_eq!(m.total, m.weights + m.kv + m.embed_head + m.workspace + m.reserve + m.riders);
            assert!(m.total <= m.budget);
        }
        // Riders take memory, never speed.
        let without = home_with(r#""name": "x""#);
        assert!(plan.tokens_per_s <= without.tokens_per_s + 1e-9);
    }

    #[test]
    fn a_rider_that_fits_nowhere_is_an_error_with_a_fix() {
        let plan = home_with(r#""draft": {"preset": "llama-3.1-70b", "weights": "q8_0"}"#);
        assert!(!plan.feasible);
        let error = plan.diagnostics.iter().find(|d| d.message.starts_with("The draft model")).unwrap();
        assert_eq!(error.level, crate::plan::Level::Error);
        assert!(error.fix.as_deref().unwrap().contains("model.draft.weights"), "{error:?}");
    }

    #[test]
    fn rider_fields_are_checked_at_their_paths() {
        let scenario = |model: &str| {
            format!(
                r#"{{"model": {{"preset": "llama-3.1-8b", {model}}}, "nodes": [{{"name": "a", "device": "rtx-4090"}}]}}"#
            )
        };
        let error = |model: &str| crate::check(scenario(model).as_str(), no_model_files).unwrap_err();
        assert_eq!(error(r#""draft": {"preset": "llama-9"}"#).path, "model.draft.preset");
        assert_eq!(error(r#""draft": {"preset": "llama-3.2-1b", "weights": "q9"}"#).path, "model.draft.weights");
        assert_eq!(error(r#""draft": {"preset": "llama-3.2-1b", "kv": "q2"}"#).path, "model.draft.kv");
        assert_eq!(error(r#""draft": {}"#).path, "model.draft");
        let missing = error(r#""mmproj": {"file": "mmproj.gguf"}"#);
        assert_eq!(missing.path, "model.mmproj.weights");
        assert!(missing.to_string().contains("the CLI reads it from the file"), "{missing}");
        assert_eq!(error(r#""mmproj": {"weights": "1 GiB"}"#).path, "model.mmproj.compute");
        assert_eq!(error(r#""mmproj": {"weights": "1 GiB", "compute": "2 EiB"}"#).path, "model.mmproj.compute");
    }
}

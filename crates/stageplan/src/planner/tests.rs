//! The `optimal` policy against exhaustive search, the heuristic against its bound, and the
//! planner's behaviour on clusters where splitting by memory hurts.

use proptest::prelude::*;

use super::*;
use crate::model::{Model, Place, Tensor, Transformer};
use crate::problem::{Link, Links, Node, Placement, Workload};
use crate::scenario::Scenario;
use crate::tensor_type::TensorType;

/// A random planning instance: per-layer sizes and work, nodes, links.
#[derive(Clone, Debug)]
struct Instance {
    /// (bytes, params) per layer.
    layers: Vec<(u64, u64)>,
    embed: u64,
    head: u64,
    tied: bool,
    window: Option<u64>,
    context: u64,
    batch: u64,
    /// (memory, bandwidth, compute, reserve) per node.
    nodes: Vec<(u64, f64, f64, u64)>,
    /// Per node, system RAM beside it: (memory, bandwidth).
    hosts: Vec<Option<(u64, f64)>>,
    /// The share of each layer's bytes in its FFN (routed experts when `moe`).
    ffn_share: f64,
    moe: bool,
    /// The second half of the layers read the cache of the layer before it (as Gemma 3n's
    /// do): a stage without that layer receives its copies.
    shared_kv: bool,
    link: (f64, f64),
    pairs: Vec<(usize, usize, f64, f64)>,
}

const MB: u64 = 1_000_000;

fn instance(max_nodes: usize, max_layers: usize, pairwise: bool) -> impl Strategy<Value = Instance> {
    (1..=max_nodes, 1..=max_layers).prop_flat_map(move |(n, l)| {
        let layers = prop::collection::vec((1..=100 * MB, 1_000_000u64..=60_000_000), l);
        // Node memory around the model's size over the node count, so some instances fit on
        // one node, some need several, some fit nowhere.
        let nodes = prop::collection::vec(
            (
                0u64..=(60 * MB * l as u64 / n as u64 * 3),
                prop_oneof![Just(1e11), 1e9..2e12f64],
                // Low compute makes some nodes compute-bound on some layers: mixed regimes.
                prop_oneof![Just(1e14), 1e8..1e13f64],
                prop_oneof![Just(0u64), 0..=50 * MB],
            ),
            n,
        );
        let hosts = prop::collection::vec(
            prop_oneof![2 => Just(None), 1 => (0u64..=(100 * MB * l as u64), 1e9..2e11f64).prop_map(Some)],
            n,
        );
        let pairs = if pairwise {
            prop::collection::vec((0..n, 0..n, 1e7..1e10f64, 0.0..2e-3f64), 0..=n * 2).boxed()
        } else {
            Just(Vec::new()).boxed()
        };
        (
            layers,
            (1..=200 * MB, 1..=200 * MB, any::<bool>()),
            prop_oneof![Just(None), (1u64..=64).prop_map(Some)],
            (1u64..=256, 1u64..=4),
            nodes,
            (1e7..1e10f64, 0.0..2e-3f64),
            pairs,
            (hosts, 0.0..0.9f64, any::<bool>(), any::<bool>()),
        )
            .prop_map(
                |(
                    layers,
                    (embed, head, tied),
                    window,
                    (context, batch),
                    nodes,
                    link,
                    pairs,
                    (hosts, ffn_share, moe, shared_kv),
                )| Instance {
                    shared_kv,
                    hosts,
                    ffn_share,
                    moe,
                    layers,
                    embed,
                    head,
                    tied,
                    window,
                    context,
                    batch,
                    nodes,
                    link,
                    pairs,
                },
            )
    })
}

impl Instance {
    /// The layer whose cache the second half reads, when `shared_kv`.
    fn source(&self) -> Option<usize> {
        let l = self.layers.len();
        (self.shared_kv && l >= 2).then(|| l / 2 - 1)
    }

    /// K and V per token: the shared layer's wide enough (16k elements, 32 KiB in f16) that
    /// its copies weigh as much as a layer; the readers keep none of their own.
    fn kv_elements(&self) -> Vec<u64> {
        let l = self.layers.len();
        (0..l)
            .map(|i| match self.source() {
                Some(j) if i == j => 16384,
                Some(j) if i > j => 0,
                _ => 64,
            })
            .collect()
    }

    fn kv_from(&self) -> Vec<Option<u64>> {
        let Some(j) = self.source() else { return Vec::new() };
        (0..self.layers.len()).map(|i| (i > j).then_some(j as u64)).collect()
    }

    fn problem(&self, objective: Objective) -> Problem {
        let l = self.layers.len() as u64;
        let arch = Transformer {
            model_type: "test".into(),
            family: crate::model::Arch::Other,
            hidden_size: 64,
            intermediate_size: 128,
            num_layers: l,
            num_heads: 4,
            num_kv_heads: 2,
            head_dim: 16,
            vocab_size: 1000,
            tied_embeddings: self.tied,
            qkv_bias: false,
            o_bias: false,
            mlp_bias: false,
            extra_norms: 0,
            qk_norm: false,
            windows: (0..l).map(|i| self.window.filter(|_| i % 2 == 0)).collect(),
            kv_elements: self.kv_elements(),
            v_elements: self.kv_elements().iter().map(|e| e / 2).collect(),
            state_elements: Vec::new(),
            v_pad_elements: Vec::new(),
            kv_from: self.kv_from(),
            nextn_layers: 0,
            mla: None,
            max_context: None,
            moe: self.moe.then_some(crate::model::Moe {
                experts: 8,
                active: 2,
                expert_intermediate: 128,
                shared_intermediate: None,
                sparse_layers: vec![true; l as usize],
            }),
        };
        let tensor = |name: String, bytes: u64, params: u64, place: Place| {
            let expert = name.contains("_exps");
            Tensor::new(name, vec![params], TensorType::F16, bytes, place, expert)
        };
        let mut tensors = vec![tensor("token_embd.weight".into(), self.embed, self.embed / 2, Place::Embedding)];
        for (i, &(bytes, params)) in self.layers.iter().enumerate() {
            // Part of each layer in its FFN (routed experts in an MoE model), the rest attention.
            let ffn = (bytes as f64 * self.ffn_share) as u64;
            let ffn_params = (params as f64 * self.ffn_share) as u64;
            let ffn_name =
                if self.moe { format!("blk.{i}.ffn_up_exps.weight") } else { format!("blk.{i}.ffn_up.weight") };
            tensors.push(tensor(
                format!("blk.{i}.attn_q.weight"),
                bytes - ffn,
                params - ffn_params,
                Place::Layer(i as u32),
            ));
            if ffn > 0 {
                tensors.push(tensor(ffn_name, ffn, ffn_params.max(1), Place::Layer(i as u32)));
            }
        }
        if !self.tied {
            tensors.push(tensor("output.weight".into(), self.head, self.head / 2, Place::Head));
        }
        let model =
            Model { name: "test".into(), weights: "f16".into(), arch, tensors, head_shares_embedding: self.tied };
        let nodes: Vec<Node> = self
            .nodes
            .iter()
            .enumerate()
            .map(|(i, &(memory, bandwidth, compute, reserve))| Node {
                name: format!("n{i}"),
                device: None,
                kind: None,
                memory,
                bandwidth,
                compute,
                reserve,
                efficiency: crate::device::Efficiency::default(),
                // Half the nodes with llama.cpp's fitted per-layer cost: the searches must be
                // exact with it as without.
                backend: if i % 2 == 0 { crate::device::Backend::Peak } else { crate::device::Backend::Cuda },
                threads: None,
                probe: None,
                host: self.hosts.get(i).copied().flatten().map(|(memory, bandwidth)| crate::problem::Host {
                    ram: None,
                    memory,
                    reserve: 0,
                    bandwidth,
                    threads: 4,
                    link: 16e9,
                }),
                gpu_of: None,
            })
            .collect();
        let mut links = Links::uniform(nodes.len(), Link { bandwidth: self.link.0, latency: self.link.1 });
        for &(a, b, bandwidth, latency) in &self.pairs {
            if a != b {
                links.set(a, b, Link { bandwidth, latency });
            }
        }
        Problem {
            model,
            workload: Workload {
                context: self.context,
                batch: self.batch,
                kv: TensorType::F16,
                workspace: Some(MB),
                ..Workload::default()
            },
            nodes,
            links,
            objective,
            file: None,
            policy: Policy::Optimal,
            manual: None,
            fixed_offloads: Vec::new(),
            riders: Default::default(),
            notes: Vec::new(),
            serving: None,
        }
    }
}

/// Checks a plan's shape: contiguous ranges covering every layer once, distinct nodes,
/// every stage within budget.
fn assert_well_formed(plan: &Plan, layers: usize) {
    assert!(plan.feasible);
    let mut expected = 0;
    let mut seen = Vec::new();
    for stage in &plan.stages {
        assert_eq!(stage.layers[0], expected, "ranges are contiguous");
        assert!(stage.layers[1] > stage.layers[0], "no empty stage");
        assert!(stage.memory.total <= stage.memory.budget, "stage fits: {stage:?}");
        assert!(!seen.contains(&stage.node), "a node appears once");
        seen.push(stage.node.clone());
        expected = stage.layers[1];
    }
    assert_eq!(expected, layers, "every layer is covered");
}

pub(super) fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs())
}

fn check_against_exhaustive(instance: &Instance, objective: Objective) -> Result<(), TestCaseError> {
    let problem = instance.problem(objective);
    let cost = CostModel::new(&problem);
    let exhaustive = exhaustive::best(&cost, objective, None);
    let plan = plan(&problem);
    match exhaustive {
        None => prop_assert!(!plan.feasible, "exhaustive found nothing but optimal found {:?}", plan.stages),
        Some((best, stages)) => {
            prop_assert!(plan.feasible, "exhaustive found {stages:?} ({best}) but optimal found nothing");
            assert_well_formed(&plan, problem.model.num_layers());
            let ours = search::value(&cost, &plan_assignment(&problem, &plan), objective).unwrap();
            prop_assert!(
                ours <= best || close(ours, best),
                "{objective:?}: optimal {ours} worse than exhaustive {best}: {:?} vs {stages:?}",
                plan.stages.iter().map(|s| (s.node.clone(), s.layers)).collect::<Vec<_>>()
            );
            prop_assert_eq!(plan.search.method.as_str(), "exact");
        }
    }
    Ok(())
}

fn plan_assignment(problem: &Problem, plan: &Plan) -> Vec<Placement> {
    plan.stages
        .iter()
        .map(|s| Placement::new(problem.nodes.iter().position(|n| n.name == s.node).unwrap(), s.layers[0], s.layers[1]))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn optimal_throughput_matches_exhaustive_search(instance in instance(6, 24, false)) {
        check_against_exhaustive(&instance, Objective::Throughput)?;
    }

    #[test]
    fn optimal_latency_matches_exhaustive_search(instance in instance(6, 24, false)) {
        check_against_exhaustive(&instance, Objective::Latency)?;
    }

    #[test]
    fn optimal_matches_exhaustive_search_with_per_pair_links(instance in instance(5, 16, true)) {
        check_against_exhaustive(&instance, Objective::Throughput)?;
        check_against_exhaustive(&instance, Objective::Latency)?;
    }

    /// Identical nodes that reach every other node alike (the GPUs of one machine) are
    /// searched as one class with per-pair links too, and the search stays exact.
    #[test]
    fn twins_on_per_pair_links_match_exhaustive_search(mut instance in instance(5, 16, true)) {
        prop_assume!(instance.nodes.len() >= 3);
        // Nodes 0 and 2 share a backend (it alternates by index): make 2 a copy of 0.
        instance.nodes[2] = instance.nodes[0];
        if instance.hosts.len() > 2 {
            instance.hosts[2] = instance.hosts.first().copied().flatten();
        }
        let mut pairs: Vec<_> = instance.pairs.iter().copied().filter(|&(a, b, _, _)| a != 2 && b != 2).collect();
        for &(a, b, bandwidth, latency) in &instance.pairs {
            match (a, b) {
                (0, x) | (x, 0) if x != 2 => pairs.push((2, x, bandwidth, latency)),
                _ => {}
            }
        }
        instance.pairs = pairs;
        check_against_exhaustive(&instance, Objective::Throughput)?;
        check_against_exhaustive(&instance, Objective::Latency)?;
    }

    /// "Best plan that uses node r" (how left-out nodes are explained) is exact too.
    #[test]
    fn best_plan_with_a_required_node_matches_exhaustive_search(
        instance in instance(5, 16, false),
        pairwise in instance(4, 12, true),
        r in 0usize..6,
        latency in any::<bool>(),
    ) {
        let objective = if latency { Objective::Latency } else { Objective::Throughput };
        for instance in [&instance, &pairwise] {
            let problem = instance.problem(objective);
            let cost = CostModel::new(&problem);
            let r = r % problem.nodes.len();
            let expected = exhaustive::best(&cost, objective, Some(r));
            let found = search::optimal(&cost, objective, &vec![true; problem.nodes.len()], Some(r));
            match (expected, found.best) {
                (None, None) => {}
                (Some((want, _)), Some((got, stages))) => {
                    prop_assert!(stages.iter().any(|s| s.node == r), "uses the required node");
                    prop_assert!(got <= want || close(got, want), "{objective:?}: {got} worse than {want}");
                }
                (want, got) => prop_assert!(false, "exhaustive {want:?} vs optimal {got:?}"),
            }
        }
    }

    /// The heuristic (used above the exact search's size) returns valid plans, never better
    /// than the optimum, and its lower bound never exceeds the optimum.
    #[test]
    fn heuristic_is_valid_and_bounded(instance in instance(6, 24, false)) {
        let problem = instance.problem(Objective::Latency);
        let cost = CostModel::new(&problem);
        let nodes: Vec<usize> = (0..problem.nodes.len()).filter(|&k| cost.nodes[k].capacity >= 0).collect();
        let exact = search::least_sum(&cost, &nodes, None);
        let rough = search::heuristic(&cost, &nodes, None);
        if let Some((value, stages)) = &rough.best {
            prop_assert!(stages.iter().all(|p| cost.fits(p.node, p.start, p.end)), "heuristic plan fits");
            prop_assert!(close(cost.stage_times(stages).iter().sum(), *value), "heuristic plan's value is true");
            let (best, _) = exact.best.clone().expect("exact finds a plan when the heuristic does");
            prop_assert!(*value >= best || close(*value, best));
        }
        if let (Some(bound), Some((best, _))) = (search::lower_bound(&cost, &nodes), &exact.best) {
            prop_assert!(bound <= *best || close(bound, *best), "bound {bound} above optimum {best}");
        }
    }

    /// "Does anything fit?" (what the fixes ask) agrees with exhaustive search.
    #[test]
    fn any_fit_matches_exhaustive_search(instance in instance(6, 24, true)) {
        let problem = instance.problem(Objective::Latency);
        let cost = CostModel::new(&problem);
        let fits = exhaustive::best(&cost, Objective::Latency, None).is_some();
        prop_assert_eq!(search::any_fit(&cost, &vec![true; problem.nodes.len()]), fits);
    }

    /// A stage that fits keeps fitting with a layer fewer at either end, on machines with
    /// system RAM too: the searches' sliding windows and reaches rely on it. (A last stage
    /// with every layer in host RAM may keep its head on the GPU, `-ngl 1`, for this.) The
    /// exception is a first stage, which alone may keep whole layers in host RAM: without
    /// its first layer it is no first stage, and only its end may shrink.
    #[test]
    fn a_stage_that_fits_fits_without_its_end_layers(instance in instance(4, 12, false)) {
        let problem = instance.problem(Objective::Latency);
        let cost = CostModel::new(&problem);
        let l = problem.model.num_layers();
        for k in 0..problem.nodes.len() {
            for s in 0..l {
                for e in s + 2..=l {
                    if cost.fits(k, s, e) {
                        prop_assert!(cost.fits(k, s, e - 1), "node {k} [{s}, {e})");
                        prop_assert!(s == 0 || cost.fits(k, s + 1, e), "node {k} [{s}, {e})");
                    }
                }
            }
        }
    }

    /// A plan is never worse than any single node that holds the whole model alone.
    #[test]
    fn never_slower_than_the_best_single_node(instance in instance(6, 24, false)) {
        let problem = instance.problem(Objective::Throughput);
        let cost = CostModel::new(&problem);
        let plan = plan(&problem);
        for k in 0..problem.nodes.len() {
            if let Some(alone) = search::value(&cost, &[Placement::new(k, 0, problem.model.num_layers())], Objective::Throughput) {
                prop_assert!(plan.feasible);
                let ours = problem.workload.batch as f64 / plan.tokens_per_s;
                prop_assert!(ours <= alone || close(ours, alone));
            }
        }
    }
}

/// Every assignment (ordered subset of nodes, contiguous split), for brute-force checks.
fn every_assignment(nodes: usize, layers: usize) -> Vec<Vec<Placement>> {
    fn walk(nodes: usize, layers: usize, start: usize, stages: &mut Vec<Placement>, out: &mut Vec<Vec<Placement>>) {
        if start == layers {
            out.push(stages.clone());
            return;
        }
        for k in 0..nodes {
            if stages.iter().any(|s| s.node == k) {
                continue;
            }
            for end in start + 1..=layers {
                stages.push(Placement::new(k, start, end));
                walk(nodes, layers, end, stages, out);
                stages.pop();
            }
        }
    }
    let mut out = Vec::new();
    walk(nodes, layers, 0, &mut Vec::new(), &mut out);
    out
}

/// A running plan for re-planning tests: a split of the layers over some of the nodes and,
/// when `gone` is set, a node that has left the cluster.
fn current_stages(problem: &Problem, cuts: &[usize], offset: usize, gone: bool) -> Vec<replan::CurrentStage> {
    let l = problem.model.num_layers();
    let mut bounds: Vec<usize> = cuts.iter().map(|c| c % l).filter(|&c| c > 0).collect();
    bounds.sort_unstable();
    bounds.dedup();
    let names: Vec<String> =
        problem.nodes.iter().map(|n| n.name.clone()).chain(gone.then(|| "gone".to_owned())).collect();
    bounds.truncate(names.len() - 1);
    let edges: Vec<usize> = std::iter::once(0).chain(bounds).chain(std::iter::once(l)).collect();
    edges
        .windows(2)
        .enumerate()
        .map(|(i, w)| replan::CurrentStage { node: names[(offset + i) % names.len()].clone(), layers: [w[0], w[1]] })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]

    /// Re-planning stays within the tolerance of the best, never moves more than switching to
    /// the best plan outright, and never keeps a plan that lost a node; the fewest-moves search
    /// under a stage-time bound is exact (brute force over every assignment).
    #[test]
    fn replan_moves_the_least_within_tolerance(
        instance in instance(4, 7, false),
        cuts in prop::collection::vec(0usize..7, 0..4),
        offset in 0usize..5,
        gone in any::<bool>(),
        tolerance in 0.001f64..0.2,
        latency in any::<bool>(),
    ) {
        let objective = if latency { Objective::Latency } else { Objective::Throughput };
        let problem = instance.problem(objective);
        let cost = CostModel::new(&problem);
        let current = current_stages(&problem, &cuts, offset, gone);
        let options = replan::ReplanOptions { tolerance, hysteresis: 0.0 };
        let result = replan::replan(&problem, &current, options).unwrap();
        let Some((best, best_stages)) = search::optimal(&cost, objective, &vec![true; problem.nodes.len()], None).best else {
            prop_assert!(!result.plan.feasible);
            return Ok(());
        };
        assert_well_formed(&result.plan, problem.model.num_layers());
        let lost = current.iter().any(|s| s.node == "gone");
        prop_assert!(!(lost && result.kept), "a lost node's layers are re-placed");
        prop_assert!(result.plan.stages.iter().all(|s| s.node != "gone"));
        let ours = search::value(&cost, &plan_assignment(&problem, &result.plan), objective).unwrap();
        prop_assert!(ours <= best * (1.0 + tolerance) * (1.0 + 1e-12), "{ours} not within {tolerance} of {best}");

        let owner: Vec<Option<usize>> = (0..problem.model.num_layers())
            .map(|l| current.iter().find(|s| s.layers[0] <= l && l < s.layers[1]).and_then(|s| problem.nodes.iter().position(|n| n.name == s.node)))
            .collect();
        let first = problem.nodes.iter().position(|n| n.name == current[0].node);
        let last = problem.nodes.iter().position(|n| n.name == current[current.len() - 1].node);
        let bytes = |a: &[Placement]| replan::moves(&problem, &cost, &owner, first, last, a).iter().map(|m| m.bytes).sum::<u64>();
        prop_assert!(result.bytes_moved <= bytes(&best_stages), "moves more than the best plan");

        let slowest = |a: &[Placement]| cost.stage_times(a).into_iter().fold(0.0, f64::max);
        let tau = slowest(&best_stages) * (1.0 + tolerance);
        let mover = replan::Mover { cost: &cost, owner: &owner, old_first: first, old_last: last, model: &problem };
        let found = mover.least_moves(tau).expect("the best plan is within the bound");
        let cheapest = every_assignment(problem.nodes.len(), problem.model.num_layers())
            .into_iter()
            .filter(|a| a.iter().all(|p| cost.fits(p.node, p.start, p.end)) && slowest(a) <= tau)
            .map(|a| bytes(&a))
            .min()
            .expect("the best plan is within the bound");
        prop_assert!(slowest(&found) <= tau * (1.0 + 1e-12));
        prop_assert_eq!(bytes(&found), cheapest);
        // Applying the result and re-planning again changes nothing.
        let applied: Vec<replan::CurrentStage> = result.plan.stages.iter().map(|s| replan::CurrentStage { node: s.node.clone(), layers: s.layers }).collect();
        let again = replan::replan(&problem, &applied, replan::ReplanOptions { tolerance, hysteresis: tolerance }).unwrap();
        prop_assert_eq!(again.bytes_moved, 0, "re-planning a fresh plan moves nothing: {:?}", again.moves);
    }
}

/// A GPU slower than its own RAM (the fourth node: 1 GB/s beside 43 GB/s) runs a longer stage
/// faster, with more of it in RAM, so its stages are not windows: the fewest-moves search
/// must still find the plan within the bound (it found none, and re-planning moved everything).
#[test]
fn least_moves_is_exact_beside_a_gpu_slower_than_its_ram() {
    let gpu = |memory| (memory, 1e11, 1e14, 0);
    let instance = Instance {
        layers: vec![(88_701_462, MB), (16_454_595, MB), (3_925_215, MB), (1, MB), (1, MB), (1, MB)],
        embed: 165_563_396,
        head: 1,
        tied: false,
        window: None,
        context: 1,
        batch: 2,
        nodes: vec![gpu(0), gpu(20_041_241), gpu(0), (89_766_998, 1e9, 1e14, 0)],
        hosts: vec![None, None, None, Some((217_814_297, 42_974_715_444.8))],
        ffn_share: 0.577_790_939_2,
        moe: false,
        shared_kv: false,
        link: (1e7, 0.0),
        pairs: Vec::new(),
    };
    let problem = instance.problem(Objective::Throughput);
    let cost = CostModel::new(&problem);
    let current = current_stages(&problem, &[1], 0, false);
    let (_, best) = search::optimal(&cost, Objective::Throughput, &[true; 4], None).best.unwrap();
    let owner: Vec<Option<usize>> = (0..6)
        .map(|l| {
            current
                .iter()
                .find(|s| s.layers[0] <= l && l < s.layers[1])
                .and_then(|s| problem.nodes.iter().position(|n| n.name == s.node))
        })
        .collect();
    let index = |name: &str| problem.nodes.iter().position(|n| n.name == name);
    let (first, last) = (index(&current[0].node), index(&current[current.len() - 1].node));
    let bytes =
        |a: &[Placement]| replan::moves(&problem, &cost, &owner, first, last, a).iter().map(|m| m.bytes).sum::<u64>();
    let slowest = |a: &[Placement]| cost.stage_times(a).into_iter().fold(0.0, f64::max);
    let mover = replan::Mover { cost: &cost, owner: &owner, old_first: first, old_last: last, model: &problem };
    let found = mover.least_moves(slowest(&best)).expect("the best plan is within the bound");
    let cheapest = every_assignment(4, 6)
        .into_iter()
        .filter(|a| a.iter().all(|p| cost.fits(p.node, p.start, p.end)) && slowest(a) <= slowest(&best))
        .map(|a| bytes(&a))
        .min();
    assert_eq!(Some(bytes(&found)), cheapest);
}

fn scenario(json: &str) -> Problem {
    Scenario::from_json(json).unwrap().problem().unwrap()
}

fn baseline(plan: &Plan, policy: Policy) -> &crate::plan::Baseline {
    plan.baselines.iter().find(|b| b.policy == policy).unwrap()
}

#[test]
fn a_fast_small_gpu_beside_a_slow_big_box_beats_splitting_by_memory() {
    let problem = scenario(
        r#"{"model": {"preset": "llama-3.1-70b", "weights": "q4_k_m"}, "workload": {"context": 8192},
            "nodes": [{"name": "desk", "device": "rtx-4090"},
                      {"name": "box", "device": "cpu-epyc-12ch-ddr5"},
                      {"name": "mac", "device": "m2-max-96gb"}]}"#,
    );
    let plan = plan(&problem);
    assert_well_formed(&plan, 80);
    let proportional = baseline(&plan, Policy::MemoryProportional);
    assert!(proportional.feasible);
    assert!(
        plan.tokens_per_s > proportional.tokens_per_s * 1.2,
        "{} vs {}",
        plan.tokens_per_s,
        proportional.tokens_per_s
    );
}

#[test]
fn a_straggler_is_left_out_with_the_reason() {
    let problem = scenario(
        r#"{"model": {"preset": "llama-3.1-8b", "weights": "q8_0"}, "objective": "latency",
            "nodes": [{"name": "desk", "device": "rtx-4090"},
                      {"name": "old-laptop", "memory": "16 GiB", "bandwidth": "25 GB/s", "compute": "1 TFLOPS", "reserve": "4 GiB"}]}"#,
    );
    let plan = plan(&problem);
    assert_eq!(plan.stages.len(), 1);
    assert_eq!(plan.stages[0].node, "desk");
    let left = &plan.left_out[0];
    assert_eq!(left.node, "old-laptop");
    assert!(left.reason.starts_with("`old-laptop` left out: it would raise latency from"), "{}", left.reason);
    // The split the memory-proportional tools make is slower.
    let proportional = baseline(&plan, Policy::MemoryProportional);
    assert!(proportional.latency_s.unwrap() > plan.latency_s.unwrap());
}

#[test]
fn a_model_too_big_for_the_cluster_gets_fixes_not_a_crash() {
    let problem = scenario(
        r#"{"model": {"preset": "llama-3.1-70b", "weights": "bf16"}, "workload": {"context": 8192},
            "nodes": [{"name": "a", "device": "rtx-4090"}, {"name": "b", "device": "rtx-4090"}]}"#,
    );
    let plan = plan(&problem);
    assert!(!plan.feasible);
    assert!(plan.stages.is_empty());
    assert_eq!(plan.tokens_per_s, 0.0);
    let messages: Vec<&str> = plan.diagnostics.iter().map(|d| d.message.as_str()).collect();
    assert!(messages[0].contains("short"), "{messages:?}");
    // Two 24 GB cards hold a 70B model in a 2-3 bit format.
    assert!(messages.iter().any(|m| m.starts_with("weights in `")), "{messages:?}");
    assert!(messages.iter().any(|m| m.starts_with("one more")), "{messages:?}");
}

#[test]
fn what_if_a_node_goes_away() {
    let problem = scenario(
        r#"{"model": {"preset": "llama-3.1-70b", "weights": "q4_k_m"},
            "nodes": [{"name": "a", "device": "rtx-3090"}, {"name": "b", "device": "rtx-3090"}, {"name": "c", "device": "rtx-3090"}]}"#,
    );
    let all = plan(&problem);
    // One sequence: two cards hold the model, and a third would only add a hop to its trip.
    assert_eq!(all.stages.len(), 2, "{:?}", all.stages);
    // Kept full (a sequence per stage), the same split would make nearly twice the tokens.
    let full = all.pipeline_full.as_ref().unwrap();
    assert_eq!(full.sequences, 2);
    assert!(full.tokens_per_s > 1.5 * all.tokens_per_s, "{full:?}");
    // Three sequences read the weights once per step between them: nearly three times the tokens.
    let mut busy = problem.clone();
    busy.workload.batch = 3;
    assert!(plan(&busy).tokens_per_s > 2.5 * all.tokens_per_s);
    let without_a = plan_with(&problem, PlanOptions::default().enabled(&[false, true, true]));
    assert!(without_a.feasible);
    assert!(without_a.stages.iter().all(|s| s.node != "a"));
    let only_a = plan_with(&problem, PlanOptions::default().enabled(&[true, false, false]));
    assert!(!only_a.feasible);
}

#[test]
fn large_clusters_use_the_heuristic_and_report_a_gap() {
    let problem = scenario(
        r#"{"model": {"preset": "llama-3.1-405b", "weights": "q4_k_m"},
            "nodes": [{"name": "a", "device": "rtx-4090", "count": 20}, {"name": "b", "device": "rtx-3090", "count": 20},
                      {"name": "m", "device": "m2-ultra-192gb", "count": 4}]}"#,
    );
    let plan = plan(&problem);
    assert_well_formed(&plan, 126);
    assert_eq!(plan.search.method, "heuristic");
    let gap = plan.search.gap.unwrap();
    assert!((0.0..1.0).contains(&gap), "gap {gap}");
}

#[test]
fn large_clusters_with_several_sequences_search_micro_batches_heuristically() {
    let mut problem = scenario(
        r#"{"model": {"preset": "llama-3.1-405b", "weights": "q4_k_m"}, "workload": {"batch": 6},
            "nodes": [{"name": "a", "device": "rtx-4090", "count": 20}, {"name": "b", "device": "rtx-3090", "count": 20},
                      {"name": "m", "device": "m2-ultra-192gb", "count": 4}]}"#,
    );
    let six = plan(&problem);
    assert_well_formed(&six, 126);
    assert_eq!(six.search.method, "heuristic");
    let bound = six.search.bound.expect("a bound");
    assert!(bound >= six.tokens_per_s * (1.0 - 1e-9), "bound {bound} under the plan's {}", six.tokens_per_s);
    // Never worse than stepping all six together on the plan the latency search finds.
    problem.objective = Objective::Latency;
    let together = plan(&problem);
    assert!(
        six.tokens_per_s >= together.tokens_per_s * (1.0 - 1e-9),
        "{} < {}",
        six.tokens_per_s,
        together.tokens_per_s
    );
    // The pipeline-full figure needs a group of six per stage.
    assert_eq!(six.pipeline_full.as_ref().unwrap().sequences, 6 * six.stages.len() as u64);
}

#[test]
fn identical_nodes_are_merged_in_the_exact_search() {
    let problem = scenario(
        r#"{"model": {"preset": "llama-3.1-70b", "weights": "q8_0"},
            "nodes": [{"name": "gpu", "device": "rtx-3090", "count": 12}]}"#,
    );
    let plan = plan(&problem);
    assert_eq!(plan.search.method, "exact");
    assert!(plan.search.detail.contains("identical nodes merged"), "{}", plan.search.detail);
    assert_well_formed(&plan, 80);
}

#[test]
fn manual_and_baseline_plans_are_evaluated_on_the_same_cost_model() {
    let mut problem = scenario(
        r#"{"model": {"preset": "llama-3.1-8b"}, "policy": "manual",
            "nodes": [{"name": "a", "device": "rtx-4090"}, {"name": "b", "device": "rtx-3090"}],
            "stages": [{"node": "b", "layers": [0, 10]}, {"node": "a", "layers": [10, 32]}]}"#,
    );
    let manual = plan(&problem);
    assert_eq!(manual.policy, Policy::Manual);
    assert_eq!(manual.stages[0].node, "b");
    assert_eq!(manual.search.method, "given");
    problem.policy = Policy::Optimal;
    let best = plan(&problem);
    assert!(best.tokens_per_s >= manual.tokens_per_s);
}

#[test]
fn llama_fit_moves_experts_of_an_moe_model_and_whole_layers_of_a_dense_one() {
    // `fit.cpp` moves a layer's FFN alone only when the model has experts; the engine test
    // (`llama_fit_params_never_beats_the_plan`) holds the binary to the same choices.
    let kept = |model: &str, gpu: &str| {
        let problem = scenario(&format!(
            r#"{{"model": {model}, "policy": "llama-fit", "workload": {{"context": 8192}},
                "nodes": [{{"name": "box", "kind": "gpu", "memory": "{gpu}", "bandwidth": "500 GB/s", "compute": "30 TFLOPS",
                            "host": {{"memory": "64 GiB", "bandwidth": "90 GB/s"}}}}]}}"#
        ));
        let offload = plan(&problem).stages[0].offload.clone().expect("the stage uses RAM");
        (offload.host_layers, offload.host_ffn)
    };
    let (layers, ffn) = kept(r#"{"preset": "llama-3.1-8b", "weights": "q8_0"}"#, "6 GiB");
    assert!(layers > 0 && ffn == 0, "dense: {layers} layers whole in RAM, {ffn} FFN");
    let (layers, ffn) = kept(r#"{"preset": "qwen3-30b-a3b", "weights": "q4_k_m"}"#, "12 GiB");
    assert!(layers == 0 && ffn > 0, "MoE: {layers} layers whole in RAM, {ffn} FFN");
}

/// A machine's GPUs are planned as nodes joined by its `gpu_link`: the same plan as the
/// same devices written as machines of their own with that link between each pair, and
/// exact against exhaustive search over every ordered subset of them.
#[test]
fn a_machines_gpus_plan_as_its_devices_on_its_gpu_link() {
    let model = r#""model": {"preset": "llama-3.1-8b", "weights": "f16"}, "workload": {"context": 98304}"#;
    let remote = r#"{"name": "mini", "device": "rtx-4060-ti-16gb"}"#;
    let network = r#"{"bandwidth": "1.25 GB/s", "latency": "0.5 ms"}"#;
    let in_one_box = format!(
        r#"{{{model}, "nodes": [{{"name": "box", "gpus": [{{"device": "rtx-3060-12gb"}}, {{"device": "rtx-3090"}}, {{"device": "rtx-3060-12gb"}}], "gpu_link": "pcie3-x8"}}, {remote}],
            "links": {{"default": {network}}}}}"#
    );
    let gpu = r#"{"bandwidth": 3.94e9, "latency": 3e-5"#;
    let as_machines = format!(
        r#"{{{model}, "nodes": [{{"name": "box/gpu0", "device": "rtx-3060-12gb"}}, {{"name": "box/gpu1", "device": "rtx-3090"}}, {{"name": "box/gpu2", "device": "rtx-3060-12gb"}}, {remote}],
            "links": {{"default": {network}, "pairs": [
                {{"between": ["box/gpu0", "box/gpu1"], {}}}, {{"between": ["box/gpu0", "box/gpu2"], {}}}, {{"between": ["box/gpu1", "box/gpu2"], {}}}]}}}}"#,
        &gpu[1..],
        &gpu[1..],
        &gpu[1..]
    );
    let checked = |json: &str| crate::check(json, crate::check::no_model_files).unwrap().problem;
    let (one_box, machines) = (checked(&in_one_box), checked(&as_machines));
    let (a, b) = (plan(&one_box), plan(&machines));
    assert!(a.feasible && a.stages.len() >= 2, "{:?}", a.stages);
    let split = |p: &Plan| p.stages.iter().map(|s| (s.node.clone(), s.layers)).collect::<Vec<_>>();
    assert_eq!(split(&a), split(&b));
    assert_eq!(a.objective_value(), b.objective_value());
    assert!(
        a.stages
            .iter()
            .all(|s| s.gpu_of.as_ref().is_some_and(|g| s.node == format!("box/gpu{}", g.index)) || s.node == "mini")
    );
    let exhaustive = verify(&one_box, 50_000_000).expect("small enough to search every plan");
    let (found, best) = (a.objective_value().unwrap(), exhaustive.objective_value().unwrap());
    assert!((found - best).abs() <= 1e-9 * best, "optimal {found} vs exhaustive {best}");
}

/// The exact search's tables hold a row per subset of nodes, whatever the merging of
/// identical ones saves in work: 24 alike machines (2^24 subsets of an 80-layer model, 22 GB
/// of tables) go to the heuristic, as do 3 machines × 8 GPUs on their links.
#[test]
fn many_alike_nodes_never_allocate_every_subset() {
    for nodes in [
        r#"[{"name": "gpu", "device": "rtx-3090", "count": 24}]"#,
        r#"[{"name": "box", "count": 3, "gpus": [{"device": "rtx-3090", "count": 8}]}]"#,
    ] {
        let json = format!(r#"{{"model": {{"preset": "llama-3.1-70b", "weights": "q4_k_m"}}, "nodes": {nodes}}}"#);
        let problem = crate::check(json.as_str(), crate::check::no_model_files).unwrap().problem;
        let plan = plan_with(&problem, PlanOptions::bare());
        assert!(plan.feasible, "{nodes}");
        assert_eq!(plan.search.method, "heuristic", "{nodes}: {}", plan.search.detail);
    }
}

//! When nothing fits: how much memory is missing, and the cheapest changes that make a plan
//! fit — a smaller weight format, a shorter context, a smaller KV-cache format, one more node.
//!
//! Each fix is checked by planning the changed scenario, not estimated.

use super::search;
use crate::cost::CostModel;
use crate::model::{Model, WeightFormat};
use crate::plan::{Change, Diagnostic, Level};
use crate::problem::{Node, Problem};
use crate::tensor_type::KV_FORMATS;
use crate::units::format_bytes;

pub(crate) fn fixes(problem: &Problem, cost: &CostModel, allowed: &[bool]) -> Vec<Diagnostic> {
    let mut out = vec![shortfall(problem, cost, allowed)];
    let fits = |p: &Problem| match &p.manual {
        // Stages given by hand stay where they are: a fix must make them fit.
        Some(stages) => {
            let cost = CostModel::new(p);
            !stages.is_empty() && stages.iter().all(|s| cost.fits(s.node, s.start, s.end))
        }
        None => search::any_fit(&CostModel::new(p), &allowed_for(p, allowed)),
    };

    if let Some(format) = smaller_format(problem, &fits) {
        out.push(fix(
            format!("weights in `{format}` fit"),
            format!("set `model.weights` to `{format}`"),
            Some(Change::Weights(format.to_string())),
        ));
    }
    if let Some(context) = shorter_context(problem, &fits) {
        out.push(fix(
            format!("a context of {context} tokens fits"),
            format!("set `workload.context` to {context} or less"),
            Some(Change::Context(context)),
        ));
    }
    if let Some(kv) = smaller_kv(problem, &fits) {
        let apart = problem.workload.kv_v != problem.workload.kv;
        out.push(fix(
            format!("a `{kv}` KV cache fits"),
            format!("set `workload.kv` to `{kv}`{}", if apart { " and leave out `workload.kv_v`" } else { "" }),
            Some(Change::Kv(kv.name().to_owned())),
        ));
    }
    if let Some((text, like)) = one_more_node(problem, allowed, &fits) {
        out.push(fix(text, "add it to `nodes`".to_owned(), like.map(Change::CopyNode)));
    }
    out.extend(disk_reads(problem, cost, allowed));
    out
}

/// Read bandwidth of a fast NVMe disk (PCIe 4.0 ×4), what reading the rest from disk
/// would reach at best.
const FAST_DISK: f64 = 7.0e9;

/// Why a machine with system RAM does not read what its memories cannot hold from disk:
/// llama.cpp can (a mapped file, read again each token when RAM cannot keep it), but every
/// token would read the shortfall at the disk's speed. stageplan does not plan disk reads;
/// it says what they would cost.
fn disk_reads(problem: &Problem, cost: &CostModel, allowed: &[bool]) -> Option<Diagnostic> {
    let tiered = (0..problem.nodes.len()).find(|&k| allowed[k] && cost.nodes[k].host.is_some())?;
    let usable: i128 =
        (0..problem.nodes.len()).filter(|&k| allowed[k]).map(|k| i128::from(cost.nodes[k].capacity.max(0))).sum();
    let short = i128::from(cost.minimum_total(1)) - i128::from(cost.workspace()) - usable;
    if short <= 0 {
        return None;
    }
    let per_token = short as f64 / FAST_DISK;
    Some(Diagnostic {
        level: Level::Info,
        message: format!(
            "disk: llama.cpp could map the model and read the {} that `{}`'s GPU and RAM cannot hold from disk on every token, about {} per token at a fast NVMe disk's 7 GB/s; stageplan does not plan disk reads",
            format_bytes(short as f64),
            crate::quote::line(&problem.nodes[tiered].name),
            crate::units::format_seconds(per_token),
        ),
        fix: None,
        change: None,
    })
}

fn fix(message: String, fix: String, change: Option<Change>) -> Diagnostic {
    Diagnostic { level: Level::Info, message, fix: Some(fix), change }
}

/// `allowed`, extended with `true` for nodes a fix added.
fn allowed_for<'a>(problem: &Problem, allowed: &'a [bool]) -> std::borrow::Cow<'a, [bool]> {
    if problem.nodes.len() == allowed.len() {
        std::borrow::Cow::Borrowed(allowed)
    } else {
        let mut extended = allowed.to_vec();
        extended.resize(problem.nodes.len(), true);
        std::borrow::Cow::Owned(extended)
    }
}

fn shortfall(problem: &Problem, cost: &CostModel, allowed: &[bool]) -> Diagnostic {
    let usable: Vec<usize> = (0..problem.nodes.len()).filter(|&k| allowed[k] && cost.nodes[k].capacity > 0).collect();
    // In `i128`: capacities and sizes come from input; no sum of them overflows there.
    let available: i128 = usable.iter().map(|&k| i128::from(cost.nodes[k].capacity)).sum();
    let stages = usable.len().max(1);
    // Every node used needs its own workspace; `capacity` already took it off.
    let needed = i128::from(cost.minimum_total(stages)) - i128::from(cost.workspace()) * stages as i128;
    let message = if usable.is_empty() {
        "no node has memory left after its reserve and workspace".to_owned()
    } else if needed > available {
        format!(
            "the model needs {} across the cluster but the nodes have {} usable: {} short",
            format_bytes(needed as f64),
            format_bytes(available as f64),
            format_bytes((needed - available) as f64)
        )
    } else {
        let why = if problem.manual.is_some() {
            "the stages given do not fit: move layers off the machines that are over, or plan without `stages`"
        } else {
            "no contiguous split fits: a stage's layers, embedding or head do not fit the node it would land on"
        };
        format!(
            "the nodes have {} usable and the model needs {}, but {why}",
            format_bytes(available as f64),
            format_bytes(needed as f64)
        )
    };
    Diagnostic { level: Level::Error, message, fix: None, change: None }
}

fn smaller_format(problem: &Problem, fits: &dyn Fn(&Problem) -> bool) -> Option<WeightFormat> {
    let current: WeightFormat = problem.model.weights.parse().ok()?;
    let current_bytes = problem.model.weight_bytes();
    let mut candidates: Vec<(u64, WeightFormat)> = WeightFormat::all()
        .into_iter()
        .map(|w| (Model::from_transformer(&problem.model.name, problem.model.arch.clone(), w), w))
        .filter(|(m, w)| *w != current && m.weight_bytes() < current_bytes)
        .map(|(m, w)| (m.weight_bytes(), w))
        .collect();
    // Largest first: the least quality given up.
    candidates.sort_by_key(|c| std::cmp::Reverse(c.0));
    candidates.into_iter().map(|(_, w)| w).find(|&w| {
        let mut changed = problem.clone();
        changed.model = Model::from_transformer(&problem.model.name, problem.model.arch.clone(), w);
        fits(&changed)
    })
}

fn shorter_context(problem: &Problem, fits: &dyn Fn(&Problem) -> bool) -> Option<u64> {
    let with = |context: u64| {
        let mut changed = problem.clone();
        changed.workload.context = context;
        fits(&changed)
    };
    if problem.workload.context <= 1 || !with(1) {
        return None;
    }
    // Never past the model's own maximum: the plan's other note says not to go there.
    let cap = problem.model.arch.max_context.unwrap_or(u64::MAX).max(1);
    if problem.workload.context > cap && with(cap) {
        return Some(cap);
    }
    let (mut lo, mut hi) = (1u64, problem.workload.context.min(cap.saturating_add(1)));
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if with(mid) { lo = mid } else { hi = mid }
    }
    Some(lo)
}

fn smaller_kv(problem: &Problem, fits: &dyn Fn(&Problem) -> bool) -> Option<crate::tensor_type::TensorType> {
    let current = problem.workload.kv.bits_per_weight().max(problem.workload.kv_v.bits_per_weight());
    let mut smaller: Vec<_> = KV_FORMATS.iter().copied().filter(|k| k.bits_per_weight() < current).collect();
    smaller.sort_by(|a, b| b.bits_per_weight().total_cmp(&a.bits_per_weight()));
    smaller.into_iter().find(|&kv| {
        let mut changed = problem.clone();
        (changed.workload.kv, changed.workload.kv_v) = (kv, kv);
        fits(&changed)
    })
}

/// One more copy of an existing machine (the smallest that helps, and its name), or a bare
/// figure.
fn one_more_node(
    problem: &Problem,
    allowed: &[bool],
    fits: &dyn Fn(&Problem) -> bool,
) -> Option<(String, Option<String>)> {
    let mut kinds: Vec<&Node> = Vec::new();
    for (k, node) in problem.nodes.iter().enumerate() {
        let same = |n: &&Node| n.memory == node.memory && n.bandwidth == node.bandwidth && n.compute == node.compute;
        if allowed[k] && !kinds.iter().any(same) {
            kinds.push(node);
        }
    }
    kinds.sort_by_key(|a| a.memory);
    let with = |node: Node| {
        let mut changed = problem.clone();
        changed.links = changed.links.extended();
        changed.nodes.push(node);
        fits(&changed)
    };
    for node in kinds.iter().copied() {
        let mut extra = node.clone();
        extra.name = format!("{}-extra", node.name);
        if with(extra) {
            let what = node.device.as_deref().map_or_else(String::new, |d| format!(" `{d}`"));
            let text =
                format!("one more{what} node like `{}` ({}) makes it fit", node.name, format_bytes(node.memory as f64));
            return Some((text, Some(node.name.clone())));
        }
    }
    let template = kinds.last().copied()?;
    let probe = |memory: u64| Node { name: "extra".to_owned(), memory, ..template.clone() };
    let mut hi = template.memory.max(1 << 30);
    while !with(probe(hi)) {
        hi = hi.checked_mul(2)?;
        if hi > 1 << 50 {
            return None;
        }
    }
    let mut lo = 0u64;
    while hi - lo > 1 << 28 {
        let mid = lo + (hi - lo) / 2;
        if with(probe(mid)) { hi = mid } else { lo = mid }
    }
    Some((format!("one more node with {} of memory makes it fit", format_bytes(hi as f64)), None))
}

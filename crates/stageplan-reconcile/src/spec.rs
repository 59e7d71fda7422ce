//! What is desired (deployments), what exists (nodes) and what is bound (assignments): the
//! records the store keeps, as JSON.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use stageplan::{Plan, Scenario};

/// Most GPUs one node may have: GPU ids are kept as a 128-bit set.
pub const MAX_GPUS_PER_NODE: u32 = 128;
/// Most stages per replica: a replica's bindings and node revisions are one transaction,
/// and etcd allows 128 operations in one.
pub const MAX_STAGES: usize = 60;
/// Most replicas of one deployment, desired or as an autoscaling bound.
pub const MAX_REPLICAS: u32 = 1_000_000;
/// Most moves by choice an hour a deployment may allow itself: one a minute is more than
/// any pipeline can move weights, and each is kept in the record for an hour.
pub const MAX_MOVES_PER_HOUR: u32 = 60;
/// The slowdowns a machine may be learned to have (measured ÷ planned time): the loop
/// clamps what it learns to what the check reads back.
pub const SLOWDOWN: std::ops::RangeInclusive<f64> = 0.01..=100.0;
/// The window `max_moves_per_hour` counts over.
const HOUR_MS: u64 = 3_600_000;

/// A model to keep running: `replicas` copies of a pipeline whose stages come from the
/// planner.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Deployment {
    /// Letters, digits, `-`, `_` and `.`: it is part of every assignment key.
    pub name: String,
    /// What it runs, for people (`llama-3.1-70b q4_k_m`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub model: String,
    /// Desired copies of the pipeline; autoscaling moves it within `min_replicas..=max_replicas`.
    pub replicas: u32,
    #[serde(default)]
    pub min_replicas: Option<u32>,
    #[serde(default)]
    pub max_replicas: Option<u32>,
    #[serde(default)]
    pub placement: Placement,
    /// The pipeline, in order: what each stage needs on one node.
    pub stages: Vec<StageRequest>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscale: Option<Autoscale>,
    /// When autoscaling last changed `replicas` (ms on the controller's clock); persisted so
    /// a restarted controller keeps the cooldown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_scaled_ms: Option<u64>,
    /// The plan behind `stages`, when they were planned from a scenario: with it the loop
    /// re-balances the stages from what it measures (see [`crate::balance`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub planned: Option<Box<Planned>>,
}

/// What the loop needs to re-plan a deployment from measurements, and what it has learned.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Planned {
    /// The scenario as deployed; the loop never edits it (what it learns is kept apart).
    pub scenario: Scenario,
    /// What each stage was predicted to take with what is learned, in pipeline order.
    pub predicted: Vec<Predicted>,
    /// What measurements taught about machines, by machine (and so node) name; absent: as
    /// the scenario says.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub learned: BTreeMap<String, Learned>,
    #[serde(default)]
    pub options: BalanceOptions,
    /// Re-balances, oldest first: the latest [`EVENTS_KEPT`], and before them the moves
    /// `max_moves_per_hour` still counts (without them, refits that move nothing would
    /// push a move out of the record and the limit would forget it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<Rebalance>,
}

/// Re-balances a deployment keeps in its record, the latest, besides the moves the hourly
/// limit counts.
pub const EVENTS_KEPT: usize = 20;

/// How eager re-balancing is.
#[derive(Copy, Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BalanceOptions {
    /// Passes in a row a stage must be skewed before the loop acts (hysteresis: a slow pass
    /// or two is noise, not a slower machine).
    pub passes: u32,
    /// Re-balances that move layers by choice (a machine measured slower or faster, back up,
    /// with memory free again, tried again), per deployment in any hour, at most: a machine
    /// that flaps cannot keep the pipeline moving. Moves forced off a machine that is down or
    /// short of memory always happen and do not count: safety is not rationed, and a machine
    /// flapping down and up is held off by the moves back onto it, which count. From 0 to
    /// [`MAX_MOVES_PER_HOUR`].
    pub max_moves_per_hour: u32,
    /// Accept a split this much slower than the best if it moves fewer bytes (0.03: 3%).
    pub tolerance: f64,
    /// Keep the running split unless the best is this much faster (0.05: 5%).
    pub hysteresis: f64,
    /// A machine the loop moved every stage off for being slow holds nothing to measure:
    /// after this many seconds its slowdown is forgotten, so the plan tries it again.
    pub retry_after_s: u64,
}

impl Default for BalanceOptions {
    fn default() -> Self {
        BalanceOptions { passes: 3, max_moves_per_hour: 4, tolerance: 0.03, hysteresis: 0.05, retry_after_s: 1800 }
    }
}

impl BalanceOptions {
    fn check(&self) -> Result<(), SpecError> {
        let invalid = |field, value: String, problem| Err(SpecError::Invalid { field, value, problem });
        if !(1..=1000).contains(&self.passes) {
            return invalid("planned.options.passes", self.passes.to_string(), "must be from 1 to 1000");
        }
        if self.max_moves_per_hour > MAX_MOVES_PER_HOUR {
            return invalid(
                "planned.options.max_moves_per_hour",
                self.max_moves_per_hour.to_string(),
                "must be from 0 to 60 (a move a minute)",
            );
        }
        if !(60..=604_800).contains(&self.retry_after_s) {
            return invalid(
                "planned.options.retry_after_s",
                self.retry_after_s.to_string(),
                "must be from 60 s to a week",
            );
        }
        for (field, value) in
            [("planned.options.tolerance", self.tolerance), ("planned.options.hysteresis", self.hysteresis)]
        {
            if !(0.0..1.0).contains(&value) {
                return invalid(field, value.to_string(), "must be a fraction from 0 to 1, such as 0.05");
            }
        }
        Ok(())
    }
}

/// A stage's predicted time per decode step.
#[derive(Copy, Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Predicted {
    /// Seconds per step, the hop to the next stage included.
    pub step_s: f64,
    /// Of which the hop: it does not slow down with the machine.
    #[serde(default)]
    pub hop_s: f64,
}

/// What measurements taught about one machine.
#[derive(Copy, Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Learned {
    /// Measured ÷ planned compute time on this machine: 2 runs twice as slow as its figures.
    pub slowdown: f64,
    /// Bytes of the machine's memory that other work holds, kept out of the plan.
    pub memory_taken: u64,
    /// The machine reports itself down: the plan holds nothing on it until it is back.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub down: bool,
}

impl Default for Learned {
    fn default() -> Self {
        Learned { slowdown: 1.0, memory_taken: 0, down: false }
    }
}

/// One re-balance (or a refit that kept the split), as people read it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rebalance {
    /// When (ms on the controller's clock).
    pub at_ms: u64,
    /// What was measured and what was done, in one sentence.
    pub reason: String,
    /// Stages whose layers or node changed.
    #[serde(default)]
    pub moved_stages: usize,
    /// Bytes of weights that move.
    #[serde(default)]
    pub bytes_moved: u64,
    /// Bytes that jumping to the best plan outright would have moved.
    #[serde(default)]
    pub best_plan_bytes: u64,
    /// Forced off a machine down or short of memory: not counted by `max_moves_per_hour`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub forced: bool,
}

impl Rebalance {
    /// Whether `max_moves_per_hour` counts this re-balance at `now_ms`: it moved layers by
    /// choice less than an hour ago.
    pub fn counts(&self, now_ms: u64) -> bool {
        self.moved_stages > 0 && !self.forced && self.at_ms.saturating_add(HOUR_MS) > now_ms
    }
}

/// What one stage of a replica takes from its node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StageRequest {
    /// The blocks `[start, end)` the stage runs (from the plan; informational here).
    #[serde(default)]
    pub layers: [usize; 2],
    /// Bytes of device memory (weights, KV cache, workspace).
    pub memory: u64,
    /// Whole GPUs; 0 for a stage held in RAM (a Mac, a CPU box).
    #[serde(default)]
    pub gpus: u32,
    /// The node the plan put the stage on; the stage is placed there or nowhere (its
    /// predicted time is that machine's). Absent: any node that fits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// On a machine with several GPUs, the ones the plan put the stage on (a
    /// tensor-parallel group's, or one): it takes these ids on `node` or waits. Absent:
    /// the lowest free ids.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpu_ids: Vec<u32>,
}

impl StageRequest {
    /// The plan's name for the stage's node: the machine, or on a machine with several GPUs
    /// its first GPU's (`box/gpu1`), as the planner names it.
    pub fn plan_node(&self) -> Option<String> {
        let node = self.node.as_deref()?;
        Some(self.gpu_ids.first().map_or_else(|| node.to_owned(), |&gpu| stageplan::problem::gpu_node_name(node, gpu)))
    }

    /// Whether `assignment` binds this request as it stands: its layers, memory and GPUs, on
    /// its node and GPU ids where it names them. Otherwise the stage changed and moves, its
    /// replica's turn in the roll.
    pub fn bound_by(&self, assignment: &Assignment) -> bool {
        self.memory == assignment.memory
            && self.gpus as usize == assignment.gpus.len()
            && self.layers == assignment.layers
            && self.node.as_ref().is_none_or(|n| *n == assignment.node)
            // A re-plan may move a stage to other GPUs of its machine.
            && (self.gpu_ids.is_empty() || self.gpu_ids == assignment.gpus)
    }

    /// The stage's node in words, with its GPUs there when the plan names them
    /// (`box/gpu1+gpu2`), as a plan labels its stages.
    pub fn label(&self) -> String {
        let node = self.node.as_deref().unwrap_or_default();
        if self.gpu_ids.is_empty() {
            return node.to_owned();
        }
        let gpus: Vec<String> = self.gpu_ids.iter().map(|g| format!("gpu{g}")).collect();
        format!("{node}/{}", gpus.join("+"))
    }
}

/// How to choose among nodes that fit.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Placement {
    /// The fullest node that fits (Kubernetes' MostAllocated): keeps whole machines free.
    #[default]
    BinPack,
    /// The emptiest node (LeastAllocated): spreads load and failure.
    Spread,
}

/// Scale `replicas` so each runs near `target` utilization.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Autoscale {
    /// Utilization per replica to aim for, in (0, 1].
    pub target: f64,
    /// No change while utilization is within this fraction of the target (hysteresis).
    #[serde(default = "default_tolerance")]
    pub tolerance: f64,
    /// Milliseconds after a change before scaling up again.
    #[serde(default = "default_up_cooldown")]
    pub up_cooldown_ms: u64,
    /// Milliseconds after a change before scaling down again.
    #[serde(default = "default_down_cooldown")]
    pub down_cooldown_ms: u64,
}

fn default_tolerance() -> f64 {
    0.1
}
fn default_up_cooldown() -> u64 {
    30_000
}
fn default_down_cooldown() -> u64 {
    300_000
}

/// A machine the controller may place stages on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Node {
    pub name: String,
    /// Bytes of memory stages may take (device memory, or RAM for GPU-less nodes).
    pub memory: u64,
    /// GPUs, with ids `0..gpus`.
    #[serde(default)]
    pub gpus: u32,
}

impl Node {
    /// What a machine offers stages, from its devices as a scenario checks them
    /// ([`stageplan::check::machine_nodes`]): each device's memory less what it keeps back,
    /// as a stage asks for its memory less its reserve ([`planned_stages`]); its GPUs, a
    /// device each (a Mac's or a CPU's memory is RAM, which takes none). System RAM beside a
    /// GPU is not counted: stages ask for device memory.
    pub fn offered(name: &str, devices: &[stageplan::problem::Node]) -> Node {
        let gpus =
            devices.iter().filter(|d| d.gpu_of.is_some() || d.kind == Some(stageplan::device::DeviceKind::Gpu)).count();
        Node {
            name: name.to_owned(),
            memory: devices.iter().map(|d| d.memory.saturating_sub(d.reserve)).fold(0, u64::saturating_add),
            gpus: u32::try_from(gpus).unwrap_or(u32::MAX),
        }
    }
}

/// One stage of one replica bound to a node: what the store persists, keyed by
/// [`assignment_key`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Assignment {
    pub node: String,
    /// The blocks `[start, end)` the stage runs, as its request said when it was bound.
    #[serde(default)]
    pub layers: [usize; 2],
    /// The GPU ids taken on `node`.
    #[serde(default)]
    pub gpus: Vec<u32>,
    /// Bytes reserved on `node`.
    pub memory: u64,
    pub status: Status,
}

/// Whether a replica's bindings, by stage, are a pipeline that serves: every stage from the
/// first bound and running, the first from block 0 and each from where the one before ends.
/// During a roll a replica serves the split it was bound with, which may be an older plan's
/// than its deployment's (other layers, more or fewer stages) until its turn.
pub fn is_whole_pipeline(bindings: &BTreeMap<usize, &Assignment>) -> bool {
    let mut next_layer = 0;
    for (expected, (&stage, assignment)) in bindings.iter().enumerate() {
        if stage != expected || assignment.status != Status::Running || assignment.layers[0] != next_layer {
            return false;
        }
        next_layer = assignment.layers[1];
    }
    !bindings.is_empty()
}

/// A bound stage's state. A replica with no binding yet is pending (see the pass report).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Running,
    /// Reported failed: the next pass releases the replica and places it again.
    Failed,
}

/// A plan's stages as requests pinned to their machines, with what each is predicted to
/// take; `gpus` says how many GPUs a stage takes, but on a machine with several, where the
/// stage takes the plan's GPUs there (and a group's memory is each GPU's share times its GPUs).
pub fn planned_stages(
    plan: &Plan,
    gpus: impl Fn(&stageplan::plan::Stage) -> u32,
) -> (Vec<StageRequest>, Vec<Predicted>) {
    plan.stages
        .iter()
        .map(|s| {
            let memory = s.memory.total.saturating_sub(s.memory.reserve);
            let request = match &s.gpu_of {
                Some(g) => {
                    let gpu_ids = if s.tensor_parallel.is_empty() { vec![g.index] } else { s.tensor_parallel.clone() };
                    StageRequest {
                        layers: s.layers,
                        memory: memory.saturating_mul(gpu_ids.len() as u64),
                        gpus: gpu_ids.len() as u32,
                        node: Some(g.machine.clone()),
                        gpu_ids,
                    }
                }
                None => StageRequest {
                    layers: s.layers,
                    memory,
                    gpus: gpus(s),
                    node: Some(s.node.clone()),
                    gpu_ids: Vec::new(),
                },
            };
            (request, Predicted { step_s: s.time_s, hop_s: s.time.send_s.min(s.time_s * 0.5) })
        })
        .unzip()
}

/// The deterministic id of a replica's stage: `"{deployment}/{replica}/{stage}"`.
pub fn assignment_key(deployment: &str, replica: u32, stage: usize) -> String {
    format!("{deployment}/{replica}/{stage}")
}

/// Splits an assignment key into deployment, replica and stage.
pub fn parse_assignment_key(key: &str) -> Option<(&str, u32, usize)> {
    let mut parts = key.rsplitn(3, '/');
    let stage = parts.next()?.parse().ok()?;
    let replica = parts.next()?.parse().ok()?;
    Some((parts.next()?, replica, stage))
}

/// Why a record cannot be stored, naming the field and the fix.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum SpecError {
    #[error("`{field}` `{value}` {problem}")]
    Invalid { field: &'static str, value: String, problem: &'static str },
    /// A machine of a planned deployment's scenario whose name (`nodes[index].name`, as
    /// written) cannot be a node's: the loop could never place a stage on it.
    #[error("`planned.scenario.nodes[{index}].name` `{name}` {problem}")]
    Machine { index: usize, name: String, problem: String },
}

/// The names that may be part of a store key (a deployment's, a node's), in words.
macro_rules! name_rule {
    () => {
        "1–200 letters, digits, `-`, `_` or `.`"
    };
}

/// Whether `name` may be part of a store key: as `name_rule!()` says.
pub fn is_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 200
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

fn valid_name(field: &'static str, name: &str) -> Result<(), SpecError> {
    if !is_name(name) {
        return Err(SpecError::Invalid {
            field,
            value: name.to_owned(),
            problem: concat!("is not a name; use ", name_rule!()),
        });
    }
    Ok(())
}

/// Every machine of `scenario` can be a cluster node: a planned stage runs on the node
/// named as its machine, and what the loop learns is kept by machine name (see
/// [`Planned::learned`]). The scenario's own check allows more (spaces, any letter, 256
/// characters); a machine it allows that no node can be named as would hold no stage, and
/// every re-plan that used it (a fail-over off a machine down) would be held. The names are
/// the planner's: trimmed, and with `count` the machines `name-1` … `name-N`, the longest
/// of which is checked.
fn machines_are_nodes(scenario: &Scenario) -> Result<(), SpecError> {
    for (index, spec) in scenario.nodes.iter().enumerate() {
        let name = spec.name.trim();
        let problem = if !is_name(name) {
            format!(
                "cannot be a cluster node's name, and the loop places this machine's stages on the node of its name; rename the machine with {}, as its node is registered",
                name_rule!()
            )
        } else if let Some(count) = spec.count.filter(|&count| !is_name(&spec.machine_name(count))) {
            format!(
                "with `count` {count} names machines up to `{name}-{count}`, past the 200 characters of a cluster node's name; shorten it"
            )
        } else {
            continue;
        };
        return Err(SpecError::Machine { index, name: name.to_owned(), problem });
    }
    Ok(())
}

impl Deployment {
    /// `replicas` fixed copies of `stages`, bin-packed, without autoscaling.
    pub fn new(name: impl Into<String>, replicas: u32, stages: Vec<StageRequest>) -> Deployment {
        Deployment {
            name: name.into(),
            model: String::new(),
            replicas,
            min_replicas: None,
            max_replicas: None,
            placement: Placement::BinPack,
            stages,
            autoscale: None,
            last_scaled_ms: None,
            planned: None,
        }
    }

    /// A deployment of `replicas` copies of `plan`'s pipeline, each stage taking the memory
    /// the plan counts for it (without the node's own reserve) and `gpus_per_stage` GPUs.
    pub fn from_plan(name: &str, plan: &Plan, replicas: u32, gpus_per_stage: u32) -> Deployment {
        let stages = plan
            .stages
            .iter()
            .map(|s| StageRequest {
                layers: s.layers,
                memory: s.memory.total.saturating_sub(s.memory.reserve),
                gpus: gpus_per_stage,
                node: None,
                gpu_ids: Vec::new(),
            })
            .collect();
        let model = format!("{} {}", plan.model.name, plan.model.weights).trim().to_owned();
        Deployment { model, ..Deployment::new(name, replicas, stages) }
    }

    /// The replica bounds autoscaling keeps to, within [`MAX_REPLICAS`].
    pub fn bounds(&self) -> (u32, u32) {
        let min = self.min_replicas.unwrap_or(self.replicas.min(1)).min(MAX_REPLICAS);
        (min, self.max_replicas.unwrap_or(self.replicas.max(min)).clamp(min, MAX_REPLICAS))
    }

    /// Checks what a pass relies on.
    ///
    /// # Errors
    /// A bad name, no stages, a stage asking for more GPUs than a node can have, more than
    /// [`MAX_REPLICAS`] replicas (desired or as a bound), bounds out of order, an autoscale
    /// target outside (0, 1].
    pub fn check(&self) -> Result<(), SpecError> {
        valid_name("name", &self.name)?;
        let invalid = |field, value: String, problem| Err(SpecError::Invalid { field, value, problem });
        if self.stages.is_empty() {
            return invalid("stages", "[]".into(), "is empty; give one request per pipeline stage (from a plan)");
        }
        if self.stages.len() > MAX_STAGES {
            return invalid(
                "stages",
                self.stages.len().to_string(),
                "is more stages than one replica's transaction can bind (at most 60)",
            );
        }
        // Before the stages: a stage on a machine no node can be named as is that machine's fault.
        if let Some(planned) = &self.planned {
            planned.check(&self.stages)?;
        }
        for (field, value) in [("replicas", Some(self.replicas)), ("max_replicas", self.max_replicas)] {
            if let Some(value) = value.filter(|&v| v > MAX_REPLICAS) {
                return invalid(field, value.to_string(), "is more than 1,000,000");
            }
        }
        for stage in &self.stages {
            if stage.gpus > MAX_GPUS_PER_NODE {
                return invalid("stages[].gpus", stage.gpus.to_string(), "is more GPUs than a node can have (128)");
            }
            if stage.memory == 0 && stage.gpus == 0 {
                return invalid("stages[].memory", "0".into(), "asks for nothing; give the stage's bytes");
            }
            if let Some(node) = &stage.node {
                valid_name("stages[].node", node)?;
            }
            if !stage.gpu_ids.is_empty() {
                let ids = format!("{:?}", stage.gpu_ids);
                let distinct = stage.gpu_ids.iter().enumerate().all(|(i, g)| !stage.gpu_ids[..i].contains(g));
                if stage.node.is_none() {
                    return invalid(
                        "stages[].gpu_ids",
                        ids,
                        "names GPUs of no node; give the stage's `node`, or leave them out",
                    );
                }
                if stage.gpu_ids.len() != stage.gpus as usize
                    || !distinct
                    || stage.gpu_ids.iter().any(|&g| g >= MAX_GPUS_PER_NODE)
                {
                    return invalid(
                        "stages[].gpu_ids",
                        ids,
                        "must be `gpus` distinct GPU ids below 128, the ones the plan put the stage on",
                    );
                }
            }
        }
        let (min, max) = (self.min_replicas.unwrap_or(0), self.max_replicas.unwrap_or(u32::MAX));
        if min > max || self.replicas < min || self.replicas > max {
            return invalid(
                "replicas",
                format!("{} (min {min}, max {max})", self.replicas),
                "is outside its bounds; keep min_replicas ≤ replicas ≤ max_replicas",
            );
        }
        if let Some(a) = &self.autoscale {
            if self.max_replicas.is_none() {
                return invalid(
                    "max_replicas",
                    "none".into(),
                    "is needed with `autoscale`: give the most replicas to scale to",
                );
            }
            if !(a.target > 0.0 && a.target <= 1.0) {
                return invalid("autoscale.target", a.target.to_string(), "must be in (0, 1]");
            }
            if !(a.tolerance >= 0.0 && a.tolerance < 1.0) {
                return invalid("autoscale.tolerance", a.tolerance.to_string(), "must be in [0, 1)");
            }
        }
        Ok(())
    }
}

impl Planned {
    /// The plan's name for the node of a bound stage: its machine, or on a machine with
    /// several GPUs (a `gpus` list in the scenario) the first GPU the stage holds there
    /// (`box/gpu1`), as the planner names it.
    pub fn plan_node(&self, assignment: &Assignment) -> String {
        let machine = assignment.node.as_str();
        // A checked scenario has at most `MAX_NODES` machines, so `count` is that small.
        let several = self.scenario.nodes.iter().filter(|n| n.gpus.is_some()).any(|n| {
            (1..=n.count.unwrap_or(1).min(stageplan::limits::MAX_NODES as u32)).any(|k| n.machine_name(k) == machine)
        });
        match assignment.gpus.first() {
            Some(&gpu) if several => stageplan::problem::gpu_node_name(machine, gpu),
            _ => machine.to_owned(),
        }
    }

    /// Checks what re-balancing relies on: every machine of the scenario a possible node,
    /// one prediction per stage, every stage on a named node, figures that are numbers.
    ///
    /// # Errors
    /// The first field that is wrong, with the fix.
    pub fn check(&self, stages: &[StageRequest]) -> Result<(), SpecError> {
        let invalid = |field, value: String, problem| Err(SpecError::Invalid { field, value, problem });
        machines_are_nodes(&self.scenario)?;
        if self.predicted.len() != stages.len() {
            return invalid(
                "planned.predicted",
                format!("{} entries for {} stages", self.predicted.len(), stages.len()),
                "must hold one prediction per stage; deploy the scenario again",
            );
        }
        if stages.iter().any(|s| s.node.is_none()) {
            return invalid(
                "stages[].node",
                "none".into(),
                "is needed on every stage of a planned deployment: its predictions are its machine's",
            );
        }
        for p in &self.predicted {
            if !(p.step_s.is_finite() && p.step_s > 0.0 && p.hop_s.is_finite() && (0.0..p.step_s).contains(&p.hop_s)) {
                return invalid(
                    "planned.predicted[].step_s",
                    p.step_s.to_string(),
                    "must be positive seconds, above the hop's `hop_s`",
                );
            }
        }
        for (name, learned) in &self.learned {
            valid_name("planned.learned", name)?;
            if !SLOWDOWN.contains(&learned.slowdown) {
                return invalid(
                    "planned.learned[].slowdown",
                    learned.slowdown.to_string(),
                    "must be a factor from 0.01 to 100",
                );
            }
        }
        self.options.check()
    }
}

impl Node {
    /// Checks the name and GPU count.
    ///
    /// # Errors
    /// A bad name or more GPUs than [`MAX_GPUS_PER_NODE`].
    pub fn check(&self) -> Result<(), SpecError> {
        valid_name("name", &self.name)?;
        if self.gpus > MAX_GPUS_PER_NODE {
            return Err(SpecError::Invalid {
                field: "gpus",
                value: self.gpus.to_string(),
                problem: "is more than 128; register large machines as several nodes",
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;

//! Exporting a plan to the engines people run: the exact flags, files and manifests that
//! reproduce its stages.
//!
//! Every target takes the same checked [`Layout`] (stages in pipeline order, contiguous,
//! covering every layer, each machine once) and returns text to paste or save, with notes on
//! what the target cannot express. The text is pure: no I/O, so the CLI and the browser emit
//! the same bytes.
//!
//! | target | what it emits |
//! |---|---|
//! | [`Target::LlamaCpp`] | `rpc-server` and `llama-server` commands: `--rpc`, `--device` order, `-ts` that reproduces the layer counts under llama.cpp's float32 split, `-ngl`, `-c`, `-np`, `-ctk/-ctv` |
//! | [`Target::Vllm`] | Ray commands and `vllm serve` with `--pipeline-parallel-size` and `VLLM_PP_LAYER_PARTITION` |
//! | [`Target::Exo`] | per-node layer ranges as exo's shards (JSON) |
//! | [`Target::Kubernetes`] | a Deployment per stage pinned to its node, GPU requests, a Service per stage (YAML) |
//! | [`Target::DeepSpeed`] | `PipelineModule` partition boundaries (Python) |
//! | [`Target::Megatron`] | `--pipeline-model-parallel-layout` and the sizes it needs |

mod exo;
mod kubernetes;
mod llama_cpp;
mod replicas;
mod training;
mod vllm;

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

// The planner's bounds: a plan past them did not come from `stageplan plan`. `MAX_LAYERS` is
// also small enough that every count and share stays exact in llama.cpp's float32 split, and
// `MAX_CONTEXT` far below the 32-bit integer llama.cpp and vLLM take.
use crate::device::DeviceKind;
use crate::limits::{MAX_CONTEXT, MAX_GPUS_PER_MACHINE, MAX_LAYERS, MAX_PREFILL_CHUNK, MAX_THREADS};
use crate::plan::Plan;
use crate::presets::ModelPreset;
use crate::problem::Problem;

pub use llama_cpp::{Launch, RPC_SERVER, Word, llama_cpp_layers, tensor_split};
pub use replicas::{BALANCER_PORT, REPLICA_PORT, ReplicaPlan, replicas};

/// An engine a plan can be exported to.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Target {
    #[serde(rename = "llama.cpp")]
    LlamaCpp,
    Vllm,
    Exo,
    Kubernetes,
    #[serde(rename = "deepspeed")]
    DeepSpeed,
    Megatron,
}

impl Target {
    /// Every target, in the order the CLI and the page list them.
    pub const ALL: [Target; 6] =
        [Target::LlamaCpp, Target::Vllm, Target::Exo, Target::Kubernetes, Target::DeepSpeed, Target::Megatron];

    /// The name `--to` takes.
    pub fn name(self) -> &'static str {
        match self {
            Target::LlamaCpp => "llama.cpp",
            Target::Vllm => "vllm",
            Target::Exo => "exo",
            Target::Kubernetes => "kubernetes",
            Target::DeepSpeed => "deepspeed",
            Target::Megatron => "megatron",
        }
    }

    /// The target that runs a plan made for `engine`; none for the generic engine, which
    /// plans for no engine in particular.
    pub fn of_engine(engine: crate::engine::Engine) -> Option<Target> {
        let name = engine.rules().export?;
        Target::ALL.into_iter().find(|t| t.name() == name)
    }

    /// A file name for the export.
    pub fn file_name(self) -> &'static str {
        match self {
            Target::LlamaCpp => "llama-cpp.sh",
            Target::Vllm => "vllm.sh",
            Target::Exo => "exo-partitions.json",
            Target::Kubernetes => "stageplan-pipeline.yaml",
            Target::DeepSpeed => "deepspeed_partition.py",
            Target::Megatron => "megatron-args.sh",
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Target {
    type Err = ExportError;

    fn from_str(s: &str) -> Result<Target, ExportError> {
        let wanted = s.trim().to_ascii_lowercase();
        let found = match wanted.as_str() {
            "llama.cpp" | "llama-cpp" | "llamacpp" | "llama-server" => Some(Target::LlamaCpp),
            "k8s" => Some(Target::Kubernetes),
            _ => Target::ALL.into_iter().find(|t| t.name() == wanted),
        };
        found.ok_or_else(|| ExportError::Target(s.to_owned()))
    }
}

/// Why a plan cannot be exported, with the fix.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ExportError {
    #[error("`{0}` is not an export target; use one of llama.cpp, vllm, exo, kubernetes, deepspeed, megatron")]
    Target(String),
    #[error("`stages` is empty{0}; export a plan that fits (see its diagnostics)")]
    Empty(&'static str),
    #[error("`feasible` is false: the plan does not fit its machines; fix what its diagnostics say, then export")]
    Infeasible,
    #[error("`{field}` {problem}")]
    Plan { field: &'static str, problem: String },
    #[error(
        "{target} takes at most {max} stages and the plan has {stages}; plan on fewer machines (llama.cpp's device limit is 16, one of them its CPU)"
    )]
    TooManyStages { target: &'static str, max: usize, stages: usize },
    #[error("`stages[{index}].layers` {problem}")]
    Layers { index: usize, problem: String },
    #[error("`stages[{index}].node` {problem}")]
    Node { index: usize, problem: String },
    #[error("`stages[{index}].{field}` {problem}")]
    Stage { index: usize, field: &'static str, problem: String },
    #[error(
        "`--host` gives `{first}` and `{second}` the same address, `{address}`: two {server}s cannot listen on one port; give one of them another port (`{second}=HOST:PORT`)"
    )]
    SameAddress { first: String, second: String, address: String, server: &'static str },
    #[error(
        "the plan runs several GPUs of `{machine}`, which this version exports for llama.cpp, Kubernetes, DeepSpeed and Megatron-LM, and for vLLM when every stage is on that machine or each is a tensor-parallel group on a machine of its own (exo runs one device a machine); export it with `--to {instead}`, or describe `{machine}`'s GPUs as machines of their own for {target}"
    )]
    SeveralGpus { target: Target, machine: String, instead: Target },
    /// An option named by the command line's flag (`--main`; [`ExportOptions`]' fields
    /// are the flags' values).
    #[error("`{option}` names `{node}`, which is not a node of the plan; use one of {nodes}")]
    UnknownNode { option: &'static str, node: String, nodes: String },
    /// An option's value (`--host`, `--main`, `--model`, `--image`, `--to`), named by the
    /// command line's flag.
    #[error("`{option}` `{value}` {problem}")]
    Option { option: &'static str, value: String, problem: &'static str },
    #[error("the plan {0}; export what `stageplan plan --format json` printed")]
    Json(String),
    /// What a replica's plan cannot be exported as ([`replicas()`]), naming the replica.
    #[error("in `replicas.replicas[{index}].plan`: {error}")]
    InReplica { index: usize, error: Box<ExportError> },
    /// The text is not JSON at all (serde_json's words).
    #[error("is not valid JSON ({0}); give a plan or a scenario")]
    NotJson(String),
}

/// Settings an export cannot read from the plan.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ExportOptions {
    /// Network address of each node (`host` or `host:port`); defaults to the node's name.
    pub hosts: BTreeMap<String, String>,
    /// The model as the engine names it: a `.gguf` path for llama.cpp, a Hugging Face id for
    /// vLLM and exo. Defaults from the plan's model.
    pub model: Option<String>,
    /// The node that runs `llama-server` or the Ray head; defaults to the first stage's.
    pub main: Option<String>,
    /// Each node's kind (from its device preset when exporting a scenario).
    pub kinds: BTreeMap<String, DeviceKind>,
    /// Container image for Kubernetes.
    pub image: Option<String>,
}

impl ExportOptions {
    /// Options with each node's kind from the scenario (given, or its device preset's).
    pub fn for_problem(problem: &Problem) -> ExportOptions {
        let kinds = problem.nodes.iter().filter_map(|n| Some((n.name.clone(), n.kind?))).collect();
        ExportOptions { kinds, ..ExportOptions::default() }
    }

    /// Options with each stage's kind as the plan recorded it.
    pub fn for_plan(plan: &Plan) -> ExportOptions {
        ExportOptions::for_plans(std::slice::from_ref(plan))
    }

    /// Options with each stage's kind as its plan recorded it, over several plans (replicas,
    /// each on machines of its own).
    pub fn for_plans<'a>(plans: impl IntoIterator<Item = &'a Plan>) -> ExportOptions {
        let stages = plans.into_iter().flat_map(|plan| &plan.stages);
        let kinds = stages.filter_map(|s| Some((s.node.clone(), s.kind?))).collect();
        ExportOptions { kinds, ..ExportOptions::default() }
    }
}

/// An export: the text and what the target could not express.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Export {
    pub target: Target,
    pub file_name: String,
    pub text: String,
    /// What the target cannot express and what the export did instead.
    pub notes: Vec<String>,
}

/// What [`unsafe_text()`] refuses, in words, for every field and option it checks.
macro_rules! unsafe_words {
    () => {
        "holds a control, line-separator or bidirectional character"
    };
}

/// The one rule for text a plan or an option puts into a command, a manifest or a comment
/// (`model.weights`, `model.file`, `--model`, `--image`): none of the characters
/// [`crate::quote::unsafe_char`] names, which the engines would take as something else (a
/// CR reached `llama-server -m` as `\r`). A refusal: the text, quoted, and what it holds.
fn unsafe_text(text: &str) -> Option<String> {
    text.chars().any(crate::quote::unsafe_char).then(|| format!("`{}` {}", crate::quote::line(text), unsafe_words!()))
}

/// A tensor-parallel stage as the planner writes it: on a machine's GPUs (`gpu_of` its
/// first), two to 16 distinct GPU numbers, as many as the first stage's (one degree for the
/// whole plan, as vLLM's `--tensor-parallel-size`).
fn check_tensor_parallel(
    index: usize,
    stage: &crate::plan::Stage,
    first: &crate::plan::Stage,
) -> Result<(), ExportError> {
    let group = &stage.tensor_parallel;
    if group.is_empty() && first.tensor_parallel.is_empty() {
        return Ok(());
    }
    let degree = first.tensor_parallel.len();
    let problem = |problem: String| Err(ExportError::Stage { index, field: "tensor_parallel", problem });
    let Some(gpu) = &stage.gpu_of else {
        return problem("is given for a stage without `gpu_of`; give the machine's GPU it starts on".to_owned());
    };
    let distinct = group.iter().enumerate().all(|(i, g)| !group[..i].contains(g));
    if group.len() != degree || group.len() < 2 || group.len() > MAX_GPUS_PER_MACHINE || !distinct {
        return problem(format!(
            "lists {} GPUs where the first stage lists {degree}; every stage of a tensor-parallel plan is a group of the same 2 to {MAX_GPUS_PER_MACHINE} distinct GPUs",
            group.len()
        ));
    }
    if group[0] != gpu.index || group.iter().any(|&g| g as usize >= MAX_GPUS_PER_MACHINE) {
        return problem(format!(
            "starts at GPU {}, not `gpu_of`'s {}, or names a GPU past {}; list the GPUs from `gpu_of`'s",
            group[0],
            gpu.index,
            MAX_GPUS_PER_MACHINE - 1
        ));
    }
    Ok(())
}

/// A stage's `offload`, as the planner writes it: whole layers in host RAM from a first
/// stage's first layer, FFN layers inside the stage after them or at its end, and the head
/// in host RAM only with every layer there on a one-stage plan.
fn check_offload(
    index: usize,
    stage: &crate::plan::Stage,
    offload: &crate::plan::StageOffload,
    stages: usize,
) -> Result<(), ExportError> {
    let [start, end] = stage.layers;
    let problem = |field: &'static str, problem: String| Err(ExportError::Stage { index, field, problem });
    let [h0, h1] = offload.host_range;
    if h0 != start || h1 < h0 || h1 > end || h1 - h0 != offload.host_layers {
        return problem(
            "offload.host_range",
            format!("is `[{h0}, {h1}]`; give `[{start}, {start} + host_layers]`, inside the stage's layers"),
        );
    }
    if offload.host_layers > 0 && index > 0 {
        return problem(
            "offload.host_layers",
            format!(
                "is {}; only the first stage keeps whole layers in host RAM (llama.cpp runs them where llama-server runs): give 0",
                offload.host_layers
            ),
        );
    }
    let [f0, f1] = offload.ffn_layers;
    if f0 < h1 || f1 < f0 || f1 > end || f1 - f0 != offload.host_ffn {
        return problem(
            "offload.ffn_layers",
            format!(
                "is `[{f0}, {f1}]`; give {} layers between the host layers' end ({h1}) and the stage's ({end})",
                offload.host_ffn
            ),
        );
    }
    if !(1..=MAX_THREADS).contains(&offload.threads) {
        return problem(
            "offload.threads",
            format!(
                "is {}; give the threads llama.cpp's CPU runs the stage's RAM part with, 1 to {MAX_THREADS}",
                offload.threads
            ),
        );
    }
    if offload.head_on_host && (stages != 1 || h1 != end) {
        return problem(
            "offload.head_on_host",
            "is true, but only a one-stage plan with every layer in host RAM keeps its head there: give false"
                .to_owned(),
        );
    }
    Ok(())
}

/// A plan's stages, checked: contiguous, from layer 0 to the last, each node once.
#[derive(Clone, Debug, PartialEq)]
pub struct Layout<'p> {
    pub plan: &'p Plan,
    pub stages: Vec<(&'p str, usize, usize)>,
    pub layers: usize,
    options: &'p ExportOptions,
    /// What the layout noticed in the options (addresses of machines the plan leaves out).
    notes: Vec<String>,
}

impl<'p> Layout<'p> {
    /// Checks `plan`'s stages and `options`' node names.
    ///
    /// # Errors
    /// No stages, a plan that does not fit, gaps, overlaps, empty or repeated nodes, or
    /// a `main` the plan does not have (an address for a machine it leaves out is a note).
    pub fn new(plan: &'p Plan, options: &'p ExportOptions) -> Result<Layout<'p>, ExportError> {
        if plan.stages.is_empty() {
            return Err(ExportError::Empty(if plan.feasible { "" } else { " (nothing fits)" }));
        }
        if !plan.feasible {
            return Err(ExportError::Infeasible);
        }
        let plan_error = |field, problem: &str| Err(ExportError::Plan { field, problem: problem.to_owned() });
        if plan.model.layers > MAX_LAYERS {
            return plan_error("model.layers", "is over 10,000; no model has that many blocks");
        }
        if plan.model.nextn_layers > MAX_LAYERS {
            return plan_error("model.nextn_layers", "is over 10,000; no model has that many blocks");
        }
        if plan.workload.context == 0 || plan.workload.context > MAX_CONTEXT {
            return plan_error(
                "workload.context",
                &format!(
                    "is missing or out of range (1 to {MAX_CONTEXT} tokens); export a plan `stageplan plan` printed"
                ),
            );
        }
        if plan.workload.batch == 0 || plan.workload.batch > 1 << 20 {
            return plan_error("workload.batch", "is missing or out of range (1 to 2^20 sequences)");
        }
        if plan.workload.kv.is_empty() {
            return plan_error("workload.kv", "is missing; export a plan `stageplan plan` printed");
        }
        for (field, text) in [("workload.kv", Some(&plan.workload.kv)), ("workload.kv_v", plan.workload.kv_v.as_ref())]
        {
            if let Some(shown) = text.and_then(|t| unsafe_text(t)) {
                return plan_error(field, &format!("{shown}; give a KV-cache format (`f16`, `q8_0`, …)"));
            }
            // A name no plan has: the cache it was planned with is unknown.
            if let Some(Err(unknown)) = text.map(|t| crate::tensor_type::kv_format(t)) {
                return plan_error(field, &format!("{unknown}; export what `stageplan plan` printed"));
            }
        }
        if plan.workload.prefill_chunk == 0 || plan.workload.prefill_chunk > MAX_PREFILL_CHUNK {
            return plan_error(
                "workload.prefill_chunk",
                &format!(
                    "is {}; give the prompt tokens per prefill step, 1 to {MAX_PREFILL_CHUNK}",
                    plan.workload.prefill_chunk
                ),
            );
        }
        if let Some(shown) = unsafe_text(&plan.model.weights) {
            return plan_error("model.weights", &format!("{shown}; give the weights' format (`q4_k_m`, `bf16`, …)"));
        }
        if let Some(file) = &plan.model.file {
            if file.is_empty() {
                return plan_error("model.file", "is empty; give the model file's path, or leave the field out");
            }
            if let Some(shown) = unsafe_text(file) {
                return plan_error("model.file", &format!("{shown}; give the model file's path without one"));
            }
        }
        let mut next = 0;
        let mut stages = Vec::with_capacity(plan.stages.len());
        for (index, stage) in plan.stages.iter().enumerate() {
            let [start, end] = stage.layers;
            let layers_error = |problem: String| Err(ExportError::Layers { index, problem });
            if end < start {
                return layers_error(format!(
                    "`[{start}, {end}]` ends before it starts; give `[start, end]` with end > start"
                ));
            }
            if end == start {
                return layers_error(format!("`[{start}, {end}]` is empty; give the stage at least one layer"));
            }
            if start > next {
                let missing =
                    if start - next == 1 { format!("layer {next}") } else { format!("layers {next}–{}", start - 1) };
                return layers_error(format!("`[{start}, {end}]` leaves {missing} on no machine; start it at {next}"));
            }
            if start < next {
                return layers_error(format!("`[{start}, {end}]` overlaps the stage before; start it at {next}"));
            }
            if end > MAX_LAYERS || (plan.model.layers > 0 && end > plan.model.layers) {
                let layers = plan.model.layers;
                return layers_error(format!(
                    "`[{start}, {end}]` runs past the model's {layers} layers; end it at {layers} at most"
                ));
            }
            if let Some(threads) = stage.threads
                && !(1..=MAX_THREADS).contains(&threads)
            {
                return Err(ExportError::Stage {
                    index,
                    field: "threads",
                    problem: format!("is {threads}; give the threads llama.cpp runs with, 1 to {MAX_THREADS}"),
                });
            }
            if let Some(offload) = &stage.offload {
                check_offload(index, stage, offload, plan.stages.len())?;
            }
            let name = stage.node.as_str();
            if let Some(gpu) = &stage.gpu_of {
                // The machine's name reaches commands as a host; the GPU's is its machine's
                // and its number, as the planner names it.
                if !valid_node_name(&gpu.machine) || gpu.index as usize >= MAX_GPUS_PER_MACHINE {
                    return Err(ExportError::Stage {
                        index,
                        field: "gpu_of",
                        problem: format!(
                            "names GPU {} of `{}`; give a machine name of 1–63 letters, digits, `-`, `_` or `.` and a GPU number below {MAX_GPUS_PER_MACHINE}",
                            gpu.index,
                            crate::quote::line(&gpu.machine)
                        ),
                    });
                }
                if name != crate::problem::gpu_node_name(&gpu.machine, gpu.index) {
                    return Err(ExportError::Node {
                        index,
                        problem: format!(
                            "`{}` is not GPU {} of `{}`; name it `{}/gpu{}`, as the planner does",
                            crate::quote::line(name),
                            gpu.index,
                            gpu.machine,
                            gpu.machine,
                            gpu.index
                        ),
                    });
                }
            } else if !valid_node_name(name) {
                return Err(ExportError::Node {
                    index,
                    problem: format!(
                        "`{name}` cannot be a host or resource name; use 1–63 letters, digits, `-`, `_` or `.`, with a letter unless it is an IPv4 address (resolvers read `10.1` as 10.0.0.1)"
                    ),
                });
            }
            check_tensor_parallel(index, stage, &plan.stages[0])?;
            if stages.iter().any(|&(n, _, _)| n == name) {
                return Err(ExportError::Node {
                    index,
                    problem: format!("`{name}` holds two stages; a machine holds one"),
                });
            }
            stages.push((name, start, end));
            next = end;
        }
        let layers = if plan.model.layers > 0 { plan.model.layers } else { next };
        if next != layers {
            let index = stages.len() - 1;
            return Err(ExportError::Layers {
                index,
                problem: format!("ends at layer {next}, but the model has {layers}; end the last stage at {layers}"),
            });
        }
        let known = |node: &str| {
            plan.stages.iter().any(|s| s.node == node || s.gpu_of.as_ref().is_some_and(|g| g.machine == node))
        };
        let nodes = || stages.iter().map(|&(n, _, _)| format!("`{n}`")).collect::<Vec<_>>().join(", ");
        for rider in &plan.riders {
            if !known(&rider.node) {
                return plan_error(
                    "riders",
                    &format!(
                        "puts `{}` on `{}`, which holds no stage; a rider goes on one of {}",
                        crate::quote::line(&rider.name),
                        crate::quote::line(&rider.node),
                        nodes()
                    ),
                );
            }
            // A draft's name reaches a command only as the stand-in for a file not given.
            let name = if rider.file.is_none() { Some(("name", &rider.name)) } else { None };
            for (what, text) in name.into_iter().chain([("weights", &rider.weights), ("kv", &rider.kv)]) {
                if let Some(shown) = unsafe_text(text) {
                    return plan_error("riders", &format!("has a {what} that {shown}; give it without one"));
                }
            }
            if rider.layers > MAX_LAYERS {
                return plan_error(
                    "riders",
                    &format!(
                        "gives `{}` {} layers; no model has over 10,000",
                        crate::quote::line(&rider.name),
                        rider.layers
                    ),
                );
            }
            if let Some(file) = &rider.file
                && (file.is_empty() || unsafe_text(file).is_some())
            {
                return plan_error(
                    "riders",
                    &format!(
                        "has a file `{}` that is empty or {}; give its path without one",
                        crate::quote::line(file),
                        unsafe_words!()
                    ),
                );
            }
        }
        if let Some(main) = &options.main
            && !known(main)
        {
            return Err(ExportError::UnknownNode { option: "--main", node: main.clone(), nodes: nodes() });
        }
        // Kinds come from the whole scenario, and users give the addresses of all their
        // machines: one the plan leaves out is noted, not refused.
        let mut notes = Vec::new();
        for node in options.hosts.keys().filter(|n| !known(n)) {
            let shown = crate::quote::line(node);
            notes.push(match plan.left_out.iter().find(|l| &l.node == node) {
                Some(_) => format!("`{shown}` is left out of this plan; its address is not used."),
                None => format!("`{shown}` is not in this plan; its address is not used."),
            });
        }
        for (option, value) in [("--model", &options.model), ("--image", &options.image)] {
            if let Some(value) = value
                && (value.is_empty() || unsafe_text(value).is_some())
            {
                return Err(ExportError::Option {
                    option,
                    value: crate::quote::line(value).into_owned(),
                    problem: concat!("is empty or ", unsafe_words!(), "; give a path, name or id without one"),
                });
            }
        }
        for (node, address) in &options.hosts {
            if parse_address(address).is_none() {
                return Err(ExportError::Option {
                    option: "--host",
                    value: format!("{node}={address}"),
                    problem: "is not a host (a name, or an IPv4 address of four numbers), host:port (port 1–65535), or [IPv6]:port",
                });
            }
        }
        Ok(Layout { plan, stages, layers, options, notes })
    }

    /// Layer counts per stage, in pipeline order.
    pub fn counts(&self) -> Vec<usize> {
        self.stages.iter().map(|&(_, a, b)| b - a).collect()
    }

    /// The machine a stage's node is on, and the GPU's number there when it has several.
    fn machine(&self, node: &'p str) -> (&'p str, Option<u32>) {
        match self.plan.stages.iter().find(|s| s.node == node).and_then(|s| s.gpu_of.as_ref()) {
            Some(gpu) => (gpu.machine.as_str(), Some(gpu.index)),
            None => (node, None),
        }
    }

    /// The address `--host` gives a node: its own, else its machine's.
    fn address(&self, node: &'p str) -> &str {
        let machine = self.machine(node).0;
        self.options.hosts.get(node).or_else(|| self.options.hosts.get(machine)).map_or(machine, String::as_str)
    }

    /// A node's address without a port (`--host`, or its machine's name).
    fn host(&self, node: &'p str) -> String {
        let address = self.address(node);
        parse_address(address).map_or_else(|| address.to_owned(), |(host, _)| host.to_owned())
    }

    /// A node's address with `port`, whatever port `--host` gave (for a service other than
    /// the one the port was given for).
    fn host_with(&self, node: &'p str, port: u16) -> String {
        let host = self.host(node);
        if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") }
    }

    /// The port `--host` gives a node (or its machine), if any.
    fn given_port(&self, node: &'p str) -> Option<u16> {
        parse_address(self.address(node)).and_then(|(_, port)| port)
    }

    /// How far above its machine's port a GPU's own server listens: its number there, unless
    /// `--host` gave the GPU an address of its own.
    fn port_offset(&self, node: &'p str) -> u16 {
        match self.machine(node).1 {
            Some(gpu) if !self.options.hosts.contains_key(node) => gpu as u16,
            _ => 0,
        }
    }

    /// The CPU threads the plan gives `node`, if any.
    fn threads(&self, node: &str) -> Option<u32> {
        self.plan.stages.iter().find(|s| s.node == node).and_then(|s| s.threads)
    }

    fn kind(&self, node: &str) -> DeviceKind {
        self.options.kinds.get(node).copied().unwrap_or_default()
    }

    /// The node that coordinates: the one given (or the first of the machine given), or the
    /// first stage's.
    fn main(&self) -> &'p str {
        match &self.options.main {
            Some(main) => self
                .stages
                .iter()
                .map(|&(n, _, _)| n)
                .find(|&n| n == main || self.machine(n).0 == main)
                .unwrap_or(self.stages[0].0),
            None => self.stages[0].0,
        }
    }

    /// The model's name as a placeholder word (a file name, an id to replace): its letters,
    /// digits and `.-_` kept, anything else (from a file's header) written as `_`.
    fn placeholder(&self) -> String {
        let name = &self.plan.model.name;
        if name.is_empty() {
            return "model".to_owned();
        }
        name.chars().take(128).map(|c| if c.is_ascii_alphanumeric() || "._-".contains(c) { c } else { '_' }).collect()
    }

    /// The model's preset, when the plan's model is one.
    fn preset(&self) -> Option<&'static ModelPreset> {
        ModelPreset::find(&self.plan.model.name).ok()
    }

    /// A one-line description for comments.
    fn summary(&self) -> String {
        let model = &self.plan.model;
        let counts: Vec<String> = self.counts().iter().map(ToString::to_string).collect();
        let summary = format!(
            "{} {} · {} stage{} · layers {} on {}",
            if model.name.is_empty() { "model" } else { &model.name },
            model.weights,
            self.stages.len(),
            if self.stages.len() == 1 { "" } else { "s" },
            counts.join("/"),
            self.plan.stages.iter().map(crate::plan::Stage::label).collect::<Vec<_>>().join(", ")
        );
        // The model's name comes from the input (a GGUF's `general.name`): a comment line
        // must stay one line.
        crate::quote::line(&summary).into_owned()
    }
}

/// Whether a JSON document is a plan rather than a scenario: by a field every plan has and
/// no scenario may (`feasible`), or a `plan` wrapper. A manual-policy scenario has `stages`
/// too, so `stages` cannot tell them apart.
fn is_plan(value: &serde_json::Value) -> bool {
    value.get("feasible").is_some() || (value.get("plan").is_some() && value.get("nodes").is_none())
}

/// What an export was given: a plan file, or a scenario to plan first.
#[derive(Clone, Debug)]
pub enum ExportInput {
    Plan(Box<Plan>),
    /// Replicas, from what `stageplan plan --ttft … --format json` printed where they serve
    /// more users than one server ([`replicas()`]).
    Replicas(Vec<ReplicaPlan>),
    /// A scenario: plan it through [`crate::check()`] (which reads the text again, for the
    /// paths in its errors).
    Scenario,
}

/// Reads what an export was given, parsing it once: a plan as `stageplan plan --format
/// json` prints it (also with `--verify`), a re-plan's output (`{"plan": …}`), the replicas
/// of `stageplan plan --ttft … --format json` where it found them, or a scenario.
///
/// # Errors
/// Text that is not JSON, or a plan that is not one, naming the field.
pub fn read_input(text: &str) -> Result<ExportInput, ExportError> {
    let mut value: serde_json::Value = serde_json::from_str(text).map_err(|e| ExportError::NotJson(e.to_string()))?;
    if !is_plan(&value) {
        return Ok(ExportInput::Scenario);
    }
    let wrapped = value.get("stages").is_none();
    if wrapped && let Some(split) = value.get_mut("replicas").filter(|split| !split.is_null()) {
        let refused = |problem: String| Err(ExportError::Plan { field: "replicas", problem });
        let count = split.get("replicas").and_then(serde_json::Value::as_array).map_or(0, Vec::len);
        if !(1..=crate::serving::MAX_REPLICA_MACHINES).contains(&count) {
            return refused(format!(
                "has {count} replicas; export what `stageplan plan` printed (1 to {})",
                crate::serving::MAX_REPLICA_MACHINES
            ));
        }
        let users = split.get("users").and_then(serde_json::Value::as_u64);
        let list = split.get_mut("replicas").map(serde_json::Value::take).unwrap_or_default();
        let replicas: Vec<ReplicaPlan> = serde_json::from_value(list).map_err(|e| {
            ExportError::Json(format!("has `replicas` that are not what `stageplan plan` prints ({e})"))
        })?;
        let served: u64 = replicas.iter().map(|r| u64::from(r.users)).sum();
        if users != Some(served) {
            return refused(format!(
                "says its replicas serve {} users, and theirs add up to {served}; export what `stageplan plan` printed",
                users.map_or_else(|| "no count of".to_owned(), |u| u.to_string())
            ));
        }
        return Ok(ExportInput::Replicas(replicas));
    }
    let plan = match value.get_mut("plan") {
        Some(inner) if wrapped => serde_json::from_value(inner.take())
            .map_err(|e| ExportError::Json(format!("has a `plan` that is not one ({e})")))?,
        // A bare plan is read from its text, so an error names the field at its position.
        _ => crate::json::from_str(text).map_err(|(path, e)| {
            let at = if path.is_empty() { String::new() } else { format!(" at `{path}`") };
            ExportError::Json(format!("is not a plan{at}: {e}"))
        })?,
    };
    Ok(ExportInput::Plan(Box::new(plan)))
}

/// Exports `plan` to `target`.
///
/// # Errors
/// A plan that cannot be laid out (see [`Layout::new`]) or options the target cannot use.
pub fn export(plan: &Plan, target: Target, options: &ExportOptions) -> Result<Export, ExportError> {
    let layout = Layout::new(plan, options)?;
    // vLLM runs one machine's GPUs as its ranks; across machines its Ray executor orders
    // GPUs in a way an export cannot pin.
    let one_machine = plan.stages.iter().all(|s| {
        s.gpu_of.as_ref().is_some_and(|g| Some(&g.machine) == plan.stages[0].gpu_of.as_ref().map(|g| &g.machine))
    });
    // vLLM over machines: each stage a tensor-parallel group on a machine of its own (Ray
    // gives each pipeline rank one machine's GPUs).
    let groups_apart = plan.stages.iter().enumerate().all(|(i, s)| {
        !s.tensor_parallel.is_empty()
            && s.gpu_of.as_ref().is_some_and(|g| {
                plan.stages[..i].iter().all(|o| o.gpu_of.as_ref().is_none_or(|h| h.machine != g.machine))
            })
    });
    // Kubernetes runs each stage in a pod of its own, asking its machine for its GPUs; the
    // training launchers give each machine's GPUs ranks.
    if !matches!(target, Target::LlamaCpp | Target::Kubernetes | Target::DeepSpeed | Target::Megatron)
        && !(target == Target::Vllm && (one_machine || groups_apart))
        && let Some(gpu) = plan.stages.iter().find_map(|s| s.gpu_of.as_ref())
    {
        // llama.cpp runs any such plan but a pipeline of groups, which vLLM runs.
        let instead = if plan.stages.len() > 1 && !plan.stages[0].tensor_parallel.is_empty() {
            Target::Vllm
        } else {
            Target::LlamaCpp
        };
        return Err(ExportError::SeveralGpus { target, machine: gpu.machine.clone(), instead });
    }
    let (text, notes) = match target {
        Target::LlamaCpp => {
            let (text, notes, _) = llama_cpp::export(&layout)?;
            (text, notes)
        }
        Target::Vllm => vllm::export(&layout),
        Target::Exo => exo::export(&layout),
        Target::Kubernetes => kubernetes::export(&layout),
        Target::DeepSpeed => training::deepspeed(&layout)?,
        Target::Megatron => training::megatron(&layout)?,
    };
    let mut notes: Vec<String> = layout.notes.iter().cloned().chain(notes).collect();
    // Only llama.cpp and vLLM place tensors in a machine's system RAM; elsewhere the plan's
    // RAM part would be on the device, which the plan says does not hold it.
    if !matches!(target, Target::LlamaCpp | Target::Vllm) {
        let in_ram: Vec<String> = plan
            .stages
            .iter()
            .filter_map(|s| Some((s, s.offload.as_ref().filter(|o| o.host_layers + o.host_ffn > 0)?)))
            .map(|(s, o)| {
                format!(
                    "`{}` ({} whole layers and {} layers' FFN, {})",
                    s.node,
                    o.host_layers,
                    o.host_ffn,
                    crate::units::format_bytes(o.memory.weights as f64)
                )
            })
            .collect();
        if !in_ram.is_empty() {
            notes.push(format!(
                "The plan keeps part of the model in system RAM on {}; {target} loads every layer on its device, which the plan says cannot hold it: export to llama.cpp, or re-plan without `host`.",
                in_ram.join(", ")
            ));
        }
    }
    if target != Target::LlamaCpp && !plan.riders.is_empty() {
        notes.push(
            "The plan's draft model and vision projector are placed as llama.cpp runs them; this export does not load them: export to llama.cpp, or re-plan without `model.draft` and `model.mmproj`.".to_owned(),
        );
    }
    Ok(Export { target, file_name: target.file_name().to_owned(), text, notes })
}

/// The processes a llama.cpp export of `plan` starts, machine by machine, each command
/// word by word: what its text prints, for a program that starts them without a shell.
///
/// # Errors
/// As [`export`] to [`Target::LlamaCpp`].
pub fn llama_cpp_launches(plan: &Plan, options: &ExportOptions) -> Result<Vec<Launch>, ExportError> {
    let layout = Layout::new(plan, options)?;
    Ok(llama_cpp::export(&layout)?.2)
}

/// Node names become host names, Kubernetes label values and shell words unquoted: ASCII
/// letters, digits, `-`, `_`, `.`, at most 63, starting and ending with a letter or digit.
fn valid_node_name(name: &str) -> bool {
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    !name.is_empty()
        && name.len() <= 63
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && edge(name.chars().next())
        && edge(name.chars().last())
        && !read_as_number(name)
}

/// Whether `getaddrinfo` reads `host` as an IPv4 address other than four decimal numbers:
/// every label a number as `inet_aton` takes one (decimal, octal, `0x` hex), so `12345` is
/// 0.0.48.57, `10.1` is 10.0.0.1 and `0x7f.1` is 127.0.0.1 to the engine that connects.
fn read_as_number(host: &str) -> bool {
    let host = host.trim_end_matches('.');
    let number = |label: &str| match label.strip_prefix("0x").or_else(|| label.strip_prefix("0X")) {
        Some(hex) => hex.bytes().all(|b| b.is_ascii_hexdigit()),
        None => !label.is_empty() && label.bytes().all(|b| b.is_ascii_digit()),
    };
    !host.is_empty() && host.split('.').all(number) && host.parse::<std::net::Ipv4Addr>().is_err()
}

/// Whether `text` is a host an export may print: a DNS name or an IP address, no port.
pub fn is_host(text: &str) -> bool {
    parse_address(text).is_some_and(|(host, port)| port.is_none() && host.len() == text.len())
}

/// `host`, `host:port`, `[v6]` or `[v6]:port`, or a bare IPv6 address: the host and the
/// port, if given. A host is a DNS name (labels of letters, digits, `-` and `_`, at most 63
/// each and 253 in all, not starting or ending with `-`), an IPv4 address, or an IPv6
/// address (in brackets when a port follows). `None` for anything else: an address is
/// printed into shell commands, so nothing a shell or a URL reads specially gets through.
fn parse_address(address: &str) -> Option<(&str, Option<u16>)> {
    let port =
        |p: &str| p.bytes().all(|b| b.is_ascii_digit()).then(|| p.parse::<u16>().ok()).flatten().filter(|&p| p > 0);
    let v6 = |h: &str| h.parse::<std::net::Ipv6Addr>().is_ok();
    if let Some(rest) = address.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        let given = match after {
            "" => None,
            _ => Some(port(after.strip_prefix(':')?)?),
        };
        return v6(host).then_some((host, given));
    }
    match address.matches(':').count() {
        0 => host_name(address).then_some((address, None)),
        1 => {
            let (host, p) = address.split_once(':')?;
            host_name(host).then_some((host, Some(port(p)?)))
        }
        // A bare IPv6 address: no port can be told apart.
        _ => v6(address).then_some((address, None)),
    }
}

/// A DNS name or an IPv4 address (which is one, syntactically), not a name
/// [`read_as_number`].
fn host_name(host: &str) -> bool {
    if read_as_number(host) {
        return false;
    }
    let label = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    !host.is_empty() && host.len() <= 253 && host.trim_end_matches('.').split('.').all(label)
}

#[cfg(test)]
mod tests;

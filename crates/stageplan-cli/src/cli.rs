//! The command line as clap reads it: every subcommand, flag and value, with the doc
//! comments that are its `--help`. Nothing here runs a command; `commands` does.

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

use crate::observe::Sources;
use crate::outcome::Failure;

/// Where `--store` points when it is not given: a redb file in the working folder.
pub(crate) const STORE_DEFAULT: &str = "stageplan.redb";

/// Split a large model across mismatched machines, and prove the split is best.
#[derive(Debug, Parser)]
#[command(name = "stageplan", version, about, max_term_width = 100)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Plan a scenario: which layers go on which machine, how fast, and why.
    Plan {
        /// The scenario file (JSON); `-` reads standard input.
        scenario: PathBuf,
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
        /// Override the scenario's objective.
        #[arg(long, value_enum)]
        objective: Option<ObjectiveArg>,
        /// Override the scenario's policy.
        #[arg(long, value_enum)]
        policy: Option<PolicyArg>,
        /// Also search every ordered subset and split exhaustively (small scenarios) and
        /// confirm the plan is optimal.
        #[arg(long)]
        verify: bool,
        /// Plan for this many users of one server and simulate its scheduler: llama-server
        /// (`--parallel`, a slot and its context each), or with `"engine": "vllm"` vLLM's
        /// (requests admitted while their KV blocks last). Their times to first token and
        /// per token at p50/p95, and tok/s in all. The workload's `prompt` and `response`
        /// are each request's; every user sends three, one after another.
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
        users: Option<u32>,
        /// Requests a second arriving at random whatever the replies (an open loop, as
        /// `vllm bench serve --request-rate`), `--users` then the server's slots and 100
        /// requests simulated (three a slot where that is more).
        #[arg(long, value_name = "PER_SECOND", requires = "users")]
        rate: Option<f64>,
        /// Draw each request's prompt and response within this share of the workload's
        /// (0.5: ±50%, as `vllm bench serve --random-range-ratio`) [default: 0].
        #[arg(long, value_name = "SHARE")]
        spread: Option<f64>,
        /// A time to first token every user must see (`2s`, `800ms`), at `--percentile`:
        /// without `--users`, how many users of one server meet it (and `--tpot`),
        /// the plan remade for each count; with `--users`, whether they do.
        #[arg(long, value_name = "TIME")]
        ttft: Option<String>,
        /// A time per output token every user must see (`80ms`), as `--ttft`.
        #[arg(long, value_name = "TIME")]
        tpot: Option<String>,
        /// The percentile of requests `--ttft` and `--tpot` hold at [default: p95].
        #[arg(long, value_enum)]
        percentile: Option<PercentileArg>,
    },
    /// Re-plan a cluster that changed: the new plan and the fewest moves that reach it.
    Replan {
        /// The plan running now: what `stageplan plan --format json` printed.
        current: PathBuf,
        /// The changed cluster's scenario (nodes gone, added, slower, with less memory).
        scenario: PathBuf,
        /// Accept plans this much slower than the best when they move fewer bytes (0.03: 3%).
        #[arg(long, default_value_t = 0.03)]
        tolerance: f64,
        /// Keep the running plan unless the best is this much faster (0.05: 5%).
        #[arg(long, default_value_t = 0.05)]
        hysteresis: f64,
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
    },
    /// Show a model's parameters, bytes per layer and type mix.
    Model {
        /// A model preset name, or a file: `.gguf` (any part of a split set), `.safetensors`,
        /// `model.safetensors.index.json` or `config.json`. Only headers are read.
        model: String,
        /// Weight format (e.g. `bf16`, `q4_k_m`); defaults to `bf16`.
        #[arg(long)]
        weights: Option<String>,
        /// KV-cache format for the per-token KV size: K's, and V's unless `--kv-v` is given.
        #[arg(long, default_value = stageplan::problem::Workload::DEFAULT.kv.name())]
        kv: String,
        /// The V cache's format where it differs from K's (llama.cpp's `-ctv`).
        #[arg(long)]
        kv_v: Option<String>,
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
    },
    /// Fit a machine's scenario node to its own llama-bench results (`llama-bench -o json`):
    /// the efficiency on top of the backend's fitted terms that predicts them.
    Calibrate {
        /// llama-bench's JSON or JSONL output.
        results: PathBuf,
        /// The machine's device preset, for its peak figures.
        #[arg(long)]
        device: Option<String>,
        /// Peak memory bandwidth without a preset (e.g. `1008 GB/s`).
        #[arg(long)]
        bandwidth: Option<String>,
        /// Peak FP16 compute without a preset (e.g. `165 TFLOPS`).
        #[arg(long)]
        compute: Option<String>,
        /// Memory usable for the model (e.g. `24 GiB`): needed with `--bandwidth` and
        /// `--compute`, so that the printed node is a scenario's as is; with `--device`, in
        /// place of the preset's.
        #[arg(long)]
        memory: Option<String>,
        /// The model preset with the tested model's shape (default: the nearest parameter count).
        #[arg(long)]
        model: Option<String>,
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
    },
    /// Measure this machine's GPU adapters (bandwidth, f32/f16 matmul, memory), or with
    /// `--cpu` its CPU as llama.cpp's CPU backend uses it; print a ready node.
    Probe {
        /// Only this adapter (see the list); all by default.
        #[arg(long, conflicts_with_all = ["cpu", "threads"])]
        adapter: Option<usize>,
        /// Measure the CPU instead: memory read bandwidth and matmul rate with `--threads`.
        /// The default on a machine whose only adapters are software renderers.
        #[arg(long)]
        cpu: bool,
        /// Measure the GPU adapters even when they are all software renderers.
        #[arg(long, conflicts_with_all = ["cpu", "threads"])]
        gpu: bool,
        /// CPU threads to measure with, as llama.cpp's `-t` (default: every logical core).
        #[arg(long)]
        threads: Option<usize>,
        /// Small sizes: a few seconds even on a software adapter.
        #[arg(long)]
        quick: bool,
        /// With `--cpu`: also run this llama-bench (your llama.cpp build) on each `--model`
        /// and fit the rate of its matrix-vector products per weight class, so the printed
        /// node predicts your build rather than the defaults.
        #[arg(long, value_name = "LLAMA_BENCH")]
        engine: Option<PathBuf>,
        /// A GGUF model for `--engine` to run (repeat for several weight types); one past the
        /// caches (hundreds of MB) measures what decode does.
        #[arg(long, value_name = "FILE.gguf")]
        model: Vec<PathBuf>,
        /// Also allocate up to this much (e.g. `8 GiB`) to find usable memory, then free it.
        #[arg(long)]
        memory_cap: Option<String>,
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
    },
    /// Run a scenario's plan on this machine's GPU devices as an MLP stack: predicted vs measured.
    RunSharded {
        /// The scenario file (JSON).
        scenario: PathBuf,
        /// Width of each MLP layer.
        #[arg(long, default_value_t = 256)]
        width: u32,
        /// Rows (tokens) per micro-batch.
        #[arg(long, default_value_t = 64)]
        tokens: u32,
        /// Micro-batches streamed through the pipeline.
        #[arg(long, default_value_t = 8)]
        micro_batches: u32,
        /// Copies of the pipeline; requests are routed across them.
        #[arg(long, default_value_t = 1)]
        replicas: usize,
    },
    /// Run a program in this process's group and kill the group when process PARENT is gone:
    /// what `verify` starts each engine under, so none outlives it.
    #[command(hide = true)]
    Guard {
        #[arg(long)]
        parent: u32,
        /// The program and its arguments, after `--`.
        #[arg(last = true, required = true, value_parser = clap::value_parser!(std::ffi::OsString))]
        command: Vec<std::ffi::OsString>,
    },
    /// Run a scenario's plan with llama.cpp on this machine, every machine's rpc-server on
    /// 127.0.0.1, and write a receipt: memory per machine and decode and prompt speed, planned
    /// beside measured. Exit 1 when something is outside its band.
    Verify {
        /// The scenario file (JSON).
        scenario: PathBuf,
        /// The folder holding llama.cpp's `llama-server` and `ggml-rpc-server`.
        #[arg(long, value_name = "DIR")]
        engine: PathBuf,
        /// The model file (`.gguf`); the scenario's `model.file` when not given.
        #[arg(long, value_name = "FILE")]
        model: Option<PathBuf>,
        /// Also write the receipt, as JSON, to this file.
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
    },
    /// Run, on this machine, the engines the control loop bound to it: llama.cpp's rpc-servers
    /// for its stages and llama-server where it serves a pipeline, restarted with backoff,
    /// their states and receipts written to the store (`stageplan status` shows them).
    Agent(AgentArgs),
    /// Turn a plan into what an engine takes: llama.cpp flags, vLLM, exo, Kubernetes, DeepSpeed,
    /// Megatron.
    Export {
        /// A plan (`stageplan plan --format json` output) or a scenario, which is planned first.
        plan_or_scenario: PathBuf,
        /// The engine: llama.cpp, vllm, exo, kubernetes (k8s), deepspeed, megatron. Default:
        /// the engine the plan was made for (its `engine`).
        #[arg(long)]
        to: Option<String>,
        /// A node's network address, `NODE=HOST[:PORT]`; defaults to the node's name.
        #[arg(long = "host", value_name = "NODE=ADDR")]
        hosts: Vec<String>,
        /// The node that runs `llama-server` or the Ray head; defaults to the first stage's.
        #[arg(long)]
        main: Option<String>,
        /// The model as the engine names it (a `.gguf` path, a Hugging Face id).
        #[arg(long)]
        model: Option<String>,
        /// Container image for Kubernetes.
        #[arg(long)]
        image: Option<String>,
        /// `text` prints the file; `json` prints `{target, file_name, text, notes}`.
        #[arg(long, value_enum, default_value_t = ExportFormat::Text)]
        format: ExportFormat,
    },
    /// Run the control loop: keep every deployment's replicas placed as nodes come and go.
    Reconcile {
        /// The state: a redb file (created if missing) or `etcd://[USER@]host:port[/prefix]` (`etcds://` over TLS).
        #[arg(long, default_value = STORE_DEFAULT)]
        store: String,
        /// Time between passes.
        #[arg(long, default_value = "5s")]
        interval: String,
        /// Stop after this many passes (default: run until killed; every write is atomic).
        #[arg(long)]
        passes: Option<u64>,
        /// This controller's name in leader election (etcd).
        #[arg(long, default_value = "stageplan")]
        id: String,
        /// Leader lease (etcd): another controller takes over this long after one dies.
        #[arg(long, default_value = "10s")]
        lease: String,
        #[command(flatten)]
        measured: Measured,
    },
    /// Create or change a deployment: a model's pipeline, replicated.
    Deploy {
        /// A deployment: `name`, `replicas` (optional `min_replicas`, `max_replicas`,
        /// `placement`, `autoscale`) and either `stages` or a `scenario` to plan them from.
        deployment: PathBuf,
        #[arg(long, default_value = STORE_DEFAULT)]
        store: String,
    },
    /// Remove a deployment and release its stage bindings (also one this version cannot read).
    Undeploy {
        /// The deployment's name.
        name: String,
        #[arg(long, default_value = STORE_DEFAULT)]
        store: String,
    },
    /// Register, remove or list the machines the loop places stages on.
    Nodes {
        #[command(subcommand)]
        action: NodesAction,
    },
    /// Deployments (desired, running, pending), nodes (used / total) and invariants.
    Status {
        #[arg(long, default_value = STORE_DEFAULT)]
        store: String,
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
        /// What to show against the predictions.
        #[command(flatten)]
        measured: Measured,
    },
    /// List model presets, device presets and weight formats.
    Presets {
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
    },
}

/// Where the loop's measurements come from (`reconcile`, and `status` to show them).
/// `stageplan agent`'s arguments.
#[derive(Debug, clap::Args)]
pub(crate) struct AgentArgs {
    /// The state the loop keeps: a redb file or `etcd://[USER@]host:port[/prefix]` (`etcds://` over TLS).
    #[arg(long, default_value = STORE_DEFAULT)]
    pub store: String,
    /// This machine's node, as `nodes add` and the deployments' scenarios name it.
    #[arg(long)]
    pub node: String,
    /// The folder holding llama.cpp's `llama-server` and `ggml-rpc-server`.
    #[arg(long, value_name = "DIR")]
    pub engine: PathBuf,
    /// How the other machines reach this one (a host name or an IP address).
    #[arg(long, default_value = "127.0.0.1")]
    pub address: String,
    /// Where the engines listen (an IP address; default: `--address` when it is one).
    /// llama.cpp's RPC server has no authentication: `0.0.0.0` only if every network that
    /// reaches this machine is trusted.
    #[arg(long, value_name = "IP")]
    pub bind: Option<String>,
    /// Join the fleet with this much memory for stages (as `nodes add --memory`);
    /// without it or `--node-file`, the node must have been added.
    #[arg(long, value_name = "SIZE", conflicts_with = "node_file")]
    pub memory: Option<String>,
    /// Join the fleet as this machine: a scenario's `nodes[]` entry (`{"name": …, "device":
    /// "rtx-4090"}`, `gpus` for several), or what `stageplan probe --format json` prints.
    /// It offers each device's memory less its reserve, and its GPUs; `--node` names it.
    #[arg(long, value_name = "FILE")]
    pub node_file: Option<PathBuf>,
    /// With `--memory`: the machine's GPUs.
    #[arg(long, default_value_t = 0, requires = "memory")]
    pub gpus: u32,
    /// The first port of the engines' ports.
    #[arg(long, default_value_t = 50052)]
    pub port: u16,
    /// Time between passes.
    #[arg(long, default_value = "1s")]
    pub interval: String,
    /// The loop takes this machine for down when its report is this old.
    #[arg(long, default_value = "10s")]
    pub lease: String,
    /// Where each engine's log goes (default: a folder under the system's temporary one).
    #[arg(long, value_name = "DIR")]
    pub log_dir: Option<PathBuf>,
    /// Serve Prometheus metrics at this address (`/metrics`): the machine's state, its
    /// engines', its receipts, and its llama-servers' own counters by deployment.
    #[arg(long, value_name = "IP:PORT")]
    pub metrics: Option<String>,
    /// Stop after this many passes (default: run until stopped).
    #[arg(long)]
    pub passes: Option<u64>,
}

#[derive(Debug, clap::Args)]
pub(crate) struct Measured {
    /// Measurements (re-read every pass by `reconcile`): utilization per deployment for autoscaling
    /// (`{"DEPLOYMENT": 0.85, …}`, 1.0 = replicas at capacity), or also stage step times,
    /// free memory and node status for re-balancing (`{"utilization", "stages", "nodes",
    /// "tokens"}`).
    #[arg(long)]
    pub(crate) metrics: Option<PathBuf>,
    /// A Prometheus server to ask (every pass, by `reconcile`): `http://127.0.0.1:9090`.
    #[arg(long)]
    pub(crate) prometheus: Option<String>,
    /// Replace a query: `step=`, `memory_free=`, `utilization=`, `token=` or `up=` PROMQL
    /// (empty turns it off); repeatable.
    #[arg(long = "prometheus-query")]
    pub(crate) prometheus_query: Vec<String>,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum Format {
    Table,
    Json,
}

#[derive(Debug, Subcommand)]
pub(crate) enum NodesAction {
    /// Register a node (or change its capacity: stages that no longer fit are released).
    Add {
        name: String,
        /// Memory stages may take, e.g. `80 GiB`.
        #[arg(long, required_unless_present = "node_file", conflicts_with = "node_file")]
        memory: Option<String>,
        #[arg(long, default_value_t = 0, requires = "memory")]
        gpus: u32,
        /// Instead of `--memory` and `--gpus`: the machine as a scenario's `nodes[]` entry,
        /// or what `stageplan probe --format json` prints (as `agent --node-file` reads it).
        #[arg(long, value_name = "FILE")]
        node_file: Option<PathBuf>,
        #[arg(long, default_value = STORE_DEFAULT)]
        store: String,
    },
    /// Remove a node; the next pass moves its stages.
    Remove {
        name: String,
        #[arg(long, default_value = STORE_DEFAULT)]
        store: String,
    },
    List {
        #[arg(long, default_value = STORE_DEFAULT)]
        store: String,
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
    },
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum ExportFormat {
    Text,
    Json,
}

#[derive(Copy, Clone, Debug, ValueEnum)]
pub(crate) enum PercentileArg {
    P50,
    P95,
}

#[derive(Copy, Clone, Debug, ValueEnum)]
pub(crate) enum ObjectiveArg {
    Throughput,
    Latency,
}

#[derive(Copy, Clone, Debug, ValueEnum)]
pub(crate) enum PolicyArg {
    Optimal,
    MemoryProportional,
    Even,
    Greedy,
    Manual,
    LayerOffload,
    LlamaFit,
}

impl Measured {
    /// The measurement sources these flags name, checked.
    pub(crate) fn sources(self) -> Result<Sources, Failure> {
        crate::observe::sources(self.metrics, self.prometheus, &self.prometheus_query)
    }
}

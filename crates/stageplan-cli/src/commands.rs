//! The subcommands, as functions from arguments to output text and an exit code.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use stageplan::export::{ExportOptions, Target};
use stageplan::presets::ModelPreset;
use stageplan::{Objective, Policy, Scenario, ScenarioInput, WeightFormat};

use crate::outcome::{Failure, Outcome};
use crate::{cluster, gpu, input, load, render};

/// Logs for the long-running loop: to standard error, colored only on a terminal.
fn init_logging() {
    use std::io::IsTerminal;
    let ansi = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let _ = tracing_subscriber::fmt().with_writer(std::io::stderr).with_ansi(ansi).with_target(false).try_init();
}

/// Split a large model across mismatched machines, and prove the split is best.
#[derive(Debug, Parser)]
#[command(name = "stageplan", version, about, max_term_width = 100)]
pub(crate) struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
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
        /// KV-cache format for the per-token KV size.
        #[arg(long, default_value = "f16")]
        kv: String,
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
        /// The state: a redb file (created if missing) or `etcd://host:port[/prefix]`.
        #[arg(long, default_value = "stageplan.redb")]
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
        #[arg(long, default_value = "stageplan.redb")]
        store: String,
    },
    /// Remove a deployment and release its stage bindings (also one this version cannot read).
    Undeploy {
        /// The deployment's name.
        name: String,
        #[arg(long, default_value = "stageplan.redb")]
        store: String,
    },
    /// Register, remove or list the machines the loop places stages on.
    Nodes {
        #[command(subcommand)]
        action: NodesAction,
    },
    /// Deployments (desired, running, pending), nodes (used / total) and invariants.
    Status {
        #[arg(long, default_value = "stageplan.redb")]
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
#[derive(Debug, clap::Args)]
struct Measured {
    /// Measurements (re-read every pass by `reconcile`): utilization per deployment for autoscaling
    /// (`{"DEPLOYMENT": 0.85, …}`, 1.0 = replicas at capacity), or also stage step times,
    /// free memory and node status for re-balancing (`{"utilization", "stages", "nodes",
    /// "tokens"}`).
    #[arg(long)]
    metrics: Option<PathBuf>,
    /// A Prometheus server to ask (every pass, by `reconcile`): `http://127.0.0.1:9090`.
    #[arg(long)]
    prometheus: Option<String>,
    /// Replace a query: `step=`, `memory_free=`, `utilization=`, `token=` or `up=` PROMQL
    /// (empty turns it off); repeatable.
    #[arg(long = "prometheus-query")]
    prometheus_query: Vec<String>,
}

impl Measured {
    fn sources(self) -> Result<crate::observe::Sources, Failure> {
        crate::observe::sources(self.metrics, self.prometheus, &self.prometheus_query)
    }
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
enum Format {
    Table,
    Json,
}

#[derive(Debug, Subcommand)]
enum NodesAction {
    /// Register a node (or change its capacity: stages that no longer fit are released).
    Add {
        name: String,
        /// Memory stages may take, e.g. `80 GiB`.
        #[arg(long)]
        memory: String,
        #[arg(long, default_value_t = 0)]
        gpus: u32,
        #[arg(long, default_value = "stageplan.redb")]
        store: String,
    },
    /// Remove a node; the next pass moves its stages.
    Remove {
        name: String,
        #[arg(long, default_value = "stageplan.redb")]
        store: String,
    },
    List {
        #[arg(long, default_value = "stageplan.redb")]
        store: String,
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
    },
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
enum ExportFormat {
    Text,
    Json,
}

#[derive(Copy, Clone, Debug, ValueEnum)]
enum ObjectiveArg {
    Throughput,
    Latency,
}

#[derive(Copy, Clone, Debug, ValueEnum)]
enum PolicyArg {
    Optimal,
    MemoryProportional,
    Even,
    Greedy,
    Manual,
}

/// Runs one command.
///
/// # Errors
/// Bad input: unreadable files, malformed scenarios, unknown names.
pub(crate) fn run(cli: Cli) -> Result<Outcome, Failure> {
    match cli.command {
        Command::Plan { scenario, format, objective, policy, verify } => {
            plan(&scenario, format, objective, policy, verify)
        }
        Command::Replan { current, scenario, tolerance, hysteresis, format } => {
            let stages = stageplan::planner::replan::current_from_json(&read(&current)?)
                .map_err(|e| Failure(format!("`{}`: {e}", current.display())))?;
            let problem = load_problem(&scenario, read(&scenario)?.as_str())?;
            let result = stageplan::replan(&problem, &stages, stageplan::ReplanOptions { tolerance, hysteresis })?;
            let stdout = match format {
                Format::Json => serde_json::to_string_pretty(&result)? + "\n",
                Format::Table => render::replan(&problem, &result),
            };
            let code = if result.plan.feasible { ExitCode::SUCCESS } else { ExitCode::from(1) };
            Ok(Outcome { stdout, stderr: String::new(), code })
        }
        Command::Model { model, weights, kv, format } => model_command(&model, weights.as_deref(), &kv, format),
        Command::Presets { format } => presets(format),
        Command::Calibrate { results, device, bandwidth, compute, model, format } => {
            calibrate(&results, device, bandwidth, compute, model.as_deref(), format)
        }
        Command::Reconcile { store, interval, passes, id, lease, measured } => {
            let options = cluster::LoopOptions {
                interval: cluster::duration("--interval", &interval)?,
                passes,
                id,
                lease: cluster::duration("--lease", &lease)?,
                sources: measured.sources()?,
            };
            if options.lease < options.interval * 2 {
                return Err(Failure(format!(
                    "`--lease {lease}` must be at least twice `--interval {interval}`: the leader renews once a pass"
                )));
            }
            init_logging();
            Ok(Outcome::ok(cluster::reconcile(&store, &options)?))
        }
        Command::Deploy { deployment, store } => {
            Ok(Outcome::ok(cluster::deploy(&store, &deployment, &read(&deployment)?)?))
        }
        Command::Undeploy { name, store } => Ok(Outcome::ok(cluster::undeploy(&store, &name)?)),
        Command::Nodes { action } => match action {
            NodesAction::Add { name, memory, gpus, store } => {
                Ok(Outcome::ok(cluster::add_node(&store, &name, &memory, gpus)?))
            }
            NodesAction::Remove { name, store } => Ok(Outcome::ok(cluster::remove_node(&store, &name)?)),
            NodesAction::List { store, format } => {
                let status = cluster::status(&store, &crate::observe::Sources::none())?;
                Ok(Outcome::ok(match format {
                    Format::Json => serde_json::to_string_pretty(&status.nodes)? + "\n",
                    Format::Table => cluster::render_nodes(&status.nodes),
                }))
            }
        },
        Command::Status { store, format, measured } => {
            let sources = measured.sources()?;
            let status = cluster::status(&store, &sources)?;
            Ok(Outcome::ok(match format {
                Format::Json => serde_json::to_string_pretty(&status)? + "\n",
                Format::Table => cluster::render_status(&status),
            }))
        }
        Command::Export { plan_or_scenario, to, hosts, main, model, image, format } => {
            let target = to.map(|to| to.parse::<Target>().map_err(|e| Failure(format!("`--to`: {e}")))).transpose()?;
            let request = ExportRequest { hosts, main, model, image };
            export(&plan_or_scenario, target, request, format)
        }
        Command::Probe { adapter, cpu, gpu: gpus, threads, quick, memory_cap, format } => {
            if cpu || threads.is_some() || (adapter.is_none() && !gpus && !gpu::has_hardware_adapter()) {
                return probe_cpu(threads, quick, format);
            }
            let mut options =
                if quick { stageplan_gpu::ProbeOptions::quick() } else { stageplan_gpu::ProbeOptions::default() };
            options.memory_cap = memory_cap
                .map(|cap| stageplan::units::Bytes::parse(&cap).map(|b| b.get() as u64))
                .transpose()
                .map_err(|e| Failure(format!("`--memory-cap`: {e}")))?;
            let (adapters, probes) = gpu::probe(adapter, &options)?;
            let stdout = match format {
                Format::Json => {
                    serde_json::to_string_pretty(&serde_json::json!({
                        "adapters": adapters,
                        "probes": probes,
                        "nodes": probes.iter().enumerate().map(|(i, p)| p.node(&format!("this-device-{i}"))).collect::<Vec<_>>(),
                    }))? + "\n"
                }
                Format::Table => gpu::render_probe(&adapters, &probes),
            };
            Ok(Outcome::ok(stdout))
        }
        Command::RunSharded { scenario, width, tokens, micro_batches, replicas } => {
            let problem = load_problem(&scenario, read(&scenario)?.as_str())?;
            if width == 0 || tokens == 0 || micro_batches == 0 || replicas == 0 || width > 8192 || replicas > 16 {
                return Err(Failure(
                    "`--width` (1–8192), `--tokens`, `--micro-batches` and `--replicas` (1–16) must be positive".into(),
                ));
            }
            let options = gpu::ShardedOptions { width, tokens, micro_batches, replicas };
            Ok(Outcome::ok(gpu::run_sharded(&problem, &options)?))
        }
    }
}

/// `stageplan probe --cpu`.
fn probe_cpu(threads: Option<usize>, quick: bool, format: Format) -> Result<Outcome, Failure> {
    let threads = threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, std::num::NonZero::get));
    let options =
        if quick { stageplan_cpu::CpuOptions::quick(threads) } else { stageplan_cpu::CpuOptions::new(threads) };
    let probe = stageplan_cpu::probe(&options, &mut |step| eprintln!("probing the CPU: {step}"))
        .map_err(|e| Failure(e.to_string()))?;
    Ok(Outcome::ok(match format {
        Format::Json => {
            serde_json::to_string_pretty(&serde_json::json!({"cpu": probe, "nodes": [probe.node("this-cpu")]}))? + "\n"
        }
        Format::Table => gpu::render_cpu_probe(&probe),
    }))
}

fn read(path: &Path) -> Result<String, Failure> {
    input::read_text(path)
}

fn plan(
    path: &Path,
    format: Format,
    objective: Option<ObjectiveArg>,
    policy: Option<PolicyArg>,
    verify: bool,
) -> Result<Outcome, Failure> {
    let mut scenario = Scenario::from_json(&read(path)?)?;
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
        };
    }
    let problem = load_problem(path, scenario)?;
    let plan = stageplan::plan(&problem);
    let verified = if verify {
        const LIMIT: u64 = 200_000_000;
        Some(stageplan::verify(&problem, LIMIT).ok_or_else(|| {
            Failure(format!(
                "`--verify` searches at most {LIMIT} plans and this scenario has more; drop `--verify` or use fewer nodes"
            ))
        })?)
    } else {
        None
    };
    let stdout = match format {
        Format::Json => {
            let mut text = match &verified {
                None => serde_json::to_string_pretty(&plan)?,
                Some(exhaustive) => {
                    serde_json::to_string_pretty(&serde_json::json!({"plan": plan, "exhaustive": exhaustive}))?
                }
            };
            text.push('\n');
            text
        }
        Format::Table => {
            let mut text = render::plan(&problem, &plan);
            if let Some(exhaustive) = &verified {
                text.push_str(&render::verification(&plan, exhaustive));
            }
            text
        }
    };
    let code = if plan.feasible { ExitCode::SUCCESS } else { ExitCode::from(1) };
    Ok(Outcome { stdout, stderr: String::new(), code })
}

/// Checks a scenario read from `path` (`-`: standard input) into a problem.
fn load_problem<'a>(path: &Path, scenario: impl Into<ScenarioInput<'a>>) -> Result<stageplan::Problem, Failure> {
    let base = if path == Path::new("-") { Path::new(".") } else { path.parent().unwrap_or(Path::new(".")) };
    Ok(load::check(base, scenario)?.problem)
}

/// `stageplan calibrate`: the node that predicts a machine's llama-bench decode tests.
fn calibrate(
    results: &Path,
    device: Option<String>,
    bandwidth: Option<String>,
    compute: Option<String>,
    model: Option<&str>,
    format: Format,
) -> Result<Outcome, Failure> {
    use stageplan::calibration::bench;
    let node = match (device, bandwidth, compute) {
        (Some(device), None, None) => serde_json::json!({ "device": device }),
        (None, Some(bandwidth), Some(compute)) => serde_json::json!({ "bandwidth": bandwidth, "compute": compute }),
        _ => {
            return Err(Failure(
                "give the machine's peak figures: `--device PRESET`, or `--bandwidth` and `--compute`".to_owned(),
            ));
        }
    };
    let model = model.map(ModelPreset::find).transpose()?;
    let tests = bench::parse(&read(results)?)
        .map_err(|e| Failure(format!("{}: {e}", stageplan::quote::line(&results.display().to_string()))))?;
    let fit = bench::fit_node(&tests, &node, model).map_err(Failure)?;
    let mut ready = node.clone();
    ready["name"] = "this-machine".into();
    if let (Some(ready), serde_json::Value::Object(fields)) = (ready.as_object_mut(), fit.fields(&node)) {
        ready.extend(fields);
    }
    let stdout = match format {
        Format::Json => {
            let tests: Vec<serde_json::Value> = fit
                .tests
                .iter()
                .map(|t| {
                    serde_json::json!({"model": t.model, "weights": t.weights, "measured_tokens_per_s": t.measured,
                        "fitted_tokens_per_s": t.fitted, "node_tokens_per_s": t.with_node})
                })
                .collect();
            format!("{:#}\n", serde_json::json!({ "node": ready, "tests": tests }))
        }
        Format::Table => {
            let mut out = format!(
                "{}:\n\n  model            weights   measured   predicted (fitted terms)   with this node\n",
                fit.summary()
            );
            for t in &fit.tests {
                out.push_str(&format!(
                    "  {:<16} {:<9} {:>8} {:>12} ({:+.0}%) {:>16}\n",
                    t.model,
                    t.weights,
                    stageplan::units::sig3(t.measured),
                    stageplan::units::sig3(t.fitted),
                    (t.fitted / t.measured - 1.0) * 100.0,
                    stageplan::units::sig3(t.with_node)
                ));
            }
            format!("{out}\nthe node, for a scenario's `nodes`:\n{ready}\n")
        }
    };
    Ok(Outcome::ok(stageplan::quote::terminal(&stdout).into_owned()))
}

fn model_command(name: &str, weights: Option<&str>, kv: &str, format: Format) -> Result<Outcome, Failure> {
    let weights: Option<WeightFormat> = weights.map(str::parse).transpose()?;
    let kv = stageplan::tensor_type::kv_format(kv).map_err(|e| Failure(format!("`--kv` {e}")))?;
    let (model, reads) = match ModelPreset::find(name) {
        Ok(preset) => (preset.model(weights.unwrap_or_default())?, None),
        Err(not_a_preset) => {
            let path = Path::new(name);
            match input::probe(path) {
                None => {
                    return Err(Failure(format!("`{name}` is neither a file nor a model preset: {not_a_preset}")));
                }
                Some(meta) => {
                    meta?;
                }
            }
            let loaded = load::model_file(path, weights)?;
            (loaded.model, Some(loaded.reads))
        }
    };
    let summary = model.summary(kv);
    let stdout = match format {
        Format::Json => {
            let mut value = serde_json::to_value(&summary)?;
            if let (Some(reads), Some(object)) = (&reads, value.as_object_mut()) {
                object.insert(
                    "read".to_owned(),
                    serde_json::json!({
                        "files": reads.files.iter().map(|f| f.display().to_string()).collect::<Vec<_>>(),
                        "bytes_read": reads.bytes_read,
                        "file_bytes": reads.file_bytes,
                    }),
                );
            }
            serde_json::to_string_pretty(&value)? + "\n"
        }
        Format::Table => {
            let mut text = render::model(&summary);
            if let Some(reads) = &reads {
                text.push_str(&render::reads(reads.files.len(), reads.bytes_read, reads.file_bytes));
            }
            text
        }
    };
    Ok(Outcome::ok(stdout))
}

fn presets(format: Format) -> Result<Outcome, Failure> {
    let stdout = match format {
        Format::Json => serde_json::to_string_pretty(&render::presets_json())? + "\n",
        Format::Table => render::presets(),
    };
    Ok(Outcome::ok(stdout))
}

/// The `export` options given on the command line.
struct ExportRequest {
    hosts: Vec<String>,
    main: Option<String>,
    model: Option<String>,
    image: Option<String>,
}

/// Exports to `target`, or to the plan's own engine.
fn export(
    path: &Path,
    target: Option<Target>,
    request: ExportRequest,
    format: ExportFormat,
) -> Result<Outcome, Failure> {
    let text = read(path)?;
    let value: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| Failure(format!("`{}` is not valid JSON ({e}); give a plan or a scenario", path.display())))?;
    let (plan, mut options) = if stageplan::export::is_plan(&value) {
        let plan =
            stageplan::export::plan_from_json(&text).map_err(|e| Failure(format!("`{}`: {e}", path.display())))?;
        let options = ExportOptions::for_plan(&plan);
        (plan, options)
    } else {
        let problem = load_problem(path, text.as_str())?;
        (stageplan::plan(&problem), ExportOptions::for_problem(&problem))
    };
    if !plan.feasible {
        let why = plan.diagnostics.first().map_or_else(String::new, |d| format!(": {}", d.message));
        return Ok(Outcome {
            stdout: String::new(),
            stderr: format!("error: the plan does not fit its machines{why}; nothing to export\n"),
            code: ExitCode::from(1),
        });
    }
    let Some(target) = target.or_else(|| Target::of_engine(plan.engine)) else {
        return Err(Failure(
            "`--to` is needed: the plan's engine is `generic`; give `--to llama.cpp`, vllm, exo, kubernetes, deepspeed or megatron".into(),
        ));
    };
    for host in &request.hosts {
        let (node, address) =
            host.split_once('=').filter(|(n, a)| !n.trim().is_empty() && !a.trim().is_empty()).ok_or_else(|| {
                Failure(format!("`--host {host}` is not `NODE=HOST[:PORT]`, e.g. `--host mac=192.168.1.20`"))
            })?;
        options.hosts.insert(node.trim().to_owned(), address.trim().to_owned());
    }
    options.main = request.main;
    options.model = request.model;
    options.image = request.image;
    let export = stageplan::export::export(&plan, target, &options)?;
    Ok(match format {
        ExportFormat::Json => Outcome::ok(serde_json::to_string_pretty(&export)? + "\n"),
        ExportFormat::Text => {
            let stderr = export.notes.iter().map(|n| format!("note: {}\n", stageplan::quote::line(n))).collect();
            Outcome { stdout: export.text, stderr, code: ExitCode::SUCCESS }
        }
    })
}

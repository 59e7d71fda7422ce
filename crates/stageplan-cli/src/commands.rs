//! The subcommands, as functions from arguments to output text and an exit code.

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use stageplan::model::HfConfig;
use stageplan::presets::ModelPreset;
use stageplan::scenario::KV_FORMATS;
use stageplan::{Model, Objective, Policy, Scenario, TensorType, WeightFormat};

use crate::render;

/// Split a large model across mismatched machines, and prove the split is best.
#[derive(Debug, Parser)]
#[command(name = "stageplan", version, about, max_term_width = 100)]
pub struct Cli {
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
    /// Show a model's parameters, bytes per layer and type mix.
    Model {
        /// A model preset name or a Hugging Face `config.json`.
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
    /// List model presets, device presets and weight formats.
    Presets {
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
    },
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
enum Format {
    Table,
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

/// What a command printed and how it ends.
pub struct Outcome {
    pub stdout: String,
    pub code: ExitCode,
}

impl Outcome {
    fn ok(stdout: String) -> Outcome {
        Outcome { stdout, code: ExitCode::SUCCESS }
    }
}

/// A one-line error for standard error; the process exits with 2.
#[derive(Debug)]
pub struct Failure(String);

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl<E: std::error::Error> From<E> for Failure {
    fn from(error: E) -> Failure {
        Failure(error.to_string())
    }
}

/// Runs one command.
///
/// # Errors
/// Bad input: unreadable files, malformed scenarios, unknown names.
pub fn run(cli: Cli) -> Result<Outcome, Failure> {
    match cli.command {
        Command::Plan { scenario, format, objective, policy, verify } => {
            plan(&scenario, format, objective, policy, verify)
        }
        Command::Model { model, weights, kv, format } => model_command(&model, weights.as_deref(), &kv, format),
        Command::Presets { format } => presets(format),
    }
}

fn read(path: &Path) -> Result<String, Failure> {
    let text =
        if path == Path::new("-") { std::io::read_to_string(std::io::stdin()) } else { std::fs::read_to_string(path) };
    text.map_err(|e| Failure(format!("cannot read `{}`: {e}", path.display())))
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
    let problem = scenario.problem()?;
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
    Ok(Outcome { stdout, code })
}

fn model_command(name: &str, weights: Option<&str>, kv: &str, format: Format) -> Result<Outcome, Failure> {
    let weights: WeightFormat = weights.map_or(Ok(WeightFormat::default()), str::parse)?;
    let kv: TensorType = kv
        .parse()
        .ok()
        .filter(|t| KV_FORMATS.contains(t))
        .ok_or_else(|| Failure(format!("`--kv {kv}` is not a KV-cache format; use `f16`, `q8_0`, `q4_0`, …")))?;
    let model = resolve_model(name, weights)?;
    let summary = model.summary(kv);
    let stdout = match format {
        Format::Json => serde_json::to_string_pretty(&summary)? + "\n",
        Format::Table => render::model(&summary),
    };
    Ok(Outcome::ok(stdout))
}

/// A preset name, or a path to a `config.json`.
fn resolve_model(name: &str, weights: WeightFormat) -> Result<Model, Failure> {
    if let Ok(preset) = ModelPreset::find(name) {
        return Ok(preset.model(weights)?);
    }
    let path = Path::new(name);
    if !path.exists() {
        let err = ModelPreset::find(name).err().map(|e| e.to_string()).unwrap_or_default();
        return Err(Failure(format!("`{name}` is neither a file nor a model preset: {err}")));
    }
    let config = HfConfig::from_json(&read(path)?)?;
    let arch = config.transformer()?;
    let label =
        path.parent().and_then(|p| p.file_name()).and_then(|n| n.to_str()).unwrap_or(&arch.model_type).to_owned();
    Ok(Model::from_transformer(&label, arch, weights))
}

fn presets(format: Format) -> Result<Outcome, Failure> {
    let stdout = match format {
        Format::Json => serde_json::to_string_pretty(&render::presets_json())? + "\n",
        Format::Table => render::presets(),
    };
    Ok(Outcome::ok(stdout))
}

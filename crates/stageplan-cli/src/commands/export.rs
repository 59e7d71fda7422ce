//! `stageplan export`: a plan (or a scenario, planned first) → what an engine takes.

use std::path::Path;
use std::process::ExitCode;

use stageplan::export::{ExportError, ExportInput, ExportOptions, Target};

use crate::cli::ExportFormat;
use crate::outcome::{Failure, Outcome};
use crate::{input, load};

/// The `export` options given on the command line.
pub(super) struct ExportRequest {
    /// `--to`: the engine; the plan's own when not given.
    pub to: Option<String>,
    pub hosts: Vec<String>,
    pub main: Option<String>,
    pub model: Option<String>,
    pub image: Option<String>,
}

/// Exports to `--to`, or to the plan's own engine; exit 1, with nothing printed, when the
/// plan does not fit.
pub(super) fn export(path: &Path, request: ExportRequest, format: ExportFormat) -> Result<Outcome, Failure> {
    let target = request
        .to
        .as_deref()
        .map(|to| to.parse::<Target>().map_err(|e| Failure(format!("`--to`: {e}"))))
        .transpose()?;
    let text = input::read_text(path)?;
    let input = stageplan::export::read_input(&text).map_err(|e| match e {
        ExportError::NotJson(_) => Failure(format!("`{}` {e}", path.display())),
        _ => Failure(format!("`{}`: {e}", path.display())),
    })?;
    let (plan, mut options) = match input {
        ExportInput::Replicas(replicas) => return export_replicas(&replicas, target, request, format),
        ExportInput::Plan(plan) => {
            let options = ExportOptions::for_plan(&plan);
            (*plan, options)
        }
        ExportInput::Scenario => {
            let problem = load::problem(path, text.as_str())?;
            (stageplan::plan(&problem), ExportOptions::for_problem(&problem))
        }
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
    given(&mut options, request)?;
    let export = stageplan::export::export(&plan, target, &options)?;
    printed(export, format)
}

/// Replicas, each as llama.cpp runs it, and the balancer's list ([`stageplan::export::replicas`]).
fn export_replicas(
    replicas: &[stageplan::export::ReplicaPlan],
    target: Option<Target>,
    request: ExportRequest,
    format: ExportFormat,
) -> Result<Outcome, Failure> {
    let mut options = ExportOptions::for_plans(replicas.iter().map(|r| &r.plan));
    given(&mut options, request)?;
    let export = stageplan::export::replicas(replicas, target.unwrap_or(Target::LlamaCpp), &options)?;
    printed(export, format)
}

/// The command line's `--host`, `--main`, `--model` and `--image` into `options`.
fn given(options: &mut ExportOptions, request: ExportRequest) -> Result<(), Failure> {
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
    Ok(())
}

/// An export as `--format` asks: its text with notes on standard error, or JSON.
fn printed(export: stageplan::export::Export, format: ExportFormat) -> Result<Outcome, Failure> {
    Ok(match format {
        ExportFormat::Json => Outcome::ok(serde_json::to_string_pretty(&export)? + "\n"),
        ExportFormat::Text => {
            let stderr = export.notes.iter().map(|n| format!("note: {}\n", stageplan::quote::line(n))).collect();
            Outcome { stdout: export.text, stderr, code: ExitCode::SUCCESS }
        }
    })
}

//! The subcommands: [`run`] hands each its arguments; each module is one command's body,
//! from arguments to output text and an exit code.

mod agent;
mod calibrate;
mod deploy;
mod export;
mod model;
mod nodes;
mod plan;
mod presets;
mod probe;
mod reconcile;
mod replan;
mod run_sharded;
mod status;
mod verify;

use crate::cli::{Cli, Command, NodesAction};
use crate::outcome::{Failure, Outcome};

/// Runs one command.
///
/// # Errors
/// Bad input: unreadable files, malformed scenarios, unknown names.
pub(crate) fn run(cli: Cli) -> Result<Outcome, Failure> {
    match cli.command {
        Command::Plan { scenario, format, objective, policy, verify, users, rate, spread, ttft, tpot, percentile } => {
            let targets = plan::targets(ttft.as_deref(), tpot.as_deref(), percentile)?;
            if let Some(rate) = rate {
                stageplan::demand::check_rate(rate, users).map_err(|e| Failure(format!("`--rate` {e}")))?;
            }
            if let Some(spread) = spread {
                stageplan::demand::check_spread(spread).map_err(|e| Failure(format!("`--spread` {e}")))?;
            }
            let overrides = plan::Overrides { objective, policy, users, rate, spread, targets };
            plan::plan(&scenario, format, overrides, verify)
        }
        Command::Replan { current, scenario, tolerance, hysteresis, format } => {
            replan::replan(&current, &scenario, stageplan::ReplanOptions { tolerance, hysteresis }, format)
        }
        Command::Model { model, weights, kv, kv_v, format } => {
            model::model(&model, weights.as_deref(), (&kv, kv_v.as_deref()), format)
        }
        Command::Presets { format } => presets::presets(format),
        Command::Calibrate { results, device, bandwidth, compute, memory, model, format } => {
            calibrate::calibrate(&results, device, bandwidth, compute, memory, model.as_deref(), format)
        }
        Command::Reconcile { store, interval, passes, id, lease, measured } => {
            reconcile::reconcile(&store, &interval, passes, id, &lease, measured)
        }
        Command::Deploy { deployment, store } => deploy::deploy(&store, &deployment),
        Command::Undeploy { name, store } => deploy::undeploy(&store, &name),
        Command::Nodes { action } => match action {
            NodesAction::Add { name, memory, gpus, node_file, store } => {
                nodes::add(&store, &name, memory.as_deref(), gpus, node_file.as_deref())
            }
            NodesAction::Remove { name, store } => nodes::remove(&store, &name),
            NodesAction::List { store, format } => nodes::list(&store, format),
        },
        Command::Status { store, format, measured } => status::status(&store, format, measured),
        Command::Export { plan_or_scenario, to, hosts, main, model, image, format } => {
            export::export(&plan_or_scenario, export::ExportRequest { to, hosts, main, model, image }, format)
        }
        Command::Probe { adapter, cpu, gpu, threads, quick, engine, model, memory_cap, format } => probe::probe(
            probe::ProbeRequest { adapter, cpu, gpu, threads, quick, engine, models: model, memory_cap },
            format,
        ),
        Command::Guard { parent, command } => {
            let mut command = command.into_iter();
            let program = command.next().unwrap_or_default();
            let code = stageplan_agent::guard::run(parent, &program, command);
            Ok(Outcome { stdout: String::new(), stderr: String::new(), code })
        }
        Command::Verify { scenario, engine, model, out, format } => {
            verify::verify(&scenario, &engine, model.as_deref(), out.as_deref(), format)
        }
        Command::Agent(args) => agent::agent(args),
        Command::RunSharded { scenario, width, tokens, micro_batches, replicas } => {
            run_sharded::run_sharded(&scenario, &run_sharded::ShardedOptions { width, tokens, micro_batches, replicas })
        }
    }
}

//! `stageplan verify`: a scenario's plan run by llama.cpp on this machine, exactly as the
//! export prints it (every machine's rpc-server on 127.0.0.1), and a receipt of what it
//! measured beside what the plan says.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use stageplan::export::{ExportOptions, Launch};
use stageplan_agent::launch::SERVER;
use stageplan_agent::{Guard, Policy, Receipt, Spec, State, Supervisor};

use crate::cli::Format;
use crate::outcome::{Failure, Outcome};
use crate::{input, load, render};

/// How long the engines may take to load and serve.
const START_TIMEOUT: Duration = Duration::from_secs(300);

pub(super) fn verify(
    path: &Path,
    engine: &Path,
    model: Option<&Path>,
    out: Option<&Path>,
    format: Format,
) -> Result<Outcome, Failure> {
    let text = input::read_text(path)?;
    let problem = load::problem(path, text.as_str())?;
    let plan = stageplan::plan(&problem);
    if plan.engine != stageplan::engine::Engine::LlamaCpp {
        return Err(Failure(format!(
            "`engine`: the scenario plans for {}, and verify runs llama.cpp, whose memory differs: set `\"engine\": \"llama.cpp\"`",
            plan.engine.name()
        )));
    }
    if !plan.feasible {
        return Ok(Outcome {
            stdout: String::new(),
            stderr: "the plan does not fit, so there is nothing to run: `stageplan plan` says what is missing\n".into(),
            code: ExitCode::from(1),
        });
    }
    let model = match model {
        Some(model) => model.to_string_lossy().into_owned(),
        None => plan.model.file.clone().ok_or_else(|| {
            Failure("`--model`: the scenario names no model file; give the `.gguf` llama.cpp should load".into())
        })?,
    };
    // Every machine on this one, each at a port of its own.
    let mut options = ExportOptions::for_problem(&problem);
    options.model = Some(model);
    for stage in &plan.stages {
        let machine = stage.gpu_of.as_ref().map_or(&stage.node, |g| &g.machine);
        if !options.hosts.contains_key(machine) {
            options.hosts.insert(machine.clone(), format!("127.0.0.1:{}", free_port()?));
        }
    }
    let launches = stageplan::export::llama_cpp_launches(&plan, &options)?;
    let server_address = SocketAddr::from((Ipv4Addr::LOCALHOST, free_port()?));
    let specs = specs(&launches, engine, server_address)?;

    let stop = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stop);
    // Without it, Ctrl-C would end the command and leave the engines running.
    let _ = ctrlc::set_handler(move || flag.store(true, Ordering::SeqCst));
    let logs = std::env::temp_dir().join(format!("stageplan-verify-{}", std::process::id()));
    // Each engine under `stageplan guard`: killed with this command, even by SIGKILL.
    let guard = std::env::current_exe().ok().map(|program| Guard { program, args: vec!["guard".to_owned()] });
    let policy = Policy { start_timeout: START_TIMEOUT, attempts: 1, guard, ..Policy::new(logs.clone()) };
    let mut supervisor = Supervisor::new(policy).map_err(|e| Failure(format!("{}: {e}", logs.display())))?;
    // The rpc-servers first: llama-server connects to each as it starts.
    let (servers, rpc): (BTreeMap<String, Spec>, BTreeMap<String, Spec>) =
        specs.clone().into_iter().partition(|(name, _)| name == SERVER);
    supervisor.apply(&rpc);
    serving(&mut supervisor, &stop)?;
    supervisor.apply(&rpc.into_iter().chain(servers).collect());
    serving(&mut supervisor, &stop)?;

    let log = supervisor.log(SERVER).map(Path::to_path_buf).unwrap_or_default();
    let receipt = Receipt::measure(&plan, &launches, server_address, &log).map_err(Failure);
    supervisor.shutdown();
    let receipt = receipt?;
    let json = serde_json::to_string_pretty(&receipt).expect("a receipt serializes") + "\n";
    if let Some(out) = out {
        std::fs::write(out, &json).map_err(|e| Failure(format!("`--out` {}: {e}", out.display())))?;
    }
    let _ = std::fs::remove_dir_all(&logs);
    let stdout = match format {
        Format::Json => json,
        Format::Table => render::receipt::receipt(&plan, &receipt),
    };
    let code = if receipt.far.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(1) };
    Ok(Outcome { stdout, stderr: String::new(), code })
}

/// Each launch as a process, named for the supervisor; llama-server listening at `server`.
fn specs(launches: &[Launch], engine: &Path, server: SocketAddr) -> Result<BTreeMap<String, Spec>, Failure> {
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let mut out = BTreeMap::new();
    for (i, launch) in launches.iter().enumerate() {
        let spec = stageplan_agent::launch::spec(launch, engine, cores, server)
            .map_err(|e| Failure(format!("`--engine`: {e}")))?;
        let name = if launch.program == SERVER { SERVER.to_owned() } else { format!("rpc-{i}-{}", launch.machine) };
        out.insert(name, spec);
    }
    Ok(out)
}

/// Polls until every process serves; the first failure, with its log's last lines, ends it.
fn serving(supervisor: &mut Supervisor, stop: &AtomicBool) -> Result<(), Failure> {
    let deadline = Instant::now() + START_TIMEOUT + Duration::from_secs(5);
    loop {
        supervisor.poll();
        if let Some((name, failure)) = supervisor.states().find_map(|(name, state)| match state {
            State::Failed { last, .. } | State::Restarting { last, .. } => Some((name, last)),
            _ => None,
        }) {
            return Err(Failure(format!("{name} {}: {}", failure.why, failure.log_tail.join(" / "))));
        }
        if supervisor.states().all(|(_, state)| *state == State::Serving) {
            return Ok(());
        }
        if stop.load(Ordering::SeqCst) {
            return Err(Failure("stopped before the engines served".into()));
        }
        if Instant::now() > deadline {
            return Err(Failure("the engines did not serve in time".into()));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A port of 127.0.0.1 free now (the OS's pick; another process could take it before use).
fn free_port() -> Result<u16, Failure> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(|e| Failure(format!("no free port: {e}")))?;
    Ok(listener.local_addr().map_err(|e| Failure(format!("no free port: {e}")))?.port())
}

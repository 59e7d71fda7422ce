//! `stageplan agent`: runs, on this machine, the engines the control loop bound to it, a
//! pass every `--interval`, until stopped (then its engines stop too).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use stageplan::quote::line;
use stageplan_agent::fleet::{Agent, AgentConfig};
use stageplan_agent::report::{AgentReport, ProcessState};
use stageplan_agent::{Guard, Policy, Supervisor};
use stageplan_reconcile::{Controller, Event, NoMetrics, StoreError};
use stageplan_store::AnyStore;
use tracing::{info, warn};

use super::reconcile::{duration, init_logging, resolve};
use crate::cli::AgentArgs;
use crate::outcome::{Failure, Outcome};
use crate::store;

pub(super) fn agent(request: AgentArgs) -> Result<Outcome, Failure> {
    let node = request.node;
    if !stageplan_reconcile::spec::is_name(&node) {
        return Err(Failure(format!(
            "`--node` `{}` is not a node's name; use the name `nodes add` gave it (letters, digits, `-`, `_`, `.`)",
            line(&node)
        )));
    }
    let joining = match (&request.memory, &request.node_file) {
        (Some(memory), _) => Some(super::nodes::node(&node, memory, request.gpus)?),
        (None, Some(file)) => Some(super::nodes::node_from_file(&node, file)?),
        (None, None) => None,
    };
    let interval = duration("--interval", &request.interval)?;
    let lease = duration("--lease", &request.lease)?;
    if lease < interval * 2 {
        return Err(Failure(format!(
            "`--lease {}` must be at least twice `--interval {}`: the agent reports once a pass",
            request.lease, request.interval
        )));
    }
    // llama.cpp's rpc-server listens on an IPv4 address only (`ggml-rpc/transport.cpp`).
    let bind: IpAddr = match &request.bind {
        Some(bind) => bind.parse::<std::net::Ipv4Addr>().map_err(|_| {
            Failure(format!(
                "`--bind` `{}` is not an IPv4 address (llama.cpp's rpc-server listens on IPv4 only); give the one to listen at, e.g. 192.168.1.20",
                line(bind)
            ))
        })?,
        None => request.address.parse::<std::net::Ipv4Addr>().map_err(|_| {
            Failure(format!(
                "`--address` `{}` is not an IPv4 address, and the engines listen at one: give it with `--bind`",
                line(&request.address)
            ))
        })?,
    }
    .into();
    if !stageplan::export::is_host(&request.address) {
        return Err(Failure(format!("`--address` `{}` is not a host name or an IP address", line(&request.address))));
    }
    let metrics = match &request.metrics {
        None => None,
        Some(address) => {
            let at: std::net::SocketAddr = address.parse().map_err(|_| {
                Failure(format!("`--metrics` `{}` is not an address; give IP:PORT, e.g. 127.0.0.1:9464", line(address)))
            })?;
            Some(std::net::TcpListener::bind(at).map_err(|e| Failure(format!("`--metrics` {at}: {e}")))?)
        }
    };
    if !request.engine.join(stageplan_agent::launch::SERVER).is_file() {
        return Err(Failure(format!(
            "`--engine` {} has no `{}`; give the folder of llama.cpp's binaries (its build's `bin`)",
            request.engine.display(),
            stageplan_agent::launch::SERVER
        )));
    }
    let log_dir = request.log_dir.unwrap_or_else(|| std::env::temp_dir().join(format!("stageplan-agent-{node}")));
    let mut etcd = store::open_for_loop(&request.store)?;
    init_logging();
    if let Some(record) = joining {
        let (gpus, bytes) = (record.gpus, record.memory);
        with_store(&request.store, &mut etcd, |store| {
            Controller::default().handle(store, Event::NodeJoined(record), &NoMetrics).map(|_| ())
        })
        .map_err(|e| store::failure(&request.store, &e))?;
        info!(node = %node, memory = %stageplan::units::format_bytes(bytes as f64), gpus, "joined the fleet");
    }
    if bind.is_unspecified() {
        warn!(%bind, "the engines listen on every interface, and llama.cpp's RPC server has no authentication: anyone who reaches this machine can use them");
    }
    info!(
        node = %node,
        store = %request.store,
        %bind,
        port = request.port,
        "agent started; its rpc-servers have no authentication: whoever reaches {bind} on these ports can use them, and whoever can write the store can start engines here"
    );
    // Each engine under `stageplan guard`: gone with this agent, even when it is killed.
    let guard = std::env::current_exe().ok().map(|program| Guard { program, args: vec!["guard".to_owned()] });
    let supervisor = Supervisor::new(Policy { guard, ..Policy::new(log_dir.clone()) })
        .map_err(|e| Failure(format!("`--log-dir` {}: {e}", log_dir.display())))?;
    let config = AgentConfig {
        node,
        address: request.address,
        bind,
        engine: request.engine,
        first_port: request.port,
        lease,
        cores: std::thread::available_parallelism().map_or(1, std::num::NonZero::get),
        resolve,
    };
    let mut agent = Agent::new(config, supervisor);
    if let Some(listener) = metrics {
        let exposed = stageplan_agent::metrics::Shared::default();
        info!(address = %listener.local_addr().map(|a| a.to_string()).unwrap_or_default(), "serving /metrics");
        stageplan_agent::metrics::serve(listener, exposed.clone());
        agent.expose(exposed);
    }
    run(agent, &request.store, etcd, interval, request.passes);
    Ok(Outcome::ok(String::new()))
}

/// Passes until `passes` or a stop; then the engines stop and the report says so.
fn run(mut agent: Agent, target: &str, mut etcd: Option<AnyStore>, interval: Duration, passes: Option<u64>) {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    if let Err(e) = ctrlc::set_handler(move || flag.store(true, Ordering::SeqCst)) {
        warn!(error = %e, "cannot catch Ctrl-C; stopping will leave the report to lapse");
    }
    let mut done = 0u64;
    let mut before = agent.report().clone();
    loop {
        let started = Instant::now();
        match with_store(target, &mut etcd, |store| agent.pass(store)) {
            Ok(()) => log_changes(&before, agent.report()),
            Err(e) => warn!(error = %e, "pass stopped; the engines run on as they are"),
        }
        before = agent.report().clone();
        done += 1;
        if passes.is_some_and(|n| done >= n) {
            break;
        }
        while started.elapsed() < interval && !stop.load(Ordering::SeqCst) {
            std::thread::sleep(interval.saturating_sub(started.elapsed()).min(Duration::from_millis(50)));
        }
        if stop.load(Ordering::SeqCst) {
            break;
        }
    }
    info!("stopping the engines");
    if let Err(e) = with_store(target, &mut etcd, |store| agent.stop(store)) {
        warn!(error = %e, "the engines stopped, but the store was not told; the loop sees it when the report lapses");
    }
}

/// Runs `f` on the store: etcd's connection, or the redb file opened for this call alone
/// (so the loop and other agents can use it in between).
fn with_store(
    target: &str,
    etcd: &mut Option<AnyStore>,
    f: impl FnOnce(&mut AnyStore) -> Result<(), StoreError>,
) -> Result<(), StoreError> {
    match etcd {
        Some(store) => f(store),
        None => f(&mut store::patiently(target, stageplan_store::open)?),
    }
}

/// Logs each process whose state changed, and each replica's new problem or receipt.
fn log_changes(before: &AgentReport, now: &AgentReport) {
    let states = |r: &AgentReport| -> BTreeMap<String, ProcessState> {
        r.replicas.values().flat_map(|x| x.processes.iter().map(|p| (p.name.clone(), p.state))).collect()
    };
    let (old, new) = (states(before), states(now));
    for (name, state) in &new {
        if old.get(name) != Some(state) {
            let process = now.replicas.values().flat_map(|r| &r.processes).find(|p| &p.name == name);
            let why = process.and_then(|p| p.why.as_deref()).unwrap_or_default();
            info!(process = %line(name), state = ?state, why = %line(why), "engine");
        }
    }
    for name in old.keys().filter(|n| !new.contains_key(*n)) {
        info!(process = %line(name), "engine stopped: no longer bound here");
    }
    for (key, replica) in &now.replicas {
        let was = before.replicas.get(key);
        if let Some(problem) = &replica.problem
            && was.and_then(|r| r.problem.as_ref()) != Some(problem)
        {
            warn!(replica = %line(key), problem = %line(problem), "not run here");
        }
        if let Some(why) = &replica.receipt_failed
            && was.and_then(|r| r.receipt_failed.as_ref()) != Some(why)
        {
            warn!(replica = %line(key), why = %line(why), "receipt not measured; tried again in a minute");
        }
        if let Some(receipt) = &replica.receipt
            && was.and_then(|r| r.receipt.as_ref()).is_none()
        {
            info!(
                replica = %line(key),
                decode_planned = receipt.decode.planned_per_s,
                decode_measured = receipt.decode.measured_per_s,
                far = receipt.far.len(),
                "receipt"
            );
        }
    }
}

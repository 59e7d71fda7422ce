//! `stageplan reconcile`: the control loop, a pass every `--interval` until stopped.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use stageplan::Scenario;
use stageplan::quote::line;
use stageplan::units::Seconds;
use stageplan_agent::report::{AGENTS, AgentReport, Liveness, replicas_serving};
use stageplan_reconcile::{Controller, Store, StoreError};
use stageplan_store::AnyStore;
use tracing::{info, warn};

use crate::cli::Measured;
use crate::load;
use crate::observe::Sources;
use crate::outcome::{Failure, Outcome};
use crate::store::{self, now_ms};

/// The least time a pass's measurements get, however short `--interval` is.
const MIN_MEASURE_TIME: Duration = Duration::from_secs(2);

/// Checks the loop's settings and its store, starts logging, and runs passes until
/// `--passes` or a stop; a damaged store ends it with exit 2.
pub(super) fn reconcile(
    store: &str,
    interval_text: &str,
    passes: Option<u64>,
    id: String,
    lease: &str,
    measured: Measured,
) -> Result<Outcome, Failure> {
    let interval = duration("--interval", interval_text)?;
    let options = LoopOptions {
        interval,
        passes,
        id,
        lease: duration("--lease", lease)?,
        // A pass's measurements take at most its interval (2 s at least, for a short one).
        sources: measured.sources()?.within(interval.max(MIN_MEASURE_TIME)),
    };
    if options.lease < options.interval * 2 {
        return Err(Failure(format!(
            "`--lease {lease}` must be at least twice `--interval {interval_text}`: the leader renews once a pass"
        )));
    }
    // Before the log starts: a store the loop cannot use is one line, `error: …`.
    let etcd = store::open_for_loop(store)?;
    init_logging();
    run_loop(store, etcd, &options)?;
    Ok(Outcome::ok(String::new()))
}

/// Logs for the long-running loop: to standard error, colored only on a terminal.
pub(super) fn init_logging() {
    use std::io::IsTerminal;
    let ansi = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let _ = tracing_subscriber::fmt().with_writer(std::io::stderr).with_ansi(ansi).with_target(false).try_init();
}

/// Loop settings.
struct LoopOptions {
    interval: Duration,
    passes: Option<u64>,
    id: String,
    lease: Duration,
    sources: Sources,
}

/// How the loop turns a planned deployment's scenario into a problem: like `plan`, model
/// files included (their paths were made absolute by `deploy`).
pub(super) fn resolve(scenario: &Scenario) -> Result<stageplan::Problem, String> {
    load::check(Path::new("."), scenario.clone()).map(|c| c.problem).map_err(|e| e.0)
}

/// A pass every interval. A redb file is opened for each pass so `deploy`, `nodes` and
/// `status` can use it in between; on etcd (`etcd`, connected), only the leader passes.
fn run_loop(target: &str, mut etcd: Option<AnyStore>, options: &LoopOptions) -> Result<(), Failure> {
    let mut controller = Controller::new(stageplan_reconcile::Options { resolve, ..Default::default() });
    // etcd leases are whole seconds: round up, never below what was asked.
    let lease_s = options.lease.as_secs_f64().ceil().max(1.0) as i64;
    info!(store = target, interval_ms = options.interval.as_millis() as u64, "reconcile loop started");
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    if let Err(e) = ctrlc::set_handler(move || flag.store(true, Ordering::SeqCst)) {
        warn!(error = %e, "cannot catch Ctrl-C; stopping will leave the lease to lapse");
    }
    let mut passes = 0u64;
    let mut failure = None;
    let mut liveness = Liveness::default();
    loop {
        let started = Instant::now();
        let mut metrics = options.sources.measure();
        let mut pass = |mut store: &mut dyn Store| {
            agents_up(store, &mut liveness, &mut metrics)?;
            controller.pass(&mut store, now_ms(), &metrics)
        };
        let result = match &mut etcd {
            Some(AnyStore::Etcd(store)) => match store.try_lead(&options.id, lease_s) {
                Ok(true) => Some(pass(store)),
                Ok(false) => {
                    info!(id = %options.id, leader = ?store.leader_id().ok().flatten(), "following");
                    None
                }
                Err(e) => Some(Err(e)),
            },
            _ => Some(store::patiently(target, stageplan_store::open).and_then(|mut store| pass(&mut store))),
        };
        match result {
            Some(Ok(report)) => {
                for (key, why) in &report.quarantined {
                    warn!(record = %line(key), why = %line(why), "record left alone: this version cannot use it");
                }
                for (name, from, to) in &report.rescaled {
                    info!(deployment = %line(name), from, to, "autoscaled");
                }
                for (name, why) in &report.rebalanced {
                    info!(deployment = %line(name), why = %line(why), "re-balanced");
                }
                for (name, why) in &report.held {
                    info!(deployment = %line(name), why = %line(why), "re-balance held");
                }
                info!(
                    scheduled = report.scheduled.len(),
                    released = report.released.len(),
                    pending = report.pending.len(),
                    waiting = report.waiting.len(),
                    rescaled = report.rescaled.len(),
                    rebalanced = report.rebalanced.len(),
                    commits = report.commits,
                    ms = (started.elapsed().as_secs_f64() * 1e4).round() / 10.0,
                    "pass"
                );
            }
            // A damaged store does not heal by waiting: stop, and say what it is and what to do.
            Some(Err(e @ StoreError::Corrupt { .. })) => {
                failure = Some(store::failure(target, &e));
                break;
            }
            Some(Err(e)) => warn!(error = %e, "pass stopped; the next pass starts from the store"),
            None => {}
        }
        passes += 1;
        if options.passes.is_some_and(|n| passes >= n) {
            break;
        }
        // Sleep in short steps so a stop request is seen within 50 ms.
        while started.elapsed() < options.interval && !stop.load(Ordering::SeqCst) {
            std::thread::sleep(options.interval.saturating_sub(started.elapsed()).min(Duration::from_millis(50)));
        }
        if stop.load(Ordering::SeqCst) {
            info!("stopping");
            break;
        }
    }
    if let Some(AnyStore::Etcd(store)) = &mut etcd {
        let _ = store.resign();
    }
    failure.map_or(Ok(()), Err)
}

/// Whether each node's agent is alive, from the agents' records (`stageplan agent`), over
/// what the metrics say: a node whose agent is gone is down, and the loop moves its stages.
/// Nodes without an agent keep what the metrics say.
fn agents_up(
    store: &mut dyn Store,
    liveness: &mut Liveness,
    metrics: &mut stageplan_reconcile::observe::Observations,
) -> Result<(), StoreError> {
    let reports: Vec<AgentReport> = store
        .list(AGENTS)?
        .into_iter()
        .filter_map(|(key, v)| match serde_json::from_str::<AgentReport>(&v.value) {
            Ok(report) => Some(report),
            Err(e) => {
                warn!(record = %line(&key), why = %line(&e.to_string()), "agent record left alone: this version cannot read it");
                None
            }
        })
        .collect();
    for (node, up) in liveness.up(&reports, Instant::now()) {
        metrics.up.insert(node, up);
    }
    metrics.serving.extend(replicas_serving(&reports));
    Ok(())
}

/// Parses `--interval` and `--lease`: 1 ms to 24 h (a shorter time would run as 0 ms).
pub(super) fn duration(flag: &str, text: &str) -> Result<Duration, Failure> {
    let seconds = Seconds::parse(text).map_err(|e| Failure(format!("`{flag}`: {e}")))?;
    if !(0.001..=86_400.0).contains(&seconds.get()) {
        return Err(Failure(format!("`{flag} {text}` must be between 1 ms and 24 h, e.g. `5s`")));
    }
    Ok(Duration::from_secs_f64(seconds.get()))
}

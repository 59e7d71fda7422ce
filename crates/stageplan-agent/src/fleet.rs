//! The agent's pass: from the bindings in the store to the processes this machine runs, and
//! back to the store as its report ([`AgentReport`]).
//!
//! The machine of a replica's first stage plans it — its deployment's scenario with the
//! bound split ([`replica_plan`]), exported for llama.cpp — and publishes every machine's
//! launches in its report; the others start theirs from there, so only that machine reads
//! the model file. Ports are each agent's to choose (a block per replica, kept while the
//! replica runs there) and published in its report; the machine that serves a replica
//! starts llama-server only once every other machine's agent reports its rpc-servers for it
//! serving. A replica runs the split it is bound with: during a roll, one waiting its turn
//! keeps serving its old split, and one whose bindings are not a whole pipeline (a move
//! under way) runs nothing.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use stageplan::export::{ExportOptions, Launch};
use stageplan::scenario::StageSpec;
use stageplan::{Plan, Problem, Scenario};
use stageplan_reconcile::spec::is_whole_pipeline;
use stageplan_reconcile::{Expect, Op, Planned, Snapshot, Store, StoreError};

use crate::launch::SERVER;
use crate::report::{AGENTS, AgentReport, ProcessReport, ReplicaReport};
use crate::{Receipt, Spec, State, Supervisor};

/// Ports of one replica's block on a machine: its rpc-servers' (one per GPU on a machine
/// with several, then its CPU's), then llama-server's, the last.
fn block_len(machine_has_gpus: bool) -> u16 {
    if machine_has_gpus { stageplan::limits::MAX_GPUS_PER_MACHINE as u16 + 2 } else { 3 }
}

/// How long after a failed measurement a replica is measured again.
const RECEIPT_RETRY: Duration = Duration::from_secs(60);

/// What one agent is and where it runs its engines.
#[derive(Clone, Debug)]
pub struct AgentConfig {
    /// The node this agent runs, as the store and the scenarios name it.
    pub node: String,
    /// How the other machines reach this one's engines (a host name or an IP address).
    pub address: String,
    /// Where its engines listen: an IP address (`0.0.0.0` only when asked: llama.cpp's RPC
    /// server has no authentication).
    pub bind: IpAddr,
    /// The folder of llama.cpp's binaries.
    pub engine: PathBuf,
    /// The first port of this machine's blocks.
    pub first_port: u16,
    /// How long the loop waits for a new report before it takes this agent for gone.
    pub lease: Duration,
    /// This machine's cores (for an export's `--threads` of all of them).
    pub cores: usize,
    /// Reads a deployment's scenario into a problem (its model file included): the CLI's.
    pub resolve: fn(&Scenario) -> Result<Problem, String>,
}

/// One replica's part on this machine: its processes, the first port of its block, and
/// where this machine serves it, llama-server's address, the plan and every machine's
/// launches (what it publishes, and what a receipt compares).
struct Run {
    port: u16,
    specs: BTreeMap<String, Spec>,
    served: Option<Served>,
}

/// A replica as it is bound: its deployment's plan, and its stages in pipeline order.
#[derive(Clone, Debug)]
pub struct Bound<'s> {
    pub planned: &'s Planned,
    pub split: Vec<BoundStage>,
}

/// One stage of a replica as it is bound.
#[derive(Clone, Debug)]
pub struct BoundStage {
    pub machine: String,
    /// The plan's name for its node ([`Planned::plan_node`]): the machine, or its GPU.
    pub node: String,
    pub layers: [usize; 2],
}

/// What the machine that serves a replica planned.
struct Served {
    endpoint: Option<String>,
    plan: Plan,
    hosts: BTreeMap<String, String>,
    launches: Vec<Launch>,
}

/// One agent: its supervisor, the port blocks it gave out, and the receipts it measured.
#[derive(Debug)]
pub struct Agent {
    config: AgentConfig,
    supervisor: Supervisor,
    /// First port of each replica's block (`deployment/replica`), while it runs here.
    blocks: BTreeMap<String, (u16, u16)>,
    beat: u64,
    /// Receipts by replica, with the llama-server spec they measured.
    receipts: BTreeMap<String, (Spec, Receipt)>,
    /// Measurements under way, by replica.
    measuring: BTreeMap<String, (Spec, mpsc::Receiver<Result<Receipt, String>>)>,
    /// The last measurement that failed, by replica: its spec, when, and why.
    failed_receipts: BTreeMap<String, (Spec, Instant, String)>,
    /// The last report written.
    report: AgentReport,
    /// What `/metrics` serves, when the agent serves it.
    exposed: Option<crate::metrics::Shared>,
}

impl Agent {
    pub fn new(config: AgentConfig, supervisor: Supervisor) -> Agent {
        let report = AgentReport {
            node: config.node.clone(),
            address: config.address.clone(),
            beat: 0,
            lease_ms: config.lease.as_millis() as u64,
            stopped: false,
            replicas: BTreeMap::new(),
        };
        Agent {
            config,
            supervisor,
            blocks: BTreeMap::new(),
            beat: 0,
            receipts: BTreeMap::new(),
            measuring: BTreeMap::new(),
            failed_receipts: BTreeMap::new(),
            report,
            exposed: None,
        }
    }

    /// Keeps `exposed` up to date after each pass: what the agent's `/metrics` serves.
    pub fn expose(&mut self, exposed: crate::metrics::Shared) {
        self.exposed = Some(exposed);
    }

    /// The last report written.
    pub fn report(&self) -> &AgentReport {
        &self.report
    }

    /// One pass: reads the bindings and the other agents' reports, starts and stops this
    /// machine's engines to match, and writes this agent's report.
    ///
    /// # Errors
    /// The store is unavailable (the engines run on as they are).
    pub fn pass(&mut self, store: &mut impl Store) -> Result<(), StoreError> {
        let snapshot = Snapshot::load(store)?;
        let reports: BTreeMap<String, AgentReport> = store
            .list(AGENTS)?
            .into_iter()
            .filter_map(|(_, v)| serde_json::from_str::<AgentReport>(&v.value).ok())
            .map(|r| (r.node.clone(), r))
            .collect();
        let mut wanted = BTreeMap::new();
        let mut replicas = BTreeMap::new();
        let mut runs = BTreeMap::new();
        for (key, bound) in self.bound_here(&snapshot) {
            let mut replica = ReplicaReport {
                port: 0,
                endpoint: None,
                problem: None,
                processes: Vec::new(),
                receipt: None,
                receipt_failed: None,
                hosts: BTreeMap::new(),
                launches: Vec::new(),
            };
            match self.replica(&key, &bound, &reports) {
                Ok(run) => {
                    replica.port = run.port;
                    if let Some(served) = &run.served {
                        replica.endpoint.clone_from(&served.endpoint);
                        replica.hosts.clone_from(&served.hosts);
                        replica.launches = served.launches.iter().map(crate::launch::Published::from).collect();
                    }
                    replica.processes = run.specs.keys().map(|n| ProcessReport::of(n, &State::Starting)).collect();
                    wanted.extend(run.specs.clone());
                    runs.insert(key.clone(), run);
                }
                Err(problem) => replica.problem = Some(problem),
            }
            replicas.insert(key, replica);
        }
        self.blocks.retain(|key, _| replicas.contains_key(key));
        self.supervisor.apply(&wanted);
        self.supervisor.poll();
        for (key, replica) in &mut replicas {
            for process in &mut replica.processes {
                if let Some(state) = self.supervisor.state(&process.name) {
                    *process = ProcessReport::of(&process.name, state);
                }
            }
            if let Some(run) = runs.get(key)
                && let Some(served) = &run.served
            {
                self.measure(key, &run.specs, served, replica);
            }
        }
        self.receipts.retain(|key, _| replicas.contains_key(key));
        self.measuring.retain(|key, _| replicas.contains_key(key));
        self.failed_receipts.retain(|key, _| replicas.contains_key(key));
        self.beat += 1;
        self.report.beat = self.beat;
        self.report.replicas = replicas;
        if let Some(exposed) = &self.exposed {
            let servers = wanted
                .iter()
                .filter(|(name, _)| self.supervisor.state(name) == Some(&State::Serving))
                .filter_map(|(name, spec)| match &spec.ready {
                    crate::Ready::Http { address, .. } => Some((name.strip_suffix("/server")?.to_owned(), *address)),
                    _ => None,
                })
                .collect();
            let mut exposed = exposed.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            *exposed = crate::metrics::Exposed { report: Some(self.report.clone()), servers };
        }
        self.write(store)
    }

    /// Stops every engine and says so in the store (the loop then takes the node for down
    /// at once, rather than after a lease).
    ///
    /// # Errors
    /// The store is unavailable (the engines are stopped all the same).
    pub fn stop(&mut self, store: &mut impl Store) -> Result<(), StoreError> {
        self.supervisor.shutdown();
        self.report.stopped = true;
        self.report.replicas.clear();
        if let Some(exposed) = &self.exposed {
            let mut exposed = exposed.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            *exposed = crate::metrics::Exposed { report: Some(self.report.clone()), servers: Vec::new() };
        }
        self.beat += 1;
        self.report.beat = self.beat;
        self.write(store)
    }

    fn write(&self, store: &mut impl Store) -> Result<(), StoreError> {
        let value = serde_json::to_string(&self.report).map_err(|e| StoreError::Unavailable(e.to_string()))?;
        store.commit(&[Op::Put { key: format!("{AGENTS}{}", self.config.node), value, expect: Expect::Any }])?;
        Ok(())
    }

    /// The replicas with a stage bound to this node whose bindings are a whole pipeline
    /// ([`is_whole_pipeline`]), by `deployment/replica`: the split each serves, which during
    /// a roll may be an older plan's than its deployment's.
    fn bound_here<'s>(&self, snapshot: &'s Snapshot) -> Vec<(String, Bound<'s>)> {
        let mut out = Vec::new();
        for (name, (deployment, _)) in &snapshot.deployments {
            let Some(planned) = deployment.planned.as_deref() else { continue };
            for (replica, bindings) in snapshot.bindings(name) {
                if !is_whole_pipeline(&bindings) || !bindings.values().any(|a| a.node == self.config.node) {
                    continue;
                }
                let split = bindings
                    .values()
                    .map(|a| BoundStage { machine: a.node.clone(), node: planned.plan_node(a), layers: a.layers })
                    .collect();
                out.push((format!("{name}/{replica}"), Bound { planned, split }));
            }
        }
        out
    }

    /// This machine's processes of one replica, with the first port of its block; or why it
    /// cannot run them. The machine of the first stage plans the replica (it alone needs the
    /// model file) and publishes every machine's launches; the others start theirs once the
    /// launches it published dial them at the block they published.
    fn replica(
        &mut self,
        key: &str,
        bound: &Bound<'_>,
        reports: &BTreeMap<String, AgentReport>,
    ) -> Result<Run, String> {
        let me = self.config.node.clone();
        let has_gpus = bound.split.iter().any(|s| s.machine == me && s.node != me);
        let (port, len) = self.block(key, block_len(has_gpus))?;
        let head = bound.split.first().map(|s| s.machine.clone()).unwrap_or_default();
        if head != me {
            return self.follow(key, port, reports.get(&head).filter(|r| !r.stopped).and_then(|r| r.replicas.get(key)));
        }
        let plan = replica_plan(bound, self.config.resolve)?;
        let model = plan
            .model
            .file
            .clone()
            .ok_or("its scenario names no model file: deploy it with `model.file`, the `.gguf` llama.cpp loads")?;
        let server_port = port + len - 1;
        // This machine at its own block; the others where their agents say theirs serve.
        let mut hosts = BTreeMap::new();
        let mut others_serving = true;
        for machine in machines(&plan) {
            if machine == me {
                hosts.insert(machine, format!("{}:{port}", self.config.address));
                continue;
            }
            match reports.get(&machine).filter(|r| !r.stopped).and_then(|r| Some((r, r.replicas.get(key)?))) {
                Some((report, replica)) => {
                    others_serving &= replica.serving();
                    hosts.insert(machine, format!("{}:{}", report.address, replica.port));
                }
                None => others_serving = false,
            }
        }
        let mut options = ExportOptions::for_plan(&plan);
        options.hosts = hosts.clone();
        options.model = Some(model);
        let launches = stageplan::export::llama_cpp_launches(&plan, &options).map_err(|e| e.to_string())?;
        let server = SocketAddr::new(self.config.bind, server_port);
        let mut specs = BTreeMap::new();
        let mut endpoint = None;
        // llama-server connects to every rpc-server as it starts: this machine's serve first.
        let own_serving = launches
            .iter()
            .enumerate()
            .filter(|(_, l)| l.machine == me && l.program != SERVER)
            .all(|(i, _)| self.supervisor.state(&format!("{key}/rpc{i}")) == Some(&State::Serving));
        for (i, launch) in launches.iter().enumerate().filter(|(_, l)| l.machine == me) {
            let name = if launch.program == SERVER {
                if !others_serving || !own_serving {
                    continue;
                }
                endpoint = Some(format!("{}:{server_port}", self.config.address));
                format!("{key}/server")
            } else {
                format!("{key}/rpc{i}")
            };
            let mut spec = crate::launch::spec(launch, &self.config.engine, self.config.cores, server)?;
            if launch.program != SERVER {
                bind_to(&mut spec, self.config.bind);
            }
            specs.insert(name, spec);
        }
        Ok(Run { port, specs, served: Some(Served { endpoint, plan, hosts, launches }) })
    }

    /// A machine that does not serve the replica: its rpc-servers as the serving machine
    /// published them, once that machine dials this one at the block it has (else none yet).
    fn follow(&self, key: &str, port: u16, head: Option<&ReplicaReport>) -> Result<Run, String> {
        let me = &self.config.node;
        let mut specs = BTreeMap::new();
        let dialed_here = head.and_then(|h| h.hosts.get(me)) == Some(&format!("{}:{port}", self.config.address));
        if let Some(head) = head.filter(|_| dialed_here) {
            // llama-server's address is the serving machine's business: none here.
            let unused = SocketAddr::new(self.config.bind, 0);
            for (i, launch) in head.launches.iter().enumerate().filter(|(_, l)| &l.machine == me) {
                if launch.program == SERVER {
                    return Err("the machine that serves it asks this one to run llama-server".to_owned());
                }
                let mut spec = crate::launch::published_spec(launch, &self.config.engine, self.config.cores, unused)?;
                bind_to(&mut spec, self.config.bind);
                specs.insert(format!("{key}/rpc{i}"), spec);
            }
        }
        Ok(Run { port, specs, served: None })
    }

    /// The first port and length of `key`'s block: the one it has, or the lowest free run of
    /// `len` ports from the first.
    fn block(&mut self, key: &str, len: u16) -> Result<(u16, u16), String> {
        if let Some(&(port, have)) = self.blocks.get(key)
            && have == len
        {
            return Ok((port, len));
        }
        self.blocks.remove(key);
        let mut taken: Vec<(u16, u16)> = self.blocks.values().copied().collect();
        taken.sort_unstable();
        let mut port = self.config.first_port;
        for (start, have) in taken {
            if u32::from(port) + u32::from(len) <= u32::from(start) {
                break;
            }
            port = port.max(start.saturating_add(have));
        }
        if u32::from(port) + u32::from(len) > u32::from(u16::MAX) {
            return Err(format!(
                "no {len} free ports above {} for its engines: give the agent a lower `--port`",
                self.config.first_port
            ));
        }
        self.blocks.insert(key.to_owned(), (port, len));
        Ok((port, len))
    }

    /// Starts measuring a replica this machine serves once its llama-server serves, and
    /// keeps the receipt until the server's spec changes (a new split is measured again).
    fn measure(&mut self, key: &str, specs: &BTreeMap<String, Spec>, served: &Served, replica: &mut ReplicaReport) {
        let name = format!("{key}/server");
        let Some(spec) = specs.get(&name) else { return };
        if let Some((measured, receipt)) = self.receipts.get(key)
            && measured == spec
        {
            replica.receipt = Some(receipt.clone());
            return;
        }
        if let Some((measuring, answer)) = self.measuring.get(key) {
            if measuring != spec {
                self.measuring.remove(key);
            } else if let Ok(result) = answer.try_recv() {
                self.measuring.remove(key);
                match result {
                    Ok(receipt) => {
                        replica.receipt = Some(receipt.clone());
                        self.receipts.insert(key.to_owned(), (spec.clone(), receipt));
                        self.failed_receipts.remove(key);
                    }
                    Err(why) => {
                        self.failed_receipts.insert(key.to_owned(), (spec.clone(), Instant::now(), why));
                    }
                }
            }
            return;
        }
        // A failed measurement is tried again after a while, not every pass.
        if let Some((failed, at, why)) = self.failed_receipts.get(key)
            && failed == spec
        {
            replica.receipt_failed = Some(why.clone());
            if at.elapsed() < RECEIPT_RETRY {
                return;
            }
        }
        if self.supervisor.state(&name) != Some(&State::Serving) {
            return;
        }
        let (Some(log), crate::Ready::Http { address, .. }) = (self.supervisor.log(&name), &spec.ready) else { return };
        let (log, address, plan, launches) =
            (log.to_path_buf(), *address, served.plan.clone(), served.launches.clone());
        let (send, receive) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = send.send(Receipt::measure(&plan, &launches, address, &log));
        });
        self.measuring.insert(key.to_owned(), (spec.clone(), receive));
    }
}

/// The plan a replica runs: its deployment's scenario with the split its stages are bound
/// to (the loop's re-plans included), planned as given.
///
/// # Errors
/// The scenario no longer reads (a model file gone), or the split does not fit.
pub fn replica_plan(bound: &Bound<'_>, resolve: fn(&Scenario) -> Result<Problem, String>) -> Result<Plan, String> {
    let mut scenario = bound.planned.scenario.clone();
    scenario.policy = stageplan::Policy::Manual;
    scenario.stages = Some(
        bound
            .split
            .iter()
            .map(|s| StageSpec {
                node: s.node.clone(),
                layers: [s.layers[0] as u64, s.layers[1] as u64],
                offload: None,
            })
            .collect(),
    );
    let plan = stageplan::plan(&resolve(&scenario)?);
    if !plan.feasible {
        let why = plan.diagnostics.first().map_or("", |d| d.message.as_str());
        return Err(format!("its bound split does not fit: {why}"));
    }
    if plan.engine != stageplan::engine::Engine::LlamaCpp {
        return Err(format!(
            "it plans for {}, and the agent runs llama.cpp: deploy it with `\"engine\": \"llama.cpp\"`",
            plan.engine.name()
        ));
    }
    Ok(plan)
}

/// The machines of a plan's stages, in pipeline order, each once.
fn machines(plan: &Plan) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for stage in &plan.stages {
        let machine = stage.gpu_of.as_ref().map_or(&stage.node, |g| &g.machine);
        if !out.contains(machine) {
            out.push(machine.clone());
        }
    }
    out
}

/// An rpc-server told to listen at `bind` instead of the address the export wrote.
fn bind_to(spec: &mut Spec, bind: IpAddr) {
    if let Some(i) = spec.args.iter().position(|a| a == "--host")
        && let Some(value) = spec.args.get_mut(i + 1)
    {
        *value = bind.to_string();
    }
    if let crate::Ready::Tcp(address) = &mut spec.ready
        && !bind.is_unspecified()
    {
        address.set_ip(bind);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agent(first_port: u16) -> Agent {
        let logs = std::env::temp_dir().join(format!("stageplan-blocks-{}", std::process::id()));
        let config = AgentConfig {
            node: "m0".into(),
            address: "127.0.0.1".into(),
            bind: "127.0.0.1".parse().unwrap(),
            engine: PathBuf::new(),
            first_port,
            lease: Duration::from_secs(2),
            cores: 1,
            resolve: |_| Err(String::new()),
        };
        Agent::new(config, Supervisor::new(crate::Policy::new(logs)).unwrap())
    }

    #[test]
    fn port_blocks_are_kept_per_replica_and_the_lowest_free_run_is_given() {
        let mut agent = agent(50052);
        assert_eq!(agent.block("a/0", 3), Ok((50052, 3)));
        assert_eq!(agent.block("b/0", 3), Ok((50055, 3)));
        assert_eq!(agent.block("a/0", 3), Ok((50052, 3)), "a replica keeps its block");
        agent.blocks.remove("a/0");
        // A machine with several GPUs needs a longer block: past the one in use.
        assert_eq!(agent.block("c/0", 130), Ok((50058, 130)));
        assert_eq!(agent.block("d/0", 3), Ok((50052, 3)), "the freed run comes back");
        let mut high = super::tests::agent(65_530);
        assert_eq!(high.block("a/0", 3), Ok((65_530, 3)));
        assert!(high.block("b/0", 3).unwrap_err().contains("give the agent a lower `--port`"));
    }
}

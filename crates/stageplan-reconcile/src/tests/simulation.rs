//! The deterministic simulation: thousands of seeded steps of events, store write failures
//! and controller crashes, with the invariants checked after every step.

use std::collections::{BTreeMap, BTreeSet};

use super::*;

/// A store that fails chosen commits, before or after applying them.
struct Faulty<'s> {
    inner: &'s mut MemoryStore,
    /// Commits left before the fault.
    countdown: Option<usize>,
    /// Whether the faulty commit is applied first (a crash right after persisting).
    apply: bool,
    max_ops: usize,
}

impl Store for Faulty<'_> {
    fn list(&mut self, prefix: &str) -> Result<Vec<(String, Versioned)>, StoreError> {
        self.inner.list(prefix)
    }

    fn commit(&mut self, ops: &[Op]) -> Result<u64, StoreError> {
        match &mut self.countdown {
            Some(0) => {
                self.countdown = None;
                if self.apply {
                    self.inner.commit(ops)?;
                }
                Err(StoreError::Unavailable("injected fault".into()))
            }
            Some(n) => {
                *n -= 1;
                self.inner.commit(ops)
            }
            None => self.inner.commit(ops),
        }
    }

    fn max_ops(&self) -> usize {
        self.max_ops
    }
}

/// splitmix64: a seeded generator, so every run replays.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Whether a pass that read `before` may release `key`: its node is gone or holds more than
/// it has, it is not desired as it is, or its replica failed. (One event per step, so every
/// release of a step was decided on `before`.)
fn release_was_due(key: &str, assignment: &Assignment, before: &Snapshot) -> bool {
    let Some((name, replica, stage)) = spec::parse_assignment_key(key) else { return true };
    let Some((node, _)) = before.nodes.get(&assignment.node) else { return true };
    let on_node: Vec<&Assignment> =
        before.assignments.values().map(|(a, _)| a).filter(|a| a.node == assignment.node).collect();
    let memory: u64 = on_node.iter().map(|a| a.memory).sum();
    let gpus: Vec<u32> = on_node.iter().flat_map(|a| a.gpus.iter().copied()).collect();
    let distinct: BTreeSet<u32> = gpus.iter().copied().collect();
    let overcommitted = memory > node.memory || distinct.len() < gpus.len() || gpus.iter().any(|&g| g >= node.gpus);
    let desired = before
        .deployments
        .get(name)
        .and_then(|(d, _)| if replica < d.replicas { d.stages.get(stage) } else { None })
        .is_some_and(|r| r.memory == assignment.memory && r.gpus as usize == assignment.gpus.len());
    let failed = before
        .assignments
        .iter()
        .any(|(k, (a, _))| a.status == Status::Failed && k.starts_with(&format!("{name}/{replica}/")));
    // A replica missing a stage may give back the ones it holds.
    let incomplete = before.deployments.get(name).is_some_and(|(d, _)| {
        (0..d.stages.len()).any(|s| {
            before
                .assignments
                .get(&assignment_key(name, replica, s))
                .is_none_or(|(a, _)| !before.nodes.contains_key(&a.node))
        })
    });
    overcommitted || !desired || failed || incomplete
}

/// The assignments a node's new capacity cannot hold: replayed in key order, those that no
/// longer fit (memory, or a GPU id the node no longer has or that an earlier one took).
fn evictable(node: &Node, before: &Snapshot) -> BTreeSet<String> {
    let (mut memory, mut gpus, mut out) = (0u64, BTreeSet::new(), BTreeSet::new());
    for (key, (a, _)) in before.assignments.iter().filter(|(_, (a, _))| a.node == node.name) {
        let fits = memory + a.memory <= node.memory && a.gpus.iter().all(|&g| g < node.gpus && !gpus.contains(&g));
        if fits {
            memory += a.memory;
            gpus.extend(a.gpus.iter().copied());
        } else {
            out.insert(key.clone());
        }
    }
    out
}

/// Thousands of seeded steps of joins, losses, capacity changes, failures, deployment edits,
/// store write failures and controller crashes at every commit boundary, with the invariants
/// checked after each step and convergence once the faults stop.
#[test]
fn simulation_keeps_the_invariants_and_converges() {
    let (mut steps, mut faults, mut crashes) = (0, 0, 0);
    for seed in 0..12u64 {
        let mut rng = Rng(seed);
        let mut store = MemoryStore::new();
        let mut controller = Controller::default();
        let mut now = 0u64;
        let mut nodes: BTreeMap<String, Node> = BTreeMap::new();
        let mut deployments: BTreeMap<String, Deployment> = BTreeMap::new();
        let mut next_node = 0;
        let max_ops = [3usize, 16, usize::MAX][seed as usize % 3];
        for _ in 0..400 {
            steps += 1;
            now += 50 + rng.below(2_000);
            let before = Snapshot::load(&mut store).unwrap();
            let event = match rng.below(20) {
                0..=2 => {
                    next_node += 1;
                    let n = node(&format!("n{next_node}"), 16 + rng.below(8) * 16, rng.below(9) as u32);
                    Event::NodeJoined(n)
                }
                3 if !nodes.is_empty() => {
                    let name = nodes.keys().nth(rng.below(nodes.len() as u64) as usize).unwrap().clone();
                    Event::NodeLeft(name)
                }
                4 if !nodes.is_empty() => {
                    let mut n = nodes.values().nth(rng.below(nodes.len() as u64) as usize).unwrap().clone();
                    n.memory = (8 + rng.below(10) * 8) * GIB;
                    n.gpus = rng.below(9) as u32;
                    Event::NodeChanged(n)
                }
                5 if !deployments.is_empty() => {
                    let name = deployments.keys().nth(rng.below(deployments.len() as u64) as usize).unwrap().clone();
                    Event::ReplicaFailed { deployment: name, replica: rng.below(4) as u32 }
                }
                6 | 7 => {
                    let stages: Vec<(u64, u32)> =
                        (0..=rng.below(3)).map(|_| (2 + rng.below(20), rng.below(3) as u32)).collect();
                    let d = deployment(&format!("d{}", rng.below(5)), rng.below(6) as u32, &stages);
                    Event::DeploymentChanged(d)
                }
                8 if !deployments.is_empty() => {
                    let name = deployments.keys().nth(rng.below(deployments.len() as u64) as usize).unwrap().clone();
                    Event::DeploymentRemoved(name)
                }
                _ => Event::Tick { now_ms: now },
            };
            // A fault at a random commit of this step: a failed write, or a crash right after one.
            let fault = rng.below(4) == 0;
            faults += usize::from(fault);
            let mut faulty = Faulty {
                inner: &mut store,
                countdown: fault.then(|| rng.below(4) as usize),
                apply: rng.below(2) == 0,
                max_ops,
            };
            let acknowledged = controller.handle(&mut faulty, event.clone(), &NoMetrics).is_ok();
            if fault && rng.below(2) == 0 {
                controller = Controller::default(); // crash: restart from the store
                crashes += 1;
            }
            let landed = acknowledged || {
                // A write that failed may still have landed (the store applied it, then the
                // reply was lost); either outcome is allowed, nothing in between.
                let now_stored = Snapshot::load(&mut store).unwrap();
                match &event {
                    Event::NodeJoined(n) | Event::NodeChanged(n) => {
                        now_stored.nodes.get(&n.name).is_some_and(|(s, _)| s == n)
                    }
                    Event::NodeLeft(name) => !now_stored.nodes.contains_key(name),
                    Event::DeploymentChanged(d) => now_stored.deployments.get(&d.name).is_some_and(|(s, _)| s == d),
                    Event::DeploymentRemoved(name) => !now_stored.deployments.contains_key(name),
                    _ => false,
                }
            };
            if landed {
                match &event {
                    Event::NodeJoined(n) | Event::NodeChanged(n) => {
                        nodes.insert(n.name.clone(), n.clone());
                    }
                    Event::NodeLeft(name) => {
                        nodes.remove(name);
                    }
                    Event::DeploymentChanged(d) => {
                        deployments.insert(d.name.clone(), d.clone());
                    }
                    Event::DeploymentRemoved(name) => {
                        deployments.remove(name);
                    }
                    _ => {}
                }
            }
            let after = Snapshot::load(&mut store).unwrap();
            check_invariants(&after).unwrap_or_else(|v| panic!("seed {seed}, step {steps}: {v}"));
            // Nothing acknowledged is lost.
            let stored_nodes: BTreeMap<String, Node> =
                after.nodes.iter().map(|(k, (n, _))| (k.clone(), n.clone())).collect();
            assert_eq!(stored_nodes, nodes, "seed {seed}: nodes");
            let stored: BTreeMap<String, Deployment> =
                after.deployments.iter().map(|(k, (d, _))| (k.clone(), d.clone())).collect();
            assert_eq!(stored, deployments, "seed {seed}: deployments");
            let evictable = match &event {
                Event::NodeJoined(n) | Event::NodeChanged(n) => evictable(n, &before),
                _ => BTreeSet::new(),
            };
            for (key, (assignment, _)) in &before.assignments {
                if !after.assignments.contains_key(key) && !evictable.contains(key) {
                    assert!(release_was_due(key, assignment, &before), "seed {seed}: `{key}` was lost");
                }
            }
        }
        // Faults stop; room is added for everything; the loop must settle within a few passes.
        for i in 0..8 {
            let n = node(&format!("spare{i}"), 512, 64);
            controller.handle(&mut store, Event::NodeJoined(n), &NoMetrics).unwrap();
            let n = node(&format!("spare-ram{i}"), 512, 0);
            controller.handle(&mut store, Event::NodeJoined(n), &NoMetrics).unwrap();
        }
        now += 3_600_000;
        let mut passes = 0;
        loop {
            passes += 1;
            let report = controller.pass(&mut store, now, &NoMetrics).unwrap();
            assert!(report.pending.is_empty(), "seed {seed}: {report:?}");
            if report.is_quiet() {
                break;
            }
            assert!(passes <= 3, "seed {seed}: not settled after {passes} passes: {report:?}");
        }
        let last = Snapshot::load(&mut store).unwrap();
        check_invariants(&last).unwrap();
        let desired: usize = last.deployments.values().map(|(d, _)| d.replicas as usize * d.stages.len()).sum();
        assert_eq!(last.assignments.len(), desired, "seed {seed}: every desired stage bound, nothing else");
        assert!(last.assignments.values().all(|(a, _)| a.status == Status::Running));
        assert!(
            last.assignments.values().all(|(a, _)| last.nodes.contains_key(&a.node)),
            "seed {seed}: a stage on a lost node"
        );
    }
    assert_eq!(steps, 12 * 400);
    assert!(faults > 600 && crashes > 300, "faults {faults}, crashes {crashes}");
}

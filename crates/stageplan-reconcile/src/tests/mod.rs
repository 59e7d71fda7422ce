//! The loop's properties; the deterministic simulation with faults and crashes is in
//! `simulation`.

use std::collections::{BTreeMap, BTreeSet};

use super::*;

mod rebalance;
mod simulation;

const GIB: u64 = 1 << 30;

fn node(name: &str, gib: u64, gpus: u32) -> Node {
    Node { name: name.into(), memory: gib * GIB, gpus }
}

fn deployment(name: &str, replicas: u32, stages: &[(u64, u32)]) -> Deployment {
    let stages = stages
        .iter()
        .enumerate()
        .map(|(i, &(gib, gpus))| StageRequest {
            layers: [i, i + 1],
            memory: gib * GIB,
            gpus,
            node: None,
            gpu_ids: Vec::new(),
        })
        .collect();
    Deployment::new(name, replicas, stages)
}

struct World {
    store: MemoryStore,
    controller: Controller,
}

impl World {
    fn new(nodes: &[Node], deployments: &[Deployment]) -> World {
        let mut world = World { store: MemoryStore::new(), controller: Controller::default() };
        for n in nodes {
            world.event(Event::NodeJoined(n.clone()));
        }
        for d in deployments {
            world.event(Event::DeploymentChanged(d.clone()));
        }
        world
    }

    fn event(&mut self, event: Event) -> Option<PassReport> {
        self.controller.handle(&mut self.store, event, &NoMetrics).unwrap()
    }

    fn pass(&mut self, now_ms: u64) -> PassReport {
        let report = self.controller.pass(&mut self.store, now_ms, &NoMetrics).unwrap();
        self.check();
        report
    }

    fn snapshot(&mut self) -> Snapshot {
        Snapshot::load(&mut self.store).unwrap()
    }

    fn check(&mut self) {
        let snapshot = self.snapshot();
        check_invariants(&snapshot).unwrap();
    }

    /// Free memory and GPU ids per node, derived from the assignments.
    fn free(&mut self) -> BTreeMap<String, (u64, BTreeSet<u32>)> {
        let snapshot = self.snapshot();
        let mut free: BTreeMap<String, (u64, BTreeSet<u32>)> =
            snapshot.nodes.values().map(|(n, _)| (n.name.clone(), (n.memory, (0..n.gpus).collect()))).collect();
        for (a, _) in snapshot.assignments.values() {
            if let Some((memory, gpus)) = free.get_mut(&a.node) {
                *memory -= a.memory;
                for g in &a.gpus {
                    assert!(gpus.remove(g));
                }
            }
        }
        free
    }

    fn bound(&mut self) -> BTreeMap<String, Assignment> {
        self.snapshot().assignments.into_iter().map(|(k, (a, _))| (k, a)).collect()
    }
}

#[test]
fn every_desired_replica_is_scheduled_and_a_second_pass_changes_nothing() {
    let mut world = World::new(
        &[node("a", 160, 8), node("b", 160, 8), node("c", 24, 1), node("mac", 64, 0)],
        &[deployment("llama", 5, &[(20, 1), (20, 1)]), deployment("small", 3, &[(4, 0)])],
    );
    let first = world.pass(0);
    assert_eq!(first.scheduled.len(), 13, "{first:?}");
    assert!(first.pending.is_empty());
    let revision = world.store.revision();
    let second = world.pass(1);
    assert!(second.is_quiet() && second.scheduled.is_empty() && second.released.is_empty(), "{second:?}");
    assert_eq!(world.store.revision(), revision, "an idle pass writes nothing");
}

#[test]
fn scale_down_releases_and_restores_capacity_exactly() {
    let mut world = World::new(&[node("a", 200, 8), node("b", 200, 8)], &[deployment("d", 2, &[(30, 2)])]);
    let empty = world.free();
    world.pass(0);
    let with_two = world.free();
    world.event(Event::DeploymentChanged(deployment("d", 6, &[(30, 2)])));
    world.pass(1);
    world.event(Event::DeploymentChanged(deployment("d", 2, &[(30, 2)])));
    let report = world.pass(2);
    assert_eq!(report.released.len(), 4);
    assert!(report.released.iter().all(|(_, why)| *why == Release::NotDesired));
    assert_eq!(world.free(), with_two, "capacity after scaling 2 → 6 → 2 is what 2 took");
    world.event(Event::DeploymentRemoved("d".into()));
    world.pass(3);
    assert_eq!(world.free(), empty);
    assert!(world.bound().is_empty());
}

#[test]
fn node_loss_moves_only_its_stages_onto_survivors() {
    let mut world =
        World::new(&[node("a", 64, 2), node("b", 64, 2), node("c", 64, 2)], &[deployment("d", 2, &[(30, 1), (30, 1)])]);
    world.pass(0);
    let before = world.bound();
    let lost: Vec<String> = before.iter().filter(|(_, a)| a.node == "a").map(|(k, _)| k.clone()).collect();
    assert!(!lost.is_empty());
    world.event(Event::NodeLeft("a".into()));
    world.check();
    let report = world.pass(1);
    assert!(report.released.iter().all(|(k, why)| *why == Release::NodeGone && lost.contains(k)), "{report:?}");
    let after = world.bound();
    assert_eq!(after.len(), 4, "every stage bound again");
    for (key, assignment) in &after {
        assert_ne!(assignment.node, "a");
        if !lost.contains(key) {
            assert_eq!(Some(assignment), before.get(key), "{key} stayed where it was");
        }
    }
}

#[test]
fn insufficient_capacity_backs_off_without_over_allocating() {
    let mut world = World::new(&[node("a", 40, 2)], &[deployment("d", 3, &[(30, 1)])]);
    let report = world.pass(0);
    assert_eq!((report.scheduled.len(), report.pending.len()), (1, 2));
    // A partial pipeline is never bound: two stages, one fits, none taken.
    world.event(Event::DeploymentChanged(deployment("e", 1, &[(5, 1), (50, 1)])));
    let report = world.pass(10);
    assert!(report.scheduled.is_empty());
    assert_eq!(world.free()["a"], (10 * GIB, BTreeSet::from([1])));
    // Backing off: the next tries wait 0.5–1 s, then 1–2 s, …, capped at 5 minutes.
    let quiet = world.pass(20);
    assert!(quiet.is_quiet());
    let mut waits = Vec::new();
    let mut controller = Controller::default();
    let mut store = world.store.clone();
    let mut now = 0;
    let mut last_try = 0;
    while now < 3_600_000 {
        let report = controller.pass(&mut store, now, &NoMetrics).unwrap();
        assert!(report.scheduled.is_empty());
        if let Some(at) = controller.retry_at("d/1").filter(|&at| at > now && at != last_try) {
            last_try = at;
            waits.push(at - now);
        }
        now += 100;
    }
    assert!(waits.windows(2).take(5).all(|w| w[1] > w[0]), "{waits:?}");
    assert!(waits.iter().all(|&w| w <= 300_000) && waits.iter().rev().take(3).all(|&w| w >= 150_000), "{waits:?}");
    check_invariants(&Snapshot::load(&mut store).unwrap()).unwrap();
}

#[test]
fn a_replica_that_cannot_complete_gives_back_what_it_holds() {
    let mut world = World::new(&[node("a", 40, 1), node("b", 40, 1)], &[deployment("d", 1, &[(30, 1), (30, 1)])]);
    assert_eq!(world.pass(0).scheduled.len(), 2);
    let on_b: Vec<String> = world.bound().into_iter().filter(|(_, a)| a.node == "b").map(|(k, _)| k).collect();
    world.event(Event::NodeLeft("b".into()));
    // The lost stage has nowhere to go; the other holds node a. After three tries it goes back.
    let mut now = 1;
    let mut given_back = Vec::new();
    for _ in 0..6 {
        let report = world.pass(now);
        given_back.extend(report.released.into_iter().filter(|(_, why)| *why == Release::Incomplete));
        now += 600_000;
    }
    assert_eq!(given_back.len(), 1, "{given_back:?} (lost: {on_b:?})");
    assert!(world.bound().is_empty());
    // Room for the whole pipeline again: it is placed as one.
    world.event(Event::NodeJoined(node("c", 40, 1)));
    assert_eq!(world.pass(now).scheduled.len(), 2);
}

#[test]
fn gpu_ids_are_freed_exactly() {
    let mut world = World::new(&[node("a", 80, 8)], &[deployment("x", 3, &[(1, 2)]), deployment("y", 1, &[(1, 1)])]);
    world.pass(0);
    let taken: BTreeMap<String, Vec<u32>> = world.bound().into_iter().map(|(k, a)| (k, a.gpus)).collect();
    assert_eq!(taken["x/1/0"], vec![2, 3]);
    world.event(Event::ReplicaFailed { deployment: "x".into(), replica: 1 });
    world.event(Event::DeploymentChanged(deployment("x", 1, &[(1, 2)])));
    world.pass(1);
    let free = world.free();
    assert_eq!(free["a"].1, BTreeSet::from([2, 3, 4, 5, 7]), "x/1 and x/2 gave back exactly their ids");
}

#[test]
fn bootstrap_rebuilds_state_and_capacity_from_the_store() {
    let mut world = World::new(
        &[node("a", 80, 8), node("b", 24, 2), node("mac", 32, 0)],
        &[deployment("d", 4, &[(10, 1), (10, 1)]), deployment("cpu", 2, &[(4, 0)])],
    );
    world.pass(0);
    let bound = world.bound();
    assert_eq!(bound.len(), 10, "8 GPU stages and 2 on the Mac");
    let free = world.free();
    // A new controller process: nothing in memory, same store.
    world.controller = Controller::default();
    let report = world.pass(1);
    assert!(report.is_quiet(), "{report:?}");
    assert_eq!(world.bound(), bound);
    assert_eq!(world.free(), free);
    // The capacity it derived is the one taken: one more replica lands on the GPUs still free.
    world.event(Event::DeploymentChanged(deployment("d", 5, &[(10, 1), (10, 1)])));
    world.pass(2);
    let added: Vec<u32> =
        world.bound().into_iter().filter(|(k, _)| k.starts_with("d/4/")).flat_map(|(_, a)| a.gpus).collect();
    let was_free: BTreeSet<u32> = free.values().flat_map(|(_, g)| g.iter().copied()).collect();
    assert!(added.iter().all(|g| was_free.contains(g)), "{added:?}");
}

#[test]
fn autoscaling_raises_desired_and_persists_it_with_hysteresis_and_cooldown() {
    let mut d = deployment("d", 2, &[(5, 1)]);
    d.min_replicas = Some(1);
    d.max_replicas = Some(6);
    d.autoscale = Some(Autoscale { target: 0.6, tolerance: 0.1, up_cooldown_ms: 10_000, down_cooldown_ms: 60_000 });
    let mut world = World::new(&[node("a", 80, 8)], &[d]);
    let mut load: BTreeMap<String, f64> = BTreeMap::from([("d".to_owned(), 0.63)]);
    let pass = |world: &mut World, now: u64, load: &BTreeMap<String, f64>| {
        let report = world.controller.pass(&mut world.store, now, load).unwrap();
        let replicas = world.snapshot().deployments["d"].0.replicas;
        (report, replicas)
    };
    assert_eq!(pass(&mut world, 0, &load).1, 2, "within the tolerance band: no change");
    load.insert("d".into(), 0.9);
    let (report, replicas) = pass(&mut world, 1_000, &load);
    assert_eq!((report.rescaled.clone(), replicas), (vec![("d".to_owned(), 2, 3)], 3));
    assert_eq!(report.scheduled, vec!["d/2/0".to_owned()], "the new replica is placed in the same pass");
    load.insert("d".into(), 1.0);
    assert_eq!(pass(&mut world, 5_000, &load).1, 3, "up cooldown");
    // A new controller keeps the cooldown: it is persisted.
    world.controller = Controller::default();
    assert_eq!(pass(&mut world, 6_000, &load).1, 3);
    assert_eq!(pass(&mut world, 11_000, &load).1, 5);
    load.insert("d".into(), 5.0);
    assert_eq!(pass(&mut world, 30_000, &load).1, 6, "capped at max_replicas");
    load.insert("d".into(), 0.01);
    assert_eq!(pass(&mut world, 60_000, &load).1, 6, "down cooldown");
    assert_eq!(pass(&mut world, 90_001, &load).1, 1, "floored at min_replicas");
    assert_eq!(world.bound().len(), 1);
}

#[test]
fn records_this_version_cannot_read_are_left_alone_and_named() {
    let mut world = World::new(&[node("a", 80, 8), node("b", 80, 8)], &[deployment("d", 2, &[(10, 1)])]);
    world.pass(0);
    let bound = world.bound();
    let put = |key: &str, value: &str| Op::Put { key: key.into(), value: value.into(), expect: Expect::Any };
    // A node record this version cannot read, holding a stage: the stage stays bound.
    let on_b = bound.iter().find(|(_, a)| a.node == "b").map(|(k, _)| k.clone());
    world.store.commit(&[put("nodes/b", r#"{"name": "b", "memory": 1, "gpus": 8, "future": true}"#)]).unwrap();
    // A deployment whose key and name disagree.
    let other = serde_json::to_string(&deployment("other", 1, &[(1, 1)])).unwrap();
    world.store.commit(&[put("deployments/e", &other)]).unwrap();
    let report = world.controller.pass(&mut world.store, 1, &NoMetrics).unwrap();
    let keys: Vec<&str> = report.quarantined.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, ["deployments/e", "nodes/b"], "{report:?}");
    assert!(report.released.is_empty(), "{report:?}");
    if let Some(key) = on_b {
        assert!(world.bound().contains_key(&key));
    }
    // An assignment with a non-canonical key: its capacity is unknown, so nothing is placed.
    let odd = r#"{"node": "a", "gpus": [7], "memory": 1, "status": "running"}"#;
    world.store.commit(&[put("assignments/d/01/0", odd)]).unwrap();
    world.event(Event::DeploymentChanged(deployment("d", 4, &[(10, 1)])));
    let blocked = world.controller.pass(&mut world.store, 2, &NoMetrics).unwrap();
    assert!(blocked.scheduled.is_empty() && blocked.quarantined.iter().any(|(k, _)| k == "assignments/d/01/0"));
    world.store.commit(&[Op::Delete { key: "assignments/d/01/0".into(), expect: Expect::Any }]).unwrap();
    assert!(!world.controller.pass(&mut world.store, 3, &NoMetrics).unwrap().scheduled.is_empty());
}

/// A store that places a stage (as a concurrent pass would) right after the second read.
struct PlaceBetween<'s> {
    inner: &'s mut MemoryStore,
    reads: usize,
}

impl Store for PlaceBetween<'_> {
    fn list(&mut self, prefix: &str) -> Result<Vec<(String, Versioned)>, StoreError> {
        let records = self.inner.list(prefix)?;
        self.reads += 1;
        if self.reads == 2 {
            Controller::default().pass(self.inner, 0, &NoMetrics)?;
        }
        Ok(records)
    }

    fn commit(&mut self, ops: &[Op]) -> Result<u64, StoreError> {
        self.inner.commit(ops)
    }
}

/// A node update that races a placement on that node re-reads instead of shrinking the node
/// under the new stage.
#[test]
fn a_node_update_never_shrinks_a_node_under_a_stage_placed_meanwhile() {
    let mut world = World::new(&[node("a", 40, 2)], &[deployment("d", 1, &[(30, 1)])]);
    // The update reads the node and the (no) assignments; a pass then binds a 30 GiB stage.
    let mut racing = PlaceBetween { inner: &mut world.store, reads: 0 };
    let shrunk = node("a", 20, 2);
    world.controller.handle(&mut racing, Event::NodeChanged(shrunk.clone()), &NoMetrics).unwrap();
    let snapshot = world.snapshot();
    assert_eq!(snapshot.nodes["a"].0, shrunk);
    check_invariants(&snapshot).unwrap();
    assert!(snapshot.assignments.is_empty(), "the 30 GiB stage was evicted on the retry");
}

/// Issue #14, case 12: a bound over the cap would let autoscaling write a replica count the
/// check rejects, after which the next pass quarantines the deployment with everything it
/// bound. The controller refuses to write such a record, one written by an older version is
/// quarantined before it scales or binds anything, and at the cap the scaled record reads back.
#[test]
fn autoscaling_never_writes_a_deployment_its_check_rejects() {
    let mut world = World::new(&[node("a", 80, 8)], &[]);
    let mut d = deployment("d", 1, &[(1, 1)]);
    d.min_replicas = Some(1);
    d.max_replicas = Some(2_000_000);
    d.autoscale = Some(Autoscale { target: 0.5, tolerance: 0.1, up_cooldown_ms: 0, down_cooldown_ms: 0 });
    let refused = world.controller.handle(&mut world.store, Event::DeploymentChanged(d.clone()), &NoMetrics);
    assert!(
        matches!(&refused, Err(StoreError::Invalid { key, problem }) if key == "deployments/d" && problem.starts_with("`max_replicas`")),
        "{refused:?}"
    );
    assert!(world.snapshot().deployments.is_empty() && world.snapshot().quarantined.is_empty());

    let put = |key: &str, value: String| Op::Put { key: key.into(), value, expect: Expect::Any };
    world.store.commit(&[put("deployments/d", serde_json::to_string(&d).unwrap())]).unwrap();
    let load: BTreeMap<String, f64> = BTreeMap::from([("d".to_owned(), 1e7)]);
    for now in 0..3 {
        let report = world.controller.pass(&mut world.store, now, &load).unwrap();
        assert!(report.rescaled.is_empty() && report.scheduled.is_empty(), "{report:?}");
        let keys: Vec<&str> = report.quarantined.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["deployments/d"]);
    }
    assert!(world.bound().is_empty());

    d.max_replicas = Some(spec::MAX_REPLICAS);
    world.event(Event::DeploymentChanged(d));
    let report = world.controller.pass(&mut world.store, 10, &load).unwrap();
    assert_eq!(report.rescaled, [("d".to_owned(), 1, spec::MAX_REPLICAS)]);
    assert_eq!(report.scheduled.len(), 8, "one stage per GPU");
    let snapshot = world.snapshot();
    assert!(snapshot.quarantined.is_empty(), "{:?}", snapshot.quarantined);
    assert_eq!(snapshot.deployments["d"].0.replicas, spec::MAX_REPLICAS);
    check_invariants(&snapshot).unwrap();
}

/// A store that lists keys outside the prefix asked for (a broken store or proxy): the pass
/// names them and places nothing, instead of slicing past the key's end.
#[test]
fn keys_listed_under_the_wrong_prefix_are_quarantined_not_a_panic() {
    struct Lying(MemoryStore);
    impl Store for Lying {
        fn list(&mut self, prefix: &str) -> Result<Vec<(String, Versioned)>, StoreError> {
            let mut records = self.0.list(prefix)?;
            records.push(("x".into(), Versioned { value: "{}".into(), revision: 1 }));
            records.push(("é".into(), Versioned { value: "{}".into(), revision: 1 }));
            Ok(records)
        }
        fn commit(&mut self, ops: &[Op]) -> Result<u64, StoreError> {
            self.0.commit(ops)
        }
    }
    let world = World::new(&[node("a", 80, 8)], &[deployment("d", 1, &[(1, 1)])]);
    let mut lying = Lying(world.store);
    let report = Controller::default().pass(&mut lying, 0, &NoMetrics).unwrap();
    assert_eq!(report.quarantined.len(), 6, "{report:?}");
    assert!(report.scheduled.is_empty(), "{report:?}");
}

/// Changed stages move one replica at a time: the others keep serving with their old
/// stages, and with `min_replicas` as many as it says stay complete.
#[test]
fn changed_stages_roll_one_replica_at_a_time() {
    let nodes = [node("a", 100, 0), node("b", 100, 0)];
    let mut d = deployment("chat", 3, &[(10, 0), (10, 0)]);
    let mut world = World::new(&nodes, std::slice::from_ref(&d));
    world.pass(0);
    d.stages[1].memory = 12 * GIB;
    world.event(Event::DeploymentChanged(d.clone()));
    let complete = |world: &mut World| {
        let snapshot = world.snapshot();
        (0..3).filter(|r| (0..2).all(|s| snapshot.assignments.contains_key(&assignment_key("chat", *r, s)))).count()
    };
    for pass in 1..=3 {
        let report = world.pass(pass);
        let replicas: BTreeSet<&str> =
            report.released.iter().map(|(k, _)| k.rsplit_once('/').map_or("", |x| x.0)).collect();
        assert_eq!(replicas.len(), 1, "pass {pass} moved {replicas:?}");
        assert_eq!(complete(&mut world), 3, "each replica is placed again in the pass that released it");
    }
    assert!(world.pass(4).released.is_empty(), "all three rolled");
    // With `min_replicas` equal to `replicas`, no replica may go before one more serves:
    // each is made (in the slot the last one left) before one is broken, never fewer than
    // three whole.
    d.min_replicas = Some(3);
    d.stages[1].memory = 11 * GIB;
    world.event(Event::DeploymentChanged(d));
    let whole = |world: &mut World| {
        let snapshot = world.snapshot();
        snapshot.bindings("chat").values().filter(|b| spec::is_whole_pipeline(b)).count()
    };
    let surge = world.pass(5);
    assert!(surge.released.is_empty() && surge.scheduled == ["chat/3/0", "chat/3/1"], "{surge:?}");
    for now in 6..13 {
        world.pass(now);
        assert!(whole(&mut world) >= 3, "pass {now}");
    }
    let snapshot = world.snapshot();
    let current: Vec<u32> = snapshot
        .bindings("chat")
        .into_iter()
        .filter(|(_, b)| b.values().all(|a| a.memory != 12 * GIB))
        .map(|(r, _)| r)
        .collect();
    assert_eq!(current.len(), 3, "all three moved: {current:?}");
    assert!(world.pass(13).is_quiet());
}

/// A re-plan into more or fewer stages rolls as a change does: a replica waiting its turn
/// keeps its old split whole (no new stage added beside it, no stage past the new count
/// taken away), and the one rolling goes whole.
#[test]
fn a_replan_into_more_or_fewer_stages_rolls_whole_replicas() {
    let nodes = [node("a", 100, 0), node("b", 100, 0)];
    let mut d = deployment("chat", 2, &[(10, 0), (10, 0)]);
    d.min_replicas = Some(1);
    let mut world = World::new(&nodes, std::slice::from_ref(&d));
    world.pass(0);
    let splits = |world: &mut World| -> Vec<Vec<[usize; 2]>> {
        let snapshot = world.snapshot();
        let bindings = snapshot.bindings("chat");
        (0..2).map(|r| bindings.get(&r).map_or(Vec::new(), |b| b.values().map(|a| a.layers).collect())).collect()
    };
    assert_eq!(splits(&mut world), [vec![[0, 1], [1, 2]], vec![[0, 1], [1, 2]]]);
    for layers in [vec![[0, 1], [1, 2], [2, 3]], vec![[0, 3]]] {
        d.stages = layers
            .iter()
            .map(|&layers| StageRequest { layers, memory: 5 * GIB, gpus: 0, node: None, gpu_ids: Vec::new() })
            .collect();
        world.event(Event::DeploymentChanged(d.clone()));
        let old = splits(&mut world)[1].clone();
        let first = world.pass(1);
        assert!(first.released.iter().all(|(k, _)| k.starts_with("chat/0/")), "{first:?}");
        assert_eq!(first.waiting, ["chat/1"]);
        assert_eq!(splits(&mut world), [layers.clone(), old], "replica 0 rolled whole, replica 1 kept its split");
        let second = world.pass(2);
        assert!(second.released.iter().all(|(k, _)| k.starts_with("chat/1/")), "{second:?}");
        assert_eq!(splits(&mut world), [layers.clone(), layers.clone()]);
        assert!(world.pass(3).is_quiet());
    }
}

/// `min_replicas` keeps serving replicas serving; a replica that cannot serve its old split
/// (a stage's node gone) is no such replica, and moves at once.
#[test]
fn a_replica_whose_node_left_moves_despite_min_replicas() {
    let nodes = [node("a", 100, 0), node("b", 100, 0), node("c", 100, 0)];
    let mut d = deployment("chat", 1, &[(60, 0), (60, 0)]);
    d.min_replicas = Some(1);
    let mut world = World::new(&nodes, std::slice::from_ref(&d));
    world.pass(0);
    let bound = world.snapshot().bindings("chat")[&0][&1].node.clone();
    // A re-plan for the machines left: the stage moves (here, a little larger).
    d.stages[1].memory = 61 * GIB;
    world.event(Event::DeploymentChanged(d.clone()));
    world.event(Event::NodeLeft(bound.clone()));
    let report = world.pass(1);
    assert_eq!(report.released, [("chat/0/1".to_owned(), Release::Changed)], "{report:?}");
    let snapshot = world.snapshot();
    let now = snapshot.bindings("chat");
    assert!(now[&0].len() == 2 && now[&0].values().all(|a| a.node != bound), "{now:?}");
}

/// Make before break: where `min_replicas` holds a roll, a replica is placed beside the
/// waiting ones (in the slot past the replicas) and a waiting one goes only once it serves.
/// With room the change lands without a moment below `min_replicas`; without room it waits,
/// the new replica pending.
#[test]
fn a_roll_held_by_min_replicas_places_a_replica_first() {
    let nodes = [node("a", 100, 0), node("b", 100, 0)];
    let mut d = deployment("chat", 1, &[(30, 0), (30, 0)]);
    d.min_replicas = Some(1);
    let mut world = World::new(&nodes, std::slice::from_ref(&d));
    world.pass(0);
    d.stages[1].memory = 32 * GIB;
    world.event(Event::DeploymentChanged(d.clone()));
    let whole = |world: &mut World| -> Vec<u32> {
        let snapshot = world.snapshot();
        snapshot.bindings("chat").into_iter().filter(|(_, b)| spec::is_whole_pipeline(b)).map(|(r, _)| r).collect()
    };
    let mut seen = crate::observe::Observations::default();
    let first = world.controller.pass(&mut world.store, 1, &seen).unwrap();
    assert!(first.released.is_empty(), "{first:?}");
    assert_eq!(
        (first.waiting.as_slice(), first.surging.as_slice()),
        (["chat/0".to_owned()].as_slice(), ["chat".to_owned()].as_slice())
    );
    assert_eq!(first.scheduled, ["chat/1/0", "chat/1/1"], "the new split beside the old");
    assert_eq!(whole(&mut world), [0, 1]);
    // The new replica loads: the old one serves on.
    seen.serving.insert(("chat".into(), 1), false);
    for now in 2..4 {
        let report = world.controller.pass(&mut world.store, now, &seen).unwrap();
        assert!(report.released.is_empty() && report.scheduled.is_empty(), "{report:?}");
    }
    // It serves: the old replica goes, whole, and nothing takes its place.
    seen.serving.insert(("chat".into(), 1), true);
    let swap = world.controller.pass(&mut world.store, 4, &seen).unwrap();
    assert_eq!(swap.released.len(), 2, "{swap:?}");
    assert!(swap.released.iter().all(|(k, _)| k.starts_with("chat/0/")) && swap.scheduled.is_empty(), "{swap:?}");
    assert_eq!(whole(&mut world), [1]);
    assert!(world.controller.pass(&mut world.store, 5, &seen).unwrap().is_quiet());
    world.check();

    // The next change surges into the slot the first left free; without room it waits.
    d.stages[1].memory = 150 * GIB;
    world.event(Event::DeploymentChanged(d.clone()));
    let held = world.controller.pass(&mut world.store, 6, &seen).unwrap();
    assert_eq!(held.pending, ["chat/0"], "{held:?}");
    assert!(held.released.is_empty() && held.waiting == ["chat/1"], "{held:?}");
    assert_eq!(whole(&mut world), [1]);
}

/// Where the agents say which replicas serve, a roll moves the next replica only once the
/// one it moved serves again: never two pipelines down at once while one loads.
#[test]
fn a_roll_waits_for_the_moved_replica_to_serve() {
    let nodes = [node("a", 100, 0), node("b", 100, 0)];
    let mut d = deployment("chat", 3, &[(10, 0), (10, 0)]);
    let mut world = World::new(&nodes, std::slice::from_ref(&d));
    world.pass(0);
    d.stages[1].memory = 12 * GIB;
    world.event(Event::DeploymentChanged(d));
    let moved = |report: &PassReport| -> BTreeSet<String> {
        report.released.iter().filter_map(|(k, _)| Some(k.rsplit_once('/')?.0.to_owned())).collect()
    };
    let mut seen = crate::observe::Observations::default();
    let first = moved(&world.controller.pass(&mut world.store, 1, &seen).unwrap());
    assert_eq!(first, BTreeSet::from(["chat/0".to_owned()]));
    // Replica 0 is placed again but its engines still load: nothing else moves.
    seen.serving.insert(("chat".into(), 0), false);
    for now in 2..5 {
        let report = world.controller.pass(&mut world.store, now, &seen).unwrap();
        assert!(report.released.is_empty(), "pass {now} moved {:?} while replica 0 loads", moved(&report));
    }
    // It serves: the roll goes on.
    seen.serving.insert(("chat".into(), 0), true);
    let next = moved(&world.controller.pass(&mut world.store, 5, &seen).unwrap());
    assert_eq!(next, BTreeSet::from(["chat/1".to_owned()]));
    world.check();
}

/// A pinned stage goes to its node or stays pending, never elsewhere.
#[test]
fn a_pinned_stage_waits_for_its_node() {
    let nodes = [node("roomy", 100, 0), node("small", 8, 0)];
    let mut d = deployment("chat", 1, &[(10, 0)]);
    d.stages[0].node = Some("small".into());
    let mut world = World::new(&nodes, &[d.clone()]);
    let report = world.pass(0);
    assert_eq!(report.pending, vec!["chat/0".to_owned()], "10 GiB does not fit on `small`: {report:?}");
    d.stages[0].memory = 4 * GIB;
    world.event(Event::DeploymentChanged(d));
    world.pass(10_000_000);
    assert_eq!(world.snapshot().assignments["chat/0/0"].0.node, "small");
}

/// Issue #32, item 8: whatever the bounds, target and load, what autoscaling writes passes
/// the check the next pass reads it with (the count is clamped to `bounds`, which keep to
/// [`spec::MAX_REPLICAS`], the check's own limit).
#[test]
fn autoscaling_writes_only_what_the_next_pass_reads() {
    let mut quarantined = Vec::new();
    for replicas in [0, 1, 2, 999_999, spec::MAX_REPLICAS] {
        for min in [None, Some(0), Some(1), Some(999_999), Some(spec::MAX_REPLICAS)] {
            for max in [1, 2, 999_999, spec::MAX_REPLICAS] {
                for target in [1e-300, 0.5, 1.0] {
                    for load in [0.0, 1e-300, 0.5, 1e7, f64::MAX] {
                        let mut d = deployment("d", replicas, &[(1, 1)]);
                        (d.min_replicas, d.max_replicas) = (min, Some(max));
                        d.autoscale =
                            Some(Autoscale { target, tolerance: 0.0, up_cooldown_ms: 0, down_cooldown_ms: 0 });
                        if d.check().is_err() {
                            continue;
                        }
                        let mut store = MemoryStore::new();
                        let value = serde_json::to_string(&d).unwrap();
                        store.commit(&[Op::Put { key: "deployments/d".into(), value, expect: Expect::Any }]).unwrap();
                        let mut snapshot = Snapshot::load(&mut store).unwrap();
                        let load: BTreeMap<String, f64> = BTreeMap::from([("d".to_owned(), load)]);
                        let mut report = PassReport::default();
                        crate::pass::autoscale(&mut store, &mut snapshot, 1, &load, &BTreeSet::new(), &mut report)
                            .unwrap();
                        let after = Snapshot::load(&mut store).unwrap();
                        if !after.quarantined.is_empty() {
                            quarantined.push((d, load, after.quarantined));
                        }
                    }
                }
            }
        }
    }
    assert!(quarantined.is_empty(), "{quarantined:#?}");
}

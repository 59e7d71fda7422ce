//! Replicas: the machines split into several llama-servers, each a plan of its own, behind
//! one load balancer. One pipeline over every machine steps every user through every stage
//! and hop; machines that each hold the model serve more users side by side (vLLM's TP 4 on
//! four 3090s: faster for one user, slower in aggregate than four replicas), and which split
//! serves most at a target depends on the machines, so every split is tried.
//!
//! Each replica's users are as many as it serves within the targets ([`super::capacity`] on
//! its machines alone); a balancer that keeps each replica's share of the users in flight
//! (nginx's `least_conn` with each server's `weight=` its users) serves them all. Machines
//! that share a board (a machine's GPUs) stay in one replica: they share its RAM and CPU.

use super::{Capacity, Load, Served, ServingError, Targets, Trial, Trials, most_users};

/// The most machines whose every split into replicas is tried: each set of machines is
/// tried (2^m − 1 sets; for eight machines holding a 70B model 65 ms on this project's CI
/// machine, about twice that for every machine more; BENCHMARKS), then the best split found
/// among them.
pub const MAX_REPLICA_MACHINES: usize = 8;

/// Why [`replicas`] does not split a problem's machines.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum NotSplit {
    /// One machine (a machine's GPUs are one): nothing to split.
    OneMachine,
    /// More machines than [`MAX_REPLICA_MACHINES`]: their splits are too many to try.
    TooMany { machines: usize },
    /// Stages given by hand are one plan's.
    ManualStages,
    /// A draft or projector rides along, placed once per plan.
    Riders,
}

/// Why [`replicas`] does not split `problem`'s machines, or `None` when it tries every split.
pub fn not_split(problem: &crate::Problem) -> Option<NotSplit> {
    let machines = machines(problem).len();
    if machines < 2 {
        Some(NotSplit::OneMachine)
    } else if machines > MAX_REPLICA_MACHINES {
        Some(NotSplit::TooMany { machines })
    } else if problem.manual.is_some() {
        Some(NotSplit::ManualStages)
    } else if !problem.riders.is_empty() {
        Some(NotSplit::Riders)
    } else {
        None
    }
}

/// One llama-server of several: its machines, its plan, and the users it serves within the
/// targets.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[cfg_attr(feature = "typescript", derive(ts_rs::TS))]
pub struct Replica {
    /// The machines' names as the scenario gives them (a machine with several GPUs once).
    pub machines: Vec<String>,
    pub users: u32,
    pub plan: crate::Plan,
    pub served: Served,
}

/// Machines split into replicas that together serve more users within the targets than one
/// llama-server over all of them.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[cfg_attr(feature = "typescript", derive(ts_rs::TS))]
pub struct Replicas {
    /// Every replica's users together.
    pub users: u32,
    pub replicas: Vec<Replica>,
}

/// The scenario's machines, each its nodes: the GPUs of a machine with several are one.
fn machines(problem: &crate::Problem) -> Vec<(String, Vec<usize>)> {
    let mut machines: Vec<(String, Vec<usize>)> = Vec::new();
    for (k, node) in problem.nodes.iter().enumerate() {
        let name = node.gpu_of.as_ref().map_or(&node.name, |gpu| &gpu.machine);
        match machines.iter_mut().find(|(m, _)| m == name) {
            Some((_, nodes)) => nodes.push(k),
            None => machines.push((name.clone(), vec![k])),
        }
    }
    machines
}

/// The split of `problem`'s machines into replicas that serves the most users within
/// `targets`, when it serves more than `one_server` (what one llama-server over every machine
/// serves, [`super::capacity`]); `None` when none does, and for what is not split
/// ([`not_split`] says why).
///
/// Exact: every set of machines has its capacity searched, and the split is the best over
/// every partition (a machine may serve in no replica), by a dynamic program over subsets.
///
/// # Errors
/// As [`super::capacity`], for a load or targets it refuses.
pub fn replicas(
    problem: &crate::Problem,
    load: Load,
    targets: Targets,
    one_server: u32,
) -> Result<Option<Replicas>, ServingError> {
    if not_split(problem).is_some() {
        return Ok(None);
    }
    let machines = machines(problem);
    let m = machines.len();
    let all = (1usize << m) - 1;
    // Each proper set of machines as one replica: what it serves, when it serves anyone.
    let enabled = |set: usize| {
        let mut enabled = vec![false; problem.nodes.len()];
        for (i, (_, nodes)) in machines.iter().enumerate() {
            if set >> i & 1 == 1 {
                nodes.iter().for_each(|&k| enabled[k] = true);
            }
        }
        enabled
    };
    // Each set's users, and its search's result where it was searched in full. A set that
    // does not serve one user more than the best of it less one machine is taken to serve
    // that many, untried: most sets of a cluster do, and it halves the plans made.
    let mut users = vec![0u32; all];
    let mut alone: Vec<Option<Capacity>> = vec![None; all];
    let mut assumed = vec![false; all];
    let search = |set: usize, from: u32, users: &mut [u32], alone: &mut [Option<Capacity>]| {
        match super::search_on(problem, Some(&enabled(set)), load, targets, from) {
            Ok(found) => {
                users[set] = found.users;
                alone[set] = Some(found).filter(|found| found.users > 0);
            }
            Err(ServingError::NoPlan) => (users[set], alone[set]) = (0, None),
            Err(e) => return Err(e),
        }
        Ok(())
    };
    for set in 1..all {
        // Each set less one machine is smaller, so searched before it.
        let from = (0..m).filter(|i| set >> i & 1 == 1).map(|i| users[set ^ 1 << i]).max().unwrap_or(0);
        if from > 0 {
            let more = from < most_users(problem.workload.engine)
                && matches!(Trials::new(problem, Some(&enabled(set)), load, targets)?.run(from + 1)?, Trial::Met(_));
            if !more {
                (users[set], assumed[set]) = (from, true);
                continue;
            }
        }
        // One more than the set less one machine met, or one.
        search(set, from + 1, &mut users, &mut alone)?;
    }
    // An untried set's count is at least its own (one more failed; that one is not tried),
    // so the best split with them bounds the best there is: when its sets are all searched
    // it is the best; else they are, and the split is found again.
    let (most, sets) = loop {
        let (most, sets) = best_split(m, &|set| users.get(set).copied().unwrap_or(0));
        let untried: Vec<usize> = sets.iter().copied().filter(|&set| assumed[set]).collect();
        if untried.is_empty() {
            break (most, sets);
        }
        for set in untried {
            assumed[set] = false;
            search(set, users[set], &mut users, &mut alone)?;
        }
    };
    if most <= one_server {
        return Ok(None);
    }
    let mut replicas = Vec::new();
    for set in sets {
        let Some(found) = alone[set].take() else { continue };
        let found = super::explained(problem, Some(&enabled(set)), found);
        let names = machines.iter().enumerate().filter(|(i, _)| set >> i & 1 == 1);
        replicas.push(Replica {
            machines: names.map(|(_, (name, _))| name.clone()).collect(),
            users: found.users,
            plan: found.plan,
            served: found.served,
        });
    }
    replicas.sort_by_key(|replica| std::cmp::Reverse(replica.users));
    Ok(Some(Replicas { users: most, replicas }))
}

/// `users` users on the split of `problem`'s machines into replicas that serves the most
/// within `targets` ([`replicas`], given what one llama-server over every machine serves,
/// `one_server`): each replica takes a share in proportion to what it serves (never more),
/// planned and simulated at that share. Where the split serves fewer than `users`, it as
/// [`replicas`] gives it, each replica at what it serves: the nearest. `None` when no split
/// serves more than one server, or when a share, simulated, misses the targets.
///
/// # Errors
/// As [`replicas`].
pub(super) fn spread(
    problem: &crate::Problem,
    load: Load,
    targets: Targets,
    users: u32,
    one_server: u32,
) -> Result<Option<Replicas>, ServingError> {
    let Some(split) = replicas(problem, load, targets, one_server)? else { return Ok(None) };
    if split.users < users {
        return Ok(Some(split));
    }
    let capacities: Vec<u32> = split.replicas.iter().map(|r| r.users).collect();
    let machines = machines(problem);
    let mut spread = Vec::new();
    for (replica, share) in split.replicas.into_iter().zip(shares(users, &capacities)) {
        if share == 0 {
            continue;
        }
        let mut enabled = vec![false; problem.nodes.len()];
        for (_, nodes) in machines.iter().filter(|(name, _)| replica.machines.contains(name)) {
            nodes.iter().for_each(|&k| enabled[k] = true);
        }
        let Trial::Met(ran) = Trials::new(problem, Some(&enabled), load, targets)?.run(share)? else {
            return Ok(None);
        };
        let (plan, load, served) = *ran;
        let found = Capacity { users: share, plan, load, served, limit: super::Limit::Most };
        let found = super::explained(problem, Some(&enabled), found);
        spread.push(Replica { machines: replica.machines, users: share, plan: found.plan, served: found.served });
    }
    Ok(Some(Replicas { users, replicas: spread }))
}

/// `users` shared in proportion to `capacities` (whose sum is at least `users`), each share
/// at most its capacity: the floors, then one more to the largest remainders.
fn shares(users: u32, capacities: &[u32]) -> Vec<u32> {
    let total: u64 = capacities.iter().map(|&c| u64::from(c)).sum();
    if total == 0 {
        return vec![0; capacities.len()];
    }
    let exact: Vec<u64> = capacities.iter().map(|&c| u64::from(users) * u64::from(c)).collect();
    let mut shares: Vec<u32> = exact.iter().map(|&e| (e / total) as u32).collect();
    let mut left = users - shares.iter().sum::<u32>();
    let mut order: Vec<usize> = (0..capacities.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(exact[i] % total));
    for i in order.into_iter().cycle().take(capacities.len() * 2) {
        if left == 0 {
            break;
        }
        if shares[i] < capacities[i] {
            shares[i] += 1;
            left -= 1;
        }
    }
    shares
}

/// The split of `machines` machines into replicas (disjoint proper sets, as bit masks; a
/// machine may serve in none) whose `users` sum most, and that sum: a dynamic program over
/// subsets, each taking its lowest machine into no replica or into one with others.
fn best_split(machines: usize, users: &dyn Fn(usize) -> u32) -> (u32, Vec<usize>) {
    let all = (1usize << machines) - 1;
    // best[s]: the most users of replicas within s; taken[s]: the replica holding s's lowest
    // machine in that split (0: none).
    let mut best = vec![0u32; all + 1];
    let mut taken = vec![0usize; all + 1];
    for set in 1..=all {
        let low = set & set.wrapping_neg();
        best[set] = best[set ^ low];
        let rest = set ^ low;
        let mut others = rest;
        loop {
            let replica = others | low;
            if replica != all {
                let total = users(replica).saturating_add(best[set ^ replica]);
                if total > best[set] {
                    best[set] = total;
                    taken[set] = replica;
                }
            }
            if others == 0 {
                break;
            }
            others = (others - 1) & rest;
        }
    }
    let mut sets = Vec::new();
    let mut set = all;
    while set != 0 {
        match taken[set] {
            0 => set &= set - 1,
            replica => {
                sets.push(replica);
                set ^= replica;
            }
        }
    }
    (best[all], sets)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn users_are_shared_by_capacity_and_never_past_it() {
        assert_eq!(shares(24, &[18, 8]), [17, 7]);
        assert_eq!(shares(10, &[5, 5]), [5, 5]);
        assert_eq!(shares(3, &[1, 1, 8]), [0, 0, 3]);
        assert_eq!(shares(0, &[4, 4]), [0, 0]);
        for users in 0..=20u32 {
            let capacities = [7, 1, 12];
            let given = shares(users, &capacities);
            assert_eq!(given.iter().sum::<u32>(), users, "{users}: {given:?}");
            assert!(given.iter().zip(capacities).all(|(&g, c)| g <= c), "{users}: {given:?}");
        }
    }

    #[test]
    fn a_machines_gpus_stay_in_one_replica() {
        let json = r#"{"model": {"preset": "llama-3.2-1b", "weights": "q8_0"},
            "nodes": [{"name": "box", "gpus": [{"device": "rtx-3060-12gb", "count": 2}], "gpu_link": "pcie4-x8"},
                      {"name": "desk", "device": "rtx-3060-12gb"}, {"name": "den", "device": "rtx-3060-12gb", "count": 2}]}"#;
        let problem = crate::check(json, crate::check::no_model_files).unwrap().problem;
        let machines = machines(&problem);
        let names: Vec<(&str, &[usize])> = machines.iter().map(|(n, k)| (n.as_str(), k.as_slice())).collect();
        // `count` is whole machines: each its own.
        assert_eq!(names, [("box", &[0, 1][..]), ("desk", &[2][..]), ("den-1", &[3][..]), ("den-2", &[4][..])]);
    }

    /// The split is the best over every set of machines searched in full, though most sets
    /// are taken to serve what they serve less one machine, untried: on six home machines
    /// holding a 70B model in pipelines (most sets serve what their best subset serves),
    /// and on GPUs that each hold a 1B model (every set serves more than its subsets).
    #[test]
    fn the_split_is_what_searching_every_set_in_full_gives() {
        let home = include_str!("../../../../tests/scenarios/home-70b-8.json");
        let mut scenario = crate::Scenario::from_json(home).unwrap();
        scenario.nodes.truncate(6);
        let home = crate::check(scenario, crate::check::no_model_files).unwrap().problem;
        let gpus = r#"{"model": {"preset": "llama-3.2-1b", "weights": "q8_0"},
            "workload": {"context": 4096, "prompt": 128, "response": 64},
            "nodes": [{"name": "a", "device": "rtx-3060-12gb"}, {"name": "b", "device": "rtx-4090"},
                      {"name": "c", "device": "m2-max-96gb"}, {"name": "d", "device": "rtx-3090"}]}"#;
        let gpus = crate::check(gpus, crate::check::no_model_files).unwrap().problem;
        let percentile = super::super::Percentile::P95;
        for (problem, targets) in [
            (&home, Targets { ttft_s: Some(5.0), tpot_s: Some(0.2), percentile }),
            (&gpus, Targets { ttft_s: Some(2.0), tpot_s: Some(0.05), percentile }),
        ] {
            let load = Load::llama_server(problem, 1);
            let machines = machines(problem);
            let all = (1usize << machines.len()) - 1;
            let in_full: Vec<u32> = (0..all)
                .map(|set| {
                    let enabled: Vec<bool> = (0..problem.nodes.len())
                        .map(|k| {
                            machines.iter().enumerate().any(|(i, (_, nodes))| set >> i & 1 == 1 && nodes.contains(&k))
                        })
                        .collect();
                    let found = super::super::search_on(problem, Some(&enabled), load, targets, 1);
                    if set == 0 { 0 } else { found.map_or(0, |found| found.users) }
                })
                .collect();
            let (most, _) = best_split(machines.len(), &|set| in_full.get(set).copied().unwrap_or(0));
            let found = replicas(problem, load, targets, 0).unwrap().expect("replicas serve someone");
            assert_eq!(found.users, most, "{found:?}");
            for replica in &found.replicas {
                let set = machines.iter().enumerate().filter(|(_, (name, _))| replica.machines.contains(name));
                let set = set.fold(0, |set, (i, _)| set | 1 << i);
                assert_eq!(replica.users, in_full[set], "{:?}", replica.machines);
            }
            assert!(found.replicas.len() > 1, "{found:?}");
        }
    }

    /// Every way to give each machine a replica number or none: the best sum of users over
    /// splits into proper sets.
    fn brute_force(machines: usize, users: &dyn Fn(usize) -> u32) -> u32 {
        let all = (1usize << machines) - 1;
        let mut best = 0;
        let mut label = vec![0usize; machines];
        loop {
            let mut sets = vec![0usize; machines + 1];
            for (i, &l) in label.iter().enumerate() {
                sets[l] |= 1 << i;
            }
            if sets[1..].iter().all(|&s| s != all) {
                best = best.max(sets[1..].iter().filter(|&&s| s != 0).map(|&s| users(s)).sum());
            }
            // Next labelling, counting in base machines + 1.
            let Some(i) = label.iter().position(|&l| l < machines) else { break };
            label[i] += 1;
            label[..i].iter_mut().for_each(|l| *l = 0);
        }
        best
    }

    proptest::proptest! {
        /// The split is the best over every partition, and what it returns sums to it.
        #[test]
        fn the_split_is_the_best_partition(machines in 1usize..=5, table in proptest::collection::vec(0u32..50, 32)) {
            let users = |set: usize| table[set % table.len()];
            let (most, sets) = best_split(machines, &users);
            proptest::prop_assert_eq!(most, brute_force(machines, &users));
            proptest::prop_assert_eq!(sets.iter().map(|&s| users(s)).sum::<u32>(), most);
            let all = (1usize << machines) - 1;
            proptest::prop_assert!(sets.iter().all(|&s| s != 0 && s != all));
            let union = sets.iter().fold(0, |union, &s| union | s);
            proptest::prop_assert_eq!(sets.iter().map(|s| s.count_ones()).sum::<u32>(), union.count_ones());
            proptest::prop_assert_eq!(union & !all, 0);
        }
    }
}

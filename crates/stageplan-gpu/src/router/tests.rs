use proptest::prelude::*;

use super::*;

fn allocator(mode: Mode, weights: &[f64]) -> Allocator {
    Allocator::with_weights(mode, weights).unwrap()
}

fn keys(count: u64) -> Vec<[u8; 8]> {
    (0..count).map(u64::to_le_bytes).collect()
}

fn landings(a: &Allocator, keys: &[[u8; 8]]) -> Vec<usize> {
    keys.iter().map(|k| a.landing(k).unwrap()).collect()
}

#[test]
fn typed_errors_say_what_to_do() {
    let mut empty = Allocator::new(Mode::Landing { spill: 10 }).unwrap();
    assert_eq!(empty.assign(b"k", 1), Err(RouteError::ZeroDevices));
    assert!(empty.assign(b"k", 1).unwrap_err().to_string().contains("add at least one device"));
    assert_eq!(empty.remove_device(3), Err(RouteError::DeviceOutOfRange { id: 3, count: 0 }));
    let mut one = allocator(Mode::Landing { spill: 10 }, &[1.0]);
    one.assign(b"a", u64::MAX - 1).unwrap();
    assert!(matches!(one.assign(b"b", 2), Err(RouteError::LoadOverflow { device: 0, .. })));
    assert!(Allocator::new(Mode::Bounded { epsilon: -0.5 }).is_err());
    assert!(one.add_device(f64::NAN).is_err());
    assert!(ByThroughput::new(&[]).is_err());
    assert!(ByThroughput::new(&[1.0, -2.0]).is_err());
}

#[test]
fn a_zero_cost_item_is_not_assigned() {
    let mut a = allocator(Mode::Weighted { spill: 0 }, &[1.0, 1.0]);
    assert_eq!(a.assign(b"free", 0), Ok(None));
    assert_eq!(a.max_and_average(), (0, 0.0));
}

#[test]
fn landing_is_deterministic_and_content_addressed() {
    for mode in [Mode::Landing { spill: 100 }, Mode::Weighted { spill: 100 }] {
        let a = allocator(mode, &[1.0, 3.0, 2.0, 8.0]);
        let b = allocator(mode, &[1.0, 3.0, 2.0, 8.0]);
        assert_eq!(landings(&a, &keys(1000)), landings(&b, &keys(1000)));
    }
}

#[test]
fn a_hot_device_spills_to_the_least_loaded() {
    let mut a = allocator(Mode::Landing { spill: 5 }, &[1.0, 1.0]);
    // The same key keeps landing on one device; past the spill margin it goes elsewhere.
    let landing = a.landing(b"hot").unwrap();
    let mut seen = [0u32; 2];
    for _ in 0..20 {
        seen[a.assign(b"hot", 1).unwrap().unwrap()] += 1;
    }
    assert!(seen[landing] >= 10 && seen[1 - landing] >= 7, "{seen:?}");
    let (max, avg) = a.max_and_average();
    assert!(max as f64 - avg <= 3.5, "{max} vs {avg}");
}

#[test]
fn the_heap_stays_proportional_to_the_devices() {
    let mut a = allocator(Mode::Landing { spill: 1 }, &[1.0; 16]);
    for k in 0..100_000u32 {
        a.assign(&k.to_le_bytes(), 1 + u64::from(k % 7)).unwrap();
        assert!(a.heap_len() <= 2 * 16 + 9);
    }
}

#[test]
fn weighted_shares_follow_the_weights() {
    // Without spilling, and with spilling (which compares load per weight, so a fast
    // device's bigger share is not a hot spot to spill from).
    for spill in [u64::MAX, 20] {
        let mut a = allocator(Mode::Weighted { spill }, &[1.0, 2.0, 5.0]);
        for k in 0..80_000u32 {
            a.assign(&k.to_le_bytes(), 1).unwrap();
        }
        let shares: Vec<f64> = a.loads().iter().map(|&l| l as f64 / 80_000.0).collect();
        for (share, expected) in shares.iter().zip([1.0 / 8.0, 2.0 / 8.0, 5.0 / 8.0]) {
            assert!((share - expected).abs() < 0.01, "spill {spill}: {shares:?}");
        }
    }
}

#[test]
fn shares_follow_the_weights_for_a_fleet_grown_one_by_one() {
    let mut a = Allocator::new(Mode::Weighted { spill: u64::MAX }).unwrap();
    for w in [3.0, 1.0, 4.0] {
        a.add_device(w).unwrap();
    }
    let mut counts = [0usize; 3];
    for d in landings(&a, &keys(100_000)) {
        counts[d] += 1;
    }
    for (count, weight) in counts.iter().zip([3.0, 1.0, 4.0]) {
        assert!((*count as f64 / 100_000.0 - weight / 8.0).abs() < 0.006, "{counts:?}");
    }
}

#[test]
fn shares_follow_the_weights_after_churn() {
    // Devices leave and others take their vacant (heavier) slots: each device's share is
    // still its weight's.
    let mut a = allocator(Mode::Weighted { spill: u64::MAX }, &[4.0, 1.0, 8.0, 2.0, 3.0]);
    a.remove_device(2).unwrap();
    a.remove_device(0).unwrap();
    let joined = a.add_device(5.0).unwrap(); // takes the 8.0 slot, keeping 5/8 of its landings
    let keys = keys(200_000);
    let mut counts = vec![0usize; a.device_count()];
    for d in landings(&a, &keys) {
        counts[d] += 1;
    }
    let total: f64 = [1.0, 2.0, 3.0, 5.0].iter().sum();
    for (device, weight) in [(1, 1.0), (3, 2.0), (4, 3.0), (joined, 5.0)] {
        let share = counts[device] as f64 / keys.len() as f64;
        assert!((share - weight / total).abs() < 0.006, "device {device}: {share} vs {}", weight / total);
    }
    assert_eq!(counts[0] + counts[2], 0);
}

#[test]
fn bounded_load_keeps_the_maximum_within_the_slack() {
    let mut a = allocator(Mode::Bounded { epsilon: 0.01 }, &[1.0; 10]);
    for k in 0..50_000u32 {
        // Skewed costs: mostly small, some large.
        let cost = if k % 97 == 0 { 200 } else { 1 + u64::from(k % 13) };
        a.assign(&k.to_le_bytes(), cost).unwrap();
    }
    // A long stream of items small beside the slack: the bound holds with nothing added.
    let (max, avg) = a.max_and_average();
    assert!(max as f64 <= 1.01 * avg, "{max} vs {avg}");
    // Without the bound the same stream is less even.
    let mut free = allocator(Mode::Weighted { spill: u64::MAX }, &[1.0; 10]);
    for k in 0..50_000u32 {
        let cost = if k % 97 == 0 { 200 } else { 1 + u64::from(k % 13) };
        free.assign(&k.to_le_bytes(), cost).unwrap();
    }
    let (free_max, free_avg) = free.max_and_average();
    assert!(free_max as f64 > 1.01 * free_avg, "{free_max} vs {free_avg}");
}

#[test]
fn routers_route_within_their_replicas() {
    let mut turns = RoundRobin::new(2);
    assert_eq!((0..5).map(|_| turns.route(b"k")).collect::<Vec<_>>(), [0, 1, 0, 1, 0]);
    let mut by = ByThroughput::new(&[1.0, 3.0]).unwrap();
    let picks: Vec<usize> = (0..4000u32).map(|k| by.route(&k.to_le_bytes())).collect();
    let fast = picks.iter().filter(|&&p| p == 1).count() as f64 / picks.len() as f64;
    assert!((fast - 0.75).abs() < 0.03, "{fast}");
    assert_eq!(by.route(b"same"), by.route(b"same"));
}

proptest! {
    /// The guide table finds exactly what a binary search over the prefix sums finds.
    #[test]
    fn the_guide_table_finds_the_first_slot_above(
        weights in prop::collection::vec(0.001f64..1000.0, 1..80),
        points in prop::collection::vec(0.0f64..1.0, 1..100),
    ) {
        let a = allocator(Mode::Weighted { spill: 0 }, &weights);
        let slots = &a.slots;
        for p in points {
            let x = p * slots.total();
            prop_assert_eq!(slots.first_above(x), slots.prefix.partition_point(|&s| s <= x));
        }
    }

    /// Any sequence of joins and leaves: a join moves keys only onto the joiner, a leave
    /// only the leaver's keys, and a key never lands on a device that left.
    #[test]
    fn keys_move_only_onto_a_joiner_or_off_a_leaver(
        start in prop::collection::vec(0.5f64..8.0, 1..24),
        one_by_one in any::<bool>(),
        ops in prop::collection::vec((any::<bool>(), 0.5f64..8.0, any::<prop::sample::Index>()), 1..12),
    ) {
        // A starting fleet (drawn in one step), or every device added one by one (jumps).
        let mut a = if one_by_one {
            let mut a = Allocator::new(Mode::Weighted { spill: u64::MAX }).unwrap();
            for &w in &start {
                a.add_device(w).unwrap();
            }
            a
        } else {
            allocator(Mode::Weighted { spill: u64::MAX }, &start)
        };
        let keys = keys(3000);
        let mut before = landings(&a, &keys);
        for (join, weight, which) in ops {
            if join || a.alive.len() == 1 {
                let new = a.add_device(weight).unwrap();
                let after = landings(&a, &keys);
                for (b, n) in before.iter().zip(&after) {
                    prop_assert!(b == n || *n == new, "a key moved from {} to {}, not the joiner {}", b, n, new);
                }
                before = after;
            } else {
                let gone = a.alive[which.index(a.alive.len())];
                a.remove_device(gone).unwrap();
                let after = landings(&a, &keys);
                for (b, n) in before.iter().zip(&after) {
                    prop_assert!(*n != gone && (b == n || *b == gone), "a key moved from {} to {} (leaver {})", b, n, gone);
                }
                before = after;
            }
        }
    }

    /// Bounded mode: every device stays within `(1 + ε)` of its weight's share, plus at
    /// most one item (the early-stream case the module docs describe).
    #[test]
    fn bounded_load_holds_for_any_weights_and_costs(
        weights in prop::collection::vec(0.5f64..8.0, 1..24),
        epsilon in 0.0f64..1.0,
        costs in prop::collection::vec(1u64..1000, 1..3000),
    ) {
        let mut a = allocator(Mode::Bounded { epsilon }, &weights);
        for (k, &cost) in costs.iter().enumerate() {
            a.assign(&(k as u64).to_le_bytes(), cost).unwrap();
        }
        let total: u64 = a.loads().iter().sum();
        let total_weight: f64 = weights.iter().sum();
        let largest = *costs.iter().max().unwrap() as f64;
        let spread = weights.iter().copied().fold(0.0, f64::max) / weights.iter().copied().fold(f64::INFINITY, f64::min);
        for (i, &load) in a.loads().iter().enumerate() {
            let share = (1.0 + epsilon) * total as f64 * weights[i] / total_weight;
            prop_assert!(load as f64 <= share + largest * spread + 1e-6, "device {}: {} > {} + {}", i, load, share, largest);
        }
    }

    /// On a join, only the keys the new device wins move: its share of them.
    #[test]
    fn a_join_moves_about_the_joiners_share(n in 2usize..40) {
        let mut a = allocator(Mode::Weighted { spill: u64::MAX }, &vec![1.0; n]);
        let keys = keys(20_000);
        let before = landings(&a, &keys);
        let new = a.add_device(1.0).unwrap();
        let after = landings(&a, &keys);
        let moved = before.iter().zip(&after).filter(|(b, n)| b != n).count();
        prop_assert!(after.iter().zip(&before).all(|(n, b)| n == b || *n == new));
        let fraction = moved as f64 / keys.len() as f64;
        let expected = 1.0 / (n as f64 + 1.0);
        prop_assert!((fraction - expected).abs() < 0.3 * expected + 0.01, "{} vs {}", fraction, expected);
        // A leave moves exactly the leaver's keys.
        a.remove_device(new).unwrap();
        let back = landings(&a, &keys).iter().zip(&before).filter(|(n, b)| n != b).count();
        prop_assert_eq!(back, 0, "keys not back where they were");
    }
}

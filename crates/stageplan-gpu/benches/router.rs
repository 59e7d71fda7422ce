//! Request-routing benchmarks: `cargo bench -p stageplan-gpu --bench router`.
//!
//! Assignments per second for 16- and 64-byte keys on 8 and 1,024 devices, for the modes of
//! [`stageplan_gpu::router`] and, in the same run, three baselines: `hash % n` (the standard
//! library's SipHash, no load tracking beyond a counter), blake3 landing plus spill without
//! weights (`Mode::Landing`), and weighted rendezvous hashing — what `Mode::Weighted` was
//! before the jump chain, O(n) per key — with a load counter.
//!
//! Before timing, it prints the balance each mode reaches after 1 M keys of skewed cost
//! (Pareto, α = 1.5) and the fraction of keys that move when a device joins or leaves.

#![allow(clippy::print_stdout)]

use std::hash::{BuildHasher, RandomState};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use stageplan_gpu::router::{Allocator, Mode, key_hash};

const KEYS: usize = 4096;

/// Weighted rendezvous hashing, as `Mode::Weighted` ran before the jump chain: every device
/// scores `ln(u) / weight`, pruned by `ln u ≤ u − 1`.
struct Rendezvous {
    seeds: Vec<u64>,
    inverse_weights: Vec<f64>,
}

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl Rendezvous {
    fn new(weights: &[f64]) -> Rendezvous {
        Rendezvous {
            seeds: (0..weights.len()).map(|id| mix(id as u64 ^ 0x5ca1_ab1e)).collect(),
            inverse_weights: weights.iter().map(|w| 1.0 / w).collect(),
        }
    }

    fn remove(&mut self, id: usize) {
        self.inverse_weights[id] = f64::INFINITY;
    }

    fn add(&mut self, weight: f64) {
        self.seeds.push(mix(self.seeds.len() as u64 ^ 0x5ca1_ab1e));
        self.inverse_weights.push(1.0 / weight);
    }

    fn landing(&self, key: &[u8]) -> usize {
        let h = key_hash(key);
        let (mut best, mut winner) = (f64::NEG_INFINITY, 0);
        for (i, (&seed, &inverse)) in self.seeds.iter().zip(&self.inverse_weights).enumerate() {
            let u = ((mix(h ^ seed) >> 11) as f64 + 0.5) * (1.0 / (1u64 << 53) as f64);
            if (u - 1.0) * inverse <= best {
                continue;
            }
            let score = u.ln() * inverse;
            if score > best {
                best = score;
                winner = i;
            }
        }
        winner
    }
}

/// Keys of `len` pseudo-random bytes and skewed costs (a few items cost far more).
fn stream(len: usize) -> (Vec<Vec<u8>>, Vec<u64>) {
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let keys = (0..KEYS).map(|_| (0..len).map(|_| next() as u8).collect()).collect();
    let costs = (0..KEYS)
        .map(|_| {
            let u = ((next() >> 11) as f64 + 1.0) / (1u64 << 53) as f64;
            (u.powf(-1.0 / 1.5)).min(1e6) as u64
        })
        .collect();
    (keys, costs)
}

fn weights(n: usize) -> Vec<f64> {
    // Mismatched devices: throughputs from 1 to 8.
    (0..n).map(|i| 1.0 + (i * 7 % 8) as f64).collect()
}

fn allocator(mode: Mode, n: usize) -> Allocator {
    Allocator::with_weights(mode, &weights(n)).expect("valid weights")
}

/// The largest load relative to the device's fair share (`total × weight ÷ total weight`).
fn worst_over_share(loads: &[u64], weights: &[f64]) -> f64 {
    let total: u64 = loads.iter().sum();
    let total_weight: f64 = weights.iter().sum();
    loads.iter().zip(weights).map(|(&l, &w)| l as f64 / (total as f64 * w / total_weight)).fold(0.0, f64::max)
}

fn balance_table() {
    const STREAM: usize = 1_000_000;
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let stream: Vec<([u8; 16], u64)> = (0..STREAM)
        .map(|_| {
            let key = (u128::from(next()) << 64 | u128::from(next())).to_le_bytes();
            let u = ((next() >> 11) as f64 + 1.0) / (1u64 << 53) as f64;
            (key, (u.powf(-1.0 / 1.5)).min(1e6) as u64)
        })
        .collect();
    println!("max load ÷ fair share after 1 M keys of Pareto(1.5) cost (1 is perfect)\n");
    println!("| mode | 8 equal | 8 mismatched (1–8) | 1024 equal | 1024 mismatched |");
    println!("|---|---|---|---|---|");
    let modes: [(&str, Option<Mode>); 7] = [
        ("baseline: SipHash % n", None),
        ("baseline: weighted rendezvous", None),
        ("baseline: blake3 % n + spill", Some(Mode::Landing { spill: 1000 })),
        ("weighted jump chain", Some(Mode::Weighted { spill: u64::MAX })),
        ("weighted jump chain + spill", Some(Mode::Weighted { spill: 1000 })),
        ("bounded, ε = 0.25", Some(Mode::Bounded { epsilon: 0.25 })),
        ("bounded, ε = 0.05", Some(Mode::Bounded { epsilon: 0.05 })),
    ];
    // No assignment beats the largest item on the device with the largest share.
    let largest = stream.iter().map(|(_, c)| *c).max().unwrap_or(0) as f64;
    let total: f64 = stream.iter().map(|(_, c)| *c as f64).sum();
    let mut floor = String::from("| floor: largest item ÷ largest fair share |");
    for (n, mismatched) in [(8usize, false), (8, true), (1024, false), (1024, true)] {
        let w: Vec<f64> = if mismatched { weights(n) } else { vec![1.0; n] };
        let top = w.iter().copied().fold(0.0, f64::max) / w.iter().sum::<f64>();
        floor.push_str(&format!(" {:.3} |", (largest / (total * top)).max(1.0)));
    }
    println!("{floor}");
    for (name, mode) in modes {
        let mut row = format!("| {name} |");
        for (n, mismatched) in [(8usize, false), (8, true), (1024, false), (1024, true)] {
            let weights: Vec<f64> = if mismatched { weights(n) } else { vec![1.0; n] };
            let loads = match mode {
                None if name.contains("rendezvous") => {
                    let r = Rendezvous::new(&weights);
                    let mut loads = vec![0u64; n];
                    for (key, cost) in &stream {
                        loads[r.landing(key)] += cost;
                    }
                    loads
                }
                None => {
                    let hasher = RandomState::new();
                    let mut loads = vec![0u64; n];
                    for (key, cost) in &stream {
                        loads[(hasher.hash_one(key) % n as u64) as usize] += cost;
                    }
                    loads
                }
                Some(mode) => {
                    let mut a = Allocator::with_weights(mode, &weights).expect("valid weights");
                    for (key, cost) in &stream {
                        a.assign(key, *cost).expect("no overflow");
                    }
                    a.loads().to_vec()
                }
            };
            row.push_str(&format!(" {:.3} |", worst_over_share(&loads, &weights)));
        }
        println!("{row}");
    }

    println!("\nmax keys ÷ fair share after 1 M keys of unit cost (what the hashing alone gives)\n");
    println!("| landing function | 8 mismatched | 1024 mismatched |");
    println!("|---|---|---|");
    for name in ["baseline: weighted rendezvous", "weighted jump chain"] {
        let mut row = format!("| {name} |");
        for n in [8usize, 1024] {
            let w = weights(n);
            let mut counts = vec![0u64; n];
            if name.contains("rendezvous") {
                let r = Rendezvous::new(&w);
                stream.iter().for_each(|(key, _)| counts[r.landing(key)] += 1);
            } else {
                let a = Allocator::with_weights(Mode::Weighted { spill: u64::MAX }, &w).expect("valid weights");
                stream.iter().for_each(|(key, _)| counts[a.landing(key).expect("devices")] += 1);
            }
            row.push_str(&format!(" {:.3} |", worst_over_share(&counts, &w)));
        }
        println!("{row}");
    }

    println!("\nkeys moved when a device joins (weight: the average) and when device 0 leaves; 100,000 keys\n");
    println!("| landing function | 8 → 9 join | 8 → 7 leave | 1024 → 1025 join | 1024 → 1023 leave |");
    println!("|---|---|---|---|---|");
    let mut ideal = String::from("| ideal: the joiner's or leaver's share |");
    for n in [8usize, 1024] {
        let w = weights(n);
        let total: f64 = w.iter().sum();
        ideal.push_str(&format!(" {:.4} | {:.4} |", 1.0 / (n as f64 + 1.0), w[0] / total));
    }
    println!("{ideal}");
    let keys: Vec<[u8; 16]> = stream.iter().take(100_000).map(|(k, _)| *k).collect();
    for (name, mode) in [
        ("baseline: blake3 % n (also SipHash % n)", Some(Mode::Landing { spill: 0 })),
        ("baseline: weighted rendezvous", None),
        ("weighted jump chain", Some(Mode::Weighted { spill: 0 })),
    ] {
        let mut row = format!("| {name} |");
        for n in [8usize, 1024] {
            let average = weights(n).iter().sum::<f64>() / n as f64;
            // Landings before, after a join of an average device, after device 0 leaves.
            let [old, joined, left]: [Vec<usize>; 3] = match mode {
                Some(mode) => {
                    let build = || Allocator::with_weights(mode, &weights(n)).expect("valid weights");
                    let before = build();
                    let mut joined = build();
                    joined.add_device(average).expect("valid weight");
                    let mut left = build();
                    left.remove_device(0).expect("device 0 exists");
                    [&before, &joined, &left].map(|a| keys.iter().map(|k| a.landing(k).expect("devices")).collect())
                }
                None => {
                    let before = Rendezvous::new(&weights(n));
                    let mut joined = Rendezvous::new(&weights(n));
                    joined.add(average);
                    let mut left = Rendezvous::new(&weights(n));
                    left.remove(0);
                    [&before, &joined, &left].map(|r| keys.iter().map(|k| r.landing(k)).collect())
                }
            };
            let moved =
                |after: &[usize]| after.iter().zip(&old).filter(|(a, o)| a != o).count() as f64 / keys.len() as f64;
            row.push_str(&format!(" {:.4} | {:.4} |", moved(&joined), moved(&left)));
        }
        println!("{row}");
    }
    println!();
}

fn bench(c: &mut Criterion) {
    balance_table();
    for len in [16usize, 64] {
        let (keys, costs) = stream(len);
        let mut group = c.benchmark_group(format!("shard-{len}-byte-keys"));
        group.sample_size(30);
        group.throughput(Throughput::Elements(KEYS as u64));
        for n in [8usize, 1024] {
            let hasher = RandomState::new();
            let mut loads = vec![0u64; n];
            group.bench_function(BenchmarkId::new("baseline-hash-mod-n", n), |b| {
                b.iter(|| {
                    for (key, &cost) in keys.iter().zip(&costs) {
                        loads[(hasher.hash_one(key) % n as u64) as usize] += cost;
                    }
                });
            });
            let rendezvous = Rendezvous::new(&weights(n));
            let mut counted = vec![0u64; n];
            group.bench_function(BenchmarkId::new("baseline-weighted-rendezvous", n), |b| {
                b.iter(|| {
                    for (key, &cost) in keys.iter().zip(&costs) {
                        counted[rendezvous.landing(key)] += cost;
                    }
                });
            });
            let modes = [
                ("baseline-landing-spill", Mode::Landing { spill: 1000 }, 0),
                ("weighted", Mode::Weighted { spill: u64::MAX }, 0),
                ("weighted-after-16-joins", Mode::Weighted { spill: u64::MAX }, 16),
                ("weighted-spill", Mode::Weighted { spill: 1000 }, 0),
                ("bounded-0.25", Mode::Bounded { epsilon: 0.25 }, 0),
            ];
            for (name, mode, joins) in modes {
                let mut a = allocator(mode, n);
                for _ in 0..joins {
                    a.add_device(4.5).expect("valid weight");
                }
                group.bench_function(BenchmarkId::new(name, n), |b| {
                    b.iter(|| {
                        for (key, &cost) in keys.iter().zip(&costs) {
                            a.assign(key, cost).expect("no overflow in a benchmark");
                        }
                    });
                });
            }
        }
        group.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);

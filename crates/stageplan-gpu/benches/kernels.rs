//! Kernel benchmarks on the first adapter (lavapipe in CI), each beside the same work on
//! the CPU in the same run: `cargo bench -p stageplan-gpu --bench kernels`.
//!
//! - `triad`: the STREAM triad over 3 × 64 MiB; baseline: the same triad in Rust on every
//!   core (the CPU's measured memory bandwidth).
//! - `matmul-f32`: 512³ tiled matmul; baseline: `matrixmultiply`'s SGEMM on every core (the
//!   CPU's measured f32 peak, near its hardware peak).
//!
//! Throughput is reported in bytes/s or FLOP/s, so each GPU figure divided by its baseline
//! is the fraction of the device's peak (on lavapipe the device *is* the CPU).

use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use stageplan_gpu::probe::{measure_bandwidth, measure_matmul};
use stageplan_gpu::{Gpu, ProbeOptions};

const STREAM_BYTES: u64 = 64 << 20;
const N: usize = 512;

fn cpu_triad(a: &mut [f32], b: &[f32], c: &[f32], threads: usize) {
    let chunk = a.len().div_ceil(threads);
    std::thread::scope(|scope| {
        for ((a, b), c) in a.chunks_mut(chunk).zip(b.chunks(chunk)).zip(c.chunks(chunk)) {
            scope.spawn(move || {
                for ((a, b), c) in a.iter_mut().zip(b).zip(c) {
                    *a = b + 0.75 * c;
                }
            });
        }
    });
}

fn bench(c: &mut Criterion) {
    let threads = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let gpu = Gpu::new();
    let context = pollster::block_on(gpu.open(0)).expect("a GPU adapter (lavapipe in CI)");

    let mut group = c.benchmark_group("triad");
    group.throughput(Throughput::Bytes(3 * STREAM_BYTES));
    group.sample_size(10);
    let options = ProbeOptions { stream_bytes: STREAM_BYTES, dispatches: 1, ..ProbeOptions::default() };
    group.bench_function(format!("gpu ({})", context.adapter.name), |bench| {
        bench.iter_custom(|iters| {
            let runs = ProbeOptions { repetitions: iters as u32, ..options.clone() };
            let m = pollster::block_on(measure_bandwidth(&context, &runs)).expect("triad runs");
            Duration::from_secs_f64(m.samples_s.iter().sum())
        });
    });
    let count = (STREAM_BYTES / 4) as usize;
    let (mut a, b, cc) = (vec![0f32; count], vec![1f32; count], vec![2f32; count]);
    group
        .bench_function(format!("cpu ({threads} threads)"), |bench| bench.iter(|| cpu_triad(&mut a, &b, &cc, threads)));
    group.finish();

    let mut group = c.benchmark_group("matmul-f32");
    group.throughput(Throughput::Elements(2 * (N as u64).pow(3)));
    group.sample_size(10);
    let options = ProbeOptions { matmul_n: N as u32, dispatches: 1, ..ProbeOptions::default() };
    group.bench_function(format!("gpu ({})", context.adapter.name), |bench| {
        bench.iter_custom(|iters| {
            let runs = ProbeOptions { repetitions: iters as u32, ..options.clone() };
            let m = pollster::block_on(measure_matmul(&context, &runs, false)).expect("matmul runs");
            Duration::from_secs_f64(m.samples_s.iter().sum())
        });
    });
    let x = ndarray::Array2::<f32>::from_elem((N, N), 0.5);
    let y = ndarray::Array2::<f32>::from_elem((N, N), 0.25);
    group.bench_function(format!("cpu sgemm ({threads} threads)"), |bench| bench.iter(|| x.dot(&y)));
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

//! This machine's CPU measured as llama.cpp's CPU backend uses it —
//! the memory read bandwidth and matmul rate that `threads` threads reach together — and
//! printed as a ready scenario node.
//!
//! Decode on a CPU streams every weight once per token, so the figure that matters is how
//! fast the threads llama.cpp runs with (`-t`) read a buffer far larger than the caches;
//! the matmul rate bounds prefill. Both are medians of repeated runs, with their spread.

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

use serde::Serialize;
use stageplan::device::Backend;
use stageplan::device::DeviceKind;
use stageplan::limits::MAX_THREADS;
use stageplan::scenario::{NodeSpec, ProbeProvenance};
use stageplan::units::{Bandwidth, Bytes, Compute, format_bytes};

/// Why the CPU could not be measured, with the fix.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum CpuError {
    #[error("`--threads` is {0}; give 1 to {MAX_THREADS}: the threads llama.cpp will run with (`-t`)")]
    Threads(usize),
    #[error("the CPU probe reads {needed} but only {available} is available; close programs or use `--quick`")]
    Memory { needed: String, available: String },
    #[error("{0}; give the node's memory by hand")]
    MemInfo(String),
    #[error("could not start thread {started} of {threads} ({why}); use fewer `--threads`")]
    Spawn { started: usize, threads: usize, why: String },
}

/// Sizes of the measurement.
#[derive(Clone, Debug, Serialize)]
pub struct CpuOptions {
    /// Threads that read and multiply together (llama.cpp's `-t`).
    pub threads: usize,
    /// Bytes read per run: far past the last-level cache, as a decode step's weights are.
    pub read_bytes: usize,
    /// Each thread multiplies two `n × n` f32 matrices per run.
    pub matmul_n: usize,
    /// Runs the figures are the median of: the last `repetitions` once their spread is at
    /// most [`CpuOptions::stable_spread`], else the steadiest such window of `max_runs`.
    pub repetitions: usize,
    /// Runs made at most while waiting for a steady window.
    pub max_runs: usize,
    /// `(max − min) / median` a window of runs must reach to be planned on.
    pub stable_spread: f64,
}

impl CpuOptions {
    /// Most CPUs: 1 GiB read (a 1B model's weights), 256² matmuls, the median of 10 steady
    /// runs within 10% (a few seconds; up to 40 runs on a busy machine).
    pub fn new(threads: usize) -> CpuOptions {
        CpuOptions { threads, read_bytes: 1 << 30, matmul_n: 256, repetitions: 10, max_runs: 40, stable_spread: 0.10 }
    }

    /// About a second: 256 MiB read (still eight times a large L3), 128² matmuls, 7 runs
    /// within 15%.
    pub fn quick(threads: usize) -> CpuOptions {
        CpuOptions { threads, read_bytes: 256 << 20, matmul_n: 128, repetitions: 7, max_runs: 21, stable_spread: 0.15 }
    }
}

/// A rate measured over repeated runs.
#[derive(Clone, Debug, Serialize)]
pub struct Rate {
    /// Bytes/s or FLOP/s.
    pub median: f64,
    /// `(max − min) / median` of the runs the median is of.
    pub spread: f64,
    /// Runs made, the first (warm-up) not counted.
    pub runs: usize,
    /// Whether `spread` is within [`CpuOptions::stable_spread`]: else the machine was too
    /// busy to measure, and the figure is the steadiest window it gave.
    pub stable: bool,
}

impl Rate {
    /// The steadiest window of `window` consecutive rates (the last one that is within
    /// `stable_spread`, else the one with the least spread).
    fn of_window(rates: &[f64], window: usize, stable_spread: f64) -> Rate {
        let window = window.clamp(1, rates.len().max(1));
        let summary = |w: &[f64]| {
            let mut w = w.to_vec();
            w.sort_by(f64::total_cmp);
            let median = w[w.len() / 2];
            (median, (w[w.len() - 1] - w[0]) / median)
        };
        let best = rates
            .windows(window)
            .map(summary)
            .enumerate()
            .min_by(|(i, a), (j, b)| {
                let steady = |s: f64| s <= stable_spread;
                // Steady windows first, the latest of them; else the least spread.
                match (steady(a.1), steady(b.1)) {
                    (true, true) => j.cmp(i),
                    (true, false) => std::cmp::Ordering::Less,
                    (false, true) => std::cmp::Ordering::Greater,
                    (false, false) => a.1.total_cmp(&b.1),
                }
            })
            .map_or((0.0, f64::INFINITY), |(_, s)| s);
        Rate { median: best.0, spread: best.1, runs: rates.len(), stable: best.1 <= stable_spread }
    }
}

/// What the CPU probe measured.
#[derive(Clone, Debug, Serialize)]
pub struct CpuProbe {
    /// `/proc/cpuinfo`'s model name.
    pub cpu: String,
    pub logical_cores: usize,
    /// NUMA nodes the kernel reports (1 on most machines): with several, the figure is the
    /// threads' wherever the scheduler put them.
    pub numa_nodes: usize,
    /// Read-only: what a decode step does to the weights.
    pub bandwidth: Rate,
    /// f32 multiply-adds, two FLOPs each, with a portable kernel: a lower bound on what
    /// llama.cpp's SIMD kernels reach.
    pub compute: Rate,
    /// `MemTotal` and `MemAvailable` from `/proc/meminfo`.
    pub memory_total: u64,
    pub memory_available: u64,
    pub options: CpuOptions,
}

impl CpuProbe {
    /// Whether every figure was steady enough to plan on.
    pub fn stable(&self) -> bool {
        self.bandwidth.stable && self.compute.stable
    }
}

/// Measures the CPU with `options`; `progress` hears each step's name.
///
/// # Errors
/// A thread count out of range, too little free memory for the read buffer, or no
/// `/proc/meminfo`.
pub fn probe(options: &CpuOptions, progress: &mut dyn FnMut(&str)) -> Result<CpuProbe, CpuError> {
    let logical_cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    // A scenario's bound on `threads`, so the node this probe writes is one it accepts
    // (`as`: 4096 fits any `usize`).
    if options.threads == 0 || options.threads > MAX_THREADS as usize {
        return Err(CpuError::Threads(options.threads));
    }
    let (memory_total, memory_available) = meminfo()?;
    // The read buffer must fit beside what is running: refuse rather than swap.
    if options.read_bytes as u64 > memory_available / 2 {
        return Err(CpuError::Memory {
            needed: format_bytes(options.read_bytes as f64),
            available: format_bytes(memory_available as f64),
        });
    }
    progress("memory read bandwidth");
    let bandwidth = read_bandwidth(options)?;
    progress("f32 matmul");
    let compute = matmul_rate(options)?;
    Ok(CpuProbe {
        cpu: cpu_name(),
        logical_cores,
        numa_nodes: numa_nodes(),
        bandwidth,
        compute,
        memory_total,
        memory_available,
        options: options.clone(),
    })
}

/// Every thread sums its own contiguous share of one large buffer, as llama.cpp's threads
/// each read their rows of a weight matrix: all bytes over the time from the first thread's
/// start to the last one's end.
fn read_bandwidth(options: &CpuOptions) -> Result<Rate, CpuError> {
    let words = options.read_bytes / 8;
    // Written once so every page is resident before the timed runs.
    let buffer: Vec<u64> = (0..words as u64).collect();
    let share = words.div_ceil(options.threads);
    let rates = runs(options, (words * 8) as f64, |t| {
        black_box(sum(buffer.get(t * share..((t + 1) * share).min(words)).unwrap_or_default()));
    })?;
    Ok(Rate::of_window(&rates, options.repetitions, options.stable_spread))
}

/// `work` done by `options.threads` threads together, run after run until a window of
/// `options.repetitions` runs is steady (or `options.max_runs`): each run's rate, `work`
/// units over the threads' span. The first run warms threads, caches and TLB
/// and is not returned.
///
/// The threads stay alive and spin between runs, as llama.cpp's OpenMP team does between
/// graph nodes; the calling thread is thread 0, so no extra thread competes for a core.
fn runs(options: &CpuOptions, work: f64, job: impl Fn(usize) + Sync) -> Result<Vec<f64>, CpuError> {
    let threads = options.threads;
    let mut rates = Vec::new();
    team(threads, &job, |run| {
        let slowest = run()?;
        rates.push(work / slowest.max(1e-9));
        let counted = &rates[1..];
        let steady = counted.len() >= options.repetitions
            && Rate::of_window(
                &counted[counted.len() - options.repetitions..],
                options.repetitions,
                options.stable_spread,
            )
            .stable;
        Ok(steady || counted.len() >= options.max_runs.max(options.repetitions))
    })?;
    rates.remove(0);
    Ok(rates)
}

/// Runs `job(t)` on `threads` threads (the caller is thread 0) once per call of `run`, which
/// `control` makes until it answers `true`; `run` returns the seconds from the first
/// thread's start to the last one's end. A thread the OS refuses stops the others before
/// the error returns.
///
/// The span, not each thread's own time: a thread the OS runs late would otherwise read
/// alone, at a bandwidth the threads never reach together (llama.cpp's threads meet at a
/// barrier after every graph node, so it pays for a late thread too).
fn team(
    threads: usize,
    job: &(impl Fn(usize) + Sync),
    mut control: impl FnMut(&mut dyn FnMut() -> Result<f64, CpuError>) -> Result<bool, CpuError>,
) -> Result<(), CpuError> {
    // `generation` counts runs started; a thread runs once per increment and reports its
    // start and end, in nanoseconds since `epoch`; `u64::MAX` tells it to stop.
    let generation = AtomicU64::new(0);
    let finished = AtomicUsize::new(0);
    let epoch = Instant::now();
    let spans: Vec<[AtomicU64; 2]> = (0..threads).map(|_| [AtomicU64::new(0), AtomicU64::new(0)]).collect();
    let timed = |t: usize| {
        let start = epoch.elapsed();
        job(t);
        spans[t][0].store(nanos(start), Ordering::Relaxed);
        spans[t][1].store(nanos(epoch.elapsed()), Ordering::Relaxed);
    };
    std::thread::scope(|scope| {
        let stop = || generation.store(u64::MAX, Ordering::Release);
        for t in 1..threads {
            let (generation, finished, timed) = (&generation, &finished, &timed);
            let spawned = std::thread::Builder::new().spawn_scoped(scope, move || {
                let mut seen = 0;
                loop {
                    let now = wait_for(|| Some(generation.load(Ordering::Acquire)).filter(|g| *g != seen));
                    if now == u64::MAX {
                        return;
                    }
                    seen = now;
                    timed(t);
                    finished.fetch_add(1, Ordering::AcqRel);
                }
            });
            if let Err(e) = spawned {
                stop();
                return Err(CpuError::Spawn { started: t, threads, why: e.to_string() });
            }
        }
        let mut run = || {
            finished.store(0, Ordering::Release);
            generation.fetch_add(1, Ordering::AcqRel);
            timed(0);
            wait_for(|| (finished.load(Ordering::Acquire) >= threads - 1).then_some(()));
            let first = spans.iter().map(|s| s[0].load(Ordering::Relaxed)).min().unwrap_or(0);
            let last = spans.iter().map(|s| s[1].load(Ordering::Relaxed)).max().unwrap_or(0);
            Ok(last.saturating_sub(first) as f64 * 1e-9)
        };
        let outcome = loop {
            match control(&mut run) {
                Ok(true) => break Ok(()),
                Ok(false) => {}
                Err(e) => break Err(e),
            }
        };
        stop();
        outcome
    })
}

/// Spins until `ready()` has an answer, yielding the core after a while so a waiting thread
/// cannot starve a working one on a machine with fewer cores than threads.
fn wait_for<T>(ready: impl Fn() -> Option<T>) -> T {
    let mut spins = 0u32;
    loop {
        if let Some(answer) = ready() {
            return answer;
        }
        if spins < 10_000 {
            spins += 1;
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}

fn nanos(duration: std::time::Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

/// Eight independent lanes, so the loads are not serialised on one accumulator.
fn sum(words: &[u64]) -> u64 {
    let mut lanes = [0u64; 8];
    let mut blocks = words.chunks_exact(8);
    for block in &mut blocks {
        for (lane, w) in lanes.iter_mut().zip(block) {
            *lane = lane.wrapping_add(*w);
        }
    }
    let tail: u64 = blocks.remainder().iter().fold(0, |a, w| a.wrapping_add(*w));
    lanes.iter().fold(tail, |a, l| a.wrapping_add(*l))
}

/// Every thread multiplies its own `n × n` matrices (cache-resident): FLOPs over the
/// slowest thread's time.
fn matmul_rate(options: &CpuOptions) -> Result<Rate, CpuError> {
    let n = options.matmul_n;
    let a: Vec<f32> = (0..n * n).map(|i| (i % 7) as f32 * 0.25).collect();
    let b: Vec<f32> = (0..n * n).map(|i| (i % 5) as f32 * 0.5).collect();
    let rates = runs(options, 2.0 * (n * n * n * options.threads) as f64, |_| {
        let mut c = vec![0f32; n * n];
        matmul(&a, &b, &mut c, n);
        black_box(c);
    })?;
    Ok(Rate::of_window(&rates, options.repetitions, options.stable_spread))
}

/// Rows and columns of `c` each step of [`matmul`] keeps in registers.
const TILE: (usize, usize) = (4, 8);

/// `c += a · b` for `n` a multiple of 8: a 4 × 8 tile of `c` stays in registers while `k`
/// runs, so each loaded row of `b` feeds 32 multiply-adds — the shape of a real GEMM
/// micro-kernel, in portable code the compiler vectorises.
fn matmul(a: &[f32], b: &[f32], c: &mut [f32], n: usize) {
    let (rows, cols) = TILE;
    for i in (0..n).step_by(rows) {
        for j in (0..n).step_by(cols) {
            let mut tile = [[0f32; TILE.1]; TILE.0];
            for k in 0..n {
                let b_row: &[f32; TILE.1] = b[k * n + j..][..cols].try_into().expect("n is a multiple of the tile");
                for (r, acc) in tile.iter_mut().enumerate() {
                    let x = a[(i + r) * n + k];
                    for (acc, &y) in acc.iter_mut().zip(b_row) {
                        *acc += x * y;
                    }
                }
            }
            for (r, acc) in tile.iter().enumerate() {
                for (c, &v) in c[(i + r) * n + j..][..cols].iter_mut().zip(acc) {
                    *c += v;
                }
            }
        }
    }
}

fn meminfo() -> Result<(u64, u64), CpuError> {
    let text =
        std::fs::read_to_string("/proc/meminfo").map_err(|e| CpuError::MemInfo(format!("/proc/meminfo: {e}")))?;
    let field = |name: &str| {
        text.lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map(|kib| kib.saturating_mul(1024))
    };
    match (field("MemTotal"), field("MemAvailable")) {
        (Some(total), Some(available)) => Ok((total, available.min(total))),
        _ => Err(CpuError::MemInfo("/proc/meminfo has no MemTotal or MemAvailable".into())),
    }
}

/// NUMA nodes under `/sys/devices/system/node` (1 when the kernel shows none).
fn numa_nodes() -> usize {
    let Ok(dir) = std::fs::read_dir("/sys/devices/system/node") else { return 1 };
    dir.filter_map(Result::ok)
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.strip_prefix("node").is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        })
        .count()
        .max(1)
}

fn cpu_name() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| {
            text.lines().find_map(|line| Some(line.strip_prefix("model name")?.split_once(':')?.1.trim().to_owned()))
        })
        .unwrap_or_else(|| "CPU".to_owned())
}

impl CpuProbe {
    /// The scenario node: the measured figures, memory with what is in use now as its
    /// reserve, and the threads measured with, which the llama.cpp export passes as `-t`.
    pub fn node(&self, name: &str) -> NodeSpec {
        let o = &self.options;
        NodeSpec {
            name: name.to_owned(),
            kind: Some(DeviceKind::Cpu),
            backend: Some(Backend::Cpu),
            memory: Bytes::new(self.memory_total as f64).ok(),
            reserve: Bytes::new(self.memory_total.saturating_sub(self.memory_available) as f64).ok(),
            bandwidth: Bandwidth::new(self.bandwidth.median).ok(),
            compute: Compute::new(self.compute.median).ok(),
            threads: u32::try_from(o.threads).ok(),
            probe: Some(ProbeProvenance {
                adapter: self.cpu.clone(),
                backend: "cpu".to_owned(),
                device_type: "Cpu".to_owned(),
                memory_source: "/proc/meminfo (MemTotal; reserve: MemTotal − MemAvailable)".to_owned(),
                bandwidth_spread: self.bandwidth.spread,
                compute_spread: self.compute.spread,
                method: format!(
                    "stageplan probe --cpu: {} threads read {} MiB, f32 matmul {n}×{n}×{n} per thread, median of {} steady runs ({} made)",
                    o.threads,
                    o.read_bytes >> 20,
                    o.repetitions,
                    self.bandwidth.runs,
                    n = o.matmul_n
                ),
                engine: None,
            }),
            ..NodeSpec::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sum_and_matmul_compute_what_they_time() {
        let words: Vec<u64> = (0..1001).collect();
        assert_eq!(sum(&words), 1000 * 1001 / 2);
        // Against the textbook triple loop.
        let n = 16;
        let a: Vec<f32> = (0..n * n).map(|i| (i % 7) as f32 - 3.0).collect();
        let b: Vec<f32> = (0..n * n).map(|i| (i % 5) as f32 * 0.5).collect();
        let mut c = vec![1.0; n * n];
        matmul(&a, &b, &mut c, n);
        for i in 0..n {
            for j in 0..n {
                let want: f32 = 1.0 + (0..n).map(|k| a[i * n + k] * b[k * n + j]).sum::<f32>();
                assert_eq!(c[i * n + j], want, "c[{i}][{j}]");
            }
        }
    }

    #[test]
    fn the_figure_is_the_latest_steady_window_or_says_it_is_not_steady() {
        // A busy start, then ten runs within 10%: the median of those.
        let mut rates = vec![5.0, 20.0, 3.0];
        rates.extend([10.0, 10.2, 9.9, 10.1, 10.0, 10.3, 9.8, 10.0, 10.1, 9.95]);
        let rate = Rate::of_window(&rates, 10, 0.10);
        assert!(rate.stable && (rate.median - 10.0).abs() < 0.11, "{rate:?}");
        assert_eq!(rate.runs, 13);
        // Never steady: the window with the least spread, marked as such.
        let noisy: Vec<f64> = (0..20).map(|i| if i % 2 == 0 { 10.0 } else { 14.0 }).collect();
        let rate = Rate::of_window(&noisy, 10, 0.10);
        assert!(!rate.stable && (rate.spread - 4.0 / 14.0).abs() < 1e-9, "{rate:?}");
    }

    #[test]
    fn every_thread_runs_once_per_run_until_told_to_stop() {
        let counts: Vec<AtomicUsize> = (0..3).map(|_| AtomicUsize::new(0)).collect();
        let mut made = 0;
        team(
            3,
            &|t: usize| {
                counts[t].fetch_add(1, Ordering::Relaxed);
            },
            |run| {
                let seconds = run()?;
                assert!(seconds.is_finite() && seconds >= 0.0);
                made += 1;
                Ok(made == 5)
            },
        )
        .unwrap();
        assert!(counts.iter().all(|c| c.load(Ordering::Relaxed) == 5));
    }

    #[test]
    fn the_node_carries_the_measured_figures_and_threads() {
        let probe = probe(
            &CpuOptions { read_bytes: 8 << 20, matmul_n: 32, repetitions: 3, ..CpuOptions::quick(2) },
            &mut |_| {},
        )
        .expect("a Linux machine probes");
        assert!(probe.bandwidth.median > 1e8 && probe.compute.median > 1e6, "{probe:?}");
        let node = probe.node("box");
        let json = serde_json::to_string(&node).unwrap();
        let scenario = format!(r#"{{"model": {{"preset": "llama-3.2-1b"}}, "nodes": [{json}]}}"#);
        let problem = stageplan::check(scenario.as_str(), stageplan::check::no_model_files)
            .expect("the node is a valid scenario node")
            .problem;
        assert_eq!(problem.nodes[0].threads, Some(2));
        assert_eq!(problem.nodes[0].kind, Some(DeviceKind::Cpu));
        assert_eq!(problem.nodes[0].backend, Backend::Cpu);
    }
}

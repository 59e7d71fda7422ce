//! This machine's CPU measured as llama.cpp's CPU backend uses it —
//! the memory read bandwidth and matmul rate that `threads` threads reach together — and
//! printed as a ready scenario node.
//!
//! Decode on a CPU streams every weight once per token, so the figure that matters is how
//! fast the threads llama.cpp runs with (`-t`) read a buffer far larger than the caches;
//! the matmul rate bounds prefill. Both are medians of repeated runs, with their spread.

use std::hint::black_box;
use std::sync::atomic::{AtomicU8, Ordering};
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
    /// Bytes read per run: well past the last-level cache.
    pub read_bytes: usize,
    /// Each thread multiplies two `n × n` f32 matrices per run.
    pub matmul_n: usize,
    pub repetitions: usize,
}

impl CpuOptions {
    /// Most CPUs: 512 MiB read, 256² matmuls, 7 runs (a few seconds).
    pub fn new(threads: usize) -> CpuOptions {
        CpuOptions { threads, read_bytes: 512 << 20, matmul_n: 256, repetitions: 7 }
    }

    /// Under a second: 64 MiB read, 128² matmuls, 5 runs.
    pub fn quick(threads: usize) -> CpuOptions {
        CpuOptions { threads, read_bytes: 64 << 20, matmul_n: 128, repetitions: 5 }
    }
}

/// A rate measured over repeated runs.
#[derive(Clone, Debug, Serialize)]
pub struct Rate {
    /// Bytes/s or FLOP/s.
    pub median: f64,
    /// `(max − min) / median`.
    pub spread: f64,
}

impl Rate {
    fn of(work: f64, seconds: &[f64]) -> Rate {
        let mut rates: Vec<f64> = seconds.iter().map(|s| work / s.max(1e-9)).collect();
        rates.sort_by(f64::total_cmp);
        let median = rates[rates.len() / 2];
        Rate { median, spread: (rates[rates.len() - 1] - rates[0]) / median }
    }
}

/// What the CPU probe measured.
#[derive(Clone, Debug, Serialize)]
pub struct CpuProbe {
    /// `/proc/cpuinfo`'s model name.
    pub cpu: String,
    pub logical_cores: usize,
    pub bandwidth: Rate,
    /// f32 multiply-adds, two FLOPs each, with a portable kernel: a lower bound on what
    /// llama.cpp's SIMD kernels reach.
    pub compute: Rate,
    /// `MemTotal` and `MemAvailable` from `/proc/meminfo`.
    pub memory_total: u64,
    pub memory_available: u64,
    pub options: CpuOptions,
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
        bandwidth,
        compute,
        memory_total,
        memory_available,
        options: options.clone(),
    })
}

/// Every thread sums its share of one large buffer: bytes read over the threads' time.
fn read_bandwidth(options: &CpuOptions) -> Result<Rate, CpuError> {
    let words = options.read_bytes / 8;
    // Written once so every page is resident before the timed runs.
    let buffer: Vec<u64> = (0..words as u64).collect();
    let share = words.div_ceil(options.threads);
    let seconds = (0..=options.repetitions)
        .map(|_| {
            timed_together(options.threads, |t| {
                black_box(sum(buffer.get(t * share..((t + 1) * share).min(words)).unwrap_or_default()));
            })
        })
        .collect::<Result<Vec<f64>, CpuError>>()?;
    // The first run warms the threads and the TLB; it is not counted.
    Ok(Rate::of((words * 8) as f64, &seconds[1..]))
}

/// Runs `work(t)` on `threads` threads released together; seconds from the first start to
/// the last finish, as each thread saw them (the spawning thread may be descheduled). The
/// threads wait on a flag, not a barrier, so a thread the OS refuses cannot strand the
/// others: they are told to stop, and the error says how many started.
fn timed_together(threads: usize, work: impl Fn(usize) + Sync) -> Result<f64, CpuError> {
    const WAIT: u8 = 0;
    const GO: u8 = 1;
    const STOP: u8 = 2;
    let state = AtomicU8::new(WAIT);
    std::thread::scope(|scope| {
        let mut running = Vec::with_capacity(threads);
        for t in 0..threads {
            let (state, work) = (&state, &work);
            let spawned = std::thread::Builder::new().spawn_scoped(scope, move || {
                while state.load(Ordering::Acquire) == WAIT {
                    std::hint::spin_loop();
                    std::thread::yield_now();
                }
                (state.load(Ordering::Acquire) == GO).then(|| {
                    let start = Instant::now();
                    work(t);
                    (start, Instant::now())
                })
            });
            match spawned {
                Ok(handle) => running.push(handle),
                Err(e) => {
                    state.store(STOP, Ordering::Release);
                    return Err(CpuError::Spawn { started: t, threads, why: e.to_string() });
                }
            }
        }
        state.store(GO, Ordering::Release);
        let spans: Vec<(Instant, Instant)> = running.into_iter().filter_map(|h| h.join().ok().flatten()).collect();
        let first = spans.iter().map(|s| s.0).min();
        let last = spans.iter().map(|s| s.1).max();
        Ok(match (first, last) {
            (Some(first), Some(last)) => last.duration_since(first).as_secs_f64(),
            _ => f64::INFINITY,
        })
    })
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

/// Every thread multiplies its own `n × n` matrices (cache-resident): FLOPs over wall time.
fn matmul_rate(options: &CpuOptions) -> Result<Rate, CpuError> {
    let n = options.matmul_n;
    let a: Vec<f32> = (0..n * n).map(|i| (i % 7) as f32 * 0.25).collect();
    let b: Vec<f32> = (0..n * n).map(|i| (i % 5) as f32 * 0.5).collect();
    let seconds = (0..=options.repetitions)
        .map(|_| {
            timed_together(options.threads, |_| {
                let mut c = vec![0f32; n * n];
                matmul(&a, &b, &mut c, n);
                black_box(c);
            })
        })
        .collect::<Result<Vec<f64>, CpuError>>()?;
    Ok(Rate::of(2.0 * (n * n * n * options.threads) as f64, &seconds[1..]))
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
                    "stageplan probe --cpu: {} threads read {} MiB, f32 matmul {n}×{n}×{n} per thread, median of {} runs",
                    o.threads,
                    o.read_bytes >> 20,
                    o.repetitions,
                    n = o.matmul_n
                ),
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
    fn the_node_carries_the_measured_figures_and_threads() {
        let probe = probe(&CpuOptions { read_bytes: 8 << 20, matmul_n: 32, repetitions: 3, threads: 2 }, &mut |_| {})
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

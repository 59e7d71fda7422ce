//! What stageplan accepts, stated once.
//!
//! Every number here bounds something read from input — a scenario, a plan, a model
//! file's header — and is checked before anything is allocated from it or computed with
//! it. Each is far above any real use and small enough that the arithmetic on it cannot
//! overflow: with [`MAX_BYTES`] per quantity, sums of a handful of them stay below `u64::MAX`
//! (`1.8 × 10^19`) and are exact in `f64` to a byte per kilobyte. The README's limits table
//! quotes these values; a test keeps the two in step.

/// Devices in a scenario (machines, or each GPU of a machine with several), after `count` is expanded. With [`MAX_LAYERS`] layers the
/// planner's heuristic takes about a second for this many (`BENCHMARKS.md`); a real
/// pipeline has a few dozen stages.
pub const MAX_NODES: usize = 1024;

/// GPUs in one machine (`nodes[].gpus`): llama.cpp's `GGML_CUDA_MAX_DEVICES` and
/// `llama_max_devices()` are 16.
pub const MAX_GPUS_PER_MACHINE: usize = 16;

/// Machines × layers in one scenario: the size of the planner's tables for one node order.
/// At this size the slowest search (the latency objective with per-pair links, over many
/// node orders) still takes seconds; 1,024 machines of a 1,024-layer model, or 104
/// machines of a 10,000-layer one.
pub const MAX_NODE_LAYERS: usize = 1 << 20;

/// Characters in a node's name.
pub const MAX_NAME_CHARS: usize = 256;

/// Transformer blocks in a model: no real model has more than a few hundred.
pub const MAX_LAYERS: usize = 10_000;

/// Memory, reserve and workspace in bytes: an exabyte.
pub const MAX_BYTES: f64 = 1e18;

/// Tokens of context per sequence (2^26).
pub const MAX_CONTEXT: u64 = 1 << 26;

/// Sequences decoded together (2^20).
pub const MAX_BATCH: u64 = 1 << 20;

/// Prompt tokens per prefill step (2^20).
pub const MAX_PREFILL_CHUNK: u64 = 1 << 20;

/// Per-pair link overrides in a scenario.
pub const MAX_LINK_PAIRS: usize = 65_536;

/// Bytes of a GGUF header (metadata and tensor infos, before the data): a 256k-token
/// vocabulary with its merges is a few tens of MiB.
pub const MAX_GGUF_HEADER_BYTES: u64 = 256 << 20;

/// Parts of a split GGUF set: llama.cpp reads `split.count` and `split.no` as u16, so a
/// larger set is refused from its first header, before any part is looked for (names give
/// five digits, up to 99,999, as `gguf-split` writes them).
pub const MAX_SPLIT_PARTS: u32 = u16::MAX as u32;

/// How much faster than its probe's bandwidth llama.cpp may have read a node's weights
/// (`probe.engine.read`): a streaming kernel outruns a read loop by a fifth at most on the
/// machines measured (BENCHMARKS.md); twice is past any cache effect a file of real size
/// leaves, a probe gone wrong.
pub const READ_FACTORS: std::ops::RangeInclusive<f64> = 1.0..=2.0;

/// Weights per second a probed node's decode rate (`probe.engine`) may be: past both ends
/// no machine runs, and a rate near 0 would make a step's time infinite.
pub const MEASURED_RATES: std::ops::RangeInclusive<f64> = 1e3..=1e15;

/// Requests a second a load may arrive at (`serving.rate`, `--rate`): from one in a million
/// seconds (eleven days, below which no two requests meet) to a million a second, past what
/// any one server answers.
pub const REQUEST_RATES: std::ops::RangeInclusive<f64> = 1e-6..=1e6;

/// CPU threads a node may name (the largest servers have a few hundred hardware threads).
pub const MAX_THREADS: u32 = 4096;

/// The least bandwidth (bytes/s) or compute (FLOP/s) a machine or link may have: under one
/// per second is a unit typed wrong, and its reciprocal times a model's bytes overflows.
pub const MIN_RATE: f64 = 1.0;

/// The most latency (seconds) a link may have: a satellite hop is under one; a minute is a
/// unit typed wrong (`ms` as `s`, or a number of milliseconds without one).
pub const MAX_LATENCY_S: f64 = 60.0;

/// Bytes of a text file read whole: a scenario, plan or deployment, a `config.json`, a
/// `model.safetensors.index.json`.
pub const MAX_TEXT_BYTES: u64 = 64 << 20;

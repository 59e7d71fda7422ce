
// ---- what the API returns: generated from the Rust types by crates/stageplan-js/tests/typescript.rs ----

export type Plan = { policy: Policy, objective: Objective, 
/**
 * The model planned, so a plan file stands on its own (exports read it).
 */
model: PlannedModel, 
/**
 * The engine whose memory layout the stages hold; exports print its commands by
 * default. Plans from before engines were modelled read as `llama.cpp`.
 */
engine: Engine, 
/**
 * The workload planned for: context, sequences, KV-cache format.
 */
workload: PlannedWorkload, 
/**
 * Every stage fits its node's memory (and there is at least one stage).
 */
feasible: boolean, 
/**
 * Stages in pipeline order. Empty when no plan fits.
 */
stages: Array<Stage>, 
/**
 * Tokens per second the workload's `batch` sequences reach: `batch ÷ cycle`, where each
 * sequence gets one token per cycle of `micro_batches` groups through the pipeline
 * (see [`crate::cost`]). With one sequence, one stream's speed. 0 when no plan fits.
 */
tokens_per_s: number, 
/**
 * Groups the sequences go through the pipeline in: the count that serves them fastest
 * (throughput objective), or 1 (latency). Stage times are for steps of
 * `batch ÷ micro_batches` sequences.
 */
micro_batches: number, 
/**
 * One step's trip through every stage and back: the sum of stage times. With one
 * micro-batch, each sequence's time per token. `null` when no plan fits.
 */
latency_s: number | null, 
/**
 * Tokens per second of sequences that go through the pipeline one step at a time
 * (no overlap): `batch ÷ latency`. What one interactive stream sees, every step reading
 * the whole context's cache: the speed at the end of a full context.
 */
stream_tokens_per_s: number, 
/**
 * The same speeds over a response `workload.depth` tokens into the cache, as
 * llama-bench's `-d` measures them (what published figures give): every step reading
 * `depth + response ÷ 2` tokens. `null` when no plan fits, or in plans from before it was
 * given.
 */
at_depth?: AtDepth | null, 
/**
 * Prompt tokens per second during prefill, pipelined by chunks.
 */
prefill_tokens_per_s: number, 
/**
 * Seconds from a `workload.prompt`-token prompt to its first generated token, for one
 * sequence: the first chunk's trip through every stage, then a chunk per slowest
 * stage's time. `null` when no plan fits.
 */
time_to_first_token_s: number | null, 
/**
 * The same split with the pipeline kept full: more sequences in flight than the workload
 * has. `null` when no plan fits.
 */
pipeline_full: PipelineFull | null, 
/**
 * How sure the speed figures are: the calibration's typical error for the backends the
 * stages run. `null` when no plan fits or a stage plans with spec-sheet peaks.
 */
accuracy?: Accuracy | null, 
/**
 * Index of the slowest stage.
 */
bottleneck: number | null, 
/**
 * The longest context every stage still fits at this split; `null` when it does not fit
 * even the shortest.
 */
max_context: number | null, 
/**
 * Nodes the plan does not use, and why.
 */
left_out: Array<LeftOut>, 
/**
 * How the plan was found and how far from the best it can be.
 */
search: Search, 
/**
 * The other policies on the same cost model, for comparison.
 */
baselines?: Array<Baseline>, 
/**
 * Notes, warnings and errors, each with a fix where there is one.
 */
diagnostics: Array<Diagnostic>, 
/**
 * What rides along with the model (a draft model, a vision projector) and the machine
 * each is placed on; their bytes are in that stage's `memory.riders`.
 */
riders?: Array<PlannedRider>, };

export type PlannedModel = { name: string, weights: string, 
/**
 * Transformer blocks: stages' `layers` ranges cover `[0, layers)`.
 */
layers: number, 
/**
 * Routed experts per MoE layer; `null` for a dense model.
 */
experts: number | null, 
/**
 * Multi-token-prediction layers after the blocks, which llama.cpp does not load but
 * counts in `-ngl` and places on the last device (GLM-4.5, Qwen3-Next).
 */
nextn_layers?: number, 
/**
 * The model file the scenario named, which exports load unless told otherwise.
 */
file?: string | null, };

export type PlannedWorkload = { 
/**
 * Tokens of context per sequence.
 */
context: number, 
/**
 * Sequences decoded together.
 */
batch: number, 
/**
 * KV-cache format (`f16`, `q8_0`, …): K's, and V's unless `kv_v` gives it.
 */
kv: string, 
/**
 * The V cache's format where it differs from K's (llama.cpp's `-ctv`).
 */
kv_v?: string | null, 
/**
 * Prompt tokens per prefill step (llama.cpp's `--ubatch-size`); 512 when absent.
 */
prefill_chunk: number, 
/**
 * Flash attention on (llama.cpp's `--flash-attn`); on when absent.
 */
flash_attention: boolean, 
/**
 * The prompt length `time_to_first_token_s` is for; 0 in plans from before it was given.
 */
prompt: number, 
/**
 * The cache before the response `at_depth` is for (llama-bench's `-d`), and the
 * response's tokens (`-n`); 0 in plans from before they were given.
 */
depth: number, response: number, };

export type Stage = { node: string, 
/**
 * The machine's kind (`gpu`, `unified`, `cpu`) when the scenario or its preset says;
 * exports name devices and request GPUs by it.
 */
kind?: DeviceKind | null, 
/**
 * CPU threads the scenario gives the node; exports pass them to the engine.
 */
threads?: number | null, 
/**
 * `[start, end)`.
 */
layers: [number, number], 
/**
 * Holds the token embedding (first stage).
 */
embedding: boolean, 
/**
 * Holds the final norm and LM head (last stage).
 */
head: boolean, memory: MemoryBreakdown, time: TimeBreakdown, 
/**
 * Time of one decode step in this stage (`batch ÷ micro_batches` sequences), hop
 * included, in seconds.
 */
time_s: number, 
/**
 * On a machine with system RAM (`host` in the scenario), what the stage keeps there;
 * `memory` is then the GPU's. Absent: everything on the device.
 */
offload?: StageOffload | null, 
/**
 * On a machine with several GPUs (`nodes[].gpus`), which: the machine's stages run in
 * one server there. Absent: the node is a machine of its own.
 */
gpu_of?: MachineGpu | null, 
/**
 * A tensor-parallel stage: the machine's GPUs (engine numbers, `gpu_of`'s first) that
 * split every matrix of its layers among them; `memory` is then each GPU's share.
 * Empty: the stage is on one device.
 */
tensor_parallel?: Array<number>, };

export type StageOffload = { 
/**
 * Layers whole with their KV cache in host RAM: `host_range`.
 */
host_layers: number, 
/**
 * Layers whose FFN is in host RAM (`ffn_layers`): their routed experts where the
 * layer has them, else its dense FFN matrices; their attention stays on the GPU.
 */
host_ffn: number, 
/**
 * `[start, end)` of the layers whole in host RAM: the model's first layers, on a first
 * stage only (llama.cpp's `-ngl` keeps the last layers on the GPU).
 */
host_range: [number, number], 
/**
 * `[start, end)` of the layers whose FFN is in host RAM: right after `host_range`
 * (`--n-cpu-moe`'s order) or, on a stage that hands over to another machine, its last.
 */
ffn_layers: [number, number], 
/**
 * Every layer and the output head in host RAM (`-ngl 0`).
 */
head_on_host: boolean, 
/**
 * The CPU threads that run what is in host RAM (`--threads`).
 */
threads: number, 
/**
 * Whether those FFNs are routed experts (an MoE model).
 */
experts: boolean, 
/**
 * Host RAM, by part (`budget` is the RAM installed).
 */
memory: MemoryBreakdown, };

export type MachineGpu = { machine: string, index: number, };

export type MemoryBreakdown = { weights: number, kv: number, embed_head: number, workspace: number, reserve: number, 
/**
 * A draft model and a vision projector placed on this machine ([`Plan::riders`]).
 */
riders?: number, total: number, 
/**
 * The node's memory.
 */
budget: number, 
/**
 * `budget − total`; negative when the stage does not fit.
 */
headroom: number, };

export type TimeBreakdown = { 
/**
 * Bytes read ÷ bandwidth.
 */
memory_s: number, 
/**
 * FLOPs ÷ compute.
 */
compute_s: number, 
/**
 * The backend's fixed cost per layer, for this stage's layers.
 */
overhead_s: number, 
/**
 * A step's further sequences' products, beyond the roofline of its first.
 */
batch_s?: number, 
/**
 * Sending activations to the next stage (or tokens back to the first).
 */
send_s: number, 
/**
 * Which roofline term decides the stage.
 */
bound: Bound, 
/**
 * Prefill time per prompt token.
 */
prefill_s: number, 
/**
 * On a machine with a host tier, the CPU's part of the step (roofline and per-layer
 * cost); `memory_s`, `compute_s` and `overhead_s` are then the GPU's.
 */
host_s?: number, 
/**
 * Changes between GPU and CPU along the step: syncs and hidden-state copies.
 */
split_s?: number, 
/**
 * A tensor-parallel stage's all-reduces of the hidden state, two a layer.
 */
all_reduce_s?: number, };

export type Bound = "memory" | "compute";

export type LeftOut = { node: string, 
/**
 * Why, in a sentence.
 */
reason: string, 
/**
 * The best objective value a plan that uses this node reaches (tokens/s for throughput,
 * seconds per token for latency); `null` when no such plan fits.
 */
with_node: number | null, };

export type Search = { 
/**
 * `exact`, `heuristic` or `given` (baselines and manual plans).
 */
method: string, 
/**
 * What was searched, in words.
 */
detail: string, 
/**
 * A bound no plan can beat, in the objective's unit (tokens/s or seconds per token).
 */
bound: number | null, 
/**
 * How far the plan can be from the best: `|plan − bound| ÷ bound`; 0 when exact.
 */
gap: number | null, };

export type Baseline = { policy: Policy, feasible: boolean, tokens_per_s: number, latency_s: number | null, 
/**
 * `[node, start, end]` per stage.
 */
stages: Array<BaselineStage>, 
/**
 * Why it does not fit, when it does not.
 */
problem?: string | null, };

export type BaselineStage = { node: string, layers: [number, number], };

export type Diagnostic = { level: Level, message: string, fix?: string | null, 
/**
 * The fix as a change a surface can apply (the page's buttons); the same change `fix`
 * words.
 */
change?: Change | null, };

export type Level = "info" | "warning" | "error";

export type Change = { "weights": string } | { "context": number } | { "kv": string } | { "copy_node": string };

export type Accuracy = { 
/**
 * Median |predicted ÷ measured − 1| of published llama.cpp decode figures on this class,
 * each predicted with its source left out of the fit; for a measured node, of the
 * probe's check against llama-bench, or half the probe's spread when wider.
 */
typical_error: number, 
/**
 * The class it is for: the stages' node with the largest typical error
 * (`llama.cpp CUDA`, `measured, llama.cpp CPU`, …).
 */
class: string, 
/**
 * `tokens_per_s` within the typical error: `[÷ (1 + e), ÷ (1 − e)]`.
 */
tokens_per_s_range: [number, number], };

export type PipelineFull = { 
/**
 * Sequences in flight it needs: `batch` per stage.
 */
sequences: number, 
/**
 * `batch ÷ slowest stage`, with steps of `batch` sequences.
 */
tokens_per_s: number, 
/**
 * Every stage also holds the KV cache of `sequences` sequences.
 */
kv_fits: boolean, };

export type AtDepth = { 
/**
 * Tokens of cache every decode step reads: `depth + response ÷ 2`.
 */
tokens: number, 
/**
 * As [`Plan::tokens_per_s`] and [`Plan::stream_tokens_per_s`], at that depth.
 */
tokens_per_s: number, stream_tokens_per_s: number, };

export type PlannedRider = { kind: RiderKind, 
/**
 * The draft model's name, or the projector's file name.
 */
name: string, 
/**
 * Its file, for exports to load.
 */
file?: string | null, 
/**
 * The machine it is on: one of the stages' nodes.
 */
node: string, 
/**
 * A draft's blocks (all on its machine, with its output layer).
 */
layers?: number, 
/**
 * A draft's weight format.
 */
weights?: string, 
/**
 * A draft's KV-cache format.
 */
kv?: string, 
/**
 * Its bytes on that machine, by part (`reserve` 0; `budget` the machine's memory).
 */
memory: MemoryBreakdown, };

export type RiderKind = "draft" | "mmproj";

export type Policy = "optimal" | "memory-proportional" | "even" | "greedy" | "manual" | "layer-offload" | "llama-fit";

export type Objective = "throughput" | "latency";

export type Engine = "llama.cpp" | "vllm" | "generic";

export type DeviceKind = "gpu" | "unified" | "cpu";

export type Backend = "cuda" | "metal" | "rocm" | "vulkan" | "cpu" | "peak";

export type TensorType = "f32" | "f16" | "q4_0" | "q4_1" | "q5_0" | "q5_1" | "q8_0" | "q8_1" | "q2_k" | "q3_k" | "q4_k" | "q5_k" | "q6_k" | "q8_k" | "iq2_xxs" | "iq2_xs" | "iq3_xxs" | "iq1_s" | "iq4_nl" | "iq3_s" | "iq2_s" | "iq4_xs" | "i8" | "i16" | "i32" | "i64" | "f64" | "iq1_m" | "bf16" | "tq1_0" | "tq2_0" | "mxfp4" | "nvfp4" | "q1_0" | "f8_e4m3" | "f8_e5m2" | "u8" | "f8_e8m0" | "bool" | "u16" | "u32" | "u64" | "c64" | "f4" | "f6_e2m3" | "f6_e3m2";

export type PlanView = { feasible: boolean, 
/**
 * The model as planned: `llama-3.1-70b · q4_k_m`.
 */
model: string, 
/**
 * One row per stage, beside its band and bar.
 */
rows: Array<StageRow>, bands: Array<Band>, bars: Array<MemoryBar>, 
/**
 * Per stage, its machine's system RAM when it has one (beside `bars`, the GPU's).
 */
ram_bars: Array<MemoryBar | null>, 
/**
 * The core's verdict: fits, one user's speed, time to first token.
 */
headline: string, 
/**
 * The verdict's further lines: throughput with its concurrency, prefill, context, memory.
 */
details: Array<string>, baselines: Array<BaselineRow>, 
/**
 * The fastest baseline that fits: the best split other tools make here.
 */
best_other: BaselineRow | null, 
/**
 * This plan on the baselines' axis (tok/s, or time per token for latency).
 */
ours_figure: string, ours_pct: number, left_out: Array<string>, 
/**
 * Each stage's machine figures (bandwidth · compute); filled by the page's planning.
 */
figures: Array<string>, notes: Array<Note>, search: string, };

export type UsersView = { 
/**
 * In a `width × height` box; `None` when not even one user's slot fits.
 */
chart: UsersChart | null, width: number, height: number, 
/**
 * How many users meet [`USERS_TARGET`].
 */
users: number, 
/**
 * That count and what stops one more, as a sentence.
 */
found: string, 
/**
 * The chart for assistive technology, and its legend's two lines.
 */
label: string, legend: [string, string], };

export type UsersChart = { 
/**
 * SVG `points` of the p95 time to first token and per token, where the users' slots fit.
 */
ttft: string, tpot: string, ttft_top_s: number, tpot_top_s: number, 
/**
 * The 2 s target's height on the first token's scale, when within the chart.
 */
target_y: number | null, ticks: Array<Tick>, 
/**
 * Where the slots stop fitting.
 */
limit: Tick | null, };

export type Tick = { x: number, label: string, };

export type StageRow = { node: string, 
/**
 * `0–37`: the stage's `[start, end)`.
 */
layers: string, 
/**
 * Time per decode step, `29.1 ms`.
 */
time: string, 
/**
 * `memory-bound` or `compute-bound`.
 */
bound: string, 
/**
 * What the machine keeps in its system RAM (`experts of layers 0–20`), if anything.
 */
ram: string | null, };

export type Band = { node: string, label: string, left_pct: number, width_pct: number, hue: number, bottleneck: boolean, };

export type MemoryBar = { node: string, 
/**
 * Weights, KV, embed/head, workspace and reserve, in that order, then a draft model's
 * and a vision projector's bytes where the machine holds them.
 */
segments: Array<Segment>, used: string, budget: string, headroom: string, over: boolean, };

export type Segment = { part: string, 
/**
 * Percent of the bar.
 */
pct: number, bytes: string, };

export type BaselineRow = { policy: string, figure: string, 
/**
 * Bar length, percent of the best of all rows (ours included).
 */
pct: number, feasible: boolean, };

export type Note = { level: Level, message: string, fix: string | null, 
/**
 * The button's words and the change it applies.
 */
action: [string, Change] | null, };

export type ModelSummary = { name: string, weights: string, 
/**
 * Total parameters (a tied embedding counted once).
 */
params: number, 
/**
 * Bytes of every tensor.
 */
weight_bytes: number, embedding_bytes: number, 
/**
 * Final norm and LM head (a tied head counts its copy of the embedding).
 */
head_bytes: number, tied_embeddings: boolean, 
/**
 * KV-cache bytes per token of context, all layers: K in `kv_format`, V in
 * `kv_v_format` where given (sliding windows cap some layers' cache; this is the
 * per-token rate below the window).
 */
kv_bytes_per_token: number, kv_format: TensorType, 
/**
 * The V cache's format where it differs from K's (llama.cpp's `-ctv`).
 */
kv_v_format?: TensorType | null, hidden_size: number, max_context: number | null, layers: Array<LayerSummary>, 
/**
 * Bytes per storage type, largest first.
 */
type_mix: Array<TypeBytes>, };

export type LayerSummary = { index: number, bytes: number, params: number, 
/**
 * The attention window, when the layer slides.
 */
window?: number | null, };

export type TypeBytes = { type: TensorType, bytes: number, };

export type Catalog = { models: Array<ModelEntry>, devices: Array<DevicePreset>, 
/**
 * Host-RAM presets for a machine's `host.ram`.
 */
ram: Array<RamPreset>, 
/**
 * How a machine's GPUs reach each other, for its `gpu_link`.
 */
gpu_links: Array<GpuLinkPreset>, weights: Array<string>, kv: Array<string>, };

export type ModelEntry = { name: string, title: string, published_params: number, };

export type DevicePreset = { name: string, title: string, kind: DeviceKind, 
/**
 * Memory as the driver reports it, in bytes.
 */
memory: number, 
/**
 * Peak memory bandwidth, bytes/s.
 */
bandwidth: number, 
/**
 * Dense FP16 throughput, FLOP/s.
 */
compute: number, 
/**
 * Memory the runtime and the OS keep: CUDA/ROCm context and workspaces on a GPU, the
 * part of unified memory macOS does not give the GPU, the OS on a CPU box.
 *
 * A CUDA GPU's `GPU_RESERVE`: what a llama.cpp process holds beyond the buffers it
 * logs. Memory other programs hold on the card (a desktop, a browser) is not in it: a
 * scenario adds it to `reserve`, as llama.cpp's `--fit` starts from the free memory
 * `cudaMemGetInfo` reports (`common/fit.cpp`).
 */
reserve: number, 
/**
 * The llama.cpp backend it runs: NVIDIA CUDA, AMD ROCm, Apple Metal, CPU.
 */
backend: Backend, };

export type RamPreset = { name: string, title: string, 
/**
 * Peak read bandwidth, bytes/s.
 */
bandwidth: number, };

export type GpuLinkPreset = { name: string, title: string, 
/**
 * Bytes/s per direction, as a copy between two GPUs reaches it.
 */
bandwidth: number, 
/**
 * Seconds a hop costs besides the copy.
 */
latency: number, };

export type Replan = { plan: Plan, moves: Array<Move>, bytes_moved: number, 
/**
 * Bytes that switching to the best plan outright would move, for comparison.
 */
best_plan_bytes: number, 
/**
 * Moves to different nodes run in parallel: the longest node's total.
 */
move_time_s: number, 
/**
 * The current plan was kept (no moves).
 */
kept: boolean, reason: string, 
/**
 * The best plan's value (tokens/s for throughput, seconds per token for latency).
 */
best: number | null, };

export type Move = { 
/**
 * `[start, end)` of the layers; the embedding travels with layer 0 and the head with the
 * last layer when their stage changes hands.
 */
layers: [number, number], 
/**
 * The node that holds them now; `null` when it is gone (reload them from storage).
 */
from: string | null, to: string, bytes: number, 
/**
 * Time to send them over the link between the two nodes.
 */
time_s: number, };

export type Answer = { 
/**
 * For the users of `served` (a count given that does not fit: for those, infeasible).
 */
plan: Plan, served?: Served, targets?: TargetsHeld, 
/**
 * How many meet the targets on one server: without a count of users, or with one
 * that one server misses where its machines could be split.
 */
capacity?: Found, 
/**
 * The machines split into replicas, where that serves more users within the targets
 * than one server over all of them: without a count of users, each at what it
 * serves; with one that one server misses, the users spread over the split (each
 * replica's share in proportion to what it serves), where it serves them all.
 */
replicas?: Replicas, };

export type Served = { users: number, 
/**
 * The server they used and its settings.
 */
scheduler: Scheduler, 
/**
 * Prompt tokens of every request.
 */
prompt: number, 
/**
 * Tokens generated for every request.
 */
response: number, requests_per_user: number, 
/**
 * Requests a second arriving at random, where they came at a rate.
 */
rate?: number, 
/**
 * How far each request's lengths strayed from `prompt` and `response` (0.5: ±50%),
 * where they did.
 */
spread?: number, 
/**
 * Time to first token, sent to first token: 50th and 95th percentiles, seconds.
 */
ttft_s: [number, number], 
/**
 * Time per output token after the first: 50th and 95th percentiles, seconds.
 */
tpot_s: [number, number], 
/**
 * Tokens generated over the time from the first request to the last token.
 */
tokens_per_s: number, };

export type Scheduler = { "server": "llama-server", n_batch: number, n_ubatch: number, } | { "server": "vllm", max_num_seqs: number, max_num_batched_tokens: number, };

export type TargetsHeld = { percentile: Percentile, ttft_s: number | null, tpot_s: number | null, missed: Missed | null, };

export type Found = { users: number, limit: Limit, };

export type Replicas = { 
/**
 * Every replica's users together.
 */
users: number, replicas: Array<Replica>, };

export type Replica = { 
/**
 * The machines' names as the scenario gives them (a machine with several GPUs once).
 */
machines: Array<string>, users: number, plan: Plan, served: Served, };

export type Limit = { "reason": "target", users: number, missed: Missed, } | { "reason": "memory", users: number, } | { "reason": "most" };

export type Missed = { 
/**
 * `ttft` or `tpot`.
 */
target: string, seen_s: number, asked_s: number, };

export type Percentile = "p50" | "p95";

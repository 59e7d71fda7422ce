
// ---- shapes ----

/** A quantity: a number in base units (bytes, bytes/s, FLOP/s, seconds) or text like "24 GiB". */
export type Quantity = number | string;
export type Objective = "throughput" | "latency";
export type Policy = "optimal" | "memory-proportional" | "even" | "greedy" | "manual";

/** A scenario, as `stageplan plan` reads it. */
export interface Scenario {
  model: ModelSpec;
  workload?: WorkloadSpec;
  nodes: NodeSpec[];
  links?: LinksSpec;
  objective?: Objective;
  policy?: Policy;
  /** The engine that runs the plan: its memory layout, and the exports' default. */
  engine?: Engine;
  /** The stages of a `manual` plan, in pipeline order. */
  stages?: { node: string; layers: [number, number] }[];
}

export interface ModelSpec {
  /** A model preset (see `presets().models`). */
  preset?: string;
  /** An inline Hugging Face `config.json`. */
  config?: HfConfig;
  /** A model file's name; pass its header as `plan`'s `modelFile`. */
  file?: string;
  name?: string;
  /** Weight format, e.g. "q4_k_m" (see `presets().weights`); default "bf16". */
  weights?: string;
}

/** A Hugging Face `config.json`; the fields stageplan reads, and any others. */
export interface HfConfig {
  model_type?: string;
  hidden_size?: number;
  intermediate_size?: number;
  num_hidden_layers?: number;
  num_attention_heads?: number;
  num_key_value_heads?: number;
  head_dim?: number;
  vocab_size?: number;
  tie_word_embeddings?: boolean;
  max_position_embeddings?: number;
  sliding_window?: number | null;
  [key: string]: unknown;
}

export interface WorkloadSpec {
  context?: number;
  batch?: number;
  kv?: string;
  workspace?: Quantity | "auto";
  prefill_chunk?: number;
  /** llama.cpp's `--flash-attn on` (default true); a quantized KV cache needs it. */
  flash_attention?: boolean;
  /** The prompt length the time to first token is for (default 512, or the context if shorter). */
  prompt?: number;
}

/** `llama.cpp` (default): its compute, input-copy and host buffers; `vllm`: 90% of each GPU. */
export type Engine = 'llama.cpp' | 'vllm' | 'generic';

export interface NodeSpec {
  name: string;
  /** A device preset (see `presets().devices`); the fields below override its figures. */
  device?: string;
  /** The machine's kind; the preset's unless given. Exports pick device names by it. */
  kind?: DeviceKind;
  memory?: Quantity;
  bandwidth?: Quantity;
  compute?: Quantity;
  reserve?: Quantity;
  /** This many identical machines, named `name-1` … `name-N`. */
  count?: number;
  efficiency?: { bandwidth?: number; compute?: number };
  /** llama.cpp backend for the fitted speed terms; `peak` plans with the figures as given. */
  backend?: Backend;
  /** A CPU node's llama.cpp threads (`-t`). */
  threads?: number;
  probe?: Record<string, string | number>;
}

export interface LinksSpec {
  default?: { bandwidth: Quantity; latency: Quantity };
  pairs?: { between: [string, string]; bandwidth: Quantity; latency: Quantity }[];
}

/** A plan: `stageplan plan --format json`. */
export interface Plan {
  policy: Policy;
  objective: Objective;
  model: PlannedModel;
  /** The engine whose memory layout the stages hold. */
  engine: Engine;
  workload: PlannedWorkload;
  feasible: boolean;
  stages: Stage[];
  /** What the workload's `batch` sequences reach: `batch ÷ cycle`. */
  tokens_per_s: number;
  /** Groups the sequences go through the pipeline in; stage times are for one group. */
  micro_batches: number;
  latency_s: number | null;
  stream_tokens_per_s: number;
  prefill_tokens_per_s: number;
  /** Seconds from a `workload.prompt`-token prompt to its first token, one sequence; null when it does not fit. */
  time_to_first_token_s: number | null;
  /** The same split kept full: more sequences in flight than the workload has. */
  pipeline_full: PipelineFull | null;
  /** The calibration's typical error for the stages' backends; absent with spec-sheet peaks. */
  accuracy?: Accuracy;
  bottleneck: number | null;
  max_context: number | null;
  left_out: LeftOut[];
  search: Search;
  baselines?: Baseline[];
  diagnostics: Diagnostic[];
}

export interface Accuracy {
  typical_error: number;
  /** e.g. `llama.cpp CUDA` */
  class: string;
  tokens_per_s_range: [number, number];
}

export interface PipelineFull {
  /** Sequences in flight it needs: `batch` per stage. */
  sequences: number;
  tokens_per_s: number;
  /** Every stage also holds those sequences' KV cache. */
  kv_fits: boolean;
}

export interface PlannedModel {
  name: string;
  weights: string;
  /** Transformer blocks: the stages' `layers` ranges cover `[0, layers)`. */
  layers: number;
  /** Routed experts per MoE layer; `null` for a dense model. */
  experts: number | null;
  /** The model file the scenario named; exports load it unless told otherwise. */
  file?: string;
}

export interface PlannedWorkload {
  context: number;
  batch: number;
  kv: string;
  /** Prompt tokens per prefill step (`--ubatch-size`). */
  prefill_chunk: number;
  flash_attention: boolean;
  /** The prompt length `time_to_first_token_s` is for. */
  prompt: number;
}

export type DeviceKind = 'gpu' | 'unified' | 'cpu';

export interface Stage {
  node: string;
  /** Recorded when the scenario or the node's preset says. */
  kind?: DeviceKind;
  /** CPU threads the scenario gives the node; exports pass them on. */
  threads?: number;
  /** `[start, end)` */
  layers: [number, number];
  embedding: boolean;
  head: boolean;
  memory: MemoryBreakdown;
  time: TimeBreakdown;
  time_s: number;
}

export interface MemoryBreakdown {
  weights: number;
  kv: number;
  embed_head: number;
  workspace: number;
  reserve: number;
  total: number;
  budget: number;
  headroom: number;
}

export interface TimeBreakdown {
  memory_s: number;
  compute_s: number;
  /** The backend's fitted cost per layer, for this stage's layers. */
  overhead_s: number;
  send_s: number;
  bound: "memory" | "compute";
  prefill_s: number;
}

export interface LeftOut {
  node: string;
  reason: string;
  with_node: number | null;
}

export interface Search {
  method: string;
  detail: string;
  bound: number | null;
  gap: number | null;
}

export interface Baseline {
  policy: Policy;
  feasible: boolean;
  tokens_per_s: number;
  latency_s: number | null;
  stages: { node: string; layers: [number, number] }[];
  problem?: string;
}

export interface Diagnostic {
  level: "info" | "warning" | "error";
  message: string;
  fix?: string;
  /** The fix as a change to apply: `{weights}`, `{context}`, `{kv}` or `{copy_node}` (a node's name). */
  change?: { weights: string } | { context: number } | { kv: string } | { copy_node: string };
}

/** `stageplan model --format json`. */
export interface ModelSummary {
  name: string;
  weights: string;
  params: number;
  weight_bytes: number;
  embedding_bytes: number;
  head_bytes: number;
  tied_embeddings: boolean;
  kv_bytes_per_token: number;
  kv_format: string;
  hidden_size: number;
  max_context: number | null;
  layers: LayerSummary[];
  type_mix: { type: string; bytes: number }[];
}

export interface LayerSummary {
  index: number;
  bytes: number;
  params: number;
  window?: number;
}

export interface ModelOptions {
  weights?: string;
  kv?: string;
}

export interface HeaderOptions extends ModelOptions {
  /** The whole file's size in bytes, so offsets can be checked against it. */
  fileSize?: number;
  /** The `config.json` beside a `.safetensors` file (hyperparameters shapes cannot tell). */
  config?: HfConfig | string;
}

/** The first bytes of a model file (at least its header). */
export interface ModelFile {
  name: string;
  bytes: Uint8Array;
  size?: number;
}

/** What `importHeader` read: the model, or how many bytes to read first. */
export type Header = { needMore: number } | { model: ModelSummary };

/** `stageplan presets --format json`. */
export interface Catalog {
  models: { name: string; title: string; published_params: number }[];
  devices: DevicePreset[];
  weights: string[];
  kv: string[];
}

export interface DevicePreset {
  name: string;
  title: string;
  kind: DeviceKind;
  memory: number;
  bandwidth: number;
  compute: number;
  reserve: number;
  /** The llama.cpp backend it runs, which selects the fitted speed terms. */
  backend: Backend;
}

/** llama.cpp backends with fitted speed terms, and `peak` for the figures as given. */
export type Backend = "cuda" | "metal" | "rocm" | "vulkan" | "cpu" | "peak";

export interface ReplanOptions {
  /** Accept plans this much slower than the best when they move less (default 0.03). */
  tolerance?: number;
  /** Keep the running plan unless the best is this much faster (default 0.05). */
  hysteresis?: number;
}

/** `stageplan replan --format json`. */
export interface Replan {
  plan: Plan;
  moves: Move[];
  bytes_moved: number;
  best_plan_bytes: number;
  move_time_s: number;
  kept: boolean;
  reason: string;
  best: number | null;
}

export interface Move {
  layers: [number, number];
  /** `null` when the node that held them is gone: reload from storage. */
  from: string | null;
  to: string;
  bytes: number;
  time_s: number;
}

/** What `planView` returns: a plan laid out for drawing (percentages, texts, colours). */
export interface PlanView {
  feasible: boolean;
  /** `llama-3.1-70b · q4_k_m`. */
  model: string;
  rows: StageRow[];
  bands: Band[];
  bars: MemoryBar[];
  /** The verdict: fits, one user's speed, time to first token. */
  headline: string;
  details: string[];
  baselines: BaselineRow[];
  best_other: BaselineRow | null;
  ours_figure: string;
  ours_pct: number;
  left_out: string[];
  figures: string[];
  notes: { level: 'info' | 'warning' | 'error'; message: string; fix: string | null; action: [string, unknown] | null }[];
  search: string;
}

export interface StageRow {
  node: string;
  /** `0–37`: `[start, end)`. */
  layers: string;
  /** `29.1 ms` per decode step. */
  time: string;
  bound: 'memory-bound' | 'compute-bound';
}

export interface Band {
  node: string;
  label: string;
  left_pct: number;
  width_pct: number;
  hue: number;
  bottleneck: boolean;
}

export interface MemoryBar {
  node: string;
  segments: { part: 'weights' | 'kv' | 'embed/head' | 'workspace' | 'reserve'; pct: number; bytes: string }[];
  used: string;
  budget: string;
  headroom: string;
  over: boolean;
}

export interface BaselineRow {
  policy: Policy;
  figure: string;
  pct: number;
  feasible: boolean;
}

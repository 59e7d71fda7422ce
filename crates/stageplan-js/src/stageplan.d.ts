
// ---- what the API takes: hand-written, since inputs accept more than their Rust types say
// (quantities as text); what it returns is generated in outputs.d.ts ----

/** A quantity: a number in base units (bytes, bytes/s, FLOP/s, seconds) or text like "24 GiB". */
export type Quantity = number | string;

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
  /** Many users of one server (llama-server, or vLLM's where the scenario's `engine` is `vllm`): what `serve` answers when given no options. */
  serving?: ServeOptions;
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
  /** A speculative-decoding draft model (llama.cpp's `--model-draft`), placed whole on one machine. */
  draft?: DraftSpec;
  /** A vision projector (llama.cpp's `--mmproj`), placed on one machine. */
  mmproj?: ProjectorSpec;
}

/** A draft model: a preset or an inline config (a file is read by the CLI only). */
export interface DraftSpec {
  preset?: string;
  config?: HfConfig;
  name?: string;
  weights?: string;
  /** Its KV-cache format; default "f16", what llama.cpp gives a draft. */
  kv?: string;
}

/** A vision projector's sizes, e.g. `{weights: "851 MiB", compute: "1.1 GiB"}`. */
export interface ProjectorSpec {
  /** The mmproj file, for exports to load. */
  file?: string;
  weights?: string | number;
  compute?: string | number;
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
  /** The KV cache's format: K's and V's, or K's alone beside `kv_v` (default `f16`). */
  kv?: string;
  /** The V cache's format where it differs from K's (llama.cpp's `-ctv`). */
  kv_v?: string;
  workspace?: Quantity | "auto";
  prefill_chunk?: number;
  /** llama.cpp's `--flash-attn on` (default true); a quantized KV cache needs it. */
  flash_attention?: boolean;
  /** The prompt length the time to first token is for (default 512, or the context if shorter). */
  prompt?: number;
  /** Tokens in the cache before the response whose speed `at_depth` gives, as llama-bench's `-d` (default: the prompt's). */
  depth?: number;
  /** Tokens of that response, as llama-bench's `-n` (default 128). */
  response?: number;
}

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
  /** Where measured figures came from (`stageplan probe`, the page's "this device"): a node
   * with a probe plans with its figures as what the engine reaches, with the probe's error band. */
  probe?: ProbeProvenance;
  /** The machine's system RAM beside its GPU: the planner may keep layers or their FFN (MoE
   * experts first) there, as llama.cpp's `-ngl`, `--n-cpu-moe` and `-ot` do. */
  host?: HostSpec;
  /** The machine's GPUs when it has several, in the engine's order (`CUDA0`, `CUDA1`…):
   * planned as the nodes `name/gpu0`, `name/gpu1`… of one server; `host` (the machine's RAM,
   * counted once) serves `gpu0`. The machine's own device fields are then absent. */
  gpus?: GpuSpec[];
  /** How those GPUs reach each other: a preset (`pcie4-x8`, `pcie4-x16-p2p`, `nvlink3`; see
   * `presets().gpu_links`), default `pcie4-x16`; other figures: a `links.pairs` entry
   * between two of the GPUs. */
  gpu_link?: string;
}

/** One GPU (or, with `count`, several alike) of a machine with several. */
export interface GpuSpec {
  device?: string;
  memory?: Quantity;
  bandwidth?: Quantity;
  compute?: Quantity;
  reserve?: Quantity;
  efficiency?: { bandwidth?: number; compute?: number };
  backend?: Backend;
  count?: number;
}

/** How a node's figures were measured. */
/** A machine's system RAM and CPU. `ram` is a preset (`ddr5-6000-2ch`, see `presets().ram`)
 * giving `bandwidth`; `memory` is required. */
export interface HostSpec {
  ram?: string;
  memory?: Quantity;
  reserve?: Quantity;
  bandwidth?: Quantity;
  threads?: number;
  /** The GPU's link to the host, per direction (default PCIe 4.0 ×16, 31.5 GB/s). */
  link?: Quantity;
}

export interface ProbeProvenance {
  adapter?: string;
  backend?: string;
  device_type?: string;
  memory_source?: string;
  bandwidth_spread?: number;
  compute_spread?: number;
  method?: string;
  /** llama.cpp's decode products on a probed CPU, weights/s per class (`probe --cpu --engine`),
   *  how much faster than the probe it read the weights (`read`, 1 to 2), and its products
   *  over a prompt (`prefill`, FLOP/s). */
  engine?: { float?: number; q8?: number; legacy?: number; kquant?: number; read?: number; prefill?: number; method?: string };
}

export interface LinksSpec {
  default?: { bandwidth: Quantity; latency: Quantity };
  pairs?: { between: [string, string]; bandwidth: Quantity; latency: Quantity }[];
}

export interface ModelOptions {
  weights?: string;
  /** The K cache's format (and V's, unless `kvV` is given); default "f16". */
  kv?: string;
  /** The V cache's format where it differs from K's (llama.cpp's `-ctv`). */
  kvV?: string;
}

export interface HeaderOptions extends ModelOptions {
  /** The whole file's size in bytes, so offsets can be checked against it. */
  fileSize?: number;
  /** The `config.json` beside a `.safetensors` file (hyperparameters shapes cannot tell). */
  config?: HfConfig | string;
}

/** What `plan`, `planView` and `replan` throw for an invalid scenario: an `Error` with the
 *  CLI's message, the JSON path of the field it is about and the value written there. */
export interface ScenarioError extends Error {
  /** The field's JSON path (`nodes[2].bandwidth`); absent for the scenario as a whole. */
  path?: string;
  /** The value written at `path`, as JSON text (`"\"0 GB/s\""`). */
  value?: string;
}

/** The first bytes of a model file (at least its header). */
export interface ModelFile {
  name: string;
  bytes: Uint8Array;
  size?: number;
}

/** What `importHeader` read: the model, or how many bytes to read first. */
export type Header = { needMore: number } | { model: ModelSummary };

export interface ReplanOptions {
  /** Accept plans this much slower than the best when they move less (default 0.03). */
  tolerance?: number;
  /** Keep the running plan unless the best is this much faster (default 0.05). */
  hysteresis?: number;
}

/** What `serve` is asked: a count of users, or targets (a time as text with its unit,
 *  `"2 s"`, `"80 ms"`, or seconds as a number), or both. */
export interface ServeOptions {
  /** Users of one server: llama-server's (1–256) a slot and the scenario's context each; vLLM's (1–4096) their requests' KV blocks from its pool, up to its `--max-num-seqs` at once and the rest queued. */
  users?: number;
  /** Requests a second arriving at random whatever the replies (an open loop), `users` then the server's slots; 100 requests simulated (three a slot where that is more). */
  rate?: number;
  /** Draw each request's prompt and response within this share of the workload's (0.5: ±50%, as `vllm bench serve --random-range-ratio`); 0 when not given. */
  spread?: number;
  /** Time to first token every user must see, at `percentile`. */
  ttft?: string | number;
  /** Time per output token every user must see, at `percentile`. */
  tpot?: string | number;
  percentile?: 'p50' | 'p95';
}

//! Built-in models and devices, with the published figures they come from.
//!
//! Model presets are Hugging Face `config.json` files (under `presets/models/`, the newer ones
//! trimmed to the fields that decide a model's size, since the page carries them) plus the
//! parameter total the model card publishes; a test checks our count against it. Device
//! presets carry vendor figures: memory as the driver reports it, peak memory bandwidth,
//! and dense FP16 throughput (tensor cores with FP32 accumulation on NVIDIA GeForce cards,
//! which halves their FP16-accumulate figure; GPU FP32 on Apple silicon, where FP16 runs at
//! the same rate). Peaks are upper bounds: a measured probe (`stageplan probe`) replaces them.

use serde::Serialize;

use crate::device::{Backend, DeviceKind};
use crate::error::{ModelError, closest};
use crate::model::{HfConfig, Model, WeightFormat};

mod shape;
mod shapes;

/// A model preset: a config and the parameter count its model card publishes.
#[derive(Copy, Clone, Debug)]
pub struct ModelPreset {
    pub name: &'static str,
    pub title: &'static str,
    /// Published total parameters.
    pub published_params: f64,
}

macro_rules! model_presets {
    ($($name:literal, $title:literal, $params:expr;)*) => {
        /// Every model preset.
        pub const MODELS: &[ModelPreset] = &[$(ModelPreset { name: $name, title: $title, published_params: $params }),*];

        /// Each preset's `config.json`, apart from [`MODELS`]: planning a preset reads its
        /// shape (`shapes.rs`), so a build that never asks for the text does not carry it.
        const CONFIGS: &[(&str, &str)] = &[$(($name, include_str!(concat!("../presets/models/", $name, ".json")))),*];
    };
}

model_presets! {
    "llama-3.2-1b", "Llama 3.2 1B (tied embeddings)", 1.24e9;
    "llama-3.2-3b", "Llama 3.2 3B (tied embeddings)", 3.21e9;
    "llama-3.1-8b", "Llama 3.1 8B", 8.03e9;
    "llama-3.1-70b", "Llama 3.1 70B", 70.6e9;
    "llama-3.1-405b", "Llama 3.1 405B", 405.9e9;
    "mistral-7b-v0.1", "Mistral 7B v0.1", 7.24e9;
    "mistral-nemo-12b", "Mistral NeMo 12B", 12.2e9;
    "mixtral-8x7b", "Mixtral 8x7B (8 experts, 2 active)", 46.7e9;
    "qwen3-30b-a3b", "Qwen3 30B-A3B (128 experts, 8 active)", 30.5e9;
    "qwen2.5-7b", "Qwen2.5 7B (q/k/v bias)", 7.62e9;
    "qwen2.5-14b", "Qwen2.5 14B", 14.8e9;
    "qwen2.5-32b", "Qwen2.5 32B", 32.8e9;
    "qwen2.5-72b", "Qwen2.5 72B", 72.7e9;
    "gemma-2-9b", "Gemma 2 9B (alternating sliding window, tied)", 9.24e9;
    // 2026's open models. Published counts are Hugging Face's safetensors totals (the
    // `safetensors.total` of each repository, as keras-hub's presets and the Hub's API list
    // them) unless said otherwise; multimodal models count their language model only, the
    // vision encoder being a separate `--mmproj` file for llama.cpp.
    "qwen3-8b", "Qwen3 8B", 8_190_735_360.0;
    "qwen3-32b", "Qwen3 32B", 32_762_123_264.0;
    "qwen3-235b-a22b", "Qwen3 235B-A22B (128 experts, 8 active)", 235_093_634_560.0;
    "gpt-oss-20b", "gpt-oss 20B (32 experts, 4 active, MXFP4)", 20_914_757_184.0;
    "gpt-oss-120b", "gpt-oss 120B (128 experts, 4 active, MXFP4)", 116_829_156_672.0;
    // The model card's main model; its 14B multi-token-prediction layer llama.cpp does not load.
    "deepseek-v3", "DeepSeek-V3 671B (MLA, 256 experts)", 671.0e9;
    // The tensors' count (Fireworks' `paramCount`); the Hub's total is 3,416 more.
    "kimi-k2", "Kimi K2 1T (MLA, 384 experts)", 1_026_408_232_448.0;
    // The Hub's totals, which include the 0.87B vision encoder (0.8% and 0.2% of them).
    "llama-4-scout", "Llama 4 Scout 17B-16E (chunked attention)", 108_641_793_536.0;
    "llama-4-maverick", "Llama 4 Maverick 17B-128E (chunked attention)", 401_583_781_376.0;
    // keras-hub's text models (`gemma3_27b_text`, `gemma3_12b_text`); they keep 64 fewer
    // embedding rows than the checkpoint's 262,208.
    "gemma-3-27b", "Gemma 3 27B (5 of 6 layers sliding, tied)", 27_009_002_240.0;
    "gemma-3-12b", "Gemma 3 12B (5 of 6 layers sliding, tied)", 11_765_788_416.0;
    "gemma-3-1b", "Gemma 3 1B (5 of 6 layers sliding, tied)", 999_885_952.0;
    // The model card's totals ("355 billion", "106 billion"), without the MTP layer.
    "glm-4.5", "GLM-4.5 355B-A32B (160 experts)", 355.0e9;
    "glm-4.5-air", "GLM-4.5-Air 106B-A12B (128 experts)", 106.0e9;
    // The text model (keras-hub's `magistral_small_2506_en`, built on Mistral Small 3.1).
    "mistral-small-3.1-24b", "Mistral Small 3.1 24B", 23_572_403_200.0;
    "phi-4", "Phi-4 14B", 14_659_507_200.0;
}

impl ModelPreset {
    /// The model's Hugging Face repository (the base model), as vLLM and exo name it.
    pub fn hf_id(&self) -> &'static str {
        match self.name {
            "llama-3.2-1b" => "meta-llama/Llama-3.2-1B",
            "llama-3.2-3b" => "meta-llama/Llama-3.2-3B",
            "llama-3.1-8b" => "meta-llama/Llama-3.1-8B",
            "llama-3.1-70b" => "meta-llama/Llama-3.1-70B",
            "llama-3.1-405b" => "meta-llama/Llama-3.1-405B",
            "mistral-7b-v0.1" => "mistralai/Mistral-7B-v0.1",
            "mistral-nemo-12b" => "mistralai/Mistral-Nemo-Base-2407",
            "mixtral-8x7b" => "mistralai/Mixtral-8x7B-v0.1",
            "qwen3-30b-a3b" => "Qwen/Qwen3-30B-A3B",
            "qwen2.5-7b" => "Qwen/Qwen2.5-7B",
            "qwen2.5-14b" => "Qwen/Qwen2.5-14B",
            "qwen2.5-32b" => "Qwen/Qwen2.5-32B",
            "qwen2.5-72b" => "Qwen/Qwen2.5-72B",
            "gemma-2-9b" => "google/gemma-2-9b",
            "qwen3-8b" => "Qwen/Qwen3-8B",
            "qwen3-32b" => "Qwen/Qwen3-32B",
            "qwen3-235b-a22b" => "Qwen/Qwen3-235B-A22B",
            "gpt-oss-20b" => "openai/gpt-oss-20b",
            "gpt-oss-120b" => "openai/gpt-oss-120b",
            "deepseek-v3" => "deepseek-ai/DeepSeek-V3",
            "kimi-k2" => "moonshotai/Kimi-K2-Instruct",
            "llama-4-scout" => "meta-llama/Llama-4-Scout-17B-16E",
            "llama-4-maverick" => "meta-llama/Llama-4-Maverick-17B-128E",
            "gemma-3-27b" => "google/gemma-3-27b-pt",
            "gemma-3-12b" => "google/gemma-3-12b-pt",
            "gemma-3-1b" => "google/gemma-3-1b-pt",
            "glm-4.5" => "zai-org/GLM-4.5",
            "glm-4.5-air" => "zai-org/GLM-4.5-Air",
            "mistral-small-3.1-24b" => "mistralai/Mistral-Small-3.1-24B-Base-2503",
            "phi-4" => "microsoft/phi-4",
            _ => self.name,
        }
    }

    /// Finds a preset by name (case-insensitive).
    ///
    /// # Errors
    /// [`ModelError::UnknownPreset`] with the nearest name when there is one.
    pub fn find(name: &str) -> Result<&'static ModelPreset, ModelError> {
        MODELS.iter().find(|p| p.name.eq_ignore_ascii_case(name.trim())).ok_or_else(|| ModelError::UnknownPreset {
            name: name.to_owned(),
            suggestion: closest(name, MODELS.iter().map(|p| p.name)),
        })
    }

    /// The preset's `config.json` text.
    pub fn config_json(&self) -> &'static str {
        // Every preset has one: the macro writes both tables from one list.
        CONFIGS.iter().find(|(name, _)| *name == self.name).map_or("", |(_, text)| text)
    }

    /// The preset's config.
    pub fn config(&self) -> HfConfig {
        // The preset files are ours and tested to parse (`every_model_preset_parses`).
        HfConfig::from_json(self.config_json()).expect("built-in preset config parses")
    }

    /// The model in a weight format, from the preset's shape: what its config reads as
    /// (`shapes_are_generated_from_the_configs`), without reading it.
    ///
    /// # Errors
    /// Never for the built-in presets (tested); the `Result` keeps the signature honest.
    pub fn model(&self, weights: WeightFormat) -> Result<Model, ModelError> {
        // Every preset has a shape (tested), so a preset never falls back on its config.
        let (_, shape) = shapes::SHAPES
            .iter()
            .find(|(name, _)| *name == self.name)
            .ok_or_else(|| ModelError::UnknownPreset { name: self.name.to_owned(), suggestion: None })?;
        Ok(Model::from_transformer(self.name, shape.transformer(), weights))
    }
}

/// A device preset with its published figures.
#[derive(Copy, Clone, Debug, Serialize)]
#[cfg_attr(feature = "typescript", derive(ts_rs::TS))]
pub struct DevicePreset {
    pub name: &'static str,
    pub title: &'static str,
    pub kind: DeviceKind,
    /// Memory as the driver reports it, in bytes.
    pub memory: f64,
    /// Peak memory bandwidth, bytes/s.
    pub bandwidth: f64,
    /// Dense FP16 throughput, FLOP/s.
    pub compute: f64,
    /// Memory the runtime and the OS keep: CUDA/ROCm context and workspaces on a GPU, the
    /// part of unified memory macOS does not give the GPU, the OS on a CPU box.
    ///
    /// A CUDA GPU's `GPU_RESERVE`: what a llama.cpp process holds beyond the buffers it
    /// logs. Memory other programs hold on the card (a desktop, a browser) is not in it: a
    /// scenario adds it to `reserve`, as llama.cpp's `--fit` starts from the free memory
    /// `cudaMemGetInfo` reports (`common/fit.cpp`).
    pub reserve: f64,
    /// The llama.cpp backend it runs: NVIDIA CUDA, AMD ROCm, Apple Metal, CPU.
    pub backend: Backend,
}

const MIB: f64 = 1024.0 * 1024.0;
const GIB: f64 = 1024.0 * MIB;
const GB_S: f64 = 1e9;
const TFLOPS: f64 = 1e12;

/// A CUDA GPU's reserve: 1 GiB over llama.cpp's buffers, which covers the CUDA context
/// (256 MiB on an RTX 3090, 426 MiB on an RTX 6000 Ada: invoke-ai/InvokeAI#9413,
/// unslothai/unsloth-zoo#1053; llama.cpp's own "unaccounted" on a headless RTX 4090,
/// 451–456 MiB: ggml-org/llama.cpp#15860), the memory pool's growth in prompt processing
/// (≈300 MiB: ggml-org/llama.cpp#23527) and cuBLAS's workspaces (4 MiB, 32 MiB from
/// Hopper on: `ggml-cuda/common.cuh`). On a published RTX 5080 run the card held 4.8 GiB
/// beyond the plan's buffers at every placement, most of it there before llama.cpp started
/// (`a_published_rtx_5080_run_is_reproduced_from_one_of_its_figures`, the engine test).
const GPU_RESERVE: f64 = GIB;

const fn gpu(
    name: &'static str,
    title: &'static str,
    memory_mib: f64,
    bandwidth_gb_s: f64,
    tflops: f64,
) -> DevicePreset {
    DevicePreset {
        name,
        title,
        kind: DeviceKind::Gpu,
        memory: memory_mib * MIB,
        bandwidth: bandwidth_gb_s * GB_S,
        compute: tflops * TFLOPS,
        reserve: GPU_RESERVE,
        backend: Backend::Cuda,
    }
}

/// An AMD data-centre GPU: as [`gpu`], on ROCm.
const fn amd(
    name: &'static str,
    title: &'static str,
    memory_mib: f64,
    bandwidth_gb_s: f64,
    tflops: f64,
) -> DevicePreset {
    DevicePreset { backend: Backend::Rocm, ..gpu(name, title, memory_mib, bandwidth_gb_s, tflops) }
}

const fn apple(
    name: &'static str,
    title: &'static str,
    memory_gib: f64,
    bandwidth_gb_s: f64,
    tflops: f64,
) -> DevicePreset {
    DevicePreset {
        name,
        title,
        kind: DeviceKind::Unified,
        memory: memory_gib * GIB,
        bandwidth: bandwidth_gb_s * GB_S,
        compute: tflops * TFLOPS,
        // macOS' default GPU working-set limit (`recommendedMaxWorkingSetSize`) is about
        // three quarters of unified memory.
        reserve: memory_gib * GIB / 4.0,
        backend: Backend::Metal,
    }
}

const fn cpu(
    name: &'static str,
    title: &'static str,
    memory_gib: f64,
    bandwidth_gb_s: f64,
    tflops: f64,
    reserve_gib: f64,
) -> DevicePreset {
    DevicePreset {
        name,
        title,
        kind: DeviceKind::Cpu,
        memory: memory_gib * GIB,
        bandwidth: bandwidth_gb_s * GB_S,
        compute: tflops * TFLOPS,
        reserve: reserve_gib * GIB,
        backend: Backend::Cpu,
    }
}

/// Every device preset.
pub const DEVICES: &[DevicePreset] = &[
    gpu("rtx-3060-12gb", "NVIDIA GeForce RTX 3060 12 GB", 12288.0, 360.0, 25.6),
    gpu("rtx-3090", "NVIDIA GeForce RTX 3090 24 GB", 24576.0, 936.0, 71.0),
    gpu("rtx-4060-ti-16gb", "NVIDIA GeForce RTX 4060 Ti 16 GB", 16380.0, 288.0, 44.2),
    gpu("rtx-4080", "NVIDIA GeForce RTX 4080 16 GB", 16376.0, 716.8, 97.5),
    gpu("rtx-4090", "NVIDIA GeForce RTX 4090 24 GB", 24564.0, 1008.0, 165.2),
    gpu("rtx-5090", "NVIDIA GeForce RTX 5090 32 GB", 32607.0, 1792.0, 209.5),
    // RTX 50-series (#34): bandwidth and dense FP16 tensor throughput with FP32 accumulation
    // from NVIDIA's RTX Blackwell architecture whitepaper (5080: 960 GB/s, 113 TFLOPS; 5070 Ti:
    // 896, 88; 5070: 672, 62); the 5060 Ti 16 GB from its 36 SMs at 2,572 MHz at the 5090's
    // 1,024 FP16 FLOP per SM per clock halved (47.4), 448 GB/s. Memory: nvidia-smi shows an
    // RTX 5070 as 12,227 MiB (shkhln/libc6-shim#14); the 16 GB cards likewise 81 MiB short.
    gpu("rtx-5060-ti-16gb", "NVIDIA GeForce RTX 5060 Ti 16 GB", 16303.0, 448.0, 47.4),
    gpu("rtx-5070", "NVIDIA GeForce RTX 5070 12 GB", 12227.0, 672.0, 62.0),
    gpu("rtx-5070-ti", "NVIDIA GeForce RTX 5070 Ti 16 GB", 16303.0, 896.0, 88.0),
    gpu("rtx-5080", "NVIDIA GeForce RTX 5080 16 GB", 16303.0, 960.0, 113.0),
    // AMD's spec page: 24 GB GDDR6, 960 GB/s, 122.8 TFLOPS FP16 (WMMA: 96 CUs × 512 × 2.5 GHz).
    amd("rx-7900-xtx", "AMD Radeon RX 7900 XTX 24 GB", 24560.0, 960.0, 122.8),
    // Intel (TechPowerUp review): 12 GB GDDR6, 456 GB/s on PCIe 4.0 x8; 233 INT8 TOPS on XMX,
    // half of it FP16. llama.cpp runs it through Vulkan (or SYCL, which has no fitted terms).
    DevicePreset { backend: Backend::Vulkan, ..gpu("arc-b580", "Intel Arc B580 12 GB", 12288.0, 456.0, 116.7) },
    // Unified-memory boxes bought for local LLMs. AMD Ryzen AI Max+ 395 ("Strix Halo"):
    // LPDDR5X-8000 on 256 bits, 256 GB/s; Radeon 8060S, 40 CUs at 2.9 GHz, 59.4 TFLOPS FP16
    // peak; Linux lets the GPU map about 124 GiB (`amdgpu.gttsize`), so 8 GiB is the OS's;
    // llama.cpp runs it through Vulkan or ROCm (Vulkan here). NVIDIA DGX Spark (GB10): 128 GB
    // LPDDR5x, 273 GB/s; 1 PFLOP FP4 with sparsity is 62.5 TFLOPS dense FP16 with FP32
    // accumulation.
    DevicePreset {
        kind: DeviceKind::Unified,
        backend: Backend::Vulkan,
        reserve: 8.0 * GIB,
        ..gpu("ryzen-ai-max-395-128gb", "AMD Ryzen AI Max+ 395 (Strix Halo), 128 GB", 131072.0, 256.0, 59.4)
    },
    DevicePreset {
        kind: DeviceKind::Unified,
        reserve: 8.0 * GIB,
        ..gpu("dgx-spark", "NVIDIA DGX Spark (GB10), 128 GB", 122070.0, 273.0, 62.5)
    },
    gpu("l4", "NVIDIA L4 24 GB", 23034.0, 300.0, 121.0),
    gpu("l40s", "NVIDIA L40S 48 GB", 46068.0, 864.0, 362.0),
    gpu("a100-40gb", "NVIDIA A100 40 GB", 40960.0, 1555.0, 312.0),
    gpu("a100-80gb", "NVIDIA A100 80 GB SXM", 81920.0, 2039.0, 312.0),
    gpu("h100", "NVIDIA H100 80 GB SXM", 81559.0, 3350.0, 989.0),
    gpu("h200", "NVIDIA H200 141 GB SXM", 143771.0, 4800.0, 989.0),
    amd("mi300x", "AMD Instinct MI300X 192 GB", 196608.0, 5300.0, 1307.0),
    apple("m1-16gb", "Apple M1, 16 GB", 16.0, 68.25, 2.6),
    apple("m1-pro-32gb", "Apple M1 Pro, 32 GB", 32.0, 200.0, 5.2),
    apple("m1-max-64gb", "Apple M1 Max, 64 GB", 64.0, 400.0, 10.4),
    apple("m1-ultra-128gb", "Apple M1 Ultra, 128 GB", 128.0, 800.0, 21.0),
    apple("m2-24gb", "Apple M2, 24 GB", 24.0, 100.0, 3.6),
    apple("m2-pro-32gb", "Apple M2 Pro, 32 GB", 32.0, 200.0, 6.8),
    apple("m2-max-96gb", "Apple M2 Max, 96 GB", 96.0, 400.0, 13.6),
    apple("m2-ultra-192gb", "Apple M2 Ultra, 192 GB", 192.0, 800.0, 27.2),
    apple("m3-24gb", "Apple M3, 24 GB", 24.0, 100.0, 4.1),
    apple("m3-pro-36gb", "Apple M3 Pro, 36 GB", 36.0, 150.0, 7.4),
    apple("m3-max-128gb", "Apple M3 Max (40-core GPU), 128 GB", 128.0, 400.0, 16.4),
    apple("m3-ultra-512gb", "Apple M3 Ultra, 512 GB", 512.0, 819.0, 28.4),
    apple("m4-32gb", "Apple M4, 32 GB", 32.0, 120.0, 4.3),
    apple("m4-pro-64gb", "Apple M4 Pro, 64 GB", 64.0, 273.0, 9.2),
    apple("m4-max-128gb", "Apple M4 Max (40-core GPU), 128 GB", 128.0, 546.0, 18.4),
    cpu("cpu-ddr4-dual-channel", "Desktop CPU, dual-channel DDR4-3200, 32 GB", 32.0, 51.2, 1.0, 4.0),
    cpu("cpu-ddr5-dual-channel", "Desktop CPU, dual-channel DDR5-5600, 64 GB", 64.0, 89.6, 2.0, 6.0),
    cpu("cpu-epyc-12ch-ddr5", "Server CPU, 12-channel DDR5-4800, 384 GB", 384.0, 460.8, 7.4, 16.0),
    // Laptops and small machines (#18). Bandwidth is the vendor's memory spec (channels ×
    // width × transfer rate); FLOPS are FP16 from published core counts and clocks where a
    // vendor states only TOPS. Mac minis and MacBooks: Apple's tech-spec pages.
    cpu("laptop-ddr4-16gb", "Laptop CPU, dual-channel DDR4-3200, 16 GB", 16.0, 51.2, 0.5, 4.0),
    cpu("laptop-ddr5-16gb", "Laptop CPU, dual-channel DDR5-5600, 16 GB", 16.0, 89.6, 1.0, 4.0),
    // Intel ARK, Core Ultra 7 155H: LPDDR5x-7467, "max memory bandwidth 120 GB/s".
    cpu("core-ultra-7-155h-32gb", "Intel Core Ultra 7 155H laptop, LPDDR5x, 32 GB", 32.0, 120.0, 1.2, 6.0),
    apple("macbook-air-m3-16gb", "MacBook Air M3, 16 GB", 16.0, 100.0, 4.1),
    apple("mac-mini-m4-16gb", "Mac mini M4, 16 GB", 16.0, 120.0, 4.3),
    apple("mac-mini-m4-pro-24gb", "Mac mini M4 Pro, 24 GB", 24.0, 273.0, 9.2),
    // NVIDIA's Jetson module data sheets: AGX Orin 64 GB (LPDDR5 256-bit, 204.8 GB/s, 2048
    // CUDA cores at 1.3 GHz), Orin Nano Super 8 GB (102 GB/s, 1024 cores at 1.02 GHz). CPU and
    // GPU share the memory: the reserve is the OS's.
    DevicePreset {
        reserve: 8.0 * GIB,
        ..gpu("jetson-agx-orin-64gb", "NVIDIA Jetson AGX Orin 64 GB", 65536.0, 204.8, 10.6)
    },
    DevicePreset {
        reserve: 2.0 * GIB,
        ..gpu("jetson-orin-nano-8gb", "NVIDIA Jetson Orin Nano Super 8 GB", 8192.0, 102.0, 4.2)
    },
    // Raspberry Pi 5 product brief: LPDDR4X-4267, 32-bit (17.1 GB/s); 4 Cortex-A76 at
    // 2.4 GHz, two 128-bit FMA pipes each (0.31 TFLOPS FP16).
    cpu("raspberry-pi-5-8gb", "Raspberry Pi 5, 8 GB", 8.0, 17.1, 0.31, 1.0),
];

/// System RAM a machine's host tier may name (`host.ram`): a memory type and speed times its
/// channels. The bandwidth is the peak, 8 bytes × MT/s per 64-bit channel (a DDR5 DIMM's two
/// 32-bit subchannels make one); llama.cpp reaches the CPU backend's fitted fraction of it
/// ([`crate::calibration`]), about 0.68–0.83 in published runs (`docs/offload-measurements.md`).
#[derive(Copy, Clone, Debug, Serialize)]
#[cfg_attr(feature = "typescript", derive(ts_rs::TS))]
pub struct RamPreset {
    pub name: &'static str,
    pub title: &'static str,
    /// Peak read bandwidth, bytes/s.
    pub bandwidth: f64,
}

const fn ram(name: &'static str, title: &'static str, mt_s: f64, channels: f64) -> RamPreset {
    RamPreset { name, title, bandwidth: 8.0 * mt_s * 1e6 * channels }
}

/// Every host-RAM preset: desktop dual channel, workstation quad channel, server 8 and 12.
pub const RAM: &[RamPreset] = &[
    ram("ddr4-2400-2ch", "DDR4-2400, 2 channels (desktop)", 2400.0, 2.0),
    ram("ddr4-3200-2ch", "DDR4-3200, 2 channels (desktop)", 3200.0, 2.0),
    ram("ddr4-3200-4ch", "DDR4-3200, 4 channels (workstation)", 3200.0, 4.0),
    ram("ddr4-3200-8ch", "DDR4-3200, 8 channels (server)", 3200.0, 8.0),
    ram("ddr5-4800-2ch", "DDR5-4800, 2 channels (desktop)", 4800.0, 2.0),
    ram("ddr5-5600-2ch", "DDR5-5600, 2 channels (desktop)", 5600.0, 2.0),
    ram("ddr5-6000-2ch", "DDR5-6000, 2 channels (desktop)", 6000.0, 2.0),
    ram("ddr5-6400-2ch", "DDR5-6400, 2 channels (desktop)", 6400.0, 2.0),
    ram("ddr5-5600-4ch", "DDR5-5600, 4 channels (workstation)", 5600.0, 4.0),
    ram("ddr5-4800-8ch", "DDR5-4800, 8 channels (server)", 4800.0, 8.0),
    ram("ddr5-4800-12ch", "DDR5-4800, 12 channels (server)", 4800.0, 12.0),
    ram("ddr5-6400-12ch", "DDR5-6400, 12 channels (server)", 6400.0, 12.0),
];

impl RamPreset {
    /// Finds a RAM preset by name (case-insensitive); the error suggests the nearest name.
    pub fn find(name: &str) -> Result<&'static RamPreset, Option<String>> {
        RAM.iter()
            .find(|r| r.name.eq_ignore_ascii_case(name.trim()))
            .ok_or_else(|| closest(name, RAM.iter().map(|r| r.name)))
    }
}

/// How the GPUs of one machine reach each other (`gpu_link`): a hop between two of them in
/// one server is a copy of the activations and the scheduler's split
/// ([`SPLIT_LATENCY_S`](crate::cost::SPLIT_LATENCY_S), a stream sync and a graph launch).
/// PCIe's bandwidth is per direction after encoding (PCI-SIG: 0.985 GB/s a lane at 3.0,
/// 1.969 at 4.0, 3.938 at 5.0). Without peer-to-peer (GeForce cards: NVIDIA's driver
/// disables it) llama.cpp's CUDA backend cannot copy between devices directly
/// (`ggml_backend_cuda_cpy_tensor_async` returns false) and the scheduler copies through
/// host memory, twice over the bus: half the bandwidth. NVLink is NVIDIA's per-direction
/// figure: the RTX 3090 bridge 112.5 GB/s both ways, A100 SXM4 600 GB/s, H100 SXM5 900 GB/s.
#[derive(Copy, Clone, Debug, Serialize)]
#[cfg_attr(feature = "typescript", derive(ts_rs::TS))]
pub struct GpuLinkPreset {
    pub name: &'static str,
    pub title: &'static str,
    /// Bytes/s per direction, as a copy between two GPUs reaches it.
    pub bandwidth: f64,
    /// Seconds a hop costs besides the copy.
    pub latency: f64,
}

const fn pcie(name: &'static str, title: &'static str, gb_s_per_lane: f64, lanes: f64, p2p: bool) -> GpuLinkPreset {
    let bandwidth = gb_s_per_lane * 1e9 * lanes;
    GpuLinkPreset {
        name,
        title,
        bandwidth: if p2p { bandwidth } else { bandwidth / 2.0 },
        latency: crate::cost::SPLIT_LATENCY_S,
    }
}

const fn nvlink(name: &'static str, title: &'static str, gb_s: f64) -> GpuLinkPreset {
    GpuLinkPreset { name, title, bandwidth: gb_s * 1e9, latency: crate::cost::SPLIT_LATENCY_S }
}

/// Every GPU-link preset: PCIe by generation and lanes, without peer-to-peer (consumer
/// cards) and with it (`-p2p`), and NVLink.
pub const GPU_LINKS: &[GpuLinkPreset] = &[
    pcie("pcie3-x4", "PCIe 3.0 x4", 0.985, 4.0, false),
    pcie("pcie3-x8", "PCIe 3.0 x8", 0.985, 8.0, false),
    pcie("pcie3-x16", "PCIe 3.0 x16", 0.985, 16.0, false),
    pcie("pcie4-x4", "PCIe 4.0 x4", 1.969, 4.0, false),
    pcie("pcie4-x8", "PCIe 4.0 x8", 1.969, 8.0, false),
    pcie("pcie4-x16", "PCIe 4.0 x16", 1.969, 16.0, false),
    pcie("pcie5-x8", "PCIe 5.0 x8", 3.938, 8.0, false),
    pcie("pcie5-x16", "PCIe 5.0 x16", 3.938, 16.0, false),
    pcie("pcie3-x16-p2p", "PCIe 3.0 x16 P2P", 0.985, 16.0, true),
    pcie("pcie4-x8-p2p", "PCIe 4.0 x8 P2P", 1.969, 8.0, true),
    pcie("pcie4-x16-p2p", "PCIe 4.0 x16 P2P", 1.969, 16.0, true),
    pcie("pcie5-x16-p2p", "PCIe 5.0 x16 P2P", 3.938, 16.0, true),
    nvlink("nvlink-bridge", "NVLink bridge (3090, A6000)", 56.25),
    nvlink("nvlink3", "NVLink 3 (A100 SXM4)", 300.0),
    nvlink("nvlink4", "NVLink 4 (H100 SXM5)", 450.0),
];

impl GpuLinkPreset {
    /// The link a machine's GPUs have when `gpu_link` is not given: PCIe 4.0 x16 without
    /// peer-to-peer, what a consumer board with two GeForce cards offers at best.
    pub const DEFAULT: &'static GpuLinkPreset = &GPU_LINKS[5];

    /// The hop's figures.
    pub fn link(&self) -> crate::problem::Link {
        crate::problem::Link { bandwidth: self.bandwidth, latency: self.latency }
    }

    /// How GPUs on this link reach each other's memory: NVLink, PCIe peer-to-peer (`-p2p`),
    /// or through host RAM.
    pub fn peer(&self) -> crate::problem::Peer {
        use crate::problem::Peer;
        if self.name.starts_with("nvlink") {
            Peer::NvLink
        } else if self.name.ends_with("-p2p") {
            Peer::Pcie
        } else {
            Peer::None
        }
    }

    /// Finds a GPU-link preset by name (case-insensitive); the error suggests the nearest name.
    pub fn find(name: &str) -> Result<&'static GpuLinkPreset, Option<String>> {
        GPU_LINKS
            .iter()
            .find(|l| l.name.eq_ignore_ascii_case(name.trim()))
            .ok_or_else(|| closest(name, GPU_LINKS.iter().map(|l| l.name)))
    }
}

impl DevicePreset {
    /// Finds a device by name (case-insensitive); the error suggests the nearest name.
    pub fn find(name: &str) -> Result<&'static DevicePreset, Option<String>> {
        DEVICES
            .iter()
            .find(|d| d.name.eq_ignore_ascii_case(name.trim()))
            .ok_or_else(|| closest(name, DEVICES.iter().map(|d| d.name)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_model_preset_parses_and_matches_its_published_size() {
        for preset in MODELS {
            let model = preset.model(WeightFormat::default()).unwrap();
            let params = model.params() as f64;
            let error = (params - preset.published_params).abs() / preset.published_params;
            assert!(error < 0.01, "{}: {params:.4e} vs published {:.4e}", preset.name, preset.published_params);
        }
    }

    #[test]
    fn every_shape_is_its_config_as_read() {
        for preset in MODELS {
            let (_, shape) = shapes::SHAPES.iter().find(|(n, _)| *n == preset.name).expect("a shape per preset");
            let read = preset.config().transformer().unwrap();
            assert_eq!(
                shape.transformer(),
                read,
                "{}: UPDATE_EXPECT=1 cargo test -p stageplan --test shapes",
                preset.name
            );
        }
        assert_eq!(shapes::SHAPES.len(), MODELS.len());
        assert!(
            shapes_source() == include_str!("presets/shapes.rs"),
            "shapes.rs is stale: UPDATE_EXPECT=1 cargo test -p stageplan --test shapes"
        );
    }

    #[test]
    fn the_default_gpu_link_is_pcie_4_x16() {
        assert_eq!(GpuLinkPreset::DEFAULT.name, "pcie4-x16");
        assert_eq!(GpuLinkPreset::DEFAULT.bandwidth, 1.969e9 * 16.0 / 2.0);
    }

    #[test]
    fn names_are_unique_and_lowercase() {
        let mut names: Vec<&str> = MODELS
            .iter()
            .map(|m| m.name)
            .chain(DEVICES.iter().map(|d| d.name))
            .chain(RAM.iter().map(|r| r.name))
            .chain(GPU_LINKS.iter().map(|l| l.name))
            .collect();
        assert!(
            names
                .iter()
                .all(|n| n.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.'))
        );
        let count = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), count);
    }

    #[test]
    fn devices_have_sane_figures() {
        for d in DEVICES {
            assert!(d.reserve < d.memory, "{}", d.name);
            assert!(d.bandwidth > 10e9 && d.bandwidth < 10e12, "{}", d.name);
            // From a Raspberry Pi's four cores (0.31 TFLOPS) to a data-centre GPU.
            assert!(d.compute > 0.2e12 && d.compute < 5e15, "{}", d.name);
        }
    }

    #[test]
    fn ram_presets_are_the_channel_arithmetic() {
        // DDR5-6000, two channels: 96 GB/s; DDR5-4800, twelve: 460.8 GB/s (the EPYC preset's).
        assert_eq!(RamPreset::find("DDR5-6000-2ch").unwrap().bandwidth, 96e9);
        assert!((RamPreset::find("ddr5-4800-12ch").unwrap().bandwidth - 460.8e9).abs() < 1.0);
        assert_eq!(RamPreset::find("ddr5-6000-2c").unwrap_err(), Some("ddr5-6000-2ch".to_owned()));
    }

    #[test]
    fn unknown_names_suggest_the_nearest() {
        let err = ModelPreset::find("llama-3.1-7b").unwrap_err();
        assert!(err.to_string().contains("did you mean `llama-3.1-8b`"), "{err}");
        assert_eq!(DevicePreset::find("rtx4090").unwrap_err(), Some("rtx-4090".to_owned()));
    }
}

/// The text of `presets/shapes.rs`, generated from every preset's `config.json`.
#[cfg(any(test, feature = "testing"))]
pub fn shapes_source() -> String {
    let entries: Vec<_> =
        MODELS.iter().map(|p| (p.name, p.config().transformer().expect("built-in preset config reads"))).collect();
    shape::render::file(&entries)
}

/// Every preset and format name: what `stageplan presets --format json` prints and the JS
/// API's `presets()` returns.
#[derive(Clone, Debug, Serialize)]
#[cfg_attr(feature = "typescript", derive(ts_rs::TS))]
pub struct Catalog {
    pub models: Vec<ModelEntry>,
    pub devices: &'static [DevicePreset],
    /// Host-RAM presets for a machine's `host.ram`.
    pub ram: &'static [RamPreset],
    /// How a machine's GPUs reach each other, for its `gpu_link`.
    pub gpu_links: &'static [GpuLinkPreset],
    pub weights: Vec<String>,
    pub kv: Vec<&'static str>,
}

/// A model preset in the [`Catalog`].
#[derive(Clone, Debug, Serialize)]
#[cfg_attr(feature = "typescript", derive(ts_rs::TS))]
pub struct ModelEntry {
    pub name: &'static str,
    pub title: &'static str,
    pub published_params: f64,
}

/// The catalog of presets and formats.
pub fn catalog() -> Catalog {
    Catalog {
        models: MODELS
            .iter()
            .map(|m| ModelEntry { name: m.name, title: m.title, published_params: m.published_params })
            .collect(),
        devices: DEVICES,
        ram: RAM,
        gpu_links: GPU_LINKS,
        weights: crate::WeightFormat::all().iter().map(ToString::to_string).collect(),
        kv: crate::tensor_type::KV_FORMATS.iter().map(|t| t.name()).collect(),
    }
}

//! llama.cpp: `ggml-rpc-server` on every other machine, then `llama-server` with the
//! devices in pipeline order and a `--tensor-split` that reproduces the plan's layer counts.
//! The plan's memory is llama.cpp's ([`crate::engine`]): the first stage's machine runs
//! `llama-server`, so `--main` must name it.
//!
//! How llama.cpp splits (`llama_model::load_tensors`): with `-ngl` at least `N + 1` there are
//! `N + 1` slots — the `N` blocks and the output layer (final norm and head) — and slot `i`
//! goes to the first device whose cumulative share, `(w_0 + … + w_d) / Σw` computed in
//! float32, is greater than `i / (N + 1)`. Integer shares equal to each device's block count,
//! plus one on the last device for the output slot, put exactly the plan's blocks on each
//! device: the boundaries are the same quotients on both sides of the comparison, and
//! integers below 2^24 are exact in float32. [`llama_cpp_layers`] is that rule, and the
//! tests run it on every exported split. The input layer (token embedding) always stays in
//! the host's RAM.

use std::fmt::Write;

use super::{DeviceKind, ExportError, Layout};
use crate::limits::MAX_GPUS_PER_MACHINE;
use crate::plan::RiderKind;
use crate::quote::shell;

/// The port `ggml-rpc-server` listens on by default.
const RPC_PORT: u16 = 50052;

/// The RPC server's binary (`tools/rpc/CMakeLists.txt`); builds before llama.cpp PR #25045
/// (June 2026) call it `rpc-server`.
pub const RPC_SERVER: &str = "ggml-rpc-server";

/// llama.cpp's default `--ubatch-size` and `--batch-size`.
const UBATCH: u64 = 512;
const BATCH: u64 = 2048;

/// One process of a llama.cpp export: the machine it runs on and its command, word by word
/// — what the export's text prints for a shell, and what an agent starts without one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Launch {
    /// The plan's machine (a GPU's stage: its machine, not `box/gpu1`).
    pub machine: String,
    /// Set for this process only (`CUDA_VISIBLE_DEVICES`).
    pub env: Vec<(&'static str, String)>,
    /// `llama-server`, or the RPC server.
    pub program: &'static str,
    pub args: Vec<Word>,
    /// An rpc-server's address as llama-server dials it (`host:port`, as `--rpc` lists it and
    /// llama.cpp names the device, `RPC0[host:port]`).
    pub dialed: Option<String>,
}

/// A word of a [`Launch`]'s command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Word {
    /// A flag the export writes (`--port`), never from input.
    Flag(&'static str),
    /// A value, possibly from input: quoted for a shell where it needs to be.
    Text(String),
    /// The machine's CPU cores, which only the machine knows (`"$(nproc)"` in a shell).
    Cores,
}

impl Word {
    fn text(text: &str) -> Word {
        Word::Text(text.to_owned())
    }

    /// The word as the export's text writes it.
    pub fn shell(&self) -> std::borrow::Cow<'_, str> {
        match self {
            Word::Flag(flag) => (*flag).into(),
            Word::Text(text) => shell(text),
            Word::Cores => "\"$(nproc)\"".into(),
        }
    }

    /// The argument itself, for a process started without a shell on a machine of `cores`.
    pub fn arg(&self, cores: usize) -> String {
        match self {
            Word::Flag(flag) => (*flag).to_owned(),
            Word::Text(text) => text.clone(),
            Word::Cores => cores.to_string(),
        }
    }
}

impl Launch {
    /// The value of its `--port`: an rpc-server's (llama-server's comes from its environment).
    pub fn port(&self) -> Option<u16> {
        let at = self.args.iter().position(|w| *w == Word::Flag("--port"))?;
        match self.args.get(at + 1)? {
            Word::Text(port) => port.parse().ok(),
            _ => None,
        }
    }

    /// The command on one line, for a shell.
    fn shell_line(&self) -> String {
        let env = self.env.iter().map(|(name, value)| format!("{name}={} ", shell(value)));
        let words = std::iter::once(self.program.into()).chain(self.args.iter().map(Word::shell));
        env.collect::<String>() + &words.collect::<Vec<_>>().join(" ")
    }

    /// The command with one flag and its value per line, for reading (as the export prints
    /// llama-server's), ending in a newline.
    pub(super) fn flag_lines(&self) -> String {
        let mut line = self.program.to_owned();
        let mut rest = self.args.iter();
        while let Some(word) = rest.next() {
            let _ = write!(line, " \\\n  {}", word.shell());
            if let Word::Flag(_) = word
                && let Some(value) = rest.clone().next().filter(|v| !matches!(v, Word::Flag(_)))
            {
                let _ = write!(line, " {}", value.shell());
                rest.next();
            }
        }
        line.push('\n');
        line
    }
}

/// `--tensor-split` shares for blocks `counts` (in device order): each device's block count,
/// and one more on the last device for the output layer.
pub fn tensor_split(counts: &[usize]) -> Vec<usize> {
    let mut shares = counts.to_vec();
    if let Some(last) = shares.last_mut() {
        *last += 1;
    }
    shares
}

/// llama.cpp's assignment of slots to devices (blocks `0..n_layer`, then the output layer):
/// the device index of each slot, or `None` for the CPU. `shares` as `-ts` gives them,
/// `n_gpu_layers` as `-ngl`; current llama.cpp (`i_gpu_start = max(N + 1 − ngl, 0)`).
pub fn llama_cpp_layers(shares: &[f32], n_layer: usize, n_gpu_layers: usize) -> Vec<Option<usize>> {
    let mut splits: Vec<f32> = Vec::with_capacity(shares.len());
    let mut sum = 0.0f32;
    for &share in shares {
        sum += share;
        splits.push(sum);
    }
    for split in &mut splits {
        *split /= sum;
    }
    let slots = n_layer + 1;
    let start = slots.saturating_sub(n_gpu_layers);
    let active = if shares.is_empty() { 0 } else { n_gpu_layers.min(slots) };
    (0..slots)
        .map(|il| {
            if il < start || il - start >= active {
                return None;
            }
            let x = (il - start) as f32 / active as f32;
            Some(splits.partition_point(|&s| s <= x).min(shares.len() - 1))
        })
        .collect()
}

/// A layer's FFN matrices as llama.cpp names them, after `blk\.N\.`: the routed experts
/// (`LLM_FFN_EXPS_REGEX` in `common/common.h`, what `--n-cpu-moe` moves) or a dense FFN
/// (`LLM_FFN_DENSE_REGEX`, `--n-cpu-ffn`), but not the shared experts (`_shexp`) nor the router
/// (`ffn_gate_inp`): what the planner's FFN class holds.
pub(super) const FFN_PATTERN: &str = r"ffn_(up|down|gate|gate_up)(_(ch|)exps|\.)";

/// KV-cache formats llama.cpp's `--cache-type-k/v` accept.
const KV_TYPES: [&str; 9] = ["f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1"];

/// llama.cpp refuses a `--tensor-split` with as many entries as `llama_max_devices()` (16).
const MAX_DEVICES: usize = 15;

pub(super) fn export(layout: &Layout<'_>) -> Result<(String, Vec<String>, Vec<Launch>), ExportError> {
    let plan = layout.plan;
    if layout.stages.len() > MAX_DEVICES {
        return Err(ExportError::TooManyStages { target: "llama.cpp", max: MAX_DEVICES, stages: layout.stages.len() });
    }
    if plan.stages.len() > 1 && plan.stages.iter().any(|s| !s.tensor_parallel.is_empty()) {
        return Err(ExportError::Plan {
            field: "stages",
            problem: "are tensor-parallel groups in a pipeline, which llama.cpp cannot run (`--split-mode tensor` puts every layer on one group): export it with `--to vllm`, or re-plan with `\"engine\": \"llama.cpp\"`".to_owned(),
        });
    }
    let context = plan.workload.context.saturating_mul(plan.workload.batch);
    if context > i32::MAX as u64 {
        return Err(ExportError::Plan {
            field: "workload.context",
            problem: format!("× `workload.batch` is {context} tokens; llama.cpp's `--ctx-size` takes at most 2^31 − 1"),
        });
    }
    let main = layout.main();
    let first = layout.stages[0].0;
    if main != first {
        return Err(ExportError::Option {
            option: "--main",
            value: main.to_owned(),
            problem: "does not hold the first stage; llama.cpp keeps the token embedding and its host buffers on the machine running llama-server, which this plan puts on the first stage: drop `--main`, or re-plan with that machine first",
        });
    }
    let mut notes = Vec::new();
    // The host's own devices: its GPUs, or, on a CPU-only host, an rpc-server on itself.
    let main_machine = layout.machine(main).0;
    let local_device = |node: &str, gpu: Option<u32>| match layout.kind(node) {
        DeviceKind::Gpu => Some(format!("CUDA{}", gpu.unwrap_or(0))),
        DeviceKind::Unified => Some("MTL0".to_owned()),
        DeviceKind::Cpu => None,
    };
    let mut rpc: Vec<(String, String)> = Vec::new();
    let mut listening: Vec<(String, String)> = Vec::new();
    let mut devices: Vec<String> = Vec::new();
    // Per stage: where its FFN layers in host RAM go (`CPU` on the main machine, else a
    // second rpc-server on that machine serving its CPU), and the layers.
    let mut ffn_overrides: Vec<(String, usize, usize)> = Vec::new();
    // Remote machines' CPU rpc-servers, `(node, endpoint)`; each is also a device with no layers.
    let mut cpu_rpc: Vec<(String, String)> = Vec::new();
    // Per rpc-server of a GPU: its stage's node and the GPU's number.
    let mut served: Vec<(&str, Option<u32>)> = Vec::new();
    // A tensor-parallel plan: its one stage on each of its GPUs (`--split-mode tensor`).
    let tensor_parallel = &plan.stages[0].tensor_parallel;
    let units: Vec<(&str, Option<u32>, u16, String)> = layout
        .stages
        .iter()
        .flat_map(|&(node, _, _)| {
            let (machine, gpu) = layout.machine(node);
            let offset = layout.port_offset(node);
            match gpu {
                Some(lead) if !tensor_parallel.is_empty() => tensor_parallel
                    .iter()
                    .map(|&i| (node, Some(i), offset + (i - lead) as u16, crate::problem::gpu_node_name(machine, i)))
                    .collect::<Vec<_>>(),
                _ => vec![(node, gpu, offset, node.to_owned())],
            }
        })
        .collect();
    for (node, gpu, offset, name) in units {
        let machine = layout.machine(node).0;
        if machine == main_machine
            && let Some(device) = local_device(node, gpu)
        {
            devices.push(device);
            continue;
        }
        // One rpc-server per GPU of a machine with several, each on the next port.
        let base = layout.given_port(node).unwrap_or(RPC_PORT);
        let port = base.checked_add(offset).ok_or_else(|| ExportError::Option {
            option: "--host",
            value: layout.host_with(node, base),
            problem: "leaves no port for each of the machine's GPUs above it; give a lower port",
        })?;
        // The main machine's own rpc-server is reached on 127.0.0.1, but listens at the
        // address it was given, where two cannot share a port.
        listening.push((name.clone(), layout.host_with(node, port)));
        let endpoint = if machine == main_machine { format!("127.0.0.1:{port}") } else { layout.host_with(node, port) };
        // RPC devices are numbered in `--rpc` order.
        devices.push(format!("RPC{}", rpc.len()));
        rpc.push((name, endpoint));
        served.push((node, gpu));
    }
    // Two rpc-servers cannot listen on one address and port.
    for (i, (second, address)) in listening.iter().enumerate() {
        if let Some((first, _)) = listening[..i].iter().find(|(_, a)| a == address) {
            return Err(ExportError::SameAddress {
                first: first.clone(),
                second: second.clone(),
                address: address.clone(),
                server: RPC_SERVER,
            });
        }
    }
    // What the plan keeps in host RAM: the first stage's first layers (`-ngl` leaves them
    // on the CPU), and per stage its FFN layers (`--override-tensor`).
    let offloads: Vec<Option<&crate::plan::StageOffload>> = plan.stages.iter().map(|s| s.offload.as_ref()).collect();
    let host_layers = offloads[0].map_or(0, |o| o.host_layers);
    let head_on_host = offloads[0].is_some_and(|o| o.head_on_host);
    for (&(node, _, _), offload) in layout.stages.iter().zip(&offloads) {
        let Some(offload) = offload.filter(|o| o.host_ffn > 0) else { continue };
        let [f0, f1] = offload.ffn_layers;
        let machine = layout.machine(node).0;
        let target = if machine == main_machine {
            "CPU".to_owned()
        } else if let Some((_, endpoint)) = cpu_rpc.iter().find(|(n, _)| layout.machine(n).0 == machine) {
            // The machine's CPU rpc-server serves each of its GPUs' stages.
            format!("RPC0[{endpoint}]")
        } else {
            // A second rpc-server on that machine serves its CPU, one port above its device's
            // (above the ports of all its GPUs', on a machine with several).
            let above = if layout.machine(node).1.is_some() { MAX_GPUS_PER_MACHINE as u16 } else { 1 };
            let device = &rpc.iter().find(|(n, _)| n == node).map_or_else(String::new, |(_, e)| e.clone());
            let (host, port) = device.rsplit_once(':').unwrap_or((device.as_str(), "50052"));
            let own = port.parse::<u16>().unwrap_or(RPC_PORT);
            // From the machine's port, whichever of its GPUs asks first.
            let port = own.saturating_sub(layout.port_offset(node)).checked_add(above).ok_or(ExportError::Option {
                option: "--host",
                value: device.clone(),
                problem: "leaves no port above it for the machine's CPU rpc-server; give a lower port",
            })?;
            let endpoint = format!("{host}:{port}");
            cpu_rpc.push((node.to_owned(), endpoint.clone()));
            format!("RPC0[{endpoint}]")
        };
        ffn_overrides.push((target, f0, f1));
    }
    for (i, (second, address)) in cpu_rpc.iter().enumerate() {
        let taken = rpc.iter().chain(&cpu_rpc[..i]).find(|(_, a)| a == address);
        if let Some((first, _)) = taken {
            return Err(ExportError::SameAddress {
                first: first.clone(),
                second: second.clone(),
                address: address.clone(),
                server: RPC_SERVER,
            });
        }
    }
    let mut counts = layout.counts();
    counts[0] -= host_layers;
    let mut shares = tensor_split(&counts);
    // llama.cpp's slots run on through the NextN layers it does not load: the last device's.
    if let Some(last) = shares.last_mut() {
        *last += plan.model.nextn_layers;
    }
    // Tensor parallel: every GPU an even share of each matrix, as the plan splits them.
    if !tensor_parallel.is_empty() {
        shares = vec![1; tensor_parallel.len()];
    }
    // Each CPU rpc-server is a device too (so llama.cpp runs what it holds), with no layers.
    for _ in &cpu_rpc {
        devices.push(format!("RPC{}", rpc.len() + devices.len() - layout.stages.len()));
        shares.push(0);
    }
    let given = layout.options.model.clone().or_else(|| plan.model.file.clone());
    let model = given.clone().unwrap_or_else(|| {
        let weights = if plan.model.weights.is_empty() { "bf16" } else { &plan.model.weights };
        format!("{}-{weights}.gguf", layout.placeholder())
    });
    if given.is_none() {
        notes.push(format!("`{model}` stands for the model file; give its path with `--model`."));
    }
    let workload = &plan.workload;
    let mut cache_type = |field: &str, name: &str| {
        if KV_TYPES.contains(&name) {
            name.to_owned()
        } else {
            notes.push(format!(
                "llama.cpp has no `{name}` KV cache; the command uses f16, which needs more memory than planned: re-plan with `{field}` q8_0 or f16."
            ));
            "f16".to_owned()
        }
    };
    let kv = cache_type("kv", &workload.kv);
    let kv_v = workload.kv_v.as_deref().map_or_else(|| kv.clone(), |v| cache_type("kv_v", v));
    if plan.model.experts.is_some() && ffn_overrides.is_empty() {
        notes.push(
            "The plan keeps each layer's experts with the layer, so no `--override-tensor` is needed.".to_owned(),
        );
    }
    let what = if plan.model.experts.is_some() { "routed experts" } else { "FFN" };
    if host_layers > 0 {
        notes.push(format!(
            "Layers 0–{} stay whole in {main_machine}'s RAM with their KV cache (`--n-gpu-layers` counts the GPU's layers from the end).",
            host_layers - 1
        ));
    }
    if host_layers > 0 || ffn_overrides.iter().any(|(target, _, _)| target == "CPU") {
        notes.push("`--load-mode none` reads the weights the plan keeps in RAM instead of mapping the file; builds before 2026 spell it `--no-mmap`.".to_owned());
    }
    for (target, f0, f1) in &ffn_overrides {
        notes.push(format!(
            "The {what} of layers {f0}–{} live in {} (`--override-tensor …={target}`); their attention and KV cache stay on the GPU.",
            f1 - 1,
            if target == "CPU" { format!("{main_machine}'s RAM") } else { format!("the RAM of the machine at {}", &target[5..target.len() - 1]) }
        ));
    }
    if super::Target::of_engine(plan.engine) != Some(super::Target::LlamaCpp) {
        notes.push(format!(
            "The plan holds {}'s buffers, not llama.cpp's: re-plan with `\"engine\": \"llama.cpp\"` for memory that matches these commands.",
            plan.engine.name()
        ));
    }
    notes.push(format!(
        "{main_machine} runs llama-server: the plan counts its token embedding, input copies and logits there, beside its layers."
    ));
    notes.push(format!(
        "`{RPC_SERVER}` is the RPC server's name in llama.cpp builds from June 2026 on; older builds call it `rpc-server`."
    ));
    if devices.iter().any(|d| d == "CUDA0") {
        notes.push(format!(
            "`CUDA0` is {main_machine}'s first CUDA GPU; a ROCm or Vulkan build names it `ROCm0` or `Vulkan0` (see `llama-server --list-devices`)."
        ));
    }
    if !rpc.is_empty() {
        notes.push("Device names are current llama.cpp's (`RPC0`, `RPC1`… in `--rpc` order); builds before October 2025 name them `RPC[host:port]`, and builds before the `--fit` flag reject `--fit off`: drop it there.".to_owned());
    }

    let mut out = String::new();
    let mut launches = Vec::new();
    let _ = writeln!(out, "# stageplan · {}", layout.summary());
    if tensor_parallel.is_empty() {
        let _ = writeln!(
            out,
            "# --tensor-split gives each device its blocks (+1 on the last for the output layer) of the {} slots;",
            layout.layers + plan.model.nextn_layers + 1
        );
        let _ = writeln!(out, "# llama.cpp then places exactly the plan's layers on each device, in --device order.");
    } else {
        let _ = writeln!(
            out,
            "# --split-mode tensor splits every layer's matrices, KV cache and output among the {} devices,",
            tensor_parallel.len()
        );
        let _ = writeln!(out, "# an even share each (--tensor-split), and all-reduces the hidden state twice a layer.");
    }
    out.push('\n');
    let mut step = 1;
    if !rpc.is_empty() {
        let _ =
            writeln!(out, "# {step}. On each machine below, serve its device to the host (llama.cpp's rpc-server).");
        let _ = writeln!(out, "#    One device per rpc-server keeps the RPC device numbers in --rpc order.");
        for ((_, endpoint), &(node, gpu)) in rpc.iter().zip(&served) {
            let port = endpoint.rsplit_once(':').map_or("50052", |(_, p)| p);
            // It listens where llama-server dials it when that is an IPv4 address (its
            // server socket takes no other, `ggml-rpc/transport.cpp`), else on every
            // interface: it has no authentication, so no wider than it must.
            let dialed = endpoint.rsplit_once(':').map_or(endpoint.as_str(), |(h, _)| h);
            let host = if dialed.parse::<std::net::Ipv4Addr>().is_ok() { dialed } else { "0.0.0.0" };
            let machine = layout.machine(node).0;
            let only_one = if layout.kind(node) == DeviceKind::Gpu {
                vec![("CUDA_VISIBLE_DEVICES", gpu.unwrap_or(0).to_string())]
            } else {
                Vec::new()
            };
            let mut args = vec![Word::Flag("--host"), Word::text(host), Word::Flag("--port"), Word::text(port)];
            // A CPU's rpc-server uses half the cores unless told; the plan counts them all.
            match (layout.kind(node), layout.threads(node)) {
                (DeviceKind::Cpu, Some(n)) => args.extend([Word::Flag("--threads"), Word::Text(n.to_string())]),
                (DeviceKind::Cpu, None) => args.extend([Word::Flag("--threads"), Word::Cores]),
                _ => {}
            }
            let rpc_server = Launch {
                machine: machine.to_owned(),
                env: only_one,
                program: RPC_SERVER,
                args,
                dialed: Some(endpoint.clone()),
            };
            let _ = writeln!(out, "#    on {machine}:");
            let _ = writeln!(out, "{}", rpc_server.shell_line());
            launches.push(rpc_server);
            if let Some((_, cpu)) = cpu_rpc.iter().find(|(n, _)| n == node) {
                let cpu_port = cpu.rsplit_once(':').map_or("50053", |(_, p)| p);
                let threads = offloads
                    .iter()
                    .zip(&layout.stages)
                    .find(|(_, (n, _, _))| *n == node)
                    .and_then(|(o, _)| *o)
                    .map_or(1, |o| o.threads);
                let args = vec![
                    Word::Flag("--host"),
                    Word::text(host),
                    Word::Flag("--port"),
                    Word::text(cpu_port),
                    Word::Flag("--device"),
                    Word::text("CPU"),
                    Word::Flag("--threads"),
                    Word::Text(threads.to_string()),
                ];
                let cpu_server = Launch {
                    machine: machine.to_owned(),
                    env: Vec::new(),
                    program: RPC_SERVER,
                    args,
                    dialed: Some(cpu.clone()),
                };
                let _ = writeln!(out, "#    and its CPU, for the layers' {what} the plan keeps in its RAM:");
                let _ = writeln!(out, "{}", cpu_server.shell_line());
                launches.push(cpu_server);
            }
        }
        out.push('\n');
        step += 1;
    }
    let _ = writeln!(out, "# {step}. On {main_machine}:");
    let mut args: Vec<Word> = vec![Word::Flag("--model"), Word::Text(model.clone())];
    if !rpc.is_empty() {
        args.push(Word::Flag("--rpc"));
        let endpoints: Vec<&str> = rpc.iter().chain(&cpu_rpc).map(|(_, e)| e.as_str()).collect();
        args.push(Word::Text(endpoints.join(",")));
    }
    args.extend([Word::Flag("--device"), Word::Text(devices.join(","))]);
    // Every block and the output layer, N + 1 slots, but the first layers in host RAM.
    let gpu_layers = layout.layers + plan.model.nextn_layers + 1 - host_layers - usize::from(head_on_host);
    args.extend([Word::Flag("--n-gpu-layers"), Word::Text(gpu_layers.to_string())]);
    // After `--rpc`, which registers the devices these name.
    for (target, f0, f1) in &ffn_overrides {
        let layers: Vec<String> = (*f0..*f1).map(|l| l.to_string()).collect();
        let rule = format!("blk\\.({})\\.{FFN_PATTERN}={target}", layers.join("|"));
        args.extend([Word::Flag("--override-tensor"), Word::Text(rule)]);
    }
    // The CPU threads of the main machine's RAM (its first GPU's stage holds them).
    let main_threads = layout
        .stages
        .iter()
        .zip(&offloads)
        .filter(|((node, _, _), _)| layout.machine(node).0 == main_machine)
        .find_map(|(_, o)| o.filter(|o| o.host_layers + o.host_ffn > 0))
        .map(|o| o.threads);
    if let Some(threads) = main_threads {
        args.extend([Word::Flag("--threads"), Word::Text(threads.to_string())]);
        // Read the host's weights into RAM, as planned, rather than map the file: mapped
        // pages are the page cache's to drop, and a mapped buffer spans every tensor between
        // its first and last, the GPU's too.
        args.extend([Word::Flag("--load-mode"), Word::text("none")]);
    }
    // Newer builds fit layers to free memory by themselves; the plan has done that.
    args.extend([Word::Flag("--fit"), Word::text("off")]);
    args.extend([
        Word::Flag("--tensor-split"),
        Word::Text(shares.iter().map(ToString::to_string).collect::<Vec<_>>().join(",")),
    ]);
    if !tensor_parallel.is_empty() {
        args.extend([Word::Flag("--split-mode"), Word::text("tensor")]);
    }
    args.extend([
        Word::Flag("--ctx-size"),
        Word::Text(context.to_string()),
        Word::Flag("--parallel"),
        Word::Text(workload.batch.max(1).to_string()),
    ]);
    // Explicit: `auto` may resolve either way, and the compute buffers differ; a quantized V
    // cache needs it (a quantized K does not).
    // `--split-mode tensor` requires it (`llama_init_from_model` refuses it off).
    let flash =
        workload.flash_attention || kv_v.starts_with('q') || kv_v.starts_with("iq") || !tensor_parallel.is_empty();
    args.extend([Word::Flag("--cache-type-k"), Word::Text(kv.clone()), Word::Flag("--cache-type-v"), Word::Text(kv_v)]);
    args.extend([Word::Flag("--flash-attn"), Word::text(if flash { "on" } else { "off" })]);
    if workload.prefill_chunk != UBATCH {
        let chunk = workload.prefill_chunk.min(i32::MAX as u64);
        args.extend([
            Word::Flag("--ubatch-size"),
            Word::Text(chunk.to_string()),
            Word::Flag("--batch-size"),
            Word::Text(chunk.max(BATCH).to_string()),
        ]);
    }
    // What rides along, each on its stage's device: the draft whole (`--device-draft`, every
    // layer), the projector (`--mmproj-device`).
    for rider in &plan.riders {
        let Some(stage) = layout.stages.iter().position(|&(node, _, _)| node == rider.node) else { continue };
        let device = &devices[stage];
        match rider.kind {
            RiderKind::Draft => {
                let file = rider.file.clone().unwrap_or_else(|| {
                    let file = format!(
                        "{}-{}.gguf",
                        rider.name,
                        if rider.weights.is_empty() { "bf16" } else { &rider.weights }
                    );
                    notes.push(format!(
                        "`{}` stands for the draft model's file; give its path in the plan's `riders`.",
                        crate::quote::line(&file)
                    ));
                    file
                });
                let kv = if KV_TYPES.contains(&rider.kv.as_str()) {
                    rider.kv.clone()
                } else {
                    notes.push(format!("llama.cpp has no `{}` KV cache for the draft; the command uses f16, which needs more memory than planned.", rider.kv));
                    "f16".to_owned()
                };
                args.extend([Word::Flag("--model-draft"), Word::Text(file)]);
                // Without a type, llama.cpp loads the draft and then frees it.
                args.extend([Word::Flag("--spec-type"), Word::text("draft-simple")]);
                args.extend([Word::Flag("--device-draft"), Word::Text(device.clone())]);
                // Every block and the output layer (`Layout::new` bounds the blocks).
                args.extend([Word::Flag("--gpu-layers-draft"), Word::Text(rider.layers.saturating_add(1).to_string())]);
                args.extend([
                    Word::Flag("--cache-type-k-draft"),
                    Word::Text(kv.clone()),
                    Word::Flag("--cache-type-v-draft"),
                    Word::Text(kv),
                ]);
                notes.push(format!(
                    "The draft model runs whole on {} ({device}) with its own KV cache at the same context; builds before 2026 have no `--spec-type`: drop it there.",
                    rider.node
                ));
            }
            RiderKind::Mmproj => {
                let file = rider.file.clone().unwrap_or_else(|| {
                    notes.push(
                        "`mmproj.gguf` stands for the vision projector's file; give its path in the plan's `riders`."
                            .to_owned(),
                    );
                    "mmproj.gguf".to_owned()
                });
                args.extend([Word::Flag("--mmproj"), Word::Text(file)]);
                args.extend([Word::Flag("--mmproj-device"), Word::Text(device.clone())]);
                notes.push(format!(
                    "The vision projector encodes images on {} ({device}); builds without `--mmproj-device` put it on the first GPU.",
                    rider.node
                ));
            }
        }
    }
    let server =
        Launch { machine: main_machine.to_owned(), env: Vec::new(), program: "llama-server", args, dialed: None };
    out.push_str(&server.flag_lines());
    launches.push(server);
    Ok((out, notes, launches))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Devices per slot from llama.cpp's rule, as counts in device order.
    fn counts(shares: &[usize], n_layer: usize) -> Vec<usize> {
        let shares: Vec<f32> = shares.iter().map(|&s| s as f32).collect();
        let mut counts = vec![0; shares.len()];
        for slot in llama_cpp_layers(&shares, n_layer, n_layer + 1) {
            counts[slot.expect("every slot offloaded")] += 1;
        }
        counts
    }

    #[test]
    fn the_rule_reproduces_published_examples() {
        // From llama.cpp's split (computed in float32): 32 blocks, -ts 3,1 → 25 and 8 (7 + output).
        assert_eq!(counts(&[3, 1], 32), vec![25, 8]);
        assert_eq!(counts(&[1, 1], 32), vec![17, 16]);
        assert_eq!(counts(&[1, 1, 1], 80), vec![27, 27, 27]);
        assert_eq!(counts(&[0, 1], 32), vec![0, 33]);
        // Partial offload keeps the first blocks on the CPU.
        let cpu = llama_cpp_layers(&[1.0, 1.0], 32, 10).iter().filter(|s| s.is_none()).count();
        assert_eq!(cpu, 23);
    }

    proptest::proptest! {
        /// For any layer counts, the exported shares put exactly those blocks on each device.
        #[test]
        fn shares_reproduce_any_split(counts_in in proptest::collection::vec(1usize..200, 1..16)) {
            let n_layer: usize = counts_in.iter().sum();
            let mut expected = counts_in.clone();
            *expected.last_mut().unwrap() += 1;
            proptest::prop_assert_eq!(counts(&tensor_split(&counts_in), n_layer), expected);
        }
    }
}

//! Plans checked against llama.cpp running here: plan → export → the printed commands run
//! verbatim on 127.0.0.1 → llama.cpp's own log of what each device allocated.
//!
//! Needs llama.cpp's binaries in `STAGEPLAN_LLAMA_CPP` (`cargo xtask test` builds them from
//! the pinned source) and the reference GGUF writer in `STAGEPLAN_PYTHON`. With
//! `--nocapture` it prints the planned-vs-allocated table `BENCHMARKS.md` records.
#![allow(clippy::print_stderr)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

mod agent;
mod arch;
mod fit;
mod gpus;
mod riders;
mod verify;

/// One end-to-end case: a model, a workload, and machines whose memory forces a split.
struct Case {
    name: &'static str,
    /// `write_gguf.py` arguments.
    model: &'static [&'static str],
    /// `llama-quantize` type, or none for F16.
    quantize: Option<&'static str>,
    workload: &'static str,
    /// Memory of each machine, in MiB.
    memory: &'static [u32],
    /// Stages the plan must use: the memory is chosen so that fewer do not fit.
    stages: usize,
}

const CASES: [Case; 5] = [
    Case {
        name: "f16-2-machines",
        model: &["--layers", "8"],
        quantize: None,
        workload: r#"{"context": 2048, "batch": 1, "kv": "f16"}"#,
        memory: &[75, 75],
        stages: 2,
    },
    Case {
        name: "q8_0-kv-q8_0-3-machines-tied",
        model: &["--layers", "12", "--tied"],
        quantize: Some("Q8_0"),
        workload: r#"{"context": 2048, "batch": 1, "kv": "q8_0"}"#,
        memory: &[MEMORY_3_TIED, MEMORY_3_TIED, MEMORY_3_TIED],
        stages: 3,
    },
    Case {
        // K and V apart (`-ctk q8_0 -ctv f16`), which llama.cpp runs without flash attention.
        name: "k-q8_0-v-f16-batch-2-no-flash-attention",
        model: &["--layers", "8", "--hidden", "512", "--heads", "8", "--head-dim", "128", "--kv-heads", "2"],
        quantize: None,
        workload: r#"{"context": 1024, "batch": 2, "kv": "q8_0", "kv_v": "f16", "flash_attention": false}"#,
        memory: &[96, 96],
        stages: 2,
    },
    Case {
        name: "f16-3-machines-uneven",
        model: &["--layers", "10", "--vocab", "16384"],
        quantize: None,
        workload: r#"{"context": 3072, "batch": 1, "kv": "f16"}"#,
        memory: &MEMORY_3_UNEVEN,
        stages: 3,
    },
    Case {
        name: "moe-4-experts-2-machines",
        model: &["--layers", "6", "--experts", "4", "--experts-used", "2", "--ffn", "512"],
        quantize: None,
        workload: r#"{"context": 2048, "batch": 1, "kv": "f16"}"#,
        memory: &[MEMORY_MOE, MEMORY_MOE],
        stages: 2,
    },
];

/// Machine sizes (MiB) under which the cases above need every machine: found with
/// `stageplan plan`, each just over what the smaller split would need per machine.
const MEMORY_3_TIED: u32 = 54;
const MEMORY_3_UNEVEN: [u32; 3] = [96, 60, 92];
const MEMORY_MOE: u32 = 78;

#[test]
fn llama_cpp_allocates_what_the_plan_says() {
    let Some((bin, work)) = llama_cpp_and_workspace("stageplan-engine") else { return };
    let cpu = this_cpu();
    let mut report = String::from(
        "| case | stage | planned MiB | allocated MiB | weights+KV planned / allocated | tok/s predicted / measured |\n",
    );
    for case in &CASES {
        run_case(case, &cpu, &bin, &work, &mut report);
    }
    eprintln!("{report}");
    let _ = std::fs::remove_dir_all(&work);
}

/// llama.cpp's bin directory (`STAGEPLAN_LLAMA_CPP`, which `cargo xtask test` sets) and a
/// fresh working directory named `prefix`; `None`, said, when the binaries are not given.
fn llama_cpp_and_workspace(prefix: &str) -> Option<(PathBuf, PathBuf)> {
    let Some(bin) = std::env::var_os("STAGEPLAN_LLAMA_CPP").map(PathBuf::from) else {
        eprintln!("skipped: set STAGEPLAN_LLAMA_CPP to llama.cpp's bin directory (cargo xtask test does)");
        return None;
    };
    let work = std::env::temp_dir().join(format!("{prefix}-{}", std::process::id()));
    std::fs::create_dir_all(&work).unwrap();
    Some((bin, work))
}

/// This machine's CPU as one llama.cpp thread sees it (`stageplan probe --cpu`): every
/// machine of a case runs here, one at a time, with `-t 1`.
struct Cpu {
    bandwidth: f64,
    compute: f64,
}

/// Every machine of a case is on 127.0.0.1.
const LOOPBACK: &str = r#"{"default": {"bandwidth": "5 GB/s", "latency": "0.05 ms"}}"#;

fn this_cpu() -> Cpu {
    let out = stageplan(&["probe", "--cpu", "--quick", "--threads", "1", "--format", "json"]);
    let json: Value = serde_json::from_str(&out).unwrap();
    let node = &json["nodes"][0];
    assert_eq!(node["threads"], 1, "the probe's node records its threads: {out}");
    let figure = |key: &str| node[key].as_f64().unwrap_or_else(|| panic!("the probe's node has `{key}`: {out}"));
    Cpu { bandwidth: figure("bandwidth"), compute: figure("compute") }
}

fn run_case(case: &Case, cpu: &Cpu, bin: &Path, work: &Path, report: &mut String) {
    let dir = work.join(case.name);
    std::fs::create_dir_all(&dir).unwrap();
    let f16 = dir.join("model-f16.gguf");
    let status = Command::new(python())
        .arg(repo().join("tests/engine/write_gguf.py"))
        .arg(&f16)
        .args(case.model)
        .status()
        .expect("the GGUF writer runs");
    assert!(status.success(), "{}: write_gguf.py failed", case.name);
    let model = match case.quantize {
        None => f16,
        Some(ty) => {
            let out = dir.join(format!("model-{ty}.gguf"));
            let status = Command::new(bin.join("llama-quantize"))
                .arg(&f16)
                .arg(&out)
                .arg(ty)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .expect("llama-quantize runs");
            assert!(status.success(), "{}: llama-quantize failed", case.name);
            out
        }
    };

    let names: Vec<String> = (0..case.memory.len()).map(|i| format!("m{i}")).collect();
    // The split is planned with fixed figures: the machines are alike, so with measured
    // figures the tie between equally fast splits fell by the probe's noise, run to run.
    let nodes = |bandwidth: &str, compute: &str| -> String {
        let nodes: Vec<String> = names
            .iter()
            .zip(case.memory)
            .map(|(name, mib)| {
                format!(
                    r#"{{"name": "{name}", "kind": "cpu", "memory": "{mib} MiB", "reserve": 0, "bandwidth": {bandwidth}, "compute": {compute}, "threads": 1}}"#
                )
            })
            .collect();
        nodes.join(", ")
    };
    let file = serde_json::to_string(&model.to_string_lossy()).unwrap();
    let scenario = format!(
        r#"{{"model": {{"file": {file}}}, "workload": {}, "objective": "latency", "nodes": [{}], "links": {LOOPBACK}}}"#,
        case.workload,
        nodes(r#""20 GB/s""#, r#""20 GFLOPS""#)
    );
    let (plan_out, plan) = plan_fitting(case.name, &dir, &scenario);
    let stages = plan["stages"].as_array().unwrap();
    assert_eq!(stages.len(), case.stages, "{}: the machines' memory should force {} stages", case.name, case.stages);
    let plan_path = dir.join("plan.json");
    std::fs::write(&plan_path, &plan_out).unwrap();
    // llama.cpp keeps the embedding and its host buffers where llama-server runs: `--main`
    // off the first stage is refused with the fix, not exported into an over-full machine.
    let last = stages.last().unwrap()["node"].as_str().unwrap();
    let refused = stageplan_fails(&["export", &plan_path.to_string_lossy(), "--to", "llama.cpp", "--main", last]);
    assert!(
        refused.contains("`--main`") && refused.contains("drop `--main`, or re-plan with that machine first"),
        "{}: `--main {last}` is refused with the fix: {refused}",
        case.name
    );

    let ports: Vec<u16> = stages.iter().map(|_| free_port()).collect();
    let (script, rpc, server) = export_llama_cpp(case.name, &plan_path, stages, &ports);
    let rpc: Vec<&String> = rpc.iter().collect();
    let server = [&server];
    assert_eq!(rpc.len(), stages.len(), "{}: one rpc-server per machine:\n{script}", case.name);

    let (children, log, speed) = run_verbatim(case.name, &rpc, server[0], bin, &dir);
    // One request is one stream, whatever the workload's batch; predicted for this split
    // with this CPU's probed figures.
    let probed = format!(
        r#"{{"model": {{"file": {file}}}, "workload": {}, "policy": "manual", "stages": {}, "nodes": [{}], "links": {LOOPBACK}}}"#,
        case.workload,
        serde_json::to_string(
            &stages.iter().map(|s| serde_json::json!({"node": s["node"], "layers": s["layers"]})).collect::<Vec<_>>()
        )
        .unwrap(),
        nodes(&cpu.bandwidth.to_string(), &cpu.compute.to_string())
    );
    let probed_path = dir.join("scenario-probed.json");
    std::fs::write(&probed_path, probed).unwrap();
    let probed_plan: Value =
        serde_json::from_str(&stageplan(&["plan", &probed_path.to_string_lossy(), "--format", "json"])).unwrap();
    let predicted = probed_plan["stream_tokens_per_s"].as_f64().unwrap();
    drop(children);

    let text = std::fs::read_to_string(&log).unwrap();
    let allocated = allocations(&text, &ports);
    // Layers land where the plan puts them: llama.cpp numbers RPC devices in `--rpc` order.
    for (s, stage) in stages.iter().enumerate() {
        let [start, end] = [stage["layers"][0].as_u64().unwrap(), stage["layers"][1].as_u64().unwrap()];
        for layer in start..end {
            let line = format!("layer {layer:>3} assigned to device RPC{s},");
            assert!(text.contains(&line), "{}: layer {layer} is not on stage {s}'s device RPC{s}", case.name);
        }
    }
    for (s, stage) in stages.iter().enumerate() {
        let memory = &stage["memory"];
        let mib = |v: &Value| v.as_u64().unwrap() as f64 / 1048576.0;
        let planned_total = mib(&memory["total"]) - mib(&memory["reserve"]);
        let planned_held = mib(&memory["weights"]) + mib(&memory["kv"]) + mib(&memory["embed_head"]);
        let got = &allocated[s];
        let node = stage["node"].as_str().unwrap();
        assert!(
            (got.held / planned_held - 1.0).abs() <= 0.02,
            "{}: stage {s} ({node}): weights+KV planned {planned_held:.2} MiB, llama.cpp allocated {:.2} MiB",
            case.name,
            got.held
        );
        assert!(
            got.total <= planned_total + 0.01,
            "{}: stage {s} ({node}) allocated {:.2} MiB, more than the plan's {planned_total:.2} MiB",
            case.name,
            got.total
        );
        // Not far over either: at these toy sizes the engine's buffers are most of a stage,
        // and the plan bounds them from above (real-size pipelines are held to 5% in arch.rs).
        assert!(
            got.total >= 0.8 * planned_total,
            "{}: stage {s} ({node}) allocated {:.2} MiB, under 80% of the plan's {planned_total:.2} MiB",
            case.name,
            got.total
        );
        report.push_str(&format!(
            "| {} | {s} | {planned_total:.2} | {:.2} | {planned_held:.2} / {:.2} | {} |\n",
            case.name,
            got.total,
            got.held,
            if s == 0 { format!("{predicted:.0} / {speed:.0}") } else { String::new() }
        ));
    }
}

/// A machine with system RAM (#34): the plan keeps some of a stage's tensors there, and its
/// export places exactly those there. Each machine's "GPU" is an rpc-server on this CPU and
/// its host RAM llama-server's own (or, on another machine, an rpc-server serving its CPU).
struct OffloadCase {
    name: &'static str,
    /// `write_gguf.py` arguments, or a family of `tests/engine/arches/` (`--family NAME`,
    /// small, by `write_arch.py`).
    model: &'static [&'static str],
    /// The scenario's `policy` and, for `manual`, its stages.
    policy: &'static str,
    /// Per machine: its device's MiB and its RAM's MiB.
    machines: &'static [(u32, u32)],
    /// What the plan must keep in RAM, per stage: (whole layers, layers' FFN).
    expect: &'static [(usize, usize)],
}

const OFFLOAD_CASES: [OffloadCase; 5] = [
    // An MoE model on a device too small for it: routed experts in RAM, attention on the device.
    OffloadCase {
        name: "moe-experts-in-ram",
        model: &["--layers", "6", "--experts", "8", "--experts-used", "2", "--ffn", "512"],
        policy: r#""optimal""#,
        machines: &[(63, 2048)],
        expect: &[(0, 5)],
    },
    // A dense model, layer offload only (llama.cpp's plain `-ngl`): the first layers in RAM.
    OffloadCase {
        name: "dense-partial-ngl",
        model: &["--layers", "8"],
        policy: r#""layer-offload""#,
        machines: &[(52, 2048)],
        expect: &[(5, 0)],
    },
    // A dense model, the fastest placement: whole layers and a layer's FFN in RAM.
    OffloadCase {
        name: "dense-layers-and-ffn-in-ram",
        model: &["--layers", "8"],
        policy: r#""optimal""#,
        machines: &[(52, 2048)],
        expect: &[(4, 1)],
    },
    // Two machines; the second keeps its layers' experts in its own RAM, served by a second
    // rpc-server on its CPU.
    OffloadCase {
        name: "moe-2-machines-experts-in-remote-ram",
        model: &["--layers", "6", "--experts", "8", "--experts-used", "2", "--ffn", "512"],
        policy: r#""manual", "stages": [{"node": "m0", "layers": [0, 3]}, {"node": "m1", "layers": [3, 6]}]"#,
        machines: &[(46, 1024), (50, 1024)],
        expect: &[(2, 1), (0, 3)],
    },
    // Snowflake Arctic: a dense MLP beside the experts in every layer, which the `-ot` moves
    // with them; the RAM holds both, as planned (#45).
    OffloadCase {
        name: "arctic-dense-ffn-beside-experts",
        model: &["--family", "arctic"],
        policy: r#""manual", "stages": [{"node": "m0", "layers": [0, 4], "offload": {"host_layers": 0, "host_ffn": 2}}]"#,
        machines: &[(64, 1024)],
        expect: &[(0, 2)],
    },
];

/// The CPU's buffer types as llama.cpp names them: its own, and the extra ones a weight
/// overridden to the CPU may take (`ggml-cpu/amx/amx.cpp`, `repack.cpp`, `kleidiai.cpp`).
const CPU_BUFFER_TYPES: [&str; 4] = ["CPU", "AMX", "CPU_REPACK", "CPU_KLEIDIAI"];

#[test]
fn llama_cpp_places_tensors_where_the_plan_says() {
    let Some((bin, work)) = llama_cpp_and_workspace("stageplan-offload") else { return };
    let mut report =
        String::from("| case | memory | planned MiB (weights+KV / total) | allocated MiB (weights+KV / total) |\n");
    for case in &OFFLOAD_CASES {
        run_offload_case(case, &bin, &work, &mut report);
    }
    eprintln!("{report}");
    let _ = std::fs::remove_dir_all(&work);
}

fn run_offload_case(case: &OffloadCase, bin: &Path, work: &Path, report: &mut String) {
    let dir = work.join(case.name);
    std::fs::create_dir_all(&dir).unwrap();
    let model = dir.join("model-f16.gguf");
    let family = case.model.strip_prefix(&["--family"]).and_then(|rest| rest.first());
    let status = match family {
        Some(family) => {
            Command::new(python()).arg(repo().join("tests/engine/write_arch.py")).arg(family).arg(&model).status()
        }
        None => {
            Command::new(python()).arg(repo().join("tests/engine/write_gguf.py")).arg(&model).args(case.model).status()
        }
    };
    assert!(status.expect("the GGUF writer runs").success(), "{}: the GGUF writer failed", case.name);
    // Fast devices (no per-layer cost: `peak`) and slow RAM, so RAM holds only what the
    // device cannot; the RAM's CPU with this machine's two threads (with one, a CPU's cost a
    // layer makes whole layers in RAM cheaper than experts).
    let nodes: Vec<String> = case
        .machines
        .iter()
        .enumerate()
        .map(|(i, (device, ram))| {
            format!(
                r#"{{"name": "m{i}", "kind": "gpu", "backend": "peak", "memory": "{device} MiB", "reserve": 0, "bandwidth": "200 GB/s", "compute": "5 TFLOPS", "threads": 1,
                    "host": {{"memory": "{ram} MiB", "reserve": 0, "bandwidth": "10 GB/s", "threads": 2}}}}"#
            )
        })
        .collect();
    let file = serde_json::to_string(&model.to_string_lossy()).unwrap();
    let scenario = format!(
        r#"{{"model": {{"file": {file}}}, "workload": {{"context": 2048, "batch": 1, "kv": "f16"}}, "objective": "latency",
            "policy": {}, "nodes": [{}], "links": {LOOPBACK}}}"#,
        case.policy,
        nodes.join(", ")
    );
    let (plan_out, plan) = plan_fitting(case.name, &dir, &scenario);
    let stages = plan["stages"].as_array().unwrap();
    let kept: Vec<(usize, usize)> = stages
        .iter()
        .map(|s| {
            let o = &s["offload"];
            (o["host_layers"].as_u64().unwrap() as usize, o["host_ffn"].as_u64().unwrap() as usize)
        })
        .collect();
    assert_eq!(kept, case.expect, "{}: what the plan keeps in RAM per stage: {plan_out}", case.name);
    // Each "GPU" is an rpc-server on this CPU: the plan file names the stages' devices `cpu`,
    // so the export serves each with an rpc-server (the placement is the plan's, unchanged).
    let mut served: Value = serde_json::from_str(&plan_out).unwrap();
    for stage in served["stages"].as_array_mut().unwrap() {
        stage["kind"] = "cpu".into();
    }
    let plan_path = dir.join("plan.json");
    std::fs::write(&plan_path, serde_json::to_string_pretty(&served).unwrap()).unwrap();

    // Device ports 10 apart: a machine's CPU rpc-server listens one above its device's.
    let base = free_port().min(60000);
    let ports: Vec<u16> = (0..stages.len() as u16).map(|i| base + 10 * i).collect();
    let (_, rpc, server) = export_llama_cpp(case.name, &plan_path, stages, &ports);
    let rpc: Vec<&String> = rpc.iter().collect();
    let (children, log, _) = run_verbatim(case.name, &rpc, &server, bin, &dir);
    drop(children);

    // Lossy: a random-weight model may generate bytes that are no UTF-8 into the log.
    let text = String::from_utf8_lossy(&std::fs::read(&log).unwrap()).into_owned();
    // Every layer where planned: whole layers in RAM on the CPU, the rest on its stage's
    // device; each FFN tensor of the planned layers overridden to that machine's RAM, and
    // no other tensor.
    let experts = plan["model"]["experts"].is_u64();
    let mut overridden = 0;
    for (s, stage) in stages.iter().enumerate() {
        let o = &stage["offload"];
        let [h0, h1] = [o["host_range"][0].as_u64().unwrap(), o["host_range"][1].as_u64().unwrap()];
        let [f0, f1] = [o["ffn_layers"][0].as_u64().unwrap(), o["ffn_layers"][1].as_u64().unwrap()];
        let [start, end] = [stage["layers"][0].as_u64().unwrap(), stage["layers"][1].as_u64().unwrap()];
        for layer in start..end {
            let device = if (h0..h1).contains(&layer) { "CPU".to_owned() } else { format!("RPC{s}") };
            let line = format!("layer {layer:>3} assigned to device {device},");
            assert!(text.contains(&line), "{}: layer {layer} is not on {device}", case.name);
        }
        // Overridden to the CPU, llama.cpp takes the CPU's extra buffer type where one fits
        // the tensor (`llama-model-loader.cpp`: AMX on Intel Xeons with AMX, else a repacked
        // or KleidiAI buffer): any of them is the server's RAM.
        let ram: Vec<String> = if s == 0 {
            CPU_BUFFER_TYPES.iter().map(|t| (*t).to_owned()).collect()
        } else {
            vec![format!("RPC0[127.0.0.1:{}]", ports[s] + 1)]
        };
        // The routed experts, and any dense FFN: a layer's whole FFN.
        let kinds: &[&str] = match (experts, family) {
            (true, Some(&"arctic")) => &["_exps", ""],
            (true, _) => &["_exps"],
            (false, _) => &[""],
        };
        for layer in f0..f1 {
            for (part, kind) in ["gate", "up", "down"].into_iter().flat_map(|p| kinds.iter().map(move |k| (p, k))) {
                let name = format!("blk.{layer}.ffn_{part}{kind}.weight");
                let moved = text.lines().any(|l| {
                    l.contains(&format!("tensor {name} "))
                        && ram.iter().any(|r| l.ends_with(&format!("overridden to {r}")))
                });
                assert!(moved, "{}: {name} is not overridden to {}", case.name, ram[0]);
                overridden += 1;
            }
        }
    }
    assert_eq!(
        text.matches("buffer type overridden").count(),
        overridden,
        "{}: only the planned tensors move",
        case.name
    );

    // Memory per device and per RAM: weights and KV within 2% of the plan, the whole never over.
    let mut memories: Vec<(String, &Value, Option<u16>)> = Vec::new();
    for (s, stage) in stages.iter().enumerate() {
        memories.push((format!("stage {s} device"), &stage["memory"], Some(ports[s])));
        let ram_port = if s == 0 { None } else { Some(ports[s] + 1) };
        memories.push((format!("stage {s} RAM"), &stage["offload"]["memory"], ram_port));
    }
    for (what, memory, port) in memories {
        let mib = |v: &Value| v.as_u64().unwrap() as f64 / 1048576.0;
        let planned_total = mib(&memory["total"]) - mib(&memory["reserve"]);
        let planned_held = mib(&memory["weights"]) + mib(&memory["kv"]) + mib(&memory["embed_head"]);
        let (held, total) = buffers(&text, port);
        if planned_held > 0.0 || held > 0.0 {
            assert!(
                (held / planned_held - 1.0).abs() <= 0.02,
                "{}: {what}: weights+KV planned {planned_held:.2} MiB, llama.cpp allocated {held:.2} MiB",
                case.name
            );
        }
        assert!(
            total <= planned_total + 0.01,
            "{}: {what}: allocated {total:.2} MiB, over the plan's {planned_total:.2}",
            case.name
        );
        report.push_str(&format!(
            "| {} | {what} | {planned_held:.2} / {planned_total:.2} | {held:.2} / {total:.2} |\n",
            case.name
        ));
    }
}

/// Weights+KV and every buffer (MiB) llama.cpp's log gives the rpc-server on `port`, or with
/// `None` llama-server's own CPU (and the CPU's other buffer types).
fn buffers(text: &str, port: Option<u16>) -> (f64, f64) {
    let (mut held, mut total) = (0.0, 0.0);
    for line in text.lines() {
        let Some((head, value)) = line.split_once(" buffer size =") else { continue };
        let mut words = head.split_whitespace().rev();
        let (kind, name) = (words.next().unwrap(), words.next().unwrap());
        let at = name
            .split_once('[')
            .map(|(_, e)| e.trim_end_matches(']').rsplit_once(':').unwrap().1.parse::<u16>().unwrap());
        if at != port {
            continue;
        }
        let mib: f64 = value.trim().trim_end_matches("MiB").trim().parse().unwrap();
        total += mib;
        if matches!(kind, "model" | "KV" | "RS") {
            held += mib;
        }
    }
    (held, total)
}

/// `stageplan plan` of `scenario` (written to `dir`): its JSON text and value, which must fit.
fn plan_fitting(name: &str, dir: &Path, scenario: &str) -> (String, Value) {
    let scenario_path = dir.join("scenario.json");
    std::fs::write(&scenario_path, scenario).unwrap();
    let plan_out = stageplan(&["plan", &scenario_path.to_string_lossy(), "--format", "json"]);
    let plan: Value = serde_json::from_str(&plan_out).unwrap();
    assert_eq!(plan["feasible"], true, "{name}: the plan does not fit: {plan_out}");
    (plan_out, plan)
}

/// `stageplan export --to llama.cpp` of the plan at `plan_path`, stage `s`'s machine at
/// 127.0.0.1:`ports[s]`: the script, its rpc-server commands and its one llama-server command.
fn export_llama_cpp(name: &str, plan_path: &Path, stages: &[Value], ports: &[u16]) -> (String, Vec<String>, String) {
    let mut args =
        vec!["export".to_owned(), plan_path.to_string_lossy().into_owned(), "--to".into(), "llama.cpp".into()];
    for (stage, port) in stages.iter().zip(ports) {
        args.push("--host".into());
        args.push(format!("{}=127.0.0.1:{port}", stage["node"].as_str().unwrap()));
    }
    let script = stageplan(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let (rpc, mut server): (Vec<String>, Vec<String>) =
        commands(&script).into_iter().partition(|c| !c.contains("llama-server"));
    assert_eq!(server.len(), 1, "{name}: one llama-server:\n{script}");
    let server = server.remove(0);
    (script, rpc, server)
}

/// Runs an export's commands verbatim on 127.0.0.1: its rpc-servers (waiting for each
/// `--port`), then llama-server with a verbose log, until it has generated 8 tokens. The
/// servers (killed when dropped), the log's path and the generation's tokens/s.
fn run_verbatim(name: &str, rpc: &[&String], server: &str, bin: &Path, dir: &Path) -> (Processes, PathBuf, f64) {
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let mut children = start_rpc_servers(name, rpc, &path);
    let http = free_port();
    let log = dir.join("llama-server.log");
    children.0.push(
        Command::new("bash")
            .args(["-c", &format!("exec {server}")])
            .env("PATH", &path)
            .env("LLAMA_ARG_PORT", http.to_string())
            .env("LLAMA_ARG_LOG_VERBOSITY", "5")
            .stdout(std::fs::File::create(&log).unwrap())
            .stderr(Stdio::from(std::fs::File::options().append(true).open(&log).unwrap()))
            .spawn()
            .expect("llama-server starts"),
    );
    wait_for(
        || request(http, "GET /health HTTP/1.0\r\n\r\n").is_some_and(|r| r.contains("\"ok\"")),
        &format!("{name}: llama-server health (log: {})", log.display()),
    );
    let body = r#"{"prompt": "hello world", "n_predict": 8, "temperature": 0}"#;
    let response = request(
        http,
        &format!(
            "POST /completion HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        ),
    )
    .expect("llama-server answers");
    let json: Value = serde_json::from_str(&response[response.find("\r\n\r\n").unwrap() + 4..]).unwrap();
    assert_eq!(json["tokens_predicted"], 8, "{name}: tokens are generated: {json}");
    let speed = json["timings"]["predicted_per_second"].as_f64().unwrap_or(0.0);
    (children, log, speed)
}

/// An export's rpc-server commands run verbatim (binaries on `path`), once each accepts
/// connections on its `--port`; killed when dropped.
fn start_rpc_servers(name: &str, rpc: &[&String], path: &str) -> Processes {
    let mut children = Processes(Vec::new());
    for command in rpc {
        children.0.push(
            Command::new("bash")
                .args(["-c", &format!("exec {command}")])
                .env("PATH", path)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("the rpc-server starts"),
        );
    }
    for (i, command) in rpc.iter().enumerate() {
        let port: u16 = command.split_whitespace().skip_while(|w| *w != "--port").nth(1).unwrap().parse().unwrap();
        let what = format!("{name}: rpc-server on {port}");
        wait_for(
            || {
                // One that exited (its port taken after all) fails now, not after the wait.
                if let Ok(Some(status)) = children.0[i].try_wait() {
                    panic!("{what} exited: {status}");
                }
                rpc_server_listens(port)
            },
            &what,
        );
    }
    children
}

/// What llama.cpp's log says one stage's machine allocated, in MiB.
#[derive(Default, Clone, Debug)]
struct Allocated {
    /// Model and KV buffers.
    held: f64,
    /// Every buffer: model, KV, compute, output.
    total: f64,
}

/// Buffers per stage: `RPC0[127.0.0.1:PORT]` by port; the host's (`CPU`, `CPU_Mapped`) on
/// the first stage, whose machine runs llama-server.
fn allocations(log: &str, ports: &[u16]) -> Vec<Allocated> {
    let mut out = vec![Allocated::default(); ports.len()];
    for line in log.lines() {
        let Some((head, value)) = line.split_once(" buffer size =") else { continue };
        let mib: f64 = value.trim().trim_end_matches("MiB").trim().parse().unwrap();
        let mut words = head.split_whitespace().rev();
        let kind = words.next().unwrap();
        let name = words.next().unwrap();
        let stage = match name.split_once('[') {
            Some((_, endpoint)) => {
                let port: u16 = endpoint.trim_end_matches(']').rsplit_once(':').unwrap().1.parse().unwrap();
                ports.iter().position(|&p| p == port).expect("a buffer on a planned machine")
            }
            None => 0,
        };
        out[stage].total += mib;
        if matches!(kind, "model" | "KV" | "RS") {
            out[stage].held += mib;
        }
    }
    out
}

/// The script's commands: comments dropped, continued lines joined.
fn commands(script: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    for line in script.lines() {
        let line = line.trim();
        if current.is_empty() && (line.is_empty() || line.starts_with('#')) {
            continue;
        }
        match line.strip_suffix('\\') {
            Some(part) => current.push_str(part),
            None => {
                current.push_str(line);
                out.push(std::mem::take(&mut current));
            }
        }
    }
    out
}

/// Child processes killed when dropped, so a failing case leaves no server behind.
struct Processes(Vec<Child>);

impl Drop for Processes {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn wait_for(mut ready: impl FnMut() -> bool, what: &str) {
    let started = Instant::now();
    while !ready() {
        assert!(started.elapsed() < Duration::from_secs(120), "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// One HTTP/1.0 exchange with 127.0.0.1:`port`; the whole response.
fn request(port: u16, text: &str) -> Option<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(120))).ok()?;
    stream.write_all(text.as_bytes()).ok()?;
    let mut out = String::new();
    stream.read_to_string(&mut out).ok()?;
    Some(out)
}

/// An rpc-server on a free port of 127.0.0.1 serving this machine's CPU as a device (a "GPU"
/// whose memory llama.cpp reports as the machine's), once it accepts connections.
fn cpu_rpc_server(bin: &Path) -> (Processes, u16) {
    let port = free_port();
    // With SIGPIPE ignored: the server outlives a client killed mid-reply (the tests stop
    // llama-server once it has logged its projection, perhaps while it uploads tensors),
    // where SIGPIPE's default would end it and fail the next family's run ("Failed to
    // connect"). An ignored signal stays ignored across `exec`.
    let server = Command::new("sh")
        .args(["-c", "trap '' PIPE; exec \"$0\" \"$@\""])
        .arg(bin.join("ggml-rpc-server"))
        .args(["--host", "127.0.0.1", "--port", &port.to_string(), "--device", "CPU"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("the rpc-server starts");
    let server = Processes(vec![server]);
    wait_for(|| rpc_server_listens(port), "rpc-server");
    (server, port)
}

/// Whether the rpc-server on `port` takes connections, asked without leaving it busy. It
/// serves one connection at a time from a short queue (`ggml-rpc.cpp` `start_server`), so a
/// bare connect-and-close may still be queued or served when the next client comes (a loop
/// of them stalls it by the third), and it gives up for good when an `accept` fails. So the
/// probe stays until the server has taken it: one byte that is no command, which the server
/// refuses and closes (`rpc_serve_client`), then the server's end of the connection.
fn rpc_server_listens(port: u16) -> bool {
    use std::io::{Read, Write};
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else { return false };
    let _ = stream.set_read_timeout(Some(std::time::Duration::from_secs(10)));
    if stream.write_all(&[0xff]).is_err() {
        return false;
    }
    let mut rest = Vec::new();
    let _ = stream.read_to_end(&mut rest);
    true
}

/// A port of 127.0.0.1 nothing listens on, never handed out twice in this process: below the
/// kernel's ephemeral range (32768 up), so no outgoing connection of the servers and clients
/// these tests start takes it between here and the server's bind (a port the kernel picked
/// for `:0` could be, and the tests run side by side).
fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU16, Ordering};
    // Apart per process, so two test runs on one machine rarely meet.
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let start = (std::process::id() % 64) as u16 * 192;
    for _ in 0..12000 {
        let offset = NEXT.fetch_add(1, Ordering::Relaxed) % 12000;
        let port = 20000 + (start + offset) % 12000;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port of 127.0.0.1 between 20000 and 32000");
}

fn stageplan(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_stageplan")).args(args).output().expect("stageplan runs");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "stageplan {args:?}: {stderr}{stdout}");
    String::from_utf8(out.stdout).unwrap()
}

/// Runs stageplan expecting a usage error (exit 2); its standard error.
fn stageplan_fails(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_stageplan")).args(args).output().expect("stageplan runs");
    assert_eq!(out.status.code(), Some(2), "stageplan {args:?} should fail with exit 2");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `write_gguf.py ARGS` writing `model`: the reference writer's random-weight GGUF.
fn write_gguf(model: &Path, args: &[&str]) {
    let status = Command::new(python())
        .arg(repo().join("tests/engine/write_gguf.py"))
        .arg(model)
        .args(args)
        .status()
        .expect("the GGUF writer runs");
    assert!(status.success(), "write_gguf.py {args:?} failed");
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn python() -> String {
    std::env::var("STAGEPLAN_PYTHON").unwrap_or_else(|_| "python3".to_owned())
}

//! A machine with several GPUs (#46): the plan's stages on `box/gpu0` and `box/gpu1`, its
//! export run verbatim, llama.cpp's own log of where each layer went and what each device
//! allocated against the plan. Each "GPU" is an rpc-server on this CPU, on the machine's
//! port plus its number, as the export serves a machine's GPUs it cannot name as local
//! `CUDA0`, `CUDA1` (the plan file names the stages' devices `cpu`, as the offload test does;
//! the placement is the plan's, unchanged). With the machine's RAM, each GPU's layers may
//! keep their experts there, on llama-server's own CPU (`--override-tensor …=CPU` per GPU's
//! stage), the RAM counted once.

use serde_json::Value;

use super::{
    CPU_BUFFER_TYPES, buffers, commands, free_port, llama_cpp_and_workspace, plan_fitting, python, repo, run_verbatim,
    stageplan,
};

/// One case: the model, each GPU's memory (MiB), the machine's RAM, and per stage (in
/// pipeline order) its node and how many layers' FFN the plan keeps in RAM.
struct GpusCase {
    name: &'static str,
    model: &'static [&'static str],
    gpu_mib: u32,
    host: Option<&'static str>,
    expect: &'static [(&'static str, usize)],
}

const GPUS_CASES: [GpusCase; 3] = [
    // Two GPUs are needed for the model and its cache, one is not enough.
    GpusCase {
        name: "2-gpus-layer-split",
        model: &["--layers", "8"],
        gpu_mib: 75,
        host: None,
        expect: &[("box/gpu0", 0), ("box/gpu1", 0)],
    },
    // An MoE model past both GPUs: the first GPU's layers keep experts in the machine's
    // (slow) RAM, the second GPU's stay whole.
    GpusCase {
        name: "2-gpus-experts-in-ram",
        model: &["--layers", "6", "--experts", "8", "--experts-used", "2", "--ffn", "512"],
        gpu_mib: 70,
        host: Some(r#"{"memory": "2048 MiB", "reserve": 0, "bandwidth": "0.5 GB/s", "threads": 2}"#),
        expect: &[("box/gpu0", 3), ("box/gpu1", 0)],
    },
    // Two more layers: both GPUs' layers keep experts in the one RAM, each stage's
    // `--override-tensor` naming its own.
    GpusCase {
        name: "2-gpus-experts-of-each-in-ram",
        model: &["--layers", "8", "--experts", "8", "--experts-used", "2", "--ffn", "512"],
        gpu_mib: 70,
        host: Some(r#"{"memory": "2048 MiB", "reserve": 0, "bandwidth": "0.5 GB/s", "threads": 2}"#),
        expect: &[("box/gpu0", 2), ("box/gpu1", 4)],
    },
];

#[test]
fn a_machines_gpus_hold_the_layers_the_plan_gives_them() {
    let Some((bin, work)) = llama_cpp_and_workspace("stageplan-gpus") else { return };
    for case in &GPUS_CASES {
        run_gpus_case(case, &bin, &work.join(case.name));
    }
    let _ = std::fs::remove_dir_all(&work);
}

fn run_gpus_case(case: &GpusCase, bin: &std::path::Path, work: &std::path::Path) {
    std::fs::create_dir_all(work).unwrap();
    let name = case.name;
    let model = work.join("model-f16.gguf");
    let status = std::process::Command::new(python())
        .arg(repo().join("tests/engine/write_gguf.py"))
        .arg(&model)
        .args(case.model)
        .status()
        .expect("the GGUF writer runs");
    assert!(status.success(), "{name}: write_gguf.py failed");
    let file = serde_json::to_string(&model.to_string_lossy()).unwrap();
    let host = case.host.map_or_else(String::new, |h| format!(r#""host": {h}, "#));
    let scenario = format!(
        r#"{{"model": {{"file": {file}}}, "workload": {{"context": 2048, "batch": 1, "kv": "f16"}}, "objective": "latency",
            "nodes": [{{"name": "box", "gpu_link": "pcie4-x8", {host}
                        "gpus": [{{"memory": "{} MiB", "bandwidth": "200 GB/s", "compute": "5 TFLOPS", "reserve": 0, "backend": "peak", "count": 2}}]}}]}}"#,
        case.gpu_mib
    );
    let (plan_out, plan) = plan_fitting(name, work, &scenario);
    let stages = plan["stages"].as_array().unwrap();
    let planned: Vec<(&str, usize)> = stages
        .iter()
        .map(|s| (s["node"].as_str().unwrap(), s["offload"]["host_ffn"].as_u64().unwrap_or(0) as usize))
        .collect();
    assert_eq!(planned, case.expect, "{name}: stages and the FFN they keep in RAM: {plan_out}");
    let (base, script) = export_on_rpc_servers(work, &plan_out);
    let (rpc, mut server): (Vec<String>, Vec<String>) =
        commands(&script).into_iter().partition(|c| !c.contains("llama-server"));
    assert_eq!(server.len(), 1, "{name}: one llama-server:\n{script}");
    let server = server.remove(0);
    // Each stage's GPU on the machine's port plus its number.
    let ports: Vec<u16> = stages
        .iter()
        .map(|s| base + s["node"].as_str().unwrap().strip_prefix("box/gpu").unwrap().parse::<u16>().unwrap())
        .collect();
    for port in &ports {
        assert!(
            rpc.iter().any(|c| c.contains(&format!("--host 127.0.0.1 --port {port}"))),
            "{name}: GPU on {port}:\n{script}"
        );
    }
    let rpc: Vec<&String> = rpc.iter().collect();
    let (children, log, _) = run_verbatim(name, &rpc, &server, bin, work);
    drop(children);

    let text = String::from_utf8_lossy(&std::fs::read(&log).unwrap()).into_owned();
    let mut overridden = 0;
    // The machine's one RAM: what the stages plan there, together.
    let mut in_ram: Option<Value> = None;
    for (s, stage) in stages.iter().enumerate() {
        let [start, end] = [stage["layers"][0].as_u64().unwrap(), stage["layers"][1].as_u64().unwrap()];
        for layer in start..end {
            let line = format!("layer {layer:>3} assigned to device RPC{s},");
            assert!(text.contains(&line), "{name}: layer {layer} is not on {}'s RPC{s}", planned[s].0);
        }
        // The experts the plan keeps in RAM, on llama-server's CPU, and no other tensor.
        let o = &stage["offload"];
        let (f0, f1) = (o["ffn_layers"][0].as_u64().unwrap_or(0), o["ffn_layers"][1].as_u64().unwrap_or(0));
        for layer in f0..f1 {
            for part in ["gate", "up", "down"] {
                let tensor = format!("tensor blk.{layer}.ffn_{part}_exps.weight ");
                let moved = text.lines().any(|l| {
                    l.contains(&tensor) && CPU_BUFFER_TYPES.iter().any(|t| l.ends_with(&format!("overridden to {t}")))
                });
                assert!(moved, "{name}: {tensor}is not in RAM");
                overridden += 1;
            }
        }
        // What this GPU's server allocated: weights and KV within 2% of the plan, the whole
        // never over it.
        let (held, total) = buffers(&text, Some(ports[s]));
        check(name, planned[s].0, &stage["memory"], held, total);
        if o.is_object() {
            let sum = |field: &str| {
                o["memory"][field].as_u64().unwrap() + in_ram.as_ref().map_or(0, |m| m[field].as_u64().unwrap())
            };
            let fields = ["weights", "kv", "embed_head", "total", "reserve"];
            in_ram = Some(fields.iter().map(|&f| (f.to_owned(), Value::from(sum(f)))).collect());
        }
    }
    if let Some(memory) = &in_ram {
        let (held, total) = buffers(&text, None);
        check(name, "box's RAM", memory, held, total);
    }
    assert_eq!(text.matches("buffer type overridden").count(), overridden, "{name}: only the planned tensors move");
}

/// The llama.cpp export of `plan_out` with `box` at 127.0.0.1 on a port whose next is free
/// too, each stage's device an rpc-server on this CPU (the plan file names them `cpu`, the
/// placement unchanged): the machine's port, and the script.
fn export_on_rpc_servers(work: &std::path::Path, plan_out: &str) -> (u16, String) {
    let mut served: Value = serde_json::from_str(plan_out).unwrap();
    for stage in served["stages"].as_array_mut().unwrap() {
        stage["kind"] = "cpu".into();
    }
    let plan_path = work.join("plan.json");
    std::fs::write(&plan_path, serde_json::to_string_pretty(&served).unwrap()).unwrap();
    // The machine's GPUs' servers listen on its port and the next, both free: `free_port`
    // hands ports out in a row to every test running beside this one.
    let base = loop {
        let base = free_port();
        if free_port() == base + 1 {
            break base;
        }
    };
    let host = format!("box=127.0.0.1:{base}");
    (base, stageplan(&["export", &plan_path.to_string_lossy(), "--to", "llama.cpp", "--host", &host]))
}

/// Weights and KV within 2% of the plan's, the whole never over it.
fn check(name: &str, what: &str, memory: &Value, held: f64, total: f64) {
    let mib = |v: &Value| v.as_u64().unwrap() as f64 / 1048576.0;
    let planned_total = mib(&memory["total"]) - mib(&memory["reserve"]);
    let planned_held = mib(&memory["weights"]) + mib(&memory["kv"]) + mib(&memory["embed_head"]);
    eprintln!("| {name} | {what} | {planned_held:.2} / {planned_total:.2} | {held:.2} / {total:.2} |");
    assert!(
        (held / planned_held - 1.0).abs() <= 0.02,
        "{name}: {what}: weights+KV planned {planned_held:.2} MiB, llama.cpp allocated {held:.2} MiB"
    );
    assert!(
        total <= planned_total + 0.01,
        "{name}: {what}: allocated {total:.2} MiB, over the plan's {planned_total:.2}"
    );
}

/// Tensor parallel (#46): a model neither GPU holds alone, on GPUs slow to read and joined
/// by a fast link, is planned as one group; its export, run verbatim, makes llama.cpp's
/// meta device over both GPUs' rpc-servers (`--split-mode tensor`), each holding the share
/// of weights and KV cache the plan gives it.
#[test]
fn a_tensor_parallel_group_holds_each_gpus_share() {
    let Some((bin, work)) = llama_cpp_and_workspace("stageplan-tensor") else { return };
    let name = "2-gpus-tensor-parallel";
    let model = work.join("model-f16.gguf");
    let status = std::process::Command::new(python())
        .arg(repo().join("tests/engine/write_gguf.py"))
        .arg(&model)
        .args(["--layers", "8"])
        .status()
        .expect("the GGUF writer runs");
    assert!(status.success(), "{name}: write_gguf.py failed");
    let file = serde_json::to_string(&model.to_string_lossy()).unwrap();
    let scenario = format!(
        r#"{{"model": {{"file": {file}}}, "workload": {{"context": 2048, "batch": 1, "kv": "f16"}}, "objective": "latency",
            "nodes": [{{"name": "box", "gpu_link": "nvlink-bridge",
                        "gpus": [{{"memory": "75 MiB", "bandwidth": "2 GB/s", "compute": "5 TFLOPS", "reserve": 0, "backend": "peak", "count": 2}}]}}]}}"#
    );
    let (plan_out, plan) = plan_fitting(name, &work, &scenario);
    let stage = &plan["stages"][0];
    assert_eq!(stage["tensor_parallel"], serde_json::json!([0, 1]), "{name}: one group of both GPUs: {plan_out}");
    let (_, script) = export_on_rpc_servers(&work, &plan_out);
    let (rpc, mut server): (Vec<String>, Vec<String>) =
        commands(&script).into_iter().partition(|c| !c.contains("llama-server"));
    assert_eq!((rpc.len(), server.len()), (2, 1), "{name}: two GPU servers, one llama-server:\n{script}");
    let server = server.remove(0);
    assert!(server.contains("--split-mode tensor") && server.contains("--device RPC0,RPC1"), "{server}");
    let rpc: Vec<&String> = rpc.iter().collect();
    let (children, log, _) = run_verbatim(name, &rpc, &server, &bin, &work);
    drop(children);
    let text = String::from_utf8_lossy(&std::fs::read(&log).unwrap()).into_owned();
    assert!(text.contains("Meta device"), "{name}: llama.cpp made no meta device");
    // The meta buffers report their largest device's share: each GPU's, split evenly.
    let meta = |kind: &str| -> f64 {
        text.lines()
            .filter_map(|l| l.split_once(&format!("Meta() {kind} buffer size =")))
            .map(|(_, v)| v.trim().trim_end_matches("MiB").trim().parse::<f64>().unwrap())
            .sum()
    };
    let held = meta("model") + meta("KV");
    let mib = |v: &Value| v.as_u64().unwrap() as f64 / 1048576.0;
    let memory = &stage["memory"];
    let planned = mib(&memory["weights"]) + mib(&memory["kv"]) + mib(&memory["embed_head"]);
    eprintln!("| {name} | each GPU | {planned:.2} | {held:.2} |");
    assert!(
        (held / planned - 1.0).abs() <= 0.02,
        "{name}: weights+KV per GPU planned {planned:.2} MiB, llama.cpp's meta device holds {held:.2} MiB"
    );
    let _ = std::fs::remove_dir_all(&work);
}

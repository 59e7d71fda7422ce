//! A machine with several GPUs (#46): the plan's stages on `box/gpu0` and `box/gpu1`, its
//! export run verbatim, llama.cpp's own log of where each layer went and what each device
//! allocated against the plan. Each "GPU" is an rpc-server on this CPU, on the machine's
//! port plus its number, as the export serves a machine's GPUs it cannot name as local
//! `CUDA0`, `CUDA1` (the plan file names the stages' devices `cpu`, as the offload test does;
//! the placement is the plan's, unchanged).

use serde_json::Value;

use super::{commands, free_port, llama_cpp_and_workspace, plan_fitting, python, repo, run_verbatim, stageplan};

/// Each GPU's memory (MiB): two are needed for the model and its cache, one is not enough.
const GPU_MIB: u32 = 75;

#[test]
fn a_machines_gpus_hold_the_layers_the_plan_gives_them() {
    let Some((bin, work)) = llama_cpp_and_workspace("stageplan-gpus") else { return };
    let model = work.join("model-f16.gguf");
    let status = std::process::Command::new(python())
        .arg(repo().join("tests/engine/write_gguf.py"))
        .arg(&model)
        .args(["--layers", "8"])
        .status()
        .expect("the GGUF writer runs");
    assert!(status.success(), "write_gguf.py failed");
    let file = serde_json::to_string(&model.to_string_lossy()).unwrap();
    let scenario = format!(
        r#"{{"model": {{"file": {file}}}, "workload": {{"context": 2048, "batch": 1, "kv": "f16"}}, "objective": "latency",
            "nodes": [{{"name": "box", "gpu_link": "pcie4-x8",
                        "gpus": [{{"memory": "{GPU_MIB} MiB", "bandwidth": "200 GB/s", "compute": "5 TFLOPS", "reserve": 0, "backend": "peak", "count": 2}}]}}]}}"#
    );
    let (plan_out, plan) = plan_fitting("gpus", &work, &scenario);
    let stages = plan["stages"].as_array().unwrap();
    let on: Vec<&str> = stages.iter().map(|s| s["node"].as_str().unwrap()).collect();
    assert_eq!(on, ["box/gpu0", "box/gpu1"], "both GPUs of one machine: {plan_out}");
    let mut served: Value = serde_json::from_str(&plan_out).unwrap();
    for stage in served["stages"].as_array_mut().unwrap() {
        stage["kind"] = "cpu".into();
    }
    let plan_path = work.join("plan.json");
    std::fs::write(&plan_path, serde_json::to_string_pretty(&served).unwrap()).unwrap();

    // The machine's address; its GPUs' servers listen on its port and the next.
    let base = free_port().min(60000);
    let script = stageplan(&[
        "export",
        &plan_path.to_string_lossy(),
        "--to",
        "llama.cpp",
        "--host",
        &format!("box=127.0.0.1:{base}"),
    ]);
    let (rpc, mut server): (Vec<String>, Vec<String>) =
        commands(&script).into_iter().partition(|c| !c.contains("llama-server"));
    assert_eq!(server.len(), 1, "one llama-server:\n{script}");
    let server = server.remove(0);
    let ports = [base, base + 1];
    for (rpc, port) in rpc.iter().zip(ports) {
        assert!(rpc.contains(&format!("--host 127.0.0.1 --port {port}")), "GPU on {port}:\n{script}");
    }
    assert!(server.contains(&format!("--rpc 127.0.0.1:{base},127.0.0.1:{}", base + 1)), "{script}");
    let rpc: Vec<&String> = rpc.iter().collect();
    let (children, log, _) = run_verbatim("gpus", &rpc, &server, &bin, &work);
    drop(children);

    let text = String::from_utf8_lossy(&std::fs::read(&log).unwrap()).into_owned();
    for (s, stage) in stages.iter().enumerate() {
        let [start, end] = [stage["layers"][0].as_u64().unwrap(), stage["layers"][1].as_u64().unwrap()];
        for layer in start..end {
            let line = format!("layer {layer:>3} assigned to device RPC{s},");
            assert!(text.contains(&line), "layer {layer} is not on {}'s RPC{s}", on[s]);
        }
        // What this GPU's server allocated: weights and KV within 2% of the plan, the whole
        // never over it.
        let (mut held, mut total) = (0.0, 0.0);
        for line in text.lines() {
            let Some((head, value)) = line.split_once(" buffer size =") else { continue };
            let mut words = head.split_whitespace().rev();
            let (kind, name) = (words.next().unwrap(), words.next().unwrap());
            if !name.ends_with(&format!(":{}]", ports[s])) {
                continue;
            }
            let mib: f64 = value.trim().trim_end_matches("MiB").trim().parse().unwrap();
            total += mib;
            if matches!(kind, "model" | "KV") {
                held += mib;
            }
        }
        let memory = &stage["memory"];
        let mib = |v: &Value| v.as_u64().unwrap() as f64 / 1048576.0;
        let planned_total = mib(&memory["total"]) - mib(&memory["reserve"]);
        let planned_held = mib(&memory["weights"]) + mib(&memory["kv"]) + mib(&memory["embed_head"]);
        eprintln!("| gpus | {} | {planned_held:.2} / {planned_total:.2} | {held:.2} / {total:.2} |", on[s]);
        assert!(
            (held / planned_held - 1.0).abs() <= 0.02,
            "{}: weights+KV planned {planned_held:.2} MiB, llama.cpp allocated {held:.2} MiB",
            on[s]
        );
        assert!(
            total <= planned_total + 0.01,
            "{}: allocated {total:.2} MiB, over the plan's {planned_total:.2}",
            on[s]
        );
    }
    let _ = std::fs::remove_dir_all(&work);
}

//! `stageplan verify` against llama.cpp running here: the plan's export started by the
//! agent's supervisor, a completion measured, and a receipt whose memory matches llama.cpp's
//! own log on every machine.

use super::*;

#[test]
fn verify_runs_the_export_and_receipts_what_llama_cpp_allocated() {
    let Some((bin, work)) = llama_cpp_and_workspace("stageplan-verify") else { return };
    let model = work.join("model-f16.gguf");
    write_gguf(&model, &["--layers", "8"]);
    // Two machines whose memory forces two stages, as `f16-2-machines` in main.rs.
    let node = |name: &str| {
        format!(
            r#"{{"name": "{name}", "kind": "cpu", "memory": "75 MiB", "reserve": 0, "bandwidth": "20 GB/s", "compute": "20 GFLOPS", "threads": 1}}"#
        )
    };
    let scenario = format!(
        r#"{{"model": {{"file": {}}}, "workload": {{"context": 2048, "prompt": 64, "response": 32}}, "nodes": [{}, {}], "links": {LOOPBACK}}}"#,
        serde_json::to_string(&model.to_string_lossy()).unwrap(),
        node("m0"),
        node("m1")
    );
    let scenario_path = work.join("scenario.json");
    std::fs::write(&scenario_path, scenario).unwrap();
    let receipt_path = work.join("receipt.json");
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_stageplan"))
        .args(["verify", &scenario_path.to_string_lossy(), "--engine", &bin.to_string_lossy()])
        .args(["--out", &receipt_path.to_string_lossy()])
        .output()
        .expect("stageplan runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // 1: a speed outside its band, which spec-sheet figures for this CPU may well be.
    assert!(matches!(out.status.code(), Some(0 | 1)), "stageplan verify: {stderr}{stdout}");
    let receipt: Value = serde_json::from_str(&std::fs::read_to_string(&receipt_path).unwrap()).unwrap();
    let machines = receipt["machines"].as_array().unwrap();
    assert_eq!(machines.len(), 2, "{receipt}");
    for m in machines {
        let planned = m["planned_held_bytes"].as_f64().unwrap();
        let allocated = m["allocated_held_bytes"].as_f64().unwrap();
        assert!(
            (allocated / planned - 1.0).abs() <= 0.02,
            "{}: planned {planned}, allocated {allocated}",
            m["machine"]
        );
        assert!(m["allocated_total_bytes"].as_u64() <= m["planned_total_bytes"].as_u64(), "{m}");
    }
    assert!(!receipt["far"].as_array().unwrap().iter().any(|f| f.as_str().unwrap().contains("holds")), "{receipt}");
    assert_eq!(receipt["decode"]["tokens"], 32, "{receipt}");
    assert_eq!(receipt["prefill"]["tokens"], 64, "the workload's prompt, token for token: {receipt}");
    assert!(receipt["decode"]["measured_per_s"].as_f64().unwrap() > 0.0);
    assert!(stdout.contains("run by llama.cpp on this machine"), "{stdout}");
    eprintln!("stageplan verify, 2 machines on 127.0.0.1, {:.1} s:\n{stdout}", started.elapsed().as_secs_f64());
    // Nothing it started is left: no rpc-server or llama-server of this model runs on.
    let model_arg = model.to_string_lossy().into_owned();
    let left = std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
        std::fs::read(e.path().join("cmdline")).is_ok_and(|c| String::from_utf8_lossy(&c).contains(&model_arg))
    });
    assert!(!left, "a process with the model's path outlived `stageplan verify`");

    // Killed outright while its engines run, it leaves none behind: each runs under
    // `stageplan guard`, which kills its engine's group when `verify` is gone.
    let mut verify = Command::new(env!("CARGO_BIN_EXE_stageplan"))
        .args(["verify", &scenario_path.to_string_lossy(), "--engine", &bin.to_string_lossy()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("stageplan runs");
    let guards = format!("guard\0--parent\0{}\0", verify.id());
    let running = |needle: &str| {
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter(|e| {
                std::fs::read(e.path().join("cmdline")).is_ok_and(|c| String::from_utf8_lossy(&c).contains(needle))
            })
            .count()
    };
    wait_for(|| running(&model_arg) > 0, "verify's llama-server");
    assert!(running(&guards) >= 3, "two rpc-servers and llama-server, each under a guard");
    verify.kill().unwrap();
    verify.wait().unwrap();
    let killed = Instant::now();
    wait_for(|| running(&guards) == 0 && running(&model_arg) == 0, "the guards to kill their engines");
    eprintln!("verify killed outright: its engines gone {:.2} s later", killed.elapsed().as_secs_f64());

    // An engine that fails to start is reported with its log's last lines, not retried.
    let out = Command::new(env!("CARGO_BIN_EXE_stageplan"))
        .args(["verify", &scenario_path.to_string_lossy(), "--engine", &bin.to_string_lossy()])
        .args(["--model", &work.join("missing.gguf").to_string_lossy()])
        .output()
        .expect("stageplan runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.starts_with("error: llama-server exited with status 1 before serving: "), "{stderr}");
    assert!(stderr.contains("missing.gguf"), "its log says which file: {stderr}");
    let _ = std::fs::remove_dir_all(&work);
}

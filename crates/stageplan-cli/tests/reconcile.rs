//! The control loop from the command line: register nodes, deploy from a scenario, run
//! passes, lose a node, and read the status — all on one redb file, as a user would.

use std::path::Path;
use std::process::Command;

fn run(dir: &Path, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_stageplan")).args(args).current_dir(dir).output().expect("runs");
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("UTF-8")
}

fn status(dir: &Path) -> serde_json::Value {
    serde_json::from_str(&run(dir, &["status", "--format", "json"])).expect("JSON status")
}

#[test]
fn deploy_reconcile_lose_a_node_and_recover() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cli-reconcile");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let scenario = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/scenarios/home-70b.json");
    std::fs::write(
        dir.join("llama.json"),
        serde_json::json!({"name": "llama-70b", "replicas": 3, "scenario": scenario}).to_string(),
    )
    .unwrap();
    run(&dir, &["nodes", "add", "gpu-a", "--memory", "160 GiB", "--gpus", "8"]);
    run(&dir, &["nodes", "add", "gpu-b", "--memory", "96 GiB", "--gpus", "4"]);
    run(&dir, &["nodes", "add", "gpu-c", "--memory", "96 GiB", "--gpus", "4"]);
    assert!(run(&dir, &["deploy", "llama.json"]).contains("3 replicas × 4 stages"));
    run(&dir, &["reconcile", "--passes", "2", "--interval", "10ms"]);
    let placed = status(&dir);
    assert_eq!(placed["deployments"][0]["running"], 3, "{placed}");
    assert_eq!(placed["assignments"], 12);
    assert_eq!(placed["invariants"], "ok");
    let on_b = placed["nodes"].as_array().unwrap().iter().find(|n| n["name"] == "gpu-b").unwrap()["stages"].clone();

    run(&dir, &["nodes", "remove", "gpu-b"]);
    run(&dir, &["reconcile", "--passes", "1", "--interval", "10ms"]);
    let after = status(&dir);
    assert_eq!(after["deployments"][0]["running"], 3, "gpu-b's {on_b} stages moved: {after}");
    assert_eq!(after["invariants"], "ok");
    let listed = run(&dir, &["nodes", "list"]);
    assert!(listed.contains("gpu-a") && !listed.contains("gpu-b"), "{listed}");

    // Scale to zero: every GPU comes back.
    std::fs::write(
        dir.join("llama.json"),
        serde_json::json!({"name": "llama-70b", "replicas": 0, "scenario": scenario}).to_string(),
    )
    .unwrap();
    run(&dir, &["deploy", "llama.json"]);
    run(&dir, &["reconcile", "--passes", "1", "--interval", "10ms"]);
    let empty = status(&dir);
    assert!(empty["nodes"].as_array().unwrap().iter().all(|n| n["gpus_used"] == 0 && n["memory_used"] == 0), "{empty}");
}

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
    // The scenario's `mac` is Apple silicon: its stage is held in RAM, on a GPU-less node.
    run(&dir, &["nodes", "add", "mac-studio", "--memory", "192 GiB"]);
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

/// Two `stageplan reconcile` processes on one etcd: one leads and places, the other follows;
/// killing the leader hands the loop over; autoscaling follows the metrics file.
#[test]
fn two_loops_on_etcd_one_leads_and_the_other_takes_over() {
    let etcd = stageplan_store::testing::EtcdServer::start();
    let dir = stageplan_store::testing::temp_dir("cli-etcd");
    let store = format!("etcd://{}", etcd.address());
    let on = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--store", &store]);
        run(&dir, &all)
    };
    on(&["nodes", "add", "gpu-a", "--memory", "640 GiB", "--gpus", "8"]);
    on(&["nodes", "add", "gpu-b", "--memory", "640 GiB", "--gpus", "8"]);
    std::fs::write(
        dir.join("chat.json"),
        serde_json::json!({
            "name": "chat", "replicas": 2, "min_replicas": 1, "max_replicas": 8,
            "stages": [{"memory": 20u64 << 30, "gpus": 1}, {"memory": 20u64 << 30, "gpus": 1}],
            "autoscale": {"target": 0.5, "up_cooldown_ms": 4000}
        })
        .to_string(),
    )
    .unwrap();
    on(&["deploy", "chat.json"]);
    std::fs::write(dir.join("metrics.json"), r#"{"chat": 1.0}"#).unwrap();
    let spawn = |id: &str| {
        Command::new(env!("CARGO_BIN_EXE_stageplan"))
            .args(["reconcile", "--store", &store, "--interval", "200ms", "--lease", "1s", "--id", id])
            .args(["--metrics", "metrics.json"])
            .current_dir(&dir)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("runs")
    };
    let mut first = spawn("first");
    std::thread::sleep(std::time::Duration::from_millis(600));
    let mut second = spawn("second");
    let wait_for = |what: &str, done: &dyn Fn(&serde_json::Value) -> bool| {
        let started = std::time::Instant::now();
        loop {
            let status: serde_json::Value =
                serde_json::from_str(&on(&["status", "--format", "json"])).expect("JSON status");
            assert_eq!(status["invariants"], "ok");
            if done(&status) {
                return status;
            }
            assert!(started.elapsed().as_secs() < 15, "{what}: {status}");
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    };
    // Utilization 1.0 against a 0.5 target doubles the replicas: 2 → 4.
    wait_for("scaled to 4 and placed", &|s| s["deployments"][0]["desired"] == 4 && s["deployments"][0]["running"] == 4);
    let scaled = std::time::Instant::now();
    // The leader dies; the follower takes over within the lease, keeps the persisted
    // cooldown, and scales 4 → 8 once it has passed.
    first.kill().unwrap();
    first.wait().unwrap();
    wait_for("scaled to 8 by the new leader", &|s| s["deployments"][0]["desired"] == 8);
    // The new leader leads about a second after the kill; without the persisted 4 s
    // cooldown it would scale at once.
    assert!(scaled.elapsed().as_millis() >= 3_000, "scaled again after {:?}", scaled.elapsed());
    wait_for("8 placed", &|s| s["deployments"][0]["running"] == 8);
    // SIGTERM: the loop stops between passes and resigns, so nobody leads at once.
    let term = Command::new("kill").args(["-TERM", &second.id().to_string()]).status().expect("kill runs");
    assert!(term.success());
    let stopped = std::time::Instant::now();
    assert!(second.wait().unwrap().success(), "a stopped loop exits 0");
    assert!(stopped.elapsed().as_millis() < 2_000);
    assert_eq!(etcd.store().leader_id().unwrap(), None, "the leader resigned");
}

/// The loop on a redb file, killed (SIGKILL) at scattered moments while the cluster and the
/// deployment change under it: the file always opens, its invariants always hold, and once
/// the kills stop one loop settles everything.
#[test]
fn a_loop_killed_mid_pass_leaves_a_consistent_redb_file() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cli-reconcile-kill");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for n in 0..4 {
        run(&dir, &["nodes", "add", &format!("gpu-{n}"), "--memory", "640 GiB", "--gpus", "8"]);
    }
    let deploy = |replicas: u32| {
        let stage = serde_json::json!({"memory": 20u64 << 30, "gpus": 1});
        let deployment = serde_json::json!({"name": "chat", "replicas": replicas, "stages": [stage, stage]});
        std::fs::write(dir.join("chat.json"), deployment.to_string()).unwrap();
        run(&dir, &["deploy", "chat.json"]);
    };
    for round in 0..30u64 {
        deploy(if round % 2 == 0 { 20 } else { 6 });
        if round % 3 == 1 {
            run(&dir, &["nodes", "remove", "gpu-3"]);
        } else if round % 3 == 2 {
            run(&dir, &["nodes", "add", "gpu-3", "--memory", "640 GiB", "--gpus", "8"]);
        }
        let mut child = Command::new(env!("CARGO_BIN_EXE_stageplan"))
            .args(["reconcile", "--interval", "1ms"])
            .current_dir(&dir)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("runs");
        std::thread::sleep(std::time::Duration::from_millis(2 + (round * 13) % 30));
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(status(&dir)["invariants"], "ok", "after kill {round}");
    }
    deploy(20);
    run(&dir, &["reconcile", "--passes", "2", "--interval", "1ms"]);
    let settled = status(&dir);
    assert_eq!(settled["invariants"], "ok");
    // 32 GPUs, two per replica: 16 of the 20 replicas run, the rest wait for room.
    assert_eq!((settled["deployments"][0]["running"].clone(), settled["assignments"].clone()), (16.into(), 32.into()));
}

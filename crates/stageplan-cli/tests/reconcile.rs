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
    // A GPU-less node: the plan's two GPU stages never land on it.
    run(&dir, &["nodes", "add", "mac-studio", "--memory", "192 GiB"]);
    assert!(run(&dir, &["deploy", "llama.json"]).contains("3 replicas × 2 stages"));
    run(&dir, &["reconcile", "--passes", "2", "--interval", "10ms"]);
    let placed = status(&dir);
    assert_eq!(placed["deployments"][0]["running"], 3, "{placed}");
    assert_eq!(placed["assignments"], 6);
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
            // A deadline for a hung loop, not a speed limit: it holds on any machine.
            assert!(started.elapsed().as_secs() < 120, "{what}: {status}");
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
    // Exit status 0, not death by the signal: the loop caught SIGTERM and stopped itself.
    assert!(second.wait().unwrap().success(), "a stopped loop exits 0");
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

/// Runs `stageplan` in `dir`: exit status, standard output, standard error.
fn try_run(dir: &Path, args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_stageplan")).args(args).current_dir(dir).output().expect("runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The loop, `deploy` and `status` on etcd over TLS with client certificates and a user:
/// the certificates and the password come from the environment, never the command line.
#[test]
fn the_loop_runs_on_etcd_over_tls_as_a_user() {
    use stageplan_store::testing::{ETCD_USER, EtcdServer, temp_dir};
    let etcd = EtcdServer::start_secure();
    let certs = etcd.certificates().unwrap().to_owned();
    let dir = temp_dir("cli-etcd-tls");
    let store = format!("etcds://{}@{}", ETCD_USER.0, etcd.address());
    let env = [
        ("STAGEPLAN_ETCD_CA", certs.join("ca.pem")),
        ("STAGEPLAN_ETCD_CERT", certs.join("client.pem")),
        ("STAGEPLAN_ETCD_KEY", certs.join("client-key.pem")),
        ("STAGEPLAN_ETCD_PASSWORD", ETCD_USER.1.into()),
    ];
    let on = |args: &[&str], without: Option<&str>| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_stageplan"));
        command.args(args).args(["--store", &store]).current_dir(&dir);
        for (name, value) in &env {
            if Some(*name) != without {
                command.env(name, value);
            }
        }
        command.output().expect("runs")
    };
    let ok = |args: &[&str]| {
        let out = on(args, None);
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    ok(&["nodes", "add", "gpu-a", "--memory", "160 GiB", "--gpus", "8"]);
    write_deployment(&dir, 2);
    ok(&["deploy", "chat.json"]);
    ok(&["reconcile", "--passes", "2", "--interval", "10ms"]);
    let status: serde_json::Value = serde_json::from_str(&ok(&["status", "--format", "json"])).unwrap();
    assert_eq!(status["deployments"][0]["running"], 2, "{status}");
    // Each missing piece: exit 2, one line saying what to give.
    for (missing, says) in [
        ("STAGEPLAN_ETCD_PASSWORD", "give its password in STAGEPLAN_ETCD_PASSWORD"),
        ("STAGEPLAN_ETCD_CA", "give the CA that signed etcd's certificate in STAGEPLAN_ETCD_CA"),
        ("STAGEPLAN_ETCD_KEY", "give both STAGEPLAN_ETCD_CERT and STAGEPLAN_ETCD_KEY"),
    ] {
        let out = on(&["status"], Some(missing));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "without {missing}: {stderr}");
        assert!(stderr.starts_with("error: ") && stderr.lines().count() == 1 && stderr.contains(says), "{stderr}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn write_deployment(dir: &Path, replicas: u32) {
    let stage = serde_json::json!({"memory": 20u64 << 30, "gpus": 1});
    let deployment = serde_json::json!({"name": "chat", "replicas": replicas, "stages": [stage, stage]});
    std::fs::write(dir.join("chat.json"), deployment.to_string()).unwrap();
}

/// Issue #14, case 12: a deployment record this version cannot use (as an older version's
/// autoscaling wrote it) keeps its bindings — the loop never releases what it cannot read —
/// and `status` shows them, with why and the fix; a valid `deploy` or `undeploy` releases them.
#[test]
fn a_quarantined_deployment_shows_its_bindings_and_undeploy_releases_them() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cli-quarantine");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    run(&dir, &["nodes", "add", "gpu-a", "--memory", "640 GiB", "--gpus", "8"]);
    write_deployment(&dir, 2);
    run(&dir, &["deploy", "chat.json"]);
    run(&dir, &["reconcile", "--passes", "1", "--interval", "10ms"]);
    assert_eq!(status(&dir)["assignments"], 4);
    let corrupt_record = || {
        use stageplan_reconcile::{Expect, Op, Store};
        let mut store = stageplan_store::RedbStore::open(&dir.join("stageplan.redb")).unwrap();
        let stage = serde_json::json!({"memory": 20u64 << 30, "gpus": 1});
        let value = serde_json::json!({"name": "chat", "replicas": 2_000_000, "stages": [stage, stage]});
        let put = Op::Put { key: "deployments/chat".into(), value: value.to_string(), expect: Expect::Any };
        store.commit(&[put]).unwrap();
    };
    corrupt_record();
    run(&dir, &["reconcile", "--passes", "1", "--interval", "10ms"]);
    let held = status(&dir);
    assert_eq!(held["assignments"], 4, "the loop released what it cannot read: {held}");
    assert_eq!(held["deployments"], serde_json::json!([]));
    let quarantined = &held["quarantined"][0];
    assert_eq!((quarantined["key"].as_str(), quarantined["bindings"].as_u64()), (Some("deployments/chat"), Some(4)));
    assert!(quarantined["why"].as_str().unwrap().contains("`replicas` `2000000` is more than 1,000,000"), "{held}");
    let text = run(&dir, &["status"]);
    assert!(
        text.contains("deployments/chat") && text.contains("4 bindings") && text.contains("stageplan undeploy chat"),
        "{text}"
    );

    // A valid replacement: the loop reads it again and releases what it no longer wants.
    write_deployment(&dir, 1);
    run(&dir, &["deploy", "chat.json"]);
    run(&dir, &["reconcile", "--passes", "1", "--interval", "10ms"]);
    let replaced = status(&dir);
    assert_eq!((replaced["assignments"].clone(), replaced["quarantined"].clone()), (2.into(), serde_json::json!([])));

    // Or removal, at once, quarantined or not.
    corrupt_record();
    assert_eq!(run(&dir, &["undeploy", "chat"]), "deployment `chat` removed; its 2 stage bindings released\n");
    let removed = status(&dir);
    assert_eq!((removed["assignments"].clone(), removed["quarantined"].clone()), (0.into(), serde_json::json!([])));
    let (code, _, stderr) = try_run(&dir, &["undeploy", "chat"]);
    assert_eq!((code, stderr.as_str()), (Some(2), "error: deployment `chat` is not deployed; deployed: none\n"));

    // A node record this version cannot read is removable by name too.
    {
        use stageplan_reconcile::{Expect, Op, Store};
        let mut store = stageplan_store::RedbStore::open(&dir.join("stageplan.redb")).unwrap();
        let put = Op::Put { key: "nodes/gpu-b".into(), value: r#"{"name": 1}"#.into(), expect: Expect::Any };
        store.commit(&[put]).unwrap();
    }
    assert!(run(&dir, &["status"]).contains("stageplan nodes remove gpu-b"));
    run(&dir, &["nodes", "remove", "gpu-b"]);
    assert_eq!(status(&dir)["quarantined"], serde_json::json!([]));
}

/// Issue #14, cases 9, 14 and 18: a damaged, cut or empty store is reported at once as what
/// it is, in one line with the fix, by `status` and by the loop — never a panic, never the
/// 5 s wait for "another `stageplan`", which only a real lock gets. Reading commands never
/// create or change a store, and read a read-only file in a read-only directory.
#[test]
fn a_damaged_store_is_reported_at_once_and_reading_never_writes() {
    use std::os::unix::fs::PermissionsExt;
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cli-damaged-store");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for n in 0..3 {
        run(&dir, &["nodes", "add", &format!("gpu-{n}"), "--memory", "640 GiB", "--gpus", "8"]);
    }
    write_deployment(&dir, 5);
    run(&dir, &["deploy", "chat.json"]);
    run(&dir, &["reconcile", "--passes", "1", "--interval", "10ms"]);
    let original = std::fs::read(dir.join("stageplan.redb")).unwrap();
    let one_error_line = |what: &str, stderr: &str, words: &[&str]| {
        let last = stderr.lines().last().unwrap_or_default();
        assert!(last.starts_with("error: `--store damaged.redb`: `damaged.redb` "), "{what}: {stderr}");
        assert!(
            words.iter().any(|w| last.contains(w)) && last.contains("restore it from a backup"),
            "{what}: {stderr}"
        );
    };
    let mut cases: Vec<(String, Vec<u8>)> = (0..original.len())
        .step_by(4096)
        .map(|at| {
            let mut bytes = original.clone();
            bytes[at] ^= 0xff;
            (format!("byte {at} flipped"), bytes)
        })
        .collect();
    cases.push(("cut in half".to_owned(), original[..original.len() / 2].to_vec()));
    let mut reported = 0;
    for (what, bytes) in &cases {
        let path = dir.join("damaged.redb");
        std::fs::write(&path, bytes).unwrap();
        let (code, stdout, stderr) = try_run(&dir, &["status", "--store", "damaged.redb"]);
        match code {
            Some(0) => assert!(stdout.contains("invariants ok"), "{what}: {stdout}"),
            Some(2) => {
                one_error_line(what, &stderr, &["is corrupt", "is truncated", "not a redb file"]);
                assert_eq!(stderr.lines().count(), 1, "{what}: {stderr}");
                reported += 1;
            }
            _ => panic!("{what}: `status` exited {code:?}: {stderr}"),
        }
        assert!(std::fs::read(&path).unwrap() == *bytes, "{what}: `status` changed the file");
        let (code, _, stderr) =
            try_run(&dir, &["reconcile", "--store", "damaged.redb", "--passes", "1", "--interval", "10ms"]);
        match code {
            Some(0) => {}
            Some(2) => one_error_line(what, &stderr, &["is corrupt", "is truncated", "not a redb file"]),
            _ => panic!("{what}: `reconcile` exited {code:?}: {stderr}"),
        }
    }
    assert!(reported >= 2, "only {reported} of {} damaged files were reported", cases.len());

    // An empty file is not a store: reading leaves it empty.
    std::fs::write(dir.join("damaged.redb"), b"").unwrap();
    for args in [&["status", "--store", "damaged.redb"][..], &["nodes", "list", "--store", "damaged.redb"]] {
        let (code, _, stderr) = try_run(&dir, args);
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        one_error_line("empty", &stderr, &["is empty (0 bytes)"]);
        assert_eq!(std::fs::metadata(dir.join("damaged.redb")).unwrap().len(), 0, "{args:?} wrote the file");
    }

    // A read-only store in a read-only directory reads, and stays as it was.
    let locked_dir = dir.join("read-only");
    std::fs::create_dir_all(&locked_dir).unwrap();
    std::fs::write(locked_dir.join("stageplan.redb"), &original).unwrap();
    std::fs::set_permissions(locked_dir.join("stageplan.redb"), std::fs::Permissions::from_mode(0o444)).unwrap();
    std::fs::set_permissions(&locked_dir, std::fs::Permissions::from_mode(0o555)).unwrap();
    let read_only = status(&locked_dir);
    assert_eq!((read_only["assignments"].clone(), read_only["invariants"].clone()), (10.into(), "ok".into()));
    assert!(run(&locked_dir, &["nodes", "list"]).contains("gpu-2"));
    assert!(std::fs::read(locked_dir.join("stageplan.redb")).unwrap() == original, "reading changed the file");
    if std::fs::OpenOptions::new().write(true).open(locked_dir.join("stageplan.redb")).is_err() {
        // Unprivileged (root writes anyway): writing is refused, at once, as what it is.
        let (code, _, stderr) = try_run(&locked_dir, &["nodes", "add", "x", "--memory", "1 GiB"]);
        assert_eq!(code, Some(2), "{stderr}");
        assert!(stderr.contains("permission denied") && !stderr.contains("another"), "{stderr}");
    }
    std::fs::set_permissions(&locked_dir, std::fs::Permissions::from_mode(0o755)).unwrap();

    // Only a real lock is "another `stageplan`", after waiting for it.
    let holder = stageplan_store::RedbStore::open(&dir.join("stageplan.redb")).unwrap();
    let started = std::time::Instant::now();
    let (code, _, stderr) = try_run(&dir, &["status"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("is another `stageplan` using it?"), "{stderr}");
    assert!(started.elapsed().as_secs() >= 4, "gave up after {:?}", started.elapsed());
    drop(holder);
    assert_eq!(status(&dir)["assignments"], 10);
}

/// An agent joins the fleet as the machine its node file describes: a scenario's entry, or
/// what `stageplan probe --format json` prints; it offers each device's memory less its
/// reserve, and its GPUs, under the name `--node` gives. `nodes add` reads one alike.
#[test]
fn an_agent_joins_as_its_node_file_says() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cli-agent-node-file");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("engine")).unwrap();
    // The agent asks only that llama-server be there: with nothing bound, it starts nothing.
    std::fs::write(dir.join("engine/llama-server"), "").unwrap();
    std::fs::write(dir.join("box.json"), r#"{"name": "box", "gpus": [{"device": "rtx-3090", "count": 2}]}"#).unwrap();
    let probed = r#"{"cpu": {}, "engine_runs": [],
        "nodes": [{"name": "this-cpu", "kind": "cpu", "memory": "64 GiB", "reserve": "8 GiB",
                   "bandwidth": "50 GB/s", "compute": "1 TFLOPS", "threads": 8}]}"#;
    std::fs::write(dir.join("probed.json"), probed).unwrap();
    let agent = |node: &str, file: &str| {
        let args = ["agent", "--node", node, "--engine", "engine", "--node-file", file, "--passes", "1"];
        try_run(&dir, &[&args[..], &["--interval", "100ms", "--lease", "1s"]].concat())
    };
    let (code, _, stderr) = agent("box", "box.json");
    assert_eq!(code, Some(0), "{stderr}");
    let (code, _, stderr) = agent("cpu-box", "probed.json");
    assert_eq!(code, Some(0), "{stderr}");
    // `nodes add` reads a node file as the agent does.
    let added = run(&dir, &["nodes", "add", "twin", "--node-file", "box.json"]);
    assert_eq!(added, "node `twin`: 46.0 GiB, 2 GPUs\n");
    let nodes: serde_json::Value = serde_json::from_str(&run(&dir, &["nodes", "list", "--format", "json"])).unwrap();
    let offered = |name: &str| {
        let node = nodes.as_array().unwrap().iter().find(|n| n["name"] == name).unwrap_or_else(|| panic!("{nodes}"));
        (node["memory"].as_u64().unwrap(), node["gpus"].as_u64().unwrap())
    };
    // Two 24 GiB GPUs, each keeping the preset's 1 GiB; the CPU's 64 GiB less its 8.
    assert_eq!(offered("box"), (46 << 30, 2));
    assert_eq!(offered("twin"), (46 << 30, 2));
    assert_eq!(offered("cpu-box"), (56 << 30, 0));
    // A file of two machines is refused, naming the file and the fix.
    let two = r#"{"nodes": [{"name": "a", "device": "rtx-4090"}, {"name": "b", "device": "rtx-4090"}]}"#;
    std::fs::write(dir.join("two.json"), two).unwrap();
    let (code, _, stderr) = agent("box", "two.json");
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("`--node-file` two.json: lists 2 nodes; give one machine"), "{stderr}");
}

//! `stageplan agent` on three machines (three agents on 127.0.0.1, each its own ports), the
//! control loop and a real etcd: a deployment applied is served by llama.cpp; an agent
//! killed outright takes its engines with it, the loop moves its stage and the others serve
//! again; the agent back rejoins without running a stage twice; and the receipt in `status`
//! holds the plan's memory on every machine.

use super::*;

use stageplan_store::testing::{EtcdServer, PrometheusServer};

/// Agents and the loop pass this often; an agent silent for `LEASE` is gone.
const INTERVAL: &str = "300ms";
const LEASE: &str = "2s";

struct Agent {
    node: String,
    port: u16,
    child: std::process::Child,
}

/// A test that fails leaves nothing running: each process it started is killed (an agent's
/// guards then stop its engines).
impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `stageplan reconcile`, killed when dropped.
struct Loop(std::process::Child);

impl Drop for Loop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The agent's `/metrics` port: above its engines' block.
fn metrics_port(port: u16) -> u16 {
    port + 200
}

fn start_agent(store: &str, node: &str, port: u16, bin: &Path, logs: &Path) -> Agent {
    let child = Command::new(env!("CARGO_BIN_EXE_stageplan"))
        .args(["agent", "--store", store, "--node", node, "--engine", &bin.to_string_lossy()])
        .args(["--port", &port.to_string(), "--interval", INTERVAL, "--lease", LEASE, "--memory", "75 MiB"])
        .args(["--metrics", &format!("127.0.0.1:{}", metrics_port(port))])
        .args(["--log-dir", &logs.join(node).to_string_lossy()])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(logs.join(format!("{node}.agent.log"))).unwrap())
        .spawn()
        .expect("stageplan agent runs");
    Agent { node: node.to_owned(), port, child }
}

fn status(store: &str) -> Value {
    serde_json::from_str(&stageplan(&["status", "--store", store, "--format", "json"])).unwrap()
}

/// llama-server's address for the deployment's replica 0, as its agent reports it.
fn endpoint(status: &Value) -> Option<u16> {
    status["agents"].as_array()?.iter().find_map(|a| {
        let e = a["replicas"]["tiny/0"]["endpoint"].as_str()?;
        e.rsplit_once(':')?.1.parse().ok()
    })
}

/// The machines the deployment's stages are pinned to now, in pipeline order.
fn stage_nodes(store: &str) -> Vec<String> {
    let deployment = stageplan(&["status", "--store", store, "--format", "json"]);
    let status: Value = serde_json::from_str(&deployment).unwrap();
    status["deployments"][0]["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["node"].as_str().unwrap().to_owned())
        .collect()
}

/// A completion of a few tokens through the served endpoint, if it answers.
fn tokens(port: u16) -> Option<u64> {
    let body = r#"{"prompt": "hello", "n_predict": 8, "cache_prompt": false}"#;
    let text = format!(
        "POST /completion HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let response = request(port, &text)?;
    let json: Value = serde_json::from_str(response.split_once("\r\n\r\n")?.1).ok()?;
    json["tokens_predicted"].as_u64().filter(|&n| n > 0)
}

/// llama-servers of this model, or rpc-servers on this test's ports (40000–40999), running
/// now (not their guards).
fn engines(model: &str, program: &str) -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| {
            let Ok(cmdline) = std::fs::read(e.path().join("cmdline")) else { return false };
            let args: Vec<String> =
                cmdline.split(|&b| b == 0).map(|a| String::from_utf8_lossy(a).into_owned()).collect();
            if args.iter().any(|a| a == "guard") || !args.first().is_some_and(|a| a.ends_with(program)) {
                return false;
            }
            match program {
                "llama-server" => args.iter().any(|a| a == model),
                _ => args
                    .windows(2)
                    .any(|w| w[0] == "--port" && w[1].parse().is_ok_and(|p: u16| (40000..41000).contains(&p))),
            }
        })
        .count()
}

fn wait_until<T>(what: &str, limit: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let started = Instant::now();
    loop {
        if let Some(t) = f() {
            return t;
        }
        assert!(started.elapsed() < limit, "timed out waiting for {what} ({:.0} s)", limit.as_secs_f64());
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn agents_serve_the_plan_lose_a_machine_and_serve_again() {
    let Some((bin, work)) = llama_cpp_and_workspace("stageplan-agents") else { return };
    let etcd = EtcdServer::start();
    let store = format!("etcd://{}", etcd.address());
    let model = work.join("model-f16.gguf");
    write_gguf(&model, &["--layers", "8"]);
    // Three machines, each too small for the model alone, any two enough.
    let node = |name: &str| {
        format!(
            r#"{{"name": "{name}", "kind": "cpu", "memory": "75 MiB", "reserve": 0, "bandwidth": "20 GB/s", "compute": "20 GFLOPS", "threads": 1}}"#
        )
    };
    let scenario = format!(
        r#"{{"model": {{"file": {}}}, "engine": "llama.cpp", "workload": {{"context": 2048, "prompt": 16, "response": 8}}, "nodes": [{}, {}, {}], "links": {LOOPBACK}}}"#,
        serde_json::to_string(&model.to_string_lossy()).unwrap(),
        node("m0"),
        node("m1"),
        node("m2")
    );
    std::fs::write(work.join("scenario.json"), scenario).unwrap();
    std::fs::write(
        work.join("tiny.json"),
        r#"{"name": "tiny", "replicas": 1, "scenario": "scenario.json", "rebalance": {"passes": 1}}"#,
    )
    .unwrap();
    let logs = work.join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    let mut agents: Vec<Agent> = ["m0", "m1", "m2"]
        .iter()
        .enumerate()
        .map(|(i, name)| start_agent(&store, name, 40000 + 300 * i as u16, &bin, &logs))
        .collect();
    // Debian's `prometheus`, scraping every agent's `/metrics`.
    let targets: Vec<String> = agents.iter().map(|a| format!("'127.0.0.1:{}'", metrics_port(a.port))).collect();
    let prometheus = PrometheusServer::start(&format!(
        "- job_name: agents\n  static_configs: [{{targets: [{}]}}]",
        targets.join(", ")
    ));
    let reconcile = Command::new(env!("CARGO_BIN_EXE_stageplan"))
        .args(["reconcile", "--store", &store, "--interval", INTERVAL, "--lease", LEASE])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(logs.join("reconcile.log")).unwrap())
        .spawn()
        .expect("stageplan reconcile runs");
    let reconcile = Loop(reconcile);

    // Each agent joins the fleet with its memory (`--memory`), as `nodes add` would.
    wait_until("the three agents joined", Duration::from_secs(30), || {
        (status(&store)["nodes"].as_array()?.len() == 3).then_some(())
    });
    let applied = Instant::now();
    stageplan(&["deploy", &work.join("tiny.json").to_string_lossy(), "--store", &store]);
    let served = wait_until("the deployment's first tokens", Duration::from_secs(120), || {
        let port = endpoint(&status(&store))?;
        tokens(port).map(|_| port)
    });
    let first_token = applied.elapsed();
    let before = stage_nodes(&store);
    assert!(before.len() >= 2, "the model needs two machines: {before:?}");
    let model_arg = model.to_string_lossy().into_owned();
    assert_eq!(engines(&model_arg, "llama-server"), 1, "one llama-server");
    assert_eq!(engines(&model_arg, "ggml-rpc-server"), before.len(), "an rpc-server per stage");

    // The receipt: llama.cpp's own memory per machine, equal to the plan's within its band.
    let receipt = wait_until("the receipt", Duration::from_secs(60), || {
        let s = status(&store);
        s["agents"].as_array()?.iter().find_map(|a| a["replicas"]["tiny/0"].get("receipt").cloned())
    });
    for m in receipt["machines"].as_array().unwrap() {
        let (planned, allocated) =
            (m["planned_held_bytes"].as_f64().unwrap(), m["allocated_held_bytes"].as_f64().unwrap());
        assert!(
            (allocated / planned - 1.0).abs() <= 0.02,
            "{}: planned {planned}, allocated {allocated}",
            m["machine"]
        );
    }
    let table = stageplan(&["status", "--store", &store]);
    assert!(table.contains("receipt: decode planned") && table.contains("serving"), "{table}");
    eprintln!("stageplan status, three agents serving one replica:\n{table}");

    // The agents' `/metrics`, through Prometheus, give the loop the pipeline's token time
    // under its default query (llama-server's counters, labelled with their deployment).
    let head = agents.iter().find(|a| a.node == before[0]).unwrap();
    let text = request(metrics_port(head.port), "GET /metrics HTTP/1.0\r\n\r\n").unwrap();
    for series in [
        format!("stageplan_node_up{{node=\"{}\"}} 1", before[0]),
        "stageplan_engine_serving{deployment=\"tiny\",replica=\"0\"".to_owned(),
        "stageplan_receipt_held_bytes{deployment=\"tiny\"".to_owned(),
        "llamacpp:tokens_predicted_total{deployment=\"tiny\",replica=\"0\"".to_owned(),
    ] {
        assert!(text.contains(&series), "`{series}` in the agent's /metrics:\n{text}");
    }
    let measured = wait_until("the token time through Prometheus", Duration::from_secs(90), || {
        tokens(served)?;
        let s: Value = serde_json::from_str(&stageplan(&[
            "status",
            "--store",
            &store,
            "--prometheus",
            &prometheus.url,
            "--format",
            "json",
        ]))
        .ok()?;
        s["deployments"][0]["measured_token_s"].as_f64()
    });
    eprintln!("the pipeline's token time through the agents' /metrics and Prometheus: {:.1} ms", measured * 1e3);

    // Kill the last stage's agent outright: its guard takes its rpc-server with it.
    let victim = before.last().unwrap().clone();
    let index = agents.iter().position(|a| a.node == victim).unwrap();
    agents[index].child.kill().unwrap();
    agents[index].child.wait().unwrap();
    let died = Instant::now();
    let port_after = wait_until("tokens again without the killed machine", Duration::from_secs(120), || {
        let nodes = stage_nodes(&store);
        if nodes.contains(&victim) {
            return None;
        }
        let port = endpoint(&status(&store))?;
        tokens(port).map(|_| port)
    });
    let recovered = died.elapsed();
    let after = stage_nodes(&store);
    assert!(!after.contains(&victim), "{after:?}");
    assert_eq!(engines(&model_arg, "llama-server"), 1, "one llama-server after the move");
    assert_eq!(engines(&model_arg, "ggml-rpc-server"), after.len(), "no rpc-server of the dead agent is left");

    // The agent back: it rejoins, and every stage runs once.
    let first_port = agents[index].port;
    agents[index] = start_agent(&store, &victim, first_port, &bin, &logs);
    std::thread::sleep(Duration::from_secs(3));
    let back = wait_until("tokens after the agent rejoined", Duration::from_secs(120), || {
        let port = endpoint(&status(&store))?;
        tokens(port).map(|_| port)
    });
    let nodes = stage_nodes(&store);
    wait_until("each stage running once", Duration::from_secs(60), || {
        (engines(&model_arg, "llama-server") == 1 && engines(&model_arg, "ggml-rpc-server") == nodes.len())
            .then_some(())
    });
    eprintln!(
        "agents: apply to first token {:.1} s (llama-server at :{served}); SIGKILL of `{victim}` to tokens again {:.1} s (:{port_after}); rejoined, serving at :{back} on {nodes:?}",
        first_token.as_secs_f64(),
        recovered.as_secs_f64()
    );

    // An engine that crashes at every start: tried the policy's five times with a growing
    // delay, left failed with its log's last lines in `status`, and the stage moved off.
    let broken = work.join("broken-engine");
    std::fs::create_dir_all(&broken).unwrap();
    std::os::unix::fs::symlink(bin.join("llama-server"), broken.join("llama-server")).unwrap();
    let script = broken.join("ggml-rpc-server");
    std::fs::write(&script, "#!/bin/sh\necho 'broken build: no backend' >&2\nexit 1\n").unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let victim = nodes.last().unwrap().clone();
    let index = agents.iter().position(|a| a.node == victim).unwrap();
    agents[index].child.kill().unwrap();
    agents[index].child.wait().unwrap();
    let first_port = agents[index].port;
    agents[index] = start_agent(&store, &victim, first_port, &broken, &logs);
    let failed = wait_until("the crashing engine reported failed", Duration::from_secs(120), || {
        let s = status(&store);
        let agent = s["agents"].as_array()?.iter().find(|a| a["node"] == victim.as_str())?.clone();
        let process = agent["replicas"]["tiny/0"]["processes"].as_array()?.first()?.clone();
        (process["state"] == "failed").then_some(process)
    });
    assert_eq!(failed["failures"], 5, "{failed}");
    assert!(failed["log_tail"].to_string().contains("broken build: no backend"), "{failed}");
    let table = stageplan(&["status", "--store", &store]);
    assert!(table.contains("failed 5 times in a row, left stopped") && table.contains("| broken build"), "{table}");
    wait_until("tokens again off the broken machine", Duration::from_secs(120), || {
        if stage_nodes(&store).contains(&victim) {
            return None;
        }
        tokens(endpoint(&status(&store))?)
    });

    // Stopped, every agent stops its engines.
    drop(prometheus);
    drop(reconcile);
    for agent in &mut agents {
        let _ = Command::new("kill").args(["-INT", &agent.child.id().to_string()]).status();
        agent.child.wait().unwrap();
    }
    wait_until("every engine stopped", Duration::from_secs(30), || {
        (engines(&model_arg, "llama-server") == 0 && engines(&model_arg, "ggml-rpc-server") == 0).then_some(())
    });
    let _ = std::fs::remove_dir_all(&work);
}

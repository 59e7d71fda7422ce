//! The closed loop through a real Prometheus (Debian's `prometheus`) on 127.0.0.1: a small
//! exporter serves the text exposition format — stageplan's stage and memory metrics, and
//! llama.cpp's own counters as `llama-server --metrics` writes them — Prometheus scrapes
//! it every second, and `stageplan reconcile --prometheus` and `status --prometheus` read
//! through Prometheus's query API. A Prometheus that is down, or a server that answers
//! garbage, leaves the placement as it is, with one line per pass.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The pipeline query the test waits for: the llama.cpp half of the CLI's default `token`.
const TOKEN_QUERY: &str = "sum by (deployment) (rate(llamacpp:tokens_predicted_seconds_total[1m])) \
                           / sum by (deployment) (rate(llamacpp:tokens_predicted_total[1m]))";

fn cli(dir: &Path, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_stageplan")).args(args).current_dir(dir).output().expect("runs");
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

fn run(dir: &Path, args: &[&str]) -> String {
    let (ok, stdout, stderr) = cli(dir, args);
    assert!(ok, "{args:?}: {stderr}");
    stdout
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("a free port")
}

/// What the exporter serves: `/metrics` (stageplan's names) and `/llama` (llama.cpp's
/// counters, which grow by 10 tokens in 1.3 s at every scrape: 0.13 s a token).
#[derive(Default)]
struct Exposed {
    stages: Vec<(usize, f64)>,
    free: Vec<(&'static str, u64)>,
    tokens: u64,
}

/// A minimal HTTP/1.1 server on 127.0.0.1 for the exposition format, and for garbage.
fn exporter(exposed: Arc<Mutex<Exposed>>) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a port");
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let _ = answer(stream, &exposed);
        }
    });
    port
}

fn answer(mut stream: TcpStream, exposed: &Mutex<Exposed>) -> std::io::Result<()> {
    let mut request = String::new();
    BufReader::new(&stream).read_line(&mut request)?;
    let path = request.split_whitespace().nth(1).unwrap_or("/");
    let mut e = exposed.lock().unwrap();
    let body = if path.starts_with("/metrics") {
        let mut body = String::from(
            "# HELP stageplan_stage_step_seconds Seconds per decode step of a stage.\n# TYPE stageplan_stage_step_seconds gauge\n",
        );
        for (stage, seconds) in &e.stages {
            body += &format!(
                "stageplan_stage_step_seconds{{deployment=\"chat\",replica=\"0\",stage=\"{stage}\"}} {seconds}\n"
            );
        }
        body += "# TYPE stageplan_node_memory_free_bytes gauge\n";
        for (node, free) in &e.free {
            body += &format!("stageplan_node_memory_free_bytes{{node=\"{node}\"}} {free}\n");
        }
        body
    } else if path.starts_with("/llama") {
        e.tokens += 10;
        let tokens = e.tokens;
        format!(
            "# HELP llamacpp:tokens_predicted_total Number of generation tokens processed\n\
             # TYPE llamacpp:tokens_predicted_total counter\nllamacpp:tokens_predicted_total {tokens}\n\
             # HELP llamacpp:tokens_predicted_seconds_total Total time spent generating tokens\n\
             # TYPE llamacpp:tokens_predicted_seconds_total counter\nllamacpp:tokens_predicted_seconds_total {}\n",
            tokens as f64 * 0.13
        )
    } else {
        // Anything else (`/api/v1/query` included): not Prometheus.
        "<html><body>garbage</body></html>".to_owned()
    };
    drop(e);
    write!(
        stream,
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// Debian's `prometheus` scraping the exporter: its stageplan metrics, and llama.cpp's
/// counters labelled as the deployment's.
struct Prometheus(stageplan_store::testing::PrometheusServer);

impl Prometheus {
    fn start(exporter: u16) -> Prometheus {
        Prometheus(stageplan_store::testing::PrometheusServer::start(&format!(
            "- job_name: stages\n  static_configs: [{{targets: ['127.0.0.1:{exporter}']}}]\n\
             - job_name: llama\n  metrics_path: /llama\n  static_configs: [{{targets: ['127.0.0.1:{exporter}'], labels: {{deployment: chat}}}}]\n"
        )))
    }

    /// Waits until a query answers with `series` series.
    fn wait_for(&self, promql: &str, series: usize) {
        let started = Instant::now();
        let agent: ureq::Agent =
            ureq::Agent::config_builder().timeout_global(Some(Duration::from_secs(2))).build().into();
        loop {
            let answer = agent
                .get(format!("{}/api/v1/query", self.0.url))
                .query("query", promql)
                .call()
                .ok()
                .and_then(|mut r| r.body_mut().read_to_string().ok())
                .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok());
            let found = answer.as_ref().and_then(|a| a["data"]["result"].as_array()).map_or(0, Vec::len);
            if found >= series {
                return;
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "Prometheus at {} never had `{promql}`: {answer:?}",
                self.0.url
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

fn status(dir: &Path, extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["status", "--format", "json"];
    args.extend_from_slice(extra);
    serde_json::from_str(&run(dir, &args)).expect("JSON status")
}

fn stages_of(status: &serde_json::Value) -> Vec<(String, u64, u64)> {
    status["deployments"][0]["stages"]
        .as_array()
        .expect("a planned deployment's stages")
        .iter()
        .map(|s| {
            (s["node"].as_str().unwrap().to_owned(), s["layers"][0].as_u64().unwrap(), s["layers"][1].as_u64().unwrap())
        })
        .collect()
}

#[test]
fn a_slow_machine_seen_through_prometheus_is_rebalanced_and_a_broken_source_changes_nothing() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cli-prometheus");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let scenario = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/scenarios/home-70b.json");
    std::fs::write(
        dir.join("chat.json"),
        serde_json::json!({"name": "chat", "replicas": 1, "scenario": scenario, "rebalance": {"passes": 2}})
            .to_string(),
    )
    .unwrap();
    run(&dir, &["nodes", "add", "desk", "--memory", "24 GiB", "--gpus", "1"]);
    run(&dir, &["nodes", "add", "gamer", "--memory", "24 GiB", "--gpus", "1"]);
    run(&dir, &["nodes", "add", "mac", "--memory", "64 GiB"]);
    run(&dir, &["deploy", "chat.json"]);
    run(&dir, &["reconcile", "--passes", "1", "--interval", "10ms"]);
    let placed = status(&dir, &[]);
    assert_eq!(placed["deployments"][0]["running"], 1, "{placed}");
    let before = stages_of(&placed);
    assert!(before.iter().any(|(node, _, _)| node == "desk"), "the plan uses desk: {before:?}");

    // The exporter reports desk's stage at 3× its prediction, the others as predicted.
    let predicted: Vec<f64> = placed["deployments"][0]["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["predicted_s"].as_f64().unwrap())
        .collect();
    let exposed = Arc::new(Mutex::new(Exposed::default()));
    {
        let mut e = exposed.lock().unwrap();
        e.stages = before
            .iter()
            .zip(&predicted)
            .enumerate()
            .map(|(i, ((node, _, _), p))| (i, if node == "desk" { 3.0 * p } else { *p }))
            .collect();
        e.free = vec![("desk", 3 << 30), ("gamer", 3 << 30), ("mac", 40 << 30)];
    }
    let port = exporter(exposed.clone());
    let prometheus = Prometheus::start(port);
    prometheus.wait_for("stageplan_stage_step_seconds", before.len());
    prometheus.wait_for(TOKEN_QUERY, 1);
    let url = prometheus.0.url.clone();

    // `status` reads through Prometheus: measured against predicted, and the pipeline's
    // llama.cpp figure (10 tokens per 1.3 s).
    let seen = status(&dir, &["--prometheus", &url]);
    let deployment = &seen["deployments"][0];
    let desk = before.iter().position(|(n, _, _)| n == "desk").unwrap();
    let measured = deployment["stages"][desk]["measured_s"].as_f64().expect("desk's stage measured");
    assert!((measured / predicted[desk] - 3.0).abs() < 1e-6, "{deployment}");
    let token = deployment["measured_token_s"].as_f64().expect("the pipeline's figure");
    assert!((token - 0.13).abs() < 0.005, "{token}");
    let table = run(&dir, &["status", "--prometheus", &url]);
    assert!(table.contains("(3.00×)"), "{table}");

    // The loop acts after two skewed passes and moves layers off desk.
    let (ok, _, log) = cli(&dir, &["reconcile", "--passes", "3", "--interval", "200ms", "--prometheus", &url]);
    assert!(ok, "{log}");
    assert!(log.contains("re-balanced") && log.contains("on `desk` ran 3.00× its prediction"), "{log}");
    let after = status(&dir, &[]);
    let moved = stages_of(&after);
    assert_ne!(moved, before, "{after}");
    assert_eq!(after["deployments"][0]["running"], 1, "{after}");
    assert_eq!(after["invariants"], "ok");
    let reason = after["deployments"][0]["last_rebalance"]["reason"].as_str().unwrap().to_owned();
    assert!(reason.contains("moved"), "{reason}");

    // Down, garbage, a query Prometheus refuses: the placement stays, one line per pass.
    let closed = format!("http://127.0.0.1:{}", free_port());
    let garbage = format!("http://127.0.0.1:{port}");
    for (args, says) in [
        (vec!["--prometheus", closed.as_str()], "cannot be reached"),
        (vec!["--prometheus", garbage.as_str()], "did not answer with Prometheus's JSON"),
        (vec!["--prometheus", url.as_str(), "--prometheus-query", "step=rate("], "refused the `step` query"),
    ] {
        let mut command = vec!["reconcile", "--passes", "2", "--interval", "10ms"];
        command.extend(args);
        let (ok, _, log) = cli(&dir, &command);
        assert!(ok, "a broken source must not stop the loop: {log}");
        let lines: Vec<&str> = log.lines().filter(|l| l.contains("no measurements this pass")).collect();
        assert_eq!(lines.len(), 2, "one line per pass: {log}");
        assert!(lines[0].contains(says), "{log}");
        assert_eq!(stages_of(&status(&dir, &[])), moved, "the placement stays as it is");
    }
}

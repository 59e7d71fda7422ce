//! Data-driven CLI tests: each folder under `tests/cli/` at the repository root is a case.
//!
//! A case holds `cmd` (the arguments, one line, run from the case folder), any input files
//! it names, and `expected`: the exit status, standard output and standard error. After an
//! intended change of output, regenerate with `UPDATE_EXPECT=1 cargo test -p stageplan-cli`.

use std::path::{Path, PathBuf};
use std::process::Command;

fn cases() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/cli")
}

fn run_case(dir: &Path) {
    let cmd = std::fs::read_to_string(dir.join("cmd")).expect("case has a cmd file");
    let args: Vec<&str> = cmd.split_whitespace().collect();
    let output = Command::new(env!("CARGO_BIN_EXE_stageplan"))
        .args(&args)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .output()
        .expect("stageplan runs");
    let actual = format!(
        "exit: {}\n--- stdout\n{}--- stderr\n{}",
        output.status.code().map_or_else(|| "signal".to_owned(), |c| c.to_string()),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
    expect_test::expect_file![dir.join("expected")].assert_eq(&actual);
}

#[test]
fn every_case_matches_its_expected_output() {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(cases())
        .expect("tests/cli exists")
        .map(|e| e.expect("readable entry").path())
        .filter(|p| p.join("cmd").exists())
        .collect();
    dirs.sort();
    assert!(dirs.len() >= 20, "found only {} cases", dirs.len());
    for dir in dirs {
        run_case(&dir);
    }
}

/// Bad input is one line on standard error and exit status 2, never a panic.
#[test]
fn bad_input_is_one_line_and_status_2() {
    for entry in std::fs::read_dir(cases()).expect("tests/cli exists") {
        let dir = entry.expect("readable entry").path();
        if !dir.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("bad-")) {
            continue;
        }
        let cmd = std::fs::read_to_string(dir.join("cmd")).expect("cmd");
        let output = Command::new(env!("CARGO_BIN_EXE_stageplan"))
            .args(cmd.split_whitespace())
            .current_dir(&dir)
            .output()
            .expect("stageplan runs");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{}: {stderr}", dir.display());
        assert_eq!(stderr.lines().count(), 1, "{}: {stderr}", dir.display());
        assert!(stderr.starts_with("error: "), "{}: {stderr}", dir.display());
        assert!(output.stdout.is_empty(), "{}", dir.display());
    }
}

fn repo_file(name: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(name)).expect("repository file")
}

/// The README's example output is what the CLI prints today.
#[test]
fn readme_example_is_current() {
    let readme = repo_file("README.md");
    let prompt = "$ stageplan plan tests/scenarios/home-70b.json --objective latency\n";
    let start = readme.find(prompt).expect("README shows the example") + prompt.len();
    let shown = &readme[start..start + readme[start..].find("```").expect("block ends")];
    let output = Command::new(env!("CARGO_BIN_EXE_stageplan"))
        .args(["plan", "tests/scenarios/home-70b.json", "--objective", "latency"])
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."))
        .output()
        .expect("stageplan runs");
    assert_eq!(shown, String::from_utf8_lossy(&output.stdout), "update the README example");
}

/// The quick start is exactly two commands.
#[test]
fn readme_quick_start_has_two_commands() {
    let readme = repo_file("README.md");
    let section = &readme[readme.find("## Quick start").expect("quick start")..];
    let block = &section[section.find("```sh\n").expect("a sh block") + 6..];
    let block = &block[..block.find("```").expect("block ends")];
    assert_eq!(block.lines().filter(|l| !l.trim().is_empty()).count(), 2, "{block}");
}

/// ARCHITECTURE.md names every crate, so the map does not rot.
#[test]
fn architecture_names_every_crate() {
    let architecture = repo_file("ARCHITECTURE.md");
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for entry in std::fs::read_dir(crates).expect("crates/") {
        let name = entry.expect("entry").file_name().to_string_lossy().into_owned();
        assert!(architecture.contains(&format!("`crates/{name}`")), "ARCHITECTURE.md does not describe crates/{name}");
    }
}

/// Model files written by the reference packages, read by header only.
#[test]
fn model_files_are_read_by_their_headers() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cli-model-files");
    let _ = std::fs::remove_dir_all(&dir);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/write_models.py");
    let status = Command::new(python()).arg(script).arg(&dir).status();
    assert!(
        status.is_ok_and(|s| s.success()),
        "install the reference writers: pip install -r tests/fixtures/requirements.txt"
    );
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap();

    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_stageplan")).args(args).current_dir(&dir).output().expect("runs");
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).expect("JSON")
    };
    for reference in manifest["gguf"].as_array().unwrap() {
        let file = reference["file"].as_str().unwrap();
        let summary = run(&["model", file, "--format", "json"]);
        let tensor_bytes: u64 =
            reference["tensors"].as_array().unwrap().iter().map(|t| t["bytes"].as_u64().unwrap()).sum();
        assert_eq!(summary["weight_bytes"].as_u64(), Some(tensor_bytes), "{file}");
        let layers: u64 = summary["layers"].as_array().unwrap().iter().map(|l| l["bytes"].as_u64().unwrap()).sum();
        let outside = summary["embedding_bytes"].as_u64().unwrap() + summary["head_bytes"].as_u64().unwrap();
        if summary["tied_embeddings"] == true {
            // The head's bytes count the copy of the tied embedding.
            assert_eq!(layers + outside - summary["embedding_bytes"].as_u64().unwrap(), tensor_bytes, "{file}");
        } else {
            assert_eq!(layers + outside, tensor_bytes, "{file}");
        }
        assert!(summary["params"].as_u64().unwrap() > 0);
        let read = summary["read"]["bytes_read"].as_u64().unwrap();
        assert!(read < reference["size"].as_u64().unwrap() / 4, "{file}: read {read} bytes");
    }
    let split = run(&["model", "split/big-00003-of-00003.gguf", "--format", "json"]);
    assert_eq!(split["read"]["files"].as_array().unwrap().len(), 3);
    let sharded = run(&["model", "sharded/model.safetensors.index.json", "--format", "json"]);
    assert_eq!(sharded["weight_bytes"].as_u64(), manifest["sharded"]["total_size"].as_u64());

    std::fs::write(
        dir.join("scenario.json"),
        r#"{"model": {"file": "moe.gguf"}, "workload": {"context": 256, "workspace": 0},
            "nodes": [{"name": "a", "memory": "2 MiB", "bandwidth": "100 GB/s", "compute": "1 TFLOPS", "reserve": 0},
                      {"name": "b", "memory": "2 MiB", "bandwidth": "100 GB/s", "compute": "1 TFLOPS", "reserve": 0}]}"#,
    )
    .unwrap();
    let plan = run(&["plan", "scenario.json", "--format", "json"]);
    assert_eq!(plan["stages"].as_array().unwrap().len(), 2, "{plan}");
    every_command_reads_every_model_input(&dir);
}

/// Each command that takes a scenario reads its model the same way, from a preset, an
/// inline `config.json` or a model file (relative to the scenario's folder): plan, export,
/// replan, deploy and run-sharded.
fn every_command_reads_every_model_input(dir: &Path) {
    let config = stageplan::presets::ModelPreset::find("llama-3.2-1b").unwrap().config_json();
    let nodes = r#"[{"name": "a", "device": "rtx-4090"}, {"name": "b", "device": "rtx-3090"}]"#;
    let inputs = [
        ("preset", r#"{"preset": "llama-3.2-1b"}"#.to_owned(), nodes.to_owned()),
        ("config", format!(r#"{{"config": {config}}}"#), nodes.to_owned()),
        (
            "file",
            r#"{"file": "../moe.gguf"}"#.to_owned(),
            r#"[{"name": "a", "memory": "2 MiB", "bandwidth": "100 GB/s", "compute": "1 TFLOPS", "reserve": 0},
                {"name": "b", "memory": "2 MiB", "bandwidth": "100 GB/s", "compute": "1 TFLOPS", "reserve": 0}]"#
                .to_owned(),
        ),
    ];
    let inputs_dir = dir.join("inputs");
    std::fs::create_dir_all(&inputs_dir).unwrap();
    let stageplan = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_stageplan")).args(args).current_dir(dir).output().expect("runs");
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    for (input, model, nodes) in inputs {
        let scenario = format!(
            r#"{{"model": {model}, "workload": {{"context": 256, "workspace": 0}}, "nodes": {nodes}, "objective": "latency"}}"#
        );
        let name = format!("inputs/{input}.json");
        std::fs::write(dir.join(&name), scenario).unwrap();
        let plan = stageplan(&["plan", &name, "--format", "json"]);
        std::fs::write(dir.join(format!("inputs/{input}-plan.json")), &plan).unwrap();
        let exported = stageplan(&["export", &name, "--to", "vllm"]);
        assert!(exported.contains("vllm serve"), "{input}: {exported}");
        let replan = stageplan(&["replan", &format!("inputs/{input}-plan.json"), &name, "--format", "json"]);
        assert!(replan.contains("\"plan\""), "{input}: {replan}");
        // The deployment names the scenario from another folder: the model file is still
        // relative to the scenario.
        let deployment = format!(r#"{{"name": "{input}", "replicas": 1, "scenario": "inputs/{input}.json"}}"#);
        std::fs::write(dir.join(format!("{input}-deployment.json")), deployment).unwrap();
        let store = format!("inputs/{input}.redb");
        stageplan(&["deploy", &format!("{input}-deployment.json"), "--store", &store]);
        assert!(stageplan(&["status", "--store", &store]).contains(input), "{input}: the deployment is stored");
        run_sharded(dir, &name, input);
    }
}

/// `run-sharded` on the scenario: real kernels on whatever adapter there is (lavapipe in
/// CI, where `STAGEPLAN_EXPECT_LAVAPIPE` says one must be there).
fn run_sharded(dir: &Path, scenario: &str, input: &str) {
    let out = Command::new(env!("CARGO_BIN_EXE_stageplan"))
        .args(["run-sharded", scenario, "--width", "16", "--tokens", "2", "--micro-batches", "2", "--replicas", "2"])
        .current_dir(dir)
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() && stderr.contains("adapter") && std::env::var_os("STAGEPLAN_EXPECT_LAVAPIPE").is_none() {
        return;
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "run-sharded {input}: {stderr}");
    assert!(stdout.contains("checked against the CPU") && stdout.contains("per replica"), "{input}: {stdout}");
}

/// The Python with the reference writers: `STAGEPLAN_PYTHON` (set by `cargo xtask test`),
/// else `python3` on the path.
fn python() -> String {
    std::env::var("STAGEPLAN_PYTHON").unwrap_or_else(|_| "python3".to_owned())
}

/// A FIFO as a model or scenario file once blocked forever, waiting for a writer: it is
/// refused by its type before it is opened (issue #14, case 16).
#[test]
fn a_fifo_is_refused_at_once() {
    let dir = std::env::temp_dir().join(format!("stageplan-fifo-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temporary folder");
    for name in ["model.gguf", "scenario.json"] {
        let status = Command::new("mkfifo").arg(dir.join(name)).status().expect("mkfifo runs");
        assert!(status.success());
    }
    for args in [["model", "model.gguf"], ["plan", "scenario.json"]] {
        let output = Command::new(env!("CARGO_BIN_EXE_stageplan"))
            .args(args)
            .current_dir(&dir)
            .output()
            .expect("stageplan runs and returns");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains("is a FIFO (named pipe); give a regular file"), "{stderr}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The README's limits table states the numbers `limits.rs` enforces.
#[test]
fn readme_limits_are_the_enforced_limits() {
    use stageplan::limits;
    let readme = repo_file("README.md");
    let start = readme.find("| what | at most |").expect("README has the limits table");
    let table = &readme[start..start + readme[start..].find("\n\n").expect("table ends")];
    let row = |what: &str| {
        table.lines().find(|l| l.contains(what)).unwrap_or_else(|| panic!("a row for {what}")).replace(',', "")
    };
    assert!(row("machines in a scenario").contains(&limits::MAX_NODES.to_string()));
    assert!(row("machines × model layers").contains(&limits::MAX_NODE_LAYERS.to_string()));
    assert!(row("layers in a model").contains(&limits::MAX_LAYERS.to_string()));
    assert!(row("characters in a machine's name").contains(&limits::MAX_NAME_CHARS.to_string()));
    assert!(row("`links.pairs`").contains(&limits::MAX_LINK_PAIRS.to_string()));
    assert!(row("`memory`, `reserve`").contains("10^18") && limits::MAX_BYTES == 1e18);
    assert!(row("`workload.context`").contains("2^26 tokens / 2^20 sequences / 2^20 tokens"));
    assert_eq!((limits::MAX_CONTEXT, limits::MAX_BATCH, limits::MAX_PREFILL_CHUNK), (1 << 26, 1 << 20, 1 << 20));
    assert!(row("split GGUF").contains(&limits::MAX_SPLIT_PARTS.to_string()));
    assert!(row("`threads`").contains(&limits::MAX_THREADS.to_string()));
    assert!(row("llama-bench").contains(&stageplan::fit::bench::MAX_TESTS.to_string()));
    assert!(row("`config.json` file").contains("64 MiB") && limits::MAX_TEXT_BYTES == 64 << 20);
    let users = row("users of one server");
    assert!(users.contains(&stageplan::demand::MAX_USERS.to_string()));
    assert!(users.contains(&stageplan::demand::MAX_VLLM_USERS.to_string()));
    assert!(row("requests a second").contains("10^6") && *limits::REQUEST_RATES.end() == 1e6);
    let start = readme.find("| what | at least |").expect("README has the lower limits");
    let least = &readme[start..start + readme[start..].find("\n\n").expect("table ends")];
    assert!(least.contains("`host.link`") && least.contains("1 per second") && limits::MIN_RATE == 1.0);
    assert!(least.contains("10^-6") && *limits::REQUEST_RATES.start() == 1e-6);
}

/// `probe --engine` with a model path that is not UTF-8: one line naming the flag, before the
/// probe runs (it panicked building the run's scenario, #45).
#[cfg(unix)]
#[test]
fn a_model_path_that_is_not_utf8_is_refused() {
    use std::os::unix::ffi::OsStrExt;
    let model = std::ffi::OsStr::from_bytes(b"model-\xff.gguf");
    let output = Command::new(env!("CARGO_BIN_EXE_stageplan"))
        .args(["probe", "--cpu", "--quick", "--threads", "1", "--engine", env!("CARGO_BIN_EXE_stageplan"), "--model"])
        .arg(model)
        .output()
        .expect("stageplan runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.starts_with("error: `--model` ") && stderr.contains("not UTF-8"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}

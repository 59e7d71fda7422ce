//! `cargo xtask test`, `fuzz` and `gpu`: every test in one run, the fuzz campaigns, and the
//! checks a machine with a GPU runs.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use crate::{
    EXAMPLE, WASM_TARGET, browser_env, cache, cargo,
    checks::checks,
    quiet_mesa, root,
    setup::{NIGHTLY, llama_cpp, setup, tool_path},
    step, target_dir,
    web::{build_embed, build_web},
};

pub(crate) const FUZZ_TARGETS: [&str; 11] = [
    "gguf_header",
    "safetensors_header",
    "scenario",
    "replan",
    "export",
    "export_text",
    "redb_store",
    "llama_bench",
    "observations",
    "plan_file",
    "calibrate",
];

/// Seconds each fuzz target runs in `cargo xtask test`.
pub(crate) const FUZZ_SECONDS_IN_TEST: u64 = 20;

pub(crate) fn test() -> Result<(), String> {
    let started = Instant::now();
    let python = setup()?;
    let llama_cpp = llama_cpp(&python)?;
    let mut fmt = cargo();
    fmt.args(["fmt", "--all", "--check"]);
    step("formatting", fmt)?;
    checks()?;
    let mut clippy = cargo();
    clippy.args(["clippy", "--workspace", "--all-targets", "--locked", "--", "-D", "warnings"]);
    step("lints", clippy)?;
    let mut docs = cargo();
    docs.args([
        "doc",
        "--no-deps",
        "--locked",
        "-p",
        "stageplan",
        "-p",
        "stageplan-store",
        "-p",
        "stageplan-gpu",
        "-p",
        "stageplan-cpu",
        "-p",
        "stageplan-reconcile",
        "-p",
        "stageplan-agent",
    ])
    .env("RUSTDOCFLAGS", "-D warnings");
    step("API docs (rustdoc, broken links denied)", docs)?;
    let mut tests = cargo();
    tests
        .args(["test", "--workspace", "--locked"])
        .env("STAGEPLAN_PYTHON", &python)
        .env("STAGEPLAN_LLAMA_CPP", &llama_cpp)
        // The GPU tests must see lavapipe through Vulkan and llvmpipe through GL.
        .env("STAGEPLAN_EXPECT_LAVAPIPE", "1");
    quiet_mesa(&mut tests);
    step("unit, property, import, GPU (lavapipe), CLI and llama.cpp tests", tests)?;
    let mut browser = cargo();
    browser.args(["test", "--package", "stageplan-gpu", "--target", WASM_TARGET, "--locked"]);
    browser_env(&mut browser);
    step("GPU kernels in headless Chromium (WebGPU, SwiftShader)", browser)?;
    let mut wasm = cargo();
    wasm.args(["build", "--package", "stageplan", "--target", WASM_TARGET, "--locked"]);
    step("core for wasm32", wasm)?;
    let mut components = cargo();
    components.args(["test", "--package", "stageplan-web", "--target", WASM_TARGET, "--locked"]);
    browser_env(&mut components);
    step("web components in headless Chromium", components)?;
    let dist = build_web()?;
    let fixtures = cache().join("e2e-fixtures");
    let _ = std::fs::remove_dir_all(&fixtures);
    let mut write = Command::new(&python);
    write.arg(root().join("tests/fixtures/write_models.py")).arg(&fixtures);
    step("model files for the browser tests (reference writers)", write)?;
    let mut arches = Command::new(&python);
    arches.arg(root().join("tests/engine/write_arch.py")).arg("--all").arg(fixtures.join("arches"));
    step("a model of each architecture family for the browser tests (gguf-py)", arches)?;
    let mut cli = cargo();
    cli.args(["build", "--package", "stageplan-cli", "--locked"]);
    step("the CLI the browser tests compare against", cli)?;
    crate::cpu_check::cpu_check(&python, &llama_cpp, &target_dir().join("debug/stageplan"))?;
    // Every check at desktop size, then again at phone size: the page must work from 360 px up (#18).
    for (title, viewport) in [
        ("the web planner end to end (playwright-core, headless Chromium)", "1280x1000"),
        ("the web planner end to end at phone size (360 × 740)", "360x740"),
    ] {
        let mut e2e = Command::new("node");
        e2e.arg(root().join("tests/e2e/planner.mjs"))
            .arg("--dist")
            .arg(&dist)
            .arg("--cli")
            .arg(target_dir().join("debug/stageplan"))
            .arg("--fixtures")
            .arg(&fixtures)
            .args(["--viewport", viewport])
            .current_dir(root())
            .env("PATH", tool_path());
        step(title, e2e)?;
    }
    let embed = build_embed()?;
    let mut node = Command::new("node");
    node.args(["--test", "tests/node/"])
        .current_dir(root())
        .env("STAGEPLAN_EMBED", &embed)
        .env("STAGEPLAN_CLI", target_dir().join("debug/stageplan"))
        .env("STAGEPLAN_FIXTURES", &fixtures);
    step("the JS API on Node against the CLI (node --test)", node)?;
    let mut types = Command::new("tsc");
    types.args(["-p", "tests/node"]).current_dir(root()).env("PATH", tool_path());
    step("the TypeScript declarations (tsc --strict)", types)?;
    let mut widgets = Command::new("node");
    widgets
        .arg(root().join("tests/e2e/embed.mjs"))
        .arg("--embed")
        .arg(&embed)
        .arg("--cli")
        .arg(target_dir().join("debug/stageplan"))
        .current_dir(root())
        .env("PATH", tool_path());
    step("the <stage-plan> example page end to end (headless Chromium)", widgets)?;
    let mut example = cargo();
    example.args(["run", "--quiet", "--package", "stageplan-cli", "--locked", "--", "plan", EXAMPLE]);
    step("the README's example plan", example)?;
    fuzz(&python, FUZZ_SECONDS_IN_TEST)?;
    println!("==> all tests passed in {:.0} s", started.elapsed().as_secs_f64());
    Ok(())
}

/// `cargo xtask cpu-check`: the CLI built, then the check.
pub(crate) fn cpu_check_alone() -> Result<(), String> {
    let (python, llama_cpp, cli) = with_llama_cpp_and_cli()?;
    crate::cpu_check::cpu_check(&python, &llama_cpp, &cli)
}

/// `cargo xtask serve-check`: the CLI built, then the measurement.
pub(crate) fn serve_check_alone() -> Result<(), String> {
    let (python, llama_cpp, cli) = with_llama_cpp_and_cli()?;
    crate::serve_check::serve_check(&python, &llama_cpp, &cli)
}

/// What the checks against llama.cpp on this machine need: the Python with gguf-py, the
/// llama.cpp build's binaries, and the CLI built.
fn with_llama_cpp_and_cli() -> Result<(PathBuf, PathBuf, PathBuf), String> {
    let python = setup()?;
    let llama_cpp = llama_cpp(&python)?;
    let mut cli = cargo();
    cli.args(["build", "--package", "stageplan-cli", "--locked"]);
    step("the CLI", cli)?;
    Ok((python, llama_cpp, target_dir().join("debug/stageplan")))
}

/// Runs each fuzz target for `seconds`, seeded with files from the reference writers and
/// the scenarios under `tests/scenarios`; prints how many inputs each ran.
pub(crate) fn fuzz(python: &Path, seconds: u64) -> Result<(), String> {
    let work = cache().join("fuzz");
    let seeds = work.join("reference-files");
    let _ = std::fs::remove_dir_all(&seeds);
    let mut write = Command::new(python);
    write.arg(root().join("tests/fixtures/write_models.py")).arg(&seeds);
    step("fuzz seeds from the reference writers", write)?;
    for target in FUZZ_TARGETS {
        let corpus = work.join("corpus").join(target);
        std::fs::create_dir_all(&corpus).map_err(|e| e.to_string())?;
        seed_corpus(target, &seeds, &corpus)?;
        // cargo-fuzz needs the nightly toolchain; `rustup run` selects it.
        let mut run = Command::new("rustup");
        run.current_dir(root())
            // No AddressSanitizer: the code under test forbids `unsafe`, and without ASan's
            // overhead each second reaches about five times more inputs.
            .args(["run", NIGHTLY, "cargo", "fuzz", "run", "--sanitizer", "none", target])
            .arg(&corpus)
            .arg("--")
            .arg(format!("-max_total_time={seconds}"))
            .args(["-max_len=131072", "-rss_limit_mb=2048", "-print_final_stats=1"]);
        // Tokens that reach the paths hostile input found (names, counts, layer indices).
        if let Some(dict) = fuzz_dictionary(target) {
            run.arg(format!("-dict={}", dict.display()));
        }
        step(&format!("fuzz {target} for {seconds} s"), run)?;
    }
    Ok(())
}

/// The libFuzzer dictionary for a target, under `fuzz/dicts/`.
pub(crate) fn fuzz_dictionary(target: &str) -> Option<PathBuf> {
    let name = match target {
        "gguf_header" => "gguf",
        "safetensors_header" => "safetensors",
        "scenario" | "replan" => "scenario",
        "export_text" => "export_text",
        "plan_file" => "plan",
        "llama_bench" | "calibrate" => "llama_bench",
        _ => return None,
    };
    Some(root().join("fuzz/dicts").join(format!("{name}.dict")))
}

/// The first 128 KiB of each reference file (headers and some data) for the parsers; the
/// scenario files for the planner; a small store, written by `stageplan-store`'s
/// `sample_store` example, for the store reader.
pub(crate) fn seed_corpus(target: &str, seeds: &Path, corpus: &Path) -> Result<(), String> {
    if target == "export_text" {
        // Name, model, image and host, separated by zero bytes.
        let seeds = [
            "Llama 3.1 70B\0/models/llama.gguf\0registry.example.com/stage:1\x0010.0.0.1:50052",
            "x\nrm -rf ~ #\0$(id)",
        ];
        for (i, seed) in seeds.iter().enumerate() {
            std::fs::write(corpus.join(format!("seed-{i}")), seed).map_err(|e| e.to_string())?;
        }
        return Ok(());
    }
    if target == "observations" {
        // A selector byte (5: a metrics file; 0–4: a Prometheus answer to that query), then text.
        let seeds = [
            "\x05{\"utilization\": {\"chat\": 0.5}, \"stages\": [{\"deployment\": \"chat\", \"replica\": 0, \"stage\": 1, \"step_s\": 0.03}], \"nodes\": [{\"node\": \"mac\", \"memory_free\": 1024}]}",
            "\x05{\"chat\": 0.85}",
            "\x00{\"status\":\"success\",\"data\":{\"resultType\":\"vector\",\"result\":[{\"metric\":{\"deployment\":\"chat\",\"replica\":\"0\",\"stage\":\"2\"},\"value\":[1.7e9,\"0.04\"]}]}}",
            "\x01{\"status\":\"error\",\"errorType\":\"bad_data\",\"error\":\"parse error\"}",
        ];
        for (i, seed) in seeds.iter().enumerate() {
            std::fs::write(corpus.join(format!("seed-{i}")), seed).map_err(|e| e.to_string())?;
        }
        return Ok(());
    }
    if target == "redb_store" {
        let file = seeds.join("sample.redb");
        let _ = std::fs::remove_file(&file);
        let mut write = cargo();
        write.args(["run", "--quiet", "--package", "stageplan-store", "--example", "sample_store", "--locked", "--"]);
        write.arg(&file);
        step("a sample store for the fuzz seed", write)?;
        // The target reads an input whose first byte is even as a whole file.
        let mut bytes = vec![0];
        bytes.extend(std::fs::read(&file).map_err(|e| e.to_string())?);
        return std::fs::write(corpus.join("seed-0"), bytes).map_err(|e| e.to_string());
    }
    let mut files: Vec<PathBuf> = Vec::new();
    let mut stack = vec![if matches!(target, "scenario" | "replan" | "llama_bench" | "calibrate" | "plan_file") {
        root().join("tests")
    } else {
        seeds.to_path_buf()
    }];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?.flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                files.push(path);
            }
        }
    }
    let wanted = |p: &Path| {
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        match target {
            "gguf_header" => name.ends_with(".gguf"),
            "safetensors_header" => name.ends_with(".safetensors") || name.ends_with(".index.json"),
            "replan" => name == "current.json",
            // llama-bench's JSON and JSONL output.
            "llama_bench" | "calibrate" => name == "results.json" || name == "results.jsonl",
            // Plan files, and the plans and re-plans the CLI tests print (`expected`).
            "plan_file" => name == "plan.json" || name == "expected",
            _ => name.ends_with(".json") && p.to_string_lossy().contains("scenarios"),
        }
    };
    for (i, file) in files.iter().filter(|p| wanted(p)).enumerate() {
        let mut bytes = std::fs::read(file).map_err(|e| e.to_string())?;
        if target == "plan_file" {
            match plan_text(&bytes) {
                Some(plan) => bytes = plan.into_bytes(),
                None => continue,
            }
        }
        bytes.truncate(128 << 10);
        // A scenario's machines, each alone: what an agent's `--node-file` holds.
        if target == "scenario"
            && let Ok(serde_json::Value::Object(scenario)) = serde_json::from_slice::<serde_json::Value>(&bytes)
            && let Some(serde_json::Value::Array(nodes)) = scenario.get("nodes")
        {
            for (k, node) in nodes.iter().enumerate() {
                std::fs::write(corpus.join(format!("seed-{i}-node-{k}")), node.to_string())
                    .map_err(|e| e.to_string())?;
            }
        }
        std::fs::write(corpus.join(format!("seed-{i}")), bytes).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// The plan JSON in a plan file, or in a CLI test's `expected` (`exit: 0`, `--- stdout`, the
/// plan, then perhaps `--- stderr`); `None` for what holds no plan (a plan has `feasible`).
fn plan_text(bytes: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(bytes).ok()?;
    let text = match text.split_once("--- stdout\n") {
        Some((_, printed)) => printed.split("\n--- stderr").next().unwrap_or_default(),
        None => text,
    };
    (text.trim_start().starts_with('{') && text.contains("\"feasible\"")).then(|| text.to_owned())
}

/// Builds, checks, probes and times the kernels on this machine's adapters, then runs the
/// example plan sharded across them.
pub(crate) fn gpu() -> Result<(), String> {
    let mut build = cargo();
    build.args(["build", "--release", "--package", "stageplan-cli", "--locked"]);
    step("build the CLI", build)?;
    let mut tests = cargo();
    tests.args(["test", "--release", "--package", "stageplan-gpu", "--locked"]);
    quiet_mesa(&mut tests);
    step("kernels checked against the CPU on every adapter", tests)?;
    let stageplan = target_dir().join("release/stageplan");
    let mut probe = Command::new(&stageplan);
    probe.args(["probe", "--gpu"]);
    quiet_mesa(&mut probe);
    step("probe every adapter", probe)?;
    let mut kernels = cargo();
    kernels.args(["bench", "--package", "stageplan-gpu", "--bench", "kernels", "--locked"]);
    quiet_mesa(&mut kernels);
    step("kernel benchmarks against the CPU", kernels)?;
    let mut sharded = Command::new(&stageplan);
    sharded.args(["run-sharded", EXAMPLE, "--width", "1024", "--tokens", "256"]).current_dir(root());
    quiet_mesa(&mut sharded);
    step("the example plan, sharded across local devices", sharded)
}

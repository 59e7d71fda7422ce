//! llama.cpp's own `--fit` (`llama-fit-params`, the same code llama-server runs by default)
//! against the plan, on models of real size: each is a sparse file (its header, then a hole
//! as long as its weights), which `--fit` sizes without reading. A local `ggml-rpc-server`
//! stands in for the GPU; it reports the machine's memory, and `--fit-target` (the memory
//! `--fit` leaves free) sets the budget. For each budget:
//!
//! - the `llama-fit` baseline chooses what the binary chooses, within one layer: the binary
//!   projects the logits of a whole micro-batch (it runs without llama-server's one output
//!   per sequence), so it may move a layer more;
//! - the plan fits wherever `--fit` fits, on the same budget;
//! - the plan's predicted speed is at least that of `--fit`'s placement priced by the same
//!   cost model (a layer `--fit` splits counts as moved: it moves most of its FFN).

use std::path::Path;
use std::process::Command;

use serde_json::Value;

use super::{cpu_rpc_server, llama_cpp_and_workspace, python, repo, stageplan};

struct FitCase {
    name: &'static str,
    /// `write_gguf.py` arguments; the file is written sparse in Q8_0.
    model: &'static [&'static str],
    /// Device memory `--fit` may fill, MiB.
    budgets: &'static [u64],
}

const FIT_CASES: [FitCase; 2] = [
    FitCase {
        // Qwen3-30B-A3B's shape (48 layers, 128 experts of 768, 8 used), 32.5 GB.
        name: "moe-30b-a3b",
        model: &[
            "--layers",
            "48",
            "--hidden",
            "2048",
            "--heads",
            "32",
            "--kv-heads",
            "4",
            "--head-dim",
            "128",
            "--ffn",
            "768",
            "--experts",
            "128",
            "--experts-used",
            "8",
            "--vocab",
            "151936",
            "--context",
            "40960",
        ],
        budgets: &[6144, 12288, 18432],
    },
    FitCase {
        // Llama 3.1 8B's shape, 8.5 GB.
        name: "dense-8b",
        model: &[
            "--layers",
            "32",
            "--hidden",
            "4096",
            "--heads",
            "32",
            "--kv-heads",
            "8",
            "--ffn",
            "14336",
            "--vocab",
            "128256",
            "--context",
            "131072",
        ],
        budgets: &[3072, 4096, 6144],
    },
];

/// Context both plan for.
const CONTEXT: u64 = 8192;

/// A placement on one machine: layers whole in RAM, layers whose FFN is in RAM.
#[derive(Copy, Clone, Debug, PartialEq)]
struct Placement {
    host_layers: u64,
    host_ffn: u64,
}

#[test]
fn llama_fit_params_never_beats_the_plan() {
    let Some((bin, work)) = llama_cpp_and_workspace("stageplan-fit") else { return };
    // The CPU device reports all physical memory as free (`ggml-cpu.cpp`), in whole MiB.
    let meminfo = std::fs::read_to_string("/proc/meminfo").expect("Linux's /proc/meminfo");
    let total_kib: u64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .unwrap()
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .unwrap();
    let total = total_kib / 1024;
    let (_server, port) = cpu_rpc_server(&bin);
    let mut report = String::from(
        "| model | budget MiB | --fit (RAM layers / FFN) | llama-fit baseline | plan | tok/s: plan / --fit's placement |\n",
    );
    for case in &FIT_CASES {
        let dir = work.join(case.name);
        std::fs::create_dir_all(&dir).unwrap();
        let model = dir.join("model.gguf");
        let status = Command::new(python())
            .arg(repo().join("tests/engine/write_gguf.py"))
            .arg(&model)
            .args(case.model)
            .args(["--sparse", "q8_0"])
            .status();
        assert!(status.expect("the GGUF writer runs").success(), "{}: write_gguf.py failed", case.name);
        let layers: u64 = case.model[1].parse().unwrap();
        for &budget in case.budgets {
            let target = total.checked_sub(budget).expect("the budget is below this machine's memory");
            let Some(fit) = fit_params(&bin, &model, port, target, layers) else {
                report.push_str(&format!("| {} | {budget} | does not fit | | | |\n", case.name));
                continue;
            };
            // The baseline leaves `--fit`'s 1 GiB margin itself: give it 1 GiB more.
            let (baseline, _) = plan(&dir, &model, r#""llama-fit""#, total, target - 1024);
            let (planned, speed) = plan(&dir, &model, r#""optimal""#, total, target);
            let planned =
                planned.unwrap_or_else(|| panic!("{}: --fit fits {budget} MiB and the plan does not", case.name));
            let baseline = baseline.expect("the baseline fits where --fit does");
            let manual = format!(
                r#""manual", "stages": [{{"node": "box", "layers": [0, {layers}], "offload": {{"host_layers": {}, "host_ffn": {}}}}}]"#,
                fit.host_layers, fit.host_ffn
            );
            let (_, fit_speed) = plan(&dir, &model, &manual, total, 0);
            report.push_str(&format!(
                "| {} | {budget} | {} / {} | {} / {} | {} / {} | {speed:.2} / {fit_speed:.2} |\n",
                case.name,
                fit.host_layers,
                fit.host_ffn,
                baseline.host_layers,
                baseline.host_ffn,
                planned.host_layers,
                planned.host_ffn
            ));
            let off_by = fit.host_layers.abs_diff(baseline.host_layers) + fit.host_ffn.abs_diff(baseline.host_ffn);
            assert!(off_by <= 1, "{} at {budget} MiB: --fit chose {fit:?}, the baseline {baseline:?}", case.name);
            assert!(
                speed >= fit_speed * (1.0 - 1e-9),
                "{} at {budget} MiB: the plan's {speed} tok/s is below --fit's {fit_speed}",
                case.name
            );
        }
    }
    eprintln!("{report}");
    let _ = std::fs::remove_dir_all(&work);
}

/// What `llama-fit-params` chooses for a device that must keep `target` MiB free, as a
/// placement; `None` when it cannot fit.
fn fit_params(bin: &Path, model: &Path, port: u16, target: u64, layers: u64) -> Option<Placement> {
    let out = Command::new(bin.join("llama-fit-params"))
        .arg("--model")
        .arg(model)
        .args(["--rpc", &format!("127.0.0.1:{port}"), "-c", &CONTEXT.to_string(), "-fitt", &target.to_string()])
        .output()
        .expect("llama-fit-params runs");
    if !out.status.success() {
        return None;
    }
    // `-c N -ngl K [-ot "blk\.I\.ffn_…=CPU,…"]`: `-ngl` counts the output layer; the overrides
    // name each layer whose FFN (or part of it) goes to RAM, and possibly the output's index,
    // which matches no tensor.
    let args = String::from_utf8(out.stdout).unwrap();
    let words: Vec<&str> = args.split_whitespace().collect();
    let ngl: i64 = words.iter().skip_while(|w| **w != "-ngl").nth(1).expect("-ngl").parse().unwrap();
    let host_layers = if ngl < 0 { 0 } else { (layers + 1).saturating_sub(ngl as u64) };
    let host_ffn = words.iter().skip_while(|w| **w != "-ot").nth(1).map_or(0, |patterns| {
        patterns
            .trim_matches('"')
            .split(',')
            .filter_map(|p| p.strip_prefix(r"blk\.")?.split_once(r"\.")?.0.parse::<u64>().ok())
            .filter(|&layer| layer < layers)
            .count() as u64
    });
    Some(Placement { host_layers, host_ffn })
}

/// The plan for one machine whose device has `memory` MiB less `reserve`, with ample RAM:
/// its placement when it fits, and its tokens per second.
fn plan(dir: &Path, model: &Path, policy: &str, memory: u64, reserve: u64) -> (Option<Placement>, f64) {
    let file = serde_json::to_string(&model.to_string_lossy()).unwrap();
    let scenario = format!(
        r#"{{"model": {{"file": {file}}}, "workload": {{"context": {CONTEXT}, "batch": 1, "kv": "f16"}},
            "objective": "latency", "policy": {policy},
            "nodes": [{{"name": "box", "kind": "gpu", "backend": "cuda", "memory": "{memory} MiB", "reserve": "{reserve} MiB",
                        "bandwidth": "504 GB/s", "compute": "29 TFLOPS",
                        "host": {{"memory": "256 GiB", "bandwidth": "90 GB/s", "threads": 8}}}}]}}"#
    );
    let path = dir.join("scenario.json");
    std::fs::write(&path, scenario).unwrap();
    let plan: Value = serde_json::from_str(&stageplan(&["plan", &path.to_string_lossy(), "--format", "json"])).unwrap();
    let speed = plan["tokens_per_s"].as_f64().unwrap_or(0.0);
    if plan["feasible"] != Value::Bool(true) {
        return (None, speed);
    }
    let offload = &plan["stages"][0]["offload"];
    let count = |key: &str| offload[key].as_u64().unwrap_or(0);
    (Some(Placement { host_layers: count("host_layers"), host_ffn: count("host_ffn") }), speed)
}

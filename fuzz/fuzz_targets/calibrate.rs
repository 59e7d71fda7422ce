//! llama-bench results down the whole road of `stageplan calibrate` (and of a results file
//! dropped on a machine's row of the page): every test read and checked (`bench::parse`),
//! the machine's node fitted to all its decode tests (`bench::fit_node`, as the CLI calls
//! it: a device preset or peak figures with memory, `--model` or not), then the fields,
//! summary and notes it prints. Bad input is a one-line error, never a panic; a fit's
//! efficiency stays in its bounds and its rates are finite; and the node it prints, pasted
//! into a scenario, is accepted as it is. (`llama_bench` fuzzes the reader alone, faster.)
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};
use stageplan::fit::bench;
use stageplan::presets::ModelPreset;

/// The machines `--device`, `--bandwidth --compute --memory` and the page's rows give.
fn machine(pick: usize) -> Value {
    match pick % 5 {
        0 => json!({"device": "rtx-4090"}),
        1 => json!({"device": "cpu-ddr5-dual-channel"}),
        2 => json!({"device": "m4-pro-64gb"}),
        3 => json!({"bandwidth": "1 TB/s", "compute": "80 TFLOPS", "memory": "24 GiB"}),
        // A row of the page: named, with its kind and a compute efficiency of its own.
        _ => json!({"name": "desk", "memory": "64 GiB", "bandwidth": "400 GB/s", "compute": "27 TFLOPS",
                    "kind": "unified", "efficiency": {"compute": 0.7}}),
    }
}

/// `--model`: none (each test's nearest preset), a dense and a mixture-of-experts preset.
const MODELS: [Option<&str>; 3] = [None, Some("llama-3.1-8b"), Some("mixtral-8x7b")];

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    // The machine and the model are chosen by the input's length, so every byte is the file's
    // (the corpus is llama-bench's own files).
    let node = machine(data.len());
    let model = MODELS[data.len() / 5 % MODELS.len()].map(|name| ModelPreset::find(name).expect("a preset"));
    let tests = match bench::parse(text) {
        Ok(tests) => tests,
        Err(e) => return assert!(!e.to_string().contains('\n'), "a two-line error: {e}"),
    };
    let fit = match bench::fit_node(&tests, &node, model) {
        Ok(fit) => fit,
        Err(e) => return assert!(!e.contains('\n'), "a two-line error: {e}"),
    };
    assert!((0.05..=1.5).contains(&fit.efficiency), "efficiency {}", fit.efficiency);
    assert!(!fit.tests.is_empty(), "a fit to no test");
    for test in &fit.tests {
        for rate in [test.measured, test.fitted, test.with_node] {
            assert!(rate.is_finite() && rate > 0.0, "a rate of {rate} tok/s: {test:?}");
        }
    }
    assert!(!fit.summary().contains('\n'));
    assert!(fit.notes().iter().all(|n| !n.contains('\n')));
    // What `calibrate` prints: the machine's node with the fit's fields, named.
    let mut ready = node.clone();
    ready["name"] = "this-machine".into();
    if let (Some(ready), Value::Object(fields)) = (ready.as_object_mut(), fit.fields(&node)) {
        ready.extend(fields);
    }
    let scenario = json!({"model": {"preset": "llama-3.1-8b"}, "nodes": [ready]}).to_string();
    if let Err(e) = stageplan::check(scenario.as_str(), stageplan::check::no_model_files) {
        panic!("the node calibrate prints is refused: {e}\n{scenario}");
    }
});

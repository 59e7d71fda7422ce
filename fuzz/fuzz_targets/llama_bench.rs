//! llama-bench results from untrusted text (`stageplan calibrate`): bad input must be a
//! one-line error, never a panic, and a fitted node's efficiency stays in its bounds.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stageplan::fit::bench;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    match bench::parse(text) {
        Err(e) => assert!(!e.to_string().contains('\n')),
        Ok(tests) => {
            // Only a few tests are planned: the parser is what is fuzzed.
            let tests: Vec<_> = tests.into_iter().take(4).collect();
            if let Ok(fit) = bench::fit_node(&tests, &serde_json::json!({"device": "rtx-4090"}), None) {
                assert!((0.05..=1.5).contains(&fit.efficiency));
            }
        }
    }
});

//! Every scenario in the repository read by the hand reader (`scenario/read.rs`) and written
//! back by the derived `Serialize`: what is written reads back as the same scenario, so the
//! reader takes every field the writer writes, with the meaning it was written with.

// A test harness reads its fixtures; the core it tests does not.
#![allow(clippy::disallowed_methods)]

use std::path::{Path, PathBuf};

use stageplan::Scenario;

fn scenario_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            scenario_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "json") && !path.ends_with("expected.json") {
            out.push(path);
        }
    }
}

#[test]
fn every_scenario_written_back_reads_the_same() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests");
    let mut files = Vec::new();
    scenario_files(&root, &mut files);
    let mut read = 0;
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        // Plans, configs, benchmark results and broken scenarios are not this test's.
        let Ok(scenario) = Scenario::from_json(&text) else { continue };
        let written = serde_json::to_string(&scenario).unwrap();
        let again = Scenario::from_json(&written).unwrap_or_else(|e| panic!("{}: {e}\n{written}", file.display()));
        // serde_json reads a float's shortest text to within one unit in the last place.
        let (a, b) = (serde_json::to_value(&again).unwrap(), serde_json::to_value(&scenario).unwrap());
        assert!(same(&a, &b), "{}: {again:?} vs {scenario:?}", file.display());
        read += 1;
    }
    assert!(read >= 80, "only {read} of {} files read as scenarios", files.len());
}

/// Equal JSON, numbers within a part in 10^15.
fn same(a: &serde_json::Value, b: &serde_json::Value) -> bool {
    use serde_json::Value;
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            let (x, y) = (x.as_f64().unwrap(), y.as_f64().unwrap());
            (x - y).abs() <= 1e-15 * x.abs().max(y.abs())
        }
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same(x, y)),
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}

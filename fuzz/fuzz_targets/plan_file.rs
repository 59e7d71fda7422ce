//! A plan file from untrusted text, down the road `stageplan export PLAN` takes: read by
//! `export::read_input` (a plan as `stageplan plan --format json` prints it, or a re-plan's
//! `{"plan": …}`, or replicas, exported to llama.cpp with their balancer), checked by
//! `Layout::new`, then exported to every target. (Text that reads
//! as a scenario is planned first by the CLI: that road is the `scenario` target's, and a
//! planner at its limits takes seconds per input, which would starve this one.) A malformed
//! file is an error, never a panic. An export's stages tile the layers from 0; its text holds
//! no control, line-separator or bidirectional character but line breaks and tabs, whatever
//! the file's strings hold; the shell scripts split into words, the manifests read back as
//! YAML and exo's file as JSON.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stageplan::export::{ExportInput, ExportOptions, Target, export, read_input, replicas};
use stageplan::quote::unsafe_char;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let plan = match read_input(text) {
        Ok(ExportInput::Plan(plan)) => plan,
        // Replicas (`stageplan plan --ttft … --format json`): each exported as llama.cpp runs it.
        Ok(ExportInput::Replicas(list)) => {
            let options = ExportOptions::for_plans(list.iter().map(|r| &r.plan));
            if let Ok(exported) = replicas(&list, Target::LlamaCpp, &options) {
                assert!(list.iter().all(|r| r.plan.feasible), "replicas: an export of a plan that does not fit");
                let raw = exported.text.chars().find(|&c| unsafe_char(c) && c != '\n' && c != '\t');
                assert!(raw.is_none(), "replicas: {raw:?} reached the export");
            }
            return;
        }
        _ => return,
    };
    // As the CLI: a plan file's kinds are its stages' own.
    let options = ExportOptions::for_plan(&plan);
    for target in Target::ALL {
        let Ok(exported) = export(&plan, target, &options) else { continue };
        assert!(plan.feasible && !exported.text.is_empty(), "{target}: an export of a plan that does not fit");
        let mut at = 0;
        for stage in &plan.stages {
            assert_eq!(stage.layers[0], at, "{target}: a gap or an overlap was exported");
            assert!(stage.layers[1] > at, "{target}: an empty stage was exported");
            at = stage.layers[1];
        }
        let raw = exported.text.chars().find(|&c| unsafe_char(c) && c != '\n' && c != '\t');
        assert!(raw.is_none(), "{target}: {raw:?} reached the export");
        match target {
            Target::LlamaCpp | Target::Vllm | Target::Megatron => {
                let commands: Vec<&str> = exported.text.lines().filter(|l| !l.trim_start().starts_with('#')).collect();
                assert!(shlex::split(&commands.join("\n")).is_some(), "{target}: not one valid shell text");
            }
            Target::Kubernetes => {
                assert!(yaml_rust2::YamlLoader::load_from_str(&exported.text).is_ok(), "{target}: not valid YAML");
            }
            Target::Exo => {
                assert!(serde_json::from_str::<serde_json::Value>(&exported.text).is_ok(), "{target}: not valid JSON");
            }
            Target::DeepSpeed => {}
        }
    }
});

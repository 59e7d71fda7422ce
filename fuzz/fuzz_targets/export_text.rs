//! Untrusted text through every export: a model name (as a GGUF's `general.name` gives it),
//! `--model`, `--image` and `--host` values. Each export either refuses the value naming it
//! or prints it as data: no control character in the output, the shell scripts split into
//! words with the model's path as one word, the YAML reads back with the image intact.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use stageplan::Plan;
use stageplan::export::{ExportOptions, Target, export};

fn plan() -> &'static Plan {
    static PLAN: OnceLock<Plan> = OnceLock::new();
    PLAN.get_or_init(|| {
        let problem = stageplan::check(
            // Small, so each run is quick: two stages are enough to print every kind of line.
            r#"{"model": {"preset": "llama-3.2-1b", "weights": "q4_k_m"},
                "nodes": [{"name": "a", "device": "rtx-3060-12gb"}, {"name": "b", "device": "rtx-3060-12gb"}],
                "policy": "even"}"#,
            stageplan::check::no_model_files,
        )
        .map(|c| c.problem)
        .expect("the fixed scenario is valid");
        let plan = stageplan::plan(&problem);
        assert!(plan.feasible && plan.stages.len() == 2, "the fixed plan has two stages");
        plan
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    // Four fields separated by a zero byte: name, model, image, host.
    let mut parts = text.split('\0');
    let (name, model, image, host) = (parts.next().unwrap_or(""), parts.next(), parts.next(), parts.next());
    let mut plan = plan().clone();
    plan.model.name = name.to_owned();
    let mut options = ExportOptions::default();
    options.model = model.map(str::to_owned);
    options.image = image.map(str::to_owned);
    if let Some(host) = host {
        options.hosts.insert(plan.stages[0].node.clone(), host.to_owned());
    }
    for target in Target::ALL {
        let Ok(exported) = export(&plan, target, &options) else { continue };
        assert!(
            !exported.text.chars().any(|c| c.is_control() && c != '\n' && c != '\t'),
            "{target}: a control character"
        );
        match target {
            Target::LlamaCpp | Target::Vllm | Target::Megatron => {
                let commands: Vec<&str> = exported.text.lines().filter(|l| !l.trim_start().starts_with('#')).collect();
                let words = shlex::split(&commands.join("\n")).expect("one valid shell text");
                if let Some(model) = &options.model
                    && target != Target::Megatron
                {
                    assert!(words.iter().any(|w| w == model), "{target}: the model is not one word");
                }
                if let Some(host) = &options.hosts.values().next() {
                    // A host is a name or an address: never shell syntax.
                    assert!(!host.contains(['$', '`', ';', '|', '&', '\'', '"', ' ', '\n']), "{target}: {host:?}");
                }
            }
            Target::Kubernetes => {
                let docs = yaml_rust2::YamlLoader::load_from_str(&exported.text).expect("valid YAML");
                if let Some(image) = &options.image {
                    let deployment =
                        docs.iter().find(|d| d["kind"].as_str() == Some("Deployment")).expect("a Deployment");
                    assert_eq!(
                        deployment["spec"]["template"]["spec"]["containers"][0]["image"].as_str(),
                        Some(image.as_str())
                    );
                }
            }
            Target::Exo => {
                let _: serde_json::Value = serde_json::from_str(&exported.text).expect("valid JSON");
            }
            Target::DeepSpeed => {}
        }
    }
});

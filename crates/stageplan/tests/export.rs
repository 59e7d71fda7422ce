//! Golden and round-trip tests of every export target.
//!
//! Each folder under `tests/export/` at the repository root is a case: `scenario.json`, an
//! optional `options.json` (`ExportOptions`), and one expected file per target, named by
//! `Target::file_name` (the text) and `…notes` (what the target could not express). After an
//! intended change of output, regenerate with `UPDATE_EXPECT=1 cargo test -p stageplan --test export`.
//!
//! Every output is also parsed back the way its engine reads it — llama.cpp's split rule on
//! `--tensor-split`, vLLM's partition, exo's JSON, Kubernetes' YAML, DeepSpeed's boundaries,
//! Megatron's layout — and must give the plan's stages: same machines, same layers, same order.
//! DeepSpeed's and Megatron's launch lines are numbered into ranks as their launchers number
//! them and must give each stage its machine's GPUs. A target that cannot run a case's plan
//! (exo on a machine's several GPUs) refuses it with the error in `{target}.refused`.

// A test harness reads its fixtures; the core it tests does not.
#![allow(clippy::disallowed_methods)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use stageplan::Plan;
use stageplan::device::DeviceKind;
use stageplan::export::{ExportOptions, Target, export, llama_cpp_layers};
use yaml_rust2::{Yaml, YamlLoader};

/// A stage as an engine would run it: machine and layers `[start, end)`.
type Stages = Vec<(String, usize, usize)>;

fn cases() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/export");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root)
        .expect("tests/export exists")
        .map(|e| e.expect("readable entry").path())
        .filter(|p| p.join("scenario.json").exists())
        .collect();
    dirs.sort();
    assert!(dirs.len() >= 3, "found only {} cases", dirs.len());
    dirs
}

fn load(dir: &Path) -> (Plan, ExportOptions) {
    let scenario = std::fs::read_to_string(dir.join("scenario.json")).expect("scenario");
    let problem =
        stageplan::check(scenario.as_str(), stageplan::check::no_model_files).expect("a valid scenario").problem;
    let plan = stageplan::plan(&problem);
    assert!(plan.feasible, "{}: the case's plan must fit", dir.display());
    let mut options = ExportOptions::for_problem(&problem);
    if let Ok(text) = std::fs::read_to_string(dir.join("options.json")) {
        let given: ExportOptions = serde_json::from_str(&text).expect("options.json is ExportOptions");
        options = ExportOptions { kinds: options.kinds, ..given };
    }
    (plan, options)
}

fn planned_stages(plan: &Plan) -> Stages {
    plan.stages.iter().map(|s| (s.node.clone(), s.layers[0], s.layers[1])).collect()
}

#[test]
fn every_target_matches_its_golden_file_and_parses_back_to_the_plan() {
    for dir in cases() {
        let (plan, options) = load(&dir);
        let expected = planned_stages(&plan);
        for target in Target::ALL {
            let refused = dir.join(format!("{}.refused", target.name()));
            let export = match export(&plan, target, &options) {
                Ok(export) => export,
                Err(e) if refused.exists() || std::env::var_os("UPDATE_EXPECT").is_some() => {
                    expect_test::expect_file![refused].assert_eq(&format!("{e}\n"));
                    let stale = dir.join(target.file_name());
                    assert!(
                        !stale.exists(),
                        "{}: {target} refuses the plan; remove {}",
                        dir.display(),
                        stale.display()
                    );
                    continue;
                }
                Err(e) => panic!("{}: {target}: {e}", dir.display()),
            };
            assert!(!refused.exists(), "{}: {target} exports the plan; remove {}", dir.display(), refused.display());
            expect_test::expect_file![dir.join(&export.file_name)].assert_eq(&export.text);
            let notes: String = export.notes.iter().map(|n| format!("{n}\n")).collect();
            expect_test::expect_file![dir.join(format!("{}.notes", export.file_name))].assert_eq(&notes);
            let parsed = match target {
                Target::LlamaCpp => llama_cpp(&export.text, &plan, &options),
                Target::Vllm => vllm(&export.text, &plan),
                Target::Exo => exo(&export.text),
                Target::Kubernetes => kubernetes(&export.text, &plan, &options),
                Target::DeepSpeed => {
                    assert_eq!(
                        deepspeed_ranks(&export.text),
                        stage_gpus(&plan),
                        "{}: DeepSpeed's ranks",
                        dir.display()
                    );
                    deepspeed(&export.text)
                }
                Target::Megatron => {
                    assert_eq!(megatron_ranks(&export.text), stage_gpus(&plan), "{}: Megatron's ranks", dir.display());
                    megatron(&export.text, &plan)
                }
            };
            assert_eq!(parsed, expected, "{}: {target} does not give the plan's stages", dir.display());
        }
    }
}

/// The value after `flag` in a command line.
fn flag<'a>(words: &[&'a str], flag: &str) -> Option<&'a str> {
    words.iter().position(|w| *w == flag).map(|i| words[i + 1])
}

/// The words of the command that starts with `program` (continuation lines joined).
fn command<'a>(text: &'a str, program: &str) -> Vec<&'a str> {
    let start =
        text.lines().position(|l| l.starts_with(program)).unwrap_or_else(|| panic!("no `{program}` in\n{text}"));
    let mut words = Vec::new();
    for line in text.lines().skip(start) {
        let continued = line.trim_end().ends_with('\\');
        words.extend(line.trim_end().trim_end_matches('\\').split_whitespace());
        if !continued {
            break;
        }
    }
    words
}

/// The node each device of `--device` is: the host's own GPU, or the node whose address is
/// that `--rpc` endpoint. Then llama.cpp's own rule on `--tensor-split` and `-ngl` places
/// the blocks.
fn llama_cpp(text: &str, plan: &Plan, options: &ExportOptions) -> Stages {
    let words = command(text, "llama-server");
    let main = options.main.clone().unwrap_or_else(|| plan.stages[0].node.clone());
    // The machine the server runs on; with several GPUs, `CUDA{k}` is its GPU k.
    let main_machine = plan
        .stages
        .iter()
        .find(|s| s.node == main)
        .and_then(|s| s.gpu_of.as_ref())
        .map_or_else(|| main.clone(), |g| g.machine.clone());
    let machine_gpu = |k: u32| {
        plan.stages.iter().find(|s| s.gpu_of.as_ref().is_some_and(|g| g.machine == main_machine && g.index == k))
    };
    let rpc: Vec<&str> = flag(&words, "--rpc").map_or_else(Vec::new, |r| r.split(',').collect());
    let address_of = |node: &str| -> String {
        if node == main {
            return "127.0.0.1".to_owned();
        }
        let address = options.hosts.get(node).map_or(node, String::as_str);
        address.split(':').next().unwrap_or(address).to_owned()
    };
    let devices: Vec<String> = flag(&words, "--device")
        .expect("--device")
        .split(',')
        .map(|device| match device.strip_prefix("RPC") {
            Some(k) => {
                let endpoint = rpc[k.parse::<usize>().expect("RPC index")];
                let host = endpoint.rsplit_once(':').expect("host:port").0;
                let node = plan.stages.iter().find(|s| address_of(&s.node) == host).expect("an RPC endpoint is a node");
                node.node.clone()
            }
            None => match device.strip_prefix("CUDA").and_then(|k| machine_gpu(k.parse().ok()?)) {
                Some(stage) => stage.node.clone(),
                None => {
                    let kind = options.kinds.get(&main).copied().unwrap_or_default();
                    assert_eq!(device, if kind == DeviceKind::Unified { "MTL0" } else { "CUDA0" });
                    main.clone()
                }
            },
        })
        .collect();
    let shares: Vec<f32> =
        flag(&words, "--tensor-split").expect("-ts").split(',').map(|s| s.parse().expect("a number")).collect();
    let ngl: usize = flag(&words, "--n-gpu-layers").expect("-ngl").parse().expect("a number");
    let n_layer = plan.model.layers;
    let slots = llama_cpp_layers(&shares, n_layer, ngl);
    assert_eq!(slots[n_layer], Some(devices.len() - 1), "the output layer is on the last device");
    let context: u64 = flag(&words, "--ctx-size").expect("-c").parse().expect("a number");
    assert_eq!(context, plan.workload.context * plan.workload.batch);
    runs(slots[..n_layer].iter().map(|d| devices[d.expect("every block is offloaded")].clone()))
}

/// Contiguous runs of the same machine: the stages as an engine sees them.
fn runs(per_layer: impl Iterator<Item = String>) -> Stages {
    let mut stages: Stages = Vec::new();
    for (layer, node) in per_layer.enumerate() {
        match stages.last_mut() {
            Some((last, _, end)) if *last == node => *end = layer + 1,
            _ => stages.push((node, layer, layer + 1)),
        }
    }
    stages
}

/// Each stage's machine and the GPUs it runs on there (0 on a machine of one device).
type StageGpus = Vec<(String, Vec<u32>)>;

fn stage_gpus(plan: &Plan) -> StageGpus {
    plan.stages
        .iter()
        .map(|s| match &s.gpu_of {
            Some(g) if s.tensor_parallel.is_empty() => (g.machine.clone(), vec![g.index]),
            Some(g) => (g.machine.clone(), s.tensor_parallel.clone()),
            None => (s.node.clone(), vec![0]),
        })
        .collect()
}

/// Ranks numbered as the launchers number them — machine by machine in `machines`' order,
/// then by each machine's GPUs — cut into stages of `degree` neighbouring ranks.
fn stages_of_ranks(machines: &[(String, Vec<u32>)], degree: usize) -> StageGpus {
    let ranks: Vec<(&str, u32)> =
        machines.iter().flat_map(|(m, gpus)| gpus.iter().map(move |&g| (m.as_str(), g))).collect();
    ranks
        .chunks(degree)
        .map(|group| {
            assert!(group.iter().all(|(m, _)| *m == group[0].0), "a stage's ranks span machines: {group:?}");
            (group[0].0.to_owned(), group.iter().map(|&(_, g)| g).collect())
        })
        .collect()
}

/// Megatron's launch lines: `#   NAME: [CUDA_VISIBLE_DEVICES=a,b ]torchrun --nnodes N
/// --node-rank R --nproc-per-node P …`, and `--tensor-model-parallel-size` (1 if absent).
fn megatron_ranks(text: &str) -> StageGpus {
    let mut machines: Vec<(usize, String, Vec<u32>)> = text
        .lines()
        .filter(|l| l.contains("torchrun --nnodes"))
        .map(|line| {
            let (name, command) = line.trim_start_matches('#').trim().split_once(": ").expect("NAME: command");
            let words: Vec<&str> = command.split_whitespace().collect();
            let rank: usize = flag(&words, "--node-rank").expect("--node-rank").parse().unwrap();
            let count: u32 = flag(&words, "--nproc-per-node").expect("--nproc-per-node").parse().unwrap();
            // torchrun's local rank r takes the r-th visible GPU.
            let gpus: Vec<u32> = match words[0].strip_prefix("CUDA_VISIBLE_DEVICES=") {
                Some(list) => list.split(',').map(|g| g.parse().unwrap()).collect(),
                None => (0..count).collect(),
            };
            assert_eq!(gpus.len(), count as usize, "{line}");
            (rank, name.to_owned(), gpus)
        })
        .collect();
    machines.sort_by_key(|m| m.0);
    assert!(machines.iter().enumerate().all(|(i, m)| m.0 == i), "node ranks 0…n−1");
    let words: Vec<&str> = text.split_whitespace().collect();
    let degree = flag(&words, "--tensor-model-parallel-size").map_or(1, |d| d.parse().unwrap());
    stages_of_ranks(&machines.into_iter().map(|(_, m, g)| (m, g)).collect::<Vec<_>>(), degree)
}

/// DeepSpeed's hostfile (`#   NAME slots=N`, in order) and `--include "a:0,1@b"` (a host
/// without GPUs: all its slots), and `TENSOR_PARALLEL`.
fn deepspeed_ranks(text: &str) -> StageGpus {
    let hosts: Vec<(&str, u32)> = text
        .lines()
        .filter_map(|l| l.strip_prefix("#   "))
        .filter_map(|l| l.split_once(" slots="))
        .map(|(name, slots)| (name, slots.parse().unwrap()))
        .collect();
    let include = text.split_once("--include \"").expect("--include").1.split_once('"').unwrap().0;
    let mut chosen: BTreeMap<&str, Vec<u32>> = BTreeMap::new();
    for host in include.split('@') {
        let (name, gpus) = host.split_once(':').map_or((host, None), |(n, g)| (n, Some(g)));
        let slots = hosts.iter().find(|h| h.0 == name).expect("an included host is in the hostfile").1;
        let gpus = gpus.map_or_else(|| (0..slots).collect(), |g| g.split(',').map(|g| g.parse().unwrap()).collect());
        chosen.insert(name, gpus);
    }
    // The launcher keeps the hostfile's order, each host's GPUs as included.
    let machines: Vec<(String, Vec<u32>)> =
        hosts.iter().map(|(name, _)| ((*name).to_owned(), chosen.remove(name).expect("every host included"))).collect();
    let line = text.lines().find(|l| l.starts_with("TENSOR_PARALLEL = ")).expect("TENSOR_PARALLEL");
    stages_of_ranks(&machines, line["TENSOR_PARALLEL = ".len()..].parse().unwrap())
}

/// Stages from lengths, machines in the order the plan gives them (the engine takes ranks).
fn from_counts(nodes: &[String], counts: &[usize]) -> Stages {
    assert_eq!(nodes.len(), counts.len());
    let mut start = 0;
    nodes
        .iter()
        .zip(counts)
        .map(|(node, &count)| {
            start += count;
            (node.clone(), start - count, start)
        })
        .collect()
}

/// `VLLM_PP_LAYER_PARTITION` as vLLM's `get_pp_indices` reads it: one count per rank,
/// as many as `--pipeline-parallel-size`, summing to the layers. Ranks follow the plan's
/// machine order (the header comment states it).
fn vllm(text: &str, plan: &Plan) -> Stages {
    let words = command(text, "VLLM_PP_LAYER_PARTITION=");
    let partition = words[0].strip_prefix("VLLM_PP_LAYER_PARTITION=").expect("the variable");
    let counts: Vec<usize> = partition.split(',').map(|c| c.parse().expect("an integer")).collect();
    let size: usize = flag(&words, "--pipeline-parallel-size").expect("-pp").parse().expect("a number");
    assert_eq!(counts.len(), size);
    assert_eq!(counts.iter().sum::<usize>(), plan.model.layers);
    let max_len: u64 = flag(&words, "--max-model-len").expect("--max-model-len").parse().expect("a number");
    assert_eq!(max_len, plan.workload.context);
    let nodes: Vec<String> = (0..size)
        .map(|rank| {
            let marker = format!("rank {rank} = ");
            let at = text.find(&marker).expect("the rank map") + marker.len();
            let label = text[at..].split(' ').next().expect("a node");
            // A tensor-parallel stage is named by its GPUs (`box/gpu0+gpu1`).
            plan.stages.iter().find(|s| s.label() == label).map_or(label, |s| s.node.as_str()).to_owned()
        })
        .collect();
    let degree = plan.stages[0].tensor_parallel.len().max(1);
    assert_eq!(flag(&words, "--tensor-parallel-size").map(|d| d.parse::<usize>().unwrap()), Some(degree));
    from_counts(&nodes, &counts)
}

fn exo(text: &str) -> Stages {
    let value: serde_json::Value = serde_json::from_str(text).expect("exo export is JSON");
    let partitions = value["partitions"].as_array().expect("partitions");
    let n_layers = value["n_layers"].as_u64().expect("n_layers") as usize;
    let stages: Stages = partitions
        .iter()
        .map(|p| {
            let (start, end) = (p["start_layer"].as_u64().unwrap() as usize, p["end_layer"].as_u64().unwrap() as usize);
            assert_eq!(p["layers"].as_u64().unwrap() as usize, end - start);
            (p["node_id"].as_str().expect("node_id").to_owned(), start, end)
        })
        .collect();
    assert_eq!(stages.last().map(|s| s.2), Some(n_layers));
    stages
}

/// Deployments pinned to their machines, with their layers and the next hop's Service; the
/// ConfigMap's plan agrees.
fn kubernetes(text: &str, plan: &Plan, options: &ExportOptions) -> Stages {
    let documents = YamlLoader::load_from_str(text).expect("the manifests are YAML");
    let kind = |d: &Yaml| d["kind"].as_str().unwrap_or_default().to_owned();
    let services: Vec<String> = documents
        .iter()
        .filter(|d| kind(d) == "Service")
        .map(|d| {
            let port = d["spec"]["ports"][0]["port"].as_i64().expect("a port");
            format!("{}:{port}", d["metadata"]["name"].as_str().expect("a name"))
        })
        .collect();
    let config = documents.iter().find(|d| kind(d) == "ConfigMap").expect("a ConfigMap");
    let summary: serde_json::Value =
        serde_json::from_str(config["data"]["plan.json"].as_str().expect("plan.json")).expect("JSON plan");
    assert_eq!(summary["stages"].as_array().map(Vec::len), Some(plan.stages.len()));
    // A machine's stages in pipeline order (a machine with several GPUs holds more than one).
    let mut by_host: BTreeMap<String, Vec<&stageplan::plan::Stage>> = BTreeMap::new();
    for s in plan.stages.iter().rev() {
        let machine = s.gpu_of.as_ref().map_or(s.node.as_str(), |g| g.machine.as_str());
        let address = options.hosts.get(machine).map_or(machine, String::as_str);
        by_host.entry(address.split(':').next().unwrap_or(address).to_owned()).or_default().push(s);
    }
    let deployments: Vec<&Yaml> = documents.iter().filter(|d| kind(d) == "Deployment").collect();
    assert_eq!(services.len(), deployments.len(), "a Service per stage");
    deployments
        .iter()
        .enumerate()
        .map(|(k, d)| {
            let pod = &d["spec"]["template"]["spec"];
            let host = pod["nodeSelector"]["kubernetes.io/hostname"].as_str().expect("pinned to a node");
            let stage = by_host.get_mut(host).and_then(Vec::pop).expect("a stage of the plan on that node");
            let node = stage.node.clone();
            let container = &pod["containers"][0];
            let env: BTreeMap<&str, &str> = container["env"]
                .as_vec()
                .expect("env")
                .iter()
                .map(|e| (e["name"].as_str().unwrap(), e["value"].as_str().expect("env values are strings")))
                .collect();
            assert_eq!(env["STAGEPLAN_STAGE"], k.to_string());
            assert_eq!(env.get("STAGEPLAN_NEXT").copied(), services.get(k + 1).map(String::as_str));
            let gpu = container["resources"]["limits"]["nvidia.com/gpu"].as_i64();
            let wants_gpu = options.kinds.get(&node).copied().unwrap_or_default() == DeviceKind::Gpu;
            let gpus = stage.tensor_parallel.len().max(1) as i64;
            assert_eq!(gpu, (wants_gpu || stage.gpu_of.is_some()).then_some(gpus), "{node}: GPU request");
            let (start, end) = env["STAGEPLAN_LAYERS"].split_once('-').expect("start-end");
            assert_eq!(summary["stages"][k]["node"].as_str(), Some(node.as_str()));
            (node, start.parse().unwrap(), end.parse().unwrap())
        })
        .collect()
}

/// `BLOCK_PARTS` (DeepSpeed's `parts` over the blocks) and `STAGE_NODES`.
fn deepspeed(text: &str) -> Stages {
    let list = |name: &str| -> Vec<String> {
        let line = text.lines().find(|l| l.starts_with(&format!("{name} = "))).expect(name);
        let inner = line.split_once('[').and_then(|(_, r)| r.strip_suffix(']')).expect("a list");
        inner.split(',').map(|w| w.trim().trim_matches('"').to_owned()).collect()
    };
    let parts: Vec<usize> = list("BLOCK_PARTS").iter().map(|p| p.parse().expect("an integer")).collect();
    let nodes = list("STAGE_NODES");
    assert_eq!(parts[0], 0);
    assert!(parts.windows(2).all(|w| w[0] < w[1]), "{parts:?}");
    let counts: Vec<usize> = parts.windows(2).map(|w| w[1] - w[0]).collect();
    from_counts(&nodes, &counts)
}

/// Megatron's layout: stages split by `|`, `t` a block (`t*N` N of them), `E` and `L` the
/// embedding and the loss (head) on the first and last stage.
fn megatron(text: &str, plan: &Plan) -> Stages {
    // The arguments are a bash array: every word between `STAGEPLAN_PIPELINE_ARGS=(` and `)`.
    let start =
        text.find("STAGEPLAN_PIPELINE_ARGS=(\n").expect("the arguments array") + "STAGEPLAN_PIPELINE_ARGS=(\n".len();
    let words: Vec<&str> =
        text[start..text[start..].find("\n)").expect("the array ends") + start].split_whitespace().collect();
    let layers: usize = flag(&words, "--num-layers").expect("--num-layers").parse().unwrap();
    assert_eq!(layers, plan.model.layers);
    let size: usize = flag(&words, "--pipeline-model-parallel-size").expect("-pp").parse().unwrap();
    let layout = flag(&words, "--pipeline-model-parallel-layout").expect("the layout").trim_matches('"');
    let stages: Vec<&str> = layout.split('|').collect();
    assert_eq!(stages.len(), size);
    assert!(stages[0].starts_with('E') && stages[size - 1].ends_with('L'), "{layout}");
    let counts: Vec<usize> = stages
        .iter()
        .map(|stage| {
            let mut count = 0;
            let mut chars = stage.chars().peekable();
            while let Some(c) = chars.next() {
                if c != 't' {
                    assert!(c == 'E' || c == 'L', "{layout}: `{c}`");
                    continue;
                }
                if chars.peek() == Some(&'*') {
                    chars.next();
                    let digits: String = std::iter::from_fn(|| chars.next_if(char::is_ascii_digit)).collect();
                    count += digits.parse::<usize>().expect("a repeat count");
                } else {
                    count += 1;
                }
            }
            count
        })
        .collect();
    let order = "in this order: ";
    let at = text.find(order).expect("the machine order") + order.len();
    let nodes: Vec<String> =
        text[at..].lines().next().unwrap().trim_end_matches('.').split(", ").map(str::to_owned).collect();
    from_counts(&nodes, &counts)
}

/// Strings an attacker would put in a model name, `--model` or `--image`: shell syntax,
/// quotes, line breaks, terminal escapes, YAML indicators.
fn hostile_text() -> impl proptest::strategy::Strategy<Value = String> {
    use proptest::prelude::*;
    let pieces = prop::sample::select(vec![
        "$(id)",
        "`id`",
        ";",
        "|",
        "&&",
        ">",
        "'",
        "\"",
        "\\",
        "\n",
        "\r",
        "\u{1b}[2J",
        "\u{1b}]0;x\u{7}",
        "#",
        " ",
        "*",
        "~",
        "!",
        "-",
        "rm -rf ~ #",
        "\u{85}",
        "\u{2028}",
        "\u{202e}",
        "é",
        "yes",
        "null",
        ": ",
        "- ",
        "&a",
        "{}",
        "[]",
    ]);
    prop_oneof![prop::collection::vec(pieces, 1..6).prop_map(|p| p.concat()), "[^\u{0}]{1,16}"]
}

/// The lines of `text` that a shell runs: not comments, not blank.
fn command_lines(text: &str) -> Vec<&str> {
    text.lines().filter(|l| !l.trim_start().starts_with('#') && !l.trim().is_empty()).collect()
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

    /// Any model name (from a GGUF's `general.name`) and any `--model`/`--image` text goes
    /// through every export as data: comments stay comments, the commands stay the same
    /// commands, and each value reads back as itself.
    #[test]
    fn hostile_names_stay_data_in_every_export(name in hostile_text(), model in hostile_text(), image in hostile_text(), given in proptest::bool::ANY) {
        let (mut plan, mut options) = load(&cases().into_iter().find(|c| c.ends_with("home-70b")).expect("the home-70b case"));
        let benign_plan = plan.clone();
        plan.model.name = name;
        options.model = given.then(|| model.clone());
        options.image = Some(image.clone());
        let benign_options = ExportOptions { model: given.then(|| "m".into()), image: Some("i".into()), ..options.clone() };
        let control = |s: &str| s.chars().any(stageplan::quote::unsafe_char);
        if control(&image) || (given && control(&model)) {
            // An option is refused, naming it, rather than printed raw.
            let refused = export(&plan, Target::LlamaCpp, &options);
            proptest::prop_assert!(matches!(refused, Err(stageplan::export::ExportError::Option { .. })), "{:?}", refused);
            return Ok(());
        }
        for target in Target::ALL {
            let hostile = export(&plan, target, &options).expect("exports");
            let benign = export(&benign_plan, target, &benign_options).expect("exports");
            // Same number of lines, comments where the benign export has them.
            let lines: Vec<&str> = hostile.text.lines().collect();
            let benign_lines: Vec<&str> = benign.text.lines().collect();
            for h in &lines {
                proptest::prop_assert!(!h.chars().any(|c| c.is_control() && c != '\t'), "{}: {:?}", target, h);
            }
            // YAML may fold a value onto one line (checked by reading it back below).
            if target != Target::Kubernetes {
                proptest::prop_assert_eq!(lines.len(), benign_lines.len(), "{}:\n{}", target, hostile.text);
                for (h, b) in lines.iter().zip(&benign_lines) {
                    proptest::prop_assert_eq!(h.starts_with('#'), b.starts_with('#'), "{}: {:?}", target, h);
                }
            }
            match target {
                Target::LlamaCpp | Target::Vllm | Target::Megatron => {
                    // The shell's words: the benign script's, with the model's word replaced.
                    let words = |text: &str| {
                        shlex::split(&command_lines(text).join("\n")).expect("the script is one valid shell text")
                    };
                    let (h, b) = (words(&hostile.text), words(&benign.text));
                    proptest::prop_assert_eq!(h.len(), b.len(), "{}:\n{}", target, hostile.text);
                    for (hw, bw) in h.iter().zip(&b) {
                        if !given {
                            // A placeholder from the name: some word, but never a control.
                            proptest::prop_assert!(!control(hw), "{}: {:?}", target, hw);
                        } else if bw != "m" {
                            proptest::prop_assert_eq!(hw, bw, "{}:\n{}", target, hostile.text);
                        } else {
                            proptest::prop_assert_eq!(hw, &model);
                        }
                    }
                }
                Target::Kubernetes => {
                    let docs = YamlLoader::load_from_str(&hostile.text).expect("valid YAML");
                    let images: Vec<&str> = docs
                        .iter()
                        .filter(|d| d["kind"].as_str() == Some("Deployment"))
                        .map(|d| d["spec"]["template"]["spec"]["containers"][0]["image"].as_str().unwrap_or_default())
                        .collect();
                    proptest::prop_assert!(!images.is_empty() && images.iter().all(|i| *i == image), "{}", hostile.text);
                    let kinds = |docs: &[Yaml]| docs.iter().map(|d| d["kind"].as_str().map(str::to_owned)).collect::<Vec<_>>();
                    let benign_docs = YamlLoader::load_from_str(&benign.text).expect("valid YAML");
                    proptest::prop_assert_eq!(kinds(&docs), kinds(&benign_docs));
                    let plan_json = docs[0]["data"]["plan.json"].as_str().expect("the ConfigMap holds the plan");
                    let carried: serde_json::Value = serde_json::from_str(plan_json).expect("the plan reads back");
                    proptest::prop_assert_eq!(carried["model"]["name"].as_str(), Some(plan.model.name.as_str()));
                }
                Target::Exo if given => {
                    let value: serde_json::Value = serde_json::from_str(&hostile.text).expect("JSON");
                    proptest::prop_assert_eq!(value["model_id"].as_str(), Some(model.as_str()));
                }
                Target::Exo => {
                    let value: serde_json::Value = serde_json::from_str(&hostile.text).expect("JSON");
                    proptest::prop_assert_eq!(value["model_id"].as_str(), Some(plan.model.name.as_str()));
                }
                Target::DeepSpeed => {}
            }
        }
    }
}

/// The processes an agent starts are the commands the text prints: each command line of the
/// llama.cpp export, read as a shell reads it, is a launch's environment, program and
/// arguments, in order (`"$(nproc)"` where the machine's cores go).
#[test]
fn llama_cpp_launches_are_the_commands_its_text_prints() {
    let hostile = "my models/it's \"q4\" $(reboot) `id` *.gguf".to_owned();
    let cases = cases().into_iter().flat_map(|dir| {
        let (plan, options) = load(&dir);
        let given = ExportOptions { model: Some(hostile.clone()), ..options.clone() };
        [(dir.clone(), plan.clone(), options), (dir, plan, given)]
    });
    for (dir, plan, options) in cases {
        let Ok(export) = export(&plan, Target::LlamaCpp, &options) else { continue };
        let launches = stageplan::export::llama_cpp_launches(&plan, &options).expect("exported above");
        let printed: Vec<Vec<String>> = export
            .text
            .replace("\\\n", " ")
            .lines()
            .filter(|line| !line.trim().is_empty() && !line.starts_with('#'))
            .map(|line| shlex::split(line).expect("a shell command"))
            .collect();
        let launched: Vec<Vec<String>> = launches
            .iter()
            .map(|launch| {
                let env = launch.env.iter().map(|(name, value)| format!("{name}={value}"));
                let args = launch.args.iter().map(|word| match word {
                    stageplan::export::Word::Cores => "$(nproc)".to_owned(),
                    word => word.arg(0),
                });
                env.chain(std::iter::once(launch.program.to_owned())).chain(args).collect()
            })
            .collect();
        assert_eq!(printed, launched, "{}", dir.display());
        assert_eq!(launches.last().map(|l| l.program), Some("llama-server"), "{}", dir.display());
    }
}

//! Exports of real plans, and plans that cannot be exported.

use super::*;
use crate::Scenario;

fn planned(json: &str) -> (Plan, ExportOptions) {
    let problem = Scenario::from_json(json).unwrap().problem().unwrap();
    (crate::plan(&problem), ExportOptions::for_problem(&problem))
}

const HOME: &str = include_str!("../../../../tests/scenarios/home-70b.json");

#[test]
fn every_target_exports_a_real_plan() {
    let (plan, options) = planned(HOME);
    for target in Target::ALL {
        let export = export(&plan, target, &options).unwrap();
        assert!(export.text.contains("stageplan"), "{target}: {}", export.text);
        assert_eq!(target.name().parse::<Target>().unwrap(), target);
    }
}

#[test]
fn broken_plans_are_refused_with_the_field() {
    let (plan, options) = planned(HOME);
    let mut gap = plan.clone();
    gap.stages[1].layers[0] += 1;
    let error = export(&gap, Target::Vllm, &options).unwrap_err().to_string();
    assert!(error.starts_with("`stages[1].layers`") && error.contains("on no machine"), "{error}");
    let mut overlap = plan.clone();
    overlap.stages[1].layers[0] -= 1;
    assert!(export(&overlap, Target::Exo, &options).unwrap_err().to_string().contains("overlaps"));
    let mut short = plan.clone();
    short.stages.pop();
    assert!(export(&short, Target::Megatron, &options).unwrap_err().to_string().contains("the model has 80"));
    let mut twice = plan.clone();
    twice.stages[1].node = twice.stages[0].node.clone();
    assert!(export(&twice, Target::LlamaCpp, &options).unwrap_err().to_string().contains("holds two stages"));
    let mut spaced = plan.clone();
    spaced.stages[0].node = "my desk".into();
    assert!(export(&spaced, Target::Kubernetes, &options).unwrap_err().to_string().contains("cannot be a host"));
    let mut none = plan.clone();
    none.stages.clear();
    assert!(export(&none, Target::DeepSpeed, &options).unwrap_err().to_string().starts_with("`stages` is empty"));
    let unknown = ExportOptions { main: Some("laptop".into()), ..options.clone() };
    let error = export(&plan, Target::LlamaCpp, &unknown).unwrap_err().to_string();
    assert!(error.starts_with("`--main` names `laptop`"), "{error}");
    assert!("ollama".parse::<Target>().unwrap_err().to_string().contains("llama.cpp, vllm"));
    let mut backwards = plan.clone();
    backwards.stages[0].layers = [10, 5];
    assert!(export(&backwards, Target::Exo, &options).unwrap_err().to_string().contains("ends before it starts"));
    let mut one_missing = plan.clone();
    one_missing.stages[1].layers[0] += 1;
    let error = export(&one_missing, Target::Exo, &options).unwrap_err().to_string();
    assert!(error.contains(&format!("leaves layer {} on no machine", plan.stages[1].layers[0])), "{error}");
    let mut past = plan.clone();
    past.stages[0].layers[1] = 90;
    assert!(export(&past, Target::Exo, &options).unwrap_err().to_string().starts_with("`stages[0].layers`"));
    let mut no_workload = plan.clone();
    no_workload.workload = crate::plan::PlannedWorkload::default();
    assert!(export(&no_workload, Target::Vllm, &options).unwrap_err().to_string().starts_with("`workload.context`"));
    for bad in ["$(reboot)", "a;b", "-lead", "x".repeat(64).as_str(), "über", "12345", "10.1", "0x7f.1", "010.0.0.1"] {
        let mut named = plan.clone();
        named.stages[0].node = bad.to_owned();
        assert!(
            export(&named, Target::LlamaCpp, &options).unwrap_err().to_string().contains("cannot be a host"),
            "{bad}"
        );
    }
    for bad in ["host:", "host:0", "host:70000", "a b", "[::1", "x/y", "12345", "10.1:50052", "0x7f.1", "1.2.3.4.5"] {
        let hosts = [(plan.stages[1].node.clone(), bad.to_owned())].into();
        let with = ExportOptions { hosts, ..options.clone() };
        assert!(export(&plan, Target::LlamaCpp, &with).unwrap_err().to_string().starts_with("`--host`"), "{bad}");
    }
}

#[test]
fn numbers_resolvers_read_as_addresses_are_not_hosts() {
    for number in ["12345", "10.1", "1.2.3", "0x7f.1", "0X7F", "010.0.0.1", "1.2.3.4.5", "12345."] {
        assert!(read_as_number(number) && !is_host(number), "{number}");
    }
    for host in ["10.0.0.1", "10.0.0.1.", "box.2", "rack-1", "a1", "0xbox", "gpu0"] {
        assert!(!read_as_number(host) && is_host(host), "{host}");
    }
}

#[test]
fn addresses_keep_their_ports_and_ipv6_brackets() {
    assert_eq!(parse_address("10.0.0.1"), Some(("10.0.0.1", None)));
    assert_eq!(parse_address("10.0.0.1:50053"), Some(("10.0.0.1", Some(50053))));
    assert_eq!(parse_address("fe80::1"), Some(("fe80::1", None)));
    assert_eq!(parse_address("[fe80::1]:9"), Some(("fe80::1", Some(9))));
    let (plan, _) = planned(HOME);
    let node = plan.stages[1].node.clone();
    let options = ExportOptions { hosts: [(node, "fe80::1".to_owned())].into(), ..ExportOptions::default() };
    let text = export(&plan, Target::LlamaCpp, &options).unwrap().text;
    assert!(text.contains("[fe80::1]:50052"), "{text}");
}

#[test]
fn llama_cpp_runs_on_the_first_stage_and_serves_every_machine_on_its_port() {
    let (plan, options) = planned(HOME);
    let [first, second] = [plan.stages[0].node.clone(), plan.stages[1].node.clone()];
    // llama.cpp keeps the host's buffers where llama-server runs: the plan put them first.
    let elsewhere = ExportOptions { main: Some(second.clone()), ..options.clone() };
    let error = export(&plan, Target::LlamaCpp, &elsewhere).unwrap_err().to_string();
    assert!(error.starts_with(&format!("`--main` `{second}` does not hold the first stage")), "{error}");
    // Each rpc-server listens on the port `--host` gives (the end-to-end test covers the
    // main machine's own), under its current name.
    let hosts = [(first, "127.0.0.1:50070".to_owned()), (second, "127.0.0.1:50071".to_owned())];
    let ported = ExportOptions { hosts: hosts.into(), ..options };
    let text = export(&plan, Target::LlamaCpp, &ported).unwrap().text;
    assert!(text.contains("ggml-rpc-server --host 127.0.0.1 --port 50071"), "{text}");
    assert!(text.contains("--rpc 127.0.0.1:50071"), "{text}");
    assert!(text.contains("--flash-attn on"), "{text}");
}

#[test]
fn llama_cpp_refuses_more_devices_than_it_takes() {
    let (mut plan, options) = planned(HOME);
    let template = plan.stages[0].clone();
    let stages = |n: usize| -> Vec<crate::plan::Stage> {
        (0..n)
            .map(|i| crate::plan::Stage { node: format!("n{i}"), layers: [i * 5, i * 5 + 5], ..template.clone() })
            .collect()
    };
    plan.model.layers = 80;
    plan.stages = stages(16);
    let error = export(&plan, Target::LlamaCpp, &options).unwrap_err().to_string();
    assert!(error.starts_with("llama.cpp takes at most 15 stages"), "{error}");
    export(&plan, Target::Vllm, &options).unwrap();
    plan.model.layers = 75;
    plan.stages = stages(15);
    export(&plan, Target::LlamaCpp, &options).unwrap();
}

#[test]
fn a_plan_files_threads_prefill_chunk_and_weights_are_checked_as_a_scenarios() {
    let (plan, options) = planned(HOME);
    for threads in [0, crate::limits::MAX_THREADS + 1, u32::MAX] {
        let mut edited = plan.clone();
        edited.stages[1].threads = Some(threads);
        let error = export(&edited, Target::LlamaCpp, &options).unwrap_err().to_string();
        assert!(
            error.starts_with(&format!("`stages[1].threads` is {threads}; ")) && error.contains("1 to 4096"),
            "{error}"
        );
    }
    let mut edited = plan.clone();
    edited.stages[1].threads = Some(crate::limits::MAX_THREADS);
    export(&edited, Target::LlamaCpp, &options).unwrap();
    for chunk in [0, crate::limits::MAX_PREFILL_CHUNK + 1, u64::MAX] {
        let mut edited = plan.clone();
        edited.workload.prefill_chunk = chunk;
        let error = export(&edited, Target::LlamaCpp, &options).unwrap_err().to_string();
        assert!(error.starts_with(&format!("`workload.prefill_chunk` is {chunk}; ")), "{error}");
    }
    for weights in ["q4\r", "q4\u{1b}[2J", "q4\u{202e}", "q4\u{2028}", "\u{feff}q4", "q4\u{85}", "q4\u{7f}"] {
        let mut edited = plan.clone();
        edited.model.weights = weights.to_owned();
        let error = export(&edited, Target::LlamaCpp, &options).unwrap_err().to_string();
        assert!(error.starts_with("`model.weights` ") && !error.contains(weights), "{error}");
    }
}

#[test]
fn a_plan_files_model_file_is_refused_as_model_is() {
    // The same characters `--model` refuses: a CR reached `llama-server -m` as `\r`.
    let (plan, options) = planned(HOME);
    for file in [
        "m.gguf\r",
        "m\u{1b}[2J.gguf",
        "m\u{7f}.gguf",
        "m\u{85}.gguf",
        "m\u{2028}.gguf",
        "m\u{202e}.gguf",
        "\u{feff}m.gguf",
        "",
    ] {
        let mut edited = plan.clone();
        edited.model.file = Some(file.to_owned());
        for target in Target::ALL {
            let error = export(&edited, target, &options).unwrap_err().to_string();
            assert!(error.starts_with("`model.file` "), "{target}: {error}");
            assert!(file.is_empty() || !error.contains(file), "{target}: {error}");
        }
        let given = ExportOptions { model: Some(file.to_owned()), ..options.clone() };
        let refused = export(&plan, Target::LlamaCpp, &given).unwrap_err().to_string();
        assert!(refused.starts_with("`--model` "), "{refused}");
    }
    let mut edited = plan.clone();
    edited.model.file = Some("models/llama 3 70b, q4_k_m.gguf".to_owned());
    let export = export(&edited, Target::LlamaCpp, &options).unwrap();
    assert!(export.text.contains("'models/llama 3 70b, q4_k_m.gguf'"), "{}", export.text);
}

#[test]
fn addresses_for_machines_the_plan_leaves_out_are_notes() {
    let (plan, options) = planned(HOME);
    let left_out = plan.left_out[0].node.clone();
    let hosts = [(left_out.clone(), "10.0.0.9".to_owned()), ("nas".to_owned(), "10.0.0.10".to_owned())];
    let with = ExportOptions { hosts: hosts.into(), ..options };
    let export = export(&plan, Target::LlamaCpp, &with).unwrap();
    assert!(export.notes.contains(&format!("`{left_out}` is left out of this plan; its address is not used.")));
    assert!(export.notes.contains(&"`nas` is not in this plan; its address is not used.".to_owned()));
    assert!(!export.text.contains("10.0.0.9") && !export.text.contains("10.0.0.10"), "{}", export.text);
}

/// One desktop, a 12 GB GPU and 64 GB of DDR5, Qwen3-30B-A3B: the issue's case.
const DESKTOP_MOE: &str = r#"{"model": {"preset": "qwen3-30b-a3b", "weights": "q4_k_m"}, "workload": {"context": 8192},
    "nodes": [{"name": "desk", "device": "rtx-5070", "host": {"ram": "ddr5-6000-2ch", "memory": "64 GiB"}}]}"#;

#[test]
fn llama_cpp_keeps_the_planned_tensors_in_host_ram() {
    let (plan, options) = planned(DESKTOP_MOE);
    let offload = plan.stages[0].offload.clone().expect("a machine with RAM has an offload");
    assert!(offload.host_ffn > 0 && offload.host_ffn < 48, "some experts in RAM, some on the GPU: {offload:?}");
    let text = export(&plan, Target::LlamaCpp, &options).unwrap().text;
    // The experts of exactly the planned layers, by llama.cpp's own expert pattern.
    let [f0, f1] = offload.ffn_layers;
    let layers: Vec<String> = (f0..f1).map(|l| l.to_string()).collect();
    let rule = format!(r"'blk\.({})\.ffn_(up|down|gate|gate_up)(_(ch|)exps|\.)=CPU'", layers.join("|"));
    assert!(text.contains(&format!("--override-tensor {rule}")), "{text}");
    assert!(text.contains("--n-gpu-layers 49") && text.contains("--load-mode none"), "{text}");

    // Layer offload alone: `-ngl` leaves the first layers on the CPU, by llama.cpp's rule.
    let mut scenario: crate::Scenario = crate::Scenario::from_json(DESKTOP_MOE).unwrap();
    scenario.policy = crate::Policy::LayerOffload;
    let problem = scenario.problem().unwrap();
    let plan = crate::plan(&problem);
    let offload = plan.stages[0].offload.clone().unwrap();
    assert!(offload.host_layers > 0 && offload.host_ffn == 0, "{offload:?}");
    let text = export(&plan, Target::LlamaCpp, &ExportOptions::for_problem(&problem)).unwrap().text;
    let ngl = 49 - offload.host_layers;
    assert!(text.contains(&format!("--n-gpu-layers {ngl}")) && !text.contains("--override-tensor"), "{text}");
    let slots = super::llama_cpp::llama_cpp_layers(&[(48 - offload.host_layers + 1) as f32], 48, ngl);
    let on_cpu: Vec<usize> = (0..49).filter(|&i| slots[i].is_none()).collect();
    assert_eq!(on_cpu, (0..offload.host_layers).collect::<Vec<_>>());
}

#[test]
fn offloads_a_planner_would_not_write_are_refused() {
    let (plan, options) = planned(DESKTOP_MOE);
    let mut outside = plan.clone();
    outside.stages[0].offload.as_mut().unwrap().ffn_layers = [40, 60];
    let error = export(&outside, Target::LlamaCpp, &options).unwrap_err().to_string();
    assert!(error.starts_with("`stages[0].offload.ffn_layers`"), "{error}");
    let mut shifted = plan.clone();
    shifted.stages[0].offload.as_mut().unwrap().host_range = [3, 3];
    let error = export(&shifted, Target::LlamaCpp, &options).unwrap_err().to_string();
    assert!(error.starts_with("`stages[0].offload.host_range`"), "{error}");
    let mut head = plan;
    head.stages[0].offload.as_mut().unwrap().head_on_host = true;
    let error = export(&head, Target::LlamaCpp, &options).unwrap_err().to_string();
    assert!(error.starts_with("`stages[0].offload.head_on_host`"), "{error}");
}

#[test]
fn vllm_offloads_the_host_ram_the_plan_keeps() {
    // vLLM streams offloaded weights: the plan keeps whole layers in RAM, KV on the GPU.
    let json = DESKTOP_MOE.replace(r#""workload""#, r#""engine": "vllm", "workload""#).replace("q4_k_m", "bf16");
    let json = json.replace("rtx-5070", "rtx-4090").replace("64 GiB", "128 GiB");
    let (plan, options) = planned(&json);
    let offload = plan.stages[0].offload.clone().expect("a machine with RAM has an offload");
    assert!(offload.host_layers > 0 && offload.host_ffn == 0 && offload.memory.kv == 0, "{offload:?}");
    let text = export(&plan, Target::Vllm, &options).unwrap().text;
    let gib = (offload.memory.weights as f64 / f64::from(1u32 << 30) * 100.0).ceil() / 100.0;
    assert!(text.contains(&format!("--cpu-offload-gb {gib}")), "{text}");
}

#[test]
fn riders_are_exported_on_their_device_and_hostile_ones_refused() {
    let scenario = HOME.replacen(
        r#""weights": "q4_k_m"}"#,
        r#""weights": "q4_k_m", "draft": {"preset": "llama-3.2-1b", "weights": "q8_0", "kv": "q8_0"}, "mmproj": {"file": "vision's mmproj.gguf", "weights": "600 MiB", "compute": "300 MiB"}}"#,
        1,
    );
    let (plan, options) = planned(&scenario);
    let text = export(&plan, Target::LlamaCpp, &options).unwrap().text;
    let draft = &plan.riders[0];
    let stage = plan.stages.iter().position(|s| s.node == draft.node).unwrap();
    let device = if stage == 0 { "CUDA0".to_owned() } else { format!("RPC{}", stage - 1) };
    for expected in [
        "--model-draft llama-3.2-1b-q8_0.gguf".to_owned(),
        "--spec-type draft-simple".to_owned(),
        format!("--device-draft {device}"),
        "--gpu-layers-draft 17".to_owned(),
        "--cache-type-k-draft q8_0".to_owned(),
        // Text from input is quoted for the shell.
        r#"--mmproj 'vision'\''s mmproj.gguf'"#.to_owned(),
        "--mmproj-device".to_owned(),
    ] {
        assert!(text.contains(&expected), "{expected}:\n{text}");
    }
    let vllm = export(&plan, Target::Vllm, &options).unwrap();
    assert!(vllm.notes.iter().any(|n| n.contains("does not load them")), "{:?}", vllm.notes);

    let mut elsewhere = plan.clone();
    elsewhere.riders[0].node = "nowhere".into();
    let error = export(&elsewhere, Target::LlamaCpp, &options).unwrap_err().to_string();
    assert!(error.starts_with("`riders`") && error.contains("holds no stage"), "{error}");
    let mut hostile = plan.clone();
    hostile.riders[1].file = Some("mmproj\r--rpc evil:1".into());
    let error = export(&hostile, Target::LlamaCpp, &options).unwrap_err().to_string();
    assert!(error.starts_with("`riders`") && error.contains("without one"), "{error}");
}

#[test]
fn third_wave_plan_files_are_refused_or_exported_as_planned() {
    // A plan file's RAM threads reach `--threads`: 0 is refused at its field (#45).
    let (plan, options) = planned(DESKTOP_MOE);
    let mut idle = plan.clone();
    idle.stages[0].offload.as_mut().unwrap().threads = 0;
    let error = export(&idle, Target::LlamaCpp, &options).unwrap_err().to_string();
    assert!(error.starts_with("`stages[0].offload.threads` is 0"), "{error}");
    // Targets that run every layer on the device say what the plan keeps in RAM.
    for target in [Target::Exo, Target::Kubernetes, Target::DeepSpeed, Target::Megatron] {
        let notes = export(&plan, target, &options).unwrap().notes;
        assert!(notes.iter().any(|n| n.contains("part of the model in system RAM on `desk`")), "{target}: {notes:?}");
    }
    assert!(!export(&plan, Target::LlamaCpp, &options).unwrap().notes.iter().any(|n| n.contains("loads every layer")));

    let scenario = HOME.replacen(
        r#""weights": "q4_k_m"}"#,
        r#""weights": "q4_k_m", "draft": {"preset": "llama-3.2-1b", "weights": "q8_0"}}"#,
        1,
    );
    let (plan, options) = planned(&scenario);
    // A draft's layer count that would wrap `--gpu-layers-draft` is refused.
    let mut wrapping = plan.clone();
    wrapping.riders[0].layers = usize::MAX;
    let error = export(&wrapping, Target::LlamaCpp, &options).unwrap_err().to_string();
    assert!(error.starts_with("`riders`") && error.contains("layers"), "{error}");
    // A draft read from a file whose `general.name` holds a control character: the name is
    // only words in a note, the file is what the command loads.
    let mut named = plan;
    named.riders[0].name = "draft\u{1b}[2J".into();
    named.riders[0].file = Some("draft.gguf".into());
    let export = export(&named, Target::LlamaCpp, &options).unwrap();
    assert!(export.text.contains("--model-draft draft.gguf") && !export.text.contains('\u{1b}'), "{}", export.text);
}

#[test]
fn k_and_v_cache_formats_apart_reach_their_flags() {
    // `-ctk q8_0 -ctv f16` without flash attention, as people run it (#45).
    let scenario = HOME.replacen(r#""kv": "f16"}"#, r#""kv": "q8_0", "kv_v": "f16", "flash_attention": false}"#, 1);
    let (plan, options) = planned(&scenario);
    assert_eq!((plan.workload.kv.as_str(), plan.workload.kv_v.as_deref()), ("q8_0", Some("f16")));
    let text = export(&plan, Target::LlamaCpp, &options).unwrap().text;
    assert!(text.contains("--cache-type-k q8_0 \\\n  --cache-type-v f16 \\\n  --flash-attn off"), "{text}");
    let vllm = export(&plan, Target::Vllm, &options).unwrap();
    assert!(vllm.notes.iter().any(|n| n.contains("one format")), "{:?}", vllm.notes);
    // One format is written once in the plan, as before.
    let (same, _) = planned(HOME);
    assert_eq!(same.workload.kv_v, None);
    // A plan file's V format is text from input: refused at its field when it could
    // reach a terminal as anything but text.
    let mut hostile = plan.clone();
    hostile.workload.kv_v = Some("f16\u{1b}[2J".into());
    let error = export(&hostile, Target::LlamaCpp, &options).unwrap_err().to_string();
    assert!(error.starts_with("`workload.kv_v`"), "{error}");
    // A name no plan has is refused, not exported as f16 with a note.
    let mut unknown = plan.clone();
    unknown.workload.kv = "bogus".into();
    let error = export(&unknown, Target::LlamaCpp, &options).unwrap_err().to_string();
    assert!(error.starts_with("`workload.kv` `bogus` is not a KV-cache format"), "{error}");
}

#[test]
fn llama_cpp_runs_a_machines_gpus_in_one_server_and_each_remote_gpu_on_its_port() {
    let (plan, options) = planned(
        r#"{"model": {"preset": "llama-3.1-70b", "weights": "q8_0"}, "workload": {"context": 8192},
            "nodes": [{"name": "box", "gpus": [{"device": "rtx-3090", "count": 2}], "gpu_link": "pcie4-x8"},
                      {"name": "tower", "gpus": [{"device": "rtx-4090"}, {"device": "rtx-3090"}]}],
            "links": {"default": {"bandwidth": "10 GB/s", "latency": "0.05 ms"}}}"#,
    );
    assert_eq!(plan.stages.len(), 4, "70 GiB needs every GPU: {:?}", plan.stages);
    // llama-server runs on the first stage's machine; the other's GPUs are dialed.
    let main = plan.stages[0].gpu_of.as_ref().unwrap().machine.clone();
    let remote = if main == "box" { "tower" } else { "box" };
    let hosts = [(remote.to_owned(), "10.0.0.7:6000".to_owned())];
    let text = export(&plan, Target::LlamaCpp, &ExportOptions { hosts: hosts.into(), ..options.clone() }).unwrap().text;
    let arg = |flag: &str| {
        let at = text.find(&format!("\n  {flag} ")).unwrap_or_else(|| panic!("{flag} in {text}"));
        text[at + flag.len() + 4..].split_whitespace().next().unwrap().to_owned()
    };
    // The main machine's GPUs are llama-server's own; each of the other's an rpc-server on
    // its own port.
    let mut devices = Vec::new();
    let mut rpc = Vec::new();
    for stage in &plan.stages {
        let gpu = stage.gpu_of.as_ref().unwrap();
        if gpu.machine == main {
            devices.push(format!("CUDA{}", gpu.index));
        } else {
            let port = 6000 + gpu.index;
            assert!(
                text.contains(&format!(
                    "CUDA_VISIBLE_DEVICES={} ggml-rpc-server --host 10.0.0.7 --port {port}",
                    gpu.index
                )),
                "{text}"
            );
            devices.push(format!("RPC{}", rpc.len()));
            rpc.push(format!("10.0.0.7:{port}"));
        }
    }
    assert_eq!(arg("--device"), devices.join(","));
    assert_eq!(arg("--rpc"), rpc.join(","));
    assert!(text.contains(&format!("# 2. On {main}:")), "{text}");
    // llama.cpp's own rule puts each stage's layers on its device, the head on the last.
    let shares: Vec<f32> = arg("--tensor-split").split(',').map(|s| s.parse().unwrap()).collect();
    let slots = llama_cpp::llama_cpp_layers(&shares, 80, 81);
    for (device, stage) in plan.stages.iter().enumerate() {
        let [start, end] = stage.layers;
        assert!(slots[start..end].iter().all(|&slot| slot == Some(device)), "stage {device}: {slots:?}");
    }
    assert_eq!(slots[80], Some(3));
    // `--main` may name the machine.
    let named = ExportOptions { main: Some(main.clone()), ..options.clone() };
    let named = export(&plan, Target::LlamaCpp, &named);
    assert!(named.is_ok(), "{named:?}");
    // Other engines take a machine as one device in this version, and say so.
    let error = export(&plan, Target::Vllm, &options).unwrap_err().to_string();
    assert!(error.contains("several GPUs of `") && error.contains("--to llama.cpp"), "{error}");
    // A plan file's GPU is its machine's and number, as the planner names it.
    let mut renamed = plan.clone();
    renamed.stages[0].node = format!("{main}/gpu7");
    let error = export(&renamed, Target::LlamaCpp, &options).unwrap_err().to_string();
    assert!(error.starts_with("`stages[0].node`") && error.contains(&format!("name it `{main}/gpu")), "{error}");
    let mut hostile = plan.clone();
    hostile.stages[0].gpu_of.as_mut().unwrap().machine = "box; rm -rf ~".into();
    let error = export(&hostile, Target::LlamaCpp, &options).unwrap_err().to_string();
    assert!(error.starts_with("`stages[0].gpu_of`"), "{error}");
    let mut seventeenth = plan;
    seventeenth.stages[0].gpu_of.as_mut().unwrap().index = 16;
    assert!(export(&seventeenth, Target::LlamaCpp, &options).unwrap_err().to_string().contains("below 16"));
}

#[test]
fn vllm_runs_one_machines_gpus_as_its_pipeline_ranks_without_ray() {
    let (plan, options) = planned(
        r#"{"model": {"preset": "llama-3.1-70b", "weights": "fp8"}, "workload": {"context": 8192},
            "nodes": [{"name": "box", "gpus": [{"device": "rtx-4090"}, {"device": "rtx-3090"}, {"device": "a100-40gb"}]}], "engine": "vllm"}"#,
    );
    // No two of the GPUs hold the model as tensor parallel (64 heads do not split 3 ways).
    assert!(plan.stages.len() == 3 && plan.stages.iter().all(|s| s.tensor_parallel.is_empty()), "{:?}", plan.stages);
    let text = export(&plan, Target::Vllm, &options).unwrap().text;
    let gpus: Vec<String> = plan.stages.iter().map(|s| s.gpu_of.as_ref().unwrap().index.to_string()).collect();
    let partition: Vec<String> = plan.stages.iter().map(|s| (s.layers[1] - s.layers[0]).to_string()).collect();
    let command =
        format!("CUDA_VISIBLE_DEVICES={} VLLM_PP_LAYER_PARTITION={} vllm serve", gpus.join(","), partition.join(","));
    assert!(text.contains(&command), "{command} in {text}");
    assert!(text.contains("--distributed-executor-backend mp"), "{text}");
    assert!(text.contains(&format!("--pipeline-parallel-size {}", plan.stages.len())), "{text}");
    assert!(!text.contains("ray start") && text.contains("# 1. On box:"), "{text}");
}

#[test]
fn a_machines_ram_serves_each_of_its_gpus_locally_and_remotely() {
    const BOX: &str = r#"{"name": "box", "gpus": [{"device": "rtx-3090", "count": 2}], "gpu_link": "pcie4-x8",
                         "host": {"ram": "ddr4-3200-2ch", "memory": "128 GiB", "threads": 16}}"#;
    let model = r#""model": {"preset": "qwen3-235b-a22b", "weights": "q4_k_m"}, "workload": {"context": 8192}"#;
    let (plan, options) = planned(&format!(r#"{{{model}, "nodes": [{BOX}]}}"#));
    // 132 GiB of weights past two 24 GiB GPUs: each GPU's layers keep experts in the one RAM.
    let ram: Vec<&str> = plan
        .stages
        .iter()
        .filter(|s| s.offload.as_ref().is_some_and(|o| o.host_ffn > 0))
        .map(|s| s.node.as_str())
        .collect();
    assert_eq!(ram, ["box/gpu0", "box/gpu1"], "the RAM serves both GPUs: {:?}", plan.stages);
    let in_ram: u64 = plan.stages.iter().filter_map(|s| s.offload.as_ref()).map(|o| o.memory.total).sum();
    assert!(in_ram <= 128 << 30, "the RAM counted once: {in_ram} bytes planned in it");
    let text = export(&plan, Target::LlamaCpp, &options).unwrap().text;
    for offload in plan.stages.iter().filter_map(|s| s.offload.as_ref()) {
        let [f0, f1] = offload.ffn_layers;
        let layers: Vec<String> = (f0..f1).map(|l| l.to_string()).collect();
        assert!(text.contains(&format!("'blk\\.({})\\.", layers.join("|"))), "{text}");
    }
    assert_eq!(text.matches("=CPU'").count(), 2, "{text}");
    assert!(text.contains("--threads 16") && text.contains("--load-mode none"), "{text}");
    // On a machine that does not run llama-server, one rpc-server serves its CPU, one port
    // above the range of its GPUs' servers, for each GPU's experts.
    let (plan, options) = planned(&format!(
        r#"{{{model}, "nodes": [{{"name": "desk", "device": "rtx-5090"}}, {BOX}],
            "stages": [{{"node": "desk", "layers": [0, 20]}}, {{"node": "box/gpu1", "layers": [20, 35]}}, {{"node": "box/gpu0", "layers": [35, 94]}}],
            "policy": "manual"}}"#
    ));
    assert!(plan.feasible, "{:?}", plan.diagnostics);
    let hosts = [("box".to_owned(), "10.0.0.9:7000".to_owned())];
    let text = export(&plan, Target::LlamaCpp, &ExportOptions { hosts: hosts.into(), ..options }).unwrap().text;
    for line in [
        "CUDA_VISIBLE_DEVICES=1 ggml-rpc-server --host 10.0.0.9 --port 7001",
        "CUDA_VISIBLE_DEVICES=0 ggml-rpc-server --host 10.0.0.9 --port 7000",
        "ggml-rpc-server --host 10.0.0.9 --port 7016 --device CPU --threads 16",
        "=RPC0[10.0.0.9:7016]'",
        "--rpc 10.0.0.9:7001,10.0.0.9:7000,10.0.0.9:7016",
    ] {
        assert!(text.contains(line), "{line} in {text}");
    }
    let ram = plan.stages.iter().filter(|s| s.offload.as_ref().is_some_and(|o| o.host_ffn > 0)).count();
    assert_eq!(text.matches("=RPC0[10.0.0.9:7016]'").count(), ram, "{text}");
    assert_eq!(text.matches("--device CPU").count(), 1, "{text}");
}

#[test]
fn a_tensor_parallel_plan_runs_on_its_gpus_in_one_server() {
    let (plan, options) = planned(
        r#"{"model": {"preset": "llama-3.1-70b", "weights": "q4_k_m"}, "workload": {"context": 8192},
            "nodes": [{"name": "box", "gpus": [{"device": "rtx-3090", "count": 2}], "gpu_link": "pcie4-x8"}]}"#,
    );
    assert_eq!(plan.stages.len(), 1);
    assert_eq!(plan.stages[0].tensor_parallel, [0, 1]);
    assert_eq!(plan.stages[0].label(), "box/gpu0+gpu1");
    let text = export(&plan, Target::LlamaCpp, &options).unwrap().text;
    for flag in ["--device CUDA0,CUDA1", "--tensor-split 1,1", "--split-mode tensor", "--flash-attn on"] {
        assert!(text.contains(flag), "{flag} in {text}");
    }
    let text = export(&plan, Target::Vllm, &options).unwrap().text;
    assert!(text.contains("CUDA_VISIBLE_DEVICES=0,1 vllm serve"), "{text}");
    assert!(text.contains("--tensor-parallel-size 2") && text.contains("--pipeline-parallel-size 1"), "{text}");
    // Other engines refuse, as for any plan on a machine's GPUs.
    assert!(export(&plan, Target::Exo, &options).is_err());
    // A plan file's group is checked: two stages, a repeated GPU, a group off `gpu_of`.
    let mut repeated = plan.clone();
    repeated.stages[0].tensor_parallel = vec![0, 0];
    let error = export(&repeated, Target::LlamaCpp, &options).unwrap_err().to_string();
    assert!(error.starts_with("`stages[0].tensor_parallel`") && error.contains("distinct"), "{error}");
    let mut unequal = plan.clone();
    let mut second = unequal.stages[0].clone();
    (second.tensor_parallel, second.gpu_of, second.node) =
        (vec![2], Some(crate::plan::MachineGpu { machine: "box".into(), index: 2 }), "box/gpu2".into());
    (unequal.stages[0].layers, second.layers) = ([0, 40], [40, 80]);
    unequal.stages.push(second);
    let error = export(&unequal, Target::Vllm, &options).unwrap_err().to_string();
    assert!(error.starts_with("`stages[1].tensor_parallel`") && error.contains("the first stage lists 2"), "{error}");
    let mut shifted = plan.clone();
    shifted.stages[0].tensor_parallel = vec![1, 0];
    let error = export(&shifted, Target::LlamaCpp, &options).unwrap_err().to_string();
    assert!(error.contains("not `gpu_of`'s 0"), "{error}");
    let mut lone = plan;
    lone.stages[0].gpu_of = None;
    lone.stages[0].node = "box".into();
    let error = export(&lone, Target::LlamaCpp, &options).unwrap_err().to_string();
    assert!(error.contains("without `gpu_of`"), "{error}");
}

#[test]
fn kubernetes_gives_each_stage_its_machines_gpus() {
    // A layer split over a 4090 and a 3060 of one box: a pod per stage on `box`, a GPU each,
    // and a note that the device plugin may swap two unlike GPUs.
    let (plan, options) = planned(
        r#"{"model": {"preset": "qwen3-32b", "weights": "q5_k_m"}, "workload": {"context": 8192},
            "nodes": [{"name": "box", "gpus": [{"device": "rtx-4090"}, {"device": "rtx-3060-12gb"}], "gpu_link": "pcie3-x4"}]}"#,
    );
    assert!(plan.stages.len() == 2 && plan.stages.iter().all(|s| s.tensor_parallel.is_empty()), "{:?}", plan.stages);
    let done = export(&plan, Target::Kubernetes, &options).unwrap();
    assert_eq!(done.text.matches("kubernetes.io/hostname: box").count(), 2, "{}", done.text);
    assert_eq!(done.text.matches("nvidia.com/gpu: 1").count(), 2, "{}", done.text);
    assert!(done.notes.iter().any(|n| n.contains("on `box`, whose GPUs differ")), "{:?}", done.notes);
    // A tensor-parallel stage asks for its group's GPUs and says how many share it.
    let (plan, options) = planned(
        r#"{"model": {"preset": "llama-3.1-70b", "weights": "q4_k_m"}, "workload": {"context": 8192},
            "nodes": [{"name": "box", "gpus": [{"device": "rtx-3090", "count": 2}], "gpu_link": "pcie4-x8"}]}"#,
    );
    assert_eq!(plan.stages[0].tensor_parallel, [0, 1]);
    let done = export(&plan, Target::Kubernetes, &options).unwrap();
    assert!(
        done.text.contains("nvidia.com/gpu: 2") && done.text.contains("STAGEPLAN_TENSOR_PARALLEL"),
        "{}",
        done.text
    );
    assert!(!done.notes.iter().any(|n| n.contains("whose GPUs differ")), "{:?}", done.notes);
    // Engines that take a machine as one device still say so.
    let error = export(&plan, Target::Exo, &options).unwrap_err().to_string();
    assert!(error.contains("several GPUs of `box`") && error.contains("Kubernetes"), "{error}");
}

#[test]
fn training_launchers_refuse_ranks_they_cannot_give() {
    // Planned for an engine whose last stage samples: llama.cpp's would end the pipeline on
    // the machine it starts on, where its logits go back to (the training launchers refuse
    // that, as below).
    let scenario = include_str!("../../../../tests/export/box-and-desk-gpus/scenario.json");
    let (plan, options) = planned(&scenario.replace(r#""objective""#, r#""engine": "generic", "objective""#));
    // The plan runs `desk`, then `box/gpu1` and `box/gpu0`: torchrun keeps that GPU order.
    let order: Vec<&str> = plan.stages.iter().map(|s| s.node.as_str()).collect();
    assert_eq!(order, ["desk", "box/gpu1", "box/gpu0"]);
    let megatron = export(&plan, Target::Megatron, &options).unwrap().text;
    assert!(
        megatron.contains("box: CUDA_VISIBLE_DEVICES=1,0 torchrun --nnodes 2 --node-rank 1 --nproc-per-node 2"),
        "{megatron}"
    );
    // A plan file that comes back to `box` after `desk` cannot be numbered machine by machine.
    let mut back = plan.clone();
    back.stages.swap(0, 1);
    let mut start = 0;
    for stage in &mut back.stages {
        let count = stage.layers[1] - stage.layers[0];
        stage.layers = [start, start + count];
        start += count;
    }
    for target in [Target::Megatron, Target::DeepSpeed] {
        let error = export(&back, target, &options).unwrap_err().to_string();
        assert!(error.starts_with("`stages[2].gpu_of` comes back to `box`"), "{target}: {error}");
    }
    // Two groups sharing GPUs: the launch would start two ranks on each.
    let (plan, options) = planned(include_str!("../../../../tests/export/racks-tensor-pipeline/scenario.json"));
    let mut shared = plan;
    let gpu = shared.stages[1].gpu_of.as_mut().unwrap();
    (gpu.machine, gpu.index) = ("rack1".into(), 1);
    shared.stages[1].node = "rack1/gpu1".into();
    shared.stages[1].tensor_parallel = vec![1, 2, 3, 0];
    let error = export(&shared, Target::Megatron, &options).unwrap_err().to_string();
    assert!(error.contains("runs GPU 1 of `rack1`, which a stage before runs"), "{error}");
}

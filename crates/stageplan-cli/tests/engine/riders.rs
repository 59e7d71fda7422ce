//! What rides along (#35): a speculative-decoding draft model and a vision projector in the
//! scenario, placed by the plan, exported (`--model-draft … --device-draft`, `--mmproj …
//! --mmproj-device`) and run verbatim on two rpc-servers; llama.cpp's log of every buffer
//! (the draft's context, clip's weights and compute buffers among them) per machine against
//! the plan's, which must never be under.

use std::process::Command;

use serde_json::Value;

use super::{
    allocations, export_llama_cpp, free_port, llama_cpp_and_workspace, plan_fitting, python, repo, run_verbatim,
};

/// One case: the model's KV cache and the draft's, and each machine's memory (MiB), chosen
/// so the model needs both machines beside its riders.
struct RiderCase {
    name: &'static str,
    workload: &'static str,
    draft_kv: Option<&'static str>,
    memory: [u32; 2],
}

const RIDER_CASES: [RiderCase; 3] = [
    RiderCase {
        name: "draft-and-mmproj-f16",
        workload: r#"{"context": 2048, "batch": 1, "kv": "f16"}"#,
        draft_kv: None,
        memory: [80, 80],
    },
    RiderCase {
        name: "draft-and-mmproj-q8_0-kv",
        workload: r#"{"context": 2048, "batch": 1, "kv": "q8_0"}"#,
        draft_kv: Some("q8_0"),
        memory: [80, 80],
    },
    // The riders on the second machine: their host buffers stay where llama-server runs.
    // (On 96 MiB the whole model and both riders fit as one stage, which keeps no pipeline
    // copies of its inputs: 94.2 MiB.)
    RiderCase {
        name: "riders-off-the-server",
        workload: r#"{"context": 2048, "batch": 1, "kv": "f16"}"#,
        draft_kv: None,
        memory: [64, 92],
    },
];

#[test]
fn llama_cpp_allocates_the_draft_and_the_projector_where_the_plan_says() {
    let Some((bin, work)) = llama_cpp_and_workspace("stageplan-riders") else { return };
    let write = |script: &str, out: &std::path::Path, args: &[&str]| {
        let status = Command::new(python())
            .arg(repo().join("tests/engine").join(script))
            .arg(out)
            .args(args)
            .status()
            .expect("the GGUF writer runs");
        assert!(status.success(), "{script} failed");
    };
    // One vocabulary for the model and its draft, as llama.cpp's draft-simple checks.
    let main = work.join("main.gguf");
    write(
        "write_gguf.py",
        &main,
        &["--layers", "8", "--hidden", "512", "--heads", "8", "--kv-heads", "2", "--ffn", "1536", "--vocab", "2048"],
    );
    let draft = work.join("draft.gguf");
    write(
        "write_gguf.py",
        &draft,
        &[
            "--layers",
            "2",
            "--hidden",
            "128",
            "--heads",
            "2",
            "--kv-heads",
            "2",
            "--ffn",
            "256",
            "--vocab",
            "2048",
            "--name",
            "draft",
        ],
    );
    let mmproj = work.join("mmproj.gguf");
    write(
        "write_mmproj.py",
        &mmproj,
        &[
            "--text-hidden",
            "512",
            "--image",
            "224",
            "--patch",
            "14",
            "--hidden",
            "128",
            "--ffn",
            "512",
            "--heads",
            "4",
            "--blocks",
            "2",
            "--proj",
            "256",
        ],
    );
    let mut report = String::from("| case | stage | riders | planned MiB | allocated MiB |\n|---|---|---|---|---|\n");
    let mut rider_report =
        String::from("| case | rider | planned MiB | allocated MiB | plan − engine |\n|---|---|---|---|---|\n");
    for case in &RIDER_CASES {
        let dir = work.join(case.name);
        std::fs::create_dir_all(&dir).unwrap();
        let path = |p: &std::path::Path| serde_json::to_string(&p.to_string_lossy()).unwrap();
        let draft_kv = case.draft_kv.map_or(String::new(), |kv| format!(r#", "kv": "{kv}""#));
        let node = |name: &str, mib: u32| {
            format!(
                r#"{{"name": "{name}", "kind": "cpu", "memory": "{mib} MiB", "reserve": 0, "bandwidth": "20 GB/s", "compute": "20 GFLOPS", "threads": 1}}"#
            )
        };
        let scenario = format!(
            r#"{{"model": {{"file": {}, "draft": {{"file": {}{draft_kv}}}, "mmproj": {{"file": {}}}}}, "workload": {}, "objective": "latency", "nodes": [{}, {}], "links": {}}}"#,
            path(&main),
            path(&draft),
            path(&mmproj),
            case.workload,
            node("m0", case.memory[0]),
            node("m1", case.memory[1]),
            super::LOOPBACK
        );
        let (plan_out, plan) = plan_fitting(case.name, &dir, &scenario);
        let stages = plan["stages"].as_array().unwrap();
        assert_eq!(stages.len(), 2, "{}: the riders need both machines: {plan_out}", case.name);
        let riders = plan["riders"].as_array().unwrap();
        assert_eq!(riders.len(), 2, "{}: the draft and the projector are placed: {plan_out}", case.name);
        let plan_path = dir.join("plan.json");
        std::fs::write(&plan_path, &plan_out).unwrap();
        let ports: Vec<u16> = stages.iter().map(|_| free_port()).collect();
        let (script, rpc, server) = export_llama_cpp(case.name, &plan_path, stages, &ports);
        for flag in ["--model-draft", "--spec-type draft-simple", "--device-draft", "--mmproj", "--mmproj-device"] {
            assert!(script.contains(flag), "{}: the export loads the riders ({flag}):\n{script}", case.name);
        }
        let rpc: Vec<&String> = rpc.iter().collect();
        let (children, log, _) = run_verbatim(case.name, &rpc, &server, &bin, &dir);
        drop(children);
        // The generated text (random tokens) is in the log too, not always UTF-8.
        let text = String::from_utf8_lossy(&std::fs::read(&log).unwrap()).into_owned();
        assert!(
            text.contains("speculative decoding context initialized"),
            "{}: llama.cpp runs the draft (log: {})",
            case.name,
            log.display()
        );
        assert!(text.contains("loaded multimodal model"), "{}: llama.cpp loads the projector", case.name);
        let mut allocated = allocations(&text, &ports);
        // clip logs its weights as one `model size`, on the backend it names.
        let clip_stage = text
            .lines()
            .find_map(|l| l.split_once("CLIP using ")?.1.split_once(" backend").map(|(b, _)| b.to_owned()))
            .and_then(|backend| {
                let port: u16 = backend.split_once('[')?.1.trim_end_matches(']').rsplit_once(':')?.1.parse().ok()?;
                ports.iter().position(|&p| p == port)
            })
            .expect("clip runs on a planned machine's device");
        let clip_weights: f64 = text
            .lines()
            .find_map(|l| {
                l.split_once("load_hparams: model size:")?.1.trim().trim_end_matches("MiB").trim().parse().ok()
            })
            .expect("clip logs its model size");
        allocated[clip_stage].total += clip_weights;
        allocated[clip_stage].held += clip_weights;
        // The riders' own buffers: the draft's context is logged after its loading line, clip's
        // compute buffers by `reserve_compute_meta`.
        let sum = |lines: &mut dyn Iterator<Item = &str>| -> f64 {
            lines
                .filter_map(|l| {
                    l.split_once(" buffer size =")?.1.trim().trim_end_matches("MiB").trim().parse::<f64>().ok()
                })
                .sum()
        };
        let draft_start = text.find("loading draft model").expect("the draft loads");
        let draft_end = text[draft_start..].find("clip_model_loader").map_or(text.len(), |e| draft_start + e);
        let draft_got = sum(&mut text[draft_start..draft_end].lines());
        let clip_got = clip_weights + sum(&mut text.lines().filter(|l| l.contains("reserve_compute_meta:")));
        for rider in riders {
            let planned = rider["memory"]["total"].as_u64().unwrap() as f64 / 1048576.0;
            let got = if rider["kind"] == "draft" { draft_got } else { clip_got };
            assert!(
                got <= planned + 0.01,
                "{}: {} allocated {got:.2} MiB, over the plan's {planned:.2}",
                case.name,
                rider["kind"]
            );
            rider_report.push_str(&format!(
                "| {} | {} | {planned:.2} | {got:.2} | {:+.1}% |\n",
                case.name,
                rider["kind"].as_str().unwrap(),
                (planned / got - 1.0) * 100.0
            ));
        }
        // Each rider on the machine the plan says: the draft's layers and clip's backend.
        for rider in riders {
            let s = stages.iter().position(|s| s["node"] == rider["node"]).expect("a rider is on a stage's machine");
            match rider["kind"].as_str().unwrap() {
                "draft" => assert!(
                    text.contains(&format!("RPC0[127.0.0.1:{}] KV buffer size", ports[s])),
                    "{}: the draft's buffers are on stage {s}",
                    case.name
                ),
                _ => assert_eq!(clip_stage, s, "{}: clip runs on stage {s}'s device", case.name),
            }
        }
        let mib = |v: &Value| v.as_u64().unwrap() as f64 / 1048576.0;
        let (mut planned_held, mut got_held) = (0.0, 0.0);
        for (s, stage) in stages.iter().enumerate() {
            let memory = &stage["memory"];
            let planned = mib(&memory["total"]) - mib(&memory["reserve"]);
            let got = &allocated[s];
            assert!(
                got.total <= planned + 0.01,
                "{}: stage {s} allocated {:.2} MiB with its riders, over the plan's {planned:.2} MiB",
                case.name,
                got.total
            );
            planned_held += mib(&memory["weights"]) + mib(&memory["kv"]) + mib(&memory["embed_head"]);
            got_held += got.held;
            let riding = riders.iter().filter(|r| r["node"] == stage["node"]).map(|r| r["kind"].as_str().unwrap());
            report.push_str(&format!(
                "| {} | {s} | {} | {planned:.2} | {:.2} |\n",
                case.name,
                riding.collect::<Vec<_>>().join(", "),
                got.total
            ));
        }
        // Weights and KV cache, the riders' too, exact over the machines together.
        planned_held += riders
            .iter()
            .map(|r| mib(&r["memory"]["weights"]) + mib(&r["memory"]["kv"]) + mib(&r["memory"]["embed_head"]))
            .sum::<f64>();
        assert!(
            (got_held / planned_held - 1.0).abs() <= 0.02,
            "{}: weights+KV with the riders planned {planned_held:.2} MiB, llama.cpp allocated {got_held:.2} MiB",
            case.name
        );
    }
    eprintln!("{report}\n{rider_report}");
    let _ = std::fs::remove_dir_all(&work);
}

//! vLLM: a Ray cluster over the plan's machines, then `vllm serve` with one pipeline rank
//! per stage and `VLLM_PP_LAYER_PARTITION` giving each rank its blocks; a plan on the GPUs
//! of one machine runs without Ray, its GPUs in rank order by `CUDA_VISIBLE_DEVICES`.
//!
//! vLLM reads the partition in `get_pp_indices` (`vllm/distributed/utils.py`): comma-separated
//! integers, as many as `--pipeline-parallel-size`, summing to the model's hidden layers; rank
//! `r` runs blocks `[Σ p[..r], Σ p[..=r])`. Without it vLLM splits evenly, which is what
//! stageplan's `even` baseline measures.

use std::fmt::Write;

use super::Layout;

pub(super) fn export(layout: &Layout<'_>) -> (String, Vec<String>) {
    let plan = layout.plan;
    let mut notes = Vec::new();
    let model = layout.options.model.clone().unwrap_or_else(|| match layout.preset() {
        Some(preset) => preset.hf_id().to_owned(),
        None => {
            notes.push("Give the model's Hugging Face id or path with `--model`.".to_owned());
            if plan.model.name.is_empty() { "MODEL".to_owned() } else { layout.placeholder() }
        }
    });
    let weights = plan.model.weights.as_str();
    if weights == "int8" {
        notes.push(
            "The plan counts int8 weights: give an INT8 (W8A8) checkpoint with `--model`; the bf16 one needs twice the memory planned.".to_owned(),
        );
    }
    if !matches!(weights, "" | "bf16" | "f16" | "f32" | "fp8" | "int8") {
        notes.push(format!(
            "vLLM loads Hugging Face weights; `{weights}` is a GGUF format, so the memory per stage differs from the plan: re-plan with `bf16` or `fp8` weights for vLLM."
        ));
    }
    if let Some(v) = plan.workload.kv_v.as_ref().filter(|v| **v != plan.workload.kv) {
        notes.push(format!(
            "vLLM keeps K and V in one format; the command stores both as `{}`, not V as the plan's `{v}`.",
            plan.workload.kv
        ));
    }
    let kv_flag = match plan.workload.kv.as_str() {
        "f16" | "bf16" | "f32" => None,
        "f8_e4m3" | "fp8" => Some("fp8"),
        other => {
            notes.push(format!("vLLM has no `{other}` KV cache; the command keeps vLLM's default (the model's dtype), which needs more memory than planned."));
            None
        }
    };
    let ranks = layout.stages.len();
    let degree = plan.stages[0].tensor_parallel.len().max(1);
    // Every rank on one machine's GPUs: one `vllm serve` with its multiprocessing executor,
    // where rank r runs on the r-th visible GPU (`initialize_model_parallel` lays ranks out
    // DP × PP × TP, so with TP 1 the PP rank is the rank, and a single node's local rank).
    let one_machine = ranks > 1
        && layout.stages.iter().all(|&(n, _, _)| {
            layout.machine(n).1.is_some() && layout.machine(n).0 == layout.machine(layout.stages[0].0).0
        });
    // vLLM gives rank 0 to the machine that runs `vllm serve`: the first stage's. The Ray
    // head can be any machine: `--main`'s, or the first stage's.
    let first = layout.stages[0].0;
    let head = layout.main();
    let counts: Vec<String> = layout.counts().iter().map(ToString::to_string).collect();
    let mut out = String::new();
    let _ = writeln!(out, "# stageplan · {}", layout.summary());
    let mut step = 1;
    let ranks_shown = layout
        .stages
        .iter()
        .enumerate()
        .zip(&plan.stages)
        .map(|((r, &(_, a, b)), s)| format!("rank {r} = {} (layers {a}–{b})", s.label()))
        .collect::<Vec<_>>()
        .join(", ");
    if one_machine {
        let gpus = if degree > 1 { format!("the r-th {degree} GPUs") } else { "the r-th GPU".to_owned() };
        let _ = writeln!(
            out,
            "# Pipeline rank r runs the r-th count of VLLM_PP_LAYER_PARTITION on {gpus} of CUDA_VISIBLE_DEVICES: {ranks_shown}."
        );
        out.push('\n');
    } else if ranks > 1 {
        notes.push(format!(
            "vLLM's Ray executor gives rank 0 to the machine that runs `vllm serve` ({}) and orders the others by IP address (as text): give the machines addresses that sort in stage order, or check the rank → machine mapping in vLLM's startup log.",
            layout.machine(first).0
        ));
        if head != first {
            notes.push(format!(
                "{head} is the Ray head (`--main`); `vllm serve` runs on {first}, which holds the first stage, as vLLM gives rank 0 to the machine that runs it."
            ));
        }
        let _ = writeln!(out, "# Pipeline rank r runs the r-th count of VLLM_PP_LAYER_PARTITION: {ranks_shown}.");
        out.push('\n');
        // A tensor-parallel stage's machine shows Ray only its group's GPUs.
        let visible = |node: &str| {
            plan.stages
                .iter()
                .find(|s| s.node == node && !s.tensor_parallel.is_empty())
                .map(|s| {
                    let gpus: Vec<String> = s.tensor_parallel.iter().map(ToString::to_string).collect();
                    format!("CUDA_VISIBLE_DEVICES={} ", gpus.join(","))
                })
                .unwrap_or_default()
        };
        let _ = writeln!(out, "# {step}. A Ray cluster: on {},", layout.machine(head).0);
        let _ = writeln!(out, "{}ray start --head --port 6379", visible(head));
        for &(node, _, _) in layout.stages.iter().filter(|&&(n, _, _)| n != head) {
            let _ = writeln!(out, "#    on {}:", layout.machine(node).0);
            let _ = writeln!(
                out,
                "{}ray start --address {}",
                visible(node),
                crate::quote::shell(&layout.host_with(head, 6379))
            );
        }
        out.push('\n');
        step += 1;
    } else {
        out.push('\n');
    }
    let _ = writeln!(out, "# {step}. On {}:", layout.machine(first).0);
    let mut command = String::new();
    // Tensor parallel: each stage a group of `degree` GPUs; rank `pp × degree + tp` runs on
    // the rank-th visible GPU (TP innermost in `initialize_model_parallel`).
    if one_machine || degree > 1 && ranks == 1 {
        let gpus: Vec<String> = plan
            .stages
            .iter()
            .flat_map(|s| match s.tensor_parallel.as_slice() {
                [] => vec![s.gpu_of.as_ref().map_or(0, |g| g.index)],
                group => group.to_vec(),
            })
            .map(|g| g.to_string())
            .collect();
        let _ = write!(command, "CUDA_VISIBLE_DEVICES={} ", gpus.join(","));
    }
    if ranks > 1 {
        let _ = write!(command, "VLLM_PP_LAYER_PARTITION={} ", counts.join(","));
    }
    let _ = write!(command, "vllm serve {}", crate::quote::shell(&model));
    let mut flags: Vec<(String, String)> = vec![
        ("--pipeline-parallel-size".into(), ranks.to_string()),
        ("--tensor-parallel-size".into(), degree.to_string()),
    ];
    if degree > 1 && ranks == 1 {
        flags.push(("--distributed-executor-backend".into(), "mp".into()));
    }
    if ranks > 1 {
        let executor = if one_machine { "mp" } else { "ray" };
        flags.push(("--distributed-executor-backend".into(), executor.into()));
    }
    flags.push(("--max-model-len".into(), plan.workload.context.to_string()));
    flags.push(("--max-num-seqs".into(), plan.workload.batch.max(1).to_string()));
    if weights == "fp8" {
        // The plan counts one byte per weight: quantize the checkpoint's weights when loading.
        flags.push(("--quantization".into(), "fp8".into()));
    }
    if let Some(kv) = kv_flag {
        flags.push(("--kv-cache-dtype".into(), kv.into()));
    }
    // Weights the plan keeps in host RAM: vLLM takes one amount per GPU, for every rank.
    let offloaded = plan.stages.iter().filter_map(|s| s.offload.as_ref()).map(|o| o.memory.weights).max().unwrap_or(0);
    if offloaded > 0 {
        let gib = (offloaded as f64 / f64::from(1u32 << 30) * 100.0).ceil() / 100.0;
        flags.push(("--cpu-offload-gb".into(), format!("{gib}")));
        notes.push(format!(
            "`--cpu-offload-gb {gib}` keeps that much of each GPU's weights in pinned host RAM, read over PCIe every step; vLLM offloads the same amount on every rank, from its first layers, where the plan may keep less on some."
        ));
        if super::Target::of_engine(plan.engine) != Some(super::Target::Vllm) {
            notes.push("The plan runs host-held weights on the CPU as llama.cpp does; vLLM streams them to the GPU instead, which is slower for decode: re-plan with `\"engine\": \"vllm\"` for its speed.".to_owned());
        }
        if plan.stages.iter().filter_map(|s| s.offload.as_ref()).any(|o| o.host_ffn > 0) {
            notes.push("vLLM cannot keep only a layer's FFN or experts in host RAM; it offloads whole parameters in layer order.".to_owned());
        }
    }
    for (flag, value) in flags {
        let _ = write!(command, " \\\n  {flag} {value}");
    }
    out.push_str(&command);
    out.push('\n');
    (out, notes)
}

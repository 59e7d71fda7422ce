//! Training frameworks' pipeline layouts.
//!
//! - DeepSpeed: `PipelineModule.parts`, the `num_stages + 1` boundaries over the module's
//!   whole list of layer specs (stage `s` owns `[parts[s], parts[s + 1])`). No constructor
//!   argument takes boundaries, so the export is a subclass that sets them in
//!   `_partition_layers` (DeepSpeed's own hook, called from `__init__`).
//! - Megatron-LM: `--pipeline-model-parallel-layout`, where `E` is the embedding, `t` a
//!   transformer layer (`t*N` repeats it), `L` the loss and `|` separates stages
//!   (`megatron/core/transformer/pipeline_parallel_layer_layout.py`).

//!
//! Both launchers number ranks machine by machine, then by the machine's GPUs (torchrun's
//! `--node-rank`, DeepSpeed's hostfile order), and both give a stage's tensor-parallel GPUs
//! neighbouring ranks, then the stages in order (Megatron's default `tp-cp-ep-dp-pp`,
//! DeepSpeed's `PipeModelDataParallelTopology`, whose `model` axis varies fastest). So the
//! export lists each machine once, in pipeline order, with its stages' GPUs in rank order;
//! a plan that comes back to a machine after leaving it cannot be launched so, and is refused.

use std::fmt::Write;

use super::{ExportError, Layout};

/// A machine of the plan in pipeline order: its name and its stages' GPUs in rank order
/// (`None` on a machine of one device, whose rank takes its GPU).
type Machine<'p> = (&'p str, Option<Vec<u32>>);

/// The plan's machines in rank order, and the GPUs of a stage (its tensor-parallel degree).
fn ranks<'p>(layout: &Layout<'p>, target: &str) -> Result<(Vec<Machine<'p>>, usize), ExportError> {
    let mut machines: Vec<Machine<'p>> = Vec::new();
    for (index, stage) in layout.plan.stages.iter().enumerate() {
        let (name, gpus) = match &stage.gpu_of {
            Some(gpu) if stage.tensor_parallel.is_empty() => (gpu.machine.as_str(), Some(vec![gpu.index])),
            Some(gpu) => (gpu.machine.as_str(), Some(stage.tensor_parallel.clone())),
            None => (stage.node.as_str(), None),
        };
        let seen = machines.iter().any(|(m, _)| *m == name);
        if let Some((last, Some(listed))) = machines.last_mut()
            && *last == name
        {
            let gpus = gpus.unwrap_or_default();
            if let Some(gpu) = gpus.iter().find(|g| listed.contains(g)) {
                return Err(ExportError::Stage {
                    index,
                    field: "gpu_of",
                    problem: format!(
                        "runs GPU {gpu} of `{name}`, which a stage before runs; give each stage GPUs of its own"
                    ),
                });
            }
            listed.extend(gpus);
        } else if seen {
            return Err(ExportError::Stage {
                index,
                field: "gpu_of",
                problem: format!(
                    "comes back to `{name}` after the pipeline left it; {target} numbers ranks machine by machine, so a machine's stages must follow each other: export this plan to llama.cpp or vLLM"
                ),
            });
        } else {
            machines.push((name, gpus));
        }
    }
    let degree = layout.plan.stages[0].tensor_parallel.len().max(1);
    Ok((machines, degree))
}

/// `CUDA_VISIBLE_DEVICES=0,1 ` for a machine with several GPUs, nothing for one device.
fn visible(gpus: Option<&Vec<u32>>) -> String {
    gpus.map_or_else(String::new, |gpus| {
        let listed: Vec<String> = gpus.iter().map(ToString::to_string).collect();
        format!("CUDA_VISIBLE_DEVICES={} ", listed.join(","))
    })
}

/// How many ranks a machine starts.
fn rank_count(gpus: Option<&Vec<u32>>) -> usize {
    gpus.map_or(1, Vec::len)
}

pub(super) fn deepspeed(layout: &Layout<'_>) -> Result<(String, Vec<String>), ExportError> {
    let (machines, degree) = ranks(layout, "DeepSpeed")?;
    // Some DeepSpeed launchers sort a host's `--include` slots (`sorted(set(…))`), and a
    // rank takes the slot of its place in that list: only an ascending order survives both.
    if let Some((name, gpus)) = machines.iter().find_map(|(n, g)| g.as_ref().filter(|g| !g.is_sorted()).map(|g| (n, g)))
    {
        let order: Vec<String> = gpus.iter().map(ToString::to_string).collect();
        return Err(ExportError::Plan {
            field: "stages",
            problem: format!(
                "run `{name}`'s GPUs in the order {}, which DeepSpeed's launcher may sort; export this plan to Megatron-LM (torchrun keeps `CUDA_VISIBLE_DEVICES`' order) or llama.cpp",
                order.join(", ")
            ),
        });
    }
    let mut parts = vec![0usize];
    parts.extend(layout.stages.iter().map(|&(_, _, end)| end));
    let list = |items: Vec<String>| items.join(", ");
    let mut out = String::new();
    let _ = writeln!(out, "# stageplan · {}", layout.summary());
    let _ = writeln!(out, "# DeepSpeed pipeline stages as PipelineModule boundaries. BLOCK_PARTS counts transformer");
    let _ = writeln!(out, "# blocks; set BLOCK_OFFSET to the number of layer specs before the first block (1 for an");
    let _ = writeln!(out, "# embedding spec). Layer specs after the last block (norm, head) join the last stage.");
    let _ = writeln!(out, "# TENSOR_PARALLEL GPUs run each stage (the model's layers split as Megatron-DeepSpeed's");
    let _ = writeln!(out, "# mpu splits them). Launch with a hostfile that lists the machines in this order:");
    for &(name, ref gpus) in &machines {
        let _ = writeln!(out, "#   {name} slots={}", rank_count(gpus.as_ref()));
    }
    let include: Vec<String> = machines
        .iter()
        .map(|(name, gpus)| match gpus {
            Some(gpus) => format!("{name}:{}", list(gpus.iter().map(ToString::to_string).collect()).replace(' ', "")),
            None => (*name).to_owned(),
        })
        .collect();
    let _ = writeln!(out, "# deepspeed --hostfile hostfile --include \"{}\" your_script.py", include.join("@"));
    let _ = writeln!(out, "from deepspeed.pipe import PipelineModule");
    let _ = writeln!(out, "from deepspeed.runtime.pipe.topology import PipeModelDataParallelTopology");
    out.push('\n');
    let _ = writeln!(out, "BLOCK_PARTS = [{}]", list(parts.iter().map(ToString::to_string).collect()));
    let _ =
        writeln!(out, "STAGE_NODES = [{}]", list(layout.stages.iter().map(|&(n, _, _)| format!("\"{n}\"")).collect()));
    let _ = writeln!(out, "TENSOR_PARALLEL = {degree}");
    let _ = writeln!(out, "BLOCK_OFFSET = 1");
    out.push_str("\n\n");
    out.push_str(
        r#"
def stageplan_topology():
    """The plan's ranks: each stage's TENSOR_PARALLEL GPUs side by side, then the stages in order."""
    return PipeModelDataParallelTopology(num_pp=len(STAGE_NODES), num_mp=TENSOR_PARALLEL, num_dp=1)


class StageplanPipelineModule(PipelineModule):
    """PipelineModule whose stages are stageplan's (pass topology=stageplan_topology())."""

    def _partition_layers(self, method="uniform"):
        num_stages = self._topo.get_dim("pipe")
        if num_stages != len(STAGE_NODES):
            raise ValueError(f"stageplan's plan has {len(STAGE_NODES)} stages, the topology {num_stages}")
        stage_id = self._topo.get_coord(self.global_rank).pipe
        inner = [BLOCK_OFFSET + p for p in BLOCK_PARTS[1:-1]]
        self.parts = [0] + inner + [len(self._layer_specs)]
        self._set_bounds(start=self.parts[stage_id], stop=self.parts[stage_id + 1])
"#
        .trim_start(),
    );
    let notes = vec![
        "DeepSpeed numbers ranks in its hostfile's order, each machine's GPUs as `--include` lists them; keep the order above, or the stages land on other machines.".to_owned(),
        "`_partition_layers` is DeepSpeed's private hook; the subclass was written against deepspeed/runtime/pipe/module.py and may need updating with DeepSpeed.".to_owned(),
    ];
    Ok((out, notes))
}

/// The layout string for `counts` blocks per stage: `Et*25|t*24|…|t*8L`.
pub(crate) fn megatron_layout(counts: &[usize]) -> String {
    let stages: Vec<String> = counts.iter().map(|&c| if c == 1 { "t".to_owned() } else { format!("t*{c}") }).collect();
    format!("E{}L", stages.join("|"))
}

pub(super) fn megatron(layout: &Layout<'_>) -> Result<(String, Vec<String>), ExportError> {
    let (machines, degree) = ranks(layout, "Megatron-LM")?;
    let counts = layout.counts();
    let mut out = String::new();
    let _ = writeln!(out, "# stageplan · {}", layout.summary());
    let _ = writeln!(
        out,
        "# Megatron-LM arguments: pipeline stages in this order: {}.",
        layout.stages.iter().map(|&(n, _, _)| n).collect::<Vec<_>>().join(", ")
    );
    let _ = writeln!(out, "# Start torchrun on each machine with these node ranks and GPUs, adding the arguments:");
    for (rank, (name, gpus)) in machines.iter().enumerate() {
        let _ = writeln!(
            out,
            "#   {name}: {}torchrun --nnodes {} --node-rank {rank} --nproc-per-node {} … pretrain_gpt.py \"${{STAGEPLAN_PIPELINE_ARGS[@]}}\" …",
            visible(gpus.as_ref()),
            machines.len(),
            rank_count(gpus.as_ref())
        );
    }
    let _ = writeln!(out, "STAGEPLAN_PIPELINE_ARGS=(");
    let _ = writeln!(out, "  --num-layers {}", layout.layers);
    if degree > 1 {
        let _ = writeln!(out, "  --tensor-model-parallel-size {degree}");
    }
    let _ = writeln!(out, "  --pipeline-model-parallel-size {}", counts.len());
    let _ = writeln!(out, "  --pipeline-model-parallel-layout \"{}\"", megatron_layout(&counts));
    let _ = writeln!(out, ")");
    let notes = vec![
        "Megatron gives a stage's tensor-parallel GPUs neighbouring ranks and the stages ranks in order (its default `--rank-order`, tp-cp-ep-dp-pp); keep the node ranks above, or the stages land on other machines.".to_owned(),
    ];
    Ok((out, notes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_repeat_each_stage() {
        assert_eq!(megatron_layout(&[25, 24, 23, 8]), "Et*25|t*24|t*23|t*8L");
        assert_eq!(megatron_layout(&[1, 3]), "Et|t*3L");
        assert_eq!(megatron_layout(&[32]), "Et*32L");
    }
}

//! Training frameworks' pipeline layouts.
//!
//! - DeepSpeed: `PipelineModule.parts`, the `num_stages + 1` boundaries over the module's
//!   whole list of layer specs (stage `s` owns `[parts[s], parts[s + 1])`). No constructor
//!   argument takes boundaries, so the export is a subclass that sets them in
//!   `_partition_layers` (DeepSpeed's own hook, called from `__init__`).
//! - Megatron-LM: `--pipeline-model-parallel-layout`, where `E` is the embedding, `t` a
//!   transformer layer (`t*N` repeats it), `L` the loss and `|` separates stages
//!   (`megatron/core/transformer/pipeline_parallel_layer_layout.py`).

use std::fmt::Write;

use super::Layout;

pub(super) fn deepspeed(layout: &Layout<'_>) -> (String, Vec<String>) {
    let mut parts = vec![0usize];
    parts.extend(layout.stages.iter().map(|&(_, _, end)| end));
    let list = |items: Vec<String>| items.join(", ");
    let mut out = String::new();
    let _ = writeln!(out, "# stageplan · {}", layout.summary());
    let _ = writeln!(out, "# DeepSpeed pipeline stages as PipelineModule boundaries. BLOCK_PARTS counts transformer");
    let _ = writeln!(out, "# blocks; set BLOCK_OFFSET to the number of layer specs before the first block (1 for an");
    let _ = writeln!(out, "# embedding spec). Layer specs after the last block (norm, head) join the last stage.");
    let _ = writeln!(out, "from deepspeed.pipe import PipelineModule");
    out.push('\n');
    let _ = writeln!(out, "BLOCK_PARTS = [{}]", list(parts.iter().map(ToString::to_string).collect()));
    let _ =
        writeln!(out, "STAGE_NODES = [{}]", list(layout.stages.iter().map(|&(n, _, _)| format!("\"{n}\"")).collect()));
    let _ = writeln!(out, "BLOCK_OFFSET = 1");
    out.push('\n');
    out.push_str(
        r#"
class StageplanPipelineModule(PipelineModule):
    """PipelineModule whose stages are stageplan's (pass num_stages=len(STAGE_NODES))."""

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
        "DeepSpeed places pipeline stages on ranks by its topology; launch with one rank per machine in STAGE_NODES order (e.g. a hostfile in that order).".to_owned(),
        "`_partition_layers` is DeepSpeed's private hook; the subclass was written against deepspeed/runtime/pipe/module.py and may need updating with DeepSpeed.".to_owned(),
    ];
    (out, notes)
}

/// The layout string for `counts` blocks per stage: `Et*25|t*24|…|t*8L`.
pub(crate) fn megatron_layout(counts: &[usize]) -> String {
    let stages: Vec<String> = counts.iter().map(|&c| if c == 1 { "t".to_owned() } else { format!("t*{c}") }).collect();
    format!("E{}L", stages.join("|"))
}

pub(super) fn megatron(layout: &Layout<'_>) -> (String, Vec<String>) {
    let counts = layout.counts();
    let mut out = String::new();
    let _ = writeln!(out, "# stageplan · {}", layout.summary());
    let _ = writeln!(
        out,
        "# Megatron-LM arguments: one pipeline stage per machine, in this order: {}.",
        layout.stages.iter().map(|&(n, _, _)| n).collect::<Vec<_>>().join(", ")
    );
    let _ =
        writeln!(out, "# Add them to your launch: torchrun … pretrain_gpt.py \"${{STAGEPLAN_PIPELINE_ARGS[@]}}\" …");
    let _ = writeln!(out, "STAGEPLAN_PIPELINE_ARGS=(");
    let _ = writeln!(out, "  --num-layers {}", layout.layers);
    let _ = writeln!(out, "  --pipeline-model-parallel-size {}", counts.len());
    let _ = writeln!(out, "  --pipeline-model-parallel-layout \"{}\"", megatron_layout(&counts));
    let _ = writeln!(out, ")");
    let notes = vec![
        "Megatron assigns pipeline stages to ranks in order: start the ranks (e.g. torchrun's node ranks) in the plan's machine order.".to_owned(),
    ];
    (out, notes)
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

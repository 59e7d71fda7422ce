# stageplan · llama-3.1-405b fp8 · 6 stages · layers 34/15/15/15/14/33 on h200-1, a100-1, a100-2, a100-3, a100-4, h200-2
# DeepSpeed pipeline stages as PipelineModule boundaries. BLOCK_PARTS counts transformer
# blocks; set BLOCK_OFFSET to the number of layer specs before the first block (1 for an
# embedding spec). Layer specs after the last block (norm, head) join the last stage.
# TENSOR_PARALLEL GPUs run each stage (the model's layers split as Megatron-DeepSpeed's
# mpu splits them). Launch with a hostfile that lists the machines in this order:
#   h200-1 slots=1
#   a100-1 slots=1
#   a100-2 slots=1
#   a100-3 slots=1
#   a100-4 slots=1
#   h200-2 slots=1
# deepspeed --hostfile hostfile --include "h200-1@a100-1@a100-2@a100-3@a100-4@h200-2" your_script.py
from deepspeed.pipe import PipelineModule
from deepspeed.runtime.pipe.topology import PipeModelDataParallelTopology

BLOCK_PARTS = [0, 34, 49, 64, 79, 93, 126]
STAGE_NODES = ["h200-1", "a100-1", "a100-2", "a100-3", "a100-4", "h200-2"]
TENSOR_PARALLEL = 1
BLOCK_OFFSET = 1


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

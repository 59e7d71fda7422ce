# stageplan · llama-3.1-70b bf16 · 2 stages · layers 32/48 on rack1/gpu0+gpu1+gpu2+gpu3, rack2/gpu0+gpu1+gpu2+gpu3
# DeepSpeed pipeline stages as PipelineModule boundaries. BLOCK_PARTS counts transformer
# blocks; set BLOCK_OFFSET to the number of layer specs before the first block (1 for an
# embedding spec). Layer specs after the last block (norm, head) join the last stage.
# TENSOR_PARALLEL GPUs run each stage (the model's layers split as Megatron-DeepSpeed's
# mpu splits them). Launch with a hostfile that lists the machines in this order:
#   rack1 slots=4
#   rack2 slots=4
# deepspeed --hostfile hostfile --include "rack1:0,1,2,3@rack2:0,1,2,3" your_script.py
from deepspeed.pipe import PipelineModule
from deepspeed.runtime.pipe.topology import PipeModelDataParallelTopology

BLOCK_PARTS = [0, 32, 80]
STAGE_NODES = ["rack1/gpu0", "rack2/gpu0"]
TENSOR_PARALLEL = 4
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

# stageplan · mixtral-8x7b q4_k_m · 3 stages · layers 2/12/18 on box, old-gpu, mac
# Megatron-LM arguments: pipeline stages in this order: box, old-gpu, mac.
# Start torchrun on each machine with these node ranks and GPUs, adding the arguments:
#   box: torchrun --nnodes 3 --node-rank 0 --nproc-per-node 1 … pretrain_gpt.py "${STAGEPLAN_PIPELINE_ARGS[@]}" …
#   old-gpu: torchrun --nnodes 3 --node-rank 1 --nproc-per-node 1 … pretrain_gpt.py "${STAGEPLAN_PIPELINE_ARGS[@]}" …
#   mac: torchrun --nnodes 3 --node-rank 2 --nproc-per-node 1 … pretrain_gpt.py "${STAGEPLAN_PIPELINE_ARGS[@]}" …
STAGEPLAN_PIPELINE_ARGS=(
  --num-layers 32
  --pipeline-model-parallel-size 3
  --pipeline-model-parallel-layout "Et*2|t*12|t*18L"
)

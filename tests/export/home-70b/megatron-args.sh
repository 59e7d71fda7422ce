# stageplan · llama-3.1-70b q4_k_m · 2 stages · layers 44/36 on desk, gamer
# Megatron-LM arguments: pipeline stages in this order: desk, gamer.
# Start torchrun on each machine with these node ranks and GPUs, adding the arguments:
#   desk: torchrun --nnodes 2 --node-rank 0 --nproc-per-node 1 … pretrain_gpt.py "${STAGEPLAN_PIPELINE_ARGS[@]}" …
#   gamer: torchrun --nnodes 2 --node-rank 1 --nproc-per-node 1 … pretrain_gpt.py "${STAGEPLAN_PIPELINE_ARGS[@]}" …
STAGEPLAN_PIPELINE_ARGS=(
  --num-layers 80
  --pipeline-model-parallel-size 2
  --pipeline-model-parallel-layout "Et*44|t*36L"
)

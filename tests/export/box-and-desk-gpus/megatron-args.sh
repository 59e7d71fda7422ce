# stageplan · llama-3.1-70b q4_k_m · 3 stages · layers 37/37/6 on box/gpu1, box/gpu0, desk
# Megatron-LM arguments: pipeline stages in this order: box/gpu1, box/gpu0, desk.
# Start torchrun on each machine with these node ranks and GPUs, adding the arguments:
#   box: CUDA_VISIBLE_DEVICES=1,0 torchrun --nnodes 2 --node-rank 0 --nproc-per-node 2 … pretrain_gpt.py "${STAGEPLAN_PIPELINE_ARGS[@]}" …
#   desk: torchrun --nnodes 2 --node-rank 1 --nproc-per-node 1 … pretrain_gpt.py "${STAGEPLAN_PIPELINE_ARGS[@]}" …
STAGEPLAN_PIPELINE_ARGS=(
  --num-layers 80
  --pipeline-model-parallel-size 3
  --pipeline-model-parallel-layout "Et*37|t*37|t*6L"
)

# stageplan · llama-3.1-70b bf16 · 2 stages · layers 32/48 on rack1/gpu0+gpu1+gpu2+gpu3, rack2/gpu0+gpu1+gpu2+gpu3
# Megatron-LM arguments: pipeline stages in this order: rack1/gpu0, rack2/gpu0.
# Start torchrun on each machine with these node ranks and GPUs, adding the arguments:
#   rack1: CUDA_VISIBLE_DEVICES=0,1,2,3 torchrun --nnodes 2 --node-rank 0 --nproc-per-node 4 … pretrain_gpt.py "${STAGEPLAN_PIPELINE_ARGS[@]}" …
#   rack2: CUDA_VISIBLE_DEVICES=0,1,2,3 torchrun --nnodes 2 --node-rank 1 --nproc-per-node 4 … pretrain_gpt.py "${STAGEPLAN_PIPELINE_ARGS[@]}" …
STAGEPLAN_PIPELINE_ARGS=(
  --num-layers 80
  --tensor-model-parallel-size 4
  --pipeline-model-parallel-size 2
  --pipeline-model-parallel-layout "Et*32|t*48L"
)

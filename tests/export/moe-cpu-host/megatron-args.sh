# stageplan · mixtral-8x7b q4_k_m · 3 stages · layers 2/12/18 on box, old-gpu, mac
# Megatron-LM arguments: one pipeline stage per machine, in this order: box, old-gpu, mac.
# Add them to your launch: torchrun … pretrain_gpt.py "${STAGEPLAN_PIPELINE_ARGS[@]}" …
STAGEPLAN_PIPELINE_ARGS=(
  --num-layers 32
  --pipeline-model-parallel-size 3
  --pipeline-model-parallel-layout "Et*2|t*12|t*18L"
)

# stageplan · mixtral-8x7b q4_k_m · 3 stages · layers 12/18/2 on old-gpu, mac, box
# Megatron-LM arguments: one pipeline stage per machine, in this order: old-gpu, mac, box.
# Add them to your launch: torchrun … pretrain_gpt.py "${STAGEPLAN_PIPELINE_ARGS[@]}" …
STAGEPLAN_PIPELINE_ARGS=(
  --num-layers 32
  --pipeline-model-parallel-size 3
  --pipeline-model-parallel-layout "Et*12|t*18|t*2L"
)

# stageplan · llama-3.1-70b q4_k_m · 2 stages · layers 44/36 on desk, gamer
# Megatron-LM arguments: one pipeline stage per machine, in this order: desk, gamer.
# Add them to your launch: torchrun … pretrain_gpt.py "${STAGEPLAN_PIPELINE_ARGS[@]}" …
STAGEPLAN_PIPELINE_ARGS=(
  --num-layers 80
  --pipeline-model-parallel-size 2
  --pipeline-model-parallel-layout "Et*44|t*36L"
)

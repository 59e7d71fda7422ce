# stageplan · llama-3.1-70b q4_k_m · 2 stages · layers 37/43 on gamer, desk
# Megatron-LM arguments: one pipeline stage per machine, in this order: gamer, desk.
# Add them to your launch: torchrun … pretrain_gpt.py "${STAGEPLAN_PIPELINE_ARGS[@]}" …
STAGEPLAN_PIPELINE_ARGS=(
  --num-layers 80
  --pipeline-model-parallel-size 2
  --pipeline-model-parallel-layout "Et*37|t*43L"
)

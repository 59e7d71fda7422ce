# stageplan · llama-3.1-70b q4_k_m · 4 stages · layers 32/14/1/33 on gamer, mac, old-laptop, desk
# Megatron-LM arguments: one pipeline stage per machine, in this order: gamer, mac, old-laptop, desk.
# Add them to your launch: torchrun … pretrain_gpt.py "${STAGEPLAN_PIPELINE_ARGS[@]}" …
STAGEPLAN_PIPELINE_ARGS=(
  --num-layers 80
  --pipeline-model-parallel-size 4
  --pipeline-model-parallel-layout "Et*32|t*14|t|t*33L"
)

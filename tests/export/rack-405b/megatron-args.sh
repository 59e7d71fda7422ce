# stageplan · llama-3.1-405b fp8 · 6 stages · layers 17/34/17/14/11/33 on a100-1, h200-1, a100-2, a100-3, a100-4, h200-2
# Megatron-LM arguments: one pipeline stage per machine, in this order: a100-1, h200-1, a100-2, a100-3, a100-4, h200-2.
# Add them to your launch: torchrun … pretrain_gpt.py "${STAGEPLAN_PIPELINE_ARGS[@]}" …
STAGEPLAN_PIPELINE_ARGS=(
  --num-layers 126
  --pipeline-model-parallel-size 6
  --pipeline-model-parallel-layout "Et*17|t*34|t*17|t*14|t*11|t*33L"
)

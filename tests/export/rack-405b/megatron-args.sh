# stageplan · llama-3.1-405b fp8 · 6 stages · layers 34/17/17/17/8/33 on h200-1, a100-1, a100-2, a100-3, a100-4, h200-2
# Megatron-LM arguments: one pipeline stage per machine, in this order: h200-1, a100-1, a100-2, a100-3, a100-4, h200-2.
# Add them to your launch: torchrun … pretrain_gpt.py "${STAGEPLAN_PIPELINE_ARGS[@]}" …
STAGEPLAN_PIPELINE_ARGS=(
  --num-layers 126
  --pipeline-model-parallel-size 6
  --pipeline-model-parallel-layout "Et*34|t*17|t*17|t*17|t*8|t*33L"
)

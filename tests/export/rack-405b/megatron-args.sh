# stageplan · llama-3.1-405b fp8 · 6 stages · layers 16/16/13/35/12/34 on a100-1, a100-2, a100-3, h200-1, a100-4, h200-2
# Megatron-LM arguments: one pipeline stage per machine, in this order: a100-1, a100-2, a100-3, h200-1, a100-4, h200-2.
# Add them to your launch: torchrun … pretrain_gpt.py "${STAGEPLAN_PIPELINE_ARGS[@]}" …
STAGEPLAN_PIPELINE_ARGS=(
  --num-layers 126
  --pipeline-model-parallel-size 6
  --pipeline-model-parallel-layout "Et*16|t*16|t*13|t*35|t*12|t*34L"
)

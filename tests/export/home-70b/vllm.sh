# stageplan · llama-3.1-70b q4_k_m · 2 stages · layers 37/43 on gamer, desk
# Pipeline rank r runs the r-th count of VLLM_PP_LAYER_PARTITION: rank 0 = gamer (layers 0–37), rank 1 = desk (layers 37–80).

# 1. A Ray cluster: on gamer,
ray start --head --port 6379
#    on desk:
ray start --address gamer:6379

# 2. On gamer:
VLLM_PP_LAYER_PARTITION=37,43 vllm serve meta-llama/Llama-3.1-70B \
  --pipeline-parallel-size 2 \
  --tensor-parallel-size 1 \
  --distributed-executor-backend ray \
  --max-model-len 8192 \
  --max-num-seqs 1

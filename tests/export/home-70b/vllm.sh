# stageplan · llama-3.1-70b q4_k_m · 2 stages · layers 44/36 on desk, gamer
# Pipeline rank r runs the r-th count of VLLM_PP_LAYER_PARTITION: rank 0 = desk (layers 0–44), rank 1 = gamer (layers 44–80).

# 1. A Ray cluster: on desk,
ray start --head --port 6379
#    on gamer:
ray start --address desk:6379

# 2. On desk:
VLLM_PP_LAYER_PARTITION=44,36 vllm serve meta-llama/Llama-3.1-70B \
  --pipeline-parallel-size 2 \
  --tensor-parallel-size 1 \
  --distributed-executor-backend ray \
  --max-model-len 8192 \
  --max-num-seqs 1

# stageplan · llama-3.1-70b q4_k_m · 4 stages · layers 32/14/1/33 on gamer, mac, old-laptop, desk
# Pipeline rank r runs the r-th count of VLLM_PP_LAYER_PARTITION: rank 0 = gamer (layers 0–32), rank 1 = mac (layers 32–46), rank 2 = old-laptop (layers 46–47), rank 3 = desk (layers 47–80).

# 1. A Ray cluster: on gamer,
ray start --head --port 6379
#    on mac:
ray start --address gamer:6379
#    on old-laptop:
ray start --address gamer:6379
#    on desk:
ray start --address gamer:6379

# 2. On gamer:
VLLM_PP_LAYER_PARTITION=32,14,1,33 vllm serve meta-llama/Llama-3.1-70B \
  --pipeline-parallel-size 4 \
  --tensor-parallel-size 1 \
  --distributed-executor-backend ray \
  --max-model-len 8192 \
  --max-num-seqs 1

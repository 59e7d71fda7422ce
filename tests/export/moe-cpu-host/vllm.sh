# stageplan · mixtral-8x7b q4_k_m · 3 stages · layers 2/12/18 on box, old-gpu, mac
# Pipeline rank r runs the r-th count of VLLM_PP_LAYER_PARTITION: rank 0 = box (layers 0–2), rank 1 = old-gpu (layers 2–14), rank 2 = mac (layers 14–32).

# 1. A Ray cluster: on box,
ray start --head --port 6379
#    on old-gpu:
ray start --address box:6379
#    on mac:
ray start --address box:6379

# 2. On box:
VLLM_PP_LAYER_PARTITION=2,12,18 vllm serve /models/mixtral-8x7b-instruct-v0.1.Q4_K_M.gguf \
  --pipeline-parallel-size 3 \
  --tensor-parallel-size 1 \
  --distributed-executor-backend ray \
  --max-model-len 16384 \
  --max-num-seqs 2

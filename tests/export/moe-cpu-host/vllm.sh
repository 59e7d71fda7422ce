# stageplan · mixtral-8x7b q4_k_m · 3 stages · layers 12/2/18 on old-gpu, box, mac
# Pipeline rank r runs the r-th count of VLLM_PP_LAYER_PARTITION: rank 0 = old-gpu (layers 0–12), rank 1 = box (layers 12–14), rank 2 = mac (layers 14–32).

# 1. A Ray cluster: on old-gpu,
ray start --head --port 6379
#    on box:
ray start --address 192.168.1.30:6379
#    on mac:
ray start --address 192.168.1.30:6379

# 2. On old-gpu:
VLLM_PP_LAYER_PARTITION=12,2,18 vllm serve /models/mixtral-8x7b-instruct-v0.1.Q4_K_M.gguf \
  --pipeline-parallel-size 3 \
  --tensor-parallel-size 1 \
  --distributed-executor-backend ray \
  --max-model-len 16384 \
  --max-num-seqs 2

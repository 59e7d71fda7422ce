# stageplan · llama-3.1-405b fp8 · 6 stages · layers 34/15/15/15/14/33 on h200-1, a100-1, a100-2, a100-3, a100-4, h200-2
# Pipeline rank r runs the r-th count of VLLM_PP_LAYER_PARTITION: rank 0 = h200-1 (layers 0–34), rank 1 = a100-1 (layers 34–49), rank 2 = a100-2 (layers 49–64), rank 3 = a100-3 (layers 64–79), rank 4 = a100-4 (layers 79–93), rank 5 = h200-2 (layers 93–126).

# 1. A Ray cluster: on h200-1,
ray start --head --port 6379
#    on a100-1:
ray start --address h200-1:6379
#    on a100-2:
ray start --address h200-1:6379
#    on a100-3:
ray start --address h200-1:6379
#    on a100-4:
ray start --address h200-1:6379
#    on h200-2:
ray start --address h200-1:6379

# 2. On h200-1:
VLLM_PP_LAYER_PARTITION=34,15,15,15,14,33 vllm serve meta-llama/Llama-3.1-405B \
  --pipeline-parallel-size 6 \
  --tensor-parallel-size 1 \
  --distributed-executor-backend ray \
  --max-model-len 32768 \
  --max-num-seqs 16 \
  --quantization fp8 \
  --kv-cache-dtype fp8

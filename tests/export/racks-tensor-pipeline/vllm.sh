# stageplan · llama-3.1-70b bf16 · 2 stages · layers 32/48 on rack1/gpu0+gpu1+gpu2+gpu3, rack2/gpu0+gpu1+gpu2+gpu3
# Pipeline rank r runs the r-th count of VLLM_PP_LAYER_PARTITION: rank 0 = rack1/gpu0+gpu1+gpu2+gpu3 (layers 0–32), rank 1 = rack2/gpu0+gpu1+gpu2+gpu3 (layers 32–80).

# 1. A Ray cluster: on rack1,
CUDA_VISIBLE_DEVICES=0,1,2,3 ray start --head --port 6379
#    on rack2:
CUDA_VISIBLE_DEVICES=0,1,2,3 ray start --address rack1:6379

# 2. On rack1:
VLLM_PP_LAYER_PARTITION=32,48 vllm serve meta-llama/Llama-3.1-70B \
  --pipeline-parallel-size 2 \
  --tensor-parallel-size 4 \
  --distributed-executor-backend ray \
  --max-model-len 8192 \
  --max-num-seqs 1

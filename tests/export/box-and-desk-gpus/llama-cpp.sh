# stageplan · llama-3.1-70b q4_k_m · 3 stages · layers 37/8/35 on box/gpu1, desk, box/gpu0
# --tensor-split gives each device its blocks (+1 on the last for the output layer) of the 81 slots;
# llama.cpp then places exactly the plan's layers on each device, in --device order.

# 1. On each machine below, serve its device to the host (llama.cpp's rpc-server).
#    One device per rpc-server keeps the RPC device numbers in --rpc order.
#    on desk:
CUDA_VISIBLE_DEVICES=0 ggml-rpc-server --host 0.0.0.0 --port 50052

# 2. On box:
llama-server \
  --model llama-3.1-70b-q4_k_m.gguf \
  --rpc desk:50052 \
  --device CUDA1,RPC0,CUDA0 \
  --n-gpu-layers 81 \
  --fit off \
  --tensor-split 37,8,36 \
  --ctx-size 32768 \
  --parallel 1 \
  --cache-type-k f16 \
  --cache-type-v f16 \
  --flash-attn on

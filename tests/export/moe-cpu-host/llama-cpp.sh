# stageplan · mixtral-8x7b q4_k_m · 3 stages · layers 2/12/18 on box, old-gpu, mac
# --tensor-split gives each device its blocks (+1 on the last for the output layer) of the 33 slots;
# llama.cpp then places exactly the plan's layers on each device, in --device order.

# 1. On each machine below, serve its device to the host (llama.cpp's rpc-server).
#    One device per rpc-server keeps the RPC device numbers in --rpc order.
#    on box:
ggml-rpc-server --host 127.0.0.1 --port 50052 --threads "$(nproc)"
#    on old-gpu:
CUDA_VISIBLE_DEVICES=0 ggml-rpc-server --host 192.168.1.30 --port 50053
#    on mac:
ggml-rpc-server --host 192.168.1.20 --port 50052

# 2. On box:
llama-server \
  --model /models/mixtral-8x7b-instruct-v0.1.Q4_K_M.gguf \
  --rpc 127.0.0.1:50052,192.168.1.30:50053,192.168.1.20:50052 \
  --device RPC0,RPC1,RPC2 \
  --n-gpu-layers 33 \
  --fit off \
  --tensor-split 2,12,19 \
  --ctx-size 32768 \
  --parallel 2 \
  --cache-type-k q8_0 \
  --cache-type-v q8_0 \
  --flash-attn on

# stageplan · llama-3.1-405b fp8 · 6 stages · layers 34/15/15/15/14/33 on h200-1, a100-1, a100-2, a100-3, a100-4, h200-2
# --tensor-split gives each device its blocks (+1 on the last for the output layer) of the 127 slots;
# llama.cpp then places exactly the plan's layers on each device, in --device order.

# 1. On each machine below, serve its device to the host (llama.cpp's rpc-server).
#    One device per rpc-server keeps the RPC device numbers in --rpc order.
#    on a100-1:
CUDA_VISIBLE_DEVICES=0 ggml-rpc-server --host 0.0.0.0 --port 50052
#    on a100-2:
CUDA_VISIBLE_DEVICES=0 ggml-rpc-server --host 0.0.0.0 --port 50052
#    on a100-3:
CUDA_VISIBLE_DEVICES=0 ggml-rpc-server --host 0.0.0.0 --port 50052
#    on a100-4:
CUDA_VISIBLE_DEVICES=0 ggml-rpc-server --host 0.0.0.0 --port 50052
#    on h200-2:
CUDA_VISIBLE_DEVICES=0 ggml-rpc-server --host 0.0.0.0 --port 50052

# 2. On h200-1:
llama-server \
  --model llama-3.1-405b-fp8.gguf \
  --rpc a100-1:50052,a100-2:50052,a100-3:50052,a100-4:50052,h200-2:50052 \
  --device CUDA0,RPC0,RPC1,RPC2,RPC3,RPC4 \
  --n-gpu-layers 127 \
  --fit off \
  --tensor-split 34,15,15,15,14,34 \
  --ctx-size 524288 \
  --parallel 16 \
  --cache-type-k f16 \
  --cache-type-v f16 \
  --flash-attn on

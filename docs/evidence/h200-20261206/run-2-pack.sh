#!/bin/bash
# Call 2 (warm machine): the training record left on the device by call 1 and a test subset,
# packed into one archive (a call returns only a few files).
cd /tmp && ls /tmp/tr/records/train/; export LD_LIBRARY_PATH=/tmp/lib
d=$(dirname "$(find / -name 'libnccl.so.2' 2>/dev/null | head -1)"); export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$d
mkdir -p /tmp/pk; cp -r /tmp/tr/records /tmp/pk/
timeout 200 /tmp/rec/microllm_cuda_tests --gtest_filter="CudaDeterminism.*:CudaFlatOptimizer.*:*Gemm*:*BatchInvariant*:CudaModel.*:CudaFlash*:CudaAttention*" > /tmp/pk/tests-subset.log 2>&1
tar -C /tmp/pk -czf $OUT/pack.tar.gz .

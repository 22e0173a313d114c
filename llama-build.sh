# How llama-cpp-python (the local extra) is built from its source, sourced by setup.sh, .ci/run
# and cluster/node.sh so that all three build it alike: LLAMA_CMAKE_ARGS, for CMAKE_ARGS.
# - No multimodal library (mtmd): a text model never loads it (786 instead of 946 CPU seconds).
# - On x86-64, no AMX kernels. llama.cpp is built for the building machine's CPU
#   (-march=native); where that CPU has AMX (Intel Sapphire Rapids and later), llama.cpp
#   repacks the embedded model's Q4_K weights for AMX and its AMX matrix product crashes the
#   first decode (a segmentation fault; ggml-org/llama.cpp#20824). GCC and Clang keep an
#   explicit -mno-amx-int8 over -march=native: the AVX-512 kernels stay.
LLAMA_CMAKE_ARGS="-DLLAVA_BUILD=OFF"
if [ "$(uname -m)" = x86_64 ]; then
    LLAMA_CMAKE_ARGS+=" -DCMAKE_C_FLAGS=-mno-amx-int8 -DCMAKE_CXX_FLAGS=-mno-amx-int8"
fi

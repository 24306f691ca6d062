#!/usr/bin/env bash
# Carries vLLM 0.25.1 (with its OffloadingConnector) and LMCache 0.5.2 to the GPU machine, which
# has Python 3.12 with torch 2.11.0+cu130 and no package registry, in parts small enough for the
# device tool (64 MiB per call, the repository's own tree included).
#
#   bash scripts/gpu/vllm_carry.sh prepare [--part-mb 45] [--cache DIR]
#       here (PyPI reachable): fetch the pinned wheels into DIR (default
#       /var/cache/rangekv/gpu-carry; files already there with the pinned sha256 are reused, and
#       so is the stripped vLLM), strip vLLM, bundle everything into one tar stream and split it
#       into .gpu/vllm/1, .gpu/vllm/2, ... (git-ignored; each a folder with one part file of at
#       most --part-mb MiB and MANIFEST: the sha256 of every part and of the whole stream).
#       With 45 MiB: 3 parts, about 134 MiB in all.
#   bash scripts/gpu/vllm_carry.sh receive
#       there, in every call, from the repository root: copy the part folders that arrived under
#       .gpu/vllm/ into $RANGEKV_VLLM_ROOT/parts (default /tmp/rangekv-vllm), checking each sha256
#       (a damaged part is refused); say which parts are present and which are missing. A part
#       of another bundle (another MANIFEST) discards the parts held and starts over.
#   bash scripts/gpu/vllm_carry.sh install
#       there, once every part is present: check every part's and the whole sha256, unpack vLLM
#       into $RANGEKV_VLLM_ROOT/site, pip-install the wheels there (--no-index --no-deps
#       --target), write $RANGEKV_VLLM_ROOT/env.sh (PYTHONPATH, VLLM_USE_FLASHINFER_SAMPLER=0,
#       no usage reports, Hugging Face offline) and run `check`. A second install of the same
#       bundle returns at once. Exit 2: parts missing.
#   bash scripts/gpu/vllm_carry.sh check
#       the import check alone, one line per import: ok; FAIL; NOGPU (failed only for want of a
#       GPU driver, libcuda.so.1: allowed on a machine without a GPU, a FAIL where there is one);
#       WARN (informative, not counted: vLLM's in-tree LMCache adapter, which lmcache 0.5.2 no
#       longer matches and which runs only with use_native=True; the carried wheels'
#       requirements against the machine's own versions; an LMCache local CPU + disk round trip).
#       Exit 1 on any FAIL.
#   bash scripts/gpu/vllm_carry.sh resolve [--cache DIR]
#       here, when moving a pin: run pip's resolver (pip 26.3, in a venv in the cache) for a
#       cp312 manylinux target over WANTS with the GPU machine's known versions as constraints,
#       drop what the machine has and EXCLUDE, and print the PINS block to paste below (with the
#       difference from the current one).
# PYTHON (default python3) is the interpreter: the machine's torch venv there; here it makes the
# pip venv. The script was validated here with a Python 3.12 venv holding the GPU machine's
# packages at its versions (torch 2.11.0+cu130 from PyPI, no GPU): everything imports except
# the two libraries that need libcuda.so.1 (vllm._C_stable_libtorch, FA3), which `ldd` shows
# lack nothing else.
#
# The device calls, one right after the other (the machine goes back after 30 s idle; /tmp
# survives between calls while it is warm):
#   call k < n:  carry [".gpu/vllm/k"]  command  bash scripts/gpu/vllm_carry.sh receive
#   call n:      carry [".gpu/vllm/n"]  command  bash scripts/gpu/vllm_carry.sh receive &&
#                bash scripts/gpu/vllm_carry.sh install && . /tmp/rangekv-vllm/env.sh && ...
#
# What is stripped from the vLLM wheel, and why. The wheel is 250 MB (606 MB unpacked); a plain
# Llama in bf16 with FlashAttention 3 on an H100/H200 needs `_C_stable_libtorch.abi3.so` (vLLM's
# custom ops, imported by the CUDA platform at start), `vllm_flash_attn/_vllm_fa3_C.abi3.so`
# (FA3: the llama model's attention backend imports the flash-attn module, and vLLM picks FA3 on
# compute capability 9.x) and the Python sources. Deleted (295 MiB):
#   - vllm_flash_attn/_vllm_fa2_C.abi3.so (191 MB): FlashAttention 2, for GPUs before Hopper;
#     flash_attn_interface imports it inside try/except and reports FA2 unavailable.
#   - _moe_C_stable_libtorch.abi3.so (46 MB): fused mixture-of-experts kernels; a dense Llama
#     never calls them and the platform imports the module under suppress(ImportError).
#   - vllm-rs (38 MB): the Rust OpenAI front-end binary, started only with
#     VLLM_USE_RUST_FRONTEND=1; the offline LLM class never starts it.
#   - third_party/deep_gemm/_C.cpython-3{10,11,13,14}-*.so: builds for other Pythons (the
#     cp312 one stays).
#   - third_party/fmha_sm100 (29 MB of CUTLASS headers): Blackwell-only FMHA, imported inside
#     functions by the MiniMax-M3 model on sm100 alone.
# Kept although a plain Llama does not use them, because they are small or their callers are
# not clear-cut: FlashMLA, QuTLASS, FA4 (cute), deep_gemm (FP8) with its headers, the Triton
# kernels. The .dist-info stays (RECORD loses the deleted files' lines) so importlib.metadata
# finds vllm 0.25.1. Packed as tar.xz (69 MiB): FA3 shrinks from 38 MB (the wheel's deflate) to
# 11 MB; the custom-ops library (mostly already-compressed fat binaries) stays about 54 MB.
#
# The wheels (65 MiB). PINS is what pip's resolver chose for Python 3.12 on manylinux <= 2.31
# (2.31 is the newest tag seen working there: llguidance 1.7.x; no carried library needs a glibc
# symbol newer than 2.30) under WANTS (the Requires-Dist of vllm 0.25.1 and lmcache 0.5.2 that
# the offline engine, the two connectors and LMCache's local CPU/disk tiers use, and the list
# that ran there by hand), constrained to the versions the GPU machine is known to have
# (GPU_PINS), minus the packages it has (GPU_HAS, except CARRY_ALSO) and minus EXCLUDE. Three
# packages go in with --no-deps against their own metadata, because their numpy caps cannot
# hold beside the machine's numpy 2.5.2 (which torch and CuPy there are built against, so it
# stays): lmcache 0.5.2 (numpy<=2.2.6, prometheus_client<=0.24.1), mistral_common (numpy<2.4 on
# Python 3.12), and vllm itself (it also pins numba==0.65.0 and apache-tvm-ffi==0.1.9, too old
# for xgrammar 0.2.9's `extra_lib_paths`; 0.1.15 is carried). The import check is the proof
# that they load with the machine's versions.
set -euo pipefail

VLLM_VERSION=0.25.1
VLLM_WHEEL=vllm-0.25.1-cp38-abi3-manylinux_2_28_x86_64.whl
VLLM_SHA256=16fc7a28df1576eb6f7ca0455026551b8f9adb674c19c66059359ef3e964bd1e
BUNDLE_NAME="vllm-${VLLM_VERSION}+lmcache-0.5.2"

# Paths inside the wheel that are deleted (see the header).
STRIP=(
  vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so
  vllm/_moe_C_stable_libtorch.abi3.so
  vllm/vllm-rs
  vllm/third_party/deep_gemm/_C.cpython-310-x86_64-linux-gnu.so
  vllm/third_party/deep_gemm/_C.cpython-311-x86_64-linux-gnu.so
  vllm/third_party/deep_gemm/_C.cpython-313-x86_64-linux-gnu.so
  vllm/third_party/deep_gemm/_C.cpython-314-x86_64-linux-gnu.so
  vllm/third_party/fmha_sm100
)
# Paths that must survive the strip.
KEEP=(
  vllm/_C_stable_libtorch.abi3.so
  vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so
  vllm/vllm_flash_attn/flash_attn_interface.py
  vllm/cumem_allocator.abi3.so
  vllm/third_party/deep_gemm/_C.cpython-312-x86_64-linux-gnu.so
  vllm-0.25.1.dist-info/METADATA
)

# The wheels carried: name==version sha256. Generated by `resolve` (then edited only by moving
# a pin through `resolve` again).
PINS='
aiofile==3.12.3 5c1bcc9e929c50834608e8cc1a4cc1d7503eb60c15a535b779fd39e2f372c017
annotated-types==0.8.0 f072f4d804ea359e4eaf198b1af7a8b0943881a87f31bb764f8bf219bb9419e0
apache-tvm-ffi==0.1.15.post2 059eed9bfc94bcd41650fb8eefde74040a1bc7e7b1a6f0a8ff897b02b118875b
astor==0.8.1 070a54e890cefb5b3739d19f30f5a5ec840ffc9c50ffa7d23cc9fc1a38ebbfc5
blake3==1.0.11 33424c686b291c7682b5816fe9320466dbc0a457ef7e15c273c804a2d70fea70
cachetools==8.0.3 08bc12eeb7c7ab68abbe2d64d07fd7923ff532e32ff04ae27d22add1c5e8a5f9
caio==0.12.10 b34a5483b987d207348ebbf86921bc42f08abcde833b91e0caa8760c7daa2f03
cbor2==6.3.0 4f160b662059cc30ced4436fca332f4c27d0259698a5bde8373c9c6f829aabdf
compressed-tensors==0.17.0 4a1b89b508f7efb8ffb4eee8a6e69e0452d9b080cae130146025c64fbe9fa9aa
cufile-python==0.2.0 f19a67b32f11ffdde35d0a62f44ca196f51463a106dd54b30e1f4c5c4577cb19
depyf==0.20.0 d31effad4261cebecb58955d832e448ace88f432328f95f82fd99c30fd9308d4
dill==0.4.1 1e1ce33e978ae97fcfcff5638477032b801c46c7c65cf717f95fbc2248f79a9d
diskcache==5.6.3 5e31b2d5fbad117cc363ebaf6b689474db18a1f6438bc82358b024abd4c2ca19
distro==1.9.0 7bffd925d65168f85027d8da9af6bddab658135b840670a223589bc0c8ef02b2
fastapi==0.136.3 3d2a69bdf04b7e9f3afa292c3bc7a98816bbfafa10bc9b45f3f3700d2f761620
flashinfer-python==0.6.13 239e6ddc3cbbaf0bee251861a8c7c69438b1171830d69ddfa133ddea4494850d
gguf==0.19.0 70bcd10edfe697fb2dad6e40af2234b9d8ece9a41a99761405121ebda1c3c1cd
httptools==0.9.0 3e3201fe4d46e0d15d7ff9fafc94a605da9eb82d2c5b9837f0368acb325481f1
ijson==3.6.0 c14d568d31a322e8ed7e9735f6e355608a23cc6ff4b5da843515089dae4cbf5f
importlib_metadata==8.7.1 5a1f80bf1daa489495071efbb095d75a634cf28a8bc299581244063b53176151
interegular==0.3.3 b0c07007d48c89d6d19f7204972d369b2a77222722e126b6aa63aa721dc3b19c
jiter==0.19.0 0956b5f58b804221dfb929c120e6d4032138fed20c1cc0ef683a2d1326255e46
jsonschema==4.26.0 d489f15263b8d200f8387e64b4c3a75f06629559fb73deb8fdfb525f2dab50ce
jsonschema-specifications==2025.9.1 98802fee3a11ee76ecaca44429fda8a41bff98b00a0f2838151b113f210cc6fe
lark==1.2.2 c2276486b02f0f1b90be155f2c8ba4a8e194d42775786db622faccd652d8e80c
llguidance==1.7.6 ceec951d29a74309984e3be0fe7f5f56c1362434cd937abd517b259a60908b1e
lm-format-enforcer==0.11.3 cf586350875def1ae7a8fba84fcbbfc8371424b6c9d05c1fcba70aa233fbf06f
lmcache==0.5.2 8871a7259da9038f8fd7cf0d8cee1d22c554b5b2d9fe5bdad5654258586d4fcd
loguru==0.7.3 31a33c10c8e1e10422bfd431aeb5d351c7cf7fa671e3c4df004162264b28220c
mistral_common==1.13.1 98b4d0755b8d90bf4691fa8f1b70cb3b4a8cd4dc1653c4ed08ef3d1c7d2c29af
msgspec==0.23.0 c08f294663135183bd633efd843645687285a445054a876c37506d4e9de7d80b
nvtx==0.2.15 3ca8030a6d197952318013dd1c12c22da1d4b9feb76ba72e0fcd449961183c2c
openai==2.54.0 89089789197ccdb87f173a03145ed1598d00795220c93e96cf712b1cbf5e5f2b
openai-harmony==0.0.8 c007d277218a50db8839e599ed78e0fffe5130f614c3f6d93ae257f282071a29
opentelemetry-api==1.40.0 82dd69331ae74b06f6a874704be0cfaa49a1650e1537d4a813b86ecef7d0ecf9
opentelemetry-sdk==1.40.0 787d2154a71f4b3d81f20524a8ce061b7db667d24e46753f32a7bc48f1c1f3f1
opentelemetry-semantic-conventions==0.61b0 fa530a96be229795f8cef353739b618148b0fe2b4b3f005e60e262926c4d38e2
outlines_core==0.2.14 3bb2060c240c4507f334965a8948dbeeb22007560d797f6debd92346c0b620cb
partial-json-parser==0.2.1.1.post7 145119e5eabcf80cbb13844a6b50a85c68bf99d376f8ed771e2a3c3b03e653ae
prometheus-fastapi-instrumentator==8.1.0 b9f40b2cff3f7891ca0610b3ae4fc6ec723fd326b04bb659819aaeb821a0fc7d
pybase64==1.5.1 c212d02fd072c5845d39b4699eb65efa827b79a5cf7fecc9f468f8cad2b8540f
pycountry==26.2.16 115c4baf7cceaa30f59a4694d79483c9167dbce7a9de4d3d571c5f3ea77c305a
pydantic==2.14.4 653a2ad9f6d8858529c77c72717d0ea991d6c6837fe683246b2f4b2bbfc3fadc
pydantic_core==2.50.5 470bbc2495367f60d3ca849a8039e4c164701d10637e7743f4427d92651bdb6d
pydantic-extra-types==2.11.1 1722ea2bddae5628ace25f2aa685b69978ef533123e5638cfbddb999e0100ec1
python-json-logger==4.2.0 158a52126fcd6869e09574d2b66272666f3dc8f468c62637ef9a1fa883719cb9
pyzmq==27.3.0 858fe25231e0fd8612da142efde019faa5ef63fa150a821a27870e791b38c798
redis==8.2.0 4ff649f10fae5e7e97798fb2a84e84a0a66e98310d75cad2b5a572ce0f9f15a7
referencing==0.37.0 381329a9f99628c9069361716891d34ad94af76e461dcb0335825aecc7692231
rpds-py==2026.9.1 addeda51556dac7c1a2f14cda62db8b621cd12afba3091d03a96c72932387eab
setproctitle==1.3.8 4a765e0c80a2453480be27c4fc22ba1c0771867040c5f91e4221940d78a4abfb
sniffio==1.3.1 2f6da418d1f1e0fddd844478f41680e794e6051915791a034ff65e5f100525a2
starlette==1.10.0 478c0ab3b4ced6e82719849c118fa406f0278a3499c1a898cd15cd31bdc38ce4
typing_extensions==4.16.0 481caa481374e813c1b176ada14e97f1f67a4539ce9cfeb3f350d78d6370c2e8
typing-inspection==0.4.5 bc210535442b39e1bf2805e0c7a17dfd6a4ace760c84c7f7d16245d23a6b1c39
uvicorn==0.55.0 bee604c5af6e15fb0584913c632b222c09db1048c26fc05053203207c4b9e37d
watchfiles==1.3.0 b5768b49e426fd5b550b012c866db347cdf15c398ef98dc557b6e6b72fa74cd1
xgrammar==0.2.9 3326c9fb5864922fde7b52efea9c7e83b91a8f5bf81dbb5f5164d23410dfdae4
'

# What the resolver is asked for (see the header). Version ranges are the Requires-Dist of
# vllm 0.25.1 and lmcache 0.5.2, except openai<3 (openai 3 imports httpx2, absent there).
WANTS='
blake3
cachetools
fastapi>=0.133.0,<0.137.0
starlette>=1.0.1
pydantic>=2.12.0
openai>=2.0.0,<3
prometheus-fastapi-instrumentator>=8.0.0
lm-format-enforcer==0.11.3
llguidance>=1.7.0,<1.8.0
outlines_core==0.2.14
diskcache==5.6.3
lark==1.2.2
xgrammar>=0.2.1,<1.0.0
partial-json-parser
jsonschema>=4.23.0
pyzmq>=25.0.0
msgspec
pycountry
pydantic-extra-types[pycountry]>=2.10.5
compressed-tensors==0.17.0
depyf==0.20.0
watchfiles
python-json-logger
pybase64
cbor2
ijson
setproctitle
openai-harmony>=0.0.3
flashinfer-python==0.6.13
gguf
nvtx==0.2.15
opentelemetry-api>=1.27.0,<=1.40.0
opentelemetry-sdk>=1.27.0
uvicorn
httptools
aiofile
redis
cufile-python
'
# Carried with --no-deps outside the resolver (see the header).
NODEPS='
lmcache==0.5.2
mistral_common==1.13.1
'
# Resolved but not carried: flashinfer's CuTe-DSL, cuDNN-frontend and JIT-toolchain
# dependencies. With VLLM_USE_FLASHINFER_SAMPLER=0 and FA3 as the attention backend nothing on
# the plain-Llama path imports them, and the machine has its own nvcc.
EXCLUDE='
nvidia-cudnn-frontend
nvidia-cutlass-dsl
nvidia-cutlass-dsl-libs-base
nvidia-cutlass-dsl-libs-core
nvidia-cutlass-dsl-libs-cu12
nvidia-cutlass-dsl-libs-cu13
cuda-tile
nvidia-cuda-nvcc
nvidia-cuda-tileiras
nvidia-nvvm
nvidia-cuda-crt
'
# Carried although the machine has them: a carried wheel needs a floor that its unknown version
# there may miss (pydantic 2.14 and pydantic-core need typing-extensions>=4.16.0). A newer
# typing-extensions only adds names, so shadowing the machine's is safe.
CARRY_ALSO='
typing-extensions
'
# Requirements of the carried wheels that stay unmet there on purpose: the numpy caps and pins
# the header explains, the packages EXCLUDE names, and the Requires-Dist of vllm 0.25.1 and
# lmcache 0.5.2 for paths a plain Llama with the two connectors never takes (other attention
# and MoE kernels, video and audio, the OpenAI server's Anthropic/MCP front ends and its
# container hooks, OTLP/Prometheus exporters, S3/Bigtable tiers, tilelang, FP8 kernels).
# `check` lists any other unmet requirement.
UNMET_OK='numpy numba setuptools prometheus-client apache-tvm-ffi flashinfer-cubin
nvidia-cudnn-frontend nvidia-cutlass-dsl cuda-tile nvidia-cuda-nvcc nvidia-cuda-tileiras
nvidia-nvvm nvidia-cuda-crt torchcodec pynvvideocodec tilelang fastsafetensors quack-kernels
tokenspeed-mla humming-kernels anthropic mcp model-hosting-container-standards
opentelemetry-exporter-otlp opentelemetry-semantic-conventions-ai
opentelemetry-exporter-prometheus awscrt setuptools-scm google-api-core google-cloud-bigtable'
# The GPU machine's versions that are known (its image, read 2026-11).
GPU_PINS='
torch==2.11.0
torchvision==0.26.0
torchaudio==2.11.0
transformers==5.17.0
numpy==2.5.2
triton==3.6.0
cupy-cuda13x==14.2.0
safetensors==0.8.0
huggingface_hub==1.33.0
tokenizers==0.23.2
sentencepiece==0.2.2
tiktoken==0.14.0
accelerate==1.15.0
'
# Every Python package the GPU machine's image has (read 2026-11-17); none is carried but
# CARRY_ALSO.
GPU_HAS='absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs
botorch build certifi charset-normalizer chex click cloudpickle cmake colorama contourpy coverage
cuda-bindings cuda-core cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn
einops equinox etils execnet filelock flatbuffers flax fonttools formulaic frozenlist fsspec
gpytorch grpcio h11 h5py hf-xet httpcore httpx huggingface-hub humanize hypothesis idna imageio
iniconfig interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin jaxlib jaxtyping jinja2 joblib
kiwisolver lazy-loader lightning lightning-utilities linear-operator lineax llvmlite lxml
markdown markdown-it-py markupsafe matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack
multidict multipledispatch mypy-extensions nanobind narwhals networkx ninja numba numba-cuda
numpy numpyro nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc nvidia-cuda-runtime
nvidia-cudnn-cu13 nvidia-cufft nvidia-cufile nvidia-curand nvidia-cusolver nvidia-cusparse
nvidia-cusparselt-cu13 nvidia-ml-py nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13
nvidia-nvtx onnx onnx-ir onnxruntime onnxscript opencv-python-headless optax opt-einsum
opt-einsum-fx optimistix orbax-checkpoint packaging pandas pathspec patsy peft pillow pip pluggy
portalocker prometheus-client propcache protobuf psutil pyarrow pybind11 py-cpuinfo pygments
pyparsing pyproject-hooks pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock
pytest-timeout pytest-xdist python-dateutil pytorch-lightning pyyaml regex requests rich
sacrebleu safetensors scikit-build-core scikit-image scikit-learn scipy seaborn sentencepiece
sentence-transformers setuptools shellingham simplejson six sortedcontainers statsmodels sympy
tabulate tensorboard tensorboard-data-server tensorstore threadpoolctl tifffile tiktoken timm
tokenizers toolz torch torchaudio torchdiffeq torch-geometric torchmetrics torchvision tqdm
transformers treescope triton typer typing-extensions typing-inspect urllib3 uvloop
wadler-lindig werkzeug wheel wrapt xarray xxhash yarl zipp'

# pip matches a manylinux tag exactly, so every glibc from 2.5 to 2.31 is named.
PLATFORMS=()
for n in $(seq 31 -1 5); do PLATFORMS+=(--platform "manylinux_2_${n}_x86_64"); done
PLATFORMS+=(--platform manylinux2014_x86_64 --platform manylinux2010_x86_64
  --platform manylinux1_x86_64)
TARGET_FLAGS=(--only-binary=:all: --python-version 3.12 --implementation cp --abi cp312
  "${PLATFORMS[@]}")

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PARTS_DIR="$REPO/.gpu/vllm"
ROOT="${RANGEKV_VLLM_ROOT:-/tmp/rangekv-vllm}"
PYTHON="${PYTHON:-python3}"

die() { echo "vllm_carry: $*" >&2; exit 1; }
lines() { sed -e 's/#.*//' -e '/^[[:space:]]*$/d' <<<"$1"; }
sha_of() { sha256sum "$1" | cut -d' ' -f1; }
mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }

# ---------------------------------------------------------------- here ----------------------

# The pip that prepare and resolve run: pip 23's resolver backtracks for over 20 minutes on
# WANTS where 26.3 takes about a minute, so a pinned pip lives in a venv in the cache.
PIP_VERSION=26.3
here_pip() {
  local venv=$1/pip-$PIP_VERSION
  if [[ ! -x "$venv/bin/python" ]] ||
    [[ "$("$venv/bin/python" -m pip --version | cut -d' ' -f2)" != "$PIP_VERSION" ]]; then
    rm -rf "$venv"
    "$PYTHON" -m venv "$venv" || die "cannot make a venv with $PYTHON (python3-venv?)"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check "pip==$PIP_VERSION" ||
      die "cannot install pip==$PIP_VERSION"
  fi
  echo "$venv/bin/python"
}

# fetch_pinned CACHE: every PINS wheel and the vLLM wheel in CACHE/dist, each checked against
# its pinned sha256 (pip checks what it downloads; the check also covers files already there).
fetch_pinned() {
  local cache=$1 dist=$1/dist reqs=$1/pins.txt pip
  mkdir -p "$dist"
  pip=$(here_pip "$cache")
  { echo "vllm==${VLLM_VERSION} --hash=sha256:${VLLM_SHA256}"
    lines "$PINS" | awk '{ print $1 " --hash=sha256:" $2 }'; } >"$reqs"
  # pip download skips files already in -d that satisfy the requirement and match the hash.
  "$pip" -m pip download -q --no-deps --require-hashes "${TARGET_FLAGS[@]}" -d "$dist" \
    -r "$reqs" || die "pip download failed (PyPI reachable? pins still published?)"
  local name want file
  while read -r name want; do
    file=$(wheel_file "$dist" "$name") || die "no wheel for $name in $dist"
    [[ "$(sha_of "$file")" == "$want" ]] || die "$file: sha256 differs from the pin"
  done < <(echo "vllm==${VLLM_VERSION} ${VLLM_SHA256}"; lines "$PINS")
}

# wheel_file DIR NAME==VERSION: the one wheel of that name and version in DIR.
wheel_file() {
  local dir=$1 name=${2%%==*} version=${2#*==} f
  name=$(tr 'A-Z.-' 'a-z__' <<<"$name")
  for f in "$dir"/*.whl; do
    local base=${f##*/}
    local fname=${base%%-*} fver=${base#*-}
    fver=${fver%%-*}
    if [[ "$(tr 'A-Z.-' 'a-z__' <<<"$fname")" == "$name" && "$fver" == "$version" ]]; then
      echo "$f"
      return 0
    fi
  done
  return 1
}

# strip_vllm CACHE: CACHE/build/vllm-<key>.tar.xz, the stripped wheel tree; key = wheel + STRIP.
strip_vllm() {
  local cache=$1 key out tree
  key=$(printf '%s\n' "$VLLM_SHA256" "${STRIP[@]}" | sha256sum | cut -c1-12)
  out="$cache/build/vllm-${VLLM_VERSION}-stripped-$key.tar.xz"
  if [[ -s "$out" ]]; then
    echo "stripped vLLM: reusing $out ($(mib "$(stat -c %s "$out")"))" >&2
    echo "$out"
    return 0
  fi
  tree="$cache/build/vllm-tree"
  rm -rf "$tree" && mkdir -p "$tree"
  unzip -q "$cache/dist/$VLLM_WHEEL" -d "$tree"
  local p bytes=0 b
  for p in "${STRIP[@]}"; do
    [[ -e "$tree/$p" ]] || die "strip list is stale: $p is not in the wheel"
    b=$(du -sb "$tree/$p" | cut -f1)
    bytes=$((bytes + b))
    echo "  strip $p ($(mib "$b"))" >&2
    rm -rf "${tree:?}/$p"
  done
  for p in "${KEEP[@]}"; do
    [[ -e "$tree/$p" ]] || die "$p missing after the strip"
  done
  local record="$tree/vllm-${VLLM_VERSION}.dist-info/RECORD" pattern
  pattern=$(printf '%s\n' "${STRIP[@]}" | sed 's/[.]/\\./g; s/^/^/; s/$/(,|\/)/' | paste -sd'|')
  grep -Ev "$pattern" "$record" >"$record.new" && mv "$record.new" "$record"
  echo "stripped $(mib "$bytes") from the vLLM wheel; packing (xz, one thread) ..." >&2
  mkdir -p "$cache/build"
  tar -C "$tree" --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -cf - \
    vllm "vllm-${VLLM_VERSION}.dist-info" | xz -6 -T1 >"$out.tmp"
  mv "$out.tmp" "$out"
  rm -rf "$tree"
  echo "$out"
}

prepare() {
  local part_mb=45 cache=/var/cache/rangekv/gpu-carry
  while (($#)); do
    case $1 in
      --part-mb) part_mb=${2:?}; shift 2 ;;
      --cache) cache=${2:?}; shift 2 ;;
      *) die "prepare: unknown argument $1" ;;
    esac
  done
  [[ "$part_mb" =~ ^[0-9]+$ && $part_mb -ge 1 && $part_mb -le 60 ]] ||
    die "--part-mb must be 1..60 (a call carries 64 MiB with the repository tree)"
  lines "$PINS" | grep -q PLACEHOLDER && die "PINS is not filled in: run resolve first"
  cd "$REPO"
  git check-ignore -q .gpu/x || die ".gpu/ is not ignored by git"
  mkdir -p "$cache"
  fetch_pinned "$cache"
  local xzf
  xzf=$(strip_vllm "$cache")

  # The bundle: the stripped vLLM, the wheels and the pin list, as one uncompressed tar
  # (everything in it is compressed already).
  local stage="$cache/build/bundle" stream="$cache/build/bundle.tar"
  rm -rf "$stage" && mkdir -p "$stage/wheels"
  cp "$xzf" "$stage/vllm-${VLLM_VERSION}-stripped.tar.xz"
  local pin
  while read -r pin _; do
    cp "$(wheel_file "$cache/dist" "$pin")" "$stage/wheels/"
  done < <(lines "$PINS")
  lines "$PINS" >"$stage/PINS"
  tar -C "$stage" --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -cf "$stream" .
  rm -rf "$stage"

  rm -rf "$PARTS_DIR" && mkdir -p "$PARTS_DIR"
  local split_dir="$cache/build/split"
  rm -rf "$split_dir" && mkdir -p "$split_dir"
  split -b "${part_mb}M" -d -a 3 "$stream" "$split_dir/p."
  local whole n=0 f manifest="$cache/build/MANIFEST"
  whole=$(sha_of "$stream")
  local parts=("$split_dir"/p.*)
  {
    echo "bundle $BUNDLE_NAME"
    echo "whole $whole $(stat -c %s "$stream")"
    echo "parts ${#parts[@]}"
    for f in "${parts[@]}"; do
      n=$((n + 1))
      echo "part $n $(sha_of "$f") $(stat -c %s "$f")"
    done
  } >"$manifest"
  n=0
  for f in "${parts[@]}"; do
    n=$((n + 1))
    mkdir -p "$PARTS_DIR/$n"
    mv "$f" "$PARTS_DIR/$n/part"
    cp "$manifest" "$PARTS_DIR/$n/MANIFEST"
  done
  rm -rf "$split_dir" "$stream"
  local whole_bytes
  whole_bytes=$(awk '$1 == "whole" { print $3 }' "$manifest")
  echo "bundle $BUNDLE_NAME: ${#parts[@]} parts, $(mib "$whole_bytes") in all, sha256 $whole"
  awk '$1 == "part" { printf "  .gpu/vllm/%s  %.1f MiB\n", $2, $4 / 1048576 }' "$manifest"
  echo "device calls, one right after the other: call k carries [\".gpu/vllm/k\"] and runs" \
    "'bash scripts/gpu/vllm_carry.sh receive'; the last adds '&& bash" \
    "scripts/gpu/vllm_carry.sh install'"
}

resolve() {
  local cache=/var/cache/rangekv/gpu-carry
  while (($#)); do
    case $1 in
      --cache) cache=${2:?}; shift 2 ;;
      *) die "resolve: unknown argument $1" ;;
    esac
  done
  local work="$cache/resolve" pip
  rm -rf "$work" && mkdir -p "$work"
  pip=$(here_pip "$cache")
  local nodeps
  mapfile -t nodeps < <(lines "$NODEPS")
  lines "$WANTS" >"$work/wants.txt"
  lines "$GPU_PINS" >"$work/constraints.txt"
  # --target with --python-version/--platform makes pip resolve for the GPU's interpreter and
  # ignore whatever this machine has installed.
  "$pip" -m pip install -q --dry-run --ignore-installed --report "$work/deps.json" \
    "${TARGET_FLAGS[@]}" --target "$work/t" -r "$work/wants.txt" -c "$work/constraints.txt"
  "$pip" -m pip install -q --dry-run --ignore-installed --no-deps --report "$work/nodeps.json" \
    "${TARGET_FLAGS[@]}" --target "$work/t" "${nodeps[@]}"
  GPU_HAS="$GPU_HAS" EXCLUDE="$EXCLUDE" CARRY_ALSO="$CARRY_ALSO" \
    "$PYTHON" - "$work/deps.json" "$work/nodeps.json" \
    >"$work/PINS" <<'EOF'
import json, os, re, sys
norm = lambda n: re.sub(r"[-_.]+", "-", n).lower()
skip = {norm(n) for n in (os.environ["GPU_HAS"] + " " + os.environ["EXCLUDE"]).split()}
skip -= {norm(n) for n in os.environ["CARRY_ALSO"].split()}
rows = []
for path in sys.argv[1:]:
    for item in json.load(open(path))["install"]:
        meta = item["metadata"]
        if norm(meta["name"]) in skip:
            continue
        sha = item["download_info"]["archive_info"]["hashes"]["sha256"]
        rows.append((norm(meta["name"]), f"{meta['name']}=={meta['version']} {sha}"))
for _, row in sorted(rows):
    print(row)
EOF
  echo "PINS='"
  cat "$work/PINS"
  echo "'"
  if diff <(lines "$PINS") "$work/PINS" >"$work/diff"; then
    echo "# same as the script's PINS" >&2
  else
    echo "# differs from the script's PINS (< script, > resolved):" >&2
    cat "$work/diff" >&2
  fi
}

# ---------------------------------------------------------------- there ---------------------

manifest_field() { awk -v k="$1" '$1 == k { print $2; exit }' "$2"; }

receive() {
  mkdir -p "$ROOT/parts"
  local dir got=() n arrived
  for dir in "$PARTS_DIR"/*/; do
    [[ -f "$dir/MANIFEST" && -f "$dir/part" ]] || continue
    n=$(basename "$dir")
    arrived="$dir/MANIFEST"
    if [[ -f "$ROOT/MANIFEST" ]] && ! cmp -s "$arrived" "$ROOT/MANIFEST"; then
      echo "receive: part $n belongs to another bundle than the parts in $ROOT;" \
        "starting over with its bundle"
      rm -rf "$ROOT/parts" "$ROOT/MANIFEST" && mkdir -p "$ROOT/parts"
    fi
    local want size
    read -r _ _ want size < <(awk -v n="$n" '$1 == "part" && $2 == n' "$arrived")
    [[ -n "$want" ]] || die "part folder $n is not named in its MANIFEST"
    [[ "$(stat -c %s "$dir/part")" == "$size" ]] ||
      die "part $n arrived with $(stat -c %s "$dir/part") bytes; its MANIFEST says $size"
    [[ "$(sha_of "$dir/part")" == "$want" ]] ||
      die "part $n arrived damaged (sha256 differs from its MANIFEST)"
    cp "$dir/part" "$ROOT/parts/$n.tmp" && mv "$ROOT/parts/$n.tmp" "$ROOT/parts/$n"
    cp "$arrived" "$ROOT/MANIFEST"
    got+=("$n")
  done
  report_parts "${got[*]:-}" || true
}

# report_parts ARRIVED: prints the bundle's parts present and missing; returns 1 if any missing.
report_parts() {
  if [[ ! -f "$ROOT/MANIFEST" ]]; then
    echo "parts: none received yet (no .gpu/vllm/N/ in this call's tree, none in $ROOT)"
    return 1
  fi
  local total n present=() missing=()
  total=$(manifest_field parts "$ROOT/MANIFEST")
  for ((n = 1; n <= total; n++)); do
    if [[ -f "$ROOT/parts/$n" ]]; then present+=("$n"); else missing+=("$n"); fi
  done
  echo "bundle $(manifest_field bundle "$ROOT/MANIFEST"): arrived now: ${1:-none};" \
    "present ${present[*]:-none} of $total; missing: ${missing[*]:-none}"
  ((${#missing[@]} == 0))
}

install() {
  [[ -f "$ROOT/MANIFEST" ]] || { report_parts "" || true; exit 2; }
  local whole
  whole=$(manifest_field whole "$ROOT/MANIFEST")
  if [[ -f "$ROOT/.installed" && "$(cat "$ROOT/.installed")" == "$whole" ]]; then
    echo "installed already (bundle sha256 $whole): . $ROOT/env.sh"
    [[ -f "$ROOT/check.txt" ]] && tail -1 "$ROOT/check.txt"
    return 0
  fi
  report_parts "" || exit 2
  local total n start=$SECONDS
  total=$(manifest_field parts "$ROOT/MANIFEST")
  local files=() want
  for ((n = 1; n <= total; n++)); do
    files+=("$ROOT/parts/$n")
    want=$(awk -v n="$n" '$1 == "part" && $2 == n { print $3 }' "$ROOT/MANIFEST")
    if [[ "$(sha_of "$ROOT/parts/$n")" != "$want" ]]; then
      rm -f "$ROOT/parts/$n"
      die "part $n changed on this machine since it arrived: removed; send it again"
    fi
  done
  [[ "$(cat "${files[@]}" | sha256sum | cut -d' ' -f1)" == "$whole" ]] ||
    die "the reassembled bundle's sha256 differs from the MANIFEST"
  rm -rf "$ROOT/site" "$ROOT/bundle" "$ROOT/.installed"
  mkdir -p "$ROOT/site" "$ROOT/bundle"
  cat "${files[@]}" | tar -C "$ROOT/bundle" -xf -
  # The wheels first: pip --target would warn about the vllm folder otherwise.
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
    --disable-pip-version-check --target "$ROOT/site" "$ROOT"/bundle/wheels/*.whl
  if command -v xz >/dev/null; then
    tar -C "$ROOT/site" -xJf "$ROOT/bundle/vllm-${VLLM_VERSION}-stripped.tar.xz"
  else
    "$PYTHON" -m tarfile -e "$ROOT/bundle/vllm-${VLLM_VERSION}-stripped.tar.xz" "$ROOT/site"
  fi
  cat >"$ROOT/env.sh" <<EOF
# Written by scripts/gpu/vllm_carry.sh install (bundle $BUNDLE_NAME, sha256 $whole).
export PYTHONPATH="$ROOT/site\${PYTHONPATH:+:\$PYTHONPATH}"
export PATH="$ROOT/site/bin:\$PATH"
# The sampler would otherwise want FlashInfer's cubin package, which is not carried.
export VLLM_USE_FLASHINFER_SAMPLER=0
# No network there: no usage reports, no Hugging Face Hub look-ups.
export VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 LMCACHE_TRACK_USAGE=false
export HF_HUB_OFFLINE=1
EOF
  rm -rf "$ROOT/bundle"
  echo "$whole" >"$ROOT/.installed"
  echo "installed $BUNDLE_NAME into $ROOT/site in $((SECONDS - start)) s; . $ROOT/env.sh"
  check
}

check() {
  [[ -f "$ROOT/env.sh" ]] || die "not installed: no $ROOT/env.sh"
  local check_env=(VLLM_LOGGING_LEVEL=ERROR LMCACHE_LOG_LEVEL=ERROR UNMET_OK="$UNMET_OK"
    CARRY_SITE="$ROOT/site")
  # shellcheck disable=SC1091
  (. "$ROOT/env.sh" && env "${check_env[@]}" "$PYTHON" - <<'EOF') | tee "$ROOT/check.txt"
import importlib, pkgutil, re, sys, traceback

import torch

has_gpu = torch.cuda.is_available()
# Failures that only say there is no GPU driver on this machine.
NO_GPU = re.compile(r"libcuda\.so|NVIDIA driver|no CUDA GPUs|CUDA driver|cudaErrorNoDevice|"
                    r"NVML|Found no NVIDIA|CUDA_ERROR_NO_DEVICE|cuInit")
failed = nogpu = passed = 0


def report(label, fn, why_optional=None):
    """One line: ok, FAIL, NOGPU, or (for an import nothing on our path makes) WARN."""
    global failed, nogpu, passed
    try:
        detail = fn()
        passed += 1
        print(f"ok     {label}" + (f": {detail}" if detail else ""), flush=True)
    except BaseException as e:  # SystemExit from a module counts too
        text = f"{type(e).__name__}: {e}".splitlines()[0][:1000]
        if not has_gpu and NO_GPU.search(text):
            nogpu += 1
            print(f"NOGPU  {label}: {text}", flush=True)
        elif why_optional:
            print(f"WARN   {label}: {text} ({why_optional})", flush=True)
        else:
            failed += 1
            print(f"FAIL   {label}: {text}", flush=True)


def attr(module, name):
    return lambda: (getattr(importlib.import_module(module), name), None)[1]


def walk(package, skip=("tests",)):
    def run():
        pkg = importlib.import_module(package)
        names = [m.name for m in pkgutil.walk_packages(pkg.__path__, package + ".")
                 if not any(part in skip for part in m.name.split("."))]
        for name in names:
            importlib.import_module(name)
        return f"{len(names)} modules"
    return run


def version(dist):
    from importlib.metadata import version as v
    return lambda: v(dist)


def fa3():
    # The library itself first: vllm.vllm_flash_attn's own error hides the loader's reason.
    import ctypes, os
    here = os.path.dirname(importlib.import_module("vllm").__file__)
    ctypes.CDLL(os.path.join(here, "vllm_flash_attn", "_vllm_fa3_C.abi3.so"))
    from vllm.vllm_flash_attn import flash_attn_interface as fai
    if not fai.FA3_AVAILABLE:
        raise ImportError(fai.FA3_UNAVAILABLE_REASON)
    return f"FA3 available, FA2 {'available' if fai.FA2_AVAILABLE else 'stripped'}"


def connector(name):
    def run():
        from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory
        cls = KVConnectorFactory.get_connector_class_by_name(name)
        return f"{cls.__module__}.{cls.__qualname__}"
    return run


report("import vllm", lambda: "%s from %s" % (importlib.import_module("vllm").__version__,
                                               importlib.import_module("vllm").__path__[0]))
report("vllm dist-info (importlib.metadata)", version("vllm"))
report("from vllm import LLM, SamplingParams", attr("vllm", "LLM"))
report("vllm.config (VllmConfig, KVTransferConfig)", attr("vllm.config", "KVTransferConfig"))
report("vllm._C_stable_libtorch (custom ops)",
       lambda: (importlib.import_module("vllm._C_stable_libtorch"), None)[1])
report("vllm.vllm_flash_attn FA3", fa3)
report("vllm.v1.attention.backends.flash_attn",
       attr("vllm.v1.attention.backends.flash_attn", "FlashAttentionBackend"))
report("vllm.model_executor.models.llama",
       attr("vllm.model_executor.models.llama", "LlamaForCausalLM"))
report("vllm.v1.sample.sampler", attr("vllm.v1.sample.sampler", "Sampler"))
report("vllm.v1.worker.gpu_model_runner",
       attr("vllm.v1.worker.gpu_model_runner", "GPUModelRunner"))
report("vllm.v1.engine.core", attr("vllm.v1.engine.core", "EngineCore"))
report("OffloadingConnector module",
       attr("vllm.distributed.kv_transfer.kv_connector.v1.offloading_connector",
            "OffloadingConnector"))
report("KVConnectorFactory OffloadingConnector", connector("OffloadingConnector"))
report("vllm.v1.kv_offload.cpu", walk("vllm.v1.kv_offload.cpu"))
report("LMCacheConnectorV1 module",
       attr("vllm.distributed.kv_transfer.kv_connector.v1.lmcache_connector",
            "LMCacheConnectorV1"))
report("KVConnectorFactory LMCacheConnectorV1", connector("LMCacheConnectorV1"))
report("vllm's in-tree LMCache adapter (lmcache_integration)",
       attr("vllm.distributed.kv_transfer.kv_connector.v1.lmcache_integration.vllm_v1_adapter",
            "LMCacheConnectorV1Impl"),
       "used only with extra_config use_native=True or LMCacheMPConnector; LMCacheConnectorV1 "
       "runs lmcache's own adapter by default")
report("import lmcache", version("lmcache"))
report("lmcache.c_ops", lambda: (importlib.import_module("lmcache.c_ops"), None)[1])
report("lmcache.integration.vllm.vllm_v1_adapter",
       attr("lmcache.integration.vllm.vllm_v1_adapter", "LMCacheConnectorV1Impl"))
report("lmcache.integration.vllm.*", walk("lmcache.integration.vllm"))
report("lmcache local CPU backend",
       attr("lmcache.v1.storage_backend.local_cpu_backend", "LocalCPUBackend"))
report("lmcache local disk backend",
       attr("lmcache.v1.storage_backend.local_disk_backend", "LocalDiskBackend"))
report("lmcache storage manager",
       attr("lmcache.v1.storage_backend.storage_manager", "StorageManager"))
report("lmcache.v1.cache_engine", attr("lmcache.v1.cache_engine", "LMCacheEngineBuilder"))


def lmcache_disk_round_trip():
    # LMCache's storage manager with its local CPU and local disk tiers (the configuration of
    # the benchmark's LMCache arm), on CPU tensors: one chunk stored, found on disk, read back.
    import tempfile, time
    from lmcache.utils import CacheEngineKey
    from lmcache.v1.config import LMCacheEngineConfig
    from lmcache.v1.event_manager import EventManager
    from lmcache.v1.metadata import LMCacheMetadata
    from lmcache.v1.storage_backend.storage_manager import StorageManager
    with tempfile.TemporaryDirectory(prefix="lmcache-disk-") as disk:
        config = LMCacheEngineConfig.from_defaults(
            chunk_size=16, local_cpu=True, max_local_cpu_size=0.05, local_disk=disk + "/",
            max_local_disk_size=0.1)
        shape = (2, 2, 16, 4, 8)
        metadata = LMCacheMetadata(model_name="carry-check", world_size=1, local_world_size=1,
                                   worker_id=0, local_worker_id=0, kv_dtype=torch.bfloat16,
                                   kv_shape=shape)
        manager = StorageManager(config, metadata, EventManager())
        try:
            want = torch.arange(2 * 2 * 16 * 4 * 8).reshape(shape).to(torch.bfloat16)
            obj = manager.allocate(torch.Size(shape), torch.bfloat16)
            obj.tensor.copy_(want)
            key = CacheEngineKey("carry-check", 1, 0, 12345, torch.bfloat16)
            manager.batched_put([key], [obj])
            disk_tier = manager.storage_backends["LocalDiskBackend"]
            for _ in range(200):
                if disk_tier.contains(key):
                    break
                time.sleep(0.05)
            else:
                raise TimeoutError("the chunk did not reach the disk tier in 10 s")
            got = disk_tier.get_blocking(key)
            if got is None or not torch.equal(got.tensor.cpu(), want):
                raise AssertionError("the chunk read back from disk differs")
            return f"backends {list(manager.storage_backends)}, 1 chunk stored and read back"
        finally:
            manager.close()


def requirements():
    # Every Requires-Dist of the carried distributions against what this machine has (the
    # carried ones included): the machine's versions of its own packages are not all known
    # where the pins were chosen, so a floor they miss shows here.
    import os
    from importlib import metadata
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name
    ok = {canonicalize_name(n) for n in os.environ["UNMET_OK"].split()}
    site = os.environ["CARRY_SITE"]
    carried = [d for d in metadata.distributions(path=[site])]
    unmet = []
    for dist in carried:
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue
            name = canonicalize_name(req.name)
            if name in ok:
                continue
            try:
                have = metadata.version(req.name)
            except metadata.PackageNotFoundError:
                unmet.append(f"{dist.metadata['Name']} needs {req} (absent)")
                continue
            if req.specifier and not req.specifier.contains(have, prereleases=True):
                unmet.append(f"{dist.metadata['Name']} needs {req} (has {have})")
    if unmet:
        raise RuntimeError("; ".join(sorted(set(unmet))))
    return f"{len(carried)} carried distributions, every other requirement met"


report("requirements of the carried wheels", requirements,
       "imports above decide; this names a version floor the machine misses")
report("lmcache local CPU + disk tiers: store and read back one chunk",
       lmcache_disk_round_trip, "a smoke test beyond the imports")
for module in ("xgrammar", "llguidance", "outlines_core", "flashinfer"):
    report(f"import {module}", lambda m=module: (importlib.import_module(m), None)[1])

print(f"check: {passed} ok, {failed} FAIL, {nogpu} NOGPU (GPU present: {has_gpu})")
sys.exit(1 if failed or (nogpu and has_gpu) else 0)
EOF
}

case "${1:-}" in
  prepare) shift; prepare "$@" ;;
  resolve) shift; resolve "$@" ;;
  receive) shift; cd "$REPO"; receive ;;
  install) shift; cd "$REPO"; install ;;
  check) shift; check ;;
  *) sed -n '2,/^# What is stripped/p' "$0" | sed '$d'; exit 64 ;;
esac

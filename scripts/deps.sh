#!/usr/bin/env bash
# Installs what the build and the Vulkan tests need on a Debian machine, if missing:
# the Vulkan loader, Mesa's lavapipe (a CPU Vulkan device), the Khronos validation layer,
# the shader tools that check the shipped SPIR-V (glslang, spirv-tools), and Xvfb + xwd for the
# particle demo's window test, and Debian's Rust 1.96 with the std sources (rustc-web,
# rust-web-src: /usr/bin/rustc) for test.sh's Windows type-check, which builds std itself,
# and Python 3 with its headers and venv (the Python module's wheel and pytest).
set -euo pipefail
need=()
for p in libvulkan1 libvulkan-dev mesa-vulkan-drivers vulkan-validationlayers glslang-tools spirv-tools xvfb x11-apps \
         rustc-web rust-web-src python3 python3-dev python3-venv; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "missing packages: ${need[*]} (install them, e.g. apt-get install ${need[*]})" >&2
    exit 1
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  echo "installed: ${need[*]}"
fi

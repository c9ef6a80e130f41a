#!/usr/bin/env bash
# Installs everything SafeVLA-Bench and its tests need on a fresh Debian machine:
# Mesa EGL for offscreen MuJoCo rendering, chromium for the browser test, and the
# Python package with its replay, LIBERO, dashboard, Ray and dev extras. gcc builds the
# optional C module that reads JSONL step arrays (scoring/_columns.c).
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null; then SUDO="sudo"; fi
if command -v apt-get >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends \
    libegl1 libegl-mesa0 libgl1-mesa-dri libgl1 libglib2.0-0 chromium fonts-dejavu-core gcc libc6-dev >/dev/null
fi
python -m pip install -q --upgrade pip
python -m pip install -q -e ".[replay,libero,dashboard,ray,dev]"

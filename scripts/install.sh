#!/usr/bin/env bash
# Installs everything SafeVLA-Bench and its tests need into the virtual environment .venv of
# this checkout (created if missing), on a fresh Debian or Ubuntu machine:
#   - apt: Mesa EGL (offscreen MuJoCo rendering), chromium (browser tests), python3-venv where
#     the system Python lacks venv (no C compiler: every dependency installs from a wheel);
#   - pip: the package with its replay, LIBERO, dashboard, Ray, OpenPI-protocol and dev extras.
# It never installs into the system Python (PEP 668) nor into whatever venv or conda environment
# is active: .venv is always its own, created from the python3 on the PATH. .venv may be a
# symlink to a venv elsewhere (.ci/run does that to test in a fresh venv at a temporary path).
#
#   bash scripts/install.sh             everything the tests need (the default)
#   bash scripts/install.sh dashboard   only what the dashboard and its replays of the demo need: no
#                                       chromium, LaTeX, Ray or LeRobot serving environment (minutes and
#                                       GBs less)
# SAFEVLA_EXTRAS overrides the list of extras.
set -euo pipefail
cd "$(dirname "$0")/.."

PROFILE="${1:-all}"
case "$PROFILE" in
  all) EXTRAS="replay,libero,dashboard,ray,openpi,dev" ;;
  dashboard) EXTRAS="replay,libero,dashboard" ;;
  *) echo "scripts/install.sh: unknown profile '$PROFILE'; expected 'all' (default) or 'dashboard'" >&2; exit 2 ;;
esac
EXTRAS="${SAFEVLA_EXTRAS:-$EXTRAS}"

SUDO=""
if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null; then SUDO="sudo"; fi
apt_install() {  # installs the Debian packages that are missing; a no-op where apt-get is absent
  command -v apt-get >/dev/null || return 0
  local missing=() p
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  export DEBIAN_FRONTEND=noninteractive
  if [ -z "${_APT_UPDATED:-}" ]; then $SUDO apt-get update -qq; _APT_UPDATED=1; fi
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

apt_install libegl1 libegl-mesa0 libgl1-mesa-dri libgl1 libglib2.0-0 fonts-dejavu-core
if [ "$PROFILE" = all ]; then
  # chromium: the browser tests; texlive-latex-base + -recommended (pdflatex, booktabs; ~147 MB
  # installed): the paper-table test compiles the LaTeX; poppler-utils (pdftotext, pdfimages,
  # pdftoppm): the export test reads the PDF triptych's text and images
  apt_install chromium texlive-latex-base texlive-latex-recommended poppler-utils
fi

PYTHON3="${PYTHON3:-python3}"
if ! command -v "$PYTHON3" >/dev/null; then
  apt_install python3 python3-venv python3-dev
fi
if [ ! -x .venv/bin/python ]; then
  if ! "$PYTHON3" -m venv --help >/dev/null 2>&1 || ! "$PYTHON3" -c "import ensurepip" 2>/dev/null; then
    # Debian and Ubuntu ship venv and ensurepip in a separate package
    apt_install python3-venv python3-dev
  fi
  if [ -L .venv ]; then "$PYTHON3" -m venv "$(readlink -f .venv)"; else "$PYTHON3" -m venv .venv; fi
fi
# The LeRobot serving environment, .venv-lerobot: LeRobot checkpoints run there and are served to
# the LIBERO side over OpenPI's protocol (`python -m replay.record.serve --policy lerobot:PATH`), because
# lerobot 0.4.4 pins torch<2.11 and numpy<2.3, which do not co-install with .venv's stack
# (docs/libero.md). SAFEVLA_LEROBOT=0 skips it (tests/test_lerobot.py then fails, naming this script).
# Its third-party wheels install in the background while .venv installs: the two pips unpack
# wheels side by side, each mostly on one core. Both editable installs of this checkout write its
# .egg-info, so the LeRobot side's runs after .venv's.
lerobot_env=""
if [ "$PROFILE" = all ] && [ "${SAFEVLA_LEROBOT:-1}" != 0 ]; then
  if [ ! -x .venv-lerobot/bin/python ]; then
    if [ -L .venv-lerobot ]; then "$PYTHON3" -m venv "$(readlink -f .venv-lerobot)"; else "$PYTHON3" -m venv .venv-lerobot; fi
  fi
  (
    .venv-lerobot/bin/python -m pip install -q --upgrade pip
    .venv-lerobot/bin/python -m pip install -q -r scripts/lerobot-requirements.txt
    .venv-lerobot/bin/python -m pip install -q --no-deps lerobot==0.4.4
  ) &
  lerobot_env=$!
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e ".[$EXTRAS]"
# The checkout's own modules, compiled once here as pip compiles site-packages: where
# PYTHONDONTWRITEBYTECODE is set, Python never writes them, and every dashboard start of a fresh
# clone would compile ~150 modules from source (docs/benchmarks.md, "Compiled bytecode").
.venv/bin/python -m compileall -q -j 0 scoring replay dashboard >/dev/null \
  || echo "scripts/install.sh: warning: could not compile the checkout's modules (a first start compiles them)" >&2
# The dashboard's vega bundle (vl-convert makes it in 1.3-2 s), made once per environment: a first
# detail page copies it, under any $HOME, instead of making it (dashboard/player.py).
case ",$EXTRAS," in
  *,dashboard,*) .venv/bin/python -c "import dashboard.player as p; p.vega_bundle(p.installed_vega_bundle())" \
    || echo "scripts/install.sh: warning: could not make the vega bundle (a first detail page makes it)" >&2 ;;
esac
if [ -n "$lerobot_env" ]; then
  if ! wait "$lerobot_env"; then
    echo "scripts/install.sh: installing the LeRobot environment .venv-lerobot failed (see pip's output above)" >&2
    exit 1
  fi
  .venv-lerobot/bin/python -m pip install -q --no-deps -e .
fi
echo "installed into $(cd .venv && pwd -P) ($(.venv/bin/python --version)); run commands with .venv/bin/..., or 'source .venv/bin/activate'"

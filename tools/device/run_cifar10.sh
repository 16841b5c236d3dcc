#!/bin/bash
# The second device call of a paper-scale CIFAR-10 mini-batch run (tools/device/README.md):
#   export PYTHONPATH=$PWD; bash tools/device/run_cifar10.sh SECONDS [ARMS EPOCHS]   (carry .gpu/b)
# after the first call copied .gpu/a/* to /root/cif (and, optionally, ran probe.py). Rebuilds
# CIFAR-10, runs the --paper configuration with 1 seed, the given arms and epochs (default:
# choose.py's pick from the probe's step times and SECONDS), writes Figs. 2, 3, 4, Apps. G, H
# to $OUT/records.tar, and on a timeout returns the finished sweeps and runs ($OUT/partial.pkl).
T=$1; t0=$(date +%s)
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
cp .gpu/b/* /root/cif/ && python3 tools/device/assemble.py /root/cif /root/data \
  0ac3ab5c78edb36ac68f69e287fd8f957b2d4f820b80e5fa9bd05c810fc0d95d || exit 3
used=$(( $(date +%s) - t0 )); left=$(( T - used - 45 ))
if [ -n "$3" ]; then ARMS=$2; EP=$3; echo "given: arms $ARMS, epochs $EP" >> "$OUT/log.txt"
else read -r ARMS EP < <(python3 tools/device/choose.py $(( left - 50 )) 2>>"$OUT/log.txt"); fi
tail -1 "$OUT/log.txt"
mkdir -p /root/rec /root/ck
timeout -s INT -k 20 $left python3 tools/device/views.py --paper --dataset cifar10 --seeds 1 \
  --arms "$ARMS" --epochs "$EP" --cache-dir /root/ck --checkpoint-dir /root/ck \
  --data-dir /root/data --out /root/rec >> "$OUT/log.txt" 2>&1
echo "views rc $? at $(( $(date +%s) - t0 )) s" | tee -a "$OUT/log.txt"
python3 tools/device/partial.py /root/ck "$OUT/partial.pkl" >> "$OUT/log.txt" 2>&1
tar cf "$OUT/records.tar" -C /root rec 2>/dev/null
ls -la /root/rec "$OUT"; nvidia-smi --query-gpu=name,memory.used --format=csv
grep -v $'\r' "$OUT/log.txt" | tail -40

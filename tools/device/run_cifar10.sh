#!/bin/bash
# usage (the second device call, after the first copied .gpu/a/* to /root/cif and ran probe.py):
#   export PYTHONPATH=$PWD; bash tools/device/run_cifar10.sh SECONDS    (carry .gpu/b)
# lesson of 2026-11-30: drop --checkpoint-dir mid-run saves on the GPU (see README.md)
# call 2: data part B, rebuild CIFAR-10, the paper-scale mini-batch run (1 seed), views, records back
T=$1; t0=$(date +%s)
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
cp .gpu/b/* /root/cif/ && python3 tools/device/assemble.py /root/cif /root/data 0ac3ab5c78edb36ac68f69e287fd8f957b2d4f820b80e5fa9bd05c810fc0d95d || exit 3
used=$(( $(date +%s) - t0 )); left=$(( T - used - 45 ))
read ARMS EP < <(python3 tools/device/choose.py $(( left - 50 )) 2>>$OUT/log.txt)
tail -1 $OUT/log.txt
mkdir -p /root/rec /root/ck
timeout -s INT -k 20 $left python3 tools/device/views.py --paper --dataset cifar10 --seeds 1 --arms $ARMS --epochs $EP \
  --cache-dir /root/ck --checkpoint-dir /root/ck --data-dir /root/data --out /root/rec >> $OUT/log.txt 2>&1
echo "views rc $? at $(( $(date +%s) - t0 )) s" | tee -a $OUT/log.txt
python3 tools/device/partial.py /root/ck $OUT/partial.pkl >> $OUT/log.txt 2>&1
tar cf $OUT/records.tar -C /root rec 2>/dev/null; ls -la /root/rec $OUT; nvidia-smi --query-gpu=name,memory.used --format=csv
grep -v $'\r' $OUT/log.txt | tail -40

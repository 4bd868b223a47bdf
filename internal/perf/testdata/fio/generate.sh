#!/usr/bin/env bash
# Regenerates the fio outputs the parser tests read, by running fio (3.x) for real:
# one job, two jobs with mixed reads and writes, and numjobs with group_reporting,
# one job with lat_percentiles=1, and two jobs of one name, each in JSON and in fio's
# normal text form; 4 KiB random writes paced at 3.5 MiB/s.
# Run from this directory.
set -euo pipefail
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
common=(--directory="$dir" --size=32M --ioengine=libaio --direct=1 --time_based --runtime=1)
run() { local name=$1; shift; fio "$@" --output-format=json >"$name.json"; fio "$@" >"$name.txt"; }
run randread_qd16 --name=randread "${common[@]}" --rw=randread --bs=4k --iodepth=16
run two_jobs_mixed "${common[@]}" --name=mixed --rw=randrw --rwmixread=70 --bs=4k --iodepth=8 --name=seqwrite --rw=write --bs=64k --iodepth=4
run group_reporting --name=grouped "${common[@]}" --rw=randread --bs=8k --iodepth=4 --numjobs=2 --group_reporting
run latency_lat_pct --name=latency "${common[@]}" --rw=randwrite --bs=4k --iodepth=1 --lat_percentiles=1
run same_name_jobs "${common[@]}" --name=twin --rw=randread --bs=4k --iodepth=4 --name=twin --rw=randwrite --bs=8k --iodepth=2
# 4 KiB random writes paced at 3.5 MiB/s, as a 4 MiB/s volume's ceiling paces them (JSON only).
fio --name=ceiling "${common[@]}" --rw=randwrite --bs=4k --iodepth=16 --rate=3584k --output-format=json >rate_4k_randwrite.json

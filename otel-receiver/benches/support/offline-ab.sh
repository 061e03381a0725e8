#!/usr/bin/env bash
# The reading and the diagnosis alone, with `replay --format jsonl` written to /dev/null (a day's
# replay writes 500 MB of JSON lines, whose writing offline-cores.sh counts): two builds side by
# side on the CSV trace and its binary copy, on 1 and 4 cores, best of three. Usage:
# offline-ab.sh BIN_DIR OUT_DIR UNITS BUILD... where BIN_DIR holds `gen_trace` and each BUILD
# (the first one converts the trace).
set -euo pipefail
bin=$1 out=$2 units=$3
shift 3
builds=("$@")
mkdir -p "$out"
trace=/tmp/ab-$units.csv
"$bin/gen_trace" "$units" > "$trace" 2> /dev/null
"$bin/${builds[0]}" convert "$trace" "${trace%.csv}.gstrace" 2> /dev/null
samples=$(( units * 48000 ))
for format in gstrace csv; do
  for cores in 1 4; do
    for exe in "${builds[@]}"; do
      best=999 line=
      for _ in 1 2 3; do
        /usr/bin/time -f "%e %U %S" -o /tmp/ab-time.txt taskset -c "0-$((cores - 1))" \
          "$bin/$exe" replay "${trace%.csv}.$format" --format jsonl --tdp-w 700 > /dev/null
        read -r wall user sys < /tmp/ab-time.txt
        if python3 -c "import sys; sys.exit(0 if $wall < $best else 1)"; then
          best=$wall line="wall=$wall user=$user sys=$sys"
        fi
      done
      echo "units=$units format=$format cores=$cores build=$exe $line Msamples_per_s=$(python3 -c "print(round($samples / 1e6 / $best, 2))")" | tee -a "$out/ab.txt"
    done
  done
done
rm -f "$trace" "${trace%.csv}.gstrace" /tmp/ab-time.txt

#!/usr/bin/env bash
# Soak run (not part of the default suite): MINUTES of mixed, verified load
# (tests/soak/soak_load.cc: puts with 1-2 replicas, gets checked byte for
# byte, prefix matches, removes; one load process over shared memory, one
# over TCP only) against a local cluster of one master and
# three stores with DRAM and SSD tiers, with one store killed (kill -9) and
# restarted every RESTART_S seconds, round robin. Every SAMPLE_S seconds it
# prints the memory of every process (/proc/PID/status: anonymous and
# shared resident KiB), and at the end it checks that the anonymous memory
# (heap) of each process levels off (the rules are next to the check).
#
#   bash tests/soak/soak.sh [MINUTES] [RESTART_S] [SAMPLE_S]    # 30 120 15
# Binaries come from $SHELF_BUILD_DIR (default build/test; built if missing).
# Exit status 0 when no wrong byte was served and memory levelled off.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
minutes=${1:-30}
restart_s=${2:-120}
sample_s=${3:-15}
build=${SHELF_BUILD_DIR:-$root/build/test}
if [[ ! -x "$build/bin/shelf-store" || ! -x "$build/tests/soak_load" ]]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build "$build" -j"${SHELF_JOBS:-$(nproc)}" --target shelf-master shelf-store soak_load
fi
bin=$build/bin
work=$(mktemp -d /tmp/shelf-soak-XXXXXX)
declare -A pid
cleanup() {
  for p in "${pid[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [[ "${SHELF_SOAK_KEEP:-0}" != 1 ]]; then rm -rf "$work"; fi
}
trap cleanup EXIT

wait_file() {
  for _ in $(seq 1 300); do
    [[ -s "$1" ]] && return 0
    sleep 0.05
  done
  echo "soak: $1 never appeared" >&2
  return 1
}

"$bin/shelf-master" --listen 127.0.0.1:0 --ready-file "$work/master.addr" \
  >"$work/master.log" 2>&1 &
pid[master]=$!
wait_file "$work/master.addr"
master=$(head -1 "$work/master.addr")
incarnation=(0 0 0)
start_store() {
  local i=$1
  rm -f "$work/store$i.addr"
  "$bin/shelf-store" --master "$master" --listen 127.0.0.1:0 --dram-size 128MiB \
    --ssd-dir "$work/store$i.ssd" --ssd-size 512MiB --run-dir "$work/store$i.run" \
    --ready-file "$work/store$i.addr" >>"$work/store$i.log" 2>&1 &
  pid[store$i]=$!
  wait_file "$work/store$i.addr"
  incarnation[$i]=$((incarnation[$i] + 1))
}
for i in 0 1 2; do start_store "$i"; done
sleep 1
"$build/tests/soak_load" --master "$master" --seconds $((minutes * 60)) --threads 3 \
  --interval "$sample_s" >"$work/load.log" 2>&1 &
pid[load]=$!
"$build/tests/soak_load" --master "$master" --seconds $((minutes * 60)) --threads 2 \
  --interval "$sample_s" --shm=false >"$work/load_tcp.log" 2>&1 &
pid[load_tcp]=$!

rss=$work/rss.tsv
echo -e "t_s\tprocess\tanon_kib\tshmem_kib\trss_kib" >"$rss"
sample() {
  local t=$1 name p anon shmem total
  for name in master store0 store1 store2 load load_tcp; do
    p=${pid[$name]}
    [[ -r /proc/$p/status ]] || continue
    anon=$(awk '/^RssAnon:/ {print $2}' "/proc/$p/status")
    shmem=$(awk '/^RssShmem:/ {print $2}' "/proc/$p/status")
    total=$(awk '/^VmRSS:/ {print $2}' "/proc/$p/status")
    local label=$name
    [[ $name == store* ]] && label="$name.${incarnation[${name#store}]}"
    echo -e "$t\t$label\t$anon\t$shmem\t$total" >>"$rss"
  done
}

echo "soak: $minutes min, a store restarted every ${restart_s}s, memory every ${sample_s}s"
echo "soak: cluster in $work (set SHELF_SOAK_KEEP=1 to keep it)"
start=$(date +%s)
next_restart=$((start + restart_s))
next_sample=$start
victim=0
restarts=0
while kill -0 "${pid[load]}" 2>/dev/null; do
  now=$(date +%s)
  if ((now >= next_sample)); then
    sample $((now - start))
    awk -v t=$((now - start)) -F'\t' '$1 == t {printf "%s=%dM/%dM ", $2, $3/1024, $4/1024}' \
      "$rss" | sed "s/^/soak t=$((now - start))s anon\/shmem: /"
    echo
    next_sample=$((next_sample + sample_s))
  fi
  if ((now >= next_restart)); then
    kill -9 "${pid[store$victim]}"
    wait "${pid[store$victim]}" 2>/dev/null || true
    start_store "$victim"
    restarts=$((restarts + 1))
    echo "soak t=$((now - start))s: store$victim killed and restarted (incarnation ${incarnation[$victim]})"
    victim=$(((victim + 1) % 3))
    next_restart=$((next_restart + restart_s))
  fi
  sleep 1
done
load_status=0
wait "${pid[load]}" || load_status=$?
wait "${pid[load_tcp]}" || load_status=$?
unset 'pid[load]' 'pid[load_tcp]'
echo "soak: shm load: $(tail -2 "$work/load.log" | tr '\n' ' ')"
echo "soak: tcp load: $(tail -2 "$work/load_tcp.log" | tr '\n' ' ')"

# Levelling off, judged on anonymous memory (heap), per process (each
# store incarnation separately):
#   - a process sampled for at least two minutes must not grow by more than
#     20% (and 32 MiB) from the middle of its life to its end;
#   - a later incarnation of a store must not exceed the first one's peak
#     by more than 20% (and 32 MiB): restarts do not ratchet memory up.
# Younger processes are still warming up (RocksDB memtables fill to
# their 64 MiB write buffer) and are only held to the second rule.
min_samples=$(((120 + sample_s - 1) / sample_s))
((min_samples < 6)) && min_samples=6
verdict=$(awk -F'\t' -v min="$min_samples" 'NR > 1 {
    n[$2]++; v[$2, n[$2]] = $3; if ($3 > mx[$2]) mx[$2] = $3
  } END {
    bad = 0
    for (p in n) {
      role = p; sub(/\.[0-9]+$/, "", role)
      if (p ~ /\.1$/) first_peak[role] = mx[p]
    }
    for (p in n) {
      role = p; sub(/\.[0-9]+$/, "", role)
      first = v[p, 1]; mid = v[p, int((n[p] + 1) / 2)]; last = v[p, n[p]]
      ok = 1; why = "levels off"
      if (n[p] >= min) {
        grow = last - mid
        if (!(grow < 0.2 * mid || grow < 32 * 1024)) { ok = 0; why = "STILL GROWING" }
      } else {
        why = "warming up"
      }
      if ((role in first_peak) && p !~ /\.1$/) {
        lim = first_peak[role] * 1.2
        if (lim < first_peak[role] + 32 * 1024) lim = first_peak[role] + 32 * 1024
        if (mx[p] > lim) { ok = 0; why = "ABOVE THE FIRST INCARNATION" }
        else if (why == "warming up") why = "warming up, under the first incarnation peak"
      }
      if (!ok) bad = 1
      printf "%-10s %3d samples: anon first %6.1f MiB, middle %6.1f, last %6.1f, max %6.1f: %s\n",
             p, n[p], first / 1024, mid / 1024, last / 1024, mx[p] / 1024, why
    }
    exit bad
  }' "$rss" | sort) && grew=0 || grew=1
echo "soak: memory per process (RssAnon; shared segment pages not counted):"
echo "$verdict"
echo "soak: $restarts store restarts; samples in $rss"
if ((load_status != 0)); then
  echo "soak: FAILED: the load saw wrong bytes or could not run (status $load_status)" >&2
  exit 1
fi
if ((grew != 0)); then
  echo "soak: FAILED: memory kept growing" >&2
  exit 1
fi
echo "soak: passed"

#!/usr/bin/env bash
# A "build" for bench/sets/delta.sh: fwc (FWC, default target/release/fwc) with its set-file
# cache (<state dir>/sets) emptied before every command, so every compile reads the set file
# whole: the cache's hit against its miss, same binary, same run, alternating.
#
#   sudo ../shared/quiet -- env DRIFT=0 REPEATS=5 bash bench/sets/delta.sh 993000 target/release/fwc bench/sets/cold.sh
st="" prev=""
for a in "$@"; do
  [ "$prev" = --state-dir ] && st=$a
  prev=$a
done
[ -n "$st" ] && rm -rf "$st/sets"
exec "${FWC:-target/release/fwc}" "$@"

#!/bin/sh
# Import every configuration of the corpus (filled by fill.sh from MANIFEST.tsv) with a given
# fwc binary and print the tally as a markdown table: each one imported without --partial
# (whole?), then with --partial --verify (rules left out, proof, flows that differ).
#   sh bench/import/corpus.sh path/to/fwc [CORPUS]        (as root: the import uses namespaces)
# Everything it writes is under one temporary directory, removed on exit; fwc import creates
# and removes its own scratch namespaces. Each import is given at most $FWC_IMPORT_TIMEOUT
# seconds (default 120).
set -eu
fwc=$(realpath "$1")
corpus=${2:-/work/corpus}
here=$(cd "$(dirname "$0")" && pwd)
limit=${FWC_IMPORT_TIMEOUT:-120}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT INT TERM
tab=$(printf '\t')

grep -v '^#' "$here/MANIFEST.tsv" | while IFS="$tab" read -r name kind repo paths commit; do
    [ -n "$name" ] || continue
    in="$corpus/$name/in"
    if [ ! -d "$in" ]; then echo "$name${tab}$kind${tab}missing" >> "$work/rows"; continue; fi
    case "$kind" in
    ufw) arg="$in/ufw" ;;
    firewalld) arg="$in/firewalld" ;;
    *) if [ "$(ls "$in" | wc -l)" -eq 1 ]; then arg="$in/$(ls "$in")"; else arg="$in"; fi ;;
    esac
    d="$work/$name" && mkdir -p "$d"
    set +e
    timeout -k 10 "$limit" "$fwc" import --from "$kind" "$arg" --out "$d/whole" --color never > "$d/whole.log" 2>&1
    whole=$?
    timeout -k 10 "$limit" "$fwc" import --from "$kind" "$arg" --out "$d/partial" --partial --verify --json --color never > "$d/partial.json" 2> "$d/partial.log"
    partial=$?
    set -e
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$kind" "$whole" "$partial" "$d/partial.json" "$d/whole.log" >> "$work/rows"
done

python3 - "$work/rows" <<'PY'
import json, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])]
print("| configuration | kind | whole and faithful | left out with --partial / rules | proof | differ | first refusal without --partial |")
print("|---|---|---|---|---|---|---|")
tw = tl = tr = proofs = n = 0
for r in rows:
    n += 1
    if len(r) < 6:
        print(f"| {r[0]} | {r[1]} | not filled (run fill.sh) | | | | |")
        continue
    name, kind, whole, partial, js, wlog = r
    try:
        j = json.load(open(js))
    except Exception:
        j = None
    first = ""
    if whole != "0":
        for line in open(wlog, errors="replace"):
            if line.startswith(("error", "  ×", "×")) or "error:" in line:
                first = line.strip().replace("|", "\\|")[:140]
                break
        if whole == "124":
            first = "timed out"
    if j is None:
        err = ""
        for line in open(js.replace(".json", ".log"), errors="replace"):
            if "error" in line:
                err = line.strip().replace("|", "\\|")[:140]
                break
        print(f"| {name} | {kind} | no | did not import (exit {partial}) | no | – | {first or err} |")
        continue
    refused = len(j.get("refused", []))
    total = j.get("imported", 0) + len(j.get("merged", [])) + refused
    proof = j.get("proof_missing") is None and j.get("flows", 0) > 0
    differ = len(j.get("differences", []))
    faithful = whole == "0" and proof and differ == 0
    tw += faithful; tl += refused; tr += total; proofs += proof
    print(f"| {name} | {kind} | {'yes' if faithful else 'no'} | {refused} / {total} | {'yes' if proof else 'no'} | {differ if proof else '–'} | {first} |")
pct = 100.0 * tl / tr if tr else 0.0
print()
print(f"Whole and faithful: {tw} of {n}. Left out with --partial: {tl} of {tr} rules ({pct:.1f} %). Proofs: {proofs} of {n}.")
PY

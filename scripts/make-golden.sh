#!/usr/bin/env bash
# Regenerate the golden cache traces in tests/golden/ from the real llama.cpp (kvoracle).
#
# For every line of tests/golden/manifest.tsv (name, model, kvoracle flags, kvsim flags):
#   NAME.csv --csv2script.py--> op script --kvoracle--> raw JSONL
#   raw JSONL --check.py--> oracle self-consistency (log == direct read, apply == planned slot, ...)
#   raw JSONL, only the config/op/apply/state events --> tests/golden/NAME.oracle.jsonl
# The dropped events (find_slot, prepare, llama_decode) are not compared with kvsim.
#
# usage: scripts/make-golden.sh [NAME...]      (default: every manifest entry)
# env:   KVORACLE_DIR  the kvoracle tool folder      (default: ../shared/tools/kvoracle)
#        WORK          where kvoracle is built        (default: /tmp/oracle-work; built if missing)
#        KEEP_RAW      a folder to keep the raw oracle output in (default: a temp dir, removed)
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
GOLDEN="$ROOT/tests/golden"
KVORACLE_DIR="${KVORACLE_DIR:-$ROOT/../shared/tools/kvoracle}"
WORK="${WORK:-/tmp/oracle-work}"
ORACLE="$WORK/kvoracle"

# check.py asserts that a decode returning 1 leaves the cells unchanged. These scenarios break
# that on purpose: a failed prepare() on an iSWA cache keeps the SWA purge of its earlier ubatches.
CHECK_EXPECTED_TO_FAIL="w_swa_fail_purge"

[ -d "$KVORACLE_DIR" ] || { echo "make-golden: no kvoracle at $KVORACLE_DIR" >&2; exit 1; }
if [ ! -x "$ORACLE" ]; then
    echo "make-golden: building kvoracle in $WORK" >&2
    WORK="$WORK" "$KVORACLE_DIR/build.sh" >&2
fi

RAW="${KEEP_RAW:-}"
if [ -z "$RAW" ]; then
    RAW="$(mktemp -d /tmp/make-golden.XXXXXX)"
    trap 'rm -rf "$RAW"' EXIT
fi
mkdir -p "$RAW"

want() {  # is scenario $1 selected on the command line?
    [ "${#SELECTED[@]}" -eq 0 ] && return 0
    local s
    for s in "${SELECTED[@]}"; do [ "$s" = "$1" ] && return 0; done
    return 1
}
SELECTED=("$@")

n_done=0 n_check_failed=0
while IFS=$'\t' read -r name model oflags kflags; do
    case "$name" in ''|'#'*) continue ;; esac
    want "$name" || continue
    python3 "$KVORACLE_DIR/csv2script.py" "$GOLDEN/$name.csv" > "$RAW/$name.txt"
    # shellcheck disable=SC2086  # oflags is a list of flags
    LLAMA_KV_CACHE_DEBUG=3 "$ORACLE" -m "$WORK/models/$model.gguf" $oflags --no-fs-state \
        < "$RAW/$name.txt" > "$RAW/$name.jsonl" 2> "$RAW/$name.stderr" \
        || { echo "make-golden: kvoracle failed on $name (see $RAW/$name.stderr)" >&2; exit 1; }
    if grep -q '^{"ev":"error"' "$RAW/$name.jsonl"; then
        echo "make-golden: kvoracle rejected a line of $name:" >&2
        grep '^{"ev":"error"' "$RAW/$name.jsonl" >&2
        exit 1
    fi
    grep -E '^\{"ev":"(config|op|apply|state)"' "$RAW/$name.jsonl" > "$GOLDEN/$name.oracle.jsonl"
    check="$(python3 "$KVORACLE_DIR/check.py" "$RAW/$name.jsonl" | tail -n 1 || true)"
    case " $CHECK_EXPECTED_TO_FAIL " in
        *" $name "*) note="(failures expected: SWA purge on a failed prepare)" ;;
        *) note=""
           case "$check" in *" 0 failed") ;; *) n_check_failed=$((n_check_failed + 1)) ;; esac ;;
    esac
    printf '%-24s %4d applies %3d states  check.py: %s %s\n' "$name" \
        "$(grep -c '"ev":"apply"' "$GOLDEN/$name.oracle.jsonl")" \
        "$(grep -c '"ev":"state"' "$GOLDEN/$name.oracle.jsonl")" "$check" "$note"
    n_done=$((n_done + 1))
done < "$GOLDEN/manifest.tsv"

echo "make-golden: $n_done scenarios written to $GOLDEN"
if [ "$n_check_failed" -ne 0 ]; then
    echo "make-golden: check.py failed on $n_check_failed scenarios" >&2
    exit 1
fi

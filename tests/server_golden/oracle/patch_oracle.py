#!/usr/bin/env python3
"""Adapts copies of the server oracle's run.sh and record.sh for speculative decoding scenarios (record.sh here calls
it): run.sh resolves -md like -m, accepts SHIM as a preload list (draft_ops.so in front of shim.so) and points
draft_ops.so at OUT/draft.ops.csv; record.sh passes a scenario's "client:" line to client.py (ORACLE_CLIENT), checks draft.ops.csv for determinism like ops.csv, keeps it as
expected/NAME.draft.ops.csv, and with --check compares it with that file; the rc file's step column is left out of
record.sh's comparisons (see below). Each edit must apply: a changed oracle script stops the recording here."""
import sys


def patch(path, edits):
    s = open(path).read()
    for old, new in edits:
        if old not in s:
            sys.exit("patch_oracle.py: %s no longer holds %r" % (path, old))
        s = s.replace(old, new)
    open(path, "w").write(s)


run, rec = sys.argv[1], sys.argv[2]
patch(run, [
    ('[ -x "$SERVER" ] && [ -f "$SHIM" ]', '[ -x "$SERVER" ] && [ -f "${SHIM##*:}" ]'),
    ('if [ "$1" = "-m" ] || [ "$1" = "--model" ]; then',
     'if [ "$1" = "-m" ] || [ "$1" = "--model" ] || [ "$1" = "-md" ]; then\n    flag="$1"'),
    ('ARGS+=(-m "$m"); shift 2', 'ARGS+=("$flag" "$m"); shift 2'),
    ('SHIM_OPS="$OUT/ops.csv"', 'SHIM_DRAFT_OPS="$OUT/draft.ops.csv" SHIM_OPS="$OUT/ops.csv"'),
    ('rm -f "$OUT"/ops.csv', 'rm -f "$OUT"/draft.ops.csv "$OUT"/ops.csv'),
])
patch(rec, [
    # the rc file's step column (main-loop iterations) is not compared: a failed n_cmpl request's other completions are
    # cancelled by tasks the HTTP thread posts as it sends the error, and whether the main loop takes them in an
    # iteration of their own is a race (cmpl_too_long: steps one apart between recordings, every op identical)
    ('det_rc() { cut -d, -f1-7 "$1"; }', 'det_rc() { cut -d, -f1-5,7 "$1"; }'),
    # a scenario's "client:" line (e.g. no-ban) reaches client.py as ORACLE_CLIENT
    ('  tr="$SDIR/$(get trace "$n")"; arr="$(get arrivals "$n")"; srv="$(get server "$n")"\n',
     '  tr="$SDIR/$(get trace "$n")"; arr="$(get arrivals "$n")"; srv="$(get server "$n")"\n'
     '  export ORACLE_CLIENT="$(get client "$n")"\n'),
    ('  cmp -s "$R/a/results.jsonl" "$R/b/results.jsonl" || same=no\n',
     '  cmp -s "$R/a/results.jsonl" "$R/b/results.jsonl" || same=no\n'
     '  if [ -f "$R/a/draft.ops.csv" ]; then cmp -s "$R/a/draft.ops.csv" "$R/b/draft.ops.csv" || same=no; fi\n'),
    ('    cmp -s "$R/a/ops.csv" "$SDIR/expected/$n.ops.csv" || same="no(expected)"\n',
     '    cmp -s "$R/a/ops.csv" "$SDIR/expected/$n.ops.csv" || same="no(expected)"\n'
     '    if [ -f "$R/a/draft.ops.csv" ] || [ -f "$SDIR/expected/$n.draft.ops.csv" ]; then\n'
     '      cmp -s "$R/a/draft.ops.csv" "$SDIR/expected/$n.draft.ops.csv" || same="no(expected)"; fi\n'),
    ('    cp "$R/a/results.jsonl" "$SDIR/expected/$n.results.jsonl"\n',
     '    cp "$R/a/results.jsonl" "$SDIR/expected/$n.results.jsonl"\n'
     '    if [ -f "$R/a/draft.ops.csv" ]; then cp "$R/a/draft.ops.csv" "$SDIR/expected/$n.draft.ops.csv"; fi\n'),
])

#!/usr/bin/env bash
# Run each libFuzzer harness for a bounded time: run.sh BUILD_DIR SECONDS TARGET...
# The working corpus of each harness lives in BUILD_DIR/fuzz/corpus/TARGET (kept between runs)
# and is seeded from tests/fuzz/seeds/, tests/golden/*.csv, tests/data/trace/ and the head of
# traces/azure. Crashes, timeouts and OOMs land in BUILD_DIR/fuzz/artifacts/; one line per
# harness goes to BUILD_DIR/fuzz/summary.tsv. Exit status 1 when any harness found something.
# Each harness runs SECONDS of fuzzing, then one full-ASan pass over its corpus (a few seconds).
set -uo pipefail
cd "$(dirname "$0")/../.."
build=$1 seconds=$2
shift 2
root=$build/fuzz
mkdir -p "$root/artifacts"
summary=$root/summary.tsv
printf 'harness\tseconds\texecutions\tcorpus_files\tcorpus_bytes\tcoverage\tresult\n' > "$summary"

seed() {  # seed TARGET DIR: copy the seeds for TARGET into its working corpus
    local target=$1 dir=$2
    case $target in
        fuzz_op_trace|fuzz_op_replay)
            cp -n tests/golden/*.csv tests/data/trace/op_crlf_bom.csv tests/fuzz/seeds/op/* "$dir"/ ;;
        fuzz_azure)
            cp -n tests/data/trace/azure_crlf_bom.csv tests/fuzz/seeds/azure/* "$dir"/
            head -n 48 traces/azure/AzureLLMInferenceTrace_conv_2023.csv > "$dir/conv_2023_head.csv" ;;
        fuzz_burstgpt)
            cp -n tests/data/trace/burstgpt_crlf_bom.csv tests/fuzz/seeds/burstgpt/* "$dir"/ ;;
        fuzz_mooncake)
            cp -n tests/data/trace/mooncake_crlf_bom.jsonl tests/fuzz/seeds/mooncake/* "$dir"/ ;;
    esac
}

# report_finding LOG: what a CI log needs to reproduce a finding on another machine, since build-fuzz
# does not outlive the CI run: the cause (a failed assert or an uncaught exception prints no "ERROR" line),
# the stack, and the input itself in base64 (at most -max_len bytes).
report_finding() {
    local log=$1 unit
    grep -E 'ERROR|SUMMARY|finding|Test unit written|Assertion|terminate called|what\(\)|runtime error|^ *#[0-9]+ ' "$log" | head -n 40
    unit=$(sed -n 's/.*Test unit written to \([^ ]*\).*/\1/p' "$log" | tail -n 1)
    if [ -n "$unit" ] && [ -f "$unit" ]; then
        echo "kvsim fuzz: the input ($unit), base64:"
        base64 -w 0 "$unit"; echo
    fi
}

status=0
for target in "$@"; do
    corpus=$root/corpus/$target
    mkdir -p "$corpus"
    seed "$target" "$corpus"
    log=$root/$target.log
    echo "kvsim fuzz: $target for ${seconds}s (log $log)"
    # Explore with heap poisoning off: every reader allocates fccp's 48 MiB line buffer, and
    # poisoning its shadow memory costs ~100x in executions. UBSan, stack/global ASan checks
    # and crashes still count; the corpus is then replayed once with full ASan.
    ASAN_OPTIONS=poison_heap=0 "$build/tests/fuzz/$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
        -malloc_limit_mb=1024 -max_len=8192 -print_final_stats=1 -artifact_prefix="$root/artifacts/$target-" "$corpus" > "$log" 2>&1
    rc=$?
    if [ $rc -eq 0 ]; then
        "$build/tests/fuzz/$target" -runs=0 -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=1024 -max_len=8192 \
            -artifact_prefix="$root/artifacts/$target-" "$corpus" > "$log.replay" 2>&1
        rc=$?
        [ $rc -ne 0 ] && cat "$log.replay" >> "$log"
    fi
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1 | cut -d' ' -f2)
    files=$(find "$corpus" -type f | wc -l)
    bytes=$(du -sb "$corpus" | cut -f1)
    result=ok
    if [ $rc -ne 0 ]; then
        result="FINDING (exit $rc)"
        status=1
        report_finding "$log"
    fi
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$target" "$seconds" "${execs:-?}" "$files" "$bytes" "${cov:-?}" "$result" >> "$summary"
done
column -t -s $'\t' "$summary"
exit $status

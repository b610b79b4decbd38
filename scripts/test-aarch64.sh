#!/usr/bin/env bash
# The CPU kernel tests (test_fa, test_quant, test_rope) cross-built for aarch64 and run under qemu-user: the NEON
# loops (kernels/cpu/*_neon.cpp, both the SMULL and the SDOT Q.K) against the naive reference with the same
# tolerances as on x86-64. Speed under emulation means nothing: ARM speed is unmeasured (docs/kernels.md).
#
#   scripts/test-aarch64.sh [build-dir]      (default build-aarch64; incremental)
#
# Needs Debian's g++-aarch64-linux-gnu and qemu-user (cmake/aarch64-linux-gnu.cmake); without them it exits 77
# (skipped). ctest runs it as `kernels_aarch64` with --ctest: opt-in there (KVSIM_TEST_AARCH64=1), because a cold
# cross build of the library takes ~30 minutes on a busy 2-vCPU host and the emulated tests ~5; skipped (77) otherwise.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
if [[ "${1:-}" == --ctest ]]; then
    shift
    if [[ "${KVSIM_TEST_AARCH64:-0}" != 1 ]]; then
        echo "SKIPPED: the aarch64 kernel tests are opt-in under ctest (KVSIM_TEST_AARCH64=1; or run scripts/test-aarch64.sh)"
        exit 77
    fi
fi
build=${1:-$root/build-aarch64}
sysroot=/usr/aarch64-linux-gnu
for tool in aarch64-linux-gnu-g++ qemu-aarch64 make; do
    if ! command -v "$tool" >/dev/null; then
        echo "SKIPPED: $tool not found (Debian: apt-get install g++-aarch64-linux-gnu qemu-user)"
        exit 77
    fi
done
if [[ ! -d $sysroot/lib ]]; then
    echo "SKIPPED: no aarch64 sysroot at $sysroot (Debian: apt-get install g++-aarch64-linux-gnu)"
    exit 77
fi

jobs=${KVSIM_JOBS:-2}
tests=(test_fa test_quant test_rope)
# configured every time (a few seconds): a build folder from before a change of the targets picks them up
cmake -S "$root" -B "$build" -G "Unix Makefiles" -DCMAKE_TOOLCHAIN_FILE="$root/cmake/aarch64-linux-gnu.cmake" \
    -DCMAKE_BUILD_TYPE=Release -DKVSIM_CUDA=OFF -DKVSIM_NATIVE=OFF >/dev/null
# The test executables depend on the CLIs (CMakeLists.txt: tests that run them); these tests do not, so the
# libraries are built as targets and the tests with the Makefile generator's <target>/fast (no dependencies).
make -C "$build" --no-print-directory -j"$jobs" kvsim_core kvsim_kernels kvsim_doctest_main
for t in "${tests[@]}"; do make -C "$build" --no-print-directory -j"$jobs" "$t/fast"; done

cd "$root"  # the tests' working directory under ctest
rc=0
for t in "${tests[@]}"; do
    echo "== $t (qemu-aarch64, CPU max: NEON + SDOT)"
    qemu-aarch64 -L "$sysroot" "$build/$t" --no-version || rc=1
done
# The run-time check: qemu's default CPU has the dot-product extension (neon_dotprod), an ARMv8.0 Cortex-A53 has not
# (neon, and SDOT refused).
for cpu in max:neon_dotprod cortex-a53:neon; do
    echo "== test_fa, the level chosen (qemu-aarch64 -cpu ${cpu%%:*}: expects ${cpu#*:})"
    QEMU_CPU=${cpu%%:*} KVSIM_EXPECT_ISA=${cpu#*:} qemu-aarch64 -L "$sysroot" "$build/test_fa" --no-version \
        -tc="the backend runs the best loops this CPU has*" || rc=1
done
exit $rc

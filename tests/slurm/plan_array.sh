#!/usr/bin/env bash
# docs/slurm.md's kvsim plan recipe on a real single-node Slurm (Debian's slurm-wlm): a private munged and
# slurmctld/slurmd pair in a temporary folder, the job array of `kvsim plan --shard`, the dependent merge,
# and the merged files compared byte for byte with the unsharded run. Skipped (77) without slurm-wlm and
# munge, or when not root (slurmd must start jobs as their user). Usage: plan_array.sh KVSIM REPO
set -uo pipefail
KVSIM="$(realpath "${1:?usage: plan_array.sh KVSIM REPO}")"
REPO="$(realpath "${2:?usage: plan_array.sh KVSIM REPO}")"
for tool in slurmctld slurmd sbatch squeue munged; do
  command -v "$tool" >/dev/null || { echo "SKIPPED: $tool not found (Debian: apt-get install slurm-wlm)"; exit 77; }
done
[ "$(id -u)" = 0 ] || { echo "SKIPPED: a private slurmd needs root"; exit 77; }

W="$(mktemp -d /tmp/kvsim-slurm.XXXXXX)"
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done; sleep 1; for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done; rm -rf "$W"; }
trap cleanup EXIT
fail() { echo "FAILED: $*"; for f in "$W"/log/*; do echo "--- $f"; tail -20 "$f"; done; exit 1; }
mkdir -p "$W"/{munge,spool/ctld,spool/d,log,run}
chmod 700 "$W/munge"

# munge: a private key and socket
dd if=/dev/urandom of="$W/munge/munge.key" bs=1024 count=1 status=none
chmod 400 "$W/munge/munge.key"
munged --key-file="$W/munge/munge.key" --socket="$W/munge/munge.sock" --pid-file="$W/munge/munged.pid" \
  --log-file="$W/log/munged.log" --seed-file="$W/munge/seed" --force 2>>"$W/log/munged.log" || fail "munged did not start"
PIDS+=("$(cat "$W/munge/munged.pid")")

HOST="$(hostname -s)"
CPUS="$(nproc)"
PORT_CTLD=$((6800 + RANDOM % 500)); PORT_D=$((PORT_CTLD + 1))
cat > "$W/slurm.conf" <<CONF
ClusterName=kvsimtest
SlurmctldHost=$HOST
SlurmctldPort=$PORT_CTLD
SlurmdPort=$PORT_D
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$W/munge/munge.sock
StateSaveLocation=$W/spool/ctld
SlurmdSpoolDir=$W/spool/d
SlurmctldPidFile=$W/run/slurmctld.pid
SlurmdPidFile=$W/run/slurmd.pid
SlurmctldLogFile=$W/log/slurmctld.log
SlurmdLogFile=$W/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
JobCompType=jobcomp/none
MpiDefault=none
ReturnToService=2
NodeName=$HOST CPUs=$CPUS State=UNKNOWN
PartitionName=kvsim Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF="$W/slurm.conf"
slurmctld -D -i > "$W/log/slurmctld.out" 2>&1 & PIDS+=("$!")
slurmd -D > "$W/log/slurmd.out" 2>&1 & PIDS+=("$!")
for _ in $(seq 60); do sinfo -h -o %T 2>/dev/null | grep -qE 'idle|mixed' && break; sleep 1; done
sinfo -h -o %T 2>/dev/null | grep -qE 'idle|mixed' || fail "the node did not come up"

# the recipe of docs/slurm.md, small: the bundled 12-request sample, 12 points, a 3-task array
cd "$W" || exit 1
ARGS=("$REPO/traces/requests/azure_sample.csv" --model llama-3.1-8b --weights q4_K_M --memory 24GiB
      -np 1,2,4 -c 4096,8192 -ctk f16 -kvu on,off --slo-ttft 2 --no-progress)
"$KVSIM" plan "${ARGS[@]}" --out whole > whole.txt 2>&1 || fail "the unsharded plan"
cat > array.sh <<JOB
#!/bin/bash
#SBATCH --array=0-2
#SBATCH --cpus-per-task=1
#SBATCH --output=$W/log/plan-%A_%a.log
OUT=$W/results/shard-\$SLURM_ARRAY_TASK_ID
"$KVSIM" plan $(printf '%q ' "${ARGS[@]}") --jobs "\$SLURM_CPUS_PER_TASK" \\
    --shard "\$SLURM_ARRAY_TASK_ID/\${SLURM_ARRAY_TASK_COUNT}" --out "\$OUT"
JOB
JOBID="$(sbatch --parsable array.sh)" || fail "sbatch of the array"
MERGE="$(sbatch --parsable --dependency=afterok:"$JOBID" --output="$W/log/merge.log" \
  --wrap "'$KVSIM' plan merge $W/results/shard-*/plan.json --out $W/merged")" || fail "sbatch of the merge"
for _ in $(seq 180); do [ -z "$(squeue -h -j "$JOBID,$MERGE" 2>/dev/null)" ] && break; sleep 1; done
[ -z "$(squeue -h -j "$JOBID,$MERGE" 2>/dev/null)" ] || fail "the jobs did not finish in 3 minutes"
for f in plan.csv plan.json plan.html; do
  cmp -s "whole/$f" "merged/$f" || fail "merged/$f differs from the unsharded run's"
done
echo "ok: a 3-task Slurm array of kvsim plan --shard, merged by a dependent job, equals the unsharded run (plan.csv, plan.json, plan.html)"

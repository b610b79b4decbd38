#!/usr/bin/env bash
# The layer check (docs/architecture.md, "Layers"): every quoted #include in apps/, lib/ and kernels/
# must follow one of the allowed folder -> folder edges below; any other edge (one running up a
# layer, or sideways between layers that do not depend on each other) fails, listing each offending
# file:line. <CLI/...> (CLI11) is allowed in apps/ only.
#
# Usage: scripts/check-layers.sh [ROOT]   (ROOT: the source tree, default: this script's repository)
# Exit: 0 clean, 1 offending edges found, 2 bad usage.
#
# A folder is lib/<name> (core, util, kv, model, trace, drive, time, sched, report, replay, timing, bench),
# kernels/cuda (cuda), the rest of kernels/ (kernels) or apps/ (apps). An include is resolved as the
# compiler would: next to the including file, then lib/, kernels/, kernels/cuda/, apps/.
# started as `sh scripts/check-layers.sh` (dash: no pipefail, no arrays): run again under bash
if [ -z "${BASH_VERSION:-}" ]; then exec bash "$0" "$@"; fi
set -euo pipefail

ROOT=${1:-$(cd "$(dirname "$0")/.." && pwd)}
[ -d "$ROOT/lib" ] || { echo "check-layers: $ROOT has no lib/ folder" >&2; exit 2; }

# folder: the folders it may include from (besides itself). Ordered bottom to top; each folder
# names only folders above it in this list, so the table itself has no cycle (checked below).
LAYERS='
core:
util: core
model: core util
kv: core util model
kernels: core
cuda: kernels core
trace: core util
drive: trace kv model core util
time: drive trace kv model core util
sched: time drive trace kv model core util
report: time sched drive trace kv model core util
replay: report time sched drive trace kv model core util kernels
timing: replay report time sched drive trace kv model core util kernels
plan: replay report time sched drive trace kv model core util
bench: drive trace kernels kv model core util
apps: timing plan bench replay report time sched drive trace kv model core util kernels cuda
'

declare -A allowed rank
n=0
while IFS=: read -r from tos; do
  [ -n "$from" ] || continue
  for to in $tos; do
    if [ -z "${rank[$to]:-}" ]; then
      echo "check-layers: table: $from may include $to, which is not listed before it (a cycle or a typo)" >&2
      exit 2
    fi
    allowed["$from>$to"]=1
  done
  rank[$from]=$n
  n=$((n + 1))
done <<< "$LAYERS"

# The helpers set a variable instead of printing: a command substitution forks, and the loop below runs them for
# every #include of the tree (about 2000): with forks the check took 20-25 s, longer on a loaded machine.
folder_of() {  # path relative to ROOT -> FOLDER (empty: not checked)
  case "$1" in
    lib/*/*) FOLDER=${1#lib/}; FOLDER=${FOLDER%%/*} ;;
    kernels/cuda/*) FOLDER=cuda ;;
    kernels/*) FOLDER=kernels ;;
    apps/*) FOLDER=apps ;;
    *) FOLDER="" ;;
  esac
}

normalize() {  # a/./b/../c -> NORM=a/c (what realpath -m --relative-to gives inside the tree, without a fork)
  local -a out=()
  local part IFS=/
  for part in $1; do
    case "$part" in
      '' | .) ;;
      ..) [ ${#out[@]} -gt 0 ] && unset 'out[-1]' ;;
      *) out+=("$part") ;;
    esac
  done
  NORM="${out[*]}"
}

resolve() {  # including file, include name -> TARGET, a path relative to ROOT (empty: not in the tree)
  local dir=${1%/*} inc=$2 c
  TARGET=""
  for c in "$dir/$inc" "lib/$inc" "kernels/$inc" "kernels/cuda/$inc" "apps/$inc"; do
    if [ -f "$c" ]; then
      normalize "$c"
      TARGET=$NORM
      return
    fi
  done
}

bad=0
cd "$ROOT"
while IFS= read -r hit; do
  file=${hit%%:*}; rest=${hit#*:}; line=${rest%%:*}; text=${rest#*:}
  folder_of "$file"
  from=$FOLDER
  [ -n "$from" ] || continue
  if [[ $text =~ \#[[:space:]]*include[[:space:]]*\<CLI/ ]]; then
    if [ "$from" != apps ]; then
      echo "$file:$line: CLI11 outside apps/: $text"
      bad=$((bad + 1))
    fi
    continue
  fi
  [[ $text =~ \#[[:space:]]*include[[:space:]]*\"([^\"]+)\" ]] || continue
  inc=${BASH_REMATCH[1]}
  resolve "$file" "$inc"
  target=$TARGET
  [ -n "$target" ] || continue   # not in the tree: a system or toolkit header
  folder_of "$target"
  to=$FOLDER
  if [ -z "$to" ]; then
    echo "$file:$line: includes $target, outside apps/, lib/ and kernels/"
    bad=$((bad + 1))
  elif [ "$to" != "$from" ] && [ -z "${allowed["$from>$to"]:-}" ]; then
    if [ -z "${rank[$from]:-}" ]; then
      echo "$file:$line: folder '$from' is not in the layer table (scripts/check-layers.sh)"
    else
      echo "$file:$line: $from -> $to is not an allowed edge: $inc"
    fi
    bad=$((bad + 1))
  fi
done < <(grep -rnE '^[[:space:]]*#[[:space:]]*include' apps lib kernels \
           --include='*.h' --include='*.hpp' --include='*.cpp' --include='*.cc' --include='*.cu' --include='*.cuh' | sort -t: -k1,1 -k2,2n)

if [ "$bad" -gt 0 ]; then
  echo "check-layers: $bad include(s) break the layer table (scripts/check-layers.sh)"
  exit 1
fi
echo "check-layers: ok"

#!/usr/bin/env bash
# Types a conversation into amk-run -cnv in a tmux terminal, as a person
# would: waits for each "> " prompt, types a line and Enter, and at the end
# Ctrl-D; then writes the screen (with "[exit N]" after amk-run ends) to OUT.
#
#   tmux-chat.sh OUT ERR LINES_FILE COMMAND [ARGS...]
#
# amk-run's stderr goes to ERR. Each wait gives up after 30 s.
set -euo pipefail
out=$1 err=$2 lines=$3
shift 3
sock="amk-chat-$$"
cmd=$(printf '%q ' "$@")
trap 'tmux -L "$sock" kill-server 2>/dev/null || true' EXIT
tmux -L "$sock" -f /dev/null new-session -d -x 160 -y 60 \
  "$cmd 2>$(printf '%q' "$err"); echo \"[exit \$?]\"; sleep 60"

screen() { tmux -L "$sock" capture-pane -p -S - > "$out"; }
# Waits until the screen has `count` lines matching `pattern`.
wait_for() {
  local pattern=$1 count=$2
  for _ in $(seq 300); do
    screen
    if [ "$(grep -c -- "$pattern" "$out" || true)" -ge "$count" ]; then
      return 0
    fi
    sleep 0.1
  done
  echo "tmux-chat: timed out waiting for $count lines matching '$pattern'; the screen:" >&2
  cat "$out" >&2
  exit 1
}

n=1
wait_for '^>' "$n"
while IFS= read -r line; do
  tmux -L "$sock" send-keys -t 0 -l -- "$line"
  tmux -L "$sock" send-keys -t 0 Enter
  n=$((n + 1))
  wait_for '^>' "$n"
done < "$lines"
tmux -L "$sock" send-keys -t 0 C-d
wait_for '^\[exit [0-9]*\]' 1
screen

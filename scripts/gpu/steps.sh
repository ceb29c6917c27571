# Sourced by the GPU evidence scripts (alignment.sh, tokenizer.sh): named steps with logs and
# a summary. Before sourcing set STEPS (the steps to run), LOG_DIR (where NAME.log goes),
# STEP_TAG (the prefix of progress lines) and TAIL_LINES (log lines echoed after a step).
start=$(date +%s)
summary=()
failed=0
want() { case " $STEPS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
step() {  # step NAME COMMAND...: runs it, logs to $LOG_DIR/NAME.log, keeps the status
  local name=$1; shift
  echo "[$STEP_TAG $(($(date +%s) - start)) s] $name"
  "$@" >"$LOG_DIR/$name.log" 2>&1
  local rc=$?
  tail -n "$TAIL_LINES" "$LOG_DIR/$name.log"
  summary+=("$name: exit $rc")
  [ $rc -eq 0 ] || failed=1
}
print_summary() {  # the status of every step; the caller exits with $failed
  echo
  echo "$STEP_TAG summary ($(($(date +%s) - start)) s):"
  printf '  %s\n' "${summary[@]}"
}

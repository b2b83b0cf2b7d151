#!/usr/bin/env bash
# Runs a sweep's queue on one TPU worker, one run after another:
#   bash ~/trm_queue/queue_runner.sh ~/trm_queue/SWEEP.queue >>~/trm_queue/SWEEP.log
# `launch/tpu.py sweep --queue` writes the queue file, copies it and this script to
# ~/trm_queue/ on every worker and starts it there in the background. Every host runs the
# same entries in the same order, so each run is one SPMD program over the whole slice.
#
# A queue line is RUN_NAME WORKDIR TRAINER_ARGS..., as shell-quoted words. For each line:
#   - a run whose run.json says "done" is skipped, so a restarted queue resumes where it
#     left off (an interrupted run continues from its newest checkpoint);
#   - otherwise the trainer runs from ~/trm_spmd, its output going to ~/trm_logs/RUN_NAME.log;
#   - a failed run is reported and the queue goes on;
#   - a run that exits 0 but recorded "preempted" ended on SIGTERM (`launch/tpu.py stop` or a
#     preemption): the queue stops, since the next run would only be killed too.
# Progress goes to stdout, one time-stamped line per event. Run statuses are read by
# launch/run_status.sh, the same script launch/tpu.py's remote commands use.
#
# The script is started as a file, not `bash -c`, so that its command line names the queue
# (not the trainer) and `stop` can end it before the trainer.

stamp() { date -u +%Y-%m-%dT%H:%M:%SZ; }

status_of() { bash launch/run_status.sh "$1"; }

run_queue() {
  local queue line name workdir rc count=0
  local -a failed=()
  queue=$(readlink -f "$1")
  cd ~/trm_spmd || { echo "no ~/trm_spmd on $(hostname): run launch/tpu.py setup first"; return 1; }
  mkdir -p ~/trm_logs
  PY=$(bash launch/setup.sh --tpu) || { echo "launch/setup.sh failed on $(hostname)"; return 1; }
  while IFS= read -r line <&3; do
    [ -n "$line" ] || continue
    eval "set -- $line"
    name=$1 workdir=$2
    shift 2
    count=$((count + 1))
    if [ "$(status_of "$workdir")" = done ]; then
      echo "$(stamp) $name: already done, skipped"
      continue
    fi
    echo "$(stamp) $name: started, log ~/trm_logs/$name.log"
    # The loop reads the queue on fd 3 and the trainer's stdin is /dev/null: nothing the
    # trainer does can consume queue lines.
    PJRT_DEVICE=TPU "$PY" -m trm_spmd.main "$@" --workdir="$workdir" \
      >>~/trm_logs/"$name".log 2>&1 </dev/null
    rc=$?
    if [ "$rc" = 0 ] && [ "$(status_of "$workdir")" = preempted ]; then
      echo "$(stamp) $name: stopped before the end; queue stopped, restart it to resume"
      return 0
    elif [ "$rc" = 0 ]; then
      echo "$(stamp) $name: finished"
    else
      echo "$(stamp) $name: FAILED (exit $rc)"
      failed+=("$name")
    fi
  done 3<"$queue"
  echo "$(stamp) queue finished: $count runs, ${#failed[@]} failed${failed[*]:+: ${failed[*]}}"
}

# bash reads a script as it runs it. Everything above is definitions; the line below is read
# whole before the queue starts, so a new copy of this file written over the running one
# (the next `sweep --queue`) cannot change what this runner does.
run_queue "$@"; exit

#!/usr/bin/env bash
# Prints the status a trm_spmd run recorded in WORKDIR/run.json ("running", "done",
# "preempted", "failed", "nan"), or nothing when there is no readable run.json yet:
#   bash launch/run_status.sh WORKDIR          (a local path or gs://BUCKET/...)
# The trainer writes run.json; this script is the one place the launcher's shell side reads
# it. The queue runner (skip finished runs, stop after a stopped one) and the commands that
# launch/tpu.py runs on the workers both call it.
if [ $# -ne 1 ]; then
  echo "usage: bash launch/run_status.sh WORKDIR" >&2
  exit 2
fi
run_json="${1%/}/run.json"
# gcloud runs its own bundled Python, which a PYTHONPATH meant for another one (a trm_spmd
# environment's extras) breaks: it is not passed on.
case $run_json in
  gs://*) env -u PYTHONPATH gcloud storage cat "$run_json" 2>/dev/null ;;
  *) cat "$run_json" 2>/dev/null ;;
esac | sed -n 's/.*"status": *"\([^"]*\)".*/\1/p' | head -n 1

#!/usr/bin/env bash
# gpuslack's Slurm epilog: stores the job's GPU slack summary where `sacct` shows it, as
# Princeton's jobstats does, so that users and admins read it after the job without Grafana:
#
#   sacct -j 4711 -n -o AdminComment%-4000 | sed 's/^ *GS1://' | base64 -d | gunzip
#
# Run it as EpilogSlurmctld (slurm.conf: EpilogSlurmctld=/etc/slurm/gpuslack-epilog.sh) so that
# it runs once per job, on the controller, where `scontrol update` is allowed. The summary is
# `gpuslack fleet job slurm:$SLURM_JOB_ID --json --no-timeline` read from the Prometheus that
# scrapes the agents, gzipped and base64-encoded behind a `GS1:` tag (a version: a reader can
# tell it from jobstats' `JS1:`).
#
# An epilog that fails drains the node in some set-ups: this one always exits 0, and says on
# stderr (the slurmctld log) why a job got no summary.
#
# Environment: SLURM_JOB_ID (Slurm sets it); GPUSLACK_PROMETHEUS_URL (default
# http://localhost:9090); GPUSLACK (the binary, default `gpuslack` on PATH); SLURM_JOB_START_TIME
# (set by Slurm 23.02+; without it the last 7 days are searched).
set -u

job=${SLURM_JOB_ID:-}
if [ -z "$job" ]; then
  echo "gpuslack-epilog: SLURM_JOB_ID is not set: not run by Slurm?" >&2
  exit 0
fi
gpuslack=${GPUSLACK:-gpuslack}
url=${GPUSLACK_PROMETHEUS_URL:-http://localhost:9090}
since=7d
if [ -n "${SLURM_JOB_START_TIME:-}" ]; then
  # The job's own span and a minute for the last scrape.
  since="$(( $(date +%s) - SLURM_JOB_START_TIME + 60 ))s"
fi

if ! summary=$("$gpuslack" fleet job "slurm:$job" --prometheus "$url" --since "$since" --json --no-timeline); then
  echo "gpuslack-epilog: job $job: no summary (gpuslack fleet exited $?; 1: no series of the job, 75: Prometheus unreachable)" >&2
  exit 0
fi
encoded=$(printf '%s' "$summary" | gzip -9 -c | base64 -w0)
if ! scontrol update "job=$job" "AdminComment=GS1:$encoded"; then
  echo "gpuslack-epilog: job $job: scontrol update failed" >&2
fi
exit 0

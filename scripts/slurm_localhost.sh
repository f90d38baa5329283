#!/usr/bin/env bash
# A one-node SLURM cluster on this machine, then a small DAG through `--executor slurm`.
#
#   sudo scripts/slurm_localhost.sh [WORKDIR]      (root: installs packages, starts daemons)
#
# 1. apt-get installs Debian's slurm-wlm (slurmctld + slurmd + client tools) and munge;
# 2. writes /etc/slurm/slurm.conf: one node "localhost" with this machine's CPUs and memory,
#    select/cons_tres, proctrack/linuxproc, task/none (no cgroups needed), no accounting
#    (accounting_storage/none, no slurmdbd), MinJobAge=3600 so `squeue` still knows finished jobs;
# 3. starts munged, slurmctld, slurmd (as daemons, no systemd needed) and waits for the node to be idle;
# 4. runs tests/data/slurm_tiny.yaml (nq x bart: corpus, task data, generator, train, evaluate,
#    report) with `snakemake --executor slurm` in WORKDIR (default: a fresh temp dir).
#
# Without slurmdbd there are no accounts: `sacctmgr`/`sshare`, which the plugin uses to validate
# `slurm_account`, fail, and `sacct` reports that accounting is disabled. So the run passes
# `--slurm-no-account` (no -A on sbatch, no validation) and `--slurm-status-command squeue`
# (job states from squeue, which is why MinJobAge is raised). On a real cluster drop both and
# set slurm_account/slurm_partition in workflow/profiles/slurm/config.v9+.yaml.
# Idempotent: re-running reuses the packages, config and running daemons.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WORKDIR="${1:-$(mktemp -d /tmp/rag-slurm.XXXXXX)}"
CONFIG="${RAG_SLURM_CONFIG:-$REPO/tests/data/slurm_tiny.yaml}"
JOBS="${RAG_SLURM_JOBS:-2}"

say() { printf '[slurm_localhost] %s\n' "$*"; }

if [[ $(id -u) -ne 0 ]]; then
    echo "error: run as root (installs packages and starts slurm daemons)" >&2
    exit 2
fi

# ---------------------------------------------------------------------------- 1. packages
if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v munged >/dev/null; then
    say "installing slurm-wlm and munge (apt-get)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null
fi
say "$(slurmctld -V)"

# ---------------------------------------------------------------------------- 2. config
CPUS=$(nproc)
MEM_MB=$(awk '/MemTotal/ {print int($2 / 1024)}' /proc/meminfo)
REAL_MB=$(( MEM_MB * 9 / 10 ))
mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm /run/munge /var/lib/munge /var/log/munge
cat > /etc/slurm/slurm.conf <<EOF
# written by ragrepro scripts/slurm_localhost.sh: a one-node test cluster
ClusterName=ragrepro
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
ReturnToService=2
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MinJobAge=3600
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
SlurmctldTimeout=30
SlurmdTimeout=30
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=$REAL_MB State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF
say "wrote /etc/slurm/slurm.conf (localhost: CPUs=$CPUS RealMemory=$REAL_MB)"

# ---------------------------------------------------------------------------- 3. daemons
if [[ ! -s /etc/munge/munge.key ]]; then
    say "creating /etc/munge/munge.key"
    mkdir -p /etc/munge
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
fi
chown -R munge:munge /etc/munge /run/munge /var/lib/munge /var/log/munge 2>/dev/null || true
chmod 0700 /etc/munge && chmod 0400 /etc/munge/munge.key
if ! pgrep -x munged >/dev/null; then
    say "starting munged"
    if id munge >/dev/null 2>&1; then
        runuser -u munge -- /usr/sbin/munged
    else
        /usr/sbin/munged --force
    fi
fi
munge -n | unmunge >/dev/null && say "munge works"

if ! pgrep -x slurmctld >/dev/null; then
    say "starting slurmctld"
    slurmctld -i
fi
if ! pgrep -x slurmd >/dev/null; then
    say "starting slurmd"
    slurmd -N localhost
fi

say "waiting for node localhost to be idle"
for _ in $(seq 1 60); do
    state=$(sinfo -h -n localhost -o '%T' 2>/dev/null || true)
    [[ "$state" == "idle" || "$state" == "mixed" ]] && break
    if [[ "$state" == down* || "$state" == drain* ]]; then
        scontrol update NodeName=localhost State=RESUME 2>/dev/null || true
    fi
    sleep 1
done
sinfo
[[ "$(sinfo -h -n localhost -o '%T')" =~ ^(idle|mixed)$ ]] || {
    echo "error: node localhost is not idle; see /var/log/slurm/slurmd.log and slurmctld.log" >&2
    exit 1
}
srun -N1 -n1 hostname >/dev/null && say "srun works"

# ---------------------------------------------------------------------------- 4. the DAG
mkdir -p "$WORKDIR"
say "running $CONFIG through --executor slurm in $WORKDIR"
cd "$WORKDIR"
snakemake -s "$REPO/Snakefile" --configfile "$CONFIG" --directory "$WORKDIR" \
    --executor slurm --jobs "$JOBS" --cores "$CPUS" \
    --slurm-no-account --slurm-status-command squeue \
    --slurm-init-seconds-before-status-checks 5 --slurm-keep-successful-logs \
    --default-resources slurm_partition=debug mem_mb=1000 runtime=30 \
    --latency-wait 10 --printshellcmds
say "slurm jobs of this run:"
squeue -h -t all -o '%.8i %.30j %.10T %.10M' || true
NAME="$(python -c 'import sys, yaml; print(yaml.safe_load(open(sys.argv[1])).get("name", "miniworld"))' "$CONFIG")"
test -s "$WORKDIR/reports/$NAME/report.html"   # every experiment's outputs: results/<name>/, reports/<name>/
say "OK: $WORKDIR/reports/$NAME/report.html"

#!/usr/bin/env bash
# Trivial jobs (`true`) per second: Slurm vs gantry, on this machine, in the same run.
#
# Slurm (Debian's slurm-wlm + munge) runs as slurmctld + slurmd on loopback with one node that
# has this machine's CPUs and memory, once per configuration, each from a fresh start:
#   default    Slurm's defaults: only what is needed to run at all (see README.md).
#   htc        the tuning of Slurm's "High Throughput Computing Administration Guide"
#              (https://slurm.schedmd.com/high_throughput.html); every setting is commented below.
#   htc-shared htc, plus OverSubscribe on the partition so that up to 100 jobs share each CPU,
#              the way gantry packs its 10-millicore `true` containers (200 on 2 CPUs).
# Then (unless --slurm-only) gantry's own benchmark:
#   cargo bench -p gantry-tests --bench daemon_throughput
# with the same number of jobs, submitters and latency samples, and a markdown table at the end.
#
# Usage (as root):  bench/slurm/compare.sh [--slurm-only]
# Environment:
#   JOBS=1000             jobs (Slurm) / apps (gantry) in the throughput run
#   CLIENTS=16            concurrent submitters
#   LATENCY_SAMPLES=200   sequential submissions for the submit -> started latency
#   SLURM_CONFIGS="default htc htc-shared"   which Slurm configurations to run, in order
#   SLURM_TIMEOUT_S=5400  give up on one Slurm throughput run after this long (the partial
#                         rate is then reported, marked as such)
#   SLURM_PORT=16817      first TCP port; slurmctld uses SLURM_PORT..+3, slurmd SLURM_PORT+10
#   KEEP_LOGS=dir         copy every configuration's Slurm logs and slurm.conf there
#   HTC_SCHED_PARAMS=...  SchedulerParameters of htc/htc-shared (default: see write_conf below)
#   HTC_PROCTRACK=proctrack/linuxproc   ProctrackType of htc/htc-shared
set -euo pipefail

JOBS=${JOBS:-1000}
CLIENTS=${CLIENTS:-16}
LATENCY_SAMPLES=${LATENCY_SAMPLES:-200}
SLURM_CONFIGS=${SLURM_CONFIGS:-"default htc htc-shared"}
SLURM_TIMEOUT_S=${SLURM_TIMEOUT_S:-5400}
SLURM_PORT=${SLURM_PORT:-16817}
KEEP_LOGS=${KEEP_LOGS:-}
SLURM_ONLY=0

for arg in "$@"; do
    case "$arg" in
        --slurm-only) SLURM_ONLY=1 ;;
        -h | --help)
            sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
            exit 0
            ;;
        *)
            echo "unknown argument: $arg (try --help)" >&2
            exit 2
            ;;
    esac
done

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() {
    log "error: $*"
    exit 1
}

[ "$(id -u)" = 0 ] || die "run as root (slurmd and gantry's agent both need it)"
for v in JOBS CLIENTS LATENCY_SAMPLES SLURM_TIMEOUT_S SLURM_PORT; do
    [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer, not '${!v}'"
done
for c in $SLURM_CONFIGS; do
    case "$c" in default | htc | htc-shared) ;; *) die "unknown Slurm configuration '$c'" ;; esac
done

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PY=/usr/bin/python3
[ -x "$PY" ] || PY=$(command -v python3) || die "python3 is needed"

# --- Slurm and munge packages ---------------------------------------------------------------
if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v munged >/dev/null; then
    log "installing slurm-wlm and munge with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq slurm-wlm munge >/dev/null
fi
SLURM_VERSION=$(slurmctld -V | awk '{print $2}')
MUNGE_VERSION=$(munged -V 2>&1 | awk '{print $1; exit}')

# --- scratch space and cleanup ---------------------------------------------------------------
# Every process this script starts (munged, slurmctld, slurmd, the measurement and its sbatch,
# cargo) carries GANTRY_SLURM_BENCH=<its scratch directory> in its environment; slurmd passes it
# on to slurmstepd and the jobs. Cleanup ends exactly the processes with this run's value.
PREFIX=/tmp/gantry-slurm-bench.
NODE=$(hostname -s)

# "pid dir" for every process that carries a GANTRY_SLURM_BENCH mark.
marked() {
    { grep -aozH "^GANTRY_SLURM_BENCH=${PREFIX//./[.]}[A-Za-z0-9]*" /proc/[0-9]*/environ 2>/dev/null || true; } |
        tr '\0' '\n' | sed -n 's|^/proc/\([0-9]*\)/environ:GANTRY_SLURM_BENCH=|\1 |p'
}
marked_pids() { marked | awk -v d="$1" '$2 == d {print $1}'; }

# A run killed with SIGKILL (no trap) leaves its daemons and directory behind; they would hold
# the ports. A mark is stale when the run that owns it is no longer running.
owner_alive() { # $1 = scratch directory
    local o
    o=$(cat "$1/owner.pid" 2>/dev/null) || return 1
    [ -n "$o" ] && grep -q compare.sh "/proc/$o/cmdline" 2>/dev/null
}
reap_stale() {
    local pid dir stale=() dirs=()
    while read -r pid dir; do
        owner_alive "$dir" || {
            stale+=("$pid")
            dirs+=("$dir")
        }
    done < <(marked)
    for dir in "$PREFIX"*; do
        [ -d "$dir" ] && ! owner_alive "$dir" && dirs+=("$dir")
    done
    if [ ${#stale[@]} -gt 0 ]; then
        log "ending ${#stale[@]} processes left behind by an earlier, killed run: ${stale[*]}"
        kill -KILL "${stale[@]}" 2>/dev/null || true
        sleep 0.5
    fi
    if [ ${#dirs[@]} -gt 0 ]; then
        printf '%s\n' "${dirs[@]}" | sort -u | while read -r dir; do rm -rf "$dir"; done
        # and the (empty) cgroup directories its slurmd left, see stop_daemons
        for dir in /sys/fs/cgroup/*/slurm_"$NODE" /sys/fs/cgroup/slurm_"$NODE"; do
            if [ -d "$dir" ]; then find "$dir" -depth -type d -exec rmdir {} \; 2>/dev/null || true; fi
        done
    fi
}
reap_stale

WORK=$(mktemp -d "${PREFIX}XXXXXX")
chmod 755 "$WORK" # munged wants the path to its socket searchable by everyone
echo $$ >"$WORK/owner.pid"
MARK="GANTRY_SLURM_BENCH=$WORK"
PREEXISTING_CGROUPS=$(ls -d /sys/fs/cgroup/*/slurm_"$NODE" /sys/fs/cgroup/slurm_"$NODE" 2>/dev/null || true)

# Stops whatever this script started: slurmctld, slurmd, their slurmstepd and jobs, munged, the
# measurement. TERM first, then KILL for what is left after 10 s.
stop_daemons() {
    local pids i
    pids=$(marked_pids "$WORK")
    [ -n "$pids" ] || return 0
    # shellcheck disable=SC2086
    kill -TERM $pids 2>/dev/null || true
    for i in $(seq 100); do
        pids=$(marked_pids "$WORK")
        [ -n "$pids" ] || break
        sleep 0.1
    done
    if [ -n "$pids" ]; then
        log "killing what did not stop on TERM: $(echo $pids)"
        # shellcheck disable=SC2086
        kill -KILL $pids 2>/dev/null || true
        sleep 0.5
    fi
    # proctrack/cgroup leaves empty cgroup directories slurm_<node>; remove them unless they were
    # there before this script started (another Slurm on this host).
    if [ -z "$PREEXISTING_CGROUPS" ]; then
        for d in /sys/fs/cgroup/*/slurm_"$NODE" /sys/fs/cgroup/slurm_"$NODE"; do
            if [ -d "$d" ]; then find "$d" -depth -type d -exec rmdir {} \; 2>/dev/null || true; fi
        done
    fi
}

cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    stop_daemons
    rm -rf "$WORK"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Runs a command marked, in the background, and waits for it: unlike a foreground command,
# `wait` lets the INT/TERM traps run at once (and cleanup then ends the command).
marked_run() {
    env "$MARK" "$@" &
    wait $!
}

drop_caches() {
    sync
    if ! echo 3 >/proc/sys/vm/drop_caches 2>/dev/null; then
        log "warning: could not drop the page cache"
    fi
}

port_free() { ! ss -Htln "sport = :$1" 2>/dev/null | grep -q .; }

# --- slurmd's reaper ------------------------------------------------------------------------------
# slurmd double-forks each slurmstepd, so finished steps are reaped by PID 1; where PID 1 is not
# a real init (containers, VMs with a minimal init) they linger as zombies. slurmd runs under
# this wrapper, a child subreaper: orphaned slurmstepd become its children and it reaps them.
cat >"$WORK/reaper.py" <<'PYEOF'
import ctypes, os, signal, sys
ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
child = os.fork()
if child == 0:
    os.execvp(sys.argv[1], sys.argv[1:])
for sig in (signal.SIGTERM, signal.SIGINT):
    signal.signal(sig, lambda s, f: os.kill(child, s))
code = 1
while True:
    try:
        pid, status = os.waitpid(-1, 0)
    except ChildProcessError:
        break
    except InterruptedError:
        continue
    if pid == child:
        code = os.waitstatus_to_exitcode(status)
sys.exit(code if code >= 0 else 128 - code)
PYEOF

# --- the measurement, in Python (timing and polling with sub-millisecond resolution) -----------
cat >"$WORK/measure.py" <<'PYEOF'
import json, os, subprocess, sys, threading, time

mode, out_dir = sys.argv[1], sys.argv[2]
env = dict(os.environ)

def sbatch(name):
    r = subprocess.run(["sbatch", "--parsable", "-J", "true", "-o", os.path.join(out_dir, name + ".%j"),
                        "--wrap", "true"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    if r.returncode != 0:
        raise RuntimeError("sbatch failed: " + r.stderr.strip())
    return r.stdout.strip().split(";")[0]

ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL",
         "DEADLINE", "PREEMPTED", "SPECIAL_EXIT"}

def queued(job=None):
    # Jobs slurmctld still has pending, running or completing (not ended, not purged).
    cmd = ["squeue", "-h", "-o", "%T"] + (["-j", job] if job else [])
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    if r.returncode != 0:  # a job id slurmctld no longer knows (MinJobAge passed): done
        return 0
    return sum(1 for s in r.stdout.split() if s not in ENDED)

def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round((len(xs) - 1) * p))]

if mode == "latency":
    samples, timeout = int(sys.argv[3]), float(sys.argv[4])
    start, ret = [], []
    for i in range(samples):
        t0 = time.monotonic()
        job = sbatch("lat")
        t1 = time.monotonic()
        path = os.path.join(out_dir, "lat." + job)
        # slurmstepd creates the job's stdout file just before it executes the batch script.
        while not os.path.exists(path):
            if time.monotonic() - t0 > timeout:
                raise RuntimeError(f"job {job} not started after {timeout} s")
            time.sleep(0.0002)
        t2 = time.monotonic()
        start.append(t2 - t0)
        ret.append(t1 - t0)
        # Next submission only once this job has left slurmctld's queue: each sample sees an idle node.
        while queued(job):
            if time.monotonic() - t0 > timeout:
                raise RuntimeError(f"job {job} not finished after {timeout} s")
            time.sleep(0.01)
    ms = lambda s: round(s * 1e3, 2)
    print(json.dumps({"samples": samples, "p50_ms": ms(pct(start, .5)), "p99_ms": ms(pct(start, .99)),
                      "max_ms": ms(max(start)), "sbatch_p50_ms": ms(pct(ret, .5)), "sbatch_p99_ms": ms(pct(ret, .99))}))

elif mode == "throughput":
    total, clients, timeout = int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
    errors, ids, lock = [], [], threading.Lock()
    def submitter(n):
        try:
            for _ in range(n):
                j = sbatch("tp")
                with lock:
                    ids.append(j)
        except Exception as e:
            errors.append(str(e))
    t0 = time.monotonic()
    threads = [threading.Thread(target=submitter, args=(total // clients + (k < total % clients),))
               for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    submitted = time.monotonic() - t0
    if errors:
        raise RuntimeError(f"{len(errors)} submitters failed, first: {errors[0]}")
    # Cheap wait first (no RPC): every job's stdout file exists once slurmstepd started it.
    # Then ask slurmctld every 20 ms until none of the jobs is pending, running or completing.
    def started():
        return sum(1 for e in os.scandir(out_dir) if e.name.startswith("tp."))
    done_at, truncated = None, False
    while started() < total and time.monotonic() - t0 < timeout:
        time.sleep(0.05)
    while time.monotonic() - t0 < timeout:
        if queued() == 0:
            done_at = time.monotonic() - t0
            break
        time.sleep(0.02)
    n_started = started()
    if done_at is None:
        truncated = True
        done_at = time.monotonic() - t0
        remaining = queued()
        completed = total - remaining
    else:
        completed = total
        if n_started != total:
            raise RuntimeError(f"squeue is empty but only {n_started} of {total} jobs ever started")
    # Jobs still known to slurmctld (MinJobAge not passed) must all have completed successfully.
    r = subprocess.run(["squeue", "-h", "-t", "all", "-o", "%T"], stdout=subprocess.PIPE, text=True, env=env)
    bad = [s for s in r.stdout.split() if s not in ("COMPLETED", "PENDING", "RUNNING", "COMPLETING")]
    if bad:
        raise RuntimeError(f"{len(bad)} jobs ended badly: {sorted(set(bad))}")
    print(json.dumps({"jobs": total, "clients": clients, "submitted_s": round(submitted, 3),
                      "submit_rate": round(total / submitted, 1), "completed_s": round(done_at, 3),
                      "completed": completed, "rate": round(completed / done_at, 2), "truncated": truncated}))
PYEOF

# --- Slurm configuration ----------------------------------------------------------------------
NCPU=$(nproc)
MEM_MB=$(awk '/^MemTotal:/ {print int($2 / 1024)}' /proc/meminfo)
# Sockets/cores/threads as slurmd sees them, so that it does not complain that CPUs=N differs
# from the hardware (it would otherwise assume N sockets of one core).
TOPO=$(slurmd -C 2>/dev/null | head -1 | tr ' ' '\n' | grep -E '^(Boards|SocketsPerBoard|CoresPerSocket|ThreadsPerCore)=' | tr '\n' ' ' || true)
if [ "$(slurmd -C 2>/dev/null | head -1 | tr ' ' '\n' | sed -n 's/^CPUs=//p')" != "$NCPU" ]; then TOPO=""; fi

write_conf() { # $1 = configuration, $2 = directory
    local c=$1 d=$2
    local ctld_port=$SLURM_PORT
    [ "$c" = default ] || ctld_port="$SLURM_PORT-$((SLURM_PORT + 3))"
    cat >"$d/slurm.conf" <<EOF
# --- required to run at all, the same in every configuration ---
ClusterName=gantrybench
SlurmctldHost=$NODE(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$((SLURM_PORT + 10))
# the private munged of this run (default: /run/munge/munge.socket.2)
AuthType=auth/munge
AuthInfo=socket=$d/munge.sock
StateSaveLocation=$d/state
SlurmdSpoolDir=$d/spool
SlurmctldPidFile=$d/slurmctld.pid
SlurmdPidFile=$d/slurmd.pid
SlurmctldLogFile=$d/log/slurmctld.log
SlurmdLogFile=$d/log/slurmd.log
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$NCPU ${TOPO}RealMemory=$MEM_MB State=UNKNOWN
EOF
    case "$c" in
        default)
            echo "PartitionName=bench Nodes=$NODE Default=YES MaxTime=INFINITE State=UP" >>"$d/slurm.conf"
            ;;
        htc | htc-shared)
            local share=""
            [ "$c" = htc-shared ] && share=" OverSubscribe=FORCE:100"
            cat >>"$d/slurm.conf" <<EOF
# --- High Throughput Computing Administration Guide, https://slurm.schedmd.com/high_throughput.html ---
# (SlurmctldPort above is a range of 4 ports: "configure the slurmctld daemon to accept incoming
#  messages on more than one port ... between two and ten ports")
# "If most jobs are short lived then use of the sched/builtin plugin is recommended" (FIFO, no backfill)
SchedulerType=sched/builtin
# SchedulerParameters: the guide's "defer" (do not try to schedule each job at submit time) and
# its example set "used for running hundreds of jobs per second on a sustained basis"
# (partition_job_depth=500, sched_max_job_start=200; its bf_* entries only apply to
# sched/backfill), with two values sized for one 2-CPU node instead of a large cluster, as the
# guide says to ("every environment is different"): batch_sched_delay=1 instead of 20 and
# sched_min_interval left at its default instead of 2 s. Each scheduling pass can start only as
# many jobs as the node has free CPUs, so the guide's values measured here: 0.1 jobs/s and 20 s
# from submission to start (README.md).
SchedulerParameters=$HTC_SCHED_PARAMS
# "priority/basic is considerably faster than other options" (FIFO; also the default)
PriorityType=priority/basic
# "MinJobAge ... should be reduced to a few seconds if possible" (default 300)
MinJobAge=5
# "MaxJobCount controls how many jobs may be in the slurmctld daemon records" (default 10000)
MaxJobCount=100000
# "MessageTimeout ... might need to be increased somewhat" (default 10)
MessageTimeout=30
# "More detailed logging will decrease system throughput. Set to error or info"
SlurmctldDebug=error
SlurmdDebug=error
# "Disabling the collection of job accounting information will improve job throughput",
# "Disabling recording of job completion information will improve job throughput",
# "Disabling storing accounting records by not setting this plugin" (all three are the defaults)
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
# "Other: Configure logging, accounting and other overhead to a minimum": process tracking by
# parent pid instead of a cgroup per job (the default proctrack/cgroup; slurm.conf(5):
# linuxproc can lose processes that daemonize, irrelevant for \`true\`)
ProctrackType=$HTC_PROCTRACK
TaskPlugin=task/none
# Not from the guide, but without it nothing is "high throughput" on one node: the default
# select/linear gives every job the whole node; consumable CPUs run one job per CPU.
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
PartitionName=bench Nodes=$NODE Default=YES MaxTime=INFINITE State=UP$share
EOF
            ;;
    esac
    # Slurm 22.05's slurmstepd fails every job with "cgroup namespace 'freezer' not mounted" when
    # there is no cgroup.conf at all (the default ProctrackType is proctrack/cgroup); an empty
    # file, i.e. all of cgroup.conf's defaults, works.
    : >"$d/cgroup.conf"
}
HTC_SCHED_PARAMS=${HTC_SCHED_PARAMS:-defer,batch_sched_delay=1,partition_job_depth=500,sched_max_job_start=200}
HTC_PROCTRACK=${HTC_PROCTRACK:-proctrack/linuxproc}

# Starts munged, slurmctld and slurmd for configuration $1 in directory $2 and waits for the node.
start_slurm() {
    local c=$1 d=$2 threads=2 i state
    [ "$c" = default ] || threads=10 # guide: "We suggest starting the Munge daemon with ten threads"
    for p in $SLURM_PORT $((SLURM_PORT + 1)) $((SLURM_PORT + 2)) $((SLURM_PORT + 3)) $((SLURM_PORT + 10)); do
        port_free "$p" || die "TCP port $p is in use (set SLURM_PORT to another base)"
    done
    mkdir -p "$d/munge" "$d/state" "$d/spool" "$d/log" "$d/out"
    mungekey --create --keyfile="$d/munge/munge.key" >/dev/null
    chmod 600 "$d/munge/munge.key"
    env "$MARK" munged --foreground --force --num-threads="$threads" --socket="$d/munge.sock" \
        --key-file="$d/munge/munge.key" --pid-file="$d/munge/munged.pid" --seed-file="$d/munge/seed" \
        --log-file="$d/log/munged.log" </dev/null >>"$d/log/munged.stdout" 2>&1 &
    for i in $(seq 100); do
        [ -S "$d/munge.sock" ] && break
        sleep 0.1
    done
    munge -S "$d/munge.sock" -n | unmunge -S "$d/munge.sock" >/dev/null || die "munged does not work (see $d/log)"
    export SLURM_CONF="$d/slurm.conf"
    (
        # guide: "The ulimit values in effect for the slurmctld daemon should be set quite high"
        [ "$c" = default ] || ulimit -n "$(ulimit -Hn)"
        exec env "$MARK" slurmctld -D -i -f "$d/slurm.conf"
    ) </dev/null >>"$d/log/slurmctld.stdout" 2>&1 &
    env "$MARK" "$PY" "$WORK/reaper.py" slurmd -D -N "$NODE" -f "$d/slurm.conf" </dev/null >>"$d/log/slurmd.stdout" 2>&1 &
    for i in $(seq 600); do
        state=$(sinfo -h -n "$NODE" -o %T 2>/dev/null || true)
        [ "$state" = idle ] && return 0
        sleep 0.1
    done
    tail -n 20 "$d"/log/*.log >&2 || true
    die "node $NODE not idle after 60 s (state: '${state:-none}'), Slurm logs above"
}

declare -A LAT THR
FAILED=0

run_slurm() { # $1 = configuration
    local c=$1 d="$WORK/$1" lat thr
    mkdir -p "$d"
    write_conf "$c" "$d"
    log "Slurm $SLURM_VERSION, configuration '$c': starting munged, slurmctld, slurmd"
    start_slurm "$c" "$d"
    drop_caches
    log "  latency: $LATENCY_SAMPLES sequential sbatch, each until its job started"
    if marked_run "$PY" "$WORK/measure.py" latency "$d/out" "$LATENCY_SAMPLES" 600 >"$d/lat.json" 2>"$d/log/measure.err"; then
        lat=$(cat "$d/lat.json")
        LAT[$c]=$lat
        log "  $lat"
    else
        log "  latency run failed: $(tail -n 1 "$d/log/measure.err")"
        FAILED=1
    fi
    log "  throughput: $JOBS x 'sbatch --wrap true' from $CLIENTS concurrent submitters, until all completed"
    if marked_run "$PY" "$WORK/measure.py" throughput "$d/out" "$JOBS" "$CLIENTS" "$SLURM_TIMEOUT_S" >"$d/thr.json" 2>"$d/log/measure.err"; then
        thr=$(cat "$d/thr.json")
        THR[$c]=$thr
        log "  $thr"
    else
        log "  throughput run failed: $(tail -n 1 "$d/log/measure.err")"
        FAILED=1
    fi
    if [ -n "$KEEP_LOGS" ]; then
        mkdir -p "$KEEP_LOGS/$c"
        cp -r "$d/log" "$d/slurm.conf" "$KEEP_LOGS/$c/"
    fi
    stop_daemons
    rm -rf "$d"
    unset SLURM_CONF
}

log "sysctls the HTC guide mentions (left as they are): somaxconn=$(cat /proc/sys/net/core/somaxconn)" \
    "tcp_max_syn_backlog=$(cat /proc/sys/net/ipv4/tcp_max_syn_backlog) tcp_syncookies=$(cat /proc/sys/net/ipv4/tcp_syncookies)" \
    "file-max=$(cat /proc/sys/fs/file-max) ip_local_port_range='$(tr '\t' ' ' </proc/sys/net/ipv4/ip_local_port_range)'"
for c in $SLURM_CONFIGS; do
    run_slurm "$c"
done

# --- gantry --------------------------------------------------------------------------------------
G_LAT="" G_THR=""
if [ "$SLURM_ONLY" = 0 ]; then
    command -v cargo >/dev/null || [ -x "$HOME/.cargo/bin/cargo" ] || die "cargo not found"
    command -v cargo >/dev/null || PATH="$HOME/.cargo/bin:$PATH"
    log "gantry: cargo bench -p gantry-tests --bench daemon_throughput" \
        "(THROUGHPUT_APPS=$JOBS THROUGHPUT_CLIENTS=$CLIENTS LATENCY_SAMPLES=$LATENCY_SAMPLES)"
    cd "$REPO"
    # Build first (the bench and the release agent it launches), so that the page cache is
    # dropped between the build and the measurement.
    marked_run cargo bench -p gantry-tests --bench daemon_throughput --no-run >&2
    marked_run cargo build --quiet --release -p gantry-agent --bin gantry-agent >&2
    drop_caches
    if THROUGHPUT_APPS=$JOBS THROUGHPUT_CLIENTS=$CLIENTS LATENCY_SAMPLES=$LATENCY_SAMPLES \
        marked_run cargo bench -p gantry-tests --bench daemon_throughput >"$WORK/gantry.out" 2>"$WORK/gantry.err"; then
        G_LAT=$(grep -E '^submit -> running' "$WORK/gantry.out" | tail -1 || true)
        G_THR=$(grep -E 'concurrent submitters: submitted in' "$WORK/gantry.out" | tail -1 || true)
        log "  $G_LAT"
        log "  $G_THR"
    else
        tail -n 30 "$WORK/gantry.err" >&2
    fi
    [ -n "$G_THR" ] || {
        log "gantry's benchmark failed or printed no throughput line"
        FAILED=1
    }
fi

# --- report --------------------------------------------------------------------------------------
export SLURM_VERSION MUNGE_VERSION NCPU MEM_MB JOBS CLIENTS LATENCY_SAMPLES G_LAT G_THR SLURM_CONFIGS
for c in $SLURM_CONFIGS; do
    export "LAT_${c//-/_}=${LAT[$c]:-}" "THR_${c//-/_}=${THR[$c]:-}"
done
"$PY" - <<'PYEOF'
import json, os, re
e = os.environ
def j(name):
    v = e.get(name, "")
    return json.loads(v) if v else None
rows = []
g = None
if e["G_THR"]:
    m = re.search(r"(\d+) `true` apps, (\d+) concurrent submitters: submitted in ([\d.]+) s \((\d+)/s\), all completed in ([\d.]+) s", e["G_THR"])
    if m:
        n, cl, sub, done = int(m[1]), int(m[2]), float(m[3]), float(m[5])
        g = {"jobs": n, "clients": cl, "submit_rate": n / sub, "rate": n / done}
        lm = re.search(r"p50 ([\d.]+) ms, p99 ([\d.]+) ms", e["G_LAT"] or "")
        g["lat"] = f"{lm[1]} / {lm[2]}" if lm else "n/a"
        rows.append(("gantry (daemon_throughput bench)", g, "—"))
names = {"default": "Slurm, default configuration", "htc": "Slurm, high-throughput tuning",
         "htc-shared": "Slurm, high-throughput tuning + OverSubscribe=FORCE:100"}
for c in e["SLURM_CONFIGS"].split():
    t, l = j("THR_" + c.replace("-", "_")), j("LAT_" + c.replace("-", "_"))
    if not t:
        rows.append((names[c], None, "failed"))
        continue
    t["lat"] = f"{l['p50_ms']} / {l['p99_ms']}" if l else "n/a"
    if t["truncated"]:
        t["note"] = f" (stopped after {t['completed_s']:.0f} s: {t['completed']} of {t['jobs']} done)"
    ratio = f"{g['rate'] / t['rate']:.1f}x" if g and t["rate"] > 0 else "n/a"
    rows.append((names[c], t, ratio))
print()
print(f"Slurm {e['SLURM_VERSION']} (munge {e['MUNGE_VERSION']}) vs gantry, one node with {e['NCPU']} CPUs and "
      f"{e['MEM_MB']} MiB; trivial jobs (`true`).")
print()
print("| system / configuration | jobs | clients | submitted/s | completed/s | submit -> started p50 / p99 (ms) | gantry / this (completed/s) |")
print("|---|---:|---:|---:|---:|---:|---:|")
for name, r, ratio in rows:
    if r is None:
        print(f"| {name} | {e['JOBS']} | {e['CLIENTS']} | failed | failed | | |")
        continue
    print(f"| {name} | {r['jobs']} | {r['clients']} | {r['submit_rate']:.0f} | {r['rate']:.2f}{r.get('note', '')} | "
          f"{r['lat']} | {ratio} |")
print()
print(f"Latency: {e['LATENCY_SAMPLES']} sequential submissions. gantry: REST submit until the agent reported the "
      "container running. Slurm: from starting `sbatch` until slurmstepd created the job's output file "
      "(it is about to exec the batch script); each sample waits for the previous job to leave the queue.")
PYEOF

exit "$FAILED"

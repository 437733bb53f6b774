#!/bin/sh
# loom-wrapper.sh: runs one service action's script for Loom's shell
# automator (plugins/shell). The automator starts it on the host as
#
#   cd <cache>/scripts && PATH=<cache>/scripts:<cache>/lib:$PATH \
#     sh <cache>/lib/loom-wrapper.sh SCRIPT [ARGS...]   < task data
#
# (through sudo unless the SSH user is root). Its stdin carries the task:
# line 1 is the task JSON, the remaining lines the lookup table that
# loom_lookup_key reads (see loom_lookup_key). The wrapper keeps both in a
# private directory under <cache>/run (mode 0700, files 0600) only while
# the script runs, and removes them on every way out: success, failure,
# HUP/INT/TERM. A wrapper killed with KILL cannot clean up, so each run
# first removes the leftovers of wrappers that are no longer alive.
#
# Exit status: the script's, or 125 when the wrapper itself could not set
# the task up (the message says why), or 127 when SCRIPT is not found.

set -u

# Every fork counts here (this runs for each action): the automator passes
# an absolute path, so the dirs come from parameter expansion.
case $0 in
/?*/*) lib=${0%/*} ;;
*) lib=$(CDPATH= cd -- "$(dirname -- "$0")" && pwd) || exit 125 ;;
esac
cache=${lib%/*}
[ -n "$cache" ] || cache=/
run="$cache/run"

if [ $# -lt 1 ]; then
	echo "loom-wrapper: usage: loom-wrapper.sh SCRIPT [ARGS...] (the task data on stdin)" >&2
	exit 125
fi

umask 077
# BOOTSTRAP leaves run/ at 0700; create it (0700 through the umask) when a
# node lost it. The task data itself goes into a fresh 0700 mktemp dir.
if [ ! -d "$run" ] && { ! mkdir -p -- "$run" || ! chmod 0700 -- "$run"; }; then
	echo "loom-wrapper: cannot create $run; re-run BOOTSTRAP or check the cache dir's owner" >&2
	exit 125
fi

# Leftovers of wrappers that died by KILL (the automator removes them after
# its own timeouts; a dropped connection or a reboot can still leave some):
# task.<pid>.<run id>.XXXXXX whose pid is gone.
for old in "$run"/task.*; do
	[ -d "$old" ] || continue
	pid=${old#"$run"/task.}
	pid=${pid%%.*}
	case $pid in '' | *[!0-9]*) continue ;; esac
	kill -0 "$pid" 2>/dev/null || rm -rf -- "$old"
done

# LOOM_RUN_ID (set by the automator) names this run's dir, so that after
# a timeout the automator removes exactly this dir, even when the wrapper
# had to be killed with KILL.
id=${LOOM_RUN_ID:-run}
case $id in *[!A-Za-z0-9_-]*) id=run ;; esac
tmp=$(mktemp -d "$run/task.$$.$id.XXXXXX") || {
	echo "loom-wrapper: mktemp in $run failed" >&2
	exit 125
}
cleanup() { rm -rf -- "$tmp"; }
trap cleanup EXIT
# A signal ends the wrapper through exit, so the EXIT trap removes the task
# data; the status says which signal it was, as a shell would.
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM

# Split stdin: line 1 is the task JSON, the rest the lookup table. The file
# names travel through the environment because awk -v would interpret
# backslashes in them.
LOOM_TASK_JSON="$tmp/task.json"
LOOM_TASK_FLAT="$tmp/task.flat"
export LOOM_TASK_JSON LOOM_TASK_FLAT
: >"$LOOM_TASK_JSON" && : >"$LOOM_TASK_FLAT" || exit 125
# (sudo -E: the SSH binding has already given the script the login
# user's environment back, through the automator's login_env option.)
awk 'NR == 1 { print > ENVIRON["LOOM_TASK_JSON"]; next }
     { print > ENVIRON["LOOM_TASK_FLAT"] }' || {
	echo "loom-wrapper: could not store the task data in $tmp" >&2
	exit 125
}

# Coopr's wrapper took the JSON path as its first argument; scripts that
# read it get the same file through this variable.
# TASKJSON is the variable Coopr's wrapper set, which scripts it sourced
# used directly.
COOPR_TASK_JSON=$LOOM_TASK_JSON
TASKJSON=$LOOM_TASK_JSON
LOOM_SHELL_CACHE=$cache
export COOPR_TASK_JSON TASKJSON LOOM_SHELL_CACHE

script=$1
shift
# args_shell (a Coopr compatibility opt-in): the node's shell splits and
# expands the args, as Coopr's command line did.
if [ -n "${LOOM_SHELL_ARGS:-}" ]; then
	eval "set -- \"\$@\" $LOOM_SHELL_ARGS" || exit 125
fi
unset LOOM_SHELL_ARGS
# A file in the scripts dir that lost its execute bit (a resource synced
# without permissions) still runs, through sh. Anything else is found on
# PATH (the scripts dir comes first), so plain commands work too, as in
# Coopr. The script is not exec'd: the wrapper must outlive it to clean up.
if [ -f "$script" ] && [ ! -x "$script" ]; then
	sh "./$script" "$@" </dev/null
else
	case $script in
	*/*) "$script" "$@" </dev/null ;;
	*)
		if ! command -v -- "$script" >/dev/null 2>&1; then
			echo "loom-wrapper: $script: not found in the scripts dir ($cache/scripts) or on PATH; check fields.script and the scripts resources, then re-run BOOTSTRAP" >&2
			exit 127
		fi
		"$script" "$@" </dev/null
		;;
	esac
fi

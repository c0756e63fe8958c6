#!/usr/bin/env bash
# bench/run.sh: compare orderstore with a standalone nats-server v2.15.3 with
# the official `nats bench` of natscli v0.5.0. See bench/README.md.
#
# Targets, measured in one run, interleaved (A,B then B,A, ...):
#   A  nats-server v2.15.3, generated config
#   B  orderstore (this repo), equivalent TOML, processor and admin disabled
# Both listen on 127.0.0.1 only, each start gets a fresh temp store dir, and
# everything is stopped and removed on exit.
set -euo pipefail
export LC_ALL=C # $EPOCHREALTIME with a '.' and plain number formatting

usage() {
	cat <<'EOF'
usage: bench/run.sh [options]

Compares orderstore with a standalone nats-server v2.15.3 (same JetStream
settings) using `nats bench` from natscli v0.5.0. Options (or the environment
variable in brackets):

  --sync MODE          JetStream sync for both targets: "always" (fsync per
                       message, default) or a duration such as "1s", "2m" [SYNC]
  --rounds N           benchmark rounds per target, A/B interleaved (3) [ROUNDS]
  --sync-msgs N        messages for the acked sync publish, per round
                       (2000 with sync=always, else 10000) [SYNC_MSGS]
  --async-msgs N       messages for the async publish, per round
                       (10000 with sync=always, else 100000) [ASYNC_MSGS]
  --async-batch N      async publish window, `nats bench --batch` (500) [ASYNC_BATCH]
  --consume-reps N     durable pull consumes of the round's messages, each
                       with a fresh durable (5) [CONSUME_REPS]
  --size BYTES         message size (128) [MSG_SIZE]
  --ready-reps N       exec-to-ready measurements per target (7) [READY_REPS]
  --results FILE       markdown results (default $TMPDIR/bench-results.md, or
                       /tmp/bench-results.md); JSON goes to FILE with .json
                       instead of .md [RESULTS]
  -h, --help           this text

Runs take about 3 minutes with sync=always and 1-2 minutes with sync=1s on a
2-core machine with the defaults.
EOF
}

CUR_LOG="" # log of the server being benchmarked, shown when a step fails
die() {
	if [[ -n $CUR_LOG && -s $CUR_LOG ]]; then
		echo "--- last lines of $CUR_LOG:" >&2
		tail -n 30 "$CUR_LOG" >&2
	fi
	echo "run.sh: $*" >&2
	exit 1
}

# ---------------------------------------------------------------- options
SYNC="${SYNC:-always}"
ROUNDS="${ROUNDS:-3}"
SYNC_MSGS="${SYNC_MSGS:-}"
ASYNC_MSGS="${ASYNC_MSGS:-}"
ASYNC_BATCH="${ASYNC_BATCH:-500}"
CONSUME_REPS="${CONSUME_REPS:-5}"
MSG_SIZE="${MSG_SIZE:-128}"
READY_REPS="${READY_REPS:-7}"
TMP="${TMPDIR:-/tmp}"
TMP="${TMP%/}"
RESULTS="${RESULTS:-$TMP/bench-results.md}"
INVOCATION="$0${*:+ $*}"

while (($#)); do
	opt=$1
	val=""
	case $opt in
	-h | --help)
		usage
		exit 0
		;;
	--*=*)
		val=${opt#*=}
		opt=${opt%%=*}
		shift
		;;
	--*)
		(($# >= 2)) || die "$opt needs a value (see --help)"
		val=$2
		shift 2
		;;
	*) die "unexpected argument $opt (see --help)" ;;
	esac
	case $opt in
	--sync) SYNC=$val ;;
	--rounds) ROUNDS=$val ;;
	--sync-msgs) SYNC_MSGS=$val ;;
	--async-msgs) ASYNC_MSGS=$val ;;
	--async-batch) ASYNC_BATCH=$val ;;
	--consume-reps) CONSUME_REPS=$val ;;
	--size) MSG_SIZE=$val ;;
	--ready-reps) READY_REPS=$val ;;
	--results) RESULTS=$val ;;
	*) die "unknown option $opt (see --help)" ;;
	esac
done

if [[ $SYNC == always ]]; then
	SYNC_MSGS=${SYNC_MSGS:-2000}
	ASYNC_MSGS=${ASYNC_MSGS:-10000}
elif [[ $SYNC =~ ^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$ ]]; then
	SYNC_MSGS=${SYNC_MSGS:-10000}
	ASYNC_MSGS=${ASYNC_MSGS:-100000}
else
	die "--sync must be \"always\" or a duration such as \"1s\" or \"2m\", not \"$SYNC\""
fi
for v in ROUNDS SYNC_MSGS ASYNC_MSGS ASYNC_BATCH CONSUME_REPS MSG_SIZE READY_REPS; do
	[[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer, not \"${!v}\""
done
[[ $RESULTS == /* ]] || RESULTS="$PWD/$RESULTS"
RESULTS_JSON="${RESULTS%.md}.json"
[[ $RESULTS_JSON != "$RESULTS" ]] || RESULTS_JSON="$RESULTS.json"
TOTAL_MSGS=$((SYNC_MSGS + ASYNC_MSGS))

# JetStream limits, identical on both targets (orderstore's defaults).
MAX_FILE_BYTES=$((10 << 30)) # max_file_store 10GiB
MAX_MEM_BYTES=$((256 << 20)) # max_memory_store 256MiB
# orderstore's own stream: a client's publish reaches no stream of its own
# making there (its account imports only ORDER_EVENTS' subjects), so the
# standalone server gets the same stream, declared by hand.
STREAM=ORDER_EVENTS
CMD_TIMEOUT=600 # seconds, per nats CLI invocation

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"

# Never talk to whatever NATS a context or the environment points at.
unset NATS_URL NATS_USER NATS_PASSWORD NATS_TOKEN NATS_CREDS NATS_NKEY NATS_CONTEXT \
	NATS_CERT NATS_KEY NATS_CA NATS_JWT NATS_SEED NATS_SOCKS_PROXY

# ---------------------------------------------------------------- cleanup
WORK=$(mktemp -d "$TMP/orderstore-bench.XXXXXX")
PIDS=() # servers started and not yet stopped

cleanup() {
	local rc=$? pid i
	trap - EXIT INT TERM
	if [[ -n ${CLI_PID:-} ]]; then
		kill -TERM "$CLI_PID" 2>/dev/null || true
		wait "$CLI_PID" 2>/dev/null || true
	fi
	for pid in "${PIDS[@]}"; do
		kill -TERM "$pid" 2>/dev/null || true
	done
	for pid in "${PIDS[@]}"; do
		for ((i = 0; i < 100; i++)); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	done
	rm -rf "$WORK"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# A FIFO nobody writes to: `read -t` on it is a sleep without a fork.
mkfifo "$WORK/sleep.fifo"
exec {SLEEP_FD}<>"$WORK/sleep.fifo"
nap() { read -r -t "$1" -u "$SLEEP_FD" _ || true; }

# ---------------------------------------------------------------- tools
GOBIN_DIR=$(go env GOBIN)
[[ -n $GOBIN_DIR ]] || GOBIN_DIR="$(go env GOPATH)/bin"

# ensure_tool NAME MODULE@VERSION VERSION-STRING: installs the tool with
# `go install` when missing; a different version already installed is left
# alone and the pinned one goes to the temp dir instead.
ensure_tool() {
	local name=$1 mod=$2 want=$3 bin="$GOBIN_DIR/$1"
	if [[ -x $bin && "$("$bin" --version 2>&1 || true)" == *"$want"* ]]; then
		TOOL=$bin
		return
	fi
	if [[ -x $bin ]]; then
		echo "== $bin is not $want: installing $mod into the temp dir" >&2
		GOBIN="$WORK/bin" go install "$mod"
		TOOL="$WORK/bin/$name"
	else
		echo "== installing $mod" >&2
		go install "$mod"
		TOOL=$bin
	fi
	[[ "$("$TOOL" --version 2>&1 || true)" == *"$want"* ]] || die "$TOOL is not $want"
}
ensure_tool nats github.com/nats-io/natscli/nats@v0.5.0 v0.5.0
NATS=$TOOL
ensure_tool nats-server github.com/nats-io/nats-server/v2@v2.15.3 v2.15.3
NATS_SERVER=$TOOL
NATS_SERVER_VERSION=$("$NATS_SERVER" --version 2>&1)
NATS_SERVER_VERSION=${NATS_SERVER_VERSION#nats-server: }
NATS_VERSION=$("$NATS" --version 2>&1)

echo "== building orderstore"
ok=""
for try in 1 2 3 4 5; do
	# Another engineer may be mid-edit: retry a briefly broken build.
	if go build -o "$WORK/orderstore" ./cmd/orderstore; then
		ok=1
		break
	fi
	echo "   build failed (try $try/5), retrying in 10s" >&2
	sleep 10
done
[[ -n $ok ]] || die "go build ./cmd/orderstore failed"
ORDERSTORE="$WORK/orderstore"
COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
DIRTY=$(git status --porcelain 2>/dev/null | grep -cv '^??' || true)
[[ $DIRTY == 0 ]] && DIRTY="" || DIRTY=" (+$DIRTY uncommitted changes)"

# ---------------------------------------------------------------- servers
NAME_A="nats-server"
NAME_B="orderstore"

free_port() {
	# 20000-32767 is below Linux's ephemeral range, so no client socket holds it.
	local p
	for _ in {1..200}; do
		p=$((20000 + RANDOM % 12768))
		if ! true 2>/dev/null <>"/dev/tcp/127.0.0.1/$p"; then
			FREE_PORT=$p
			return
		fi
	done
	die "no free port found"
}

write_config() { # target dir port
	local t=$1 d=$2 port=$3
	if [[ $t == A ]]; then
		local sync=$SYNC
		[[ $sync == always ]] || sync="\"$sync\""
		cat >"$d/nats-server.conf" <<EOF
listen: "127.0.0.1:$port"
max_payload: 1048576
logtime_utc: true
jetstream {
  store_dir: "$d/store"
  max_file_store: $MAX_FILE_BYTES
  max_mem: $MAX_MEM_BYTES
  sync_interval: $sync
}
EOF
	else
		cat >"$d/orderstore.toml" <<EOF
[server]
host = "127.0.0.1"
port = $port
max_payload = "1MiB"

[jetstream]
store_dir = "$d/store"
max_file_store = "${MAX_FILE_BYTES}B"
max_memory_store = "${MAX_MEM_BYTES}B"
sync_interval = "$SYNC"
allow_low_disk = true # the free-disk check still runs; only a warning if low

[processor]
enabled = false # the built-in consumer must not compete with the benchmark

[admin]
listen = "" # disabled

[log]
level = "info"
format = "json"
EOF
	fi
}

# start_server TARGET DIR PORT: sets SRV_PID and T0 (exec time, microseconds).
start_server() {
	local t=$1 d=$2 port=$3 now
	mkdir -p "$d/store"
	write_config "$t" "$d" "$port"
	if [[ $t == A ]]; then
		now=$EPOCHREALTIME
		"$NATS_SERVER" -c "$d/nats-server.conf" >"$d/server.log" 2>&1 &
	else
		now=$EPOCHREALTIME
		"$ORDERSTORE" run -config "$d/orderstore.toml" >"$d/server.log" 2>&1 &
	fi
	SRV_PID=$!
	T0=${now/./}
	CUR_LOG="$d/server.log"
	PIDS+=("$SRV_PID")
}

# wait_port PORT PID DIR: sets T_PORT to the first moment the port accepts;
# returns 3 if the server exits first.
wait_port() {
	local port=$1 pid=$2 d=$3 now start=${EPOCHREALTIME/./}
	while :; do
		if true 2>/dev/null <>"/dev/tcp/127.0.0.1/$port"; then
			now=$EPOCHREALTIME
			T_PORT=${now/./}
			return
		fi
		kill -0 "$pid" 2>/dev/null || return 3 # server gone
		now=$EPOCHREALTIME
		((${now/./} - start < 60000000)) || die "port $port not accepting after 60s"
		nap 0.0002
	done
}

# wait_line LOG PATTERN PID: prints the first line matching PATTERN; returns 3
# if the server exits first.
wait_line() {
	local log=$1 pat=$2 pid=$3 line i
	for ((i = 0; i < 12000; i++)); do
		if line=$(grep -m1 -F -- "$pat" "$log"); then
			printf '%s\n' "$line"
			return
		fi
		kill -0 "$pid" 2>/dev/null || return 3 # server gone
		nap 0.005
	done
	die "no \"$pat\" in $log after 60s"
}

# line_us TARGET LINE: the log line's own timestamp in microseconds.
line_us() {
	local ts
	if [[ $1 == A ]]; then # [pid] 2026/11/30 01:49:11.176368 [INF] ... (UTC)
		ts=$(awk '{print $2, $3}' <<<"$2")
		TZ=UTC date -d "$ts" +%s%6N
	else # {"time":"2026-11-30T01:51:25.734902252Z",...}
		ts=$(sed -n 's/^{"time":"\([^"]*\)".*/\1/p' <<<"$2")
		date -d "$ts" +%s%6N
	fi
}

stop_server() { # PID
	local pid=$1 i p keep=()
	kill -TERM "$pid" 2>/dev/null || true
	for ((i = 0; i < 300; i++)); do
		kill -0 "$pid" 2>/dev/null || break
		nap 0.05
	done
	kill -KILL "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	for p in "${PIDS[@]}"; do
		[[ $p == "$pid" ]] || keep+=("$p")
	done
	PIDS=("${keep[@]}")
}

# Starts TARGET and waits until it is ready for the benchmark; sets URL.
up() { # target dir
	local t=$1 d=$2
	free_port
	start_server "$t" "$d" "$FREE_PORT"
	URL="nats://127.0.0.1:$FREE_PORT"
	wait_port "$FREE_PORT" "$SRV_PID" "$d" || return 3
	if [[ $t == A ]]; then
		READY_LINE=$(wait_line "$d/server.log" "Server is ready" "$SRV_PID") || return 3
	else
		# ORDER_EVENTS and friends are declared after the port opens.
		READY_LINE=$(wait_line "$d/server.log" '"msg":"orderstore ready"' "$SRV_PID") || return 3
	fi
}

# lost DIR: the server exited although this script did not stop it (crash,
# or a signal from another process on the machine). Shows why, cleans up and
# sets LOST so that run_unit retries the unit.
lost() {
	local d=$1
	echo "   !! the server (pid $SRV_PID) exited although this script did not stop it; last lines of its log:" >&2
	tail -n 8 "$d/server.log" | sed 's/^/      /' >&2
	stop_server "$SRV_PID"
	rm -rf "$d"
	LOST=1
}
server_gone() { ! kill -0 "$SRV_PID" 2>/dev/null; }

# run_unit FUNCTION ARGS...: runs one measurement unit, keeps its figures only
# if the server survived it, and retries it (3 tries) otherwise.
UNIT_RAW="$WORK/unit.tsv"
run_unit() {
	local try
	for try in 1 2 3; do
		LOST=0
		: >"$UNIT_RAW"
		"$@"
		if ((!LOST)); then
			cat "$UNIT_RAW" >>"$RAW"
			return
		fi
		echo "   !! discarding this unit's figures, retrying ($try/3)" >&2
	done
	die "the server exited unexpectedly three times in a row"
}

# nats_cli ARGS...: the nats CLI against the current server. It runs in the
# background and is waited for, so that a signal to this script is handled at
# once (bash defers traps while a foreground command runs).
CLI_PID=""
nats_cli() {
	local rc=0
	timeout "$CMD_TIMEOUT" "$NATS" --no-context -s "$URL" "$@" &
	CLI_PID=$!
	wait "$CLI_PID" || rc=$?
	CLI_PID=""
	return "$rc"
}

# ---------------------------------------------------------------- figures
RAW="$WORK/raw.tsv" # metric target round value
: >"$RAW"
record() { # metric target round value unit
	printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >>"$UNIT_RAW"
	local name=$NAME_A
	[[ $2 == B ]] && name=$NAME_B
	printf '   %-8s %-12s %-16s %12s %s\n' "$3" "$name" "$1" "$4" "$5"
}

# csv_col FILE N: column N of the first data row of a `nats bench --csv` file.
csv_col() { awk -F, -v c="$2" 'NR == 2 { print $c; exit }' "$1"; }

us_to_ms() { awk -v u="$1" 'BEGIN { printf "%.1f", u / 1000 }'; }

# ---------------------------------------------------------------- ready time
ready_once() { # target label
	local t=$1 label=$2 d line
	d="$WORK/ready-$label-$t"
	mkdir -p "$d"
	free_port
	start_server "$t" "$d" "$FREE_PORT"
	wait_port "$FREE_PORT" "$SRV_PID" "$d" || { lost "$d"; return; }
	local port_us=$((T_PORT - T0)) nats_us app_us
	line=$(wait_line "$d/server.log" "Server is ready" "$SRV_PID") || { lost "$d"; return; }
	nats_us=$(($(line_us "$t" "$line") - T0))
	if [[ $t == B ]]; then
		line=$(wait_line "$d/server.log" '"msg":"orderstore ready"' "$SRV_PID") || { lost "$d"; return; }
		app_us=$(($(line_us B "$line") - T0))
	else
		app_us=$nats_us
	fi
	server_gone && { lost "$d"; return; }
	stop_server "$SRV_PID"
	rm -rf "$d"
	if [[ $label == warmup ]]; then
		return
	fi
	record ready_port_ms "$t" "$label" "$(us_to_ms "$port_us")" "ms exec -> port accepting"
	record ready_nats_log_ms "$t" "$label" "$(us_to_ms "$nats_us")" "ms exec -> nats \"Server is ready\" line"
	record ready_log_ms "$t" "$label" "$(us_to_ms "$app_us")" \
		"ms exec -> $([[ $t == A ]] && echo '"Server is ready"' || echo '"orderstore ready"') line"
}

# ---------------------------------------------------------------- throughput
bench_round() { # target round
	local t=$1 r=$2 d msgs c
	d="$WORK/round$r-$t"
	mkdir -p "$d"
	up "$t" "$d" || { lost "$d"; return; }
	if [[ $t == A ]]; then
		nats_cli stream add "$STREAM" --subjects 'orders.>' --storage file --retention limits \
			--discard old --replicas 1 --defaults >"$d/stream-add.out" 2>&1 ||
			{ server_gone && { lost "$d"; return; }; cat "$d/stream-add.out" >&2; die "stream add failed"; }
	fi

	nats_cli bench js pub sync orders.bench.sync --stream "$STREAM" --msgs "$SYNC_MSGS" --size "$MSG_SIZE" \
		--no-progress --csv "$d/sync.csv" >"$d/sync.out" 2>&1 ||
		{ server_gone && { lost "$d"; return; }; cat "$d/sync.out" >&2; die "bench js pub sync failed"; }
	record sync_pub "$t" "$r" "$(csv_col "$d/sync.csv" 5)" "msgs/s acked sync publish"
	record sync_pub_p50_us "$t" "$r" "$(csv_col "$d/sync.csv" 11)" "us sync publish P50 latency"

	nats_cli bench js pub async orders.bench.async --stream "$STREAM" --msgs "$ASYNC_MSGS" --size "$MSG_SIZE" \
		--batch "$ASYNC_BATCH" --no-progress --csv "$d/async.csv" >"$d/async.out" 2>&1 ||
		{ server_gone && { lost "$d"; return; }; cat "$d/async.out" >&2; die "bench js pub async failed"; }
	record async_pub "$t" "$r" "$(csv_col "$d/async.csv" 5)" "msgs/s async publish"

	msgs=$(nats_cli stream info "$STREAM" --json | sed -n 's/^ *"messages": *\([0-9]*\).*/\1/p') ||
		{ server_gone && { lost "$d"; return; }; die "stream info failed"; }
	msgs=${msgs%%$'\n'*}
	[[ $msgs == "$TOTAL_MSGS" ]] || die "stream $STREAM holds $msgs messages, expected $TOTAL_MSGS"

	for ((c = 1; c <= CONSUME_REPS; c++)); do
		# nats bench creates the durable pull consumer "nats-bench" (deliver
		# all, explicit ack); removing it afterwards makes the next rep start over.
		nats_cli bench js consume --stream "$STREAM" --msgs "$TOTAL_MSGS" --batch 500 --acks explicit \
			--no-progress --csv "$d/consume$c.csv" >"$d/consume$c.out" 2>&1 ||
			{ server_gone && { lost "$d"; return; }; cat "$d/consume$c.out" >&2; die "bench js consume failed"; }
		record consume "$t" "$r.$c" "$(csv_col "$d/consume$c.csv" 5)" "msgs/s durable pull consume"
		nats_cli consumer rm "$STREAM" nats-bench -f >/dev/null 2>&1 ||
			{ server_gone && { lost "$d"; return; }; die "consumer rm failed"; }
	done
	server_gone && { lost "$d"; return; }
	stop_server "$SRV_PID"
	rm -rf "$d"
}

# ---------------------------------------------------------------- run
START=${EPOCHREALTIME/./}
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo n/a)
REPRO="bench/run.sh --sync $SYNC --rounds $ROUNDS --sync-msgs $SYNC_MSGS --async-msgs $ASYNC_MSGS --async-batch $ASYNC_BATCH --consume-reps $CONSUME_REPS --size $MSG_SIZE --ready-reps $READY_REPS --results $RESULTS"
echo "== orderstore $COMMIT$DIRTY vs nats-server $NATS_SERVER_VERSION, natscli $NATS_VERSION nats bench; sync=$SYNC"
echo "== temp dir $WORK"

echo "== exec -> ready, $READY_REPS reps per target, fresh empty store each (one warm-up start each, discarded)"
run_unit ready_once A warmup
run_unit ready_once B warmup
for ((i = 1; i <= READY_REPS; i++)); do
	if ((i % 2)); then order="A B"; else order="B A"; fi
	for t in $order; do run_unit ready_once "$t" "$i"; done
done

echo "== throughput, $ROUNDS rounds: sync pub $SYNC_MSGS x ${MSG_SIZE}B, async pub $ASYNC_MSGS x ${MSG_SIZE}B, consume $TOTAL_MSGS x $CONSUME_REPS"
for ((r = 1; r <= ROUNDS; r++)); do
	if ((r % 2)); then order="A B"; else order="B A"; fi
	for t in $order; do run_unit bench_round "$t" "$r"; done
done
END=${EPOCHREALTIME/./}
LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo n/a)
ELAPSED=$(awk -v u=$((END - START)) 'BEGIN { printf "%.0f", u / 1e6 }')

# ---------------------------------------------------------------- report
# metric|label|unit|better
METRICS="sync_pub|JetStream acked sync publish|msgs/s|higher
async_pub|JetStream async publish (batch $ASYNC_BATCH)|msgs/s|higher
consume|durable pull consume (explicit ack)|msgs/s|higher
sync_pub_p50_us|sync publish latency P50|us|lower
ready_port_ms|ready: exec -> port accepting (fair comparison)|ms|lower
ready_log_ms|ready: exec -> ready log line (\"Server is ready\" / \"orderstore ready\")|ms|lower
ready_nats_log_ms|ready: exec -> nats \"Server is ready\" line (orderstore: embedded)|ms|lower"

median() { # metric target
	awk -F'\t' -v m="$1" -v t="$2" '$1 == m && $2 == t { v[n++] = $4 }
		END {
			if (n == 0) { print "nan"; exit }
			for (i = 0; i < n; i++) for (j = i + 1; j < n; j++) if (v[j] < v[i]) { x = v[i]; v[i] = v[j]; v[j] = x }
			if (n % 2) print v[int(n / 2)] + 0; else print (v[n / 2 - 1] + v[n / 2]) / 2
		}' "$RAW"
}
raws() { # metric target -> comma-separated
	awk -F'\t' -v m="$1" -v t="$2" '$1 == m && $2 == t { printf "%s%s", (n++ ? "," : ""), $4 }' "$RAW"
}

num() { awk -v x="$1" 'BEGIN { if (x == int(x) && x >= 100) printf "%d", x; else printf "%.1f", x }'; }

TABLE="$WORK/table.md"
JSON_ROWS=""
{
	echo "| metric | unit | nats-server | orderstore | ratio orderstore/nats-server | better |"
	echo "|---|---|---:|---:|---:|---|"
} >"$TABLE"
while IFS='|' read -r key label unit better; do
	a=$(median "$key" A)
	b=$(median "$key" B)
	# verdict: within 3% of nats-server (or better) is "ok".
	read -r ratio verdict < <(awk -v a="$a" -v b="$b" -v better="$better" 'BEGIN {
		if (!(a > 0)) { print "n/a n/a"; exit }
		r = b / a
		if (better == "higher") v = (r >= 0.97 ? "ok" : "orderstore slower")
		else v = (r <= 1 / 0.97 ? "ok" : "orderstore slower")
		printf "%.3f %s\n", r, v }')
	printf '| %s | %s | %s | %s | %sx | %s is better; %s |\n' "$label" "$unit" "$(num "$a")" "$(num "$b")" \
		"$ratio" "$better" "$verdict" >>"$TABLE"
	jl=${label//\\/\\\\}
	jl=${jl//\"/\\\"}
	JSON_ROWS+="${JSON_ROWS:+,
}    {\"metric\": \"$key\", \"label\": \"$jl\", \"unit\": \"$unit\", \"better\": \"$better\", \"nats_server\": $a, \"orderstore\": $b, \"ratio\": $([[ $ratio == n/a ]] && echo null || echo "$ratio"), \"nats_server_raw\": [$(raws "$key" A)], \"orderstore_raw\": [$(raws "$key" B)]}"
done <<<"$METRICS"

HOST="$(nproc) CPU, $(uname -sr), store on $(df -PT "$TMP" | awk 'NR == 2 { print $2 }') ($TMP)"
{
	echo "# orderstore vs nats-server: nats bench results"
	echo
	echo "- date: $(date -u +%Y-%m-%dT%H:%M:%SZ); host: $HOST; run took ${ELAPSED}s; load average at start $LOAD_START, at end $LOAD_END"
	echo "- orderstore: commit $COMMIT$DIRTY; nats-server $NATS_SERVER_VERSION; nats bench from natscli $NATS_VERSION"
	echo "- sync_interval: $SYNC on both; stream $STREAM (orders.>, file, limits, R1; orderstore declares its own); ${MSG_SIZE} B messages"
	echo "- per round and target: $SYNC_MSGS sync publishes, $ASYNC_MSGS async publishes, then $CONSUME_REPS consumes of all $TOTAL_MSGS; $ROUNDS rounds (A/B order alternated); ready time: $READY_REPS starts per target on an empty store"
	echo "- figures are medians of the raw values (JSON file has them all); ratio = orderstore / nats-server"
	echo
	cat "$TABLE"
	echo
	echo "Reproduce (from the repository root):"
	echo
	echo '```'
	echo "$REPRO"
	echo '```'
} >"$WORK/results.md"

esc() { local s=${1//\\/\\\\}; printf '%s' "${s//\"/\\\"}"; }
{
	echo "{"
	echo "  \"date\": \"$(date -u +%Y-%m-%dT%H:%M:%SZ)\","
	echo "  \"host\": \"$(esc "$HOST")\","
	echo "  \"loadavg_start\": \"$LOAD_START\", \"loadavg_end\": \"$LOAD_END\","
	echo "  \"orderstore_commit\": \"$(esc "$COMMIT$DIRTY")\","
	echo "  \"nats_server\": \"$(esc "$NATS_SERVER_VERSION")\","
	echo "  \"natscli\": \"$(esc "$NATS_VERSION")\","
	echo "  \"sync_interval\": \"$(esc "$SYNC")\","
	echo "  \"msg_size\": $MSG_SIZE, \"rounds\": $ROUNDS, \"sync_msgs\": $SYNC_MSGS, \"async_msgs\": $ASYNC_MSGS,"
	echo "  \"async_batch\": $ASYNC_BATCH, \"consume_reps\": $CONSUME_REPS, \"ready_reps\": $READY_REPS, \"elapsed_s\": $ELAPSED,"
	echo "  \"command\": \"$(esc "$REPRO")\","
	echo "  \"results\": ["
	echo "$JSON_ROWS"
	echo "  ]"
	echo "}"
} >"$WORK/results.json"

mkdir -p "$(dirname "$RESULTS")" "$(dirname "$RESULTS_JSON")"
cp "$WORK/results.md" "$RESULTS"
cp "$WORK/results.json" "$RESULTS_JSON"

echo
echo "== results (medians; ratio = orderstore / nats-server; for ready times and latency lower is better)"
echo
cat "$TABLE"
echo
echo "reproduce: $REPRO"
[[ $INVOCATION == "$0" ]] || echo "(invoked as: $INVOCATION)"
echo "written: $RESULTS and $RESULTS_JSON"

#!/usr/bin/env bash
# bench/layout.sh: what orderstore's account layout costs in nats-server
# itself. It runs the standalone nats-server v2.15.3 twice, alternating, with
# `nats bench` of natscli v0.5.0 (async publish, durable pull consume):
#
#   single   one account: clients, stream and consumers together (as
#            bench/run.sh's nats-server baseline)
#   imports  orderstore's layout (docs/security.md, "How replies stay
#            private"): the stream in account OS; clients in account CL,
#            which imports the stream's subjects, the JetStream API and acks
#            as services and _INBOX.> as a stream
#
# No orderstore code runs: the ratio imports/single is the price of the
# layout alone. See bench/README.md.
#
# usage: bench/layout.sh [rounds (3)] [messages per run (100000)] [sync_interval (2m)]
set -euo pipefail
export LC_ALL=C
ROUNDS=${1:-3}
MSGS=${2:-100000}
SYNC=${3:-2m}

GOBIN_DIR=$(go env GOBIN)
[[ -n $GOBIN_DIR ]] || GOBIN_DIR="$(go env GOPATH)/bin"
tool() { # name module@version version-string
	local bin="$GOBIN_DIR/$1"
	if [[ "$("$bin" --version 2>&1 || true)" != *"$3"* ]]; then
		echo "== installing $2" >&2
		go install "$2"
	fi
	[[ "$("$bin" --version 2>&1 || true)" == *"$3"* ]] || { echo "layout.sh: $bin is not $3" >&2; exit 1; }
	echo "$bin"
}
NATS=$(tool nats github.com/nats-io/natscli/nats@v0.5.0 v0.5.0)
NATS_SERVER=$(tool nats-server github.com/nats-io/nats-server/v2@v2.15.3 v2.15.3)

WORK=$(mktemp -d -p "${TMPDIR:-/var/tmp}" layout.XXXXXX)
PID=""
cleanup() {
	[[ -z $PID ]] || kill "$PID" 2>/dev/null || true
	rm -rf "$WORK"
}
trap cleanup EXIT

config() { # layout dir port
	local sync=$SYNC
	[[ $sync == always ]] || sync="\"$sync\""
	printf 'listen: "127.0.0.1:%s"\nmax_payload: 1048576\njetstream { store_dir: "%s/store", sync_interval: %s }\n' "$3" "$2" "$sync"
	[[ $1 == imports ]] || return 0
	cat "$(dirname "${BASH_SOURCE[0]}")/groupcommit/layout.conf" # the accounts, as bench/groupcommit's
}

csv5() { sed -n 2p "$1" | cut -d, -f5; }

run() { # layout round
	local d="$WORK/$1-$2" port=$((20000 + RANDOM % 12000))
	mkdir -p "$d"
	config "$1" "$d" "$port" >"$d/server.conf"
	"$NATS_SERVER" -c "$d/server.conf" >"$d/server.log" 2>&1 &
	PID=$!
	local s=(--server "nats://127.0.0.1:$port")
	for _ in $(seq 100); do "$NATS" "${s[@]}" account info >/dev/null 2>&1 && break; sleep 0.1; done
	"$NATS" "${s[@]}" stream add B --subjects 'orders.>' --storage file --retention limits \
		--discard old --replicas 1 --defaults >/dev/null
	"$NATS" "${s[@]}" bench js pub async orders.bench --stream B --msgs "$MSGS" --size 128 --batch 500 \
		--no-progress --csv "$d/pub.csv" >/dev/null 2>&1
	"$NATS" "${s[@]}" bench js consume --stream B --msgs "$MSGS" --batch 500 --acks explicit \
		--no-progress --csv "$d/con.csv" >/dev/null 2>&1
	echo "$1 $(csv5 "$d/pub.csv") $(csv5 "$d/con.csv")" >>"$WORK/results"
	printf '%-8s round %s: async publish %8s msgs/s, pull consume %8s msgs/s\n' "$1" "$2" "$(csv5 "$d/pub.csv")" "$(csv5 "$d/con.csv")"
	kill "$PID"
	wait "$PID" 2>/dev/null || true
	PID=""
	rm -rf "$d"
}

echo "== nats-server $("$NATS_SERVER" --version 2>&1 | sed 's/.* //'), natscli $("$NATS" --version 2>&1), sync_interval $SYNC, $MSGS messages of 128 B, $ROUNDS rounds"
for r in $(seq "$ROUNDS"); do
	if ((r % 2)); then run single "$r"; run imports "$r"; else run imports "$r"; run single "$r"; fi
done
median() { sort -n | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }
for col in 2 3; do
	s=$(awk -v c=$col '$1=="single" {print $c}' "$WORK/results" | median)
	i=$(awk -v c=$col '$1=="imports" {print $c}' "$WORK/results" | median)
	name=$([[ $col == 2 ]] && echo "async publish" || echo "pull consume ")
	awk -v n="$name" -v s="$s" -v i="$i" 'BEGIN {printf "%s  single %9.0f  imports %9.0f  imports/single %.2f\n", n, s, i, i/s}'
done
echo "reproduce: bench/layout.sh $ROUNDS $MSGS $SYNC"

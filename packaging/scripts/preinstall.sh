#!/bin/sh
# orderstore pre-install: deb preinst (install|upgrade ...), rpm %pre (1 = install, 2+ = upgrade).
# Creates the orderstore system group and user before the files are unpacked,
# so the package manager can give the config file its group.
#
# Honors $DPKG_ROOT (set by `dpkg --root=DIR --force-script-chrootless`):
# every path and account change then goes to DIR, never to the host.
set -e

ROOT="${DPKG_ROOT:-}"
NAME=orderstore
HOME_DIR=/var/lib/orderstore

case "$1" in
	install | upgrade | [0-9]*) ;;
	*) exit 0 ;;
esac

# has_entry FILE: the account database in $ROOT has an entry named $NAME.
has_entry() {
	if [ -z "$ROOT" ]; then
		getent "$1" "$NAME" >/dev/null 2>&1
	else
		grep -q "^$NAME:" "$ROOT/etc/$1" 2>/dev/null
	fi
}

prefix=""
[ -n "$ROOT" ] && prefix="--prefix $ROOT"

nologin=/usr/sbin/nologin
[ -x "$ROOT$nologin" ] || [ ! -x "$ROOT/sbin/nologin" ] || nologin=/sbin/nologin

if ! has_entry group; then
	# shellcheck disable=SC2086 # $prefix is empty or two words
	groupadd $prefix --system "$NAME"
fi
if ! has_entry passwd; then
	# shellcheck disable=SC2086
	useradd $prefix --system --gid "$NAME" --home-dir "$HOME_DIR" --no-create-home \
		--shell "$nologin" --comment "orderstore event store" "$NAME"
fi
exit 0

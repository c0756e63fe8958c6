#!/bin/sh
# orderstore post-install: deb postinst (configure [old-version] ...), rpm %post (1 = install, 2+ = upgrade).
# Creates the state directory, lets the service read its config, reloads
# systemd and restarts a running service after an upgrade. Never enables or
# starts the service on a fresh install: review the config first.
#
# Works without systemd (containers, chroots) and honors $DPKG_ROOT.
set -e

ROOT="${DPKG_ROOT:-}"
NAME=orderstore
STATE_DIR=/var/lib/orderstore
CONFIG=/etc/orderstore/orderstore.toml

upgrade=no
case "$1" in
	configure) [ -n "${2:-}" ] && upgrade=yes ;;
	1) ;;
	[0-9]*) upgrade=yes ;;
	*) exit 0 ;;
esac

# Owner as uid:gid. Under $DPKG_ROOT names would resolve against the host's
# account database, so read the numeric ids from the target root.
if [ -z "$ROOT" ]; then
	owner="$NAME:$NAME"
	group="$NAME"
else
	uid=$(awk -F: -v n="$NAME" '$1 == n { print $3 }' "$ROOT/etc/passwd")
	gid=$(awk -F: -v n="$NAME" '$1 == n { print $3 }' "$ROOT/etc/group")
	if [ -z "$uid" ] || [ -z "$gid" ]; then
		echo "orderstore: user or group $NAME missing in $ROOT/etc" >&2
		exit 1
	fi
	owner="$uid:$gid"
	group="$gid"
fi

# jetstream.store_dir of the packaged config. Only the directory itself is
# chowned: never walk a large store on every upgrade.
mkdir -p "$ROOT$STATE_DIR"
chown "$owner" "$ROOT$STATE_DIR"
chmod 0750 "$ROOT$STATE_DIR"

# The config may hold passwords and tokens: root writes it, the service reads it.
if [ -f "$ROOT$CONFIG" ]; then
	chgrp "$group" "$ROOT$CONFIG"
	chmod 0640 "$ROOT$CONFIG"
fi

if [ -z "$ROOT" ] && [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
	systemctl daemon-reload >/dev/null 2>&1 || true
	if [ "$upgrade" = yes ]; then
		systemctl try-restart "$NAME.service" >/dev/null 2>&1 || true
	fi
fi

if [ "$upgrade" = no ]; then
	# check as the service user: run as root, the preflight would leave a
	# root-owned lock file in the store that the service cannot open.
	echo "orderstore: edit $CONFIG, check it with 'sudo -u $NAME orderstore check -config $CONFIG',"
	echo "orderstore: then start it with 'systemctl enable --now orderstore'"
fi
exit 0

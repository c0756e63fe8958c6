#!/bin/sh
# orderstore post-remove: deb postrm (remove|purge|upgrade|abort-* ...), rpm %postun (0 = erase, 1+ = upgrade).
# Reloads systemd once the unit file is gone. Never deletes the event store
# (/var/lib/orderstore) or the orderstore user: order events outlive the
# package, so removing them is left to the operator. Works without systemd
# and honors $DPKG_ROOT.
set -e

ROOT="${DPKG_ROOT:-}"
STATE_DIR=/var/lib/orderstore

if [ -z "$ROOT" ] && [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
	systemctl daemon-reload >/dev/null 2>&1 || true
fi

case "$1" in
	purge)
		# dpkg has deleted the conffile; drop the directory if nothing else is in it.
		rmdir "$ROOT/etc/orderstore" 2>/dev/null || true
		;;
	remove | 0) ;;
	*) exit 0 ;;
esac

if [ -d "$ROOT$STATE_DIR" ]; then
	echo "orderstore: the event store $STATE_DIR was kept; delete it by hand if you no longer need it"
fi
exit 0

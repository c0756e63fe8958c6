#!/bin/sh
# orderstore pre-remove: deb prerm (remove|upgrade|deconfigure|failed-upgrade), rpm %preun (0 = erase, 1+ = upgrade).
# On removal (not on upgrade), stops and disables the service. Works without
# systemd (containers, chroots) and honors $DPKG_ROOT.
set -e

ROOT="${DPKG_ROOT:-}"
NAME=orderstore

case "$1" in
	remove | deconfigure | 0) ;;
	*) exit 0 ;;
esac

command -v systemctl >/dev/null 2>&1 || exit 0
if [ -n "$ROOT" ]; then
	systemctl --root="$ROOT" disable "$NAME.service" >/dev/null 2>&1 || true
	exit 0
fi
if [ -d /run/systemd/system ]; then
	# Graceful: SIGTERM, then up to TimeoutStopSec for the drain.
	systemctl stop "$NAME.service" >/dev/null 2>&1 || true
fi
systemctl disable "$NAME.service" >/dev/null 2>&1 || true
exit 0

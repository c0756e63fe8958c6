// Package sdnotify implements the client side of systemd's sd_notify protocol (sd_notify(3)) with
// the standard library only: a service started with Type=notify sends "KEY=VALUE" lines as one
// datagram to the unix socket named in $NOTIFY_SOCKET. orderstore sends [Ready] once the store is
// recovered and declared, [Status] for progress, and [Stopping] when a graceful shutdown begins.
//
// When $NOTIFY_SOCKET is unset every function is a no-op that returns a nil error, so callers may
// use it unconditionally. On platforms without unix datagram sockets (Windows) a set $NOTIFY_SOCKET
// yields an error from the dial, never a panic or a build failure.
package sdnotify

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
)

// EnvSocket is the environment variable systemd sets to the notification socket's address: an
// absolute path, or an abstract socket name starting with '@'.
const EnvSocket = "NOTIFY_SOCKET"

// Notify sends state (for example "READY=1" or "STATUS=recovering\nREADY=1")
// as one datagram to the socket named in $NOTIFY_SOCKET.
//
// It returns (false, nil) when $NOTIFY_SOCKET is unset or empty, (true, nil) once the datagram was
// sent, and (false, err) when the address is not supported or the socket cannot be reached.
func Notify(state string) (sent bool, err error) {
	addr := os.Getenv(EnvSocket)
	if addr == "" {
		return false, nil
	}
	// systemd only hands out absolute paths and abstract names ('@' becomes
	// a leading NUL byte, which the Go runtime does for us on Linux). Newer
	// systemd also knows "vsock:" addresses, which this package does not.
	if addr[0] != '/' && addr[0] != '@' {
		return false, fmt.Errorf("sd_notify %s=%q: unsupported address (want an absolute path or @abstract name)", EnvSocket, addr)
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		return false, fmt.Errorf("sd_notify %s=%q: %w", EnvSocket, addr, err)
	}
	_, werr := conn.Write([]byte(state)) // a short write is an error
	cerr := conn.Close()
	if werr != nil {
		return false, fmt.Errorf("sd_notify %s=%q: %w", EnvSocket, addr, werr)
	}
	if cerr != nil {
		return true, fmt.Errorf("sd_notify %s=%q: close: %w", EnvSocket, addr, cerr)
	}
	return true, nil
}

// Ready tells systemd that startup has finished ("READY=1"). With Type=notify, systemd considers
// the unit started, and starts units ordered after it, only once this has been sent.
func Ready() error {
	_, err := Notify("READY=1")
	return err
}

// Stopping tells systemd that a graceful shutdown has begun ("STOPPING=1").
func Stopping() error {
	_, err := Notify("STOPPING=1")
	return err
}

// Status sends a one-line, human-readable status ("STATUS=" + s), shown by `systemctl status`.
// Newlines in s would start a new assignment, so they are rejected.
func Status(s string) error {
	if strings.Contains(s, "\n") {
		return errors.New("sd_notify STATUS: value contains a newline")
	}
	_, err := Notify("STATUS=" + s)
	return err
}

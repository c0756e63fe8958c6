package orderstore

import (
	"fmt"
	"net"
	"strings"

	"github.com/orderstore/orderstore/internal/hint"
)

func startHint(cfg Config, err error) string {
	msg := err.Error()
	switch {
	case strings.Contains(msg, "address already in use") || strings.Contains(msg, "bind"):
		// The listener whose address the error names.
		for _, l := range []struct{ key, addr string }{{"leafnode.listen", cfg.LeafNode.Listen}, {"cluster.listen", cfg.Cluster.Listen}} {
			if _, port, err := net.SplitHostPort(l.addr); err == nil && port != "0" && strings.Contains(msg, ":"+port) {
				return fmt.Sprintf("another process listens on %s; stop it or set %s to a free host:port", l.addr, l.key)
			}
		}
		return fmt.Sprintf("another process listens on %s:%d; stop it or set server.port (or -1 for a random port)", cfg.Server.Host, cfg.Server.Port)
	case strings.Contains(msg, "storage directory") || strings.Contains(msg, "store"):
		return "check jetstream.store_dir: it must be a writable directory"
	}
	return ""
}

// Hinted is an error that says what to do about it: the remedy the CLI prints on a "hint:" line.
// Every error of Start, Close and the appliance's methods that has a remedy carries one somewhere
// in its chain (orderstore's own, and those of bootstrap's checks):
//
//	var h orderstore.Hinted
//	if errors.As(err, &h) {
//		fmt.Println("hint:", h.Hint())
//	}
type Hinted interface {
	error
	Hint() string
}

// WithHint returns err with hint h attached (err itself if h is empty):
// the remedy the CLI prints on a "hint:" line. orderstore's own errors
// carry theirs so; a program that wraps orderstore may add its own.
func WithHint(err error, h string) error { return hint.Wrap(err, h) }

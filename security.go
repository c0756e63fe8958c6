package orderstore

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"

	"github.com/orderstore/orderstore/internal/natsconf"
)

// StreamAccount is the NATS account that holds orderstore's streams, consumers and bucket (in
// store_dir/jetstream/ORDERSTORE). orderstore's own connections live in it, and, on a single node
// with no users and no leaf links, the anonymous loopback clients (with an admin's reach by
// permissions: docs/security.md). Every configured user has an account of its own that imports what
// its role allows from here.
const StreamAccount = natsconf.StreamAccount

// AnonymousAccount is where anonymous loopback clients land when no users are configured in a
// cluster, on a hub or on an edge: outside StreamAccount, with an admin's imports. It is also the
// scope of their Nats-Msg-Id on a single node, where they are clients of StreamAccount.
const AnonymousAccount = natsconf.AnonymousAccount

// legacyAccount is where stores written before accounts (orderstore up to
// the library release) keep their streams: nats' global account.
const legacyAccount = "$G"

// natsInput is what internal/natsconf makes the embedded server's
// accounts, users, permissions, cluster, leaf node and TLS options of.
func (c Config) natsInput() natsconf.Input {
	return natsconf.Input{
		Stream:             c.Stream.Name,
		Subjects:           c.Stream.Subjects,
		DeadLetterSubjects: deadLetterSubjectPrefix(c.Processor.DeadLetterStream) + ".>",
		Processor:          c.Processor.Enabled,
		Durable:            c.Processor.Durable,
		ConsumerStream:     c.DeclareSpec().ConsumerStream(),
		Users:              c.Server.Users,
		Domain:             c.JetStream.Domain,
		Edges:              c.Hub.Edges,
		ServerTLS:          c.Server.TLS,
		Cluster:            c.Cluster,
		LeafNode:           c.LeafNode,
	}
}

// PlaintextWarnings returns what the start-up log warns about every time: each listener reachable
// from the network that sends passwords, events or the admin token in clear (the client port's and
// the admin listener's silenced by their AllowPlaintext).
func (c Config) PlaintextWarnings() []string {
	var w []string
	if !isLoopback(c.Server.Host) && !c.Server.TLS.Enabled() && !c.Server.AllowPlaintext {
		w = append(w, fmt.Sprintf("the NATS client port %s:%d faces the network without TLS: passwords and events cross it in clear; set [server.tls] (or server.allow_plaintext = true in a lab)", c.Server.Host, c.Server.Port))
	}
	if host, _, err := net.SplitHostPort(c.Admin.Listen); err == nil && !isLoopback(host) && !c.Admin.TLS.Enabled() && !c.Admin.AllowPlaintext {
		w = append(w, fmt.Sprintf("the admin listener %s faces the network without TLS: the admin token crosses it in clear; set [admin.tls] (or admin.allow_plaintext = true in a lab)", c.Admin.Listen))
	}
	if host, err := hostOf(c.Cluster.Listen); c.Cluster.Enabled() && err == nil && !isLoopback(host) && !c.Cluster.TLS.Enabled() {
		w = append(w, fmt.Sprintf("the route listener cluster.listen %s faces the network without TLS: the routes' password and every event cross it in clear; set [cluster.tls]", c.Cluster.Listen))
	}
	if host, err := hostOf(c.LeafNode.Listen); err == nil && !isLoopback(host) && !c.LeafNode.TLS.Enabled() {
		w = append(w, fmt.Sprintf("the leaf node listener leafnode.listen %s faces the network without TLS: the edges' password and their events cross it in clear; set [leafnode.tls]", c.LeafNode.Listen))
	}
	return w
}

// CheckFiles loads every TLS certificate, key and CA file and compiles
// every schema file the config names, as Start would, and reports every
// problem at once (each naming its key): what `orderstore check` runs beside Validate.
func (c Config) CheckFiles() error {
	var errs []error
	add := func(_ *tls.Config, err error) { errs = append(errs, err) } // errors.Join drops the nils
	add(natsconf.LoadTLS("server.tls", c.Server.TLS, false))
	add(natsconf.LoadTLS("admin.tls", c.Admin.TLS, false))
	add(natsconf.LoadTLS("cluster.tls", c.Cluster.TLS, true))
	add(natsconf.LoadTLS("leafnode.tls", c.LeafNode.TLS, false))
	for i, r := range c.LeafNode.Remotes {
		add(natsconf.LoadTLS(fmt.Sprintf("leafnode.remotes[%d].tls", i), r.TLS, true))
	}
	vc := c
	if u := vc.Validation.UnknownTypes; u != "accept" && u != "reject" {
		vc.Validation.UnknownTypes = "" // a bad value is Validate's to report
	}
	_, err := vc.validator()
	if err := errors.Join(append(errs, err)...); err != nil {
		return &FileError{Err: err}
	}
	return nil
}

package natsconf

import (
	"cmp"
	"fmt"
	"net"
	"strconv"

	"github.com/orderstore/orderstore/embedded"
)

// scaleOut adds [cluster], [leafnode] and the domain to ec: NATS's own clustering (JetStream over
// Raft routes) and leaf nodes, nothing of orderstore's making.
func (in Input) scaleOut(ec *embedded.Config) error {
	ec.Domain = in.Domain
	if cl := in.Cluster; cl.Enabled() {
		host, port, err := splitHostPort("cluster.listen", cl.Listen)
		if err != nil {
			return err
		}
		ec.Cluster = embedded.Cluster{Name: cl.Name, Host: host, Port: port, Routes: cl.Routes, User: cl.User, Password: cl.Password}
		if ec.Cluster.TLS, err = LoadTLS("cluster.tls", cl.TLS, true); err != nil {
			return err
		}
	}
	ln := in.LeafNode
	fromLeaf, toLeaf, denyImports, denyExports := in.leafLists("")
	if ln.Listen != "" {
		var err error
		if ec.LeafNode.Host, ec.LeafNode.Port, err = splitHostPort("leafnode.listen", ln.Listen); err != nil {
			return err
		}
		ec.LeafNode.User, ec.LeafNode.Password, ec.LeafNode.Account = ln.User, ln.Password, StreamAccount
		// Leaf peers (edges) bind to StreamAccount: what crosses the link is only what sourcing and
		// the hub watcher need, both ways (the internal subjects table, subjects.go).
		ec.LeafNode.FromLeaf, ec.LeafNode.ToLeaf = fromLeaf, toLeaf
		for _, u := range ln.Users {
			from, to, _, _ := in.leafLists(u.Edge)
			ec.LeafNode.Users = append(ec.LeafNode.Users, embedded.LeafUser{User: u.User, Password: u.Password, FromLeaf: from, ToLeaf: to})
		}
		if ec.LeafNode.TLS, err = LoadTLS("leafnode.tls", ln.TLS, false); err != nil {
			return err
		}
	}
	ec.LeafNode.ReconnectInterval = ln.ReconnectInterval
	// Nothing of this node's own crosses a leaf connection but what a
	// hub's sourcing needs (docs/topologies.md, "Each edge stores only its
	// own events"; a peer on the hub would otherwise also read its acks).
	for i, r := range ln.Remotes {
		t, err := LoadTLS(fmt.Sprintf("leafnode.remotes[%d].tls", i), r.TLS, true)
		if err != nil {
			return err
		}
		ec.LeafNode.Remotes = append(ec.LeafNode.Remotes, embedded.LeafRemote{URL: r.URL, User: r.User, Password: r.Password,
			Credentials: r.Credentials, LocalAccount: StreamAccount, TLS: t, DenyImports: denyImports, DenyExports: denyExports})
	}
	return nil
}

func splitHostPort(key, hostport string) (string, int, error) {
	host, p, err := net.SplitHostPort(hostport)
	if err != nil {
		return "", 0, fmt.Errorf("%s %q: %w", key, hostport, err)
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		return "", 0, fmt.Errorf("%s %q: port: %w", key, hostport, err)
	}
	return host, cmp.Or(port, -1), nil // port 0: a free one
}

// Package natsconf translates orderstore's configuration into nats-server's: the accounts, users
// and permissions (who may publish and subscribe what), the one table of internal subjects they all
// come from, the cluster and leaf node options, and the one TLS loader. It starts nothing; the root
// package builds an [Input] from its Config and applies it to an [embedded.Config].
package natsconf

import "github.com/orderstore/orderstore/embedded"

// Input is what the NATS configuration is made of: the parts of
// orderstore's Config that name principals, subjects and links.
type Input struct {
	// Stream and Subjects are the stream's name and subjects (stream.name, stream.subjects).
	Stream   string
	Subjects []string
	// DeadLetterSubjects is the dead-letter stream's subject pattern ("dlq.<stream>.>").
	DeadLetterSubjects string
	// Processor says the built-in processor runs (processor.enabled); Durable is its consumer
	// (processor.durable) on ConsumerStream (the stream, or a hub's aggregate stream).
	Processor      bool
	Durable        string
	ConsumerStream string
	// Users are server.users; none means anonymous loopback clients.
	Users []User
	// Domain is jetstream.domain; Edges are hub.edges.
	Domain string
	Edges  []string
	// ServerTLS is [server.tls].
	ServerTLS TLSConfig
	Cluster   ClusterConfig
	LeafNode  LeafNodeConfig
}

// Apply sets ec's accounts, users, cluster, leaf node and client TLS
// options for in, with id as orderstore's own user.
func (in Input) Apply(ec *embedded.Config, id *Identity) error {
	var err error
	if ec.Accounts, ec.Users, ec.NoAuthUser, err = in.accounts(id); err != nil {
		return err
	}
	ec.MappingsExemptNkey = id.pub
	if err := in.scaleOut(ec); err != nil {
		return err
	}
	ec.TLS, err = LoadTLS("server.tls", in.ServerTLS, false)
	return err
}

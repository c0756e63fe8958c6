package benchkit

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// StartNATS starts the stock nats-server (upstream's, no orderstore) with opts, logging as they say
// (NoLog: nothing), and declares what the bench needs with declare, on a connection signed in with
// auth; stop shuts the server down.
func StartNATS(opts *server.Options, declare func(context.Context, jetstream.JetStream) error, auth ...nats.Option) (url string, stop func(), err error) {
	s, err := server.NewServer(opts)
	if err != nil {
		return "", nil, err
	}
	s.ConfigureLogger()
	s.Start()
	stop = func() { s.Shutdown(); s.WaitForShutdown() }
	if !s.ReadyForConnections(10 * time.Second) {
		stop()
		return "", nil, errors.New("nats-server not ready")
	}
	nc, err := nats.Connect(s.ClientURL(), auth...)
	if err != nil {
		stop()
		return "", nil, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err == nil {
		err = declare(context.Background(), js)
	}
	if err != nil {
		stop()
		return "", nil, err
	}
	return s.ClientURL(), stop, nil
}

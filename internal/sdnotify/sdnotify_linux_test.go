package sdnotify

import (
	"strconv"
	"testing"
	"time"
)

// Abstract unix sockets exist on Linux only (the _linux file name limits
// this test to it).
func TestNotifyAbstractSocket(t *testing.T) {
	name := "@orderstore-sdnotify-test-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	ln := listen(t, name)
	t.Setenv(EnvSocket, name)

	sent, err := Notify("READY=1")
	if !sent || err != nil {
		t.Fatalf("Notify(abstract) = (%v, %v), want (true, nil)", sent, err)
	}
	if got := recv(t, ln); got != "READY=1" {
		t.Errorf("datagram = %q, want %q", got, "READY=1")
	}
}

package orderstore

import (
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/orderstore/orderstore/internal/natsconf"
)

// nats-server recovers every stream inside its start, before its client
// port opens: minutes on a large store after a crash, which the systemd
// unit waits for (TimeoutStartSec). The embedded server must not give up
// sooner: embedded's default bound (60s) applied to a Start whose ctx has
// no deadline, as `orderstore run`'s has not, and start-up failed with
// "start embedded nats: not ready after 1m0s".
func TestNATSStartWaitsAsLongAsTheUnit(t *testing.T) {
	unit, err := os.ReadFile("packaging/systemd/orderstore.service")
	if err != nil {
		t.Fatal(err)
	}
	var limit time.Duration
	for line := range strings.Lines(string(unit)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "TimeoutStartSec="); ok {
			if limit, err = time.ParseDuration(strings.Replace(v, "min", "m", 1)); err != nil {
				t.Fatalf("TimeoutStartSec=%s: %v", v, err)
			}
		}
	}
	if limit == 0 {
		t.Fatal("the unit sets no TimeoutStartSec")
	}
	id, err := natsconf.NewIdentity()
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.JetStream.StoreDir = t.TempDir()
	ec, err := cfg.embeddedConfig(slog.New(slog.DiscardHandler), id)
	if err != nil {
		t.Fatal(err)
	}
	if ec.ReadyTimeout < limit {
		t.Errorf("nats' start is bounded by %s (0: embedded's 60s) when Start's ctx has no deadline, want at least the unit's TimeoutStartSec %s",
			ec.ReadyTimeout, limit)
	}
}

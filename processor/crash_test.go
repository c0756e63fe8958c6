package processor_test

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore"
	"github.com/orderstore/orderstore/embedded/embeddedtest"
	"github.com/orderstore/orderstore/internal/testkit"
	"github.com/orderstore/orderstore/processor"
)

var crashKills = flag.Int("crash.kills", 12, "SIGKILLs of the processor child in TestCrashBetweenApplyAndAck (CI: 12; try 100)")

// With ORDERSTORE_PROCESSOR_CHILD=<url> the test binary is a processor
// process: it applies the projection until it is killed.
func TestMain(m *testing.M) {
	if url := os.Getenv("ORDERSTORE_PROCESSOR_CHILD"); url != "" {
		os.Exit(childProcessor(url))
	}
	os.Exit(m.Run())
}

func childProcessor(url string) int {
	nc, err := nats.Connect(url)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	js, _ := jetstream.New(nc)
	cfg := orderstore.DefaultConfig()
	testConfig(&cfg)
	kv, err := js.KeyValue(context.Background(), cfg.Processor.ProjectionBucket)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	proj := processor.NewProjection(js, kv)
	hkv, err := js.KeyValue(context.Background(), cfg.Processor.HistoryBucket())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	proj.SetHistory(hkv)
	pc := cfg.ProcessorConfig(proj)
	pc.BatchSize = 50 // small batches: kills land between apply and ack more often
	pc.Logger = nil
	p, err := processor.New(js, pc)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	done := make(chan error, 1)
	go func() { done <- p.Run(context.Background()) }()
	select {
	case <-p.Ready():
		fmt.Println("child running") // the parent kills it from now on
		err = <-done
	case err = <-done:
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// Test 2: the processor process is SIGKILLed at random points, many times,
// while it applies and acks; after a restart the projection is exactly
// the fold: no event applied twice, none lost.
func TestCrashBetweenApplyAndAck(t *testing.T) {
	e := newEnv(t)
	e.publish(t, orderEvents(10_000, 1_000, 200, 7))
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(42, 42))
	applied := func() uint64 {
		l, _ := processor.Lag(context.Background(), e.js, e.cfg.Stream.Name, e.cfg.Processor.Durable)
		return l.AckFloor
	}
	for kill := 0; kill < *crashKills; kill++ {
		cmd := exec.Command(self, "-test.run=^$")
		cmd.Env = append(os.Environ(), "ORDERSTORE_PROCESSOR_CHILD="+e.srv.ClientURL())
		out := &testkit.LockedBuffer{}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		before := applied()
		// Let it work for a random while, then kill it mid-flight.
		embeddedtest.WaitFor(t, 10*time.Second, func() error {
			if !strings.Contains(out.String(), "child running") {
				return fmt.Errorf("child not running: %s", out.String())
			}
			return nil
		})
		// Sometimes shorter, sometimes longer than ack_wait (1s), so kills
		// land both on fresh work and on redeliveries.
		time.Sleep(time.Duration(50+r.IntN(1500)) * time.Millisecond)
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		if ws := cmd.ProcessState.Sys().(syscall.WaitStatus); !ws.Signaled() {
			t.Fatalf("child exited on its own: %v\n%s", cmd.ProcessState, out.String())
		}
		t.Logf("kill %d: ack floor %d -> %d, kv writes so far %d", kill, before, applied(), kvRevision(t, e))
		if applied() >= 10_000 {
			break
		}
	}
	// Restart: one clean processor finishes the work (redeliveries of what
	// the killed ones held come after ack_wait).
	proj := e.projection(t)
	p, _ := e.start(t, proj)
	e.waitCaughtUp(t, 60*time.Second)
	e.checkProjection(t)
	// The history index too: every applied event listed once, in order,
	// and the state as of random points the oracle's.
	e.checkHistory(t, proj, 60, r)
	dls, _, _ := processor.ListDeadLetters(context.Background(), e.js, e.cfg.Processor.DeadLetterStream, 1, 100_000)
	for _, d := range dls {
		if !strings.Contains(d.Error, "without a result") {
			t.Errorf("unexpected dead letter %+v", d)
		}
	}
	t.Logf("final processor: %+v; %d events dead-lettered after max_deliver deliveries cut short by kills", p.Stats(), len(dls))
}

// kvRevision is the projection bucket's last sequence: how many writes
// the processors made.
func kvRevision(t testing.TB, e *env) uint64 {
	s, err := e.js.Stream(context.Background(), "KV_"+e.cfg.Processor.ProjectionBucket)
	if err != nil {
		t.Fatal(err)
	}
	info, _ := s.Info(context.Background())
	return info.State.LastSeq
}

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/orderstore/orderstore/embedded/embeddedtest"
	"github.com/orderstore/orderstore/internal/testkit"
)

// The durable guard, with the real NATS CLI against the built binary,
// while a producer publishes: binding, pulling, deleting, editing or
// pausing the processor's durable (order-processor) is refused with the
// guard's explanation and takes no event from the processor, so every
// acknowledged event ends up in the projection (GET /v1/orders/{id} on
// the admin listener). A durable of one's own, made the way the
// explanation says, works. As the anonymous loopback client (no users
// configured), and with users: an admin and a reader.
func TestDurableGuardWithNATSCLI(t *testing.T) {
	cli := natsCLI(t)
	t.Run("anonymous", func(t *testing.T) {
		guardScenario(t, cli, "", nil, []cliUser{{name: "anonymous"}})
	})
	t.Run("users", func(t *testing.T) {
		users := `[[server.users]]
user = "p1"
password = "p1-password-1"
role = "producer"

[[server.users]]
user = "ops"
password = "ops-password-1"
role = "admin"

[[server.users]]
user = "dash"
password = "dash-password-1"
role = "reader"
`
		guardScenario(t, cli, users, []nats.Option{nats.UserInfo("p1", "p1-password-1")},
			[]cliUser{{name: "ops", user: "ops", password: "ops-password-1"}, {name: "dash", user: "dash", password: "dash-password-1"}})
	})
}

type cliUser struct{ name, user, password string }

// The guard's explanation, in what natscli prints of it.
var guardSays = []string{"orderstore's own consumer", "make a durable of your own", "nats consumer add ORDER_EVENTS my-worker"}

func guardScenario(t *testing.T, cli, users string, producer []nats.Option, clients []cliUser) {
	dir := t.TempDir()
	cfg := writeConfig(t, dir, filepath.Join(dir, "store"), users+"\n[admin]\nlisten = \"127.0.0.1:0\"\n")
	p := start(t, nil, "run", "-config", cfg)
	natsURL := p.waitReady()
	adminURL := p.adminURL(t)
	home := t.TempDir() // no contexts from the machine's ~/.config/nats
	natsCmd := func(u cliUser, args ...string) *exec.Cmd {
		a := []string{"-s", natsURL, "--timeout", "5s"}
		if u.user != "" {
			a = append(a, "--user", u.user, "--password", u.password)
		}
		cmd := exec.Command(cli, append(a, args...)...)
		cmd.Env = append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+home)
		return cmd
	}
	run := func(u cliUser, args ...string) (string, error) {
		out, err := natsCmd(u, args...).CombinedOutput()
		return string(out), err
	}
	// refused: the command fails, says what the guard says, and shows no
	// event.
	refused := func(t *testing.T, u cliUser, args ...string) {
		t.Helper()
		out, err := run(u, args...)
		if err == nil {
			t.Errorf("%s: nats %s succeeded on orderstore's own consumer:\n%s", u.name, strings.Join(args, " "), tail(out, 1500))
		}
		for _, w := range guardSays {
			if !strings.Contains(out, w) {
				t.Errorf("%s: nats %s: output lacks the guard's %q:\n%s", u.name, strings.Join(args, " "), w, tail(out, 1500))
			}
		}
		if strings.Contains(out, `"order_id"`) || strings.Contains(out, "str seq:") {
			t.Errorf("%s: nats %s was given an event of orderstore's own consumer:\n%s", u.name, strings.Join(args, " "), tail(out, 1500))
		}
	}

	// The producer publishes with acks until told to stop; each event's
	// order and stream sequence are kept.
	nc, err := nats.Connect(natsURL, producer...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	type ackedEvent struct {
		order string
		seq   uint64
	}
	var (
		mu      sync.Mutex
		acked   []ackedEvent
		pubErrs []error
	)
	stop := make(chan struct{})
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		statuses := []string{"created", "paid", "shipped", "delivered"}
		for i := 0; i < 100_000; i++ {
			select {
			case <-stop:
				return
			default:
			}
			order := fmt.Sprintf("g-%d", i%25)
			st := statuses[(i/25)%4]
			ack, err := js.Publish(context.Background(), "orders."+st, fmt.Appendf(nil, `{"order_id":%q,"status":%q}`, order, st),
				jetstream.WithMsgID(fmt.Sprintf("guard-%d", i)))
			mu.Lock()
			if err != nil {
				pubErrs = append(pubErrs, err)
			} else {
				acked = append(acked, ackedEvent{order, ack.Sequence})
			}
			mu.Unlock()
		}
	}()
	stopProducer := func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		<-produced
	}
	defer stopProducer()
	ackedSoFar := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(acked)
	}
	// Events are arriving (and the processor is behind or busy with
	// some) before the first client tries.
	embeddedtest.WaitFor(t, 30*time.Second, func() error {
		if n := ackedSoFar(); n < 100 {
			return fmt.Errorf("%d events acked", n)
		}
		return nil
	})

	attempts := 0
	for _, u := range clients {
		t.Run(u.name+"/sub", func(t *testing.T) {
			attempts++
			// nats sub on a durable runs until stopped: what it printed by
			// then is what a user sees.
			cmd := natsCmd(u, "sub", "--stream", "ORDER_EVENTS", "--durable", "order-processor")
			var out testkit.LockedBuffer
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			defer func() {
				select {
				case <-exited:
				default:
					cmd.Process.Kill()
					<-exited
				}
				if s := out.String(); strings.Contains(s, "Received JetStream message") || strings.Contains(s, `"order_id"`) {
					t.Errorf("%s: nats sub --durable order-processor was given %d events of orderstore's own consumer:\n%s", u.name, strings.Count(s, "Received JetStream message"), tail(s, 1500))
				}
			}()
			// natscli v0.5.0 sets no error handler on its pull: the guard's
			// answer (a 409 status saying why) reaches no screen, so what
			// holds is that the pull reached the guard and nothing was
			// consumed (docs/security.md says so).
			guardCount := func() int {
				g, _ := getJSON(t, adminURL+"/v1/status", 200)["guard"].(map[string]any)
				n, _ := g["foreign_consumer_requests"].(float64)
				return int(n)
			}
			before := guardCount()
			embeddedtest.WaitFor(t, 15*time.Second, func() error {
				if n := guardCount(); n <= before {
					return fmt.Errorf("%s: nats sub --durable order-processor: no pull reached the durable guard (%d); it printed:\n%s", u.name, n, tail(out.String(), 1500))
				}
				return nil
			})
		})
		t.Run(u.name+"/next", func(t *testing.T) {
			attempts++
			refused(t, u, "consumer", "next", "ORDER_EVENTS", "order-processor")
		})
		t.Run(u.name+"/edit", func(t *testing.T) {
			attempts++
			refused(t, u, "consumer", "edit", "ORDER_EVENTS", "order-processor", "--max-pending", "5", "-f")
		})
		t.Run(u.name+"/pause", func(t *testing.T) {
			attempts++
			refused(t, u, "consumer", "pause", "ORDER_EVENTS", "order-processor", "1h", "-f")
		})
		t.Run(u.name+"/rm", func(t *testing.T) {
			attempts++
			refused(t, u, "consumer", "rm", "-f", "ORDER_EVENTS", "order-processor")
			// Still there, unchanged and not paused.
			out, err := run(u, "consumer", "info", "ORDER_EVENTS", "order-processor", "--json")
			if err != nil {
				t.Fatalf("%s: nats consumer info order-processor after the refusals: %v\n%s", u.name, err, out)
			}
			var ci struct {
				Config struct {
					MaxAckPending int `json:"max_ack_pending"`
				} `json:"config"`
				Paused bool `json:"paused"`
			}
			if err := json.Unmarshal([]byte(out), &ci); err != nil {
				t.Fatalf("consumer info --json: %v\n%s", err, out)
			}
			if ci.Paused || ci.Config.MaxAckPending == 5 {
				t.Errorf("%s: order-processor was changed by a client: %s", u.name, out)
			}
		})
		t.Run(u.name+"/own durable", func(t *testing.T) {
			name := "my-worker-" + u.name
			if out, err := run(u, "consumer", "add", "ORDER_EVENTS", name, "--pull", "--deliver", "all", "--ack", "explicit", "--defaults"); err != nil {
				t.Fatalf("%s: nats consumer add %s: %v\n%s", u.name, name, err, out)
			}
			out, err := run(u, "consumer", "next", "ORDER_EVENTS", name, "--count", "2")
			if err != nil || !strings.Contains(out, "str seq: 1 ") || !strings.Contains(out, "str seq: 2 ") || !strings.Contains(out, "Acknowledged message") {
				t.Errorf("%s: nats consumer next %s: %v\n%s", u.name, name, err, out)
			}
			out, err = run(u, "sub", "--stream", "ORDER_EVENTS", "--durable", name, "--count", "2")
			if err != nil || !strings.Contains(out, "Received JetStream message: stream: ORDER_EVENTS seq: 3 ") {
				t.Errorf("%s: nats sub --durable %s: %v\n%s", u.name, name, err, out)
			}
			if out, err := run(u, "consumer", "rm", "-f", "ORDER_EVENTS", name); err != nil {
				t.Errorf("%s: nats consumer rm %s: %v\n%s", u.name, name, err, out)
			}
		})
	}

	// Every acknowledged event is in the projection: each order has all
	// its events, up to the last one acked.
	stopProducer()
	mu.Lock()
	events := append([]ackedEvent(nil), acked...)
	errs := pubErrs
	mu.Unlock()
	if len(errs) > 0 {
		t.Errorf("%d publishes failed while clients tried the processor's durable, the first: %v", len(errs), errs[0])
	}
	type want struct {
		events  int
		lastSeq uint64
	}
	wants := map[string]*want{}
	for _, e := range events {
		w := wants[e.order]
		if w == nil {
			w = &want{}
			wants[e.order] = w
		}
		w.events++
		w.lastSeq = max(w.lastSeq, e.seq)
	}
	embeddedtest.WaitFor(t, 60*time.Second, func() error {
		for order, w := range wants {
			r := get(t, "GET", adminURL+"/v1/orders/"+url.PathEscape(order), "")
			if r.code != 200 {
				return fmt.Errorf("GET /v1/orders/%s = %d: %s", order, r.code, r.body)
			}
			var o struct {
				Events  int    `json:"events"`
				LastSeq uint64 `json:"last_seq"`
			}
			if err := json.Unmarshal(r.body, &o); err != nil {
				return fmt.Errorf("GET /v1/orders/%s: %v: %s", order, err, r.body)
			}
			if o.Events != w.events || o.LastSeq != w.lastSeq {
				return fmt.Errorf("order %s in the projection: %d events up to seq %d; acked: %d events up to seq %d", order, o.Events, o.LastSeq, w.events, w.lastSeq)
			}
		}
		return nil
	})
	t.Logf("%d events acked while the clients tried, all %d orders complete in the projection", len(events), len(wants))

	// The guard counted the refusals; the processor read nothing back
	// (nobody took an event from it).
	st := getJSON(t, adminURL+"/v1/status", 200)
	guard, _ := st["guard"].(map[string]any)
	if n, _ := guard["foreign_consumer_requests"].(float64); int(n) < attempts {
		t.Errorf("guard.foreign_consumer_requests = %v after %d refused commands: %v", guard["foreign_consumer_requests"], attempts, st["guard"])
	}
	proc, _ := st["processor"].(map[string]any)
	if r, _ := proc["recovered"].(float64); r != 0 {
		t.Errorf("processor.recovered = %v: a client took events from the processor's durable", r)
	}

	p.signal(syscall.SIGTERM)
	if code := p.wait(30 * time.Second); code != 0 {
		t.Errorf("exit %d", code)
	}
}

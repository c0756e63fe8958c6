package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/orderstore/orderstore/internal/testenv"
)

// quickStart is one command of the README's quick start and the text its
// "# →" comment says it prints ("" for none).
type quickStart struct{ cmd, want string }

// readmeQuickStart returns the commands of the first sh block under the
// README's "## Quick start": a line ending in '\' goes on on the next, and
// a comment "# → text" (on the command's line or alone on the next)
// names a text its output holds.
func readmeQuickStart(t *testing.T) []quickStart {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(b), "\n## Quick start\n")
	if !ok {
		t.Fatal(`README.md has no "## Quick start"`)
	}
	sec, _, _ = strings.Cut(sec, "\n## ")
	_, block, ok := strings.Cut(sec, "```sh\n")
	if !ok {
		t.Fatal("the quick start has no sh block")
	}
	block, _, _ = strings.Cut(block, "```")
	comment := regexp.MustCompile(`\s{2,}#\s?(.*)$`)
	var out []quickStart
	cont := false
	for _, line := range strings.Split(strings.TrimRight(block, "\n"), "\n") {
		text, note := line, ""
		if m := comment.FindStringSubmatchIndex(line); m != nil {
			text, note = line[:m[0]], line[m[2]:m[3]]
		} else if strings.HasPrefix(strings.TrimSpace(line), "#") {
			text, note = "", strings.TrimPrefix(strings.TrimSpace(line), "#")
		}
		text = strings.TrimSpace(text)
		want := ""
		if w, ok := strings.CutPrefix(strings.TrimSpace(note), "→ "); ok {
			want = w
		}
		switch {
		case cont:
			out[len(out)-1].cmd += " " + strings.TrimSuffix(text, `\`)
		case text != "":
			out = append(out, quickStart{cmd: strings.TrimSuffix(text, `\`)})
		}
		cont = strings.HasSuffix(text, `\`)
		if want != "" {
			if len(out) == 0 {
				t.Fatalf("README quick start: %q before any command", line)
			}
			out[len(out)-1].want = want
		}
	}
	return out
}

// The README's quick start, run as a reader would (bash, curl, natscli
// v0.5.0 and the orderstore binary on PATH, in an empty directory) against
// a fresh instance: every command succeeds and prints what its "# →"
// comment says. The one liberty: orderstore listens on free ports, which
// the commands get in place of the defaults (4222 through NATS_URL, 8222
// in their URLs).
func TestReadmeQuickStart(t *testing.T) {
	testenv.Require(t, testenv.Curl())
	steps := readmeQuickStart(t)
	if len(steps) < 5 || steps[0].cmd != "orderstore run &" || steps[len(steps)-1].cmd != "kill %1; wait" {
		t.Fatalf("the quick start is not run, commands, stop: %q", steps)
	}
	cli := natsCLI(t)
	dir, home := t.TempDir(), t.TempDir()
	cfg := writeConfig(t, t.TempDir(), filepath.Join(dir, "orderstore-data"), "[admin]\nlisten = \"127.0.0.1:0\"\n")
	p := start(t, nil, "run", "-config", cfg)
	natsURL := p.waitReady()
	admin := p.adminURL(t)
	env := append(os.Environ(),
		"PATH="+filepath.Dir(binary(t))+string(os.PathListSeparator)+filepath.Dir(cli)+string(os.PathListSeparator)+os.Getenv("PATH"),
		"ORDERSTORE_TEST_MAIN=1", // the test binary is the orderstore binary
		"NATS_URL="+natsURL, "ORDERSTORE_ADMIN_URL="+admin, "ORDERSTORE_CONFIG=",
		"HOME="+home, "XDG_CONFIG_HOME="+home)
	for _, s := range steps[1 : len(steps)-1] {
		cmdline := strings.ReplaceAll(s.cmd, "http://127.0.0.1:8222", admin)
		var out []byte
		var err error
		// A hang detector, not a timing bound: the projection follows
		// the stream in milliseconds, and a read may come before it.
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			c := exec.Command("bash", "-c", cmdline)
			c.Dir, c.Env = dir, env
			out, err = c.CombinedOutput()
			if err == nil && strings.Contains(string(out), s.want) || time.Now().After(deadline) {
				break
			}
		}
		if err != nil || !strings.Contains(string(out), s.want) {
			t.Fatalf("README quick start: %s\n%v; want output holding %q:\n%s\norderstore's log:\n%s", s.cmd, err, s.want, out, p.stderr)
		}
	}
	p.signal(syscall.SIGTERM)
	if code := p.wait(30 * time.Second); code != 0 {
		t.Errorf("%s: exit %d, want 0", steps[len(steps)-1].cmd, code)
	}
}

package testenv

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// Require skips a test whose tool is missing, naming it, and fails it
// instead when AllEnv is set; with nothing missing it does nothing.
func TestRequire(t *testing.T) {
	if os.Getenv("TESTENV_CHILD") == "1" {
		Require(t, "a frobnicator: apt-get install -y frobnicator")
		t.Fatal("Require returned although something is missing")
	}
	Require(t, "") // nothing missing: the test goes on
	run := func(all bool) (string, error) {
		cmd := exec.Command(os.Args[0], "-test.run=^TestRequire$", "-test.v")
		env := []string{"TESTENV_CHILD=1"}
		for _, e := range os.Environ() {
			if !strings.HasPrefix(e, AllEnv+"=") {
				env = append(env, e)
			}
		}
		if all {
			env = append(env, AllEnv+"=1")
		}
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := run(false)
	if err != nil || !strings.Contains(out, "--- SKIP") || !strings.Contains(out, "a frobnicator: apt-get install -y frobnicator") {
		t.Errorf("without %s: want a skip naming what to install, got %v:\n%s", AllEnv, err, out)
	}
	out, err = run(true)
	if err == nil || !strings.Contains(out, "--- FAIL") || !strings.Contains(out, "a frobnicator") {
		t.Errorf("with %s: want a failure naming what is missing, got %v:\n%s", AllEnv, err, out)
	}
}

//go:build unix

package testkit

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/orderstore/orderstore/embedded/embeddedtest"
)

// Child is the test binary run again, as a child process of one kind (its TestMain or an init reads
// env to choose): it prints a line "READY ..." on stdout once it is ready; everything else it
// prints is kept in Out.
type Child struct {
	Cmd *exec.Cmd
	Out *LockedBuffer
	// Ready is the rest of the child's READY line.
	Ready string
	done  chan struct{}
}

// StartChild runs the test binary (no tests of its own: -test.run=^$) with env added and waits, up
// to 2 minutes, until it prints its READY line; the error is its output when it exited before. It
// is killed with SIGKILL when the test ends (a cleanup registered now, so it runs before those
// registered earlier: before a file system the child uses is unmounted, also when the test fails).
func StartChild(t testing.TB, what string, env ...string) (*Child, error) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "-test.run=^$")
	// GOTRACEBACK=all: Quit's stack dump shows every goroutine.
	cmd.Env = append(append(os.Environ(), "GOTRACEBACK=all"), env...)
	c := &Child{Cmd: cmd, Out: &LockedBuffer{}, done: make(chan struct{})}
	cmd.Stderr = c.Out
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "READY"); ok {
				select {
				case ready <- strings.TrimSpace(rest):
				default:
				}
			}
			fmt.Fprintln(c.Out, sc.Text())
		}
		cmd.Wait()
		close(c.done)
	}()
	t.Cleanup(func() {
		c.Kill(t)
		if t.Failed() {
			t.Logf("%s (pid %d) output:\n%s", what, cmd.Process.Pid, c.Out)
		}
	})
	select {
	case c.Ready = <-ready:
		return c, nil
	case <-c.done:
		return c, errors.New(c.Out.String())
	case <-time.After(2 * time.Minute):
		t.Fatalf("%s is not ready after 2m:\n%s", what, c.Out)
		return nil, nil
	}
}

// Exited reports whether the child exited.
func (c *Child) Exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// Kill is kill -9: nothing of the child's shutdown runs. It waits until the child exited.
func (c *Child) Kill(t testing.TB) {
	if c.Exited() {
		return
	}
	c.Cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-c.done:
	case <-time.After(30 * time.Second):
		t.Errorf("the child (pid %d) did not exit 30s after SIGKILL", c.Cmd.Process.Pid)
	}
}

// Quit sends SIGQUIT: the Go runtime prints every goroutine's stack to Out and exits. It is what a
// test does before it fails on a child that stopped making progress, to show where. It waits until
// the child exited.
func (c *Child) Quit(t testing.TB) {
	if c.Exited() {
		return
	}
	c.Cmd.Process.Signal(syscall.SIGCONT) // a stopped child cannot dump
	c.Cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case <-c.done:
	case <-time.After(30 * time.Second):
		c.Kill(t)
	}
}

// StopProcess sends SIGSTOP and waits until every thread of the child stopped (Linux: reads /proc).
func (c *Child) StopProcess(t testing.TB) {
	t.Helper()
	pid := c.Cmd.Process.Pid
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	embeddedtest.WaitFor(t, 10*time.Second, func() error {
		tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		if err != nil {
			return err
		}
		for _, task := range tasks {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
			if err != nil {
				continue // the thread is gone
			}
			// "pid (comm) S ...": the state follows the last ')'
			s := string(b)
			if i := strings.LastIndexByte(s, ')'); i < 0 || i+2 >= len(s) || (s[i+2] != 'T' && s[i+2] != 't') {
				return fmt.Errorf("thread %s not stopped yet", task.Name())
			}
		}
		return nil
	})
}

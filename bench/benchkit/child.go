package benchkit

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"
)

// Child is a target running in a process of its own: a bench's program run again, which prints
// "READY <fields>" once its target serves and stops it when its stdin closes.
type Child struct {
	Cmd   *exec.Cmd
	In    io.WriteCloser
	Out   *bufio.Scanner // the lines after READY
	Ready []string       // the fields after READY
}

// StartChild runs this program again (after wrap, e.g. taskset and its arguments, when set) with
// -dir dir (created if missing) and args, with stderr as the child's, and waits for its READY line.
func StartChild(wrap []string, dir string, stderr io.Writer, args ...string) (*Child, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	args = slices.Concat(wrap, []string{self, "-dir", dir}, args)
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stderr = stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &Child{Cmd: cmd, In: in, Out: bufio.NewScanner(out)}
	if c.Out.Scan() {
		if f := strings.Fields(c.Out.Text()); len(f) > 1 && f[0] == "READY" {
			c.Ready = f[1:]
			return c, nil
		}
	}
	line := c.Out.Text()
	cmd.Process.Kill()
	cmd.Wait()
	return nil, fmt.Errorf("did not start: %q %v", line, c.Out.Err())
}

// Stop closes the child's stdin (it then stops its target) and waits
// for it to exit, killing it after two minutes.
func (c *Child) Stop() {
	c.In.Close()
	done := make(chan struct{})
	go func() { c.Cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		c.Cmd.Process.Kill()
		<-done
	}
}

// Package benchkit holds what the benchmarks under bench/ (bench/README.md) share: measuring and
// formatting, an appliance on a store of its own (Env), events, publishing. Benchmarks only.
package benchkit

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// LoadAvg is /proc/loadavg's 1, 5 and 15 minute averages ("n/a" elsewhere).
func LoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "n/a"
}

// Secs formats d in seconds: two decimals below 10 s, one above.
func Secs(d time.Duration) string {
	if d < 10*time.Second {
		return fmt.Sprintf("%.2f s", d.Seconds())
	}
	return fmt.Sprintf("%.1f s", d.Seconds())
}

// Num formats n with thousands separators.
func Num(n int) string {
	switch {
	case n < 0:
		return "-" + Num(-n)
	case n < 1000:
		return strconv.Itoa(n)
	}
	return fmt.Sprintf("%s,%03d", Num(n/1000), n%1000)
}

// Logf writes a progress line to stderr, with the time of day.
func Logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

// Sleep waits d or until ctx is done.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Poll calls done at once and then every every until it reports true or an error, or ctx ends.
func Poll(ctx context.Context, every time.Duration, done func() (bool, error)) error {
	for {
		if ok, err := done(); ok || err != nil {
			return err
		}
		if err := Sleep(ctx, every); err != nil {
			return err
		}
	}
}

// FreePorts are n TCP ports of 127.0.0.1 that were free a moment ago.
func FreePorts(n int) []int {
	out := make([]int, n)
	for i := range out {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			log.Fatal(err)
		}
		defer l.Close()
		out[i] = l.Addr().(*net.TCPAddr).Port
	}
	return out
}

// CPUProfile starts a CPU profile into file name; its stop is idempotent and logs the name.
func CPUProfile(name string) (func(), error) {
	f, err := os.Create(name)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			pprof.StopCPUProfile()
			f.Close()
			Logf("   CPU profile: %s", name)
		})
	}, nil
}

// Ms formats d in milliseconds with two decimals.
func Ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond)) }

// PerEvent is cpu per event in microseconds ("-" when unknown).
func PerEvent(cpu time.Duration, n int) string {
	if cpu <= 0 || n <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f µs", float64(cpu)/float64(time.Microsecond)/float64(n))
}

// CPUShare is cpu as a percentage of d (200% is two cores busy).
func CPUShare(cpu, d time.Duration) string {
	if cpu <= 0 || d <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", 100*cpu.Seconds()/d.Seconds())
}

// MachineBusy is the CPU time every process of the machine has used since boot (/proc/stat: all but
// idle and iowait); 0 without /proc/stat. The machine here is shared: a step that shared the cores
// is slower for it, and the benches report what other processes used.
func MachineBusy() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return 0
	}
	var ticks int64
	for i, v := range f[1:] {
		if i == 3 || i == 4 || i >= 8 { // idle, iowait; guest time is counted in user
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0
		}
		ticks += n
	}
	return time.Duration(ticks) * (time.Second / 100) // USER_HZ
}

// Machine describes the machine a bench runs on: CPUs, Go, the embedded
// nats-server's version (natsVersion), the load average.
func Machine(natsVersion string) string {
	return fmt.Sprintf("machine: %d CPUs (GOMAXPROCS %d), %s %s/%s, nats-server %s (embedded), load average %s",
		runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.Version(), runtime.GOOS, runtime.GOARCH, natsVersion, LoadAvg())
}

// Command is the command line that repeats this run of the bench at pkg
// ("./bench/history"), its arguments quoted where a shell needs it.
func Command(pkg string) string {
	args := []string{"go", "run", pkg}
	for _, a := range os.Args[1:] {
		if strings.ContainsAny(a, " \t\"'$`\\") {
			a = strconv.Quote(a)
		}
		args = append(args, a)
	}
	return strings.Join(args, " ")
}

// PassFail is "PASS" or "FAIL".
func PassFail(ok bool) string {
	if ok {
		return "PASS"
	}
	return "FAIL"
}

// StepProfile starts a CPU profile of one step, written to PREFIX-step.pprof, when prefix (a
// bench's -cpuprofile) is set; the returned stop is idempotent.
func StepProfile(prefix, step string) (func(), error) {
	if prefix == "" {
		return func() {}, nil
	}
	return CPUProfile(fmt.Sprintf("%s-%s.pprof", prefix, step))
}

// Others measures the CPU the machine's other processes use.
type Others struct {
	busy, cpu time.Duration
	t         time.Time
}

// StartOthers starts measuring the other processes' CPU.
func StartOthers() Others { return Others{MachineBusy(), CPUTime(), time.Now()} }

// Share is the other processes' CPU since o, as "35%" of one core; "-" where it cannot be told.
func (o Others) Share() string {
	busy, cpu, d := MachineBusy(), CPUTime(), time.Since(o.t)
	if o.busy <= 0 || busy <= 0 || o.cpu <= 0 || d <= 0 {
		return "-"
	}
	x := max((busy-o.busy)-(cpu-o.cpu), 0)
	return fmt.Sprintf("%.0f%%", 100*x.Seconds()/d.Seconds())
}

// Rate is n per second of d; 0 when d is not positive.
func Rate(n int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// Quantile is the q quantile of sorted s (the nearest rank); 0 when s is empty.
func Quantile(s []time.Duration, q float64) time.Duration {
	if len(s) == 0 {
		return 0
	}
	i := int(float64(len(s))*q+0.999999) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// Middle is the middle element of s sorted by cmp (of an even count, the
// upper of the two in the middle); s stays as it is.
func Middle[T any](s []T, cmp func(a, b T) int) T {
	c := slices.Clone(s)
	slices.SortFunc(c, cmp)
	return c[len(c)/2]
}

// TempDir makes *dir, a bench's -dir left "", a fresh temporary directory named after pattern
// (os.MkdirTemp); the cleanup it returns removes that one, and does nothing when *dir was set
// (which it creates if missing). It exits when it cannot.
func TempDir(dir *string, pattern string) (cleanup func()) {
	if *dir != "" {
		if err := os.MkdirAll(*dir, 0o755); err != nil {
			log.Fatal(err)
		}
		return func() {}
	}
	d, err := os.MkdirTemp("", pattern)
	if err != nil {
		log.Fatal(err)
	}
	*dir = d
	return func() { os.RemoveAll(d) }
}

// Results prints printed after an empty line and writes report (markdown)
// to the file out names, if any, and says so.
func Results(printed, report, out string) error {
	fmt.Println()
	fmt.Print(printed)
	if out == "" {
		return nil
	}
	if err := os.WriteFile(out, []byte(report), 0o644); err != nil {
		return err
	}
	fmt.Println("\nresults written to", out)
	return nil
}

// Run runs a bench's run until it returns or SIGINT or SIGTERM cancels
// its context; an error is printed after name and exits 1.
func Run(name string, run func(context.Context) error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		os.Exit(1)
	}
}

// UsageIf prints the flags' usage and exits 2 when bad.
func UsageIf(bad bool) {
	if bad {
		flag.Usage()
		os.Exit(2)
	}
}

// UsageErr prints err (a flag's value refused) and exits 2 when it is not nil.
func UsageErr(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
}

// Ints parses flag's comma-separated positive numbers; empty items are skipped.
func Ints(flag, s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("-%s: %q is not a positive number", flag, f)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("-%s %q: want one or more numbers", flag, s)
	}
	return out, nil
}

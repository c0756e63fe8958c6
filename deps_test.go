package orderstore_test

import (
	"os/exec"
	"strings"
	"testing"
)

func goList(t *testing.T, args ...string) []string {
	t.Helper()
	out, err := exec.Command("go", append([]string{"list"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("go list %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}

const mod = "github.com/orderstore/orderstore"

// The nats-only test helper stays nats-only: a test that wants a bare
// broker does not link TOML, the processor, the admin listener or
// Prometheus.
func TestEmbeddedTestDependsOnNATSOnly(t *testing.T) {
	for _, p := range goList(t, "-deps", mod+"/embedded/embeddedtest") {
		switch {
		case p == mod+"/embedded", p == mod+"/embedded/embeddedtest", strings.HasPrefix(p, mod+"/natsserver/"):
		case strings.HasPrefix(p, mod):
			t.Errorf("embeddedtest depends on %s", p)
		case strings.Contains(p, "BurntSushi/toml"), strings.Contains(p, "prometheus"):
			t.Errorf("embeddedtest depends on %s", p)
		}
	}
}

// cmd/orderstore is the CLI only: it reaches the appliance through the
// root package and the file through internal/config, never the parts
// (internal/sdnotify and internal/durable are helpers of its own: systemd's
// notifications, a restored backup written durably; status is the JSON it
// decodes).
func TestCommandImportsOnlyTheLibrary(t *testing.T) {
	imports := strings.Fields(goList(t, "-f", "{{join .Imports \" \"}}", "./cmd/orderstore")[0])
	has := map[string]bool{}
	for _, p := range imports {
		has[p] = true
		switch {
		case p == mod, p == mod+"/internal/config", p == mod+"/internal/sdnotify", p == mod+"/internal/durable", p == mod+"/internal/duration", p == mod+"/status":
		case strings.HasPrefix(p, mod):
			t.Errorf("cmd/orderstore imports %s directly", p)
		case strings.HasPrefix(p, "github.com/nats-io/"):
			t.Errorf("cmd/orderstore imports %s: wiring belongs in the root package", p)
		}
	}
	if !has[mod] || !has[mod+"/internal/config"] {
		t.Errorf("cmd/orderstore imports %q, want the root package and internal/config", imports)
	}
}

// Examples, benchmarks and the public packages' external tests compile
// against public packages only: what they show, a user can write.
func TestExamplesAndBenchmarksUsePublicPackages(t *testing.T) {
	lines := goList(t, "-f", "{{.ImportPath}}|{{join .Imports \" \"}}|{{join .XTestImports \" \"}}|{{join .TestImports \" \"}}", "./...")
	for _, l := range lines {
		f := strings.SplitN(l, "|", 4)
		pkg, imports, xtest, tests := f[0], strings.Fields(f[1]), strings.Fields(f[2]), strings.Fields(f[3])
		if strings.HasPrefix(pkg, mod+"/internal/") || strings.HasPrefix(pkg, mod+"/cmd/") {
			continue
		}
		check := xtest
		if strings.HasPrefix(pkg, mod+"/bench/") {
			// A benchmark's own tests too: what it measures, a user can run.
			check = append(append(check, imports...), tests...)
		}
		for _, p := range check {
			// internal/testenv says what a test needs of the machine
			// (root, FUSE, a browser) and internal/testkit holds the
			// shared test helpers: test infrastructure, not parts.
			if strings.HasPrefix(p, mod+"/internal/") && p != mod+"/internal/testenv" && p != mod+"/internal/testkit" {
				t.Errorf("%s (its examples, benchmarks or external tests) imports %s", pkg, p)
			}
		}
	}
}

// The layering, from the bottom up: each package imports orderstore's
// packages of the layers below it only, never one above (nor the root
// package, except the CLI, the config mapping, the test kits and the
// benchmarks, which sit on top). A new package needs a line here.
func TestLayering(t *testing.T) {
	layer := map[string]int{
		// beneath the leaves: a read from a stream's leader, for the processor and the root package
		"internal/leaderget": 0,
		// leaves: nats, the stdlib, or nothing of orderstore's (but the read above)
		"embedded": 1, "processor": 1, "internal/bytesize": 1, "internal/duration": 1,
		"internal/storedir": 2, "internal/backup": 2, "internal/durable": 1, "internal/sdnotify": 1, "internal/lograte": 1,
		"internal/powerloss": 1, "internal/testenv": 1, "internal/hint": 1, "internal/validate": 1, "internal/orderindex": 1,
		// nats-server's accounts, permissions, cluster, leaf and TLS options of orderstore's config
		"internal/natsconf": 2,
		// the parts the root package wires
		"embedded/embeddedtest": 2, "bootstrap": 2, "status": 2,
		"internal/testkit": 3, "internal/ingest": 3,
		"admin": 4, "internal/natsrun": 4, "internal/recovery": 4, "internal/edgehub": 4, "internal/rebuild": 4,
		"": 5, // the root package: the API and the start/stop sequence
		// on top of the library
		"internal/config": 6, "orderstoretest": 6, "cmd/orderstore": 7,
		"bench/benchkit": 6, "bench/groupcommit": 7, "bench/history": 7, "bench/overload": 7, "bench/processor": 7, "bench/rebuild": 7, "bench/scaleout": 7, "bench/encryption": 7, "bench/orders": 7,
	}
	name := func(p string) string { return strings.TrimPrefix(strings.TrimPrefix(p, mod), "/") }
	// natsserver/ is the patched copy of nats-server, below everything:
	// its packages keep upstream's own layering and import nothing else of
	// orderstore's (TestPatchedServerImportsOnlyItself).
	const natsserver = "natsserver/"
	for _, l := range goList(t, "-f", "{{.ImportPath}}|{{join .Imports \" \"}}", "./...") {
		pkg, imports, _ := strings.Cut(l, "|")
		if strings.HasPrefix(name(pkg), natsserver) {
			continue
		}
		lp, ok := layer[name(pkg)]
		if !ok {
			t.Errorf("package %s has no layer in TestLayering: say where it sits", pkg)
			continue
		}
		for _, p := range strings.Fields(imports) {
			if p != mod && !strings.HasPrefix(p, mod+"/") {
				continue
			}
			if strings.HasPrefix(name(p), natsserver) {
				continue
			}
			if li, ok := layer[name(p)]; !ok || li >= lp {
				t.Errorf("%s (layer %d) imports %s (layer %d): a package reaches only down", pkg, lp, p, li)
			}
		}
	}
}

// The patched copy of nats-server imports nothing of orderstore's but
// itself, and never upstream's module (two servers' packages in one binary).
func TestPatchedServerImportsOnlyItself(t *testing.T) {
	lines := goList(t, "-f", "{{.ImportPath}}|{{join .Imports \" \"}}", "./natsserver/...")
	if len(lines) < 10 {
		t.Fatalf("go list ./natsserver/... lists %d packages, want the server and its subpackages", len(lines))
	}
	for _, l := range lines {
		pkg, imports, _ := strings.Cut(l, "|")
		for _, p := range strings.Fields(imports) {
			switch {
			case strings.HasPrefix(p, mod+"/natsserver/"):
			case strings.HasPrefix(p, mod), strings.HasPrefix(p, "github.com/nats-io/nats-server/"):
				t.Errorf("%s imports %s", pkg, p)
			}
		}
	}
}

package orderstore

import (
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// docItems returns the numbered items of the doc of func name in
// appliance.go (a method of *Appliance when method is set), each joined with its
// continuation lines, without the number and the final ';' or '.'.
func docItems(t *testing.T, name string, method bool) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "appliance.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	var doc string
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Name.Name != name || (fn.Recv != nil) != method {
			continue
		}
		if method {
			star, ok := fn.Recv.List[0].Type.(*ast.StarExpr)
			if !ok {
				continue
			}
			if id, ok := star.X.(*ast.Ident); !ok || id.Name != "Appliance" {
				continue
			}
		}
		doc = fn.Doc.Text()
	}
	if doc == "" {
		t.Fatalf("no doc on %s in appliance.go", name)
	}
	item := regexp.MustCompile(`^\s*(\d+)\.\s+(.*)$`)
	var got []string
	in := false
	for _, line := range strings.Split(doc, "\n") {
		if m := item.FindStringSubmatch(line); m != nil {
			got = append(got, m[2])
			in = true
			continue
		}
		if in && strings.HasPrefix(line, "  ") && strings.TrimSpace(line) != "" {
			got[len(got)-1] += " " + strings.TrimSpace(line)
			continue
		}
		in = false
	}
	for i := range got {
		got[i] = strings.TrimRight(got[i], ";.")
	}
	return got
}

// Start's doc lists exactly the steps it runs, in order: "validate cfg",
// then one item per entry of startSteps, with that entry's text. A step
// added, moved or removed without its doc line fails here.
func TestStartDocIsTheStepTable(t *testing.T) {
	got := docItems(t, "Start", false)
	want := []string{startValidateDoc}
	for _, s := range startSteps {
		want = append(want, s.doc)
	}
	if !slices.Equal(got, want) {
		t.Errorf("Start's doc lists %d steps, the table runs %d:\n got %q\nwant %q", len(got), len(want), got, want)
	}
}

// startValidateDoc is Start's first step, before the table's.
const startValidateDoc = "validate cfg and the files it names (TLS certificates, schemas)"

// docs/operations.md's "Start-up, in order" lists Start's steps, in its
// doc's words.
func TestOperationsDocIsTheStepTable(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(b), "\n## Start-up, in order\n")
	if !ok {
		t.Fatal(`docs/operations.md has no "## Start-up, in order"`)
	}
	sec, _, _ = strings.Cut(sec, "\n## ")
	item := regexp.MustCompile(`^(\d+)\.\s+(.*)$`)
	var got []string
	in := false
	for _, line := range strings.Split(sec, "\n") {
		if m := item.FindStringSubmatch(line); m != nil {
			got = append(got, m[2])
			in = true
			continue
		}
		if in && strings.HasPrefix(line, "   ") && strings.TrimSpace(line) != "" {
			got[len(got)-1] += " " + strings.TrimSpace(line)
			continue
		}
		in = false
	}
	want := []string{startValidateDoc}
	for _, s := range startSteps {
		want = append(want, s.doc)
	}
	if !slices.Equal(got, want) {
		t.Errorf("docs/operations.md lists %d start-up steps, Start runs %d:\n got %q\nwant %q", len(got), len(want), got, want)
	}
}

// Close's doc lists what stopping each step does, last step first: the
// stop texts of startSteps in reverse order.
func TestCloseDocIsTheStepTable(t *testing.T) {
	got := docItems(t, "Close", true)
	var want []string
	for _, s := range slices.Backward(startSteps) {
		if s.stop != "" {
			want = append(want, s.stop)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("Close's doc lists %d steps, the table stops %d:\n got %q\nwant %q", len(got), len(want), got, want)
	}
}

// Every step that starts a component says what stopping it does (its
// line in Close's doc), checked on an appliance running every step that
// starts one here: the processor, the admin listener, group commit and
// the projection rebuild runner.
func TestEveryStoppedStepIsInCloseDoc(t *testing.T) {
	cfg := DefaultConfig()
	cfg.JetStream.StoreDir = t.TempDir()
	cfg.JetStream.MaxFileStore = 2 << 30
	cfg.JetStream.DiskHeadroom = 16 << 20
	cfg.Stream.MaxBytes = 1 << 30
	cfg.Server.Port = -1
	cfg.Admin.Listen = "127.0.0.1:0"
	cfg.Logger = slog.New(slog.DiscardHandler)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(ctx)
	if len(a.sup.stages) != len(startSteps) {
		t.Fatalf("%d stages for %d steps", len(a.sup.stages), len(startSteps))
	}
	started := 0
	for i, st := range a.sup.stages {
		var names []string
		for _, p := range st.parts {
			names = append(names, p.name)
		}
		started += len(names)
		if len(names) > 0 && startSteps[i].stop == "" {
			t.Errorf("step %q starts %q and has no line in Close's doc", startSteps[i].doc, names)
		}
	}
	if started < 10 {
		t.Errorf("%d components started, want at least 10 (one per step that starts one)", started)
	}
}

package orderstore

import (
	"go/ast"
	"go/parser"
	"go/token"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// Start's doc lists exactly the steps it runs, in order: "validate cfg",
// then one item per entry of startSteps, with that entry's text. A step
// added, moved or removed without its doc line fails here.
func TestStartDocIsTheStepTable(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "appliance.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	var doc string
	for _, d := range f.Decls {
		if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv == nil && fn.Name.Name == "Start" {
			doc = fn.Doc.Text()
		}
	}
	if doc == "" {
		t.Fatal("no doc on Start in appliance.go")
	}
	// The numbered items, each joined with its continuation lines, without
	// the number and the final ';' or '.'.
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
	want := []string{"validate cfg"}
	for _, s := range startSteps {
		want = append(want, s.doc)
	}
	if !slices.Equal(got, want) {
		t.Errorf("Start's doc lists %d steps, the table runs %d:\n got %q\nwant %q", len(got), len(want), got, want)
	}
}

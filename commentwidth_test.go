package orderstore_test

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

// Every comment line of orderstore's own Go (the patched nats-server copy
// is upstream's) is at most 100 characters wide: what and why, readable
// without scrolling.
func TestCommentLinesFit(t *testing.T) {
	const width = 100
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case "natsserver", ".git", "node_modules":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		for n := 1; sc.Scan(); n++ {
			line := sc.Text()
			// A tab is 4 columns wide, as gofmt's output is usually read.
			if w := utf8.RuneCountInString(strings.ReplaceAll(line, "\t", "    ")); w > width && strings.HasPrefix(strings.TrimSpace(line), "//") {
				t.Errorf("%s:%d: a comment line %d columns wide, more than %d", path, n, w, width)
			}
		}
		return sc.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
}

package config

import (
	"bytes"
	"encoding"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"
)

var updateReference = flag.Bool("update", false, "write docs/configuration.md from the key table")

// referencePath is the configuration reference, generated from the key
// table (the file's types, their tags and their field comments) and the
// defaults of [Default].
const referencePath = "../../docs/configuration.md"

// docs/configuration.md is the key table: every key of the file, its type,
// default and description, in the file's order. It fails when they differ;
// `go test ./internal/config -run TestConfigurationReference -update`
// writes it again.
func TestConfigurationReference(t *testing.T) {
	got := reference(t)
	if *updateReference {
		if err := os.WriteFile(referencePath, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(referencePath)
	if err != nil {
		t.Fatalf("%v (write it with -update)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the key table: run go test ./internal/config -run TestConfigurationReference -update and review the diff", referencePath)
	}
}

// fieldDocs maps "importpath.Type.Field" to the field's comment, from the
// packages whose types make up the file.
func fieldDocs(t *testing.T) map[string]string {
	t.Helper()
	docs := map[string]string{}
	for dir, pkg := range map[string]string{
		".":           "github.com/orderstore/orderstore/internal/config",
		"../..":       "github.com/orderstore/orderstore",
		"../natsconf": "github.com/orderstore/orderstore/internal/natsconf",
	} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range files {
			if strings.HasSuffix(name, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ParseComments)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(f, func(n ast.Node) bool {
				ts, ok := n.(*ast.TypeSpec)
				if !ok {
					return true
				}
				st, ok := ts.Type.(*ast.StructType)
				if !ok {
					return true
				}
				for _, fl := range st.Fields.List {
					text := strings.TrimSpace(fl.Doc.Text())
					if c := strings.TrimSpace(fl.Comment.Text()); c != "" {
						text = strings.TrimSpace(text + " " + c)
					}
					for _, id := range fl.Names {
						docs[pkg+"."+ts.Name.Name+"."+id.Name] = strings.Join(strings.Fields(text), " ")
					}
				}
				return true
			})
		}
	}
	return docs
}

// reference renders the configuration reference.
func reference(t *testing.T) []byte {
	docs := fieldDocs(t)
	var b bytes.Buffer
	b.WriteString(`# Configuration reference

<!-- Generated from internal/config's key table by
go test ./internal/config -run TestConfigurationReference -update
Do not edit: the test fails when this file and the table differ. -->

orderstore reads one TOML file (` + "`orderstore run -config FILE`" + `, or the path in
` + "`$ORDERSTORE_CONFIG`" + `). Every key is optional: an absent key keeps the default
below. ` + "`orderstore check -config FILE`" + ` validates a file and names each problem by
its key; ` + "`orderstore check -print`" + ` prints the whole configuration in force.
Relative paths are relative to the file's directory.

Units: a **duration** is a string such as ` + "`\"30s\"`, `\"5m\"`, `\"1h30m\"`, `\"720h\"`" + `; a
**size** is a string with a unit, powers of 1024: ` + "`\"512MiB\"`, `\"1GiB\"`, `\"1024B\"`" + ` (a bare number is refused; -1 is unlimited where a key says so).

`)
	var missing []string
	def := reflect.ValueOf(Default())
	ct := reflect.TypeOf(Config{})
	for i := range ct.NumField() {
		f := ct.Field(i)
		key := tomlName(f)
		fmt.Fprintf(&b, "## [%s]\n\n", key)
		if d := typeDoc(f.Type); d != "" {
			fmt.Fprintf(&b, "%s\n\n", d)
		}
		table(&b, docs, &missing, key, f.Type, def.Field(i))
	}
	enc, err := Default().Encode()
	if err != nil {
		t.Fatal(err)
	}
	b.WriteString("## Example: the defaults as a file\n\n" +
		"`orderstore check -print` prints this (and the values of a file, when given one):\n\n```toml\n")
	b.Write(enc)
	b.WriteString("```\n")
	if len(missing) > 0 {
		t.Errorf("keys without a description (a comment on their field): %s", strings.Join(missing, ", "))
	}
	return b.Bytes()
}

// typeDoc is the file table's one-line description.
func typeDoc(rt reflect.Type) string {
	return map[string]string{
		"Server":           "The NATS client listener and its users.",
		"JetStream":        "The store: where and how events are kept on disk.",
		"Stream":           "The ORDER_EVENTS stream and its retention limits.",
		"Processor":        "The built-in durable processor, the projection it writes and what it owns.",
		"Admin":            "The HTTP admin listener: health, metrics, the API and the dashboard.",
		"ClusterConfig":    "A NATS cluster of orderstore nodes (docs/topologies.md).",
		"LeafNode":         "Leaf-node links between edges and a hub (docs/topologies.md).",
		"HubConfig":        "A hub: an aggregate stream sourcing every edge's stream.",
		"ValidationConfig": "JSON Schema validation of events at ingest.",
		"Log":              "The process log.",
	}[rt.Name()]
}

// leafTypes are written as one value, not as a table.
var leafTypes = map[reflect.Type]bool{
	reflect.TypeOf(Duration(0)): true, reflect.TypeOf(ByteSize(0)): true, reflect.TypeOf(SyncPolicy{}): true,
	reflect.TypeOf(Subjects{}): true, reflect.TypeOf(time.Duration(0)): true,
}

// table writes the keys of struct type rt (value v) under prefix: its
// leaves as one table, then its sub-tables.
func table(b *bytes.Buffer, docs map[string]string, missing *[]string, prefix string, rt reflect.Type, v reflect.Value) {
	type sub struct {
		key string
		rt  reflect.Type
		v   reflect.Value
		arr bool
	}
	var subs []sub
	b.WriteString("| key | type | default | meaning |\n|---|---|---|---|\n")
	for i := range rt.NumField() {
		f := rt.Field(i)
		key := tomlName(f)
		if key == "" || key == "-" || !f.IsExported() {
			continue
		}
		ft := f.Type
		switch {
		case ft.Kind() == reflect.Struct && !leafTypes[ft]:
			subs = append(subs, sub{prefix + "." + key, ft, v.Field(i), false})
			continue
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct && !leafTypes[ft.Elem()]:
			subs = append(subs, sub{prefix + "." + key, ft.Elem(), reflect.Zero(ft.Elem()), true})
			continue
		}
		doc := docs[rt.PkgPath()+"."+rt.Name()+"."+f.Name]
		if names, _ := libTag(f); doc == "" && len(names) > 0 {
			// The library field the key maps onto says it.
			for _, lt := range []string{rt.Name() + "Config", rt.Name()} {
				if d := docs["github.com/orderstore/orderstore."+lt+"."+names[0]]; d != "" && doc == "" {
					doc = d
				}
			}
		}
		if doc == "" {
			*missing = append(*missing, prefix+"."+key)
		}
		fmt.Fprintf(b, "| `%s` | %s | %s | %s |\n", key, typeName(ft), defaultValue(v.Field(i)), cell(byKeys(doc, rt)))
	}
	b.WriteString("\n")
	for _, s := range subs {
		if s.arr {
			fmt.Fprintf(b, "### [[%s]]\n\n", s.key)
		} else {
			fmt.Fprintf(b, "### [%s]\n\n", s.key)
		}
		table(b, docs, missing, s.key, s.rt, s.v)
	}
}

var (
	goPath      = regexp.MustCompile(`\b[A-Z][A-Za-z]+\.[A-Z][A-Za-z]+\b`)
	goField     = regexp.MustCompile(`\b[A-Z][A-Za-z]*\b`)
	defaultNote = regexp.MustCompile(`(?:^|\s)[Dd]efault (?:"[^"]*"|\[[^\]]*\]|[^"\[])*?[.;](?:\s|$)`)
)

// byKeys restates a field comment for the file: Go paths (Stream.MaxAge)
// and the names of rt's fields become keys, and "Default ..." notes go
// (the table has a column for them).
func byKeys(doc string, rt reflect.Type) string {
	doc = goPath.ReplaceAllStringFunc(doc, func(p string) string {
		if k := KeyOf(p); k != "" {
			return "`" + k + "`"
		}
		return p
	})
	keys := map[string]string{}
	for i := range rt.NumField() {
		f := rt.Field(i)
		k := tomlName(f)
		if k == "" || k == "-" {
			continue
		}
		keys[f.Name] = k
		if names, _ := libTag(f); len(names) > 0 {
			keys[names[0]] = k
		}
	}
	doc = goField.ReplaceAllStringFunc(doc, func(w string) string {
		if k, ok := keys[w]; ok {
			return "`" + k + "`"
		}
		return w
	})
	return strings.Join(strings.Fields(defaultNote.ReplaceAllString(doc, " ")), " ")
}

func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

// typeName is a key's type as the reference states it.
func typeName(rt reflect.Type) string {
	switch rt {
	case reflect.TypeOf(Duration(0)), reflect.TypeOf(time.Duration(0)):
		return "duration"
	case reflect.TypeOf(ByteSize(0)):
		return "size"
	case reflect.TypeOf(SyncPolicy{}):
		return `duration or "always"`
	case reflect.TypeOf(Subjects{}):
		return "subjects (allow / deny lists)"
	}
	switch rt.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int64, reflect.Int32, reflect.Uint64, reflect.Uint32:
		return "integer"
	case reflect.Slice:
		return "list of " + typeName(rt.Elem())
	case reflect.Map:
		return "table of " + typeName(rt.Elem())
	}
	return rt.Kind().String()
}

// defaultValue is a key's default in TOML, or "none".
func defaultValue(v reflect.Value) string {
	if !v.IsValid() || v.IsZero() {
		switch v.Kind() {
		case reflect.Bool:
			return "`false`"
		case reflect.Int, reflect.Int64, reflect.Int32:
			return "`0`"
		}
		return "none"
	}
	if m, ok := v.Interface().(encoding.TextMarshaler); ok {
		if txt, err := m.MarshalText(); err == nil {
			return "`\"" + string(txt) + "\"`"
		}
	}
	switch v.Kind() {
	case reflect.String:
		return "`\"" + v.String() + "\"`"
	case reflect.Slice:
		var parts []string
		for i := range v.Len() {
			parts = append(parts, strings.Trim(defaultValue(v.Index(i)), "`"))
		}
		return "`[" + strings.Join(parts, ", ") + "]`"
	}
	return fmt.Sprintf("`%v`", v.Interface())
}

package config

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
)

// The file's one table of keys is its types' struct tags. A field's toml
// tag is its key; it maps onto the orderstore.Config field of the same Go
// name, or of the name its lib tag gives. Three more forms of lib tag:
//
//	lib:"-"                    only the file has it (read by hand: token_file,
//	                           password_file, [log])
//	lib:"SyncInterval,rule"    named for messages, mapped by a rule in toOrderstore/fromOrderstore
//	lib:"Publish,PublishDeny"  a Subjects value: its allow and deny lists are two fields
//
// From the table come the mapping both ways (toOrderstore, fromOrderstore), the keys that name a
// problem the appliance finds ([KeyOf]) and, through the toml tags, what `check -print` writes.
// TestKeyTableCoversTheLibrary fails when a field of orderstore.Config has no key and is not listed
// as the library's alone.

var subjectsType = reflect.TypeOf(Subjects{})

// libTag is a file field's lib tag: the orderstore.Config field(s) it maps
// onto ("-" none) and whether a rule maps it.
func libTag(f reflect.StructField) (names []string, rule bool) {
	tag, ok := f.Tag.Lookup("lib")
	if !ok {
		return []string{f.Name}, false
	}
	if tag == "-" {
		return nil, false
	}
	tag, rule = strings.CutSuffix(tag, ",rule")
	return strings.Split(tag, ","), rule
}

// tomlName is a field's key within its table.
func tomlName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
	return name
}

// copyFields copies every tabled field between the file struct f and the
// orderstore struct o, both addressable: into o when toLib, else into f.
func copyFields(f, o reflect.Value, toLib bool) {
	for i := range f.NumField() {
		sf := f.Type().Field(i)
		names, rule := libTag(sf)
		if len(names) == 0 || rule {
			continue
		}
		fvs := []reflect.Value{f.Field(i)}
		if sf.Type == subjectsType {
			fvs = []reflect.Value{f.Field(i).Field(0), f.Field(i).Field(1)} // Allow, Deny
		}
		for j, fv := range fvs {
			ov := o.FieldByName(names[j])
			if !ov.IsValid() {
				panic(fmt.Sprintf("config: %s.%s: lib field %q is not in %s", f.Type().Name(), sf.Name, names[j], o.Type()))
			}
			if toLib {
				copyValue(ov, fv, true)
			} else {
				copyValue(fv, ov, false)
			}
		}
	}
}

// copyValue sets dst from src: a struct field by field through the table (fileToLib says which of
// the two is the file's), a slice element by element, a map value by value, anything else converted
// (Duration to time.Duration, ByteSize to int64, and back).
func copyValue(dst, src reflect.Value, fileToLib bool) {
	switch {
	case src.Kind() == reflect.Struct && src.Type() != dst.Type():
		if fileToLib {
			copyFields(src, dst, true)
		} else {
			copyFields(dst, src, false)
		}
	case (src.Kind() == reflect.Map || src.Kind() == reflect.Slice) && src.IsNil():
		dst.SetZero()
	case src.Kind() == reflect.Map:
		m := reflect.MakeMapWithSize(dst.Type(), src.Len())
		for it := src.MapRange(); it.Next(); {
			v := reflect.New(dst.Type().Elem()).Elem()
			copyValue(v, it.Value(), fileToLib)
			m.SetMapIndex(it.Key().Convert(dst.Type().Key()), v)
		}
		dst.Set(m)
	case src.Kind() == reflect.Slice:
		s := reflect.MakeSlice(dst.Type(), src.Len(), src.Len())
		for i := range src.Len() {
			copyValue(s.Index(i), src.Index(i), fileToLib)
		}
		dst.Set(s)
	default:
		dst.Set(src.Convert(dst.Type()))
	}
}

// KeyOf names the field of orderstore.Config at the Go path field (as a
// [orderstore.FieldError] has it, e.g. "Server.Users[0].Name") by the
// file's key ("server.users[0].user"); "" if the file has no key for it.
func KeyOf(field string) string {
	ft := reflect.TypeOf(Config{})
	var keys []string
	segs := strings.Split(field, ".")
	for k, seg := range segs {
		name, _, _ := strings.Cut(seg, "[")
		idx := seg[len(name):] // "[0]", or ""
		var next reflect.Type
		for i := 0; i < ft.NumField() && next == nil; i++ {
			sf := ft.Field(i)
			names, _ := libTag(sf)
			if j := slices.Index(names, name); j >= 0 {
				key := tomlName(sf)
				if j == 1 && sf.Type == subjectsType {
					key += ".deny" // publish = { deny = [...] }
				}
				keys, next = append(keys, key+idx), sf.Type
			}
		}
		if next == nil {
			return ""
		}
		ft = elem(next)
		if (ft.Kind() != reflect.Struct || ft == subjectsType) && k < len(segs)-1 {
			return "" // a leaf: nothing may follow it
		}
	}
	return strings.Join(keys, ".")
}

func elem(t reflect.Type) reflect.Type {
	if t.Kind() == reflect.Slice {
		return t.Elem()
	}
	return t
}

// knownKeys are every key of the file, dotted ("admin.listen"; an array of
// tables' keys under its name: "server.users.role").
func knownKeys() []string {
	var keys []string
	var walk func(prefix string, t reflect.Type)
	walk = func(prefix string, t reflect.Type) {
		for i := range t.NumField() {
			f := t.Field(i)
			name := tomlName(f)
			if name == "" || name == "-" || !f.IsExported() {
				continue
			}
			key := strings.TrimPrefix(prefix+"."+name, ".")
			keys = append(keys, key)
			if ft := elem(f.Type); ft.Kind() == reflect.Struct && ft != subjectsType && ft != reflect.TypeOf(SyncPolicy{}) {
				walk(key, ft)
			}
		}
	}
	walk("", reflect.TypeOf(Config{}))
	return keys
}

// keyAliases are words people write for a key's last word.
var keyAliases = map[string]string{
	"address": "listen", "adress": "listen", "addr": "listen", "bind": "listen",
	"dir": "store_dir", "data_dir": "store_dir", "datadir": "store_dir", "path": "store_dir",
	"max_age_days": "max_age", "retention": "max_age",
	"pass": "password", "passwd": "password", "username": "user", "name": "name",
}

// suggest is the known key an unknown one most likely meant ("" none):
// one in the same table whose last word is a known alias of the unknown
// one's, or the nearest by edit distance (at most 2, or a third of it).
func suggest(unknown string) string {
	unknown = strings.ToLower(unknown)
	i := strings.LastIndex(unknown, ".") // -1: no table, all of it the last word
	table, last := unknown[:max(i, 0)], unknown[i+1:]
	best, bestD := "", max(2, len(last)/3)+1
	for _, k := range knownKeys() {
		j := strings.LastIndex(k, ".")
		kt, kl := k[:max(j, 0)], k[j+1:]
		if kt != table {
			// An unknown table: the nearest table of the same depth.
			if table == "" || strings.Count(k, ".") != strings.Count(unknown, ".") || kl != last {
				continue
			}
			if d := editDistance(kt, table); d < bestD {
				best, bestD = k, d
			}
			continue
		}
		if keyAliases[last] == kl {
			return k
		}
		if d := editDistance(kl, last); d < bestD {
			best, bestD = k, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

package config

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/orderstore/orderstore"
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
// From the table come the mapping both ways (toOrderstore, fromOrderstore),
// the keys that name a problem the appliance finds ([KeyOf]) and, through
// the toml tags, what `check -print` writes. TestKeyTableCoversTheLibrary
// fails when a field of orderstore.Config has no key and is not listed as
// the library's alone.

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
	names = strings.Split(tag, ",")
	if names[len(names)-1] == "rule" {
		return names[:len(names)-1], true
	}
	return names, false
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
		fv := f.Field(i)
		if sf.Type == subjectsType {
			allow, deny := o.FieldByName(names[0]), o.FieldByName(names[1])
			s := fv.Addr().Interface().(*Subjects)
			if toLib {
				allow.Set(reflect.ValueOf(clone(s.Allow)))
				deny.Set(reflect.ValueOf(clone(s.Deny)))
			} else {
				s.Allow, s.Deny = clone(allow.Interface().([]string)), clone(deny.Interface().([]string))
			}
			continue
		}
		ov := o.FieldByName(names[0])
		if !ov.IsValid() {
			panic(fmt.Sprintf("config: %s.%s: lib field %q is not in %s", f.Type().Name(), sf.Name, names[0], o.Type()))
		}
		if toLib {
			copyValue(ov, fv, true)
		} else {
			copyValue(fv, ov, false)
		}
	}
}

// copyValue sets dst from src: a struct field by field through the table
// (fileToLib says which of the two is the file's), a slice element by
// element, anything else converted (Duration to time.Duration, ByteSize
// to int64, and back).
func copyValue(dst, src reflect.Value, fileToLib bool) {
	switch {
	case src.Kind() == reflect.Struct && src.Type() != dst.Type():
		if fileToLib {
			copyFields(src, dst, true)
		} else {
			copyFields(dst, src, false)
		}
	case src.Kind() == reflect.Slice:
		if src.IsNil() {
			dst.SetZero()
			return
		}
		s := reflect.MakeSlice(dst.Type(), src.Len(), src.Len())
		for i := range src.Len() {
			copyValue(s.Index(i), src.Index(i), fileToLib)
		}
		dst.Set(s)
	default:
		dst.Set(src.Convert(dst.Type()))
	}
}

func clone(s []string) []string {
	if s == nil {
		return nil
	}
	return append([]string{}, s...)
}

// KeyOf names the field of orderstore.Config at the Go path field (as a
// [orderstore.FieldError] has it, e.g. "Server.Users[0].Name") by the
// file's key ("server.users[0].user"); "" if the file has no key for it.
func KeyOf(field string) string {
	ft, ot := reflect.TypeOf(Config{}), reflect.TypeOf(orderstore.Config{})
	var keys []string
	segs := strings.Split(field, ".")
	for k, seg := range segs {
		name, idx, _ := strings.Cut(seg, "[")
		if idx != "" {
			idx = "[" + idx
		}
		var (
			found bool
			next  reflect.StructField
			key   string
		)
		for i := 0; i < ft.NumField() && !found; i++ {
			sf := ft.Field(i)
			names, _ := libTag(sf)
			for j, n := range names {
				if n == name {
					found, next, key = true, sf, tomlName(sf)
					if j == 1 && sf.Type == subjectsType {
						key += ".deny" // publish = { deny = [...] }
					}
				}
			}
		}
		if !found {
			return ""
		}
		keys = append(keys, key+idx)
		of, _ := ot.FieldByName(name)
		ft, ot = elem(next.Type), elem(of.Type)
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

package main

import (
	"bytes"
	"io"
	"testing"

	"github.com/go-json-experiment/json/jsontext"
)

// BenchmarkFloor: what any approach pays before validating anything.
func BenchmarkFloor(b *testing.B) {
	ev := benchEvent()
	b.Run("jsontext_token_walk_no_tree", func(b *testing.B) {
		b.ReportAllocs()
		d := jsontext.NewDecoder(bytes.NewReader(nil))
		for b.Loop() {
			d.Reset(bytes.NewBuffer(ev))
			for {
				if _, err := d.ReadToken(); err == io.EOF {
					break
				} else if err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("orderstore_decode_map_tree", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := decode(ev); err != nil {
				b.Fatal(err)
			}
		}
	})
}

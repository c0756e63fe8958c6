package processor_test

import (
	"bytes"
	"encoding/json"
	"slices"
	"testing"

	"github.com/orderstore/orderstore/processor"
)

// Stats and LagInfo are served as JSON as they are: snake_case keys.
func TestStatsAndLagJSON(t *testing.T) {
	tests := []struct {
		name string
		v    any
		want []string // keys, in order
	}{
		{"Stats", processor.Stats{Running: true, Processed: 1},
			[]string{"running", "processed", "failed", "dead_lettered", "poison", "duplicates", "last_applied_seq", "ack_errors", "removed_unprocessed", "recovered"}},
		{"LagInfo", processor.LagInfo{Pending: 1},
			[]string{"pending", "ack_pending", "redelivered", "ack_floor", "stream_last_seq", "seconds_behind"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := json.Marshal(tt.v)
			if err != nil {
				t.Fatal(err)
			}
			dec := json.NewDecoder(bytes.NewReader(b))
			var keys []string
			dec.Token() // {
			for dec.More() {
				k, _ := dec.Token()
				keys = append(keys, k.(string))
				var skip json.RawMessage
				if err := dec.Decode(&skip); err != nil {
					t.Fatal(err)
				}
			}
			if !slices.Equal(keys, tt.want) {
				t.Errorf("json.Marshal(%s) keys = %v, want %v (%s)", tt.name, keys, tt.want, b)
			}
		})
	}
}

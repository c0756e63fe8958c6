package processor

import (
	"strings"
	"testing"
)

// A payload that is not an order's JSON object is described in terms of
// the payload (where the syntax breaks, what JSON type it is), never of
// Go's types.
func TestJSONProblemSpeaksJSON(t *testing.T) {
	for data, want := range map[string]string{
		`[1,2]`:                        "the payload is a JSON array, want an object with an order_id",
		`"x"`:                          "the payload is a JSON string, want an object with an order_id",
		``:                             "the payload is empty",
		"  \n":                         "the payload is empty",
		`{"order_id": 5}`:              `field "order_id" is a JSON number, want a string`,
		"{\n  \"order_id\": \"a\",\n}": "at byte 22 (line 3, column 1)",
		`{"order_id":"a"`:              "not JSON: unexpected end of JSON input",
		`{"order_id":"a"} x`:           "(line 1, column 18)",
	} {
		_, _, err := parse("orders.created", []byte(data))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("parse(%q) = %v, want it to say %q", data, err, want)
		}
		if err != nil && (strings.Contains(err.Error(), "Go value") || strings.Contains(err.Error(), "struct")) {
			t.Errorf("parse(%q) = %v: Go's internals", data, err)
		}
	}
}

module github.com/orderstore/orderstore/bench/validators

go 1.26.8

require (
	github.com/go-json-experiment/json v0.0.0-20260623181947-01eb4420fa68
	github.com/google/jsonschema-go v0.4.3
	github.com/kaptinlin/jsonschema v0.9.8
	github.com/qri-io/jsonschema v0.2.1
	github.com/santhosh-tekuri/jsonschema/v6 v6.0.3
	golang.org/x/text v0.40.0
)

require (
	github.com/goccy/go-yaml v1.19.2 // indirect
	github.com/kaptinlin/jsonpointer v0.4.28 // indirect
	github.com/qri-io/jsonpointer v0.1.1 // indirect
)

package orderstore

import (
	"github.com/orderstore/orderstore/internal/hint"
	"github.com/orderstore/orderstore/internal/validate"
	"github.com/orderstore/orderstore/status"
)

// validator compiles the config's schemas (internal/validate): what
// Start and CheckFiles run.
func (c Config) validator() (*validate.Validator, error) {
	v, err := validate.Compile(c.Validation.Schemas, c.Validation.UnknownTypes, c.Validation.Func)
	if err != nil {
		return nil, hint.Wrap(err, "fix the schema files named above (`orderstore check` lists every problem)")
	}
	return v, nil
}

// ValidationErrCode is the err_code of an event refused by validation
// (its code is 422): a client tells it from the other refusals by it.
const ValidationErrCode = 10422

// validationStats reports what validation refused, for /metrics and
// /v1/status; nil when it checks nothing.
func (a *Appliance) validationStats() *status.ValidationStats {
	v := a.validator
	if !v.Enabled() {
		return nil
	}
	st := &status.ValidationStats{Schemas: v.Schemas(), UnknownTypes: a.cfg.Validation.UnknownTypes, Func: a.cfg.Validation.Func != nil}
	if st.UnknownTypes == "" {
		st.UnknownTypes = validate.Accept
	}
	for _, c := range v.Counts() {
		st.Rejected = append(st.Rejected, status.ValidationCount{Type: c.Type, Reason: c.Reason, Events: c.N})
		st.RejectedTotal += c.N
	}
	return st
}

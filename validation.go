package orderstore

import (
	"cmp"
	"errors"
	"time"

	"github.com/orderstore/orderstore/internal/hint"
	"github.com/orderstore/orderstore/internal/validate"
	"github.com/orderstore/orderstore/status"
)

// validator compiles the config's schemas (internal/validate): what Start and CheckFiles run.
func (c Config) validator() (*validate.Validator, error) {
	v, err := validate.Compile(c.Validation.Schemas, c.Validation.UnknownTypes, c.Validation.Func)
	if err != nil {
		return nil, &FileError{Err: hint.Wrap(err, "fix the schema files named above (`orderstore check` lists every problem)")}
	}
	return v, nil
}

// SlowSchemas names, for each event type whose schema the JSON Schema library alone checks (about
// 16 times the fast check's cost, docs/processor.md), the first keyword the fast check does not
// take, as a JSON pointer into the schema: `orderstore check` lists them.
func (c Config) SlowSchemas() (map[string]string, error) {
	v, err := c.validator()
	return v.Slow(), err
}

// ValidationErrCode is the err_code of an event refused by validation
// (its code is 422): a client tells it from the other refusals by it.
const ValidationErrCode = 10422

// validationStats is what validation refused (/metrics, /v1/status); nil if it checks nothing.
func (a *Appliance) validationStats() *status.ValidationStats {
	v := a.validator.Load()
	if !v.Enabled() {
		return nil
	}
	st := &status.ValidationStats{Schemas: v.Schemas(), UnknownTypes: cmp.Or(v.UnknownTypes(), validate.Accept), Func: v.HasFunc(), Slow: v.Slow()}
	for _, c := range v.Counts() {
		st.Rejected = append(st.Rejected, status.ValidationCount{Type: c.Type, Reason: c.Reason, Events: c.N})
		st.RejectedTotal += c.N
	}
	return st
}

// SetValidation replaces the schema validation of a running appliance: the schemas are compiled
// first (an error leaves the current ones in place), then every publish from the next on is checked
// against them. Stored events are never touched. The refusal counts carry over. `orderstore run`
// calls it on SIGHUP with the config file's [validation]. Its outcome is the last reload's: an
// error is a /readyz warning and orderstore_config_last_reload_successful 0 until one succeeds.
func (a *Appliance) SetValidation(vc ValidationConfig) (err error) {
	defer func() { a.reloaded(err) }()
	c := a.cfg
	c.Validation = vc
	if err := problems(c.validateValidation); err != nil {
		return err
	}
	v, err := c.validator()
	if err != nil {
		return err
	}
	v.InheritCounts(a.validator.Load())
	a.validator.Store(v)
	a.log.Info("validation set", "schemas", len(vc.Schemas), "unknown_types", v.UnknownTypes(), "func", vc.Func != nil)
	return nil
}

// ReloadFailed records a reload that failed before SetValidation (a config file that does not
// load), or restates SetValidation's error naming the file, as the last reload's outcome.
func (a *Appliance) ReloadFailed(err error) { a.reloaded(cmp.Or(err, errors.New("reload failed"))) }

// reloaded records a reload's outcome (nil: it succeeded) for /readyz, /metrics and /v1/status.
func (a *Appliance) reloaded(err error) {
	r := status.ConfigReload{Successful: err == nil, LastSuccess: time.Now()}
	if err != nil {
		r.LastSuccess, r.Error = a.reload.Load().LastSuccess, err.Error()
	}
	a.reload.Store(&r)
}

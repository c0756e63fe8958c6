package bootstrap

import "fmt"

// Error is a bootstrap failure with the remedy an operator needs. The CLI
// prints Hint on its own "hint:" line.
type Error struct {
	Op   string // "preflight", "declare stream", ...
	What string // the thing that failed, quoted: `store_dir "/var/lib/orderstore"`
	Err  error
	hint string
}

func (e *Error) Error() string {
	if e.What == "" {
		return fmt.Sprintf("%s: %v", e.Op, e.Err)
	}
	return fmt.Sprintf("%s: %s: %v", e.Op, e.What, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// Hint says what to do about the error; empty when there is nothing to add.
func (e *Error) Hint() string { return e.hint }

func errorf(op, what, hint string, err error) *Error {
	return &Error{Op: op, What: what, Err: err, hint: hint}
}

// Package hint is the one error type that carries a remedy: what the CLI
// prints on its "hint:" line. Callers outside find it with errors.As on
// an interface with a Hint() string method (orderstore.Hinted).
package hint

// Error is an error with the remedy for it.
type Error struct {
	Err  error
	Text string
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Hint says what to do about the error.
func (e *Error) Hint() string { return e.Text }

// Wrap attaches hint to err; an empty hint leaves err as it is.
func Wrap(err error, hint string) error {
	if hint == "" || err == nil {
		return err
	}
	return &Error{err, hint}
}

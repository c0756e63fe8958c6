package bootstrap

import (
	"fmt"

	"github.com/orderstore/orderstore/internal/hint"
)

// errorf is op's failure on what (quoted: `store_dir "/var/lib/orderstore"`; "" none) with the
// remedy an operator needs ("" none): the error's Hint, which the CLI prints on a "hint:" line.
func errorf(op, what, remedy string, err error) error {
	if what != "" {
		op += ": " + what
	}
	return hint.Wrap(fmt.Errorf("%s: %w", op, err), remedy)
}

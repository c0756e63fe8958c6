package config

import "fmt"

// Subjects is a user's publish or subscribe permission: in the file either
// a list of allowed subjects (publish = ["orders.>"]) or a table with both
// lists (publish = { allow = ["orders.>"], deny = ["orders.internal.>"] }).
type Subjects struct {
	Allow []string `toml:"allow,omitempty"`
	Deny  []string `toml:"deny,omitempty"`
}

// UnmarshalTOML takes the list or the table form.
func (s *Subjects) UnmarshalTOML(v any) error {
	strs := func(key string, v any) ([]string, error) {
		l, ok := v.([]any)
		if !ok {
			return nil, fmt.Errorf("publish/subscribe: %s must be a list of subjects", key)
		}
		out := make([]string, 0, len(l))
		for _, x := range l {
			str, ok := x.(string)
			if !ok {
				return nil, fmt.Errorf("publish/subscribe: %s must be a list of subject strings", key)
			}
			out = append(out, str)
		}
		return out, nil
	}
	switch x := v.(type) {
	case []any:
		l, err := strs("the value", x)
		*s = Subjects{Allow: l}
		return err
	case map[string]any:
		*s = Subjects{} // a failed decode is dropped whole (Parse)
		for k, v := range x {
			l, err := strs(k, v)
			if err != nil {
				return err
			}
			switch k {
			case "allow":
				s.Allow = l
			case "deny":
				s.Deny = l
			default:
				return fmt.Errorf("publish/subscribe: unknown key %q (want allow and deny)", k)
			}
		}
		return nil
	}
	return fmt.Errorf("publish/subscribe must be a list of subjects or { allow = [...], deny = [...] }")
}

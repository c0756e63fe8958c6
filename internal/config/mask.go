package config

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/BurntSushi/toml"
)

// syntaxError is pe with its position and the lines up to it, as BurntSushi's ErrorWithPosition
// shows them, with the whole value of a secret key (password, token, ...) masked, and what the
// parser's message quotes masked when a secret key is near: a syntax error must not copy a secret
// into the journal, and should show what is wrong with the rest.
func syntaxError(pe toml.ParseError, src []byte) string {
	var shown strings.Builder // the lines up to the error's, masked
	line, col := pe.Position.Line, pe.Position.Col
	lines := strings.Split(string(src), "\n")
	secretNear := secretKey.MatchString(pe.LastKey) || line < 1
	inString := multiLineStrings(lines)
	for i := max(1, line-2); i <= min(line, len(lines)); i++ {
		secretNear = secretNear || secretKey.MatchString(lines[i-1])
		l := MaskLine(strings.TrimRight(lines[i-1], "\r"))
		if inString[i-1] {
			l = "***" // inside a multi-line string: all of it is the value
		}
		fmt.Fprintf(&shown, "\n  %5d | %s", i, l)
	}
	msg := urlPassword.ReplaceAllString(pe.Message, "${1}***@")
	if secretNear {
		msg = maskQuoted(msg)
	}
	if line < 1 {
		return "syntax error: " + msg
	}
	if pe.LastKey != "" {
		msg += fmt.Sprintf(" (last key %q)", pe.LastKey)
	}
	return fmt.Sprintf("syntax error at line %d, column %d: %s", line, col, msg) + shown.String()
}

// multiLineStrings marks the lines that begin inside a multi-line string
// (""" or ”'), as far as a line-by-line look can tell.
func multiLineStrings(lines []string) []bool {
	in := make([]bool, len(lines))
	open := ""
	for i, l := range lines {
		in[i] = open != ""
		for rest := l; rest != ""; {
			if open == "" {
				j, k := strings.Index(rest, `"""`), strings.Index(rest, `'''`)
				switch {
				case j >= 0 && (k < 0 || j < k):
					open, rest = `"""`, rest[j+3:]
				case k >= 0:
					open, rest = `'''`, rest[k+3:]
				default:
					rest = ""
				}
			} else if j := strings.Index(rest, open); j >= 0 {
				open, rest = "", rest[j+3:]
			} else {
				rest = ""
			}
		}
	}
	return in
}

// secretKey matches the keys whose values are secrets.
var secretKey = regexp.MustCompile(`(?i)(password|passwd|token|secret|seed|credential|private)`)

// MaskLine returns a TOML source line with the whole value masked after a key that names a secret,
// and the password in a URL's user info masked. Table headers, comments and other keys' values are
// kept; a line that is no key = value (a stray secret?) is masked whole.
func MaskLine(line string) string {
	t := strings.TrimSpace(line)
	if t == "" || strings.HasPrefix(t, "#") || (strings.HasPrefix(t, "[") && !strings.Contains(t, "=")) {
		return line
	}
	// A secret key anywhere on the line (an inline table, an array of
	// tables written inline): everything from its '=' on is masked.
	if loc := secretKey.FindStringIndex(line); loc != nil {
		if j := strings.Index(line[loc[1]:], "="); j >= 0 {
			return maskStrings(line[:loc[1]+j]) + "= ***"
		}
		return "***"
	}
	if !strings.Contains(line, "=") {
		return "***" // not a key = value line: whatever it is, do not echo it
	}
	return urlPassword.ReplaceAllString(line, "${1}***@")
}

// urlPassword matches the user info of a URL with a password ("nats://user:secret@host").
var urlPassword = regexp.MustCompile(`(://[^:/@\s"']*:)[^@\s"']*@`)

// maskStrings replaces the contents of every quoted string on a line
// (basic, literal, and the rest of an unterminated one) by ***.
func maskStrings(line string) string {
	var b strings.Builder
	for i := 0; i < len(line); i++ {
		c := line[i]
		if c == '#' {
			b.WriteString(line[i:])
			break
		}
		b.WriteByte(c)
		if c != '"' && c != '\'' {
			continue
		}
		j := i + 1
		for j < len(line) && line[j] != c {
			if c == '"' && line[j] == '\\' {
				j++
			}
			j++
		}
		b.WriteString("***")
		if j < len(line) {
			b.WriteByte(c)
		}
		i = j
	}
	return b.String()
}

// quoted matches what a parser's message quotes of the input.
var quoted = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'[^']*'`)

// maskQuoted masks every quoted part of a parser message longer than one character: BurntSushi
// quotes the offending input ("expected value but found \"hunter2\" instead"); a single quoted
// character (an unexpected '=') tells what is wrong without telling a secret.
func maskQuoted(msg string) string {
	return quoted.ReplaceAllStringFunc(msg, func(q string) string {
		if len(q) <= 3 {
			return q
		}
		return q[:1] + "***" + q[len(q)-1:]
	})
}

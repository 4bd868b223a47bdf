package smb

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// ErrInvalid is what every validation error here wraps.
var ErrInvalid = errors.New("invalid")

// FieldError says which input field was refused and why. Msg never repeats a
// value that could be a secret.
type FieldError struct {
	Field string // the API's field name, e.g. "netBiosPrefix"
	Msg   string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

// Unwrap makes errors.Is(err, ErrInvalid) true.
func (e *FieldError) Unwrap() error { return ErrInvalid }

func invalid(field, format string, args ...any) error {
	return &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// checkValue refuses what could break out of one smb.conf line or one argv entry,
// or be expanded by Samba: control characters (newlines, NUL), ';' and '#'
// (comment leaders), '%' (Samba's variable substitution), leading or trailing
// blanks (smb.conf trims them) and more than max bytes.
func checkValue(field, v string, max int) error {
	switch {
	case v == "":
		return invalid(field, "is required")
	case len(v) > max:
		return invalid(field, "must be at most %d bytes", max)
	case !utf8.ValidString(v):
		return invalid(field, "must be valid UTF-8")
	case strings.ContainsFunc(v, unicode.IsControl):
		return invalid(field, "must not contain control characters (newlines, tabs, NUL)")
	case strings.ContainsAny(v, ";#%"):
		return invalid(field, "must not contain ';', '#' or '%%'")
	case strings.TrimSpace(v) != v:
		return invalid(field, "must not start or end with blanks")
	}
	return nil
}

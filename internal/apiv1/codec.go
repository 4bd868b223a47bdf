// Package apiv1 holds the wire types of Basin's NetApp-Volumes-compatible v1 REST API
// (the google.cloud.netapp.v1 resources; docs/api.md: how Basin serves them) and
// their JSON codec.
//
// Output follows proto3 JSON as Google's front end emits it: lowerCamelCase names,
// int64 as strings, enums as names, RFC 3339 UTC timestamps, default values omitted.
// Input accepts what any official client sends: camelCase or snake_case names, enum
// names or numbers, int64 as strings or numbers; unknown fields are ignored.
//
// Only the api and grpcapi packages and tests import apiv1; it imports nothing
// of Basin's.
package apiv1

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Int64 is an int64 encoded as a JSON string and decoded from a string or a number.
type Int64 int64

// MarshalJSON implements json.Marshaler.
func (v Int64) MarshalJSON() ([]byte, error) {
	return []byte(`"` + strconv.FormatInt(int64(v), 10) + `"`), nil
}

// UnmarshalJSON implements json.Unmarshaler.
func (v *Int64) UnmarshalJSON(b []byte) error {
	s := string(bytes.TrimSpace(b))
	if s == "null" {
		return nil
	}
	if unq, err := strconv.Unquote(s); err == nil {
		s = strings.TrimSpace(unq)
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		// Accept integral JSON numbers written with an exponent or fraction (7.0, 1e3).
		f, ferr := strconv.ParseFloat(s, 64)
		if ferr != nil || f != math.Trunc(f) || math.Abs(f) > 1<<62 {
			return fmt.Errorf("invalid int64 value %s", string(b))
		}
		n = int64(f)
	}
	*v = Int64(n)
	return nil
}

// Double is a float64 decoded from a JSON number or a numeric string.
type Double float64

// MarshalJSON implements json.Marshaler.
func (v Double) MarshalJSON() ([]byte, error) {
	f := float64(v)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return nil, errors.New("non-finite double")
	}
	return json.Marshal(f)
}

// UnmarshalJSON implements json.Unmarshaler.
func (v *Double) UnmarshalJSON(b []byte) error {
	s := string(bytes.TrimSpace(b))
	if s == "null" {
		return nil
	}
	if unq, err := strconv.Unquote(s); err == nil {
		s = strings.TrimSpace(unq)
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return fmt.Errorf("invalid number %s", string(b))
	}
	*v = Double(f)
	return nil
}

// FormatTime renders t as proto3 JSON does: RFC 3339 in UTC with a Z. The zero time
// renders as "" so that omitempty drops it.
func FormatTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// enumDef maps one proto enum's names and numbers.
type enumDef struct {
	typ    string
	names  []string // index = number
	values map[string]int32
}

func newEnum(typ string, names ...string) *enumDef {
	d := &enumDef{typ: typ, names: names, values: make(map[string]int32, len(names))}
	for i, n := range names {
		d.values[n] = int32(i)
	}
	return d
}

func (d *enumDef) name(v int32) string {
	if v >= 0 && int(v) < len(d.names) {
		return d.names[v]
	}
	return ""
}

func (d *enumDef) marshal(v int32) ([]byte, error) {
	n := d.name(v)
	if n == "" {
		return nil, fmt.Errorf("%s: no name for value %d", d.typ, v)
	}
	return []byte(`"` + n + `"`), nil
}

func (d *enumDef) unmarshal(b []byte) (int32, error) {
	s := string(bytes.TrimSpace(b))
	if s == "null" {
		return 0, nil
	}
	if unq, err := strconv.Unquote(s); err == nil {
		if v, ok := d.values[unq]; ok {
			return v, nil
		}
		if n, err := strconv.Atoi(unq); err == nil && d.name(int32(n)) != "" {
			return int32(n), nil
		}
		return 0, fmt.Errorf("invalid %s value %q (want one of %s)", d.typ, unq, strings.Join(d.names[1:], ", "))
	}
	n, err := strconv.Atoi(s)
	if err != nil || d.name(int32(n)) == "" {
		return 0, fmt.Errorf("invalid %s value %s", d.typ, s)
	}
	return int32(n), nil
}

// Parse returns the value of an enum name (or number in decimal), for CLI and filters.
func (d *enumDef) Parse(s string) (int32, bool) {
	if v, ok := d.values[strings.ToUpper(s)]; ok {
		return v, true
	}
	if n, err := strconv.Atoi(s); err == nil && d.name(int32(n)) != "" {
		return int32(n), true
	}
	return 0, false
}

// SnakeToCamel converts a proto field name (capacity_gib, kerberos_5i_read_only) to its
// JSON name (capacityGib, kerberos5iReadOnly). Names without '_' are returned unchanged.
func SnakeToCamel(s string) string {
	if !strings.Contains(s, "_") {
		return s
	}
	var b strings.Builder
	up := false
	for i, r := range s {
		switch {
		case r == '_':
			up = i > 0
		case up && r >= 'a' && r <= 'z':
			b.WriteRune(r - 'a' + 'A')
			up = false
		default:
			b.WriteRune(r)
			up = false
		}
	}
	return b.String()
}

// mapFields are JSON objects whose keys are user data, never normalised.
var mapFields = map[string]bool{"labels": true}

// normalize rewrites object keys from snake_case to camelCase, recursively, leaving the
// keys of user maps (labels) untouched.
func normalize(v any) any {
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, val := range t {
			ck := SnakeToCamel(k)
			if mapFields[ck] {
				out[ck] = val
			} else {
				out[ck] = normalize(val)
			}
		}
		return out
	case []any:
		for i := range t {
			t[i] = normalize(t[i])
		}
		return t
	default:
		return v
	}
}

// FieldError is a decoding error that names the offending field by its JSON path.
type FieldError struct {
	Field string
	Msg   string
}

func (e *FieldError) Error() string {
	if e.Field == "" {
		return e.Msg
	}
	return e.Field + ": " + e.Msg
}

// Decode parses a request body into out. It accepts camelCase and snake_case names,
// ignores unknown fields, and returns the set of top-level fields present (camelCase).
// Errors are *FieldError.
func Decode(body []byte, out any) (present map[string]bool, err error) {
	present = map[string]bool{}
	if len(bytes.TrimSpace(body)) == 0 {
		return present, nil
	}
	var raw any
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&raw); err != nil {
		return nil, &FieldError{Msg: "request body is not valid JSON: " + err.Error()}
	}
	if dec.More() {
		return nil, &FieldError{Msg: "request body has trailing data after the JSON value"}
	}
	obj, ok := raw.(map[string]any)
	if !ok {
		if raw == nil {
			return present, nil
		}
		return nil, &FieldError{Msg: "request body must be a JSON object"}
	}
	norm := normalize(obj).(map[string]any)
	for k := range norm {
		present[k] = true
	}
	b, err := json.Marshal(norm)
	if err != nil {
		return nil, &FieldError{Msg: "request body: " + err.Error()}
	}
	if err := json.Unmarshal(b, out); err != nil {
		fe := toFieldError(err)
		if fe.Field == "" {
			fe.Field = failingField(norm, out)
		}
		return nil, fe
	}
	return present, nil
}

// failingField finds which top-level field of obj fails to decode into a value of
// out's type, for errors that encoding/json reports without a path.
func failingField(obj map[string]any, out any) string {
	t := reflect.TypeOf(out)
	if t.Kind() != reflect.Pointer {
		return ""
	}
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		b, err := json.Marshal(map[string]any{k: obj[k]})
		if err != nil {
			continue
		}
		if json.Unmarshal(b, reflect.New(t.Elem()).Interface()) != nil {
			return k
		}
	}
	return ""
}

func toFieldError(err error) *FieldError {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return &FieldError{Field: te.Field, Msg: fmt.Sprintf("wrong type: got JSON %s, want %s", te.Value, jsonKind(te.Type.Kind().String()))}
	}
	// Errors from our own UnmarshalJSON methods arrive wrapped with the field path in
	// Go ≥1.24 as "json: cannot unmarshal ... into Go struct field X.Y of type Z".
	msg := err.Error()
	if i := strings.Index(msg, "Go struct field "); i >= 0 {
		rest := msg[i+len("Go struct field "):]
		field, tail, _ := strings.Cut(rest, " of type ")
		if j := strings.Index(field, "."); j >= 0 {
			field = field[j+1:]
		}
		_, detail, _ := strings.Cut(tail, ": ")
		if detail == "" {
			detail = "invalid value"
		}
		return &FieldError{Field: field, Msg: detail}
	}
	return &FieldError{Msg: msg}
}

func jsonKind(goKind string) string {
	switch goKind {
	case "string":
		return "string"
	case "bool":
		return "boolean"
	case "slice", "array":
		return "array"
	case "map", "struct":
		return "object"
	default:
		return "number"
	}
}

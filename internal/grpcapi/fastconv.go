package grpcapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// The fast path of toProto: a REST wire value (an internal/apiv1 struct) set
// into its message field by field, by the JSON names both share, without
// writing JSON and parsing it again, which took most of what a gRPC read
// costs beyond REST's (a volume: 56 µs, 216 allocations). It covers what the
// reads answer: strings, booleans, numbers (apiv1.Int64, apiv1.Double), enums
// (apiv1's, by name), timestamps (RFC 3339 strings), repeated fields, string
// maps and nested messages. Anything else (an Any with its "@type", raw JSON,
// a field the message does not declare, a value JSON would not carry as it
// is) is errSlow, and toProto takes the JSON way, which answers it exactly
// (TestFastConvertMatchesJSON holds the two to the same result).

// errSlow says the value needs the JSON way.
var errSlow = errors.New("not on the fast path")

var (
	marshalerType = reflect.TypeFor[json.Marshaler]()
	rawType       = reflect.TypeFor[json.RawMessage]()
	timestampName = (&timestamppb.Timestamp{}).ProtoReflect().Descriptor().FullName()
)

// wireField is a struct field as encoding/json writes it.
type wireField struct {
	index     int
	fd        protoreflect.FieldDescriptor // the message's field of its JSON name; nil: none
	omitEmpty bool
}

// wireType is a struct type's fields as a message's, and whether the fast
// path takes it (not with embedded fields, ",string" options or a
// json.Marshaler of its own).
type wireType struct {
	fields []wireField
	ok     bool
}

type planKey struct {
	t reflect.Type
	m protoreflect.FullName
}

var (
	plans   sync.Map // planKey → wireType
	customs sync.Map // reflect.Type → bool: a json.Marshaler
)

// isCustom says whether t writes its own JSON.
func isCustom(t reflect.Type) bool {
	if c, ok := customs.Load(t); ok {
		return c.(bool)
	}
	c := t.Implements(marshalerType)
	customs.Store(t, c)
	return c
}

func planOf(t reflect.Type, md protoreflect.MessageDescriptor) wireType {
	key := planKey{t, md.FullName()}
	if f, ok := plans.Load(key); ok {
		return f.(wireType)
	}
	var fs []wireField
	ok := !t.Implements(marshalerType) && !reflect.PointerTo(t).Implements(marshalerType)
	for i := 0; ok && i < t.NumField(); i++ {
		sf := t.Field(i)
		if sf.Anonymous {
			ok = false
			break
		}
		if !sf.IsExported() {
			continue
		}
		tag := sf.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if name == "" {
			name = sf.Name
		}
		if strings.Contains(","+opts+",", ",string,") {
			ok = false
			break
		}
		fd := md.Fields().ByJSONName(name)
		if fd == nil {
			fd = md.Fields().ByTextName(name)
		}
		fs = append(fs, wireField{index: i, fd: fd, omitEmpty: strings.Contains(","+opts+",", ",omitempty,")})
	}
	wt := wireType{fields: fs, ok: ok}
	plans.Store(key, wt)
	return wt
}

// fastProto sets w (a struct or a pointer to one) into m, which must be
// empty; errSlow if w needs the JSON way.
func fastProto(w any, m proto.Message) error {
	v := reflect.ValueOf(w)
	for v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return errSlow
		}
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct {
		return errSlow
	}
	return fillMessage(v, m.ProtoReflect())
}

func fillMessage(v reflect.Value, m protoreflect.Message) error {
	wt := planOf(v.Type(), m.Descriptor())
	if !wt.ok {
		return errSlow
	}
	for _, f := range wt.fields {
		fv := v.Field(f.index)
		if f.omitEmpty && isEmpty(fv) {
			continue // encoding/json leaves it out
		}
		fd := f.fd
		if fd == nil || m.Has(fd) {
			return errSlow // not the message's, or set twice: protojson refuses both
		}
		if err := setField(m, fd, fv); err != nil {
			return err
		}
	}
	return nil
}

// setField sets fd of m to fv, as protojson would read fv's JSON.
func setField(m protoreflect.Message, fd protoreflect.FieldDescriptor, fv reflect.Value) error {
	if fv.Type() == rawType {
		return errSlow
	}
	for fv.Kind() == reflect.Pointer || fv.Kind() == reflect.Interface {
		if fv.IsNil() {
			return nil // JSON null: protojson leaves the field unset
		}
		fv = fv.Elem()
	}
	if od := fd.ContainingOneof(); od != nil && !od.IsSynthetic() && m.WhichOneof(od) != nil {
		return errSlow // a second member: protojson refuses it
	}
	switch {
	case fd.IsMap():
		if fv.Kind() != reflect.Map || fv.Type().Key().Kind() != reflect.String || fd.MapKey().Kind() != protoreflect.StringKind ||
			fd.MapValue().Kind() == protoreflect.MessageKind || fd.MapValue().Kind() == protoreflect.GroupKind {
			return errSlow
		}
		if fv.IsNil() {
			return nil
		}
		mp := m.Mutable(fd).Map()
		it := fv.MapRange()
		for it.Next() {
			k := it.Key().String()
			if !utf8.ValidString(k) {
				return errSlow
			}
			val, err := scalar(fd.MapValue(), it.Value())
			if err != nil {
				return err
			}
			mp.Set(protoreflect.ValueOfString(k).MapKey(), val)
		}
		return nil
	case fd.IsList():
		if fv.Kind() != reflect.Slice && fv.Kind() != reflect.Array {
			return errSlow
		}
		if fv.Kind() == reflect.Slice && fv.IsNil() {
			return nil
		}
		l := m.Mutable(fd).List()
		for i := range fv.Len() {
			ev := fv.Index(i)
			for ev.Kind() == reflect.Pointer {
				if ev.IsNil() {
					return errSlow // null in a list: protojson refuses it
				}
				ev = ev.Elem()
			}
			if fd.Message() != nil {
				if ev.Kind() != reflect.Struct || fd.Message().FullName() == timestampName {
					return errSlow
				}
				e := l.NewElement()
				if err := fillMessage(ev, e.Message()); err != nil {
					return err
				}
				l.Append(e)
				continue
			}
			val, err := scalar(fd, ev)
			if err != nil {
				return err
			}
			l.Append(val)
		}
		return nil
	case fd.Message() != nil:
		if n := fd.Message().FullName(); n != timestampName && strings.HasPrefix(string(n), "google.protobuf.") {
			return errSlow // the well-known types' JSON forms
		}
		if fd.Message().FullName() == timestampName {
			if fv.Kind() != reflect.String {
				return errSlow
			}
			ts, err := timestamp(fv.String())
			if err != nil {
				return err
			}
			m.Set(fd, protoreflect.ValueOfMessage(ts.ProtoReflect()))
			return nil
		}
		if fv.Kind() != reflect.Struct {
			return errSlow
		}
		return fillMessage(fv, m.Mutable(fd).Message())
	}
	val, err := scalar(fd, fv)
	if err != nil {
		return err
	}
	m.Set(fd, val)
	return nil
}

// scalar is fv as fd's kind of value, as protojson reads fv's JSON.
func scalar(fd protoreflect.FieldDescriptor, fv reflect.Value) (protoreflect.Value, error) {
	for fv.Kind() == reflect.Pointer {
		if fv.IsNil() {
			return protoreflect.Value{}, errSlow
		}
		fv = fv.Elem()
	}
	custom := isCustom(fv.Type())
	switch fd.Kind() {
	case protoreflect.StringKind:
		if fv.Kind() != reflect.String || custom || !utf8.ValidString(fv.String()) {
			return protoreflect.Value{}, errSlow
		}
		return protoreflect.ValueOfString(fv.String()), nil
	case protoreflect.BoolKind:
		if fv.Kind() != reflect.Bool || custom {
			return protoreflect.Value{}, errSlow
		}
		return protoreflect.ValueOfBool(fv.Bool()), nil
	case protoreflect.EnumKind:
		// apiv1's enums write their names; the message's enum takes the name.
		if fv.Kind() != reflect.Int32 || !custom {
			return protoreflect.Value{}, errSlow
		}
		b, err := fv.Interface().(json.Marshaler).MarshalJSON()
		if err != nil || len(b) < 2 || b[0] != '"' || b[len(b)-1] != '"' || bytes.IndexByte(b, '\\') >= 0 {
			return protoreflect.Value{}, errSlow
		}
		ev := fd.Enum().Values().ByName(protoreflect.Name(b[1 : len(b)-1]))
		if ev == nil {
			return protoreflect.Value{}, errSlow
		}
		return protoreflect.ValueOfEnum(ev.Number()), nil
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		if custom && fv.Kind() != reflect.Int64 {
			return protoreflect.Value{}, errSlow // only apiv1.Int64 writes the number itself
		}
		n, ok := integer(fv, math.MinInt32, math.MaxInt32)
		if !ok {
			return protoreflect.Value{}, errSlow
		}
		return protoreflect.ValueOfInt32(int32(n)), nil
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		if custom && fv.Kind() != reflect.Int64 {
			return protoreflect.Value{}, errSlow
		}
		n, ok := integer(fv, math.MinInt64, math.MaxInt64)
		if !ok {
			return protoreflect.Value{}, errSlow
		}
		return protoreflect.ValueOfInt64(n), nil
	case protoreflect.DoubleKind:
		if custom && fv.Kind() != reflect.Int64 && fv.Kind() != reflect.Float64 {
			return protoreflect.Value{}, errSlow
		}
		switch fv.Kind() {
		case reflect.Float32, reflect.Float64:
			f := fv.Float()
			if math.IsNaN(f) || math.IsInf(f, 0) || fv.Kind() == reflect.Float32 {
				return protoreflect.Value{}, errSlow
			}
			return protoreflect.ValueOfFloat64(f), nil
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			return protoreflect.ValueOfFloat64(float64(fv.Int())), nil
		}
	}
	return protoreflect.Value{}, errSlow
}

// integer is fv as an integer in [lo, hi]: a Go integer, or a float that JSON
// writes as an integral number.
func integer(fv reflect.Value, lo, hi int64) (int64, bool) {
	switch fv.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n := fv.Int()
		return n, n >= lo && n <= hi
	case reflect.Uint8, reflect.Uint16, reflect.Uint32:
		n := int64(fv.Uint())
		return n, n <= hi
	}
	return 0, false
}

// timestamp parses a proto3 JSON timestamp as protojson does: RFC 3339,
// seconds within years 1 to 9999, at most 9 fractional digits.
func timestamp(s string) (*timestamppb.Timestamp, error) {
	if !utf8.ValidString(s) {
		return nil, errSlow
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return nil, errSlow
	}
	secs := t.Unix()
	if secs < -62135596800 || secs > 253402300799 {
		return nil, errSlow
	}
	i, j := strings.LastIndexByte(s, '.'), strings.LastIndexAny(s, "Z-+")
	if i >= 0 && j >= i && j-i > len(".999999999") {
		return nil, errSlow
	}
	return &timestamppb.Timestamp{Seconds: secs, Nanos: int32(t.Nanosecond())}, nil
}

// isEmpty is encoding/json's omitempty test.
func isEmpty(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Array, reflect.Map, reflect.Slice, reflect.String:
		return v.Len() == 0
	case reflect.Bool:
		return !v.Bool()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return v.Int() == 0
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return v.Uint() == 0
	case reflect.Float32, reflect.Float64:
		return v.Float() == 0
	case reflect.Interface, reflect.Pointer:
		return v.IsNil()
	}
	return false
}

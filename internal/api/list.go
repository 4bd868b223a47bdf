package api

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/basin-nas/basin/internal/apiv1"
	"github.com/basin-nas/basin/internal/model"
)

const (
	defaultPageSize = 50
	maxPageSize     = 1000
)

// listQuery is a list request's filter, order and page.
type listQuery struct {
	filter   *Filter
	order    []orderKey
	pageSize int
	after    *cursor
	hash     string
}

type orderKey struct {
	path []string
	desc bool
}

// cursor is the position after the last item of a page: its sort values and name.
// Resuming from values rather than an offset keeps pages stable when items are
// inserted or deleted between requests.
type cursor struct {
	Values []string `json:"v"`
	Name   string   `json:"n"`
	Hash   string   `json:"h"`
}

// parseListQuery reads pageSize, pageToken, filter and orderBy for a list of wire
// resources T. parent and defaultOrder are part of what a page token is bound to.
func parseListQuery[T any](q url.Values, parent, defaultOrder string) (*listQuery, error) {
	lq := &listQuery{pageSize: defaultPageSize}
	if s := q.Get("pageSize"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return nil, model.Invalid("pageSize", "must be a non-negative integer, got %q", s)
		}
		if n > maxPageSize {
			n = maxPageSize
		}
		if n > 0 {
			lq.pageSize = n
		}
	}
	f, err := ParseFilter(q.Get("filter"))
	if err != nil {
		return nil, model.Invalid("filter", "%v", err)
	}
	lq.filter = f
	order := q.Get("orderBy")
	if order == "" {
		order = defaultOrder
	}
	for _, part := range strings.Split(order, ",") {
		fields := strings.Fields(part)
		if len(fields) == 0 {
			continue
		}
		if len(fields) > 2 || (len(fields) == 2 && fields[1] != "desc" && fields[1] != "asc") {
			return nil, model.Invalid("orderBy", "expected \"field [asc|desc]\" items, got %q", part)
		}
		path, err := fieldPath(fields[0])
		if err != nil {
			return nil, model.Invalid("orderBy", "%v", err)
		}
		if !knownPath(reflect.TypeFor[T](), path) || slices.Contains(inputOnly[reflect.TypeFor[T]()], path[0]) {
			return nil, model.Invalid("orderBy", "%q is not a field of the listed resources", fields[0])
		}
		lq.order = append(lq.order, orderKey{path: path, desc: len(fields) == 2 && fields[1] == "desc"})
	}
	sum := sha256.Sum256([]byte(parent + "\x00" + q.Get("filter") + "\x00" + order))
	lq.hash = hex.EncodeToString(sum[:6])
	if tok := q.Get("pageToken"); tok != "" {
		raw, err := base64.RawURLEncoding.DecodeString(tok)
		var c cursor
		if err != nil || json.Unmarshal(raw, &c) != nil || len(c.Values) != len(lq.order) {
			return nil, model.Invalid("pageToken", "is not a page token this service issued")
		}
		if c.Hash != lq.hash {
			return nil, model.Invalid("pageToken", "was issued for a different parent, filter or orderBy")
		}
		lq.after = &c
	}
	return lq, nil
}

type listItem[T any] struct {
	wire T
	obj  map[string]any
	keys []string
	name string
}

// page filters, orders and pages items (wire resources), returning the page and the
// next page token ("" at the end).
func page[T any](lq *listQuery, items []T, nameOf func(T) string) ([]T, string, error) {
	var sel []listItem[T]
	for _, it := range items {
		b, err := json.Marshal(it)
		if err != nil {
			return nil, "", err
		}
		var obj map[string]any
		if err := json.Unmarshal(b, &obj); err != nil {
			return nil, "", err
		}
		if !lq.filter.Match(obj) {
			continue
		}
		li := listItem[T]{wire: it, obj: obj, name: nameOf(it)}
		for _, k := range lq.order {
			li.keys = append(li.keys, sortValue(obj, k.path))
		}
		sel = append(sel, li)
	}
	cmp := func(aKeys []string, aName string, bKeys []string, bName string) int {
		for i, k := range lq.order {
			c := compareSortValues(aKeys[i], bKeys[i])
			if k.desc {
				c = -c
			}
			if c != 0 {
				return c
			}
		}
		return strings.Compare(aName, bName)
	}
	slices.SortFunc(sel, func(a, b listItem[T]) int { return cmp(a.keys, a.name, b.keys, b.name) })
	start := 0
	if lq.after != nil {
		start = len(sel)
		for i, li := range sel {
			if cmp(li.keys, li.name, lq.after.Values, lq.after.Name) > 0 {
				start = i
				break
			}
		}
	}
	end := min(start+lq.pageSize, len(sel))
	out := make([]T, 0, end-start)
	for _, li := range sel[start:end] {
		out = append(out, li.wire)
	}
	next := ""
	if end < len(sel) {
		last := sel[end-1]
		b, _ := json.Marshal(cursor{Values: last.keys, Name: last.name, Hash: lq.hash})
		next = base64.RawURLEncoding.EncodeToString(b)
	}
	return out, next, nil
}

func sortValue(obj map[string]any, path []string) string {
	var cur any = obj
	for _, seg := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return ""
		}
		cur = m[seg]
	}
	switch t := cur.(type) {
	case nil:
		return ""
	case string:
		return t
	default:
		b, _ := json.Marshal(t)
		return string(b)
	}
}

// compareSortValues orders numerically when both values are numbers (int64 fields
// arrive as strings), else as strings (RFC 3339 UTC timestamps sort correctly as
// strings only with equal precision, so those are compared as numbers of nanoseconds).
func compareSortValues(a, b string) int {
	fa, ea := strconv.ParseFloat(a, 64)
	fb, eb := strconv.ParseFloat(b, 64)
	if ea == nil && eb == nil {
		switch {
		case fa < fb:
			return -1
		case fa > fb:
			return 1
		}
		return 0
	}
	if ta, ok := parseTime(a); ok {
		if tb, ok := parseTime(b); ok {
			return ta.Compare(tb)
		}
	}
	return strings.Compare(a, b)
}

var rawJSONType = reflect.TypeFor[json.RawMessage]()

// inputOnly are wire fields no answer carries: nothing can be ordered by them.
var inputOnly = map[reflect.Type][]string{reflect.TypeFor[apiv1.ActiveDirectory](): {"password"}}

// knownPath reports whether path (camelCase JSON names) names a field of the wire
// type t: through structs, pointers and lists; any key below a map (labels.<key>);
// anything below raw JSON (an operation's response). The same paths a filter may use.
func knownPath(t reflect.Type, path []string) bool {
	for _, seg := range path {
		for t != rawJSONType && (t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			t = t.Elem()
		}
		switch {
		case t == rawJSONType || t.Kind() == reflect.Interface:
			return true
		case t.Kind() == reflect.Map:
			t = t.Elem()
		case t.Kind() == reflect.Struct:
			f, ok := jsonField(t, seg)
			if !ok {
				return false
			}
			t = f.Type
		default:
			return false
		}
	}
	return true
}

// jsonField finds the field of struct type t that encoding/json names name.
func jsonField(t reflect.Type, name string) (reflect.StructField, bool) {
	for _, f := range reflect.VisibleFields(t) {
		if !f.IsExported() || f.Anonymous {
			continue
		}
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if tag == "-" {
			continue
		}
		if tag == "" {
			tag = f.Name
		}
		if tag == name {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// byName reports whether the list is unfiltered and ordered by name alone (the
// default), so that a page can be cut from the names and only its items read and
// rendered (pageByName).
func (lq *listQuery) byName() bool {
	return (lq.filter == nil || lq.filter.root == nil) && len(lq.order) == 1 &&
		len(lq.order[0].path) == 1 && lq.order[0].path[0] == "name"
}

// pageByName is page for a list that byName: it orders and pages names and loads
// only the items of the page. Its pages and page tokens are those page gives.
func pageByName[T any](lq *listQuery, names []string, load func(name string) (T, error)) ([]T, string, error) {
	desc := lq.order[0].desc
	cmp := func(a, b string) int {
		if desc {
			return -compareSortValues(a, b)
		}
		return compareSortValues(a, b)
	}
	names = slices.Clone(names)
	slices.SortFunc(names, func(a, b string) int {
		if c := cmp(a, b); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	start := 0
	if lq.after != nil {
		start = len(names)
		for i, n := range names {
			c := cmp(n, lq.after.Values[0])
			if c == 0 {
				c = strings.Compare(n, lq.after.Name)
			}
			if c > 0 {
				start = i
				break
			}
		}
	}
	end := min(start+lq.pageSize, len(names))
	out := make([]T, 0, end-start)
	for _, n := range names[start:end] {
		it, err := load(n)
		if err != nil {
			return nil, "", err
		}
		out = append(out, it)
	}
	next := ""
	if end < len(names) {
		last := names[end-1]
		b, _ := json.Marshal(cursor{Values: []string{last}, Name: last, Hash: lq.hash})
		next = base64.RawURLEncoding.EncodeToString(b)
	}
	return out, next, nil
}

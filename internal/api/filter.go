package api

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/basin-nas/basin/internal/apiv1"
)

// Filter is a parsed AIP-160 filter (the subset in docs/api.md): comparisons
// (= != < > <= >= and the has operator :), AND / OR / NOT / -, parentheses, implicit
// AND between terms, quoted or bare values, a trailing * for prefix matches.
// Field paths may be camelCase or snake_case; they are evaluated against a
// resource's wire JSON.
type Filter struct{ root node }

type node interface {
	eval(obj map[string]any) bool
}

type andNode struct{ l, r node }
type orNode struct{ l, r node }
type notNode struct{ n node }
type cmpNode struct {
	path []string
	op   string
	val  string
}

func (n andNode) eval(o map[string]any) bool { return n.l.eval(o) && n.r.eval(o) }
func (n orNode) eval(o map[string]any) bool  { return n.l.eval(o) || n.r.eval(o) }
func (n notNode) eval(o map[string]any) bool { return !n.n.eval(o) }

// ParseFilter parses s; the empty string matches everything. Errors name the problem
// and its position, for a 400 on the "filter" field.
func ParseFilter(s string) (*Filter, error) {
	toks, err := tokenize(s)
	if err != nil {
		return nil, err
	}
	if len(toks) == 0 {
		return &Filter{}, nil
	}
	p := &parser{toks: toks}
	n, err := p.or(0)
	if err != nil {
		return nil, err
	}
	if p.pos < len(p.toks) {
		return nil, fmt.Errorf("unexpected %q at position %d", p.toks[p.pos].text, p.toks[p.pos].at)
	}
	return &Filter{root: n}, nil
}

// Match reports whether obj (a resource's wire JSON as a map) passes the filter.
func (f *Filter) Match(obj map[string]any) bool {
	return f == nil || f.root == nil || f.root.eval(obj)
}

type token struct {
	kind string // "op", "(", ")", "str" (quoted), "word"
	text string
	at   int
}

const maxFilterLen = 4096

func tokenize(s string) ([]token, error) {
	if len(s) > maxFilterLen {
		return nil, fmt.Errorf("filter longer than %d bytes", maxFilterLen)
	}
	var toks []token
	rs := []rune(s)
	for i := 0; i < len(rs); {
		r := rs[i]
		switch {
		case unicode.IsSpace(r):
			i++
		case r == '(' || r == ')':
			toks = append(toks, token{kind: string(r), text: string(r), at: i})
			i++
		case r == '"' || r == '\'':
			j := i + 1
			var b strings.Builder
			for ; j < len(rs) && rs[j] != r; j++ {
				if rs[j] == '\\' && j+1 < len(rs) {
					j++
				}
				b.WriteRune(rs[j])
			}
			if j >= len(rs) {
				return nil, fmt.Errorf("unterminated string at position %d", i)
			}
			toks = append(toks, token{kind: "str", text: b.String(), at: i})
			i = j + 1
		case strings.ContainsRune("=!<>:", r):
			op := string(r)
			if i+1 < len(rs) && rs[i+1] == '=' && r != '=' && r != ':' {
				op += "="
			}
			if op == "!" {
				return nil, fmt.Errorf("unexpected '!' at position %d", i)
			}
			toks = append(toks, token{kind: "op", text: op, at: i})
			i += len(op)
		default:
			j := i
			for j < len(rs) && !unicode.IsSpace(rs[j]) && !strings.ContainsRune("()=!<>:\"'", rs[j]) {
				j++
			}
			toks = append(toks, token{kind: "word", text: string(rs[i:j]), at: i})
			i = j
		}
	}
	return toks, nil
}

type parser struct {
	toks []token
	pos  int
}

func (p *parser) peek() *token {
	if p.pos < len(p.toks) {
		return &p.toks[p.pos]
	}
	return nil
}

const maxFilterDepth = 64

func (p *parser) or(depth int) (node, error) {
	l, err := p.and(depth)
	if err != nil {
		return nil, err
	}
	for t := p.peek(); t != nil && t.kind == "word" && t.text == "OR"; t = p.peek() {
		p.pos++
		r, err := p.and(depth)
		if err != nil {
			return nil, err
		}
		l = orNode{l, r}
	}
	return l, nil
}

func (p *parser) and(depth int) (node, error) {
	l, err := p.unary(depth)
	if err != nil {
		return nil, err
	}
	for {
		t := p.peek()
		if t == nil || t.kind == ")" || (t.kind == "word" && t.text == "OR") {
			return l, nil
		}
		if t.kind == "word" && t.text == "AND" {
			p.pos++
		}
		r, err := p.unary(depth)
		if err != nil {
			return nil, err
		}
		l = andNode{l, r}
	}
}

func (p *parser) unary(depth int) (node, error) {
	if depth > maxFilterDepth {
		return nil, fmt.Errorf("filter nested deeper than %d", maxFilterDepth)
	}
	t := p.peek()
	if t == nil {
		return nil, fmt.Errorf("unexpected end of filter")
	}
	if t.kind == "word" && (t.text == "NOT" || t.text == "-") {
		p.pos++
		n, err := p.unary(depth + 1)
		if err != nil {
			return nil, err
		}
		return notNode{n}, nil
	}
	if t.kind == "word" && strings.HasPrefix(t.text, "-") && len(t.text) > 1 {
		t.text = t.text[1:]
		n, err := p.unary(depth + 1)
		if err != nil {
			return nil, err
		}
		return notNode{n}, nil
	}
	if t.kind == "(" {
		p.pos++
		n, err := p.or(depth + 1)
		if err != nil {
			return nil, err
		}
		if c := p.peek(); c == nil || c.kind != ")" {
			return nil, fmt.Errorf("missing ')' for '(' at position %d", t.at)
		}
		p.pos++
		return n, nil
	}
	return p.comparison()
}

func (p *parser) comparison() (node, error) {
	f := p.peek()
	if f.kind != "word" || f.text == "AND" || f.text == "OR" {
		return nil, fmt.Errorf("expected a field name at position %d, got %q", f.at, f.text)
	}
	p.pos++
	op := p.peek()
	if op == nil || op.kind != "op" {
		return nil, fmt.Errorf("field %q at position %d needs a comparison (=, !=, <, >, <=, >=, :)", f.text, f.at)
	}
	p.pos++
	v := p.peek()
	if v == nil || (v.kind != "word" && v.kind != "str") {
		return nil, fmt.Errorf("comparison at position %d needs a value", op.at)
	}
	p.pos++
	path, err := fieldPath(f.text)
	if err != nil {
		return nil, err
	}
	return cmpNode{path: path, op: op.text, val: v.text}, nil
}

// fieldPath splits a dotted path and normalises each segment to camelCase, except
// label keys.
func fieldPath(s string) ([]string, error) {
	parts := strings.Split(s, ".")
	for i, part := range parts {
		if part == "" {
			return nil, fmt.Errorf("bad field path %q", s)
		}
		if i == 0 || parts[i-1] != "labels" {
			parts[i] = apiv1.SnakeToCamel(part)
		}
	}
	return parts, nil
}

func (n cmpNode) eval(obj map[string]any) bool {
	var cur any = obj
	for _, seg := range n.path {
		m, ok := cur.(map[string]any)
		if !ok {
			cur = nil
			break
		}
		cur = m[seg]
	}
	if n.op == ":" {
		return has(cur, n.val)
	}
	if list, ok := cur.([]any); ok {
		for _, el := range list {
			if compare(el, n.op, n.val) {
				return n.op != "!="
			}
		}
		return n.op == "!="
	}
	return compare(cur, n.op, n.val)
}

func has(v any, want string) bool {
	switch t := v.(type) {
	case nil:
		return false
	case map[string]any:
		if want == "*" {
			return len(t) > 0
		}
		_, ok := t[want]
		return ok
	case []any:
		for _, el := range t {
			if compare(el, "=", want) {
				return true
			}
		}
		return false
	default:
		return want == "*" || compare(v, "=", want)
	}
}

// compare applies op to a field value and a literal. Missing fields compare as the
// proto default: false, 0 or "".
func compare(v any, op, lit string) bool {
	switch t := v.(type) {
	case bool:
		b, err := strconv.ParseBool(lit)
		if err != nil {
			return op == "!="
		}
		return cmpOrdered(boolInt(t), boolInt(b), op)
	case float64:
		f, err := strconv.ParseFloat(lit, 64)
		if err != nil {
			return op == "!="
		}
		return cmpOrdered(t, f, op)
	case string:
		return compareStrings(t, op, lit)
	case nil:
		if b, err := strconv.ParseBool(lit); err == nil {
			return cmpOrdered(0, boolInt(b), op)
		}
		if f, err := strconv.ParseFloat(lit, 64); err == nil {
			return cmpOrdered(0, f, op)
		}
		return compareStrings("", op, lit)
	}
	return op == "!="
}

func compareStrings(s, op, lit string) bool {
	if op == "=" || op == "!=" {
		eq := s == lit
		if strings.HasSuffix(lit, "*") {
			eq = strings.HasPrefix(s, strings.TrimSuffix(lit, "*"))
		}
		return eq == (op == "=")
	}
	a, aerr := strconv.ParseFloat(s, 64)
	b, berr := strconv.ParseFloat(lit, 64)
	if aerr == nil && berr == nil && !math.IsNaN(a) && !math.IsNaN(b) {
		return cmpOrdered(a, b, op)
	}
	ta, aerr := time.Parse(time.RFC3339Nano, s)
	tb, berr := time.Parse(time.RFC3339Nano, lit)
	if aerr == nil && berr == nil {
		return cmpOrdered(ta.UnixNano(), tb.UnixNano(), op)
	}
	return cmpOrdered(s, lit, op)
}

func boolInt(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func cmpOrdered[T int64 | float64 | string](a, b T, op string) bool {
	switch op {
	case "=":
		return a == b
	case "!=":
		return a != b
	case "<":
		return a < b
	case "<=":
		return a <= b
	case ">":
		return a > b
	case ">=":
		return a >= b
	}
	return false
}

package api

import (
	"encoding/json"
	"net/url"
	"slices"
	"strings"

	"github.com/basin-nas/basin/internal/apiv1"
	"github.com/basin-nas/basin/internal/model"
)

// fieldRules classifies a resource's top-level JSON fields for updates.
type fieldRules struct {
	mutable   []string
	immutable []string
	output    []string
}

// updatePaths returns the top-level fields an update applies. With an updateMask
// (camelCase or snake_case, nested paths apply their top-level field) every path must
// name a mutable field. Without one, the mutable fields present in the body apply
// (AIP-134), immutable ones present must not change, output-only ones are ignored.
func updatePaths(q url.Values, rules fieldRules, present map[string]bool, body, current any) ([]string, error) {
	mask, hasMask := q["updateMask"]
	if !hasMask {
		mask, hasMask = q["update_mask"]
	}
	var out []string
	add := func(f string) {
		if !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	if hasMask {
		for _, raw := range strings.Split(strings.Join(mask, ","), ",") {
			p := strings.TrimSpace(raw)
			if p == "" {
				continue
			}
			top, _, _ := strings.Cut(p, ".")
			top = apiv1.SnakeToCamel(top)
			switch {
			case slices.Contains(rules.mutable, top):
				add(top)
			case slices.Contains(rules.immutable, top):
				return nil, model.Invalid("updateMask", "field %q is immutable", p)
			case slices.Contains(rules.output, top) || top == "name":
				return nil, model.Invalid("updateMask", "field %q is output only", p)
			default:
				return nil, model.Invalid("updateMask", "unknown field %q", p)
			}
		}
		if len(out) == 0 {
			return nil, model.Invalid("updateMask", "must name at least one field")
		}
		return out, nil
	}
	bm, cm := toMap(body), toMap(current)
	keys := make([]string, 0, len(present))
	for k := range present {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		switch {
		case slices.Contains(rules.mutable, k):
			add(k)
		case slices.Contains(rules.immutable, k):
			if !jsonEqual(bm[k], cm[k]) {
				return nil, model.Invalid(k, "is immutable and cannot be changed")
			}
		}
	}
	if len(out) == 0 {
		return nil, model.Invalid("updateMask", "the request changes no updatable field; give an updateMask or mutable fields")
	}
	return out, nil
}

func toMap(v any) map[string]any {
	b, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	var m map[string]any
	json.Unmarshal(b, &m)
	return m
}

func jsonEqual(a, b any) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

// checkBodyName rejects a body whose name differs from the URL's.
func checkBodyName(bodyName, urlName string) error {
	if bodyName != "" && bodyName != urlName {
		return model.Invalid("name", "%q does not match the resource in the URL (%s)", bodyName, urlName)
	}
	return nil
}

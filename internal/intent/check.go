package intent

import (
	"regexp"

	"github.com/basin-nas/basin/internal/model"
)

var (
	idRE       = regexp.MustCompile(`^[A-Za-z]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$`)
	labelKeyRE = regexp.MustCompile(`^[\p{Ll}\p{Lo}][\p{Ll}\p{Lo}\p{N}_-]{0,62}$`)
	labelValRE = regexp.MustCompile(`^[\p{Ll}\p{Lo}\p{N}_-]{0,63}$`)
)

// CheckID validates the ID of a resource to create, given as param (e.g.
// "snapshotId").
func CheckID(param, id string) error {
	if id == "" {
		return model.Invalid(param, "is required")
	}
	if !idRE.MatchString(id) {
		return model.Invalid(param, "%q is not a valid ID: use 1-63 letters, digits and hyphens, starting with a letter and not ending with a hyphen", id)
	}
	return nil
}

// CheckPathID validates the ID of an existing resource of kind ("Volume"): a
// malformed one cannot exist, so it is not found.
func CheckPathID(kind, id string) error {
	if !idRE.MatchString(id) {
		return model.Errorf(model.ErrNotFound, "%s '%s' was not found", kind, id)
	}
	return nil
}

// CheckMeta validates labels and description, common to every resource.
func CheckMeta(m *model.Meta) error {
	if len(m.Labels) > 64 {
		return model.Invalid("labels", "at most 64 labels are allowed")
	}
	for k, v := range m.Labels {
		if !labelKeyRE.MatchString(k) {
			return model.Invalid("labels", "key %q must start with a lowercase letter and hold at most 63 lowercase letters, digits, '_' or '-'", k)
		}
		if !labelValRE.MatchString(v) {
			return model.Invalid("labels", "value %q of %q may hold at most 63 lowercase letters, digits, '_' or '-'", v, k)
		}
	}
	if len(m.Desc) > 2048 {
		return model.Invalid("description", "must be at most 2048 characters")
	}
	return nil
}

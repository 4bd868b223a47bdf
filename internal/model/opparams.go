package model

import (
	"encoding/json"
	"fmt"
)

// OpParamsVersion is the version of OpParams this build writes.
const OpParamsVersion = 1

// OpParams are an operation's typed parameters and progress markers. They are
// versioned: a document written by an older Basin (version 0, a map of strings) is
// read into the same fields, so operations left unfinished by an upgrade resume.
type OpParams struct {
	Version int `json:"v,omitempty"`
	// SourceKey and SourceSnapshot name the snapshot a volume create clones.
	SourceKey      string `json:"sourceKey,omitempty"`
	SourceSnapshot string `json:"sourceSnapshot,omitempty"`
	// SourceNTACLs: the cloned volume's permissions were its NT ACLs
	// (Volume.NTACLs), so the snapshot's root carries one to keep.
	SourceNTACLs bool `json:"sourceNtacls,omitempty"`
	// Snapshot is the snapshot a revert returns the volume to.
	Snapshot string `json:"snapshot,omitempty"`
	// Started: the operation ran its first storage step; from then on it can no
	// longer be cancelled (except creates, which roll back).
	Started bool `json:"started,omitempty"`
	// Reverted: a revert's data swap finished; what is left is cleanup.
	Reverted bool `json:"reverted,omitempty"`
}

// UnmarshalJSON reads the current form and version 0's map of strings.
func (p *OpParams) UnmarshalJSON(b []byte) error {
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(b, &probe); err != nil {
		return fmt.Errorf("operation params: %w", err)
	}
	if _, ok := probe["v"]; ok {
		type plain OpParams
		return json.Unmarshal(b, (*plain)(p))
	}
	var v0 map[string]string
	if err := json.Unmarshal(b, &v0); err != nil {
		return fmt.Errorf("operation params (version 0): %w", err)
	}
	*p = OpParams{Version: OpParamsVersion, SourceKey: v0["sourceKey"], SourceSnapshot: v0["sourceSnapshot"],
		Snapshot: v0["snapshot"], Started: v0["started"] != "", Reverted: v0["swapped"] != ""}
	return nil
}

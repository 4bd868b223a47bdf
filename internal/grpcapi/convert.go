package grpcapi

import (
	"encoding/json"
	"fmt"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// toProto converts a REST wire value (internal/apiv1) to its proto message
// through the JSON REST answers with: the messages' proto3 JSON names are
// apiv1's (internal/apiv1's TestProtoMatchesREST), and apiv1 writes int64 as
// strings, enums as names and timestamps in RFC 3339, all of which protojson
// reads. A field the message does not declare is an error, not dropped.
func toProto(w any, m proto.Message) error {
	b, err := json.Marshal(w)
	if err != nil {
		return fmt.Errorf("encode %T: %w", w, err)
	}
	if err := protojson.Unmarshal(b, m); err != nil {
		return fmt.Errorf("%T as %s: %w", w, m.ProtoReflect().Descriptor().FullName(), err)
	}
	return nil
}

// fromProto converts a proto message to its REST wire value, the way back (for
// the request messages of the methods that write). Timestamps come back with 3,
// 6 or 9 fractional digits, which apiv1 reads as the same instant.
func fromProto(m proto.Message, w any) error {
	b, err := protojson.Marshal(m)
	if err != nil {
		return fmt.Errorf("encode %s: %w", m.ProtoReflect().Descriptor().FullName(), err)
	}
	if err := json.Unmarshal(b, w); err != nil {
		return fmt.Errorf("%s as %T: %w", m.ProtoReflect().Descriptor().FullName(), w, err)
	}
	return nil
}

package grpcapi

import (
	"encoding/json"
	"fmt"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/basin-nas/basin/internal/model"
)

// toProto converts a REST wire value (internal/apiv1) to its proto message:
// field by field where it can (fastProto), else through the JSON REST answers
// with (toProtoJSON); the two give the same message.
func toProto(w any, m proto.Message) error {
	if err := fastProto(w, m); err != errSlow {
		return err
	}
	proto.Reset(m)
	return toProtoJSON(w, m)
}

// toProtoJSON converts through the JSON REST answers with: the messages'
// proto3 JSON names are apiv1's (internal/apiv1's TestProtoMatchesREST), and
// apiv1 writes int64 as strings, enums as names and timestamps in RFC 3339,
// all of which protojson reads. A field the message does not declare is an
// error, not dropped.
func toProtoJSON(w any, m proto.Message) error {
	b, err := json.Marshal(w)
	if err != nil {
		return fmt.Errorf("encode %T: %w", w, err)
	}
	if err := protojson.Unmarshal(b, m); err != nil {
		return fmt.Errorf("%T as %s: %w", w, m.ProtoReflect().Descriptor().FullName(), err)
	}
	return nil
}

// body is m as REST's JSON body, the way back (for the request messages of
// the methods that write): protojson's camelCase names, enums by name
// (unknown numbers as numbers), int64 as strings, timestamps with 3, 6 or 9
// fractional digits, fields at their default left out, as a REST client
// sends them.
func body(m proto.Message) ([]byte, error) {
	b, err := protojson.Marshal(m)
	if err != nil {
		return nil, model.Invalid(string(m.ProtoReflect().Descriptor().Name()), "%v", err)
	}
	return b, nil
}

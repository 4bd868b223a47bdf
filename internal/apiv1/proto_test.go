package apiv1_test

import (
	"encoding/json"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	"github.com/basin-nas/basin/internal/apiv1"
	"github.com/basin-nas/basin/internal/netapppb"
	"google.golang.org/genproto/googleapis/cloud/location"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// protoPair ties a REST wire type to the proto message(s) it serves. A REST
// type may stand for several messages (Schedule serves the four schedule
// kinds): each REST field must be in at least one of them, and every field of
// each must be in the REST type or in unserved.
type protoPair struct {
	rest   any
	protos []proto.Message
	// unserved lists, by JSON name, the proto fields REST deliberately does
	// not carry, each with the reason.
	unserved map[string]string
}

// protoPairs are the REST types Basin serves and their messages.
var protoPairs = []protoPair{
	{rest: apiv1.StoragePool{}, protos: msgs(&netapppb.StoragePool{})},
	{rest: apiv1.Volume{}, protos: msgs(&netapppb.Volume{})},
	{rest: apiv1.ExportPolicy{}, protos: msgs(&netapppb.ExportPolicy{})},
	{rest: apiv1.SimpleExportPolicyRule{}, protos: msgs(&netapppb.SimpleExportPolicyRule{})},
	{rest: apiv1.SnapshotPolicy{}, protos: msgs(&netapppb.SnapshotPolicy{})},
	{rest: apiv1.Schedule{}, protos: msgs(&netapppb.HourlySchedule{}, &netapppb.DailySchedule{}, &netapppb.WeeklySchedule{}, &netapppb.MonthlySchedule{})},
	{rest: apiv1.MountOption{}, protos: msgs(&netapppb.MountOption{})},
	{rest: apiv1.RestoreParameters{}, protos: msgs(&netapppb.RestoreParameters{})},
	{rest: apiv1.CloneDetails{}, protos: msgs(&netapppb.Volume_CloneDetails{})},
	{rest: apiv1.Snapshot{}, protos: msgs(&netapppb.Snapshot{})},
	{rest: apiv1.ActiveDirectory{}, protos: msgs(&netapppb.ActiveDirectory{})},
	{rest: apiv1.RevertVolumeRequest{}, protos: msgs(&netapppb.RevertVolumeRequest{}),
		unserved: map[string]string{"name": "in the URL"}},
	{rest: apiv1.ValidateDirectoryServiceRequest{}, protos: msgs(&netapppb.ValidateDirectoryServiceRequest{}),
		unserved: map[string]string{"name": "in the URL"}},
	{rest: apiv1.ListStoragePoolsResponse{}, protos: msgs(&netapppb.ListStoragePoolsResponse{})},
	{rest: apiv1.ListVolumesResponse{}, protos: msgs(&netapppb.ListVolumesResponse{})},
	{rest: apiv1.ListSnapshotsResponse{}, protos: msgs(&netapppb.ListSnapshotsResponse{})},
	{rest: apiv1.ListActiveDirectoriesResponse{}, protos: msgs(&netapppb.ListActiveDirectoriesResponse{})},
	{rest: apiv1.OperationMetadata{}, protos: msgs(&netapppb.OperationMetadata{})},
	{rest: apiv1.LocationMetadata{}, protos: msgs(&netapppb.LocationMetadata{}),
		unserved: map[string]string{
			"hasVcp":        "Basin has no VPC connector concept: always false",
			"hasOntapProxy": "the ONTAP passthrough is unserved (501)",
		}},
	// The mixins' messages are the official Go packages'.
	{rest: apiv1.Operation{}, protos: msgs(&longrunningpb.Operation{})},
	{rest: apiv1.ListOperationsResponse{}, protos: msgs(&longrunningpb.ListOperationsResponse{}),
		unserved: map[string]string{"unreachable": "older official clients parse strictly and lack it (API.md §3.6); Basin's operations are all reachable"}},
	{rest: apiv1.Location{}, protos: msgs(&location.Location{})},
	{rest: apiv1.ListLocationsResponse{}, protos: msgs(&location.ListLocationsResponse{})},
}

func msgs(m ...proto.Message) []proto.Message { return m }

// TestProtoMatchesREST checks that every field of every REST type Basin
// serves has its proto field with the same JSON name and a compatible kind,
// and that every proto field of those messages is served by REST or listed as
// deliberately unserved. It fails when a field is removed on either side.
func TestProtoMatchesREST(t *testing.T) {
	paired := map[reflect.Type]bool{}
	for _, p := range protoPairs {
		paired[reflect.TypeOf(p.rest)] = true
	}
	for _, p := range protoPairs {
		rt := reflect.TypeOf(p.rest)
		t.Run(rt.Name(), func(t *testing.T) {
			var descs []protoreflect.MessageDescriptor
			for _, m := range p.protos {
				descs = append(descs, m.ProtoReflect().Descriptor())
			}
			restFields := map[string]reflect.StructField{}
			for i := 0; i < rt.NumField(); i++ {
				sf := rt.Field(i)
				name := jsonName(sf)
				if name == "" || name == "@type" { // @type: the Any wrapper's, not a field
					continue
				}
				restFields[name] = sf
				found := false
				for _, md := range descs {
					fd := md.Fields().ByJSONName(name)
					if fd == nil {
						continue
					}
					found = true
					if msg := compatible(sf.Type, fd, paired); msg != "" {
						t.Errorf("%s.%s: REST %s vs proto %s %s: %s", md.Name(), name, sf.Type, cardinality(fd), fd.Kind(), msg)
					}
				}
				if !found {
					t.Errorf("REST field %q has no proto field in %s", name, names(descs))
				}
			}
			for _, md := range descs {
				fields := md.Fields()
				for i := 0; i < fields.Len(); i++ {
					fd := fields.Get(i)
					if _, ok := restFields[fd.JSONName()]; ok {
						continue
					}
					if _, ok := p.unserved[fd.JSONName()]; ok {
						continue
					}
					t.Errorf("proto field %s (%q) is neither served by REST %s nor listed as unserved", fd.FullName(), fd.JSONName(), rt.Name())
				}
			}
			for name := range p.unserved {
				if _, ok := restFields[name]; ok {
					t.Errorf("%q is listed as unserved but REST serves it", name)
				}
				if !anyHas(descs, name) {
					t.Errorf("%q is listed as unserved but no proto message has it", name)
				}
			}
		})
	}
}

// enumPairs are the REST enums and their proto enums; TestProtoMatchesREST
// requires every enum field of a paired message to use the pair listed here.
var enumPairs = []struct {
	rest  any
	proto protoreflect.EnumDescriptor
}{
	{apiv1.ServiceLevel(0), netapppb.ServiceLevel(0).Descriptor()},
	{apiv1.PoolState(0), netapppb.StoragePool_State(0).Descriptor()},
	{apiv1.VolumeState(0), netapppb.Volume_State(0).Descriptor()},
	{apiv1.SnapshotState(0), netapppb.Snapshot_State(0).Descriptor()},
	{apiv1.ActiveDirectoryState(0), netapppb.ActiveDirectory_State(0).Descriptor()},
	{apiv1.Protocol(0), netapppb.Protocols(0).Descriptor()},
	{apiv1.AccessType(0), netapppb.AccessType(0).Descriptor()},
	{apiv1.SMBSetting(0), netapppb.SMBSettings(0).Descriptor()},
	{apiv1.SecurityStyle(0), netapppb.SecurityStyle(0).Descriptor()},
	{apiv1.RestrictedAction(0), netapppb.RestrictedAction(0).Descriptor()},
	{apiv1.SquashMode(0), netapppb.SimpleExportPolicyRule_SquashMode(0).Descriptor()},
	{apiv1.EncryptionType(0), netapppb.EncryptionType(0).Descriptor()},
	{apiv1.QosType(0), netapppb.QosType(0).Descriptor()},
	{apiv1.StoragePoolType(0), netapppb.StoragePoolType(0).Descriptor()},
	{apiv1.Mode(0), netapppb.Mode(0).Descriptor()},
	{apiv1.ScaleType(0), netapppb.ScaleType(0).Descriptor()},
	{apiv1.DirectoryServiceType(0), netapppb.DirectoryServiceType(0).Descriptor()},
	{apiv1.FlexPerformance(0), netapppb.FlexPerformance(0).Descriptor()},
}

// TestProtoEnumsMatchREST checks that each REST enum's names and numbers are
// its proto enum's, and back.
func TestProtoEnumsMatchREST(t *testing.T) {
	for _, c := range enumPairs {
		rt := reflect.TypeOf(c.rest)
		t.Run(rt.Name(), func(t *testing.T) {
			rest := restEnumValues(t, rt)
			values := c.proto.Values()
			for i := 0; i < values.Len(); i++ {
				v := values.Get(i)
				if got, ok := rest[int32(v.Number())]; !ok || got != string(v.Name()) {
					t.Errorf("proto %s = %d: REST has %q", v.Name(), v.Number(), got)
				}
			}
			for n, name := range rest {
				if v := values.ByNumber(protoreflect.EnumNumber(n)); v == nil || string(v.Name()) != name {
					t.Errorf("REST %s = %d: not in proto %s", name, n, c.proto.FullName())
				}
			}
		})
	}
}

// restEnumValues maps the numbers of a REST enum type to their names, read
// through its JSON encoding (a name for a known value).
func restEnumValues(t *testing.T, rt reflect.Type) map[int32]string {
	t.Helper()
	out := map[int32]string{}
	for n := int32(0); n < 64; n++ {
		v := reflect.New(rt).Elem()
		v.SetInt(int64(n))
		b, err := json.Marshal(v.Interface())
		if err != nil {
			continue
		}
		var name string
		if json.Unmarshal(b, &name) == nil && name != "" {
			if _, err := strconv.Atoi(name); err != nil {
				out[n] = name
			}
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s: no enum values found", rt)
	}
	return out
}

// compatible says why a REST Go type cannot carry a proto field, or "".
func compatible(gt reflect.Type, fd protoreflect.FieldDescriptor, paired map[reflect.Type]bool) string {
	rawJSON := reflect.TypeOf(json.RawMessage(nil))
	if gt == rawJSON { // passed through as JSON: any message, or a list of them
		if fd.Message() == nil || fd.IsMap() {
			return "raw JSON stands only for messages"
		}
		return ""
	}
	if fd.IsMap() {
		if gt.Kind() != reflect.Map || gt.Key().Kind() != reflect.String || gt.Elem().Kind() != reflect.String ||
			fd.MapKey().Kind() != protoreflect.StringKind || fd.MapValue().Kind() != protoreflect.StringKind {
			return "want map<string, string> on both sides"
		}
		return ""
	}
	if fd.IsList() {
		if gt.Kind() != reflect.Slice {
			return "proto field is repeated, REST is not a list"
		}
		gt = gt.Elem()
	} else if gt.Kind() == reflect.Slice {
		return "REST is a list, proto field is not repeated"
	}
	pointer := gt.Kind() == reflect.Pointer
	if pointer {
		gt = gt.Elem()
	}
	// Presence: a proto3 optional scalar is a pointer in REST, and back. A
	// oneof's members have presence too; REST tells them apart by non-empty.
	realOneof := fd.ContainingOneof() != nil && !fd.ContainingOneof().IsSynthetic()
	if fd.Kind() != protoreflect.MessageKind && fd.Kind() != protoreflect.GroupKind && !fd.IsList() && !realOneof {
		if fd.HasPresence() != pointer {
			return "presence differs: REST pointer " + strconv.FormatBool(pointer) + ", proto optional " + strconv.FormatBool(fd.HasPresence())
		}
	}
	isEnum := gt.PkgPath() == reflect.TypeOf(apiv1.ServiceLevel(0)).PkgPath() && gt.Kind() == reflect.Int32 &&
		gt.Implements(reflect.TypeOf((*json.Marshaler)(nil)).Elem())
	switch fd.Kind() {
	case protoreflect.StringKind:
		return want(gt.Kind() == reflect.String, "want a string")
	case protoreflect.BoolKind:
		return want(gt.Kind() == reflect.Bool, "want a bool")
	case protoreflect.Int32Kind:
		return want(gt.Kind() == reflect.Int32 && !isEnum, "want an int32")
	case protoreflect.Int64Kind:
		return want(gt == reflect.TypeOf(apiv1.Int64(0)), "want apiv1.Int64 (a JSON string)")
	case protoreflect.DoubleKind:
		return want(gt == reflect.TypeOf(apiv1.Double(0)), "want apiv1.Double")
	case protoreflect.EnumKind:
		if !isEnum {
			return "want an apiv1 enum"
		}
		for _, e := range enumPairs {
			if reflect.TypeOf(e.rest) == gt {
				return want(e.proto.FullName() == fd.Enum().FullName(), "REST "+gt.Name()+" is paired with "+string(e.proto.FullName()))
			}
		}
		return "REST enum " + gt.Name() + " has no enumPairs entry"
	case protoreflect.MessageKind:
		switch fd.Message().FullName() {
		case "google.protobuf.Timestamp":
			return want(gt.Kind() == reflect.String, "want an RFC 3339 string")
		case "google.protobuf.Any":
			return want(gt.Kind() == reflect.Struct || gt == rawJSON, "want a struct with @type or raw JSON")
		case "google.rpc.Status":
			return want(gt == reflect.TypeOf(apiv1.Status{}), "want apiv1.Status")
		}
		if gt.Kind() != reflect.Struct {
			return "want a struct"
		}
		if !paired[gt] {
			return "REST type " + gt.Name() + " has no protoPairs entry"
		}
		return ""
	}
	return "kind not handled by this test"
}

func want(ok bool, msg string) string {
	if ok {
		return ""
	}
	return msg
}

func jsonName(sf reflect.StructField) string {
	tag := sf.Tag.Get("json")
	if tag == "-" {
		return ""
	}
	name, _, _ := strings.Cut(tag, ",")
	if name == "" {
		return sf.Name
	}
	return name
}

func cardinality(fd protoreflect.FieldDescriptor) string {
	switch {
	case fd.IsMap():
		return "map"
	case fd.IsList():
		return "repeated"
	case fd.HasPresence():
		return "optional"
	}
	return "singular"
}

func names(descs []protoreflect.MessageDescriptor) string {
	var out []string
	for _, d := range descs {
		out = append(out, string(d.FullName()))
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

func anyHas(descs []protoreflect.MessageDescriptor, jsonName string) bool {
	for _, d := range descs {
		if d.Fields().ByJSONName(jsonName) != nil {
			return true
		}
	}
	return false
}

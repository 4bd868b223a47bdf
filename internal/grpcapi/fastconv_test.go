package grpcapi

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	locationpb "google.golang.org/genproto/googleapis/cloud/location"
	"google.golang.org/protobuf/proto"

	"github.com/basin-nas/basin/internal/apiv1"
	"github.com/basin-nas/basin/internal/netapppb"
)

// convertPairs are the REST values gRPC answers and their messages.
var convertPairs = []struct {
	rest any
	msg  proto.Message
}{
	{apiv1.StoragePool{}, &netapppb.StoragePool{}},
	{apiv1.Volume{}, &netapppb.Volume{}},
	{apiv1.Snapshot{}, &netapppb.Snapshot{}},
	{apiv1.ActiveDirectory{}, &netapppb.ActiveDirectory{}},
	{apiv1.ListStoragePoolsResponse{}, &netapppb.ListStoragePoolsResponse{}},
	{apiv1.ListVolumesResponse{}, &netapppb.ListVolumesResponse{}},
	{apiv1.ListSnapshotsResponse{}, &netapppb.ListSnapshotsResponse{}},
	{apiv1.ListActiveDirectoriesResponse{}, &netapppb.ListActiveDirectoriesResponse{}},
	{apiv1.Operation{}, &longrunningpb.Operation{}},
	{apiv1.ListOperationsResponse{}, &longrunningpb.ListOperationsResponse{}},
	{apiv1.Location{}, &locationpb.Location{}},
	{apiv1.ListLocationsResponse{}, &locationpb.ListLocationsResponse{}},
}

// The fast path gives the message the JSON way gives, or an error where it
// does, for values of every kind the REST types hold: random ones (strings
// that are and are not timestamps or UTF-8, enums out of range, NaN, -0,
// nil and empty slices, maps and pointers, raw JSON).
func TestFastConvertMatchesJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(31, 4))
	for _, p := range convertPairs {
		typ := reflect.TypeOf(p.rest)
		t.Run(typ.Name(), func(t *testing.T) {
			fast := 0
			for i := range 800 {
				// Half the values tame: what the fast path takes, mostly.
				v := reflect.New(typ)
				randomFill(r, v.Elem(), 0, i%2 == 0)
				want, got := p.msg.ProtoReflect().New().Interface(), p.msg.ProtoReflect().New().Interface()
				werr := toProtoJSON(v.Interface(), want)
				gerr := toProto(v.Interface(), got)
				if (werr == nil) != (gerr == nil) || (werr == nil && !proto.Equal(want, got)) {
					b, _ := json.Marshal(v.Interface())
					t.Fatalf("value %d %s:\nJSON way: %v %v\ntoProto:  %v %v", i, b, want, werr, got, gerr)
				}
				if fastProto(v.Interface(), p.msg.ProtoReflect().New().Interface()) == nil {
					fast++
				}
			}
			if fast < 100 {
				t.Errorf("%d of 800 on the fast path: too few compared", fast)
			}
		})
	}
}

// What the reads answer takes the fast path: the golden values of the REST
// API's tests.
func TestFastConvertTakesGolden(t *testing.T) {
	for file, p := range map[string]struct {
		rest any
		msg  proto.Message
	}{
		"volume.json":                {&apiv1.Volume{}, &netapppb.Volume{}},
		"volume_clone_creating.json": {&apiv1.Volume{}, &netapppb.Volume{}},
		"storage_pool.json":          {&apiv1.StoragePool{}, &netapppb.StoragePool{}},
		"storage_pool_manual.json":   {&apiv1.StoragePool{}, &netapppb.StoragePool{}},
		"snapshot.json":              {&apiv1.Snapshot{}, &netapppb.Snapshot{}},
		"active_directory.json":      {&apiv1.ActiveDirectory{}, &netapppb.ActiveDirectory{}},
		"list_volumes_page.json":     {&apiv1.ListVolumesResponse{}, &netapppb.ListVolumesResponse{}},
	} {
		data, err := os.ReadFile(filepath.Join("..", "api", "testdata", "golden", file))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := apiv1.Decode(data, p.rest); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if err := fastProto(p.rest, p.msg); err != nil {
			t.Errorf("%s: not on the fast path: %v", file, err)
			continue
		}
		want := p.msg.ProtoReflect().New().Interface()
		if err := toProtoJSON(p.rest, want); err != nil || !proto.Equal(want, p.msg) {
			t.Errorf("%s: fast path %v, JSON way %v (%v)", file, p.msg, want, err)
		}
	}
}

var randomStrings = []string{"", "x", "pool1", "projects/p/locations/l/volumes/v", "10.0.0.0/8", "a\u2028<b>&",
	"\xff\xfe", "2025-01-02T03:04:05Z", "2025-01-02T03:04:05.1Z", "2025-01-02T03:04:05.123456789Z",
	"2025-01-02T03:04:05.1234567891Z", "2025-01-02T03:04:05+02:00", "2025-01-02T03:04:05.5-07:30",
	"0000-12-31T23:59:59Z", "9999-12-31T23:59:59.999999999Z", "2025-13-02T03:04:05Z", "2025-01-02 03:04:05Z", "READY"}

var tameStrings = []string{"", "2025-01-02T03:04:05Z", "2025-01-02T03:04:05.1Z", "2025-01-02T03:04:05.123456789Z",
	"2025-01-02T03:04:05+02:00"}

var rawValues = []json.RawMessage{nil, json.RawMessage(`{}`), json.RawMessage(`{"tierAction":"ENABLED"}`), json.RawMessage(`[]`), json.RawMessage(`null`)}

// randomFill sets v, a value of an apiv1 type, to random contents; tame
// ones are valid UTF-8 and timestamps, enums in range, finite numbers, no raw
// JSON or Any.
func randomFill(r *rand.Rand, v reflect.Value, depth int, tame bool) {
	if v.Type() == reflect.TypeFor[json.RawMessage]() {
		if !tame && r.IntN(4) == 0 {
			v.Set(reflect.ValueOf(rawValues[r.IntN(len(rawValues))]))
		}
		return
	}
	switch v.Kind() {
	case reflect.String:
		if tame {
			v.SetString(tameStrings[r.IntN(len(tameStrings))])
		} else if r.IntN(3) > 0 {
			v.SetString(randomStrings[r.IntN(len(randomStrings))])
		}
	case reflect.Bool:
		v.SetBool(r.IntN(2) == 0)
	case reflect.Int32:
		if tame {
			v.SetInt(int64(r.IntN(2)))
		} else {
			v.SetInt(int64(r.IntN(12)) - 1) // enums: some out of range
		}
	case reflect.Int, reflect.Int64:
		switch r.IntN(4) {
		case 0:
			v.SetInt(0)
		case 1:
			v.SetInt(math.MaxInt64 - int64(r.IntN(3)))
		default:
			v.SetInt(r.Int64N(1<<40) - 1<<20)
		}
	case reflect.Float64:
		fs := []float64{0, math.Copysign(0, -1), 1.5, 1e300, 7, -3.25, math.NaN(), math.Inf(1)}
		if tame {
			fs = fs[:6]
		}
		v.SetFloat(fs[r.IntN(len(fs))])
	case reflect.Pointer:
		if r.IntN(3) > 0 && depth < 4 {
			p := reflect.New(v.Type().Elem())
			randomFill(r, p.Elem(), depth+1, tame)
			v.Set(p)
		}
	case reflect.Slice:
		if n := r.IntN(4); n > 0 && depth < 4 {
			s := reflect.MakeSlice(v.Type(), n-1, n-1)
			for i := range n - 1 {
				randomFill(r, s.Index(i), depth+1, tame)
			}
			v.Set(s)
		}
	case reflect.Map:
		if n := r.IntN(4); n > 0 {
			m := reflect.MakeMap(v.Type())
			for range n - 1 {
				k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
				randomFill(r, k, depth+1, tame)
				randomFill(r, e, depth+1, tame)
				m.SetMapIndex(k, e)
			}
			v.Set(m)
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() && r.IntN(3) > 0 {
				randomFill(r, v.Field(i), depth+1, tame)
			}
		}
	case reflect.Interface:
		if !tame && r.IntN(3) == 0 && depth < 4 {
			var vol apiv1.Volume
			randomFill(r, reflect.ValueOf(&vol).Elem(), depth+1, tame)
			v.Set(reflect.ValueOf(vol))
		}
	}
}

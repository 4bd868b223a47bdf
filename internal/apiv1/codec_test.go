package apiv1

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestDecodeAcceptsWhatClientsSend(t *testing.T) {
	cases := []struct {
		name string
		body string
		want func(v *Volume) bool
	}{
		{"python: enum numbers, int64 strings", `{"shareName":"vol1","storagePool":"pool1","capacityGib":"100","protocols":[1,2],"securityStyle":2,
			"exportPolicy":{"rules":[{"allowedClients":"10.0.0.0/8","hasRootAccess":"true","accessType":2,"nfsv3":true,"nfsv4":false,"squashMode":2,"anonUid":"65534"}]},
			"snapshotPolicy":{"enabled":true,"dailySchedule":{"snapshotsToKeep":7.0,"minute":0.0,"hour":1.0}},"snapReserve":5.0,"restrictedActions":[1]}`,
			func(v *Volume) bool {
				r := v.ExportPolicy.Rules[0]
				return v.CapacityGib == 100 && v.Protocols[1] == 2 && *r.AccessType == 2 && *r.AnonUid == 65534 && !*r.Nfsv4 &&
					*v.SnapshotPolicy.DailySchedule.SnapshotsToKeep == 7 && v.SnapReserve == 5 && v.RestrictedActions[0] == 1
			}},
		{"node: enum names", `{"capacityGib":"100","protocols":["NFSV3","SMB"],"securityStyle":"NTFS"}`,
			func(v *Volume) bool { return v.Protocols[1] == 3 && v.SecurityStyle == 1 }},
		{"terraform: snake_case", `{"share_name":"s","capacity_gib":7,"export_policy":{"rules":[{"allowed_clients":"1.2.3.4","access_type":"READ_ONLY","kerberos_5i_read_only":true}]}}`,
			func(v *Volume) bool {
				r := v.ExportPolicy.Rules[0]
				return v.ShareName == "s" && v.CapacityGib == 7 && *r.AllowedClients == "1.2.3.4" && *r.AccessType == 1 && *r.Kerberos5iReadOnly
			}},
		{"int64 as number with exponent", `{"capacityGib":1e3}`, func(v *Volume) bool { return v.CapacityGib == 1000 }},
		{"label keys kept verbatim", `{"labels":{"my_key":"v","a_b_c":"d"}}`, func(v *Volume) bool { return v.Labels["my_key"] == "v" && v.Labels["a_b_c"] == "d" }},
		{"unknown fields ignored", `{"brandNewField":{"x":1},"shareName":"a"}`, func(v *Volume) bool { return v.ShareName == "a" }},
		{"empty body", ``, func(v *Volume) bool { return v.ShareName == "" }},
		{"null body", `null`, func(v *Volume) bool { return v.ShareName == "" }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var v Volume
			if _, err := Decode([]byte(tc.body), &v); err != nil {
				t.Fatal(err)
			}
			if !tc.want(&v) {
				t.Fatalf("decoded %+v", v)
			}
		})
	}
}

func TestDecodeErrorsNameTheField(t *testing.T) {
	for _, tc := range []struct{ body, field string }{
		{`{"capacity_gib":"abc"}`, "capacityGib"},
		{`{"serviceLevel":"GOLD"}`, "serviceLevel"},
		{`{"protocols":["NFSV3",9]}`, "protocols"},
		{`{"exportPolicy":{"rules":[{"accessType":"X"}]}}`, "exportPolicy"},
		{`{"description":5}`, "description"},
		{`{"snapReserve":"lots"}`, "snapReserve"},
		{`{"capacityGib":1.5}`, "capacityGib"},
		{`{"labels":{"a":1}}`, "labels"},
	} {
		var v Volume
		_, err := Decode([]byte(tc.body), &v)
		var fe *FieldError
		if !errors.As(err, &fe) || !strings.HasPrefix(fe.Field, tc.field) {
			t.Errorf("%s: got %#v, want a FieldError on %s", tc.body, err, tc.field)
		}
	}
	for _, body := range []string{`{`, `[1]`, `"x"`, `{"a":1} {"b":2}`} {
		var v Volume
		if _, err := Decode([]byte(body), &v); err == nil {
			t.Errorf("%s: no error", body)
		}
	}
}

func TestDecodeReportsPresence(t *testing.T) {
	var v Volume
	present, err := Decode([]byte(`{"capacity_gib":"5","description":"","labels":{}}`), &v)
	if err != nil {
		t.Fatal(err)
	}
	if !present["capacityGib"] || !present["description"] || !present["labels"] || present["shareName"] {
		t.Fatalf("present = %v", present)
	}
}

func TestEncodeFollowsProto3JSON(t *testing.T) {
	v := Volume{Name: "n", CapacityGib: 2048, ServiceLevel: 1, Protocols: []Protocol{1, 3}, ThroughputMibps: 93.75}
	b, _ := json.Marshal(v)
	const want = `{"name":"n","serviceLevel":"PREMIUM","capacityGib":"2048","protocols":["NFSV3","SMB"],"throughputMibps":93.75}`
	if string(b) != want {
		t.Fatalf("got  %s\nwant %s", b, want)
	}
	if _, err := json.Marshal(Volume{ServiceLevel: 42}); err == nil {
		t.Fatal("an enum value without a name must not be emitted")
	}
}

func TestSnakeToCamel(t *testing.T) {
	for in, want := range map[string]string{
		"capacity_gib": "capacityGib", "kerberos_5i_read_only": "kerberos5iReadOnly", "type_": "type",
		"capacityGib": "capacityGib", "net_bios_prefix": "netBiosPrefix", "_x": "x",
	} {
		if got := SnakeToCamel(in); got != want {
			t.Errorf("SnakeToCamel(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestAnyOf(t *testing.T) {
	b, _ := AnyOf(TypeEmpty, struct{}{})
	if string(b) != `{"@type":"type.googleapis.com/google.protobuf.Empty"}` {
		t.Fatalf("empty any = %s", b)
	}
	b, _ = AnyOf(TypeSnapshot, Snapshot{Name: "s"})
	if string(b) != `{"@type":"type.googleapis.com/google.cloud.netapp.v1.Snapshot","name":"s"}` {
		t.Fatalf("any = %s", b)
	}
}

// fuzzDecode checks that decoding never panics and that whatever decodes also
// re-encodes (so an accepted body can never make the server fail to answer).
func fuzzDecode[T any](f *testing.F, seeds ...string) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var v T
		if _, err := Decode(body, &v); err != nil {
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("error is not a FieldError: %v", err)
			}
			return
		}
		if _, err := json.Marshal(v); err != nil {
			t.Fatalf("decoded value does not encode: %v", err)
		}
	})
}

func FuzzDecodeVolume(f *testing.F) {
	fuzzDecode[Volume](f, `{"shareName":"vol1","storagePool":"pool1","capacityGib":"100","protocols":[1,2]}`,
		`{"export_policy":{"rules":[{"allowed_clients":"10.0.0.0/8","access_type":"READ_WRITE","anonUid":"1"}]}}`,
		`{"snapshotPolicy":{"dailySchedule":{"hour":1.0}},"labels":{"a_b":"c"}}`, `{"capacityGib":1e400}`, `[]`, `{"a":`)
}

func FuzzDecodePool(f *testing.F) {
	fuzzDecode[StoragePool](f, `{"serviceLevel":1,"capacityGib":"2048","network":"projects/p/global/networks/n"}`,
		`{"service_level":"FLEX","total_throughput_mibps":"64","type":1}`, `{"qosType":"MANUAL","enableHotTierAutoResize":null}`)
}

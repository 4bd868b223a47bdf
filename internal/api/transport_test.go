package api

import (
	"errors"
	"reflect"
	"testing"

	"github.com/basin-nas/basin/internal/apiv1"
	"github.com/basin-nas/basin/internal/model"
)

func TestErrorStatus(t *testing.T) {
	for _, c := range []struct {
		err  error
		want Status
	}{
		{model.Invalid("pageSize", "must be a non-negative integer"), Status{HTTP: 400, Name: "INVALID_ARGUMENT", Code: 3,
			Message:    model.Invalid("pageSize", "must be a non-negative integer").Error(),
			Violations: []apiv1.FieldViolation{{Field: "pageSize", Description: "must be a non-negative integer"}}}},
		{model.Errorf(model.ErrNotFound, "Volume 'v' was not found"), Status{HTTP: 404, Name: "NOT_FOUND", Code: 5,
			Message: "Volume 'v' was not found", Reason: "RESOURCE_NOT_FOUND", Domain: Domain}},
		{Unimplemented("GET /v1/x"), Status{HTTP: 501, Name: "UNIMPLEMENTED", Code: 12,
			Message: "Method GET /v1/x is not implemented by Basin", Reason: "METHOD_NOT_IMPLEMENTED", Domain: Domain}},
		{model.Errorf(model.ErrAborted, "busy"), Status{HTTP: 409, Name: "ABORTED", Code: 10, Message: "busy"}},
		{errors.New("disk on fire"), Status{HTTP: 500, Name: "INTERNAL", Code: 13,
			Message: "Internal error; see the server log for request r1"}},
	} {
		if got := ErrorStatus(c.err, "r1"); !reflect.DeepEqual(got, c.want) {
			t.Errorf("ErrorStatus(%v) =\n %+v, want\n %+v", c.err, got, c.want)
		}
	}
}

func TestListRequestValues(t *testing.T) {
	got := ListRequest{PageSize: 5, PageToken: "t", Filter: "state=READY", OrderBy: "name desc"}.values().Encode()
	if want := "filter=state%3DREADY&orderBy=name+desc&pageSize=5&pageToken=t"; got != want {
		t.Errorf("values = %s, want %s", got, want)
	}
	if got := (ListRequest{}).values().Encode(); got != "" {
		t.Errorf("empty request's values = %q", got)
	}
}

package api

import (
	"errors"
	"net/http"
	"strings"

	"github.com/basin-nas/basin/internal/apiv1"
	"github.com/basin-nas/basin/internal/model"
)

// statusOf maps an error to its HTTP status, canonical code name and gRPC code
// (google.rpc.Code's HTTP mapping; docs/api.md, "Statuses"). This is the only
// place that decides statuses, but for UNIMPLEMENTED to gcloud (writeError).
func statusOf(err error) (httpStatus int, name string, code int32) {
	switch {
	case errors.Is(err, model.ErrInvalid):
		return http.StatusBadRequest, "INVALID_ARGUMENT", 3
	case errors.Is(err, model.ErrFailedPrecondition):
		return http.StatusBadRequest, "FAILED_PRECONDITION", 9
	case errors.Is(err, model.ErrUnauthenticated):
		return http.StatusUnauthorized, "UNAUTHENTICATED", 16
	case errors.Is(err, model.ErrPermissionDenied):
		return http.StatusForbidden, "PERMISSION_DENIED", 7
	case errors.Is(err, model.ErrNotFound):
		return http.StatusNotFound, "NOT_FOUND", 5
	case errors.Is(err, model.ErrAlreadyExists):
		return http.StatusConflict, "ALREADY_EXISTS", 6
	case errors.Is(err, model.ErrAborted):
		return http.StatusConflict, "ABORTED", 10
	case errors.Is(err, model.ErrResourceExhausted):
		return http.StatusTooManyRequests, "RESOURCE_EXHAUSTED", 8
	case errors.Is(err, model.ErrCancelled):
		return 499, "CANCELLED", 1
	case errors.Is(err, model.ErrUnimplemented):
		return http.StatusNotImplemented, "UNIMPLEMENTED", 12
	case errors.Is(err, model.ErrUnavailable):
		return http.StatusServiceUnavailable, "UNAVAILABLE", 14
	}
	return http.StatusInternalServerError, "INTERNAL", 13
}

var reasons = map[string]string{
	"NOT_FOUND": "RESOURCE_NOT_FOUND", "ALREADY_EXISTS": "RESOURCE_ALREADY_EXISTS",
	"FAILED_PRECONDITION": "FAILED_PRECONDITION", "UNAUTHENTICATED": "ACCESS_TOKEN_INVALID",
	"PERMISSION_DENIED": "IAM_PERMISSION_DENIED", "UNIMPLEMENTED": "METHOD_NOT_IMPLEMENTED",
}

// Status is an API error as every transport answers it: its HTTP status, canonical
// code name and gRPC code (statusOf), the message, and the details REST sends in
// its body and gRPC in google.rpc.Status: the field violations of an invalid
// field (BadRequest) or else the ErrorInfo reason of its code.
type Status struct {
	HTTP       int
	Name       string
	Code       int32
	Message    string
	Violations []apiv1.FieldViolation
	// Reason and Domain are the ErrorInfo detail; Reason "" = none.
	Reason, Domain string
}

// Domain is the ErrorInfo domain of Basin's errors.
const Domain = "netapp.googleapis.com"

// ErrorStatus returns what a call answers for err. An internal error's message is
// replaced by one naming requestID (its detail is for the server log: the caller
// logs it when Status.Name is "INTERNAL").
func ErrorStatus(err error, requestID string) Status {
	httpStatus, name, code := statusOf(err)
	st := Status{HTTP: httpStatus, Name: name, Code: code, Message: err.Error()}
	if httpStatus == http.StatusInternalServerError {
		st.Message = "Internal error; see the server log for request " + requestID
	}
	var fe *model.FieldError
	if errors.As(err, &fe) {
		st.Violations = []apiv1.FieldViolation{{Field: fe.Field, Description: fe.Msg}}
	} else if reason, ok := reasons[name]; ok {
		st.Reason, st.Domain = reason, Domain
	}
	return st
}

// writeError sends the error body of Google APIs ({"error": {code, message, status,
// details}}, apiv1.ErrorBody). Internal errors are logged with their detail and
// answered with a generic message.
func (s *Server) writeError(rq *request, err error) {
	rq.err = err
	st := ErrorStatus(err, rq.id)
	status, name := st.HTTP, st.Name
	if name == "UNIMPLEMENTED" && fromGcloud(rq.r) {
		// gcloud's HTTP layer (apitools) retries every 5xx for about 30 s, then
		// reports a network problem; a 400 it shows at once (docs/api.md, "Statuses").
		status, name = http.StatusBadRequest, "FAILED_PRECONDITION"
	}
	if st.HTTP == http.StatusInternalServerError {
		s.log.Error("internal error", "err", err, "request_id", rq.id, "path", rq.r.URL.Path)
	}
	body := apiv1.ErrorBody{Error: apiv1.HTTPError{Code: status, Message: st.Message, Status: name}}
	if st.Violations != nil {
		body.Error.Details = append(body.Error.Details, apiv1.BadRequest{Type: apiv1.TypeBadRequest, FieldViolations: st.Violations})
	} else if st.Reason != "" {
		body.Error.Details = append(body.Error.Details, apiv1.ErrorInfo{Type: apiv1.TypeErrorInfo, Reason: st.Reason, Domain: st.Domain})
	}
	s.writeJSON(rq, status, body)
}

// fromGcloud reports whether r comes from the Google Cloud CLI. Its transport
// appends to every request's User-Agent "gcloud/VERSION command/COMMAND …"
// (googlecloudsdk/core/transport.py, MakeUserAgentString): a "gcloud/" product
// followed by a "command/" one. Google's client libraries send other products
// (python-requests/…, google-api-nodejs-client/…, google-api-go-client/…).
func fromGcloud(r *http.Request) bool {
	f := strings.Fields(r.UserAgent())
	for i := 0; i+1 < len(f); i++ {
		if len(f[i]) > len("gcloud/") && strings.HasPrefix(f[i], "gcloud/") && strings.HasPrefix(f[i+1], "command/") {
			return true
		}
	}
	return false
}

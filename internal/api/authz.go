package api

import (
	"errors"
	"net/http"
	"strings"

	"github.com/basin-nas/basin/internal/iam"
	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/store"
)

// splitPath turns /v1/a/b/c:verb into segments and the verb.
func splitPath(path string) ([]string, string) {
	segs := strings.Split(strings.TrimPrefix(path, "/v1/"), "/")
	verb := ""
	if last := segs[len(segs)-1]; strings.Contains(last, ":") {
		i := strings.LastIndex(last, ":")
		segs[len(segs)-1], verb = last[:i], last[i+1:]
	}
	return segs, verb
}

// permissionFor names the permission a request needs and the resource it acts on.
// Requests no method matches need none: they end in 404 or 501 without work.
func permissionFor(segs []string, verb, method string, q map[string][]string) (perm, resource string) {
	if len(segs) < 2 || segs[0] != "projects" {
		return "", ""
	}
	resource = strings.Join(segs, "/")
	if len(segs) == 2 {
		switch verb {
		case "getIamPolicy":
			return iam.PermGetIamPolicy, resource
		case "setIamPolicy":
			return iam.PermSetIamPolicy, resource
		}
		return "", resource // testIamPermissions: any caller may ask
	}
	switch segs[2] {
	case "auditLogs":
		return iam.PermAuditList, resource
	case "serviceAccounts":
		return serviceAccountPermission(segs[3:], verb, method), resource
	case "locations":
	default:
		return "", resource
	}
	if len(segs) <= 4 {
		return iam.NetappPermission("locations", pick(len(segs) == 3, "list", "get")), resource
	}
	rest := segs[4:]
	collection := rest[0]
	if collection == "volumes" && len(rest) >= 3 && rest[2] == "snapshots" {
		collection, rest = "snapshots", rest[2:]
	}
	hasID := len(rest) == 2
	if len(rest) > 2 {
		return "", resource
	}
	var action string
	switch {
	case verb != "":
		action = verb
	case method == http.MethodGet:
		action = pick(hasID, "get", "list")
	case method == http.MethodPost && !hasID:
		action = "create"
		if id := firstValue(q, collectionIDParam[collection]); id != "" {
			resource += "/" + id
		}
	case method == http.MethodPatch && hasID:
		action = "update"
	case method == http.MethodDelete && hasID:
		action = "delete"
	}
	return iam.NetappPermission(collection, action), resource
}

var collectionIDParam = map[string]string{"storagePools": "storagePoolId", "volumes": "volumeId", "snapshots": "snapshotId", "activeDirectories": "activeDirectoryId"}

func serviceAccountPermission(rest []string, verb, method string) string {
	switch {
	case len(rest) == 0 && method == http.MethodGet:
		return iam.PermSAList
	case len(rest) == 0 && method == http.MethodPost:
		return iam.PermSACreate
	case len(rest) == 1 && verb == "disable":
		return iam.PermSADisable
	case len(rest) == 1 && verb == "enable":
		return iam.PermSAEnable
	case len(rest) == 1 && method == http.MethodGet:
		return iam.PermSAGet
	case len(rest) == 1 && method == http.MethodDelete:
		return iam.PermSADelete
	case len(rest) == 2 && rest[1] == "keys" && method == http.MethodGet:
		return iam.PermKeyList
	case len(rest) == 2 && rest[1] == "keys" && method == http.MethodPost:
		return iam.PermKeyCreate
	case len(rest) == 3 && rest[1] == "keys" && method == http.MethodGet:
		return iam.PermKeyGet
	case len(rest) == 3 && rest[1] == "keys" && method == http.MethodDelete:
		return iam.PermKeyDelete
	}
	return ""
}

func pick(c bool, a, b string) string {
	if c {
		return a
	}
	return b
}

func firstValue(q map[string][]string, key string) string {
	if v := q[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// authorize checks the caller's permission on the request's project.
func (s *Server) authorize(rq *request) error {
	if s.opts.Auth == nil || rq.perm == "" {
		return nil
	}
	var pol *model.IAMPolicy
	err := s.st.View(rq.ctx, func(tx store.Tx) (err error) {
		pol, err = store.Get[model.IAMPolicy](tx, store.KindIAMPolicy, "projects/"+rq.project)
		if errors.Is(err, model.ErrNotFound) {
			pol, err = nil, nil
		}
		return err
	})
	if err != nil {
		return err
	}
	if !iam.Allowed(rq.principal, pol, rq.perm) {
		return model.Errorf(model.ErrPermissionDenied, "Permission '%s' denied on resource '%s' (or it may not exist)", rq.perm, rq.resource)
	}
	return nil
}

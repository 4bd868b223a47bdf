package api

import "net/http"

// project is a project in the shape of Resource Manager v1's Project
// (cloudresourcemanager.googleapis.com/v1/projects/{projectId}), the fields a
// Basin project has: in Basin a project is a name that resources and IAM
// policies carry, never created or deleted, so every one is ACTIVE; it has no
// number, parent, labels or creation time.
type project struct {
	ProjectID      string `json:"projectId"`
	Name           string `json:"name"`
	LifecycleState string `json:"lifecycleState"`
}

// getProject answers GET /v1/projects/{id}, what `gcloud config set project`
// asks Resource Manager once an account is active (its config validator,
// WarnIfSettingProjectWithNoAccess): with api_endpoint_overrides/cloudresourcemanager
// set to Basin, gcloud finds the project at once instead of trying Google's
// service. The caller needs resourcemanager.projects.get, which every role on
// the project grants; the project ID is checked by the router.
func (s *Server) getProject(rq *request, id string) {
	s.writeJSON(rq, http.StatusOK, project{ProjectID: id, Name: id, LifecycleState: "ACTIVE"})
}

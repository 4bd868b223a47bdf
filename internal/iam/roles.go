package iam

import (
	"slices"
	"strings"

	"github.com/basin-nas/basin/internal/model"
)

// Predefined roles, as upstream names them.
const (
	RoleOwner        = "roles/owner"
	RoleNetappAdmin  = "roles/netapp.admin"
	RoleNetappViewer = "roles/netapp.viewer"
)

// Roles lists the roles a binding may name.
var Roles = []string{RoleOwner, RoleNetappAdmin, RoleNetappViewer}

// netappResources are the v1 resource collections, for the netapp.* permissions.
var netappResources = map[string][]string{
	"locations":         {"get", "list"},
	"storagePools":      {"create", "get", "list", "update", "delete", "switch", "validateDirectoryService"},
	"volumes":           {"create", "get", "list", "update", "delete", "revert"},
	"snapshots":         {"create", "get", "list", "update", "delete"},
	"activeDirectories": {"create", "get", "list", "update", "delete"},
	"operations":        {"get", "list", "delete", "cancel"},
}

// Permissions Basin checks outside the netapp.* family.
const (
	PermProjectGet      = "resourcemanager.projects.get"
	PermGetIamPolicy    = "resourcemanager.projects.getIamPolicy"
	PermSetIamPolicy    = "resourcemanager.projects.setIamPolicy"
	PermAuditList       = "basin.auditLogs.list"
	PermSACreate        = "iam.serviceAccounts.create"
	PermSAGet           = "iam.serviceAccounts.get"
	PermSAList          = "iam.serviceAccounts.list"
	PermSADelete        = "iam.serviceAccounts.delete"
	PermSADisable       = "iam.serviceAccounts.disable"
	PermSAEnable        = "iam.serviceAccounts.enable"
	PermKeyCreate       = "iam.serviceAccountKeys.create"
	PermKeyGet          = "iam.serviceAccountKeys.get"
	PermKeyList         = "iam.serviceAccountKeys.list"
	PermKeyDelete       = "iam.serviceAccountKeys.delete"
	PermSettingsGet     = "basin.settings.get"
	PermSettingsUpdate  = "basin.settings.update"
	PermMetricsGet      = "basin.metrics.get"
	netappPrefix        = "netapp."
	netappGet, netappLs = ".get", ".list"
)

// Permissions returns every permission Basin knows, sorted.
func Permissions() []string {
	out := []string{PermProjectGet, PermGetIamPolicy, PermSetIamPolicy, PermAuditList, PermSACreate, PermSAGet, PermSAList, PermSADelete,
		PermSADisable, PermSAEnable, PermKeyCreate, PermKeyGet, PermKeyList, PermKeyDelete, PermSettingsGet, PermSettingsUpdate, PermMetricsGet}
	for res, verbs := range netappResources {
		for _, v := range verbs {
			out = append(out, netappPrefix+res+"."+v)
		}
	}
	slices.Sort(out)
	return out
}

// NetappPermission names the permission of a verb on a v1 collection ("" if none).
func NetappPermission(collection, verb string) string {
	if slices.Contains(netappResources[collection], verb) {
		return netappPrefix + collection + "." + verb
	}
	return ""
}

// RoleGrants reports whether role includes perm. The project settings (a
// Basin-only resource, the project's throughput cap) go with the netapp.* family:
// roles/netapp.admin may read and change them, roles/netapp.viewer read them.
// Volume metrics (Basin-only) are read by both, and so is the project itself
// (resourcemanager.projects.get, which gcloud asks for when a project is set),
// so that every role on a project can name it. The audit log and IAM stay
// roles/owner's.
func RoleGrants(role, perm string) bool {
	switch role {
	case RoleOwner:
		return true
	case RoleNetappAdmin:
		return strings.HasPrefix(perm, netappPrefix) || perm == PermSettingsGet || perm == PermSettingsUpdate || perm == PermMetricsGet ||
			perm == PermProjectGet
	case RoleNetappViewer:
		return strings.HasPrefix(perm, netappPrefix) && (strings.HasSuffix(perm, netappGet) || strings.HasSuffix(perm, netappLs)) ||
			perm == PermSettingsGet || perm == PermMetricsGet || perm == PermProjectGet
	}
	return false
}

// Member is how a service account appears in bindings.
func Member(email string) string { return "serviceAccount:" + email }

// Allowed reports whether p holds perm under pol (nil = no bindings). Owner accounts
// (the key written on first start) hold roles/owner on every project.
func Allowed(p *Principal, pol *model.IAMPolicy, perm string) bool {
	if p == nil {
		return false
	}
	if p.Owner {
		return true
	}
	if pol == nil {
		return false
	}
	for _, b := range pol.Bindings {
		if slices.Contains(b.Members, Member(p.Email)) && RoleGrants(b.Role, perm) {
			return true
		}
	}
	return false
}

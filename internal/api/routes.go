package api

import (
	"net/http"

	"github.com/basin-nas/basin/internal/iam"
)

// The route table: every method of the REST API, with the permission it needs (or
// why it needs none) and its handler. It is the single source of both dispatch and
// authorization (router.go); the routes matrix test calls every entry as every role.
const (
	patProject    = "/v1/projects/{project}"
	patLocation   = patProject + "/locations/{location}"
	patPools      = patLocation + "/storagePools"
	patPool       = patPools + "/{storagePool}"
	patVolumes    = patLocation + "/volumes"
	patVolume     = patVolumes + "/{volume}"
	patSnapshots  = patVolume + "/snapshots"
	patSnapshot   = patSnapshots + "/{snapshot}"
	patADs        = patLocation + "/activeDirectories"
	patAD         = patADs + "/{activeDirectory}"
	patOperations = patLocation + "/operations"
	patOperation  = patOperations + "/{operation}"
	patSettings   = patLocation + "/settings"
	patAccounts   = patProject + "/serviceAccounts"
	patAccount    = patAccounts + "/{serviceAccount}"
	patKeys       = patAccount + "/keys"
	patKey        = patKeys + "/{key}"
	// notBuilt is why the v1 methods Basin does not implement need no permission.
	notBuilt = "not implemented by Basin: answered 501 without work"
	// anyMethod is the Method of a route that answers every method alike.
	anyMethod = "*"
)

// np names a netapp.* permission (NetappPermission; "" for an unknown one, which
// compileRoutes refuses).
func np(collection, verb string) string { return iam.NetappPermission(collection, verb) }

// unimplementedRoute is the handler of the v1 methods Basin does not implement.
func unimplementedRoute(s *Server, rq *request, _ pathVars) { s.unimplemented(rq) }

// snapshotParent is the volume name a snapshot route's handlers take.
func snapshotParent(v pathVars) string { return v.parent().name() + "/volumes/" + v["volume"] }

var apiRoutes = []Route{
	// Basin-only: the nodes of this Basin service (nodes.go).
	{Method: http.MethodGet, Pattern: "/v1/nodes", Admin: "lists the service's nodes, which serve every project",
		Handle: func(s *Server, rq *request, _ pathVars) { s.listNodes(rq) }},
	{Method: http.MethodPost, Pattern: "/v1/nodes/{node}:drain", Admin: "moves a node's volumes to other nodes, which serve every project",
		Handle: func(s *Server, rq *request, v pathVars) { s.drainNode(rq, v["node"], true) }},
	{Method: http.MethodPost, Pattern: "/v1/nodes/{node}:undrain", Admin: "lets a drained node serve volumes again, which serve every project",
		Handle: func(s *Server, rq *request, v pathVars) { s.drainNode(rq, v["node"], false) }},

	// Basin-only: a one-time sign-in link for the web console (console.go).
	{Method: http.MethodPost, Pattern: "/v1/consoleSignInLinks", Public: "signs the web console in as the caller itself, with the caller's own permissions and no more",
		Handle: func(s *Server, rq *request, _ pathVars) { s.createSignInLink(rq) }},

	// The project, in Resource Manager v1's shape: gcloud reads it when a project
	// is set (projects.go).
	{Method: http.MethodGet, Pattern: patProject, Perm: iam.PermProjectGet,
		Handle: func(s *Server, rq *request, v pathVars) { s.getProject(rq, v["project"]) }},

	// Project IAM policy and audit log.
	{Method: http.MethodPost, Pattern: patProject + ":getIamPolicy", Perm: iam.PermGetIamPolicy,
		Handle: func(s *Server, rq *request, v pathVars) { s.getIamPolicy(rq, v["project"]) }},
	{Method: http.MethodPost, Pattern: patProject + ":setIamPolicy", Perm: iam.PermSetIamPolicy,
		Handle: func(s *Server, rq *request, v pathVars) { s.setIamPolicy(rq, v["project"]) }},
	{Method: http.MethodPost, Pattern: patProject + ":testIamPermissions", Public: "answers only which of the named permissions the caller itself holds",
		Handle: func(s *Server, rq *request, v pathVars) { s.testIamPermissions(rq, v["project"]) }},
	{Method: http.MethodGet, Pattern: patProject + "/auditLogs", Perm: iam.PermAuditList,
		Handle: func(s *Server, rq *request, v pathVars) { s.listAuditLogs(rq, v["project"]) }},

	// Service accounts and their keys.
	{Method: http.MethodGet, Pattern: patAccounts, Perm: iam.PermSAList,
		Handle: func(s *Server, rq *request, v pathVars) { s.listServiceAccounts(rq, v["project"]) }},
	{Method: http.MethodPost, Pattern: patAccounts, Perm: iam.PermSACreate,
		Handle: func(s *Server, rq *request, v pathVars) { s.createServiceAccount(rq, v["project"]) }},
	{Method: http.MethodGet, Pattern: patAccount, Perm: iam.PermSAGet,
		Handle: func(s *Server, rq *request, v pathVars) { s.getServiceAccount(rq, v["project"], v["serviceAccount"]) }},
	{Method: http.MethodDelete, Pattern: patAccount, Perm: iam.PermSADelete,
		Handle: func(s *Server, rq *request, v pathVars) {
			s.deleteServiceAccount(rq, v["project"], v["serviceAccount"])
		}},
	{Method: http.MethodPost, Pattern: patAccount + ":disable", Perm: iam.PermSADisable,
		Handle: func(s *Server, rq *request, v pathVars) {
			s.setServiceAccountDisabled(rq, v["project"], v["serviceAccount"], true)
		}},
	{Method: http.MethodPost, Pattern: patAccount + ":enable", Perm: iam.PermSAEnable,
		Handle: func(s *Server, rq *request, v pathVars) {
			s.setServiceAccountDisabled(rq, v["project"], v["serviceAccount"], false)
		}},
	{Method: http.MethodGet, Pattern: patKeys, Perm: iam.PermKeyList,
		Handle: func(s *Server, rq *request, v pathVars) { s.listKeys(rq, v["project"], v["serviceAccount"]) }},
	{Method: http.MethodPost, Pattern: patKeys, Perm: iam.PermKeyCreate,
		Handle: func(s *Server, rq *request, v pathVars) { s.createKey(rq, v["project"], v["serviceAccount"]) }},
	{Method: http.MethodGet, Pattern: patKey, Perm: iam.PermKeyGet,
		Handle: func(s *Server, rq *request, v pathVars) { s.getKey(rq, v["project"], v["serviceAccount"], v["key"]) }},
	{Method: http.MethodDelete, Pattern: patKey, Perm: iam.PermKeyDelete,
		Handle: func(s *Server, rq *request, v pathVars) { s.deleteKey(rq, v["project"], v["serviceAccount"], v["key"]) }},

	// Locations.
	{Method: http.MethodGet, Pattern: patProject + "/locations", Perm: np("locations", "list"),
		Handle: func(s *Server, rq *request, v pathVars) { s.listLocations(rq, v["project"]) }},
	{Method: http.MethodGet, Pattern: patLocation, Perm: np("locations", "get"),
		Handle: func(s *Server, rq *request, v pathVars) { s.getLocation(rq, v.parent()) }},

	// Storage pools.
	{Method: http.MethodGet, Pattern: patPools, Perm: np("storagePools", "list"),
		Handle: func(s *Server, rq *request, v pathVars) { s.listPools(rq, v.parent()) }},
	{Method: http.MethodPost, Pattern: patPools, Perm: np("storagePools", "create"), CreateID: "storagePoolId",
		Handle: func(s *Server, rq *request, v pathVars) { s.createPool(rq, v.parent()) }},
	{Method: http.MethodGet, Pattern: patPool, Perm: np("storagePools", "get"),
		Handle: func(s *Server, rq *request, v pathVars) { s.getPool(rq, v.parent(), v["storagePool"]) }},
	{Method: http.MethodPatch, Pattern: patPool, Perm: np("storagePools", "update"),
		Handle: func(s *Server, rq *request, v pathVars) { s.updatePool(rq, v.parent(), v["storagePool"]) }},
	{Method: http.MethodDelete, Pattern: patPool, Perm: np("storagePools", "delete"),
		Handle: func(s *Server, rq *request, v pathVars) { s.deletePool(rq, v.parent(), v["storagePool"]) }},
	{Method: http.MethodPost, Pattern: patPool + ":switch", Perm: np("storagePools", "switch"),
		Handle: func(s *Server, rq *request, v pathVars) { s.switchPool(rq, v.parent(), v["storagePool"]) }},
	// Basin-only: the pool's volumes' metrics combined (internal/metrics).
	{Method: http.MethodGet, Pattern: patPool + "/metrics", Perm: iam.PermMetricsGet,
		Handle: func(s *Server, rq *request, v pathVars) { s.getPoolMetrics(rq, v.parent(), v["storagePool"]) }},
	{Method: http.MethodPost, Pattern: patPool + ":validateDirectoryService", Perm: np("storagePools", "validateDirectoryService"),
		Handle: func(s *Server, rq *request, v pathVars) { s.validateDirectoryService(rq, v.parent(), v["storagePool"]) }},
	{Method: anyMethod, Pattern: patPool + ":restoreVolume", Public: notBuilt, Handle: unimplementedRoute},
	{Method: anyMethod, Pattern: patPool + ":updateBackupConfig", Public: notBuilt, Handle: unimplementedRoute},
	{Method: anyMethod, Pattern: patPool + "/backupConfigs/**", Public: notBuilt, Handle: unimplementedRoute},
	{Method: anyMethod, Pattern: patPool + "/ontap/**", Public: notBuilt, Handle: unimplementedRoute},

	// Volumes.
	{Method: http.MethodGet, Pattern: patVolumes, Perm: np("volumes", "list"),
		Handle: func(s *Server, rq *request, v pathVars) { s.listVolumes(rq, v.parent()) }},
	{Method: http.MethodPost, Pattern: patVolumes, Perm: np("volumes", "create"), CreateID: "volumeId",
		Handle: func(s *Server, rq *request, v pathVars) { s.createVolume(rq, v.parent()) }},
	{Method: http.MethodGet, Pattern: patVolume, Perm: np("volumes", "get"),
		Handle: func(s *Server, rq *request, v pathVars) { s.getVolume(rq, v.parent(), v["volume"]) }},
	{Method: http.MethodPatch, Pattern: patVolume, Perm: np("volumes", "update"),
		Handle: func(s *Server, rq *request, v pathVars) { s.updateVolume(rq, v.parent(), v["volume"]) }},
	{Method: http.MethodDelete, Pattern: patVolume, Perm: np("volumes", "delete"),
		Handle: func(s *Server, rq *request, v pathVars) { s.deleteVolume(rq, v.parent(), v["volume"]) }},
	{Method: http.MethodPost, Pattern: patVolume + ":revert", Perm: np("volumes", "revert"),
		Handle: func(s *Server, rq *request, v pathVars) { s.revertVolume(rq, v.parent(), v["volume"]) }},
	// Basin-only: the volume's performance and space metrics (internal/metrics).
	{Method: http.MethodGet, Pattern: patVolume + "/metrics", Perm: iam.PermMetricsGet,
		Handle: func(s *Server, rq *request, v pathVars) { s.getVolumeMetrics(rq, v.parent(), v["volume"]) }},
	{Method: anyMethod, Pattern: patVolume + ":restore", Public: notBuilt, Handle: unimplementedRoute},
	{Method: anyMethod, Pattern: patVolume + ":startSplit", Public: notBuilt, Handle: unimplementedRoute},
	{Method: anyMethod, Pattern: patVolume + ":getSplitStatus", Public: notBuilt, Handle: unimplementedRoute},
	{Method: anyMethod, Pattern: patVolume + ":establishPeering", Public: notBuilt, Handle: unimplementedRoute},
	{Method: anyMethod, Pattern: patVolume + "/replications/**", Public: notBuilt, Handle: unimplementedRoute},
	{Method: anyMethod, Pattern: patVolume + "/quotaRules/**", Public: notBuilt, Handle: unimplementedRoute},

	// Snapshots.
	{Method: http.MethodGet, Pattern: patSnapshots, Perm: np("snapshots", "list"),
		Handle: func(s *Server, rq *request, v pathVars) { s.listSnapshots(rq, v.parent(), snapshotParent(v)) }},
	{Method: http.MethodPost, Pattern: patSnapshots, Perm: np("snapshots", "create"), CreateID: "snapshotId",
		Handle: func(s *Server, rq *request, v pathVars) { s.createSnapshot(rq, v.parent(), snapshotParent(v)) }},
	{Method: http.MethodGet, Pattern: patSnapshot, Perm: np("snapshots", "get"),
		Handle: func(s *Server, rq *request, v pathVars) { s.getSnapshot(rq, snapshotParent(v), v["snapshot"]) }},
	{Method: http.MethodPatch, Pattern: patSnapshot, Perm: np("snapshots", "update"),
		Handle: func(s *Server, rq *request, v pathVars) {
			s.updateSnapshot(rq, v.parent(), snapshotParent(v), v["snapshot"])
		}},
	{Method: http.MethodDelete, Pattern: patSnapshot, Perm: np("snapshots", "delete"),
		Handle: func(s *Server, rq *request, v pathVars) {
			s.deleteSnapshot(rq, v.parent(), snapshotParent(v), v["snapshot"])
		}},

	// Active Directory policies.
	{Method: http.MethodGet, Pattern: patADs, Perm: np("activeDirectories", "list"),
		Handle: func(s *Server, rq *request, v pathVars) { s.listADs(rq, v.parent()) }},
	{Method: http.MethodPost, Pattern: patADs, Perm: np("activeDirectories", "create"), CreateID: "activeDirectoryId",
		Handle: func(s *Server, rq *request, v pathVars) { s.createAD(rq, v.parent()) }},
	{Method: http.MethodGet, Pattern: patAD, Perm: np("activeDirectories", "get"),
		Handle: func(s *Server, rq *request, v pathVars) { s.getAD(rq, v.parent(), v["activeDirectory"]) }},
	{Method: http.MethodPatch, Pattern: patAD, Perm: np("activeDirectories", "update"),
		Handle: func(s *Server, rq *request, v pathVars) { s.updateAD(rq, v.parent(), v["activeDirectory"]) }},
	{Method: http.MethodDelete, Pattern: patAD, Perm: np("activeDirectories", "delete"),
		Handle: func(s *Server, rq *request, v pathVars) { s.deleteAD(rq, v.parent(), v["activeDirectory"]) }},

	// Long-running operations.
	{Method: http.MethodGet, Pattern: patOperations, Perm: np("operations", "list"),
		Handle: func(s *Server, rq *request, v pathVars) { s.listOperations(rq, v.parent()) }},
	{Method: http.MethodGet, Pattern: patOperation, Perm: np("operations", "get"),
		Handle: func(s *Server, rq *request, v pathVars) { s.getOperation(rq, v.parent(), v["operation"]) }},
	{Method: http.MethodDelete, Pattern: patOperation, Perm: np("operations", "delete"),
		Handle: func(s *Server, rq *request, v pathVars) { s.deleteOperation(rq, v.parent(), v["operation"]) }},
	{Method: http.MethodPost, Pattern: patOperation + ":cancel", Perm: np("operations", "cancel"),
		Handle: func(s *Server, rq *request, v pathVars) { s.cancelOperation(rq, v.parent(), v["operation"]) }},

	// Basin-only: the project's volumes' metrics in the location ("-": every
	// location) combined (internal/metrics).
	{Method: http.MethodGet, Pattern: patLocation + "/metrics", Perm: iam.PermMetricsGet,
		Handle: func(s *Server, rq *request, v pathVars) { s.getLocationMetrics(rq, v.parent()) }},

	// Project settings (Basin-only: the project's throughput cap in a location).
	{Method: http.MethodGet, Pattern: patSettings, Perm: iam.PermSettingsGet,
		Handle: func(s *Server, rq *request, v pathVars) { s.getSettings(rq, v.parent()) }},
	{Method: http.MethodPatch, Pattern: patSettings, Perm: iam.PermSettingsUpdate,
		Handle: func(s *Server, rq *request, v pathVars) { s.updateSettings(rq, v.parent()) }},

	// Collections of the v1 API that Basin does not implement (yet).
	{Method: anyMethod, Pattern: patLocation + "/backupVaults/**", Public: notBuilt, Handle: unimplementedRoute},
	{Method: anyMethod, Pattern: patLocation + "/backupPolicies/**", Public: notBuilt, Handle: unimplementedRoute},
	{Method: anyMethod, Pattern: patLocation + "/kmsConfigs/**", Public: notBuilt, Handle: unimplementedRoute},
	{Method: anyMethod, Pattern: patLocation + "/hostGroups/**", Public: notBuilt, Handle: unimplementedRoute},
}

package apiv1

// Basin's identity surfaces follow the Google IAM v1 shapes, so tools and habits carry
// over. They live on their own paths and never add fields to the NetApp resources.

// ServiceAccount is google.iam.admin.v1.ServiceAccount.
type ServiceAccount struct {
	Name           string `json:"name,omitempty"`
	ProjectID      string `json:"projectId,omitempty"`
	UniqueID       string `json:"uniqueId,omitempty"`
	Email          string `json:"email,omitempty"`
	DisplayName    string `json:"displayName,omitempty"`
	Description    string `json:"description,omitempty"`
	Oauth2ClientID string `json:"oauth2ClientId,omitempty"`
	Disabled       bool   `json:"disabled,omitempty"`
}

// CreateServiceAccountRequest is the body of POST …/serviceAccounts.
type CreateServiceAccountRequest struct {
	AccountID      string          `json:"accountId"`
	ServiceAccount *ServiceAccount `json:"serviceAccount,omitempty"`
}

// ServiceAccountKey is google.iam.admin.v1.ServiceAccountKey. PrivateKeyData is only
// ever set in the answer to a create.
type ServiceAccountKey struct {
	Name            string `json:"name,omitempty"`
	PrivateKeyType  string `json:"privateKeyType,omitempty"`
	KeyAlgorithm    string `json:"keyAlgorithm,omitempty"`
	PrivateKeyData  string `json:"privateKeyData,omitempty"`
	ValidAfterTime  string `json:"validAfterTime,omitempty"`
	ValidBeforeTime string `json:"validBeforeTime,omitempty"`
	KeyOrigin       string `json:"keyOrigin,omitempty"`
	KeyType         string `json:"keyType,omitempty"`
}

// CreateServiceAccountKeyRequest is the body of POST …/keys; validBeforeTime (an
// expiry) is Basin's addition.
type CreateServiceAccountKeyRequest struct {
	PrivateKeyType  string `json:"privateKeyType,omitempty"`
	KeyAlgorithm    string `json:"keyAlgorithm,omitempty"`
	ValidBeforeTime string `json:"validBeforeTime,omitempty"`
}

// Policy is google.iam.v1.Policy.
type Policy struct {
	Version  int32     `json:"version,omitempty"`
	Bindings []Binding `json:"bindings,omitempty"`
	Etag     string    `json:"etag,omitempty"`
}

// Binding is google.iam.v1.Binding.
type Binding struct {
	Role    string   `json:"role"`
	Members []string `json:"members"`
}

// SetIamPolicyRequest is the body of :setIamPolicy.
type SetIamPolicyRequest struct {
	Policy *Policy `json:"policy"`
}

// TestIamPermissionsRequest / Response are the bodies of :testIamPermissions.
type (
	TestIamPermissionsRequest struct {
		Permissions []string `json:"permissions"`
	}
	TestIamPermissionsResponse struct {
		Permissions []string `json:"permissions,omitempty"`
	}
)

// AuditLogEntry is one audited call.
type AuditLogEntry struct {
	Name          string `json:"name"`
	Time          string `json:"time"`
	Principal     string `json:"principal,omitempty"`
	Method        string `json:"method"`
	Resource      string `json:"resource"`
	Status        int    `json:"status"`
	Outcome       string `json:"outcome"`
	RequestID     string `json:"requestId"`
	ClientAddress string `json:"clientAddress"`
	// Count is how many calls an aggregated entry (refused calls of one client)
	// stands for; omitted = 1. Throttled is how many of them were answered 429.
	Count     int `json:"count,omitempty"`
	Throttled int `json:"throttled,omitempty"`
	// Details says more of what Basin did on its own (a volume's storage
	// failing, and back), in words for the project's users.
	Details string `json:"details,omitempty"`
}

// List responses of the identity surfaces.
type (
	ListServiceAccountsResponse struct {
		Accounts      []ServiceAccount `json:"accounts,omitempty"`
		NextPageToken string           `json:"nextPageToken,omitempty"`
	}
	ListServiceAccountKeysResponse struct {
		Keys []ServiceAccountKey `json:"keys,omitempty"`
	}
	ListAuditLogsResponse struct {
		Entries       []AuditLogEntry `json:"entries,omitempty"`
		NextPageToken string          `json:"nextPageToken,omitempty"`
	}
)

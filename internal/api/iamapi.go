package api

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/basin-nas/basin/internal/apiv1"
	"github.com/basin-nas/basin/internal/iam"
	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/store"
)

// Identity surfaces: service accounts, keys, project IAM policies, audit logs.

// EmailDomain is the domain of service-account emails: {account}@{project}.iam.basin.internal.
const EmailDomain = ".iam.basin.internal"

// accountIDRE is upstream's rule for service-account IDs: 6 to 30 lowercase
// letters, digits and hyphens, starting with a letter and not ending with a hyphen.
var accountIDRE = regexp.MustCompile(`^[a-z][-a-z0-9]{4,28}[a-z0-9]$`)

// emptyEtag is the etag of a project that has never had a policy.
const emptyEtag = "ACAB"

func saToWire(sa *model.ServiceAccount) apiv1.ServiceAccount {
	return apiv1.ServiceAccount{Name: "projects/" + sa.Project + "/serviceAccounts/" + sa.Email, ProjectID: sa.Project,
		UniqueID: sa.UniqueID, Email: sa.Email, DisplayName: sa.DisplayName, Description: sa.Description,
		Oauth2ClientID: sa.UniqueID, Disabled: sa.Disabled}
}

func keyToWire(project string, k *model.ServiceAccountKey) apiv1.ServiceAccountKey {
	w := apiv1.ServiceAccountKey{Name: "projects/" + project + "/serviceAccounts/" + k.Email + "/keys/" + k.ID,
		KeyAlgorithm: "KEY_ALG_RSA_2048", ValidAfterTime: apiv1.FormatTime(k.CreateTime), KeyOrigin: "GOOGLE_PROVIDED", KeyType: "USER_MANAGED"}
	w.ValidBeforeTime = apiv1.FormatTime(k.ExpireTime)
	if w.ValidBeforeTime == "" {
		w.ValidBeforeTime = "9999-12-31T23:59:59Z"
	}
	return w
}

// loadAccount finds a service account of project by email ("-" is not supported).
func loadAccount(tx store.Tx, project, email string) (*model.ServiceAccount, error) {
	sa, err := store.Get[model.ServiceAccount](tx, store.KindServiceAccount, email)
	if errors.Is(err, model.ErrNotFound) || (err == nil && sa.Project != project) {
		return nil, model.Errorf(model.ErrNotFound, "Service account projects/%s/serviceAccounts/%s was not found", project, email)
	}
	return sa, err
}

func (s *Server) createServiceAccount(rq *request, project string) {
	var req apiv1.CreateServiceAccountRequest
	if _, err := s.readBody(rq, &req); err != nil {
		s.writeError(rq, err)
		return
	}
	if !accountIDRE.MatchString(req.AccountID) {
		s.writeError(rq, model.Invalid("accountId", "%q must be 6-30 lowercase letters, digits or hyphens, starting with a letter and ending with a letter or digit", req.AccountID))
		return
	}
	n, _ := rand.Int(rand.Reader, new(big.Int).Exp(big.NewInt(10), big.NewInt(20), nil))
	sa := &model.ServiceAccount{Email: req.AccountID + "@" + project + EmailDomain, Project: project, CreateTime: s.now().UTC(),
		UniqueID: fmt.Sprintf("1%020s", n.String())}
	if req.ServiceAccount != nil {
		sa.DisplayName, sa.Description = req.ServiceAccount.DisplayName, req.ServiceAccount.Description
	}
	if len(sa.DisplayName) > 100 || len(sa.Description) > 256 {
		s.writeError(rq, model.Invalid("serviceAccount", "displayName is at most 100 and description at most 256 characters"))
		return
	}
	err := s.st.Update(rq.ctx, func(tx store.Tx) error {
		return tx.Insert(store.KindServiceAccount, sa.Email, "projects/"+project, sa)
	})
	if err != nil {
		s.writeError(rq, err)
		return
	}
	s.writeJSON(rq, http.StatusOK, saToWire(sa))
}

func (s *Server) listServiceAccounts(rq *request, project string) {
	lq, err := parseListQuery[apiv1.ServiceAccount](rq.q, "projects/"+project+"/serviceAccounts", "email")
	if err != nil {
		s.writeError(rq, err)
		return
	}
	var items []apiv1.ServiceAccount
	err = s.st.View(rq.ctx, func(tx store.Tx) error {
		sas, err := store.List[model.ServiceAccount](tx, store.KindServiceAccount, "projects/"+project)
		for _, sa := range sas {
			items = append(items, saToWire(sa))
		}
		return err
	})
	if err != nil {
		s.writeError(rq, err)
		return
	}
	out, next, err := page(lq, items, func(x apiv1.ServiceAccount) string { return x.Name })
	if err != nil {
		s.writeError(rq, err)
		return
	}
	s.writeJSON(rq, http.StatusOK, apiv1.ListServiceAccountsResponse{Accounts: out, NextPageToken: next})
}

func (s *Server) getServiceAccount(rq *request, project, email string) {
	var sa *model.ServiceAccount
	err := s.st.View(rq.ctx, func(tx store.Tx) (err error) {
		sa, err = loadAccount(tx, project, email)
		return err
	})
	if err != nil {
		s.writeError(rq, err)
		return
	}
	s.writeJSON(rq, http.StatusOK, saToWire(sa))
}

func (s *Server) setServiceAccountDisabled(rq *request, project, email string, disabled bool) {
	err := s.st.Update(rq.ctx, func(tx store.Tx) error {
		sa, err := loadAccount(tx, project, email)
		if err != nil {
			return err
		}
		if sa.Owner {
			return model.Errorf(model.ErrFailedPrecondition, "the owner account cannot be disabled through the API")
		}
		sa.Disabled = disabled
		if disabled {
			sa.DisableTime = s.now().UTC() // tokens issued before stay refused (iam)
		}
		return tx.Put(store.KindServiceAccount, sa.Email, "projects/"+project, sa)
	})
	if err != nil {
		s.writeError(rq, err)
		return
	}
	s.writeJSON(rq, http.StatusOK, struct{}{})
}

// deleteServiceAccount removes the account, its keys, and its bindings in its
// project's policy, so a new account of the same name does not inherit them.
func (s *Server) deleteServiceAccount(rq *request, project, email string) {
	err := s.st.Update(rq.ctx, func(tx store.Tx) error {
		sa, err := loadAccount(tx, project, email)
		if err != nil {
			return err
		}
		if sa.Owner {
			return model.Errorf(model.ErrFailedPrecondition, "the owner account cannot be deleted through the API")
		}
		keys, err := store.List[model.ServiceAccountKey](tx, store.KindKey, sa.Email)
		if err != nil {
			return err
		}
		for _, k := range keys {
			if err := tx.Delete(store.KindKey, k.ID); err != nil {
				return err
			}
		}
		pol, err := store.Get[model.IAMPolicy](tx, store.KindIAMPolicy, "projects/"+project)
		if err == nil {
			var kept []model.Binding
			for _, b := range pol.Bindings {
				b.Members = slices.DeleteFunc(b.Members, func(m string) bool { return m == iam.Member(sa.Email) })
				if len(b.Members) > 0 {
					kept = append(kept, b)
				}
			}
			pol.Bindings, pol.Etag = kept, newEtag(pol)
			if err := tx.Put(store.KindIAMPolicy, "projects/"+project, "", pol); err != nil {
				return err
			}
		} else if !errors.Is(err, model.ErrNotFound) {
			return err
		}
		return tx.Delete(store.KindServiceAccount, sa.Email)
	})
	if err != nil {
		s.writeError(rq, err)
		return
	}
	s.writeJSON(rq, http.StatusOK, struct{}{})
}

func (s *Server) createKey(rq *request, project, email string) {
	var req apiv1.CreateServiceAccountKeyRequest
	if _, err := s.readBody(rq, &req); err != nil {
		s.writeError(rq, err)
		return
	}
	if req.PrivateKeyType != "" && req.PrivateKeyType != "TYPE_GOOGLE_CREDENTIALS_FILE" {
		s.writeError(rq, model.Invalid("privateKeyType", "only TYPE_GOOGLE_CREDENTIALS_FILE is supported"))
		return
	}
	if req.KeyAlgorithm != "" && req.KeyAlgorithm != "KEY_ALG_RSA_2048" {
		s.writeError(rq, model.Invalid("keyAlgorithm", "only KEY_ALG_RSA_2048 is supported"))
		return
	}
	var expire time.Time
	if req.ValidBeforeTime != "" {
		t, ok := parseTime(req.ValidBeforeTime)
		if !ok || !t.After(s.now()) {
			s.writeError(rq, model.Invalid("validBeforeTime", "must be an RFC 3339 time in the future"))
			return
		}
		expire = t.UTC()
	}
	var kf *iam.KeyFile
	var rec *model.ServiceAccountKey
	err := s.st.Update(rq.ctx, func(tx store.Tx) error {
		if _, err := loadAccount(tx, project, email); err != nil {
			return err
		}
		var err error
		if kf, rec, err = iam.NewKey(email, project, "http://"+rq.r.Host+"/token", s.now()); err != nil {
			return err
		}
		rec.ExpireTime = expire
		return tx.Put(store.KindKey, rec.ID, email, rec)
	})
	if err != nil {
		s.writeError(rq, err)
		return
	}
	data, err := json.MarshalIndent(kf, "", "  ")
	if err != nil {
		s.writeError(rq, err)
		return
	}
	w := keyToWire(project, rec)
	w.PrivateKeyType = "TYPE_GOOGLE_CREDENTIALS_FILE"
	w.PrivateKeyData = base64.StdEncoding.EncodeToString(data)
	s.writeJSON(rq, http.StatusOK, w)
}

func (s *Server) listKeys(rq *request, project, email string) {
	var out apiv1.ListServiceAccountKeysResponse
	err := s.st.View(rq.ctx, func(tx store.Tx) error {
		if _, err := loadAccount(tx, project, email); err != nil {
			return err
		}
		keys, err := store.List[model.ServiceAccountKey](tx, store.KindKey, email)
		for _, k := range keys {
			out.Keys = append(out.Keys, keyToWire(project, k))
		}
		return err
	})
	if err != nil {
		s.writeError(rq, err)
		return
	}
	s.writeJSON(rq, http.StatusOK, out)
}

func (s *Server) loadKey(tx store.Tx, project, email, id string) (*model.ServiceAccountKey, error) {
	if _, err := loadAccount(tx, project, email); err != nil {
		return nil, err
	}
	k, err := store.Get[model.ServiceAccountKey](tx, store.KindKey, id)
	if errors.Is(err, model.ErrNotFound) || (err == nil && k.Email != email) {
		return nil, model.Errorf(model.ErrNotFound, "Key %s of %s was not found", id, email)
	}
	return k, err
}

func (s *Server) getKey(rq *request, project, email, id string) {
	var k *model.ServiceAccountKey
	err := s.st.View(rq.ctx, func(tx store.Tx) (err error) {
		k, err = s.loadKey(tx, project, email, id)
		return err
	})
	if err != nil {
		s.writeError(rq, err)
		return
	}
	s.writeJSON(rq, http.StatusOK, keyToWire(project, k))
}

func (s *Server) deleteKey(rq *request, project, email, id string) {
	err := s.st.Update(rq.ctx, func(tx store.Tx) error {
		if _, err := s.loadKey(tx, project, email, id); err != nil {
			return err
		}
		return tx.Delete(store.KindKey, id)
	})
	if err != nil {
		s.writeError(rq, err)
		return
	}
	s.writeJSON(rq, http.StatusOK, struct{}{})
}

func policyToWire(p *model.IAMPolicy) apiv1.Policy {
	w := apiv1.Policy{Version: 1, Etag: p.Etag}
	for _, b := range p.Bindings {
		w.Bindings = append(w.Bindings, apiv1.Binding{Role: b.Role, Members: b.Members})
	}
	return w
}

func loadPolicy(tx store.Tx, project string) (*model.IAMPolicy, error) {
	p, err := store.Get[model.IAMPolicy](tx, store.KindIAMPolicy, "projects/"+project)
	if errors.Is(err, model.ErrNotFound) {
		return &model.IAMPolicy{Project: project, Etag: emptyEtag}, nil
	}
	return p, err
}

func newEtag(p *model.IAMPolicy) string {
	b, _ := json.Marshal(p.Bindings)
	salt := make([]byte, 8)
	rand.Read(salt)
	sum := sha256.Sum256(append(b, salt...))
	return base64.StdEncoding.EncodeToString(sum[:9])
}

func (s *Server) getIamPolicy(rq *request, project string) {
	var p *model.IAMPolicy
	err := s.st.View(rq.ctx, func(tx store.Tx) (err error) {
		p, err = loadPolicy(tx, project)
		return err
	})
	if err != nil {
		s.writeError(rq, err)
		return
	}
	s.writeJSON(rq, http.StatusOK, policyToWire(p))
}

// setIamPolicy replaces a project's bindings. With an etag, the write succeeds only
// if nobody wrote since that etag was read (409 ABORTED otherwise); without one, it
// overwrites, as upstream.
func (s *Server) setIamPolicy(rq *request, project string) {
	var req apiv1.SetIamPolicyRequest
	if _, err := s.readBody(rq, &req); err != nil {
		s.writeError(rq, err)
		return
	}
	if req.Policy == nil {
		s.writeError(rq, model.Invalid("policy", "is required"))
		return
	}
	next := &model.IAMPolicy{Project: project}
	for i, b := range req.Policy.Bindings {
		if !slices.Contains(iam.Roles, b.Role) {
			s.writeError(rq, model.Invalid(fmt.Sprintf("policy.bindings[%d].role", i), "%q is not a role Basin knows (%s)", b.Role, strings.Join(iam.Roles, ", ")))
			return
		}
		for _, m := range b.Members {
			if !strings.HasPrefix(m, "serviceAccount:") || !strings.Contains(m, "@") {
				s.writeError(rq, model.Invalid(fmt.Sprintf("policy.bindings[%d].members", i), "%q is not of the form serviceAccount:EMAIL", m))
				return
			}
		}
		next.Bindings = append(next.Bindings, model.Binding{Role: b.Role, Members: slices.Compact(slices.Sorted(slices.Values(b.Members)))})
	}
	err := s.st.Update(rq.ctx, func(tx store.Tx) error {
		cur, err := loadPolicy(tx, project)
		if err != nil {
			return err
		}
		if req.Policy.Etag != "" && req.Policy.Etag != cur.Etag {
			return model.Errorf(model.ErrAborted, "The policy of projects/%s changed since etag %s was read; read it again and retry", project, req.Policy.Etag)
		}
		// As Google IAM does, a binding may only name accounts that exist. Only
		// the project's own accounts are checked: an answer about another
		// project's would tell whether that account exists.
		for i, b := range next.Bindings {
			for _, m := range b.Members {
				email := strings.TrimPrefix(m, "serviceAccount:")
				if !strings.HasSuffix(email, "@"+project+EmailDomain) {
					continue
				}
				if _, err := store.Get[model.ServiceAccount](tx, store.KindServiceAccount, email); errors.Is(err, model.ErrNotFound) {
					return model.Invalid(fmt.Sprintf("policy.bindings[%d].members", i), "service account %s does not exist", email)
				} else if err != nil {
					return err
				}
			}
		}
		next.Etag = newEtag(next)
		return tx.Put(store.KindIAMPolicy, "projects/"+project, "", next)
	})
	if err != nil {
		s.writeError(rq, err)
		return
	}
	s.writeJSON(rq, http.StatusOK, policyToWire(next))
}

func (s *Server) testIamPermissions(rq *request, project string) {
	var req apiv1.TestIamPermissionsRequest
	if _, err := s.readBody(rq, &req); err != nil {
		s.writeError(rq, err)
		return
	}
	var pol *model.IAMPolicy
	err := s.st.View(rq.ctx, func(tx store.Tx) (err error) {
		pol, err = loadPolicy(tx, project)
		return err
	})
	if err != nil {
		s.writeError(rq, err)
		return
	}
	var out apiv1.TestIamPermissionsResponse
	for _, p := range req.Permissions {
		if s.opts.Auth == nil || iam.Allowed(rq.principal, pol, p) {
			out.Permissions = append(out.Permissions, p)
		}
	}
	s.writeJSON(rq, http.StatusOK, out)
}

func (s *Server) listAuditLogs(rq *request, project string) {
	lq, err := parseListQuery[apiv1.AuditLogEntry](rq.q, "projects/"+project+"/auditLogs", "time desc")
	if err != nil {
		s.writeError(rq, err)
		return
	}
	var items []apiv1.AuditLogEntry
	err = s.st.View(rq.ctx, func(tx store.Tx) error {
		entries, err := store.List[model.AuditEntry](tx, store.KindAudit, "projects/"+project)
		for _, e := range entries {
			items = append(items, apiv1.AuditLogEntry{Name: "projects/" + project + "/auditLogs/" + e.ID, Time: apiv1.FormatTime(e.Time),
				Principal: e.Principal, Method: e.Method, Resource: e.Resource, Status: e.Status, Outcome: e.Outcome,
				RequestID: e.RequestID, ClientAddress: e.Client, Count: e.Count, Throttled: e.Throttled, Details: e.Details})
		}
		return err
	})
	if err != nil {
		s.writeError(rq, err)
		return
	}
	out, next, err := page(lq, items, func(x apiv1.AuditLogEntry) string { return x.Name })
	if err != nil {
		s.writeError(rq, err)
		return
	}
	s.writeJSON(rq, http.StatusOK, apiv1.ListAuditLogsResponse{Entries: out, NextPageToken: next})
}

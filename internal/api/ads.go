package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/basin-nas/basin/internal/apiv1"
	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/store"
)

var adFields = fieldRules{
	mutable: []string{"domain", "site", "dns", "netBiosPrefix", "organizationalUnit", "aesEncryption", "username", "password",
		"backupOperators", "administrators", "securityOperators", "kdcHostname", "kdcIp", "nfsUsersWithLdap", "description",
		"ldapSigning", "encryptDcConnections", "labels"},
	output: []string{"createTime", "state", "stateDetails"},
}

func (s *Server) listADs(rq *request, p parent) {
	lq, err := parseListQuery[apiv1.ActiveDirectory](rq.q, p.name()+"/activeDirectories", "name")
	if err != nil {
		s.writeError(rq, err)
		return
	}
	var items []apiv1.ActiveDirectory
	err = s.st.View(rq.ctx, func(tx store.Tx) error {
		for _, lp := range s.locationsOf(p) {
			ads, err := store.List[model.ActiveDirectory](tx, store.KindActiveDirectory, lp.name())
			if err != nil {
				return err
			}
			for _, a := range ads {
				w, err := s.renderAD(tx, a)
				if err != nil {
					return err
				}
				items = append(items, w)
			}
		}
		return nil
	})
	if err != nil {
		s.writeError(rq, err)
		return
	}
	out, next, err := page(lq, items, func(x apiv1.ActiveDirectory) string { return x.Name })
	if err != nil {
		s.writeError(rq, err)
		return
	}
	s.writeJSON(rq, http.StatusOK, apiv1.ListActiveDirectoriesResponse{ActiveDirectories: out, NextPageToken: next})
}

func (s *Server) getAD(rq *request, p parent, id string) {
	if err := checkPathID("Active Directory", id); err != nil {
		s.writeError(rq, err)
		return
	}
	var w apiv1.ActiveDirectory
	err := s.st.View(rq.ctx, func(tx store.Tx) error {
		a, err := store.Get[model.ActiveDirectory](tx, store.KindActiveDirectory, p.name()+"/activeDirectories/"+id)
		if err != nil {
			return err
		}
		w, err = s.renderAD(tx, a)
		return err
	})
	if err != nil {
		s.writeError(rq, err)
		return
	}
	s.writeJSON(rq, http.StatusOK, w)
}

// adFromWire copies the named fields of a request body onto a, except the password,
// which the callers seal (sealPassword).
func adFromWire(w *apiv1.ActiveDirectory, a *model.ActiveDirectory, fields []string) {
	for _, f := range fields {
		switch f {
		case "domain":
			a.Domain = w.Domain
		case "site":
			a.Site = w.Site
		case "dns":
			a.DNS = w.DNS
		case "netBiosPrefix":
			a.NetBiosPrefix = w.NetBiosPrefix
		case "organizationalUnit":
			a.OrganizationalUnit = w.OrganizationalUnit
		case "aesEncryption":
			a.AesEncryption = w.AesEncryption
		case "username":
			a.Username = w.Username
		case "backupOperators":
			a.BackupOperators = w.BackupOperators
		case "administrators":
			a.Administrators = w.Administrators
		case "securityOperators":
			a.SecurityOperators = w.SecurityOperators
		case "kdcHostname":
			a.KdcHostname = w.KdcHostname
		case "kdcIp":
			a.KdcIP = w.KdcIP
		case "nfsUsersWithLdap":
			a.NfsUsersWithLdap = w.NfsUsersWithLdap
		case "description":
			a.Desc = w.Description
		case "ldapSigning":
			a.LdapSigning = w.LdapSigning
		case "encryptDcConnections":
			a.EncryptDcConnections = w.EncryptDcConnections
		case "labels":
			a.Labels = w.Labels
		}
	}
}

// Limits of Active Directory fields, after what AD and Samba accept: a DNS name is
// at most 253 characters in labels of at most 63; an AD site name is a DNS label;
// AD passwords are at most 256 characters; a user principal name rarely exceeds
// 256 (sAMAccountName: 20); a distinguished name for an OU is kept under 1 KiB.
const (
	maxADDomain     = 253
	maxADSite       = 63
	maxADUsername   = 256
	maxADPassword   = 256
	maxADOU         = 1024
	maxADDNS        = 8
	maxADAccount    = 256
	maxADAccounts   = 64
	maxADNetBIOSPfx = 10
)

var (
	dnsNameRE = regexp.MustCompile(`^([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$`)
	adSiteRE  = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]*$`)
)

// checkADString checks a free-form AD field: at most max characters and no control
// characters (they would break the files and command input the AD join writes). The
// message never repeats the value: it may be the password.
func checkADString(field, v string, max int) error {
	if utf8.RuneCountInString(v) > max {
		return model.Invalid(field, "must be at most %d characters", max)
	}
	if !utf8.ValidString(v) || strings.ContainsFunc(v, unicode.IsControl) {
		return model.Invalid(field, "must be valid UTF-8 without control characters (newlines, tabs, NUL)")
	}
	return nil
}

// validateAD checks a policy; password is the clear password a create or update
// sets ("" when an update keeps the stored one).
func validateAD(a *model.ActiveDirectory, password string) error {
	for _, req := range []struct{ field, val string }{{"domain", a.Domain}, {"dns", a.DNS}, {"netBiosPrefix", a.NetBiosPrefix},
		{"username", a.Username}} {
		if strings.TrimSpace(req.val) == "" {
			return model.Invalid(req.field, "is required")
		}
	}
	if password == "" && a.PasswordSealed == "" {
		return model.Invalid("password", "is required")
	}
	if password != "" {
		if err := checkADString("password", password, maxADPassword); err != nil {
			return err
		}
	}
	if len(a.Domain) > maxADDomain || !dnsNameRE.MatchString(a.Domain) {
		return model.Invalid("domain", "must be a DNS domain name of at most %d characters (labels of 1-63 letters, digits or hyphens)", maxADDomain)
	}
	dns := strings.Split(a.DNS, ",")
	if len(dns) > maxADDNS {
		return model.Invalid("dns", "at most %d DNS servers are allowed", maxADDNS)
	}
	for _, d := range dns {
		if _, err := netip.ParseAddr(strings.TrimSpace(d)); err != nil {
			return model.Invalid("dns", "%q is not an IP address", strings.TrimSpace(d))
		}
	}
	if len(a.NetBiosPrefix) > maxADNetBIOSPfx || !idRE.MatchString(a.NetBiosPrefix) {
		return model.Invalid("netBiosPrefix", "must be 1-%d letters, digits or hyphens, starting with a letter", maxADNetBIOSPfx)
	}
	if err := checkADString("username", a.Username, maxADUsername); err != nil {
		return err
	}
	if a.Site != "" && (len(a.Site) > maxADSite || !adSiteRE.MatchString(a.Site)) {
		return model.Invalid("site", "must be at most %d letters, digits, '-' or '_', starting with a letter or digit", maxADSite)
	}
	if err := checkADString("organizationalUnit", a.OrganizationalUnit, maxADOU); err != nil {
		return err
	}
	if a.KdcHostname != "" && (len(a.KdcHostname) > maxADDomain || !dnsNameRE.MatchString(a.KdcHostname)) {
		return model.Invalid("kdcHostname", "must be a host name of at most %d characters (labels of 1-63 letters, digits or hyphens)", maxADDomain)
	}
	if a.KdcIP != "" {
		if _, err := netip.ParseAddr(a.KdcIP); err != nil {
			return model.Invalid("kdcIp", "%q is not an IP address", a.KdcIP)
		}
	}
	for _, l := range []struct {
		field string
		names []string
	}{{"backupOperators", a.BackupOperators}, {"administrators", a.Administrators}, {"securityOperators", a.SecurityOperators}} {
		if len(l.names) > maxADAccounts {
			return model.Invalid(l.field, "at most %d accounts are allowed", maxADAccounts)
		}
		for _, n := range l.names {
			if strings.TrimSpace(n) == "" || strings.Contains(n, ",") {
				return model.Invalid(l.field, "account names must be non-empty and without commas")
			}
			if err := checkADString(l.field, n, maxADAccount); err != nil {
				return err
			}
		}
	}
	return checkMeta(&a.Meta)
}

// sealPassword stores password in a sealed, bound to the policy: the clear text is
// never written anywhere (store, operation records, audit, logs).
func (s *Server) sealPassword(a *model.ActiveDirectory, password string) error {
	sealed, err := s.opts.Secrets.Seal(password, a.PasswordAAD())
	if err != nil {
		return fmt.Errorf("seal the password of %s: %w", a.Name(), err)
	}
	a.PasswordSealed = sealed
	return nil
}

func (s *Server) createAD(rq *request, p parent) {
	id := rq.q.Get("activeDirectoryId")
	if err := checkID("activeDirectoryId", id); err != nil {
		s.writeError(rq, err)
		return
	}
	var w apiv1.ActiveDirectory
	if _, err := s.readBody(rq, &w); err != nil {
		s.writeError(rq, err)
		return
	}
	a := &model.ActiveDirectory{Meta: model.Meta{Project: p.project, Location: p.location, ID: id, CreateTime: s.now().UTC(), State: model.StateCreating}}
	adFromWire(&w, a, adFields.mutable)
	if err := validateAD(a, w.Password); err != nil {
		s.writeError(rq, err)
		return
	}
	if err := s.sealPassword(a, w.Password); err != nil {
		s.writeError(rq, err)
		return
	}
	op := s.newOperation(p, model.OpADCreate, a.Name())
	s.startOperation(rq, op, func(tx store.Tx) error {
		return tx.Insert(store.KindActiveDirectory, a.Name(), p.name(), a)
	})
}

func (s *Server) updateAD(rq *request, p parent, id string) {
	if err := checkPathID("Active Directory", id); err != nil {
		s.writeError(rq, err)
		return
	}
	var w apiv1.ActiveDirectory
	present, err := s.readBody(rq, &w)
	if err != nil {
		s.writeError(rq, err)
		return
	}
	name := p.name() + "/activeDirectories/" + id
	if err := checkBodyName(w.Name, name); err != nil {
		s.writeError(rq, err)
		return
	}
	op := s.newOperation(p, model.OpADUpdate, name)
	s.startOperation(rq, op, func(tx store.Tx) error {
		a, err := store.Get[model.ActiveDirectory](tx, store.KindActiveDirectory, name)
		if err != nil {
			return err
		}
		if a.State.Busy() {
			return model.Errorf(model.ErrFailedPrecondition, "Active Directory policy %s is %s; wait for its operation to finish", id, a.State)
		}
		cur := adToWire(a, false)
		paths, err := updatePaths(rq.q, adFields, present, &w, &cur)
		if err != nil {
			return err
		}
		op.Prev, _ = json.Marshal(a)
		adFromWire(&w, a, paths)
		password := ""
		if slices.Contains(paths, "password") {
			if password = w.Password; password == "" {
				return model.Invalid("password", "is required")
			}
		}
		if err := validateAD(a, password); err != nil {
			return err
		}
		if password != "" {
			if err := s.sealPassword(a, password); err != nil {
				return err
			}
		}
		a.State = model.StateUpdating
		return store.PutAD(tx, a)
	})
}

func (s *Server) deleteAD(rq *request, p parent, id string) {
	if err := checkPathID("Active Directory", id); err != nil {
		s.writeError(rq, err)
		return
	}
	name := p.name() + "/activeDirectories/" + id
	op := s.newOperation(p, model.OpADDelete, name)
	s.startOperation(rq, op, func(tx store.Tx) error {
		a, err := store.Get[model.ActiveDirectory](tx, store.KindActiveDirectory, name)
		if err != nil {
			return err
		}
		if a.State.Busy() {
			return model.Errorf(model.ErrFailedPrecondition, "Active Directory policy %s is %s", id, a.State)
		}
		// Every pool, not only this location's: pools made before references were
		// confined to their own project and location may name it too.
		pools, err := store.List[model.Pool](tx, store.KindPool, "")
		if err != nil {
			return err
		}
		for _, pl := range pools {
			if pl.ActiveDirectory != name {
				continue
			}
			if pl.Project != p.project {
				return model.Errorf(model.ErrFailedPrecondition, "Active Directory policy %s is in use by a storage pool of another project", id)
			}
			return model.Errorf(model.ErrFailedPrecondition, "Active Directory policy %s is in use by storage pool %s; remove it from the pool first", id, pl.Name())
		}
		a.State = model.StateDeleting
		return store.PutAD(tx, a)
	})
}

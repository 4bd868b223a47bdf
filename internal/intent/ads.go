package intent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/smb"
	"github.com/basin-nas/basin/internal/store"
)

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
	// What Samba will be asked: names net sam can take as they are.
	if err := smb.ValidateLocalGroups(smb.LocalGroups{Administrators: a.Administrators, BackupOperators: a.BackupOperators,
		SecurityOperators: a.SecurityOperators}); err != nil {
		var fe *smb.FieldError
		if errors.As(err, &fe) {
			return model.Invalid(fe.Field, "%s", fe.Msg)
		}
		return err
	}
	if a.EncryptDcConnections {
		// Samba 4.17 has no setting that verifiably encrypts a member server's
		// SMB traffic to its DCs (`client smb encrypt = required` was tried and
		// had no visible effect). Its DC RPC pipes are sealed and its LDAP is
		// signed and sealed anyway; refusing beats a flag silently ignored.
		return model.Invalid("encryptDcConnections", "is not supported: Basin's SMB servers cannot encrypt their SMB connections to domain controllers (their RPC to the DCs is sealed regardless)")
	}
	return CheckMeta(&a.Meta)
}

// sealPassword stores password in a sealed, bound to the policy: the clear text is
// never written anywhere (store, operation records, audit, logs).
func (s *Service) sealPassword(a *model.ActiveDirectory, password string) error {
	if s.opts.Secrets == nil {
		return fmt.Errorf("seal the password of %s: no sealer configured", a.Name())
	}
	sealed, err := s.opts.Secrets.Seal(password, a.PasswordAAD())
	if err != nil {
		return fmt.Errorf("seal the password of %s: %w", a.Name(), err)
	}
	a.PasswordSealed = sealed
	return nil
}

// ADCreate asks for an Active Directory policy.
type ADCreate struct {
	// AD holds the project, location, ID and settings; its create time, state and
	// sealed password are set here.
	AD       *model.ActiveDirectory
	Password string // the clear join password, sealed before it is stored
}

// CreateAD records an Active Directory policy to create.
func (s *Service) CreateAD(ctx context.Context, st store.Store, req ADCreate) (*model.Operation, error) {
	a := req.AD
	if err := CheckID("activeDirectoryId", a.ID); err != nil {
		return nil, err
	}
	a.CreateTime, a.State = s.opts.Now().UTC(), model.StateCreating
	if err := validateAD(a, req.Password); err != nil {
		return nil, err
	}
	if err := s.sealPassword(a, req.Password); err != nil {
		return nil, err
	}
	op := s.newOperation(a.Project, a.Location, model.OpADCreate, a.Name())
	return record(ctx, st, op, func(tx store.Tx) error {
		return tx.Insert(store.KindActiveDirectory, a.Name(), model.LocationName(a.Project, a.Location), a)
	})
}

// ADUpdate asks to change an Active Directory policy.
type ADUpdate struct {
	Project, Location, ID string
	// Patch changes the policy as read in the transaction; it returns the new clear
	// password, or nil to keep the stored one.
	Patch func(a *model.ActiveDirectory) (password *string, err error)
}

// UpdateAD records a change to a policy that is not busy.
func (s *Service) UpdateAD(ctx context.Context, st store.Store, req ADUpdate) (*model.Operation, error) {
	if err := CheckPathID("Active Directory", req.ID); err != nil {
		return nil, err
	}
	name := model.LocationName(req.Project, req.Location) + "/activeDirectories/" + req.ID
	op := s.newOperation(req.Project, req.Location, model.OpADUpdate, name)
	return record(ctx, st, op, func(tx store.Tx) error {
		a, err := getIdle(tx, store.KindActiveDirectory, name, "Active Directory policy", req.ID, func(r *model.ActiveDirectory) *model.Meta { return &r.Meta })
		if err != nil {
			return err
		}
		prev, _ := json.Marshal(a)
		before := *a
		pw, err := req.Patch(a)
		if err != nil {
			return err
		}
		if err := checkJoinedChange(&before, a); err != nil {
			return err
		}
		op.Prev = prev
		password := ""
		if pw != nil {
			if password = *pw; password == "" {
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

// checkJoinedChange refuses changes a joined policy cannot take: its servers'
// machine accounts are named from netBiosPrefix and live in the domain's OU, so
// a new domain, prefix or OU means leaving and joining again, which Basin does
// only when the last pool lets go of the policy. Everything else (DNS servers,
// site, AES, LDAP signing, KDC, the local groups, the user and password) is
// applied to the running servers.
func checkJoinedChange(before, after *model.ActiveDirectory) error {
	if len(before.Members) == 0 {
		return nil
	}
	for _, f := range []struct{ field, was, now string }{
		{"domain", strings.ToLower(before.Domain), strings.ToLower(after.Domain)},
		{"netBiosPrefix", before.NetBiosPrefix, after.NetBiosPrefix},
		{"organizationalUnit", before.OrganizationalUnit, after.OrganizationalUnit},
	} {
		if f.was != f.now {
			// Keys are networks, "network@node" in a cluster (one machine per node).
			var networks []string
			for k := range maps.Keys(before.Members) {
				n, _, _ := strings.Cut(k, "@")
				networks = append(networks, n)
			}
			slices.Sort(networks)
			networks = slices.Compact(networks)
			return model.Errorf(model.ErrFailedPrecondition, "%s cannot change while the policy's SMB servers are joined to %s (networks %s); remove the policy from its storage pools first",
				f.field, before.Domain, strings.Join(networks, ", "))
		}
	}
	return nil
}

// ADDelete asks to delete an Active Directory policy.
type ADDelete struct {
	Project, Location, ID string
}

// DeleteAD records a policy's deletion; no pool may name it.
func (s *Service) DeleteAD(ctx context.Context, st store.Store, req ADDelete) (*model.Operation, error) {
	if err := CheckPathID("Active Directory", req.ID); err != nil {
		return nil, err
	}
	id := req.ID
	name := model.LocationName(req.Project, req.Location) + "/activeDirectories/" + id
	op := s.newOperation(req.Project, req.Location, model.OpADDelete, name)
	return record(ctx, st, op, func(tx store.Tx) error {
		a, err := store.Get[model.ActiveDirectory](tx, store.KindActiveDirectory, name)
		if err != nil {
			return err
		}
		if a.State.Busy() {
			return model.Errorf(model.ErrFailedPrecondition, "Active Directory policy %s is %s", id, a.State)
		}
		// Every pool, not only this location's: pools made before references were
		// confined to their own project and location may name it too.
		pools, err := store.PoolsUsingAD(tx, name)
		if err != nil {
			return err
		}
		for _, pl := range pools {
			if !strings.HasPrefix(pl, "projects/"+req.Project+"/") {
				return model.Errorf(model.ErrFailedPrecondition, "Active Directory policy %s is in use by a storage pool of another project", id)
			}
			return model.Errorf(model.ErrFailedPrecondition, "Active Directory policy %s is in use by storage pool %s; remove it from the pool first", id, pl)
		}
		a.State = model.StateDeleting
		return store.PutAD(tx, a)
	})
}

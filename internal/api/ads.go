package api

import (
	"context"
	"net/http"
	"net/url"
	"slices"

	"github.com/basin-nas/basin/internal/apiv1"
	"github.com/basin-nas/basin/internal/intent"
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
	out, err := s.listADsQ(rq.ctx, p, rq.q)
	if err != nil {
		s.writeError(rq, err)
		return
	}
	s.writeJSON(rq, http.StatusOK, out)
}

// listADsQ lists the Active Directory policies of p with the list query q
// (pageSize, pageToken, filter, orderBy), without their passwords (adToWire).
func (s *Server) listADsQ(ctx context.Context, p parent, q url.Values) (apiv1.ListActiveDirectoriesResponse, error) {
	lq, err := parseListQuery[apiv1.ActiveDirectory](q, p.name()+"/activeDirectories", "name")
	if err != nil {
		return apiv1.ListActiveDirectoriesResponse{}, err
	}
	var items []apiv1.ActiveDirectory
	err = s.st.View(ctx, func(tx store.Tx) error {
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
		return apiv1.ListActiveDirectoriesResponse{}, err
	}
	out, next, err := page(lq, items, func(x apiv1.ActiveDirectory) string { return x.Name })
	if err != nil {
		return apiv1.ListActiveDirectoriesResponse{}, err
	}
	return apiv1.ListActiveDirectoriesResponse{ActiveDirectories: out, NextPageToken: next}, nil
}

func (s *Server) getAD(rq *request, p parent, id string) {
	w, err := s.getADW(rq.ctx, p, id)
	if err != nil {
		s.writeError(rq, err)
		return
	}
	s.writeJSON(rq, http.StatusOK, w)
}

// getADW returns Active Directory policy id of p, without its password
// (adToWire).
func (s *Server) getADW(ctx context.Context, p parent, id string) (apiv1.ActiveDirectory, error) {
	if err := checkPathID("Active Directory", id); err != nil {
		return apiv1.ActiveDirectory{}, err
	}
	var w apiv1.ActiveDirectory
	err := s.st.View(ctx, func(tx store.Tx) error {
		a, err := store.Get[model.ActiveDirectory](tx, store.KindActiveDirectory, p.name()+"/activeDirectories/"+id)
		if err != nil {
			return err
		}
		w, err = s.renderAD(tx, a)
		return err
	})
	return w, err
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

func (s *Server) createAD(rq *request, p parent) {
	id := rq.q.Get("activeDirectoryId")
	if err := intent.CheckID("activeDirectoryId", id); err != nil {
		s.writeError(rq, err)
		return
	}
	var w apiv1.ActiveDirectory
	if _, err := s.readBody(rq, &w); err != nil {
		s.writeError(rq, err)
		return
	}
	op, err := s.createADOp(rq.ctx, p, id, w)
	s.answerOperation(rq, op, err)
}

// createADOp records the creation of Active Directory policy id of p from
// the request's w (its password sealed).
func (s *Server) createADOp(ctx context.Context, p parent, id string, w apiv1.ActiveDirectory) (*model.Operation, error) {
	a := &model.ActiveDirectory{Meta: model.Meta{Project: p.project, Location: p.location, ID: id}}
	adFromWire(&w, a, adFields.mutable)
	return s.intents().CreateAD(ctx, s.st, intent.ADCreate{AD: a, Password: w.Password})
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
	op, err := s.updateADOp(rq.ctx, p, id, w, present, rq.q)
	s.answerOperation(rq, op, err)
}

// updateADOp records the update of Active Directory policy id of p: w's
// fields that q's updateMask names, or those present.
func (s *Server) updateADOp(ctx context.Context, p parent, id string, w apiv1.ActiveDirectory, present map[string]bool, q url.Values) (*model.Operation, error) {
	if err := checkBodyName(w.Name, p.name()+"/activeDirectories/"+id); err != nil {
		return nil, err
	}
	return s.intents().UpdateAD(ctx, s.st, intent.ADUpdate{Project: p.project, Location: p.location, ID: id,
		Patch: func(a *model.ActiveDirectory) (*string, error) {
			cur := adToWire(a, false)
			paths, err := updatePaths(q, adFields, present, &w, &cur)
			if err != nil {
				return nil, err
			}
			adFromWire(&w, a, paths)
			if slices.Contains(paths, "password") {
				return &w.Password, nil
			}
			return nil, nil
		}})
}

func (s *Server) deleteAD(rq *request, p parent, id string) {
	op, err := s.deleteADOp(rq.ctx, p, id)
	s.answerOperation(rq, op, err)
}

// deleteADOp records the deletion of Active Directory policy id of p.
func (s *Server) deleteADOp(ctx context.Context, p parent, id string) (*model.Operation, error) {
	return s.intents().DeleteAD(ctx, s.st, intent.ADDelete{Project: p.project, Location: p.location, ID: id})
}

package cli

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/basin-nas/basin/internal/client"
)

// iamCommands are `basin iam …` and `basin audit …`.
func iamCommands() []*command {
	sa := func(c *session) string { return "/v1/projects/" + c.project + "/serviceAccounts" }
	return []*command{
		{group: "iam service-accounts", verb: "create", args: "ACCOUNT_ID", flags: []flagSpec{{name: "display-name", usage: "display name"}, {name: "description", usage: "description"}},
			help: "create a service account ACCOUNT_ID@PROJECT.iam.basin.internal", run: func(ctx context.Context, c *session, p *parsed) error {
				if err := needArgs(p, "ACCOUNT_ID"); err != nil {
					return err
				}
				var out client.Object
				body := map[string]any{"accountId": p.args[0], "serviceAccount": map[string]any{"displayName": p.str("display-name"), "description": p.str("description")}}
				if err := c.cl.Do(ctx, http.MethodPost, sa(c), nil, body, &out); err != nil {
					return err
				}
				return c.print(out, nil)
			}},
		{group: "iam service-accounts", verb: "list", help: "list the project's service accounts", run: listCmd("service accounts", "accounts",
			[]string{"email", "displayName", "disabled"}, sa)},
		{group: "iam service-accounts", verb: "get", args: "EMAIL", help: "show a service account", run: getCmd(kindAccount)},
		{group: "iam service-accounts", verb: "disable", args: "EMAIL", help: "disable an account: its tokens are refused at once", run: saAction(":disable", http.MethodPost)},
		{group: "iam service-accounts", verb: "enable", args: "EMAIL", help: "enable a disabled account", run: saAction(":enable", http.MethodPost)},
		{group: "iam service-accounts", verb: "delete", args: "EMAIL", help: "delete an account, its keys and its bindings", run: saAction("", http.MethodDelete)},

		{group: "iam keys", verb: "create", args: "EMAIL", flags: []flagSpec{{name: "output-file", usage: "where to write the key file (mode 0600; required)"},
			{name: "expires-in", usage: "key lifetime, e.g. 720h (default: no expiry)"}},
			help: "mint a key and write its Google-format key file", run: keyCreate},
		{group: "iam keys", verb: "list", args: "EMAIL", help: "list an account's keys (never their private halves)", run: func(ctx context.Context, c *session, p *parsed) error {
			path, err := c.onePath(p, kindAccount)
			if err != nil {
				return err
			}
			var out struct {
				Keys []client.Object `json:"keys"`
			}
			if err := c.cl.Do(ctx, http.MethodGet, path+"/keys", nil, nil, &out); err != nil {
				return err
			}
			if out.Keys == nil {
				out.Keys = []client.Object{}
			}
			return c.print(out.Keys, []string{"id", "validAfterTime", "validBeforeTime"})
		}},
		{group: "iam keys", verb: "delete", args: "EMAIL KEY_ID", help: "delete a key: its tokens are refused at once (also EMAIL/KEY_ID or a full name)", run: func(ctx context.Context, c *session, p *parsed) error {
			var ids []string
			var err error
			switch len(p.args) {
			case 1:
				ids, err = c.ids(kindKey, p.args[0])
			case 2:
				var email string
				if email, err = c.lastID(kindAccount, p.args[0]); err == nil {
					ids, err = c.ids(kindKey, p.args[1], email)
				}
			default:
				err = usagef("expected EMAIL KEY_ID (or a key's full name), got %s", gotArgs(p.args))
			}
			if err != nil {
				return err
			}
			return c.cl.Do(ctx, http.MethodDelete, "/v1/"+c.name(kindKey, ids...), nil, nil, nil)
		}},

		{group: "iam policy", verb: "get", help: "show the project's IAM policy", run: func(ctx context.Context, c *session, p *parsed) error {
			var pol client.Object
			if err := c.cl.Do(ctx, http.MethodPost, "/v1/projects/"+c.project+":getIamPolicy", nil, map[string]any{}, &pol); err != nil {
				return err
			}
			return c.print(pol, nil)
		}},
		{group: "iam policy", verb: "add-binding", flags: bindingFlags, help: "grant a role (roles/owner, roles/netapp.admin, roles/netapp.viewer) to a member",
			run: func(ctx context.Context, c *session, p *parsed) error { return editBinding(ctx, c, p, true) }},
		{group: "iam policy", verb: "remove-binding", flags: bindingFlags, help: "revoke a role from a member",
			run: func(ctx context.Context, c *session, p *parsed) error { return editBinding(ctx, c, p, false) }},

		{group: "audit", verb: "list", flags: listFlags, help: "list audited calls (mutations and refusals), newest first", run: listCmd("audit logs", "entries",
			[]string{"time", "principal", "method", "resource", "outcome"}, func(c *session) string { return "/v1/projects/" + c.project + "/auditLogs" })},
	}
}

var bindingFlags = []flagSpec{{name: "role", usage: "role to grant or revoke"},
	{name: "member", usage: "serviceAccount:EMAIL, EMAIL, or the account's full name projects/{project}/serviceAccounts/{email} (of any project)"}}

func saAction(suffix, method string) func(context.Context, *session, *parsed) error {
	return func(ctx context.Context, c *session, p *parsed) error {
		path, err := c.onePath(p, kindAccount)
		if err != nil {
			return err
		}
		var body any
		if method == http.MethodPost {
			body = map[string]any{}
		}
		if err := c.cl.Do(ctx, method, path+suffix, nil, body, nil); err != nil {
			return err
		}
		fmt.Fprintln(c.env.Stdout, "done")
		return nil
	}
}

func keyCreate(ctx context.Context, c *session, p *parsed) error {
	account, err := c.onePath(p, kindAccount)
	if err != nil {
		return err
	}
	path := p.str("output-file")
	if path == "" {
		return usagef("--output-file is required: the private key is shown only once")
	}
	body := map[string]any{}
	if d := p.str("expires-in"); d != "" {
		dur, err := time.ParseDuration(d)
		if err != nil || dur <= 0 {
			return usagef("--expires-in: %q is not a positive duration", d)
		}
		body["validBeforeTime"] = time.Now().Add(dur).UTC().Format(time.RFC3339)
	}
	var key client.Object
	if err := c.cl.Do(ctx, http.MethodPost, account+"/keys", nil, body, &key); err != nil {
		return err
	}
	data, err := base64.StdEncoding.DecodeString(fmt.Sprint(key["privateKeyData"]))
	if err != nil {
		return fmt.Errorf("key data: %w", err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("--output-file: %w", err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	fmt.Fprintf(c.env.Stdout, "wrote key %s to %s\n", key["name"], path)
	return nil
}

// memberOf reads a service account as an IAM member: serviceAccount:EMAIL,
// EMAIL, or the account's full name (of any project: a binding may name another
// project's account).
func memberOf(arg string) (string, error) {
	email := strings.TrimPrefix(arg, "serviceAccount:")
	if strings.HasPrefix(arg, "projects/") {
		_, _, ids, ok := parseName(kindAccount, arg)
		if !ok {
			return "", usagef("%s is not a service account's name (%s)", arg, kindAccount.template())
		}
		email = ids[0]
	}
	if !strings.Contains(email, "@") || strings.ContainsAny(email, "/: ") {
		return "", usagef("%q is not a service account: give serviceAccount:EMAIL, EMAIL or %s", arg, kindAccount.template())
	}
	return "serviceAccount:" + email, nil
}

// editBinding adds or removes a member of a role, retrying if the policy changed
// between read and write (etag).
func editBinding(ctx context.Context, c *session, p *parsed, add bool) error {
	if err := needArgs(p); err != nil {
		return err
	}
	role, member := p.str("role"), p.str("member")
	if role == "" || member == "" {
		return usagef("--role and --member are required")
	}
	member, err := memberOf(member)
	if err != nil {
		return fmt.Errorf("--member: %w", err)
	}
	for attempt := 0; ; attempt++ {
		var pol struct {
			Etag     string `json:"etag"`
			Bindings []struct {
				Role    string   `json:"role"`
				Members []string `json:"members"`
			} `json:"bindings"`
		}
		if err := c.cl.Do(ctx, http.MethodPost, "/v1/projects/"+c.project+":getIamPolicy", nil, map[string]any{}, &pol); err != nil {
			return err
		}
		var bindings []map[string]any
		found := false
		for _, b := range pol.Bindings {
			members := slices.Clone(b.Members)
			if b.Role == role {
				found = true
				if add && !slices.Contains(members, member) {
					members = append(members, member)
				}
				if !add {
					members = slices.DeleteFunc(members, func(m string) bool { return m == member })
				}
			}
			if len(members) > 0 {
				bindings = append(bindings, map[string]any{"role": b.Role, "members": members})
			}
		}
		if add && !found {
			bindings = append(bindings, map[string]any{"role": role, "members": []string{member}})
		}
		var out client.Object
		err := c.cl.Do(ctx, http.MethodPost, "/v1/projects/"+c.project+":setIamPolicy", nil,
			map[string]any{"policy": map[string]any{"etag": pol.Etag, "bindings": bindings}}, &out)
		var ae *client.Error
		if errors.As(err, &ae) && ae.Status == "ABORTED" && attempt < 3 {
			continue
		}
		if err != nil {
			return err
		}
		return c.print(out, nil)
	}
}

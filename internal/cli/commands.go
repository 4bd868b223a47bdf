package cli

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/basin-nas/basin/internal/client"
)

var listFlags = []flagSpec{
	{name: "filter", usage: "AIP-160 filter, e.g. state=READY AND labels.env=dev"},
	{name: "order-by", usage: "e.g. \"name desc\" or createTime"},
	{name: "page-size", usage: "items per request (all pages are fetched)"},
}

var metaFlags = []flagSpec{
	{name: "description", usage: "description"},
	{name: "labels", usage: "labels as k=v,k2=v2"},
}

func commands() []*command {
	return append(append(append(append(append(append(v1Commands(), settingsCommands()...), iamCommands()...), perfCommands()...), benchCommands()...), metricsCommands()...), consoleCommands()...)
}

func v1Commands() []*command {
	poolSpec := append([]flagSpec{
		{name: "service-level", usage: "PREMIUM, EXTREME, STANDARD or FLEX"},
		{name: "capacity-gib", usage: "pool capacity in GiB"},
		{name: "network", usage: "network name or projects/{p}/global/networks/{n} (default: default)"},
		{name: "active-directory", usage: "Active Directory policy ID or full name"},
		{name: "qos-type", usage: "AUTO or MANUAL"},
	}, metaFlags...)
	volSpec := append([]flagSpec{
		{name: "pool", usage: "storage pool ID"},
		{name: "capacity-gib", usage: "volume capacity in GiB"},
		{name: "share-name", usage: "export path / share name (default: the volume ID)"},
		{name: "protocols", usage: "NFSV3, NFSV4, SMB, comma-separated (default NFSV3)"},
		{name: "unix-permissions", usage: "octal mode of the volume root (default 0770)"},
		{name: "export-rule", multi: true, usage: "clients=CIDR[;CIDR],access=READ_WRITE|READ_ONLY|READ_NONE,root=true|false,nfsv3,nfsv4 (repeatable)"},
		{name: "snapshot-directory", bool: true, usage: "expose .snapshot"},
		{name: "throughput-mibps", usage: "throughput in MANUAL QoS pools"},
		{name: "from-snapshot", usage: "clone: VOLUME/SNAPSHOT or a full snapshot name"},
	}, metaFlags...)
	return []*command{
		{group: "locations", verb: "list", help: "list locations", run: listCmd("locations", "locations", []string{"locationId", "displayName"}, func(c *session) string {
			return "/v1/projects/" + c.project + "/locations"
		})},
		{group: "locations", verb: "get", args: "LOCATION", help: "show a location", run: getCmd(func(c *session, a []string) string {
			return "/v1/projects/" + c.project + "/locations/" + a[0]
		}, 1)},

		{group: "pools", verb: "list", flags: listFlags, help: "list storage pools", run: listCmd("pools", "storagePools",
			[]string{"id", "serviceLevel", "capacityGib", "volumeCapacityGib", "volumeCount", "state"}, func(c *session) string { return c.parent() + "/storagePools" })},
		{group: "pools", verb: "get", args: "POOL", help: "show a storage pool", run: getCmd(func(c *session, a []string) string { return c.parent() + "/storagePools/" + a[0] }, 1)},
		{group: "pools", verb: "create", args: "POOL", flags: poolSpec, help: "create a storage pool", run: poolCreate},
		{group: "pools", verb: "update", args: "POOL", flags: poolSpec, help: "change a storage pool's capacity, QoS type, labels, description", run: poolUpdate},
		{group: "pools", verb: "delete", args: "POOL", help: "delete an empty storage pool", run: deleteCmd(func(c *session, a []string) string { return c.parent() + "/storagePools/" + a[0] })},

		{group: "volumes", verb: "list", flags: listFlags, help: "list volumes", run: listCmd("volumes", "volumes",
			[]string{"id", "shareName", "storagePool", "capacityGib", "usedGib", "serviceLevel", "throughputMibps", "protocols", "state"}, func(c *session) string { return c.parent() + "/volumes" })},
		{group: "volumes", verb: "get", args: "VOLUME", help: "show a volume", run: getCmd(func(c *session, a []string) string { return c.parent() + "/volumes/" + a[0] }, 1)},
		{group: "volumes", verb: "create", args: "VOLUME", flags: volSpec, help: "create a volume (or a clone with --from-snapshot)", run: volumeCreate},
		{group: "volumes", verb: "update", args: "VOLUME", flags: volSpec, help: "resize or change a volume", run: volumeUpdate},
		{group: "volumes", verb: "delete", args: "VOLUME", flags: []flagSpec{{name: "force", bool: true, usage: "delete its snapshots too"}},
			help: "delete a volume", run: volumeDelete},
		{group: "volumes", verb: "revert", args: "VOLUME", flags: []flagSpec{{name: "snapshot", usage: "snapshot ID to revert to (newer snapshots are deleted)"}},
			help: "revert a volume to a snapshot", run: volumeRevert},

		{group: "snapshots", verb: "list", args: "VOLUME", flags: listFlags, help: "list a volume's snapshots", run: func(ctx context.Context, c *session, p *parsed) error {
			if err := needArgs(p, 1, "VOLUME"); err != nil {
				return err
			}
			return listCmd("snapshots", "snapshots", []string{"id", "usedBytes", "createTime", "state"}, func(c *session) string {
				return c.parent() + "/volumes/" + p.args[0] + "/snapshots"
			})(ctx, c, p)
		}},
		{group: "snapshots", verb: "get", args: "VOLUME SNAPSHOT", help: "show a snapshot", run: getCmd(func(c *session, a []string) string {
			return c.parent() + "/volumes/" + a[0] + "/snapshots/" + a[1]
		}, 2)},
		{group: "snapshots", verb: "create", args: "VOLUME SNAPSHOT", flags: metaFlags, help: "take a snapshot", run: snapshotCreate},
		{group: "snapshots", verb: "update", args: "VOLUME SNAPSHOT", flags: metaFlags, help: "change a snapshot's description or labels", run: snapshotUpdate},
		{group: "snapshots", verb: "delete", args: "VOLUME SNAPSHOT", help: "delete a snapshot", run: deleteCmd(func(c *session, a []string) string {
			return c.parent() + "/volumes/" + a[0] + "/snapshots/" + a[1]
		})},

		{group: "operations", verb: "list", flags: listFlags, help: "list operations, newest first", run: listCmd("operations", "operations",
			[]string{"id", "metadata.verb", "metadata.target", "done", "error.message"}, func(c *session) string { return c.parent() + "/operations" })},
		{group: "operations", verb: "get", args: "OPERATION", help: "show an operation", run: getCmd(func(c *session, a []string) string { return c.parent() + "/operations/" + a[0] }, 1)},
		{group: "operations", verb: "wait", args: "OPERATION", help: "wait for an operation to finish", run: opWait},
		{group: "operations", verb: "cancel", args: "OPERATION", help: "ask for an operation to be cancelled", run: func(ctx context.Context, c *session, p *parsed) error {
			if err := needArgs(p, 1, "OPERATION"); err != nil {
				return err
			}
			return c.cl.Do(ctx, http.MethodPost, c.parent()+"/operations/"+p.args[0]+":cancel", nil, map[string]any{}, nil)
		}},
		{group: "operations", verb: "delete", args: "OPERATION", help: "forget a finished operation", run: func(ctx context.Context, c *session, p *parsed) error {
			if err := needArgs(p, 1, "OPERATION"); err != nil {
				return err
			}
			return c.cl.Do(ctx, http.MethodDelete, c.parent()+"/operations/"+p.args[0], nil, nil, nil)
		}},
	}
}

func needArgs(p *parsed, n int, names string) error {
	if len(p.args) != n {
		return fmt.Errorf("expected %s, got %d argument(s)", names, len(p.args))
	}
	return nil
}

func listCmd(what, field string, cols []string, path func(*session) string) func(context.Context, *session, *parsed) error {
	return func(ctx context.Context, c *session, p *parsed) error {
		q := url.Values{}
		for flag, param := range map[string]string{"filter": "filter", "order-by": "orderBy", "page-size": "pageSize"} {
			if v := p.str(flag); v != "" {
				q.Set(param, v)
			}
		}
		all, err := c.listAll(ctx, path(c), field, q)
		if err != nil {
			return fmt.Errorf("list %s: %w", what, err)
		}
		return c.print(all, cols)
	}
}

// listAll fetches every page of a list call and returns the items under field
// (never nil).
func (c *session) listAll(ctx context.Context, path, field string, q url.Values) ([]client.Object, error) {
	all := []client.Object{}
	for {
		var resp map[string]any
		if err := c.cl.Do(ctx, http.MethodGet, path, q, nil, &resp); err != nil {
			return nil, err
		}
		items, _ := resp[field].([]any)
		for _, it := range items {
			if m, ok := it.(map[string]any); ok {
				all = append(all, m)
			}
		}
		next, _ := resp["nextPageToken"].(string)
		if next == "" {
			return all, nil
		}
		q.Set("pageToken", next)
	}
}

func getCmd(path func(*session, []string) string, n int) func(context.Context, *session, *parsed) error {
	return func(ctx context.Context, c *session, p *parsed) error {
		if len(p.args) != n {
			return fmt.Errorf("expected %d argument(s), got %d", n, len(p.args))
		}
		var obj client.Object
		if err := c.cl.Do(ctx, http.MethodGet, path(c, p.args), nil, nil, &obj); err != nil {
			return err
		}
		return c.print(obj, nil)
	}
}

// mutate sends a mutating call and, unless --async, waits for its operation and
// prints the resulting resource.
func (c *session) mutate(ctx context.Context, method, path string, q url.Values, body any) error {
	var op client.Object
	if err := c.cl.Do(ctx, method, path, q, body, &op); err != nil {
		return err
	}
	if c.async {
		return c.print(op, nil)
	}
	done, err := c.cl.Wait(ctx, op)
	if err != nil {
		return err
	}
	resp, _ := done["response"].(map[string]any)
	delete(resp, "@type")
	if len(resp) == 0 {
		fmt.Fprintln(c.env.Stdout, "done")
		return nil
	}
	return c.print(resp, nil)
}

func deleteCmd(path func(*session, []string) string) func(context.Context, *session, *parsed) error {
	return func(ctx context.Context, c *session, p *parsed) error {
		if len(p.args) == 0 {
			return fmt.Errorf("expected the resource ID(s)")
		}
		return c.mutate(ctx, http.MethodDelete, path(c, p.args), nil, nil)
	}
}

func opWait(ctx context.Context, c *session, p *parsed) error {
	if err := needArgs(p, 1, "OPERATION"); err != nil {
		return err
	}
	var op client.Object
	if err := c.cl.Do(ctx, http.MethodGet, c.parent()+"/operations/"+p.args[0], nil, nil, &op); err != nil {
		return err
	}
	done, err := c.cl.Wait(ctx, op)
	if err != nil {
		return err
	}
	return c.print(done, nil)
}

func parseLabels(s string) (map[string]string, error) {
	out := map[string]string{}
	if s == "" {
		return out, nil
	}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--labels: %q is not key=value", kv)
		}
		out[k] = v
	}
	return out, nil
}

// setMeta copies --description and --labels into body and records the mask paths.
func setMeta(p *parsed, body map[string]any, mask *[]string) error {
	if p.has("description") {
		body["description"] = p.str("description")
		*mask = append(*mask, "description")
	}
	if p.has("labels") {
		l, err := parseLabels(p.str("labels"))
		if err != nil {
			return err
		}
		body["labels"] = l
		*mask = append(*mask, "labels")
	}
	return nil
}

func poolBody(c *session, p *parsed) (map[string]any, []string, error) {
	body := map[string]any{}
	var mask []string
	set := func(flag, field string, v any) {
		if p.has(flag) {
			body[field] = v
			mask = append(mask, field)
		}
	}
	set("service-level", "serviceLevel", strings.ToUpper(p.str("service-level")))
	set("capacity-gib", "capacityGib", p.str("capacity-gib"))
	set("qos-type", "qosType", strings.ToUpper(p.str("qos-type")))
	if p.has("network") {
		n := p.str("network")
		if !strings.Contains(n, "/") {
			n = "projects/" + c.project + "/global/networks/" + n
		}
		set("network", "network", n)
	}
	if p.has("active-directory") {
		ad := p.str("active-directory")
		if !strings.Contains(ad, "/") {
			ad = strings.TrimPrefix(c.parent(), "/v1/") + "/activeDirectories/" + ad
		}
		set("active-directory", "activeDirectory", ad)
	}
	return body, mask, setMeta(p, body, &mask)
}

func poolCreate(ctx context.Context, c *session, p *parsed) error {
	if err := needArgs(p, 1, "POOL"); err != nil {
		return err
	}
	body, _, err := poolBody(c, p)
	if err != nil {
		return err
	}
	if _, ok := body["network"]; !ok {
		body["network"] = "projects/" + c.project + "/global/networks/default"
	}
	return c.mutate(ctx, http.MethodPost, c.parent()+"/storagePools", url.Values{"storagePoolId": {p.args[0]}}, body)
}

func poolUpdate(ctx context.Context, c *session, p *parsed) error {
	if err := needArgs(p, 1, "POOL"); err != nil {
		return err
	}
	body, mask, err := poolBody(c, p)
	if err != nil {
		return err
	}
	if len(mask) == 0 {
		return fmt.Errorf("nothing to update: give at least one flag")
	}
	return c.mutate(ctx, http.MethodPatch, c.parent()+"/storagePools/"+p.args[0], url.Values{"updateMask": {strings.Join(mask, ",")}}, body)
}

// parseExportRule turns "clients=10.0.0.0/8;10.1.0.0/16,access=READ_WRITE,root=false,nfsv3"
// into a SimpleExportPolicyRule.
func parseExportRule(s string) (map[string]any, error) {
	rule := map[string]any{"accessType": "READ_WRITE", "hasRootAccess": "true"}
	v3, v4 := false, false
	for _, part := range strings.Split(s, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "clients":
			rule["allowedClients"] = strings.ReplaceAll(v, ";", ",")
		case "access":
			rule["accessType"] = strings.ToUpper(v)
		case "root":
			if _, err := strconv.ParseBool(v); err != nil {
				return nil, fmt.Errorf("--export-rule: root=%q must be true or false", v)
			}
			rule["hasRootAccess"] = v
		case "squash":
			rule["squashMode"] = strings.ToUpper(v)
		case "anon-uid":
			rule["anonUid"] = v
		case "nfsv3":
			v3 = true
		case "nfsv4":
			v4 = true
		default:
			return nil, fmt.Errorf("--export-rule: unknown key %q", k)
		}
	}
	if _, ok := rule["allowedClients"]; !ok {
		return nil, fmt.Errorf("--export-rule %q: clients= is required", s)
	}
	if !v3 && !v4 {
		v3, v4 = true, true
	}
	rule["nfsv3"], rule["nfsv4"] = v3, v4
	return rule, nil
}

func volumeBody(c *session, p *parsed) (map[string]any, []string, error) {
	body := map[string]any{}
	var mask []string
	set := func(flag, field string, v any) {
		if p.has(flag) {
			body[field] = v
			mask = append(mask, field)
		}
	}
	set("pool", "storagePool", p.str("pool"))
	set("capacity-gib", "capacityGib", p.str("capacity-gib"))
	set("share-name", "shareName", p.str("share-name"))
	set("unix-permissions", "unixPermissions", p.str("unix-permissions"))
	set("snapshot-directory", "snapshotDirectory", p.str("snapshot-directory") == "true")
	if p.has("throughput-mibps") {
		f, err := strconv.ParseFloat(p.str("throughput-mibps"), 64)
		if err != nil {
			return nil, nil, fmt.Errorf("--throughput-mibps: %w", err)
		}
		set("throughput-mibps", "throughputMibps", f)
	}
	if p.has("protocols") {
		set("protocols", "protocols", strings.Split(strings.ToUpper(p.str("protocols")), ","))
	}
	if rules := p.all("export-rule"); len(rules) > 0 {
		var rs []map[string]any
		for _, r := range rules {
			rule, err := parseExportRule(r)
			if err != nil {
				return nil, nil, err
			}
			rs = append(rs, rule)
		}
		body["exportPolicy"] = map[string]any{"rules": rs}
		mask = append(mask, "exportPolicy")
	}
	return body, mask, setMeta(p, body, &mask)
}

func volumeCreate(ctx context.Context, c *session, p *parsed) error {
	if err := needArgs(p, 1, "VOLUME"); err != nil {
		return err
	}
	body, _, err := volumeBody(c, p)
	if err != nil {
		return err
	}
	if _, ok := body["shareName"]; !ok {
		body["shareName"] = p.args[0]
	}
	if _, ok := body["protocols"]; !ok {
		body["protocols"] = []string{"NFSV3"}
	}
	if src := p.str("from-snapshot"); src != "" {
		if !strings.HasPrefix(src, "projects/") {
			vol, snap, ok := strings.Cut(src, "/")
			if !ok {
				return fmt.Errorf("--from-snapshot: give VOLUME/SNAPSHOT or a full snapshot name")
			}
			src = strings.TrimPrefix(c.parent(), "/v1/") + "/volumes/" + vol + "/snapshots/" + snap
		}
		body["restoreParameters"] = map[string]any{"sourceSnapshot": src}
	}
	return c.mutate(ctx, http.MethodPost, c.parent()+"/volumes", url.Values{"volumeId": {p.args[0]}}, body)
}

func volumeUpdate(ctx context.Context, c *session, p *parsed) error {
	if err := needArgs(p, 1, "VOLUME"); err != nil {
		return err
	}
	body, mask, err := volumeBody(c, p)
	if err != nil {
		return err
	}
	if len(mask) == 0 {
		return fmt.Errorf("nothing to update: give at least one flag")
	}
	return c.mutate(ctx, http.MethodPatch, c.parent()+"/volumes/"+p.args[0], url.Values{"updateMask": {strings.Join(mask, ",")}}, body)
}

func volumeDelete(ctx context.Context, c *session, p *parsed) error {
	if err := needArgs(p, 1, "VOLUME"); err != nil {
		return err
	}
	q := url.Values{}
	if p.has("force") && p.str("force") == "true" {
		q.Set("force", "true")
	}
	return c.mutate(ctx, http.MethodDelete, c.parent()+"/volumes/"+p.args[0], q, nil)
}

func volumeRevert(ctx context.Context, c *session, p *parsed) error {
	if err := needArgs(p, 1, "VOLUME"); err != nil {
		return err
	}
	if p.str("snapshot") == "" {
		return fmt.Errorf("--snapshot is required")
	}
	return c.mutate(ctx, http.MethodPost, c.parent()+"/volumes/"+p.args[0]+":revert", nil, map[string]any{"snapshotId": p.str("snapshot")})
}

func snapshotCreate(ctx context.Context, c *session, p *parsed) error {
	if err := needArgs(p, 2, "VOLUME SNAPSHOT"); err != nil {
		return err
	}
	body := map[string]any{}
	var mask []string
	if err := setMeta(p, body, &mask); err != nil {
		return err
	}
	return c.mutate(ctx, http.MethodPost, c.parent()+"/volumes/"+p.args[0]+"/snapshots", url.Values{"snapshotId": {p.args[1]}}, body)
}

func snapshotUpdate(ctx context.Context, c *session, p *parsed) error {
	if err := needArgs(p, 2, "VOLUME SNAPSHOT"); err != nil {
		return err
	}
	body := map[string]any{}
	var mask []string
	if err := setMeta(p, body, &mask); err != nil {
		return err
	}
	if len(mask) == 0 {
		return fmt.Errorf("nothing to update: give --description or --labels")
	}
	return c.mutate(ctx, http.MethodPatch, c.parent()+"/volumes/"+p.args[0]+"/snapshots/"+p.args[1], url.Values{"updateMask": {strings.Join(mask, ",")}}, body)
}

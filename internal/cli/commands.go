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
	poolCommon := []flagSpec{
		{name: "capacity-gib", usage: "pool capacity in GiB"},
		{name: "qos-type", usage: "AUTO or MANUAL"},
		{name: "active-directory", usage: "Active Directory policy: ID or full name"},
	}
	poolCreate := append(append([]flagSpec{
		{name: "service-level", usage: "PREMIUM, EXTREME, STANDARD or FLEX"},
		{name: "network", usage: "network: name or projects/{project}/global/networks/{network} (default: default)"},
	}, poolCommon...), metaFlags...)
	poolUpdate := append(poolCommon, metaFlags...)
	volCommon := []flagSpec{
		{name: "capacity-gib", usage: "volume capacity in GiB"},
		{name: "unix-permissions", value: "MODE", usage: "octal mode of the volume's root directory (default 0770, owner root)"},
		{name: "export-rule", multi: true, usage: "clients=CIDR[;CIDR],access=READ_WRITE|READ_ONLY|READ_NONE,root=true|false,squash=…,anon-uid=N,nfsv3,nfsv4 (repeatable; the first rule matching a client wins)"},
		{name: "snapshot-directory", bool: true, usage: "expose .snapshot"},
		{name: "throughput-mibps", usage: "throughput in MANUAL QoS pools"},
	}
	volCreate := append(append([]flagSpec{
		{name: "pool", usage: "storage pool: ID or full name"},
		{name: "share-name", usage: "export path / share name (default: the volume ID)"},
		{name: "protocols", usage: "NFSV3, NFSV4, SMB, comma-separated (default NFSV3)"},
		{name: "from-snapshot", usage: "clone: VOLUME/SNAPSHOT or a snapshot's full name"},
	}, volCommon...), metaFlags...)
	volUpdate := append(append([]flagSpec{
		{name: "pool", usage: "move the volume to this storage pool (ID or full name; same network)"},
	}, volCommon...), metaFlags...)
	loc := func(c *session) string { return "/v1/projects/" + c.project + "/locations" }
	return []*command{
		{group: "locations", verb: "list", help: "list locations", run: listCmd("locations", "locations", []string{"locationId", "displayName"}, loc)},
		{group: "locations", verb: "get", args: "LOCATION", help: "show a location", run: getCmd(kindLocation)},
		{group: "nodes", verb: "list", help: "list the service's nodes, UP or DOWN by their heartbeat (the owner account only)",
			run: listCmd("nodes", "nodes", []string{"nodeId", "state", "drained", "serving", "moving", "apiUrl", "startTime", "heartbeatTime"}, func(*session) string { return "/v1/nodes" })},
		{group: "nodes", verb: "drain", args: "NODE", mutating: true, help: "move a node's volumes to other nodes reaching the same storage, while they serve (--failover; the owner account only)",
			run: drainCmd(":drain")},
		{group: "nodes", verb: "undrain", args: "NODE", mutating: true, help: "let a drained node serve its volumes again (they move back)", run: drainCmd(":undrain")},

		{group: "pools", verb: "list", flags: listFlags, help: "list storage pools", run: listCmd("pools", "storagePools",
			[]string{"id", "serviceLevel", "capacityGib", "volumeCapacityGib", "volumeCount", "state"}, func(c *session) string { return c.parent() + "/storagePools" })},
		{group: "pools", verb: "get", args: "POOL", help: "show a storage pool", run: getCmd(kindPool)},
		{group: "pools", verb: "create", args: "POOL", flags: poolCreate, mutating: true, help: "create a storage pool", run: poolCreateCmd},
		{group: "pools", verb: "update", args: "POOL", flags: poolUpdate, mutating: true, help: "change a storage pool's capacity, QoS type, Active Directory policy, labels, description", run: poolUpdateCmd},
		{group: "pools", verb: "delete", args: "POOL", mutating: true, help: "delete an empty storage pool", run: deleteCmd(kindPool)},

		{group: "volumes", verb: "list", flags: listFlags, help: "list volumes", run: listCmd("volumes", "volumes",
			[]string{"id", "shareName", "storagePool", "capacityGib", "usedGib", "serviceLevel", "throughputMibps", "protocols", "state"}, func(c *session) string { return c.parent() + "/volumes" })},
		{group: "volumes", verb: "get", args: "VOLUME", help: "show a volume", run: getCmd(kindVolume)},
		{group: "volumes", verb: "create", args: "VOLUME", flags: volCreate, mutating: true, help: "create a volume (or a clone with --from-snapshot)", run: volumeCreate},
		{group: "volumes", verb: "update", args: "VOLUME", flags: volUpdate, mutating: true, help: "resize, move or change a volume", run: volumeUpdate},
		{group: "volumes", verb: "delete", args: "VOLUME", flags: []flagSpec{{name: "force", bool: true, usage: "delete its snapshots too"}}, mutating: true,
			help: "delete a volume", run: volumeDelete},
		{group: "volumes", verb: "revert", args: "VOLUME", flags: []flagSpec{{name: "snapshot", usage: "snapshot to revert to: ID or full name (newer snapshots are deleted)"}}, mutating: true,
			help: "revert a volume to a snapshot", run: volumeRevert},

		{group: "snapshots", verb: "list", args: "VOLUME", flags: listFlags, help: "list a volume's snapshots", run: func(ctx context.Context, c *session, p *parsed) error {
			vol, err := c.onePath(p, kindVolume)
			if err != nil {
				return err
			}
			return listCmd("snapshots", "snapshots", []string{"id", "usedBytes", "createTime", "state"}, func(*session) string { return vol + "/snapshots" })(ctx, c, p)
		}},
		{group: "snapshots", verb: "get", args: "VOLUME SNAPSHOT", help: "show a snapshot (also VOLUME/SNAPSHOT or a full name)", run: snapshotGet},
		{group: "snapshots", verb: "create", args: "VOLUME SNAPSHOT", flags: metaFlags, mutating: true, help: "take a snapshot (also VOLUME/SNAPSHOT or a full name)", run: snapshotCreate},
		{group: "snapshots", verb: "update", args: "VOLUME SNAPSHOT", flags: metaFlags, mutating: true, help: "change a snapshot's description or labels", run: snapshotUpdate},
		{group: "snapshots", verb: "delete", args: "VOLUME SNAPSHOT", mutating: true, help: "delete a snapshot (also VOLUME/SNAPSHOT or a full name)", run: snapshotDelete},

		{group: "operations", verb: "list", flags: listFlags, help: "list operations, newest first", run: listCmd("operations", "operations",
			[]string{"id", "metadata.verb", "metadata.target", "done", "error.message"}, func(c *session) string { return c.parent() + "/operations" })},
		{group: "operations", verb: "get", args: "OPERATION", help: "show an operation", run: getCmd(kindOperation)},
		{group: "operations", verb: "wait", args: "OPERATION", help: "wait for an operation to finish", run: opWait},
		{group: "operations", verb: "cancel", args: "OPERATION", help: "ask for an operation to be cancelled", run: func(ctx context.Context, c *session, p *parsed) error {
			path, err := c.onePath(p, kindOperation)
			if err != nil {
				return err
			}
			return c.cl.Do(ctx, http.MethodPost, path+":cancel", nil, map[string]any{}, nil)
		}},
		{group: "operations", verb: "delete", args: "OPERATION", help: "forget a finished operation", run: func(ctx context.Context, c *session, p *parsed) error {
			path, err := c.onePath(p, kindOperation)
			if err != nil {
				return err
			}
			return c.cl.Do(ctx, http.MethodDelete, path, nil, nil, nil)
		}},
	}
}

// onePath reads the command's one argument, a k, and returns its API path.
func (c *session) onePath(p *parsed, k *kind) (string, error) {
	if err := needArgs(p, k.arg); err != nil {
		return "", err
	}
	return c.path(k, p.args[0])
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

func getCmd(k *kind) func(context.Context, *session, *parsed) error {
	return func(ctx context.Context, c *session, p *parsed) error {
		path, err := c.onePath(p, k)
		if err != nil {
			return err
		}
		var obj client.Object
		if err := c.cl.Do(ctx, http.MethodGet, path, nil, nil, &obj); err != nil {
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

// drainCmd drains (verb ":drain") or undrains a node and prints it.
func drainCmd(verb string) func(context.Context, *session, *parsed) error {
	return func(ctx context.Context, c *session, p *parsed) error {
		if err := needArgs(p, "NODE"); err != nil {
			return err
		}
		var node client.Object
		if err := c.cl.Do(ctx, http.MethodPost, "/v1/nodes/"+url.PathEscape(p.args[0])+verb, nil, nil, &node); err != nil {
			return err
		}
		return c.print(node, nil)
	}
}

func deleteCmd(k *kind) func(context.Context, *session, *parsed) error {
	return func(ctx context.Context, c *session, p *parsed) error {
		path, err := c.onePath(p, k)
		if err != nil {
			return err
		}
		return c.mutate(ctx, http.MethodDelete, path, nil, nil)
	}
}

func opWait(ctx context.Context, c *session, p *parsed) error {
	path, err := c.onePath(p, kindOperation)
	if err != nil {
		return err
	}
	var op client.Object
	if err := c.cl.Do(ctx, http.MethodGet, path, nil, nil, &op); err != nil {
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
			return nil, usagef("--labels: %q is not key=value", kv)
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
		n, err := c.fullName(kindNetwork, p.str("network"))
		if err != nil {
			return nil, nil, fmt.Errorf("--network: %w", err)
		}
		set("network", "network", n)
	}
	if p.has("active-directory") {
		ad, err := c.fullName(kindAD, p.str("active-directory"))
		if err != nil {
			return nil, nil, fmt.Errorf("--active-directory: %w", err)
		}
		set("active-directory", "activeDirectory", ad)
	}
	return body, mask, setMeta(p, body, &mask)
}

func poolCreateCmd(ctx context.Context, c *session, p *parsed) error {
	if err := needArgs(p, "POOL"); err != nil {
		return err
	}
	id, err := c.lastID(kindPool, p.args[0])
	if err != nil {
		return err
	}
	body, _, err := poolBody(c, p)
	if err != nil {
		return err
	}
	if _, ok := body["network"]; !ok {
		body["network"] = c.name(kindNetwork, "default")
	}
	return c.mutate(ctx, http.MethodPost, c.parent()+"/storagePools", url.Values{"storagePoolId": {id}}, body)
}

func poolUpdateCmd(ctx context.Context, c *session, p *parsed) error {
	path, err := c.onePath(p, kindPool)
	if err != nil {
		return err
	}
	body, mask, err := poolBody(c, p)
	if err != nil {
		return err
	}
	if len(mask) == 0 {
		return usagef("nothing to update: give at least one flag")
	}
	return c.mutate(ctx, http.MethodPatch, path, url.Values{"updateMask": {strings.Join(mask, ",")}}, body)
}

// exportRuleKeys are the keys of --export-rule, for its error messages.
const exportRuleKeys = "clients, access, root, squash, anon-uid, nfsv3, nfsv4"

// parseExportRule turns "clients=10.0.0.0/8;10.1.0.0/16,access=READ_WRITE,root=false,nfsv3"
// into a SimpleExportPolicyRule.
func parseExportRule(s string) (map[string]any, error) {
	rule := map[string]any{"accessType": "READ_WRITE", "hasRootAccess": "true"}
	v3, v4 := false, false
	for _, part := range strings.Split(s, ",") {
		if strings.TrimSpace(part) == "" {
			continue
		}
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "clients":
			rule["allowedClients"] = strings.ReplaceAll(v, ";", ",")
		case "access":
			v = strings.ToUpper(v)
			if v != "READ_WRITE" && v != "READ_ONLY" && v != "READ_NONE" {
				return nil, usagef("--export-rule %q: access=%q must be READ_WRITE, READ_ONLY or READ_NONE", s, v)
			}
			rule["accessType"] = v
		case "root":
			if _, err := strconv.ParseBool(v); err != nil {
				return nil, usagef("--export-rule %q: root=%q must be true or false", s, v)
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
			return nil, usagef("--export-rule %q: unknown key %q (the keys: %s)", s, k, exportRuleKeys)
		}
	}
	if _, ok := rule["allowedClients"]; !ok {
		return nil, usagef("--export-rule %q: clients= is required (the keys: %s)", s, exportRuleKeys)
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
	if p.has("pool") {
		pool, err := c.lastID(kindPool, p.str("pool"))
		if err != nil {
			return nil, nil, fmt.Errorf("--pool: %w", err)
		}
		set("pool", "storagePool", pool)
	}
	set("capacity-gib", "capacityGib", p.str("capacity-gib"))
	set("share-name", "shareName", p.str("share-name"))
	set("unix-permissions", "unixPermissions", p.str("unix-permissions"))
	set("snapshot-directory", "snapshotDirectory", p.str("snapshot-directory") == "true")
	if p.has("throughput-mibps") {
		f, err := strconv.ParseFloat(p.str("throughput-mibps"), 64)
		if err != nil {
			return nil, nil, usagef("--throughput-mibps: %q is not a number", p.str("throughput-mibps"))
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
	if err := needArgs(p, "VOLUME"); err != nil {
		return err
	}
	id, err := c.lastID(kindVolume, p.args[0])
	if err != nil {
		return err
	}
	body, _, err := volumeBody(c, p)
	if err != nil {
		return err
	}
	if _, ok := body["shareName"]; !ok {
		body["shareName"] = id
	}
	if _, ok := body["protocols"]; !ok {
		body["protocols"] = []string{"NFSV3"}
	}
	if p.has("from-snapshot") {
		src, err := c.fullName(kindSnapshot, p.str("from-snapshot"))
		if err != nil {
			return fmt.Errorf("--from-snapshot: %w", err)
		}
		body["restoreParameters"] = map[string]any{"sourceSnapshot": src}
	}
	return c.mutate(ctx, http.MethodPost, c.parent()+"/volumes", url.Values{"volumeId": {id}}, body)
}

func volumeUpdate(ctx context.Context, c *session, p *parsed) error {
	path, err := c.onePath(p, kindVolume)
	if err != nil {
		return err
	}
	body, mask, err := volumeBody(c, p)
	if err != nil {
		return err
	}
	if len(mask) == 0 {
		return usagef("nothing to update: give at least one flag")
	}
	return c.mutate(ctx, http.MethodPatch, path, url.Values{"updateMask": {strings.Join(mask, ",")}}, body)
}

func volumeDelete(ctx context.Context, c *session, p *parsed) error {
	path, err := c.onePath(p, kindVolume)
	if err != nil {
		return err
	}
	q := url.Values{}
	if p.str("force") == "true" {
		q.Set("force", "true")
	}
	return c.mutate(ctx, http.MethodDelete, path, q, nil)
}

func volumeRevert(ctx context.Context, c *session, p *parsed) error {
	if err := needArgs(p, "VOLUME"); err != nil {
		return err
	}
	vol, err := c.lastID(kindVolume, p.args[0])
	if err != nil {
		return err
	}
	if p.str("snapshot") == "" {
		return usagef("--snapshot is required")
	}
	ids, err := c.ids(kindSnapshot, p.str("snapshot"), vol)
	if err != nil {
		return fmt.Errorf("--snapshot: %w", err)
	}
	return c.mutate(ctx, http.MethodPost, "/v1/"+c.name(kindVolume, vol)+":revert", nil, map[string]any{"snapshotId": ids[1]})
}

func snapshotGet(ctx context.Context, c *session, p *parsed) error {
	ids, err := c.snapshotArgs(p)
	if err != nil {
		return err
	}
	var obj client.Object
	if err := c.cl.Do(ctx, http.MethodGet, "/v1/"+c.name(kindSnapshot, ids...), nil, nil, &obj); err != nil {
		return err
	}
	return c.print(obj, nil)
}

func snapshotCreate(ctx context.Context, c *session, p *parsed) error {
	ids, err := c.snapshotArgs(p)
	if err != nil {
		return err
	}
	body := map[string]any{}
	var mask []string
	if err := setMeta(p, body, &mask); err != nil {
		return err
	}
	return c.mutate(ctx, http.MethodPost, "/v1/"+c.name(kindVolume, ids[0])+"/snapshots", url.Values{"snapshotId": {ids[1]}}, body)
}

func snapshotUpdate(ctx context.Context, c *session, p *parsed) error {
	ids, err := c.snapshotArgs(p)
	if err != nil {
		return err
	}
	body := map[string]any{}
	var mask []string
	if err := setMeta(p, body, &mask); err != nil {
		return err
	}
	if len(mask) == 0 {
		return usagef("nothing to update: give --description or --labels")
	}
	return c.mutate(ctx, http.MethodPatch, "/v1/"+c.name(kindSnapshot, ids...), url.Values{"updateMask": {strings.Join(mask, ",")}}, body)
}

func snapshotDelete(ctx context.Context, c *session, p *parsed) error {
	ids, err := c.snapshotArgs(p)
	if err != nil {
		return err
	}
	return c.mutate(ctx, http.MethodDelete, "/v1/"+c.name(kindSnapshot, ids...), nil, nil)
}

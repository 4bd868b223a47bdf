package cli

import (
	"fmt"
	"slices"
	"strings"
)

// kind is a resource the CLI names: how usage and messages call it (short: its
// IDs joined by "/", as a command line may give them), whether it lives in a
// location or directly in a project, and the collections from there down to it
// (a snapshot: volumes, then snapshots; "global" holds no ID).
type kind struct {
	arg, short, what string
	inLocation       bool
	collections      []string
	// account kinds also take an IAM member, serviceAccount:EMAIL.
	account bool
}

var (
	kindLocation  = &kind{"LOCATION", "LOCATION", "location", false, []string{"locations"}, false}
	kindPool      = &kind{"POOL", "POOL", "storage pool", true, []string{"storagePools"}, false}
	kindVolume    = &kind{"VOLUME", "VOLUME", "volume", true, []string{"volumes"}, false}
	kindSnapshot  = &kind{"SNAPSHOT", "VOLUME/SNAPSHOT", "snapshot", true, []string{"volumes", "snapshots"}, false}
	kindOperation = &kind{"OPERATION", "OPERATION", "operation", true, []string{"operations"}, false}
	kindAD        = &kind{"ACTIVE_DIRECTORY", "ACTIVE_DIRECTORY", "Active Directory policy", true, []string{"activeDirectories"}, false}
	kindAccount   = &kind{"EMAIL", "EMAIL", "service account", false, []string{"serviceAccounts"}, true}
	kindKey       = &kind{"KEY_ID", "EMAIL/KEY_ID", "service-account key", false, []string{"serviceAccounts", "keys"}, true}
	kindNetwork   = &kind{"NETWORK", "NETWORK", "network", false, []string{"global", "networks"}, false}

	// kinds are those a full name is recognized as, to say what a wrong one names.
	kinds = []*kind{kindLocation, kindPool, kindVolume, kindSnapshot, kindOperation, kindAD, kindAccount, kindKey, kindNetwork}
)

// template is the shape of k's full name: projects/{project}/locations/{location}/volumes/{volume}.
func (k *kind) template() string {
	t := "projects/{project}"
	if k.inLocation {
		t += "/locations/{location}"
	}
	ids := strings.Split(strings.ToLower(k.short), "/")
	for _, coll := range k.collections {
		if coll == "global" {
			t += "/global"
			continue
		}
		t += "/" + coll + "/{" + ids[0] + "}"
		ids = ids[1:]
	}
	return t
}

// parseName splits a full resource name into its project, its location ("" for
// project-level kinds) and its IDs, if it has the shape of k's names.
func parseName(k *kind, name string) (project, location string, ids []string, ok bool) {
	parts := strings.Split(name, "/")
	if len(parts) < 2 || parts[0] != "projects" || parts[1] == "" {
		return "", "", nil, false
	}
	project, parts = parts[1], parts[2:]
	if k.inLocation {
		if len(parts) < 2 || parts[0] != "locations" || parts[1] == "" {
			return "", "", nil, false
		}
		location, parts = parts[1], parts[2:]
	}
	for _, coll := range k.collections {
		if coll == "global" {
			if len(parts) < 1 || parts[0] != "global" {
				return "", "", nil, false
			}
			parts = parts[1:]
			continue
		}
		if len(parts) < 2 || parts[0] != coll || parts[1] == "" {
			return "", "", nil, false
		}
		ids, parts = append(ids, parts[1]), parts[2:]
	}
	if len(parts) != 0 {
		return "", "", nil, false
	}
	return project, location, ids, true
}

// idCount is how many IDs name a k (the network's "global" is none).
func (k *kind) idCount() int {
	n := 0
	for _, coll := range k.collections {
		if coll != "global" {
			n++
		}
	}
	return n
}

// ids reads arg as a k: its IDs from the collections down (a volume: [vol]; a
// snapshot: [vol, snap]). arg is a full name (which must be in the session's
// project and location), the last ID alone when parents give the others, or,
// for kinds below another, the IDs joined by "/" (VOLUME/SNAPSHOT). A service
// account may be written as its IAM member, serviceAccount:EMAIL.
func (c *session) ids(k *kind, arg string, parents ...string) ([]string, error) {
	if strings.HasPrefix(arg, "projects/") {
		project, location, ids, ok := parseName(k, arg)
		if !ok {
			for _, other := range kinds {
				if _, _, _, ok := parseName(other, arg); ok {
					return nil, usagef("%s names a %s, not a %s", arg, other.what, k.what)
				}
			}
			return nil, usagef("%s is not a %s name (%s)", arg, k.what, k.template())
		}
		if project != c.project {
			return nil, usagef("%s is in project %s, but this command works in project %s (give --project %[2]s)", arg, project, c.project)
		}
		if k.inLocation && location != c.location {
			return nil, usagef("%s is in location %s, but this command works in location %s (give --location %[2]s)", arg, location, c.location)
		}
		if len(parents) > 0 && strings.Join(ids[:len(parents)], "/") != strings.Join(parents, "/") {
			return nil, usagef("%s is not under %s", arg, strings.Join(parents, "/"))
		}
		return ids, nil
	}
	if len(parents) > 0 {
		arg = strings.Join(append(parents, arg), "/")
	}
	if k.account {
		arg = strings.TrimPrefix(arg, "serviceAccount:")
	}
	ids := strings.Split(arg, "/")
	if len(ids) != k.idCount() || slices.Contains(ids, "") {
		return nil, usagef("%q is neither a %s (%s) nor a full name %s", arg, k.what, k.short, k.template())
	}
	return ids, nil
}

// name is the full resource name of a k with ids in the session's scope.
func (c *session) name(k *kind, ids ...string) string {
	n := "projects/" + c.project
	if k.inLocation {
		n += "/locations/" + c.location
	}
	i := 0
	for _, coll := range k.collections {
		n += "/" + coll
		if coll != "global" {
			n += "/" + ids[i]
			i++
		}
	}
	return n
}

// path is the API path of the k that arg names (see ids).
func (c *session) path(k *kind, arg string, parents ...string) (string, error) {
	ids, err := c.ids(k, arg, parents...)
	if err != nil {
		return "", err
	}
	return "/v1/" + c.name(k, ids...), nil
}

// fullName is the full name of the k that arg names (see ids).
func (c *session) fullName(k *kind, arg string) (string, error) {
	ids, err := c.ids(k, arg)
	if err != nil {
		return "", err
	}
	return c.name(k, ids...), nil
}

// lastID is the ID of the k that arg names (see ids).
func (c *session) lastID(k *kind, arg string) (string, error) {
	ids, err := c.ids(k, arg)
	if err != nil {
		return "", err
	}
	return ids[len(ids)-1], nil
}

// needArgs checks that the command line has exactly the positional arguments
// names lists (none if names is empty), in one wording for every command.
func needArgs(p *parsed, names ...string) error {
	if len(p.args) == len(names) {
		return nil
	}
	want := strings.Join(names, " ")
	if want == "" {
		want = "no arguments"
	}
	return usagef("expected %s, got %s", want, gotArgs(p.args))
}

// gotArgs describes the positional arguments given, for usage errors.
func gotArgs(args []string) string {
	if len(args) == 0 {
		return "none"
	}
	return fmt.Sprintf("%d: %q", len(args), args)
}

// snapshotArgs reads VOLUME SNAPSHOT, VOLUME/SNAPSHOT or a snapshot's full name.
func (c *session) snapshotArgs(p *parsed) ([]string, error) {
	switch len(p.args) {
	case 1:
		return c.ids(kindSnapshot, p.args[0])
	case 2:
		vol, err := c.lastID(kindVolume, p.args[0])
		if err != nil {
			return nil, err
		}
		return c.ids(kindSnapshot, p.args[1], vol)
	}
	return nil, usagef("expected VOLUME SNAPSHOT (or VOLUME/SNAPSHOT, or a snapshot's full name), got %s", gotArgs(p.args))
}

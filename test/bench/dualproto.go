package main

import (
	"context"
	"fmt"
	"log"
	"slices"
	"strings"
	"time"

	"github.com/basin-nas/basin/internal/client"
	"github.com/basin-nas/basin/internal/nfs3"
)

// The dualproto section: what a dual-protocol volume's NFS export costs NFS
// metadata work against an NFS-only volume on the same server. Its export
// caches no attributes (Samba changes them behind Ganesha), so every LOOKUP
// and GETATTR reaches the filesystem (an O_PATH open, fstat, and with
// Ganesha's POSIX-ACL build the ACL's getxattr); an NTFS one also refuses
// permission changes, which costs reads nothing. Each round stats every file
// of a directory (LOOKUP, GETATTR) and lists it (READDIRPLUS) over NFSv3 as a
// user other than the files' owner (root would skip the access checks), the
// three volumes in turn, the order rotating.

// dualKinds are the volumes compared: NFS-only, dual-protocol UNIX, NTFS.
var dualKinds = []string{"nfs", "unix", "ntfs"}

type dualResult struct {
	Date   string `json:"date"`
	Rounds int    `json:"rounds"`
	Files  int    `json:"files"`
	// Per kind: each round's stats per second (LOOKUP + GETATTR of every
	// file) and milliseconds per listing (READDIRPLUS of the directory).
	StatsPerSec map[string][]float64 `json:"statsPerSec"`
	ListMillis  map[string][]float64 `json:"listMillis"`
}

func runDual(ctx context.Context, c *client.Client, dataDir string, rounds, files int) dualResult {
	domain(ctx, c, dataDir) // the SMB pool "smb" and its domain
	open := map[string]any{"rules": []any{map[string]any{"allowedClients": benchHost, "accessType": "READ_WRITE", "nfsv3": true, "hasRootAccess": "true"}}}
	body := map[string]string{"nfs": "", "unix": "UNIX", "ntfs": "NTFS"}
	eps := map[string]string{}
	for _, k := range dualKinds {
		id := "md" + k
		v := map[string]any{"shareName": id, "storagePool": "pool", "capacityGib": 4, "protocols": []string{"NFSV3"}, "unixPermissions": "0777", "exportPolicy": open}
		if style := body[k]; style != "" {
			v["storagePool"], v["protocols"], v["securityStyle"] = "smb", []string{"SMB", "NFSV3"}, style
		}
		must(mutate(ctx, c, "POST", loc+"/volumes?volumeId="+id, v))
		var got client.Object
		must(c.Do(ctx, "GET", loc+"/volumes/"+id, nil, nil, &got))
		for _, mo := range got["mountOptions"].([]any) {
			if m := mo.(map[string]any); m["protocol"] == "NFSV3" {
				eps[k], _ = m["ipAddress"].(string)
			}
		}
		if eps[k] == "" {
			fatalf("dualproto: volume %s has no NFS endpoint: %v", id, got["mountOptions"])
		}
	}
	// The files, made by root (mode 0644); read as uid 1000, whom only their
	// "other" bits admit.
	clients := map[string]*nfs3.Client{}
	dirs := map[string][]byte{}
	for _, k := range dualKinds {
		root, err := nfs3.Mount(ctx, eps[k], "/md"+k, nfs3.Options{})
		if err != nil {
			fatalf("dualproto: mount %s: %v", k, err)
		}
		dir, err := root.Mkdir(ctx, root.Root, "d", 0o755)
		if err != nil {
			fatalf("dualproto: mkdir on %s: %v", k, err)
		}
		for i := range files {
			if _, err := root.Create(ctx, dir, fmt.Sprintf("f%05d", i), 0o644); err != nil {
				fatalf("dualproto: create on %s: %v", k, err)
			}
		}
		root.Close()
		cl, err := nfs3.Mount(ctx, eps[k], "/md"+k, nfs3.Options{Auth: nfs3.Auth{UID: 1000, GID: 1000, Machine: "dualbench"}})
		if err != nil {
			fatalf("dualproto: mount %s as 1000: %v", k, err)
		}
		atExit(func() { cl.Close() })
		clients[k], dirs[k] = cl, dir
	}
	res := dualResult{Date: time.Now().UTC().Format(time.RFC3339), Rounds: rounds, Files: files,
		StatsPerSec: map[string][]float64{}, ListMillis: map[string][]float64{}}
	for r := range rounds {
		order := slices.Clone(dualKinds)
		for i := 0; i < r%len(order); i++ {
			order = append(order[1:], order[0])
		}
		for _, k := range order {
			cl, dir := clients[k], dirs[k]
			t0 := time.Now()
			for i := range files {
				fh, _, err := cl.Lookup(ctx, dir, fmt.Sprintf("f%05d", i))
				if err == nil {
					_, err = cl.GetAttr(ctx, fh)
				}
				if err != nil {
					fatalf("dualproto: stat on %s: %v", k, err)
				}
			}
			stats := float64(files) / time.Since(t0).Seconds()
			t1 := time.Now()
			ents, err := cl.ReadDirPlus(ctx, dir)
			if err != nil || len(ents) < files {
				fatalf("dualproto: list on %s: %d entries, %v", k, len(ents), err)
			}
			list := float64(time.Since(t1).Microseconds()) / 1000
			res.StatsPerSec[k] = append(res.StatsPerSec[k], stats)
			res.ListMillis[k] = append(res.ListMillis[k], list)
			log.Printf("dualproto round %d, %s: %.0f stats/s, listing %.1f ms", r+1, k, stats, list)
		}
	}
	return res
}

func (r dualResult) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Measured %s on the same machine: one server, three volumes side by side (NFS-only; [SMB, NFSV3] of UNIX and of NTFS style), "+
		"a directory of %d files made by root (0644) on each, NFSv3 as uid 1000 from the host; per round and volume, a LOOKUP and a GETATTR "+
		"of every file, then a READDIRPLUS of the directory, the volumes in turn. Medians of %d rounds.\n\n", r.Date, r.Files, r.Rounds)
	b.WriteString("| volume | stats/s (LOOKUP + GETATTR) | / NFS-only | listing (READDIRPLUS) | / NFS-only |\n|---|---|---|---|---|\n")
	names := map[string]string{"nfs": "NFS-only (attributes cached)", "unix": "[SMB, NFSV3], UNIX (uncached)", "ntfs": "[SMB, NFSV3], NTFS (uncached)"}
	base, baseList := median(r.StatsPerSec["nfs"]), median(r.ListMillis["nfs"])
	for _, k := range dualKinds {
		s, l := median(r.StatsPerSec[k]), median(r.ListMillis[k])
		fmt.Fprintf(&b, "| %s | %.0f | %.2f | %.1f ms | %.2f |\n", names[k], s, s/base, l, l/baseList)
	}
	return b.String()
}

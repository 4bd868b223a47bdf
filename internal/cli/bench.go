package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/basin-nas/basin/internal/bench"
	"github.com/basin-nas/basin/internal/perf"
)

func benchCommands() []*command {
	flags := benchFlags()
	return []*command{
		{group: "bench", verb: "", offline: true, flags: flags, help: "load generator with fio's job vocabulary and fio-compatible output", run: runBench},
		{group: "bench", verb: "sweep", offline: true, flags: append(flags, flagSpec{name: "svg", usage: "where to write the chart (default sweep.svg)"}),
			help: "4 KiB random and 64 KiB sequential I/O at read shares 100 % → 0 %: a table and an SVG chart", run: runSweep},
	}
}

func benchFlags() []flagSpec {
	return []flagSpec{
		{name: "engine", usage: "local (files), nfs (NFSv3 or NFSv4.1 from user space) or smb (SMB 2/3 from user space)"},
		{name: "name", usage: "job name (default basin-bench)"},
		{name: "rw", usage: "read, write, randread, randwrite, rw or randrw"},
		{name: "bs", usage: "block size, e.g. 4k, 64k, 1m"},
		{name: "iodepth", usage: "outstanding I/Os per job"},
		{name: "numjobs", usage: "parallel jobs"},
		{name: "size", usage: "file size per job and file, e.g. 1G"},
		{name: "nrfiles", usage: "files per job"},
		{name: "runtime", usage: "seconds (or 30s, 2m)"},
		{name: "time_based", bool: true, usage: "run for --runtime even after --size is done"},
		{name: "ramp_time", usage: "seconds of warm-up not counted"},
		{name: "rwmixread", usage: "read share for rw/randrw, percent"},
		{name: "direct", usage: "1 = O_DIRECT"},
		{name: "directory", usage: "local engine: where the files go"},
		{name: "filename", usage: "local engine: one file to use"},
		{name: "url", usage: "nfs engine: nfs://HOST/export[/dir]"},
		{name: "nfs-version", usage: "nfs engine: 3 (default) or 4.1"},
		{name: "sec", usage: "nfs engine, 4.1: sys (default), krb5, krb5i or krb5p"},
		{name: "krb5-conf", usage: "nfs engine, krb5*: the realm's KDCs (default /etc/krb5.conf)"},
		{name: "keytab", usage: "nfs engine, krb5*: log on as --user with this keytab"},
		{name: "sec-principal", usage: "nfs engine, krb5*: the server's principal (default nfs/HOST of --url)"},
		{name: "nconnect", usage: "nfs engine: TCP connections (default 1, at most 16)"},
		{name: "uid", usage: "nfs engine: AUTH_SYS uid (default 0)"},
		{name: "gid", usage: "nfs engine: AUTH_SYS gid (default 0)"},
		{name: "user", usage: "smb engine: user name (DOMAIN\\user or user); nfs engine, krb5*: principal (user or user@REALM) with $BASIN_KRB5_PASSWORD or --keytab, else the credential cache's (kinit; $KRB5CCNAME)"},
		{name: "password", usage: "smb engine: password (default: $BASIN_SMB_PASSWORD, which stays out of ps)"},
		{name: "protection", usage: "smb engine: off (default), sign or encrypt (the share must require encryption)"},
		{name: "channels", usage: "smb engine: sessions, each on its own connection (default 1, at most 16)"},
		{name: "output-format", usage: "normal (default) or json (fio's layout)"},
	}
}

// fioDuration reads fio-style times: "60" (seconds), "30s", "2m", "1h".
func fioDuration(flag, s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	if n, err := strconv.ParseFloat(s, 64); err == nil && n >= 0 {
		return time.Duration(n * float64(time.Second)), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("--%s: %q is not a duration (60, 30s, 2m)", flag, s)
	}
	return d, nil
}

// jobFromFlags reads fio's job vocabulary and picks the engine.
func jobFromFlags(p *parsed, getenv func(string) string) (bench.Job, bench.Engine, error) {
	if len(p.args) > 0 {
		return bench.Job{}, nil, fmt.Errorf("unexpected argument %q (bench takes only flags)", p.args[0])
	}
	j := bench.Job{Name: p.str("name"), RW: p.str("rw"), TimeBased: p.has("time_based")}
	var err error
	for _, f := range []struct {
		name string
		dst  *int64
	}{{"bs", &j.BS}, {"size", &j.Size}} {
		if v := p.str(f.name); v != "" {
			if *f.dst, err = perf.ParseSize(v); err != nil {
				return j, nil, fmt.Errorf("--%s: %w", f.name, err)
			}
		}
	}
	for _, f := range []struct {
		name string
		dst  *int
	}{{"iodepth", &j.IODepth}, {"numjobs", &j.NumJobs}, {"nrfiles", &j.NrFiles}, {"rwmixread", &j.RWMixRead}} {
		if *f.dst, err = flagInt(p, f.name); err != nil {
			return j, nil, err
		}
	}
	if j.Runtime, err = fioDuration("runtime", p.str("runtime")); err != nil {
		return j, nil, err
	}
	if j.Ramp, err = fioDuration("ramp_time", p.str("ramp_time")); err != nil {
		return j, nil, err
	}
	switch p.str("direct") {
	case "", "0":
	case "1":
		j.Direct = true
	default:
		return j, nil, fmt.Errorf("--direct must be 0 or 1")
	}
	var engine bench.Engine
	switch e := p.str("engine"); e {
	case "", "local":
		engine = bench.Local{Directory: p.str("directory"), Filename: p.str("filename")}
	case "nfs":
		if engine, err = nfsEngine(p, getenv); err != nil {
			return j, nil, err
		}
	case "smb":
		if _, _, _, err := bench.ParseSMBURL(p.str("url")); err != nil {
			return j, nil, err
		}
		prot := p.str("protection")
		switch prot {
		case "", "off", "sign", "encrypt":
		default:
			return j, nil, fmt.Errorf("--protection must be off, sign or encrypt, got %q", prot)
		}
		channels := 1
		if v := p.str("channels"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > 16 {
				return j, nil, fmt.Errorf("--channels %q must be 1-16", v)
			}
			channels = n
		}
		if p.str("user") == "" {
			return j, nil, fmt.Errorf("the smb engine needs --user")
		}
		domain, user, ok := strings.Cut(p.str("user"), `\`)
		if !ok {
			domain, user = "", domain
		}
		password := p.str("password")
		if password == "" && getenv != nil {
			password = getenv("BASIN_SMB_PASSWORD")
		}
		engine = &bench.SMB{URL: p.str("url"), User: user, Domain: domain, Password: password, Protection: prot, Channels: channels}
	default:
		return j, nil, fmt.Errorf("--engine must be local, nfs or smb, got %q", e)
	}
	return j, engine, nil
}

// nfsEngine reads the nfs engine's flags: NFSv3, or NFSv4.1 with a security
// flavor.
func nfsEngine(p *parsed, getenv func(string) string) (bench.Engine, error) {
	version := p.str("nfs-version")
	if version != "" && version != "3" && version != "4.1" {
		return nil, fmt.Errorf("--nfs-version %s is not supported: want 3 or 4.1", version)
	}
	sec := p.str("sec")
	if _, ok := bench.SecServices[sec]; sec != "" && !ok {
		return nil, fmt.Errorf("--sec %q: want sys, krb5, krb5i or krb5p", sec)
	}
	v41 := version == "4.1"
	if !v41 && sec != "" && sec != "sys" {
		return nil, fmt.Errorf("--sec %s needs --nfs-version 4.1 (Kerberos is NFSv4.1 only here)", sec)
	}
	krb := sec != "" && sec != "sys"
	for _, name := range []string{"krb5-conf", "keytab", "sec-principal"} {
		if p.str(name) != "" && !krb {
			return nil, fmt.Errorf("--%s is for --sec krb5, krb5i or krb5p", name)
		}
	}
	if p.str("password") != "" {
		return nil, errors.New("--password is the smb engine's; the nfs engine reads $BASIN_KRB5_PASSWORD")
	}
	if _, _, err := bench.ParseNFSURL(p.str("url")); err != nil {
		return nil, err
	}
	ids := map[string]int{"nconnect": 1, "uid": 0, "gid": 0}
	for name := range ids {
		if v := p.str(name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 || (name == "nconnect" && (n < 1 || n > 16)) {
				return nil, fmt.Errorf("--%s %q is out of range", name, v)
			}
			ids[name] = n
		}
	}
	if !v41 {
		if p.str("user") != "" {
			return nil, errors.New("--user is for the smb engine, or the nfs engine with --sec krb5*")
		}
		return &bench.NFS{URL: p.str("url"), Conns: ids["nconnect"], UID: uint32(ids["uid"]), GID: uint32(ids["gid"])}, nil
	}
	e := &bench.NFS4{URL: p.str("url"), Conns: ids["nconnect"], UID: uint32(ids["uid"]), GID: uint32(ids["gid"]), Sec: sec}
	if !krb {
		if p.str("user") != "" {
			return nil, errors.New("--user is for --sec krb5, krb5i or krb5p (AUTH_SYS takes --uid and --gid)")
		}
		return e, nil
	}
	user := p.str("user")
	if strings.Count(user, "@") > 1 || strings.HasPrefix(user, "@") || strings.HasSuffix(user, "@") || strings.ContainsAny(user, `\/ `) {
		return nil, fmt.Errorf("--user %q: want a principal, user or user@REALM", user)
	}
	if spn := p.str("sec-principal"); spn != "" {
		svc, host, ok := strings.Cut(spn, "/")
		if !ok || svc == "" || host == "" || strings.ContainsAny(host, "/ ") {
			return nil, fmt.Errorf("--sec-principal %q: want service/host, such as nfs/server.example.com", spn)
		}
	}
	password := ""
	if getenv != nil {
		password = getenv("BASIN_KRB5_PASSWORD")
	}
	if password != "" && p.str("keytab") != "" {
		return nil, errors.New("--keytab and $BASIN_KRB5_PASSWORD: give one")
	}
	if (password != "" || p.str("keytab") != "") && user == "" {
		return nil, errors.New("$BASIN_KRB5_PASSWORD and --keytab need --user")
	}
	e.Krb5 = bench.Krb5{Conf: p.str("krb5-conf"), User: user, Password: password, Keytab: p.str("keytab"),
		Principal: p.str("sec-principal"), Getenv: getenv}
	return e, nil
}

func runBench(ctx context.Context, c *session, p *parsed) error {
	j, engine, err := jobFromFlags(p, c.env.Getenv)
	if err != nil {
		return err
	}
	format := p.str("output-format")
	if format != "" && format != "normal" && format != "json" {
		return fmt.Errorf("--output-format must be normal or json")
	}
	if cl, ok := engine.(io.Closer); ok {
		defer cl.Close()
	}
	res, err := bench.Run(ctx, engine, j, c.env.Stderr)
	if err != nil {
		return err
	}
	switch e := engine.(type) {
	case *bench.NFS:
		io.WriteString(c.env.Stderr, connectionNote("nfs", e.MaxInFlight()))
	case *bench.NFS4:
		if want := j.IODepth * j.NumJobs; e.Slots() > 0 && e.Slots() < want {
			fmt.Fprintf(c.env.Stderr, "nfs: the server granted %d session slots: at most %d I/Os were in flight, not %d\n", e.Slots(), e.Slots(), want)
		}
		if n := e.Resent(); n > 0 {
			fmt.Fprintf(c.env.Stderr, "nfs: %d calls went unanswered for 5 s and were sent again (the RPCSEC_GSS server dropped them)\n", n)
		}
	case *bench.SMB:
		io.WriteString(c.env.Stderr, connectionNote("smb", e.MaxInFlight()))
		if j.Direct {
			fmt.Fprintln(c.env.Stderr, "smb: --direct has no meaning over SMB here; writes are whatever the share does")
		}
		if prot := p.str("protection"); prot == "encrypt" && !e.Encrypted() {
			return errors.New("--protection encrypt: the server did not encrypt this session; make the share require encryption")
		}
	}
	if strings.EqualFold(format, "json") {
		return res.WriteJSON(c.env.Stdout)
	}
	res.WriteText(c.env.Stdout)
	return nil
}

// connectionNote reports the most calls (NFS) or requests (SMB) that were on
// the wire at once on any one connection: the queue depth the server saw, as
// --iodepth, --numjobs and --nconnect (--channels) made it. It is measured, not
// a limit; test/e2e reads the number after "at most".
func connectionNote(proto string, n int64) string {
	what := map[string]string{"nfs": "call", "smb": "request"}[proto]
	if n != 1 {
		what += "s"
	}
	return fmt.Sprintf("%s: at most %d %s in flight on any one connection during the run (measured: the queue depth the server saw)\n", proto, n, what)
}

func runSweep(ctx context.Context, c *session, p *parsed) error {
	j, engine, err := jobFromFlags(p, c.env.Getenv)
	if err != nil {
		return err
	}
	if j.Runtime == 0 {
		j.Runtime, j.TimeBased = 10*time.Second, true
	}
	if cl, ok := engine.(io.Closer); ok {
		defer cl.Close()
	}
	pts, err := bench.Sweep(ctx, engine, j, c.env.Stderr)
	if err != nil {
		return err
	}
	if p.str("output-format") == "json" {
		b, _ := json.MarshalIndent(pts, "", "  ")
		fmt.Fprintln(c.env.Stdout, string(b))
	} else {
		bench.WriteSweepTable(c.env.Stdout, pts)
	}
	path := p.str("svg")
	if path == "" {
		path = "sweep.svg"
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("--svg: %w", err)
	}
	if err := bench.WriteSweepSVG(f, pts, "basin bench sweep ("+engine.Name()+")"); err != nil {
		f.Close()
		return err
	}
	fmt.Fprintf(c.env.Stderr, "chart written to %s\n", path)
	return f.Close()
}

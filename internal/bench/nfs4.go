package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"

	krb5client "github.com/jcmturner/gokrb5/v8/client"
	krb5config "github.com/jcmturner/gokrb5/v8/config"
	"github.com/jcmturner/gokrb5/v8/credentials"
	"github.com/jcmturner/gokrb5/v8/keytab"

	"github.com/basin-nas/basin/internal/nfs4"
	"github.com/basin-nas/basin/internal/oncrpc/rpcsecgss"
)

// NFS4 runs jobs over NFSv4.1 from user space: one session shared by every
// job, with as many slots as the jobs have I/Os outstanding (as the server
// grants them), on Conns TCP connections, with AUTH_SYS or Kerberos (Sec).
// Each outstanding I/O is a goroutine waiting for its call.
type NFS4 struct {
	// URL is nfs://HOST/export[/dir].
	URL      string
	Conns    int
	UID, GID uint32
	// Port overrides 2049 (tests).
	Port int
	// Sec is sys (or ""), krb5, krb5i or krb5p.
	Sec  string
	Krb5 Krb5

	once   sync.Once
	client *nfs4.Client
	err    error
}

// Krb5 is where the Kerberos credentials of a krb5* run come from: a password
// (for User), else a keytab (for User), else a
// credential cache (a kinit's: CCache, $KRB5CCNAME, /tmp/krb5cc_UID).
type Krb5 struct {
	// Conf is the krb5.conf naming the realm's KDCs (default /etc/krb5.conf).
	Conf string
	// User is the principal, user or user@REALM (default realm: Conf's).
	User     string
	Password string
	Keytab   string
	CCache   string
	// Principal is the server's, default nfs/HOST of the URL.
	Principal string
	// Getenv reads KRB5CCNAME (nil: none).
	Getenv func(string) string
}

// SecServices are the flavors of --sec and their RPCSEC_GSS services (sys: 0).
var SecServices = map[string]rpcsecgss.Service{"sys": 0, "krb5": rpcsecgss.None, "krb5i": rpcsecgss.Integrity, "krb5p": rpcsecgss.Privacy}

// Name implements Engine.
func (*NFS4) Name() string { return "nfs" }

// login gets a TGT as Krb5 says.
func (k *Krb5) login() (*krb5client.Client, error) {
	path := k.Conf
	if path == "" {
		path = "/etc/krb5.conf"
	}
	cfg, err := krb5config.Load(path)
	var unsupported krb5config.UnsupportedDirective
	if err != nil && !errors.As(err, &unsupported) {
		return nil, fmt.Errorf("--krb5-conf %s: %w", path, err)
	}
	user, realm, _ := strings.Cut(k.User, "@")
	if realm == "" {
		realm = cfg.LibDefaults.DefaultRealm
	}
	if (k.Password != "" || k.Keytab != "") && (user == "" || realm == "") {
		return nil, fmt.Errorf("--user %q: want user@REALM (or a default_realm in %s)", k.User, path)
	}
	// FAST (RFC 6113) is not in gokrb5; AD asks for it only if told to.
	noFAST := krb5client.DisablePAFXFAST(true)
	var cl *krb5client.Client
	switch {
	case k.Password != "":
		cl = krb5client.NewWithPassword(user, realm, k.Password, cfg, noFAST)
	case k.Keytab != "":
		kt, err := keytab.Load(k.Keytab)
		if err != nil {
			return nil, fmt.Errorf("--keytab %s: %w", k.Keytab, err)
		}
		cl = krb5client.NewWithKeytab(user, realm, kt, cfg, noFAST)
	default:
		cc := k.ccache()
		c, err := credentials.LoadCCache(cc)
		if err != nil {
			return nil, fmt.Errorf("credential cache %s (run kinit, or set $BASIN_KRB5_PASSWORD or --keytab): %w", cc, err)
		}
		if cl, err = krb5client.NewFromCCache(c, cfg, noFAST); err != nil {
			return nil, fmt.Errorf("credential cache %s: %w", cc, err)
		}
		return cl, nil
	}
	if err := cl.Login(); err != nil {
		return nil, fmt.Errorf("kerberos logon as %s@%s: %w", user, realm, err)
	}
	return cl, nil
}

// ccache is the credential cache's file: CCache, $KRB5CCNAME (FILE: only),
// or /tmp/krb5cc_UID as kinit makes it.
func (k *Krb5) ccache() string {
	if k.CCache != "" {
		return strings.TrimPrefix(k.CCache, "FILE:")
	}
	if k.Getenv != nil {
		if v := k.Getenv("KRB5CCNAME"); v != "" {
			return strings.TrimPrefix(v, "FILE:")
		}
	}
	return fmt.Sprintf("/tmp/krb5cc_%d", os.Getuid())
}

func (e *NFS4) mount(ctx context.Context, slots int) (*nfs4.Client, error) {
	e.once.Do(func() {
		host, dir, err := ParseNFSURL(e.URL)
		if err != nil {
			e.err = err
			return
		}
		o := nfs4.Options{Conns: e.Conns, Slots: slots, UID: e.UID, GID: e.GID, Port: e.Port}
		sec := e.Sec
		if sec == "" {
			sec = "sys"
		}
		svc, ok := SecServices[sec]
		if !ok {
			e.err = fmt.Errorf("--sec %q: want sys, krb5, krb5i or krb5p", e.Sec)
			return
		}
		if svc != 0 {
			cl, err := e.Krb5.login()
			if err != nil {
				e.err = err
				return
			}
			spn := e.Krb5.Principal
			if spn == "" {
				spn = "nfs/" + host
			}
			o.Sec = nfs4.Krb5(cl, spn, svc)
		}
		e.client, e.err = nfs4.Dial(ctx, host, dir, o)
	})
	return e.client, e.err
}

// Slots is how many calls the server let the session have in flight (0
// before the first Open).
func (e *NFS4) Slots() int {
	if e.client == nil {
		return 0
	}
	return e.client.Slots()
}

// Resent is how many calls went again for want of a reply.
func (e *NFS4) Resent() int64 {
	if e.client == nil {
		return 0
	}
	return e.client.Resent()
}

// Close destroys the session and closes the connections.
func (e *NFS4) Close() error {
	if e.client == nil {
		return nil
	}
	return e.client.Close()
}

// Open implements Engine as NFS.Open does.
func (e *NFS4) Open(ctx context.Context, j *Job, n int) ([]File, error) {
	c, err := e.mount(ctx, max(16, j.IODepth*j.NumJobs))
	if err != nil {
		return nil, err
	}
	stable := nfs4.Unstable
	if j.Direct {
		stable = nfs4.FileSync
	}
	var files []File
	for i := range j.NrFiles {
		name := fmt.Sprintf("%s.%d.%d", j.Name, n, i)
		f, err := c.Create(ctx, c.Root, name, 0o644)
		if err != nil {
			closeAll(files)
			return nil, err
		}
		nf := &nfs4File{f: f, stable: stable}
		files = append(files, nf)
		if j.RW != "write" && j.RW != "randwrite" && f.Size < j.Size {
			err := extend(ctx, f.Size, j.Size, func(p []byte, off int64) error { return nf.write(ctx, p, off, nfs4.Unstable) })
			if err == nil {
				err = f.Commit(ctx)
			}
			if err != nil {
				closeAll(files)
				return nil, fmt.Errorf("lay out %s: %w", name, err)
			}
		}
	}
	return files, nil
}

type nfs4File struct {
	f        *nfs4.File
	stable   nfs4.Stable
	unstable atomic.Bool
}

func (f *nfs4File) write(ctx context.Context, p []byte, off int64, how nfs4.Stable) error {
	return writeAll(p, off, func(p []byte, off int64) (int, error) { return f.f.Write(ctx, p, off, how) })
}

func (f *nfs4File) ReadAt(p []byte, off int64) error {
	return readAll(p, off, func(p []byte, off int64) (int, bool, error) { return f.f.Read(context.Background(), p, off) })
}

func (f *nfs4File) WriteAt(p []byte, off int64) error {
	if f.stable == nfs4.Unstable {
		f.unstable.Store(true)
	}
	return f.write(context.Background(), p, off, f.stable)
}

// Close commits unstable writes, as close() on an NFS client does, and
// closes the open.
func (f *nfs4File) Close() error {
	ctx := context.Background()
	var err error
	if f.unstable.Load() {
		err = f.f.Commit(ctx)
	}
	return errors.Join(err, f.f.Close(ctx))
}
